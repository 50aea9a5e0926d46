"""ResourceSlices published by the plugin are accepted by the real API server and the real
scheduler allocates from them: by attributes, on one NUMA node, MIG, fractions, shares, and never
a GPU together with a part of it."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from dra_driver.discovery.simulated import load_profile, packaged_profiles, resolve_profile
from dra_driver.publishing.handover import Instance
from dra_driver.publishing.publish_config import PublishConfig
from dra_driver.publishing.publisher import SlicePublisher, same_spec
from dra_driver.publishing.slices import build_slices
from nativedra.base.kube.names import DRIVER_NAME, FRACTION_CLASS, GPU_CLASS, MIG_CLASS, SHARE_CLASS
from nativedra.base.kube.resources import RESOURCE_SLICES
from nativedra.cluster import commands, wait_for, wait_pod_scheduled, wait_pod_unschedulable
from nativedra.objects import (
    apply_file,
    claim_template,
    device_classes,
    gpu_pod,
    our_slices,
    published_devices,
    request,
)
from testkit.dra import allocated_results


@pytest.fixture(autouse=True)
def _device_classes_applied(api: client.ApiClient) -> None:
    apply_file(api, device_classes())


def _publish(api: client.ApiClient, node: str, profile: str, config: PublishConfig | None = None) -> SlicePublisher:
    publisher = SlicePublisher(api, node)
    publisher.reconcile(build_slices(load_profile(resolve_profile(profile)), config or PublishConfig(), node))
    return publisher


def _wait_published(api: client.ApiClient, node: str, minimum: int = 1) -> dict[str, dict[str, Any]]:
    def enough() -> dict[str, dict[str, Any]] | None:
        devices = published_devices(api, node)
        return devices if len(devices) >= minimum else None

    return wait_for(enough, 60, f"at least {minimum} devices published for {node}")


@pytest.mark.parametrize("profile", sorted(packaged_profiles()))
@pytest.mark.parametrize("sharing", [False, True], ids=["default", "shares"])
def test_profile_slices_are_accepted_and_round_trip(
    api: client.ApiClient, fake_nodes: Callable[..., str], profile: str, sharing: bool
) -> None:
    node = fake_nodes(profile)
    config = PublishConfig(share_gpus="all" if sharing else ())
    specs = build_slices(load_profile(resolve_profile(profile)), config, node)
    publisher = SlicePublisher(api, node)
    first = publisher.reconcile(specs)
    assert first.created == len(specs) and first.generation == 1
    stored = sorted(our_slices(api, node), key=lambda s: s["metadata"]["name"])
    assert len(stored) == len(specs)
    for spec, actual in zip(specs, stored, strict=True):
        desired = {**spec, "pool": {**spec["pool"], "generation": 1}}
        assert same_spec(desired, actual["spec"]), (
            f"API server changed or dropped fields of {actual['metadata']['name']}"
        )
        assert actual["metadata"]["ownerReferences"][0]["kind"] == "Node"
    assert publisher.reconcile(specs).writes == 0, "re-publishing an unchanged inventory writes nothing"


def test_publisher_restores_slices_changed_by_someone_else(
    api: client.ApiClient, fake_nodes: Callable[..., str]
) -> None:
    node = fake_nodes("heal")
    specs = build_slices(load_profile(resolve_profile("l4-4x")), PublishConfig(), node)
    publisher = SlicePublisher(api, node)
    publisher.reconcile(specs)
    victim, edited = sorted(s["metadata"]["name"] for s in our_slices(api, node))[:2]
    RESOURCE_SLICES.delete(api, victim)
    tampered = RESOURCE_SLICES.get(api, edited)
    tampered["spec"]["devices" if "devices" in tampered["spec"] else "sharedCounters"].pop()
    RESOURCE_SLICES.replace(api, edited, tampered)

    result = publisher.reconcile(specs)
    assert (result.created, result.generation) == (1, 2)
    stored = sorted(our_slices(api, node), key=lambda s: s["metadata"]["name"])
    assert len(stored) == len(specs)
    for desired, actual in zip(specs, stored, strict=True):
        assert same_spec({**desired, "pool": {**desired["pool"], "generation": 2}}, actual["spec"])


def test_two_instances_of_a_rolling_update_hand_over_instead_of_undoing_each_other(
    api: client.ApiClient, fake_nodes: Callable[..., str]
) -> None:
    """The old pod publishes fractions, the new one (started later) none: the new one's slices stay
    while it serves, the old one writes nothing more, and once the new one is gone the old one
    takes the slices back."""
    node = fake_nodes("handover")
    inventory = load_profile(resolve_profile("l4-4x"))
    with_fractions = build_slices(inventory, PublishConfig(), node)
    without = build_slices(inventory, PublishConfig(fractions=()), node)
    serving = {"old-pod", "new-pod"}
    old = SlicePublisher(api, node, Instance("old-pod", 100.0), serving.__contains__)
    new = SlicePublisher(api, node, Instance("new-pod", 200.0), serving.__contains__)
    assert old.reconcile(with_fractions).writes
    assert new.reconcile(without).writes, "the newer instance overwrites the older one's slices"
    stored = our_slices(api, node)
    for _ in range(3):  # each watch event of the other's write would have started another round
        result = old.reconcile(with_fractions)
        assert (result.writes, result.yielded_to) == (0, Instance("new-pod", 200.0))
        assert new.reconcile(without).writes == 0
    assert our_slices(api, node) == stored
    serving.discard("new-pod")
    assert old.reconcile(with_fractions).writes, "the newer instance is gone: the slices are taken back"
    assert old.reconcile(with_fractions).writes == 0, "they now hold the old instance's inventory"


def test_real_scheduler_allocates_by_product_name_numa_mig_and_fraction(
    api: client.ApiClient, namespace: str, fake_nodes: Callable[..., str], node_plugin: Callable[..., Any]
) -> None:
    node = fake_nodes("h100")
    node_plugin(node, "--backend", "simulated", "--profile", "h100-8x")
    devices = _wait_published(api, node, minimum=140)

    claim_template(
        api,
        namespace,
        "one-h100",
        [request("gpus", GPU_CLASS, f"device.attributes['{DRIVER_NAME}'].productName == 'NVIDIA H100 80GB HBM3'")],
    )
    claim_template(
        api,
        namespace,
        "two-same-numa",
        [request("gpus", GPU_CLASS, count=2)],
        constraints=[{"requests": ["gpus"], "matchAttribute": f"{DRIVER_NAME}/numaNode"}],
    )
    claim_template(
        api,
        namespace,
        "mig-1g",
        [request("gpus", MIG_CLASS, f"device.attributes['{DRIVER_NAME}'].profile == '1g.10gb'")],
    )
    claim_template(
        api,
        namespace,
        "quarter",
        [request("gpus", FRACTION_CLASS, f"device.attributes['{DRIVER_NAME}'].fraction == '1/4'")],
    )
    for pod, template in [("a", "one-h100"), ("b", "two-same-numa"), ("c", "mig-1g"), ("d", "quarter")]:
        gpu_pod(api, namespace, pod, template, node=node)

    whole = allocated_results(api, namespace, "a")
    assert len(whole) == 1 and devices[whole[0]["device"]]["attributes"]["type"] == {"string": "gpu"}
    pair = allocated_results(api, namespace, "b")
    assert len(pair) == 2
    numa = {devices[r["device"]]["attributes"]["numaNode"]["int"] for r in pair}
    assert len(numa) == 1, f"both GPUs on one NUMA node, got {pair}"
    mig = allocated_results(api, namespace, "c")[0]["device"]
    assert devices[mig]["attributes"]["profile"] == {"string": "1g.10gb"}
    quarter = allocated_results(api, namespace, "d")[0]["device"]
    assert devices[quarter]["attributes"]["fraction"] == {"string": "1/4"}
    for pod in "abcd":
        assert wait_pod_scheduled(api, namespace, pod) == node


def test_consumable_share_allocates_a_10gi_share(
    api: client.ApiClient, namespace: str, fake_nodes: Callable[..., str], node_plugin: Callable[..., Any]
) -> None:
    node = fake_nodes("share")
    node_plugin(node, "--backend", "simulated", "--profile", "l4-4x", "--sharing", "consumable")
    _wait_published(api, node, minimum=4)
    claim_template(api, namespace, "ten-gi", [request("gpus", SHARE_CLASS, capacity={"memory": "10Gi"})])
    gpu_pod(api, namespace, "s1", "ten-gi", node=node)
    gpu_pod(api, namespace, "s2", "ten-gi", node=node)
    first = allocated_results(api, namespace, "s1")[0]
    second = allocated_results(api, namespace, "s2")[0]
    assert first["device"].endswith("-share") and first.get("shareID")
    assert first["consumedCapacity"]["memory"] == "10Gi"
    assert (first["device"], first["shareID"]) != (second["device"], second["shareID"])


def test_fractions_and_whole_gpu_exclude_each_other(
    api: client.ApiClient, namespace: str, fake_nodes: Callable[..., str]
) -> None:
    node = fake_nodes("frac")
    _publish(api, node, "h100-8x")
    index0 = f"device.attributes['{DRIVER_NAME}'].index == 0"
    claim_template(
        api,
        namespace,
        "all-eighths-of-0",
        [
            request(
                "gpus",
                FRACTION_CLASS,
                f"{index0} && device.attributes['{DRIVER_NAME}'].fraction == '1/8'",
                count=8,
            )
        ],
    )
    claim_template(api, namespace, "whole-0", [request("gpus", GPU_CLASS, index0)])
    claim_template(
        api, namespace, "whole-1", [request("gpus", GPU_CLASS, f"device.attributes['{DRIVER_NAME}'].index == 1")]
    )

    gpu_pod(api, namespace, "eighths", "all-eighths-of-0", node=node)
    assert len(allocated_results(api, namespace, "eighths")) == 8
    gpu_pod(api, namespace, "whole-0", "whole-0", node=node)
    gpu_pod(api, namespace, "whole-1", "whole-1", node=node)
    assert wait_pod_scheduled(api, namespace, "whole-1") == node
    assert "cannot allocate all claims" in wait_pod_unschedulable(api, namespace, "whole-0")

    client.CoreV1Api(api).delete_namespaced_pod("eighths", namespace, grace_period_seconds=0)
    assert wait_pod_scheduled(api, namespace, "whole-0", timeout_s=90) == node, "freed counters make GPU 0 whole again"


def _big_profile(path: Path, count: int) -> Path:
    document = yaml.safe_load(resolve_profile("h100-8x").read_text())
    template = dict(document["gpus"][0])
    document["gpus"] = [
        {
            **template,
            "index": i,
            "minor": i,
            "uuid": f"GPU-big-{i:04d}",
            "pciBusID": f"0000:{i + 1:02x}:00.0",
            "numaNode": i // 16,
        }
        for i in range(count)
    ]
    path.write_text(yaml.safe_dump(document))
    return path


def test_64_gpu_node_spans_several_slices_and_stays_allocatable(
    api: client.ApiClient,
    namespace: str,
    fake_nodes: Callable[..., str],
    node_plugin: Callable[..., Any],
    tmp_path: Path,
) -> None:
    node = fake_nodes("big")
    node_plugin(node, "--backend", "simulated", "--profile", str(_big_profile(tmp_path / "big.yaml", 64)))
    _wait_published(api, node, minimum=64 * 15)
    slices = our_slices(api, node)
    assert len(slices) > 10
    assert {s["spec"]["pool"]["resourceSliceCount"] for s in slices} == {len(slices)}
    claim_template(
        api, namespace, "last-gpu", [request("gpus", GPU_CLASS, f"device.attributes['{DRIVER_NAME}'].index == 63")]
    )
    gpu_pod(api, namespace, "last", "last-gpu", node=node)
    assert allocated_results(api, namespace, "last")[0]["device"] == "gpu-63"


def test_plugin_republishes_when_the_profile_changes(
    api: client.ApiClient, fake_nodes: Callable[..., str], node_plugin: Callable[..., Any], tmp_path: Path
) -> None:
    node = fake_nodes("change")
    profile = tmp_path / "node.yaml"
    profile.write_text(resolve_profile("l4-4x").read_text())
    node_plugin(node, "--backend", "simulated", "--profile", str(profile), "--fractions", "none")
    wait_for(lambda: set(published_devices(api, node)) == {"gpu-0", "gpu-1", "gpu-2", "gpu-3"}, 60, "4 whole L4s")
    document = yaml.safe_load(profile.read_text())
    document["gpus"] = document["gpus"][:2]
    profile.write_text(yaml.safe_dump(document))
    wait_for(lambda: set(published_devices(api, node)) == {"gpu-0", "gpu-1"}, 60, "2 L4s after the change")


def test_plugin_with_a_bad_profile_exits_naming_the_problem(tmp_path: Path, control_plane: Any) -> None:
    document = yaml.safe_load(resolve_profile("l4-4x").read_text())
    document["gpus"][1]["memoryBytes"] = "lots"
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(document))
    result = subprocess.run(
        commands.plugin("n", control_plane.kubeconfig, "--backend", "simulated", "--profile", str(bad)),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert str(bad) in result.stderr and "gpus[1] (index 1)" in result.stderr and "memoryBytes" in result.stderr
