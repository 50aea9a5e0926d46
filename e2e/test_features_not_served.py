"""A cluster whose API server does not serve partitionable devices or consumable capacity (the
1.34/1.35 defaults, run as they are under NATIVEDRA_K8S_VERSION=v1.34.x/v1.35.x; on 1.36+ the
gates turned off): the plugin sees the fields dropped, publishes whole GPUs only, says so in its
log and a Node event, and the real scheduler never hands out a GPU twice."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client, config

from nativedra.base.kube.names import FRACTION_CLASS, GPU_CLASS, SHARE_CLASS
from nativedra.cluster import ControlPlane, create_fake_node, resolve, wait_for
from nativedra.cluster.binaries import minor_of, pinned_version
from nativedra.cluster.commands import NodeDirs
from nativedra.cluster.components import DEFAULTS, Features
from nativedra.cluster.waits import WaitTimeoutError, unschedulable_message, wait_pod_scheduled
from nativedra.kubelet_client import make_dev_tree
from nativedra.objects import apply_file, claim_template, device_classes, gpu_pod, published_devices, request
from testkit.dra import allocated_results
from testkit.extender_harness import fresh_namespace
from testkit.node_plugin import NodePlugin

GATES_ON_BY_DEFAULT = 36  # DRAPartitionableDevices and DRAConsumableCapacity went beta in 1.36
GATES_OFF = Features(
    {"DRAPartitionableDevices": False, "DRAConsumableCapacity": False},
    why="what 1.34/1.35 API servers serve by default: no partitionable devices, no consumable capacity",
)


def old_defaults(version: str) -> Features:
    """1.34/1.35 as users run them (their defaults); later releases with the two gates turned off."""
    return DEFAULTS if minor_of(version) < GATES_ON_BY_DEFAULT else GATES_OFF


GATES_LOCKED_SINCE = 38  # GA and locked on: `--feature-gates=...=false` stops the API server
pytestmark = pytest.mark.skipif(
    minor_of(pinned_version()) >= GATES_LOCKED_SINCE,
    reason="DRAPartitionableDevices and DRAConsumableCapacity are locked on from 1.38: no such API server exists",
)


@pytest.fixture(scope="module")
def old_plane() -> Iterator[ControlPlane]:
    root = Path(tempfile.mkdtemp(prefix="nd-old-", dir="/tmp"))
    binaries = resolve()
    plane = ControlPlane(state_dir=root / "cluster", binaries=binaries, features=old_defaults(binaries.version))
    plane.start()
    try:
        yield plane
    finally:
        plane.stop()
        shutil.rmtree(root, ignore_errors=True)


def test_only_whole_gpus_are_published_and_none_is_handed_out_twice(old_plane: ControlPlane) -> None:
    api = config.new_client_from_config(config_file=str(old_plane.kubeconfig))
    apply_file(api, device_classes())
    create_fake_node(api, "old-node")
    root = Path(tempfile.mkdtemp(prefix="nd-oldp-", dir="/tmp"))
    make_dev_tree(NodeDirs(root).dev, range(8))
    plugin = NodePlugin(old_plane, root, "old-node", ("--backend", "simulated", "--profile", "h100-8x"))
    plugin.start()
    try:
        # h100-8x: 6 GPUs in whole-GPU mode, 2 in MIG mode (which can run no whole-GPU work).
        devices = wait_for(
            lambda: published_devices(api, "old-node") if len(published_devices(api, "old-node")) == 6 else None,
            60,
            "6 whole GPUs published",
            plugin.log.read_text,
        )
        assert {d["attributes"]["type"]["string"] for d in devices.values()} == {"gpu"}
        assert not any("consumesCounters" in d for d in devices.values())
        log = plugin.log.read_text()
        assert log.count("does not store") == 1 and "DRAPartitionableDevices" in log, log[-2000:]
        events = client.CoreV1Api(api).list_namespaced_event("default", field_selector="involvedObject.name=old-node")
        assert [e.reason for e in events.items] == ["DeviceFeaturesNotServed"]
        with fresh_namespace(api, "old") as namespace:
            claim_template(api, namespace, "one", [request("gpus", GPU_CLASS)])
            claim_template(api, namespace, "half", [request("gpus", FRACTION_CLASS)])
            names = [f"p{index}" for index in range(7)]
            for name in names:
                gpu_pod(api, namespace, name, "one")

            def six_bound_one_waiting() -> list[str] | None:
                pods = {p.metadata.name: p for p in client.CoreV1Api(api).list_namespaced_pod(namespace).items}
                placed = [name for name in names if pods[name].spec.node_name]
                waiting = [name for name in names if name not in placed]
                judged = len(waiting) == 1 and unschedulable_message(api, namespace, waiting[0])
                return placed if len(placed) == 6 and judged else None

            placed = wait_for(six_bound_one_waiting, 120, "6 of 7 one-GPU pods bound, the 7th judged")
            taken = [allocated_results(api, namespace, name)[0]["device"] for name in placed]
            assert len(set(taken)) == 6, f"a GPU was handed out twice: {taken}"
            gpu_pod(api, namespace, "fraction", "half")
            assert wait_for(lambda: unschedulable_message(api, namespace, "fraction"), 60, "no fraction is published")
    finally:
        plugin.stop()
        shutil.rmtree(root, ignore_errors=True)


def test_share_claims_waiting_before_the_plugin_starts_do_not_share_a_gpu_with_whole_gpu_claims(
    old_plane: ControlPlane,
) -> None:
    """Claims that wait for shares are allocated the moment a slice names them, so a slice shown for
    even a few milliseconds without its safeguards is enough to book one GPU twice."""
    api = config.new_client_from_config(config_file=str(old_plane.kubeconfig))
    apply_file(api, device_classes())
    create_fake_node(api, "share-node")
    root = Path(tempfile.mkdtemp(prefix="nd-olds-", dir="/tmp"))
    make_dev_tree(NodeDirs(root).dev, range(4))
    args = ("--backend", "simulated", "--profile", "l4-4x", "--sharing", "consumable")
    plugin = NodePlugin(old_plane, root, "share-node", args)
    try:
        with fresh_namespace(api, "olds") as namespace:
            claim_template(api, namespace, "share", [request("gpus", SHARE_CLASS, capacity={"memory": "10Gi"})])
            claim_template(api, namespace, "whole", [request("gpus", GPU_CLASS)])
            shares = [f"s{index}" for index in range(4)]
            for name in shares:
                gpu_pod(api, namespace, name, "share", node="share-node")
            wait_for(lambda: all(unschedulable_message(api, namespace, n) for n in shares), 60, "share pods waiting")
            plugin.start()
            wait_for(lambda: len(published_devices(api, "share-node")) == 4, 60, "4 whole GPUs", plugin.log.read_text)
            wholes = [f"w{index}" for index in range(4)]
            for name in wholes:
                gpu_pod(api, namespace, name, "whole", node="share-node")
            for name in wholes:
                wait_pod_scheduled(api, namespace, name)
            whole = {allocated_results(api, namespace, name)[0]["device"] for name in wholes}
            shared = set()
            for name in shares:
                with contextlib.suppress(WaitTimeoutError):
                    shared.add(allocated_results(api, namespace, name, timeout_s=1)[0]["device"].removesuffix("-share"))
            assert not whole & shared, f"GPUs allocated whole and as a share at once: {sorted(whole & shared)}"
    finally:
        plugin.stop()
        shutil.rmtree(root, ignore_errors=True)
