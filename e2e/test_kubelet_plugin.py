"""The plugin as the kubelet sees it: registration, prepare/unprepare (v1 and v1beta1) of claims
the real scheduler allocated, CDI specs on disk, idempotency, crash safety, bad input, health."""

from __future__ import annotations

import json
import stat
import subprocess
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from cdi.spec import EARLIEST_VERSION
from dra_driver.discovery.simulated import load_profile, resolve_profile
from dra_driver.publishing.publish_config import PublishConfig
from dra_driver.publishing.publisher import SlicePublisher
from dra_driver.publishing.slices import UNHEALTHY_TAINT_KEY, build_slices
from nativedra.base.kube.names import CDI_KIND, DRIVER_NAME, FRACTION_CLASS, GPU_CLASS, SHARE_CLASS
from nativedra.base.kube.resources import RESOURCE_CLAIMS
from nativedra.cluster import commands, wait_for, wait_pod_scheduled, wait_pod_unschedulable
from nativedra.cluster.controlplane import free_port
from nativedra.kubelet_client import HEALTHY, UNHEALTHY, health_stream, prepare, register, unprepare
from nativedra.objects import (
    claim_key,
    claim_template,
    create_claim,
    gpu_pod,
    published_devices,
    request,
)
from testkit.dra import CDI_PREFIX, allocated_claim, bad_config_template, spec_files, whole_gpu_claim
from testkit.node_plugin import NodePlugin

pytestmark = pytest.mark.usefixtures("device_classes_applied")


def _checkpoint_claims(plugin: NodePlugin) -> dict[str, Any]:
    path = plugin.data_dir / "checkpoint.json"
    return dict(json.loads(path.read_text())["payload"]["claims"]) if path.exists() else {}


def _json_stream(path: Path) -> list[dict[str, Any]]:
    """A device metadata file read as its consumers do: one JSON object after another."""
    text, decoder, found, at = path.read_text(), json.JSONDecoder(), [], 0
    while at < len(text):
        value, at = decoder.raw_decode(text, at)
        found.append(value)
        at = len(text) - len(text[at:].lstrip())
    return found


def test_registration_handshake_as_the_kubelet_does_it(h100: NodePlugin) -> None:
    info = register(h100.registration_socket)
    assert info.type == "DRAPlugin"
    assert info.name == DRIVER_NAME
    assert info.endpoint == str(h100.dra_socket)
    assert list(info.supported_versions)[:2] == ["v1.DRAPlugin", "v1beta1.DRAPlugin"]
    # 1.37+ kubelets open the health stream only with a health service named at registration.
    assert {"v1.DRAResourceHealth", "v1alpha1.DRAResourceHealth"} <= set(info.supported_versions)
    for socket in (h100.registration_socket, h100.dra_socket):
        mode = socket.stat().st_mode
        assert stat.S_ISSOCK(mode) and stat.S_IMODE(mode) == 0o600, f"{socket} must be private to root"

    def probe() -> subprocess.CompletedProcess[str]:
        dirs = ["--registry-dir", str(h100.registry_dir), "--plugin-dir", str(h100.plugin_dir)]
        return subprocess.run(commands.nativedra("plugin-probe", *dirs), capture_output=True, text=True, check=False)

    assert probe().returncode == 0, "the DaemonSet's probe passes against a serving plugin"
    h100.stop()
    failed = probe()
    assert failed.returncode == 1 and "UNAVAILABLE" in failed.stderr


@pytest.mark.parametrize("version", ["v1", "v1beta1"])
def test_prepare_and_unprepare_a_claim_the_real_scheduler_allocated(
    api: client.ApiClient, namespace: str, h100: NodePlugin, version: str
) -> None:
    claim = whole_gpu_claim(api, namespace, "trainer", h100.node, index=3)
    key = claim_key(claim)
    response = prepare(h100.dra_socket, version, [key])
    result = response.claims[key[1]]
    assert result.error == ""
    [device] = result.devices
    assert (list(device.request_names), device.pool_name, device.device_name) == (["gpus"], h100.node, "gpu-3")
    assert list(device.cdi_device_ids) == [
        f"{CDI_KIND}={key[1]}-gpu-3",
        f"{CDI_KIND}={key[1]}_metadata_gpus",  # the request's device metadata (KEP-5304)
    ]

    [spec_file] = spec_files(h100)
    assert spec_file.name == f"{CDI_PREFIX}{key[1]}.yaml"
    assert stat.S_IMODE(spec_file.stat().st_mode) == 0o644
    spec = yaml.safe_load(spec_file.read_text())
    # Device names start with the claim UID; CDI needs 0.5.0 only when that starts with a digit.
    assert spec["cdiVersion"] == ("0.5.0" if key[1][0].isdigit() else EARLIEST_VERSION)
    assert spec["kind"] == CDI_KIND
    cdi_device, metadata_device = spec["devices"]
    assert cdi_device["name"] == f"{key[1]}-gpu-3"
    assert metadata_device["name"] == f"{key[1]}_metadata_gpus"
    # The pod names the claim `gpus` (from a template) and the claim's request is `gpus` too.
    [mount] = metadata_device["containerEdits"]["mounts"]
    assert mount["containerPath"] == (
        f"/var/run/kubernetes.io/dra-device-attributes/resourceclaimtemplates/gpus/gpus/{DRIVER_NAME}-metadata.json"
    )
    assert mount["options"] == ["ro", "bind"]
    metadata_file = Path(mount["hostPath"])
    assert metadata_file.is_relative_to(h100.data_dir.absolute())
    newest, older = _json_stream(metadata_file)
    assert (newest["apiVersion"], older["apiVersion"]) == (
        "metadata.resource.k8s.io/v1beta1",
        "metadata.resource.k8s.io/v1alpha1",
    )
    assert older == {**newest, "apiVersion": older["apiVersion"]}
    assert newest["kind"] == "DeviceMetadata"
    assert newest["metadata"] == {"name": key[2], "namespace": namespace, "uid": key[1], "generation": 1}
    assert newest["podClaimName"] == "gpus"
    [request_metadata] = newest["requests"]
    assert request_metadata["name"] == "gpus"
    [device_metadata] = request_metadata["devices"]
    assert (device_metadata["driver"], device_metadata["pool"], device_metadata["name"]) == (
        DRIVER_NAME,
        h100.node,
        "gpu-3",
    )
    # Every attribute the API server stored for the device in the ResourceSlice, as stored.
    assert device_metadata["attributes"] == published_devices(api, h100.node)["gpu-3"]["attributes"]
    assert cdi_device["containerEdits"]["deviceNodes"] == [
        {"path": "/dev/nvidia3", "type": "c", "major": 195, "minor": 3}
    ]
    common = {n["path"]: (n["major"], n["minor"]) for n in spec["containerEdits"]["deviceNodes"]}
    assert common == {"/dev/nvidiactl": (195, 255), "/dev/nvidia-uvm": (511, 0), "/dev/nvidia-uvm-tools": (511, 1)}
    assert spec["containerEdits"]["env"] == ["NATIVEDRA_GPU_UUIDS=GPU-4f6081a2-3d84-4f51-b1a2-415d6e7f8093"]

    assert unprepare(h100.dra_socket, version, [key]).claims[key[1]].error == ""
    assert spec_files(h100) == []
    assert not metadata_file.exists() and not metadata_file.parent.exists()
    assert _checkpoint_claims(h100) == {}


def test_fraction_gets_mps_limits_and_share_gets_its_share_id(
    api: client.ApiClient,
    namespace: str,
    fake_nodes: Callable[..., str],
    node_plugin: Callable[..., NodePlugin],
    h100: NodePlugin,
) -> None:
    claim_template(
        api,
        namespace,
        "quarter",
        [request("gpus", FRACTION_CLASS, f"device.attributes['{DRIVER_NAME}'].fraction == '1/4'")],
    )
    gpu_pod(api, namespace, "quarter", "quarter", node=h100.node)
    key = claim_key(allocated_claim(api, namespace, "quarter"))
    device = prepare(h100.dra_socket, "v1beta1", [key]).claims[key[1]].devices[0]
    env = yaml.safe_load(spec_files(h100)[0].read_text())["devices"][0]["containerEdits"]["env"]
    assert "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25" in env
    assert f"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0={85520809984 // 4 // 2**20}M" in env
    assert "-1of4-" in device.device_name

    share_node = fake_nodes("shares")
    shares = node_plugin(share_node, "--backend", "simulated", "--profile", "l4-4x", "--sharing", "consumable")
    wait_for(lambda: published_devices(api, share_node), 60, "share slices")
    claim_template(api, namespace, "ten-gi", [request("gpus", SHARE_CLASS, capacity={"memory": "10Gi"})])
    gpu_pod(api, namespace, "share", "ten-gi", node=share_node)
    claim = allocated_claim(api, namespace, "share")
    key = claim_key(claim)
    shared = prepare(shares.dra_socket, "v1", [key]).claims[key[1]].devices[0]
    assert shared.share_id and shared.share_id == claim["status"]["allocation"]["devices"]["results"][0]["shareID"]
    env = yaml.safe_load(spec_files(shares)[0].read_text())["devices"][0]["containerEdits"]["env"]
    assert "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=10240M" in env


def test_prepare_and_unprepare_are_idempotent(api: client.ApiClient, namespace: str, h100: NodePlugin) -> None:
    key = claim_key(whole_gpu_claim(api, namespace, "twice", h100.node))
    first = prepare(h100.dra_socket, "v1", [key])
    metadata_dir = h100.data_dir / "dra-device-metadata" / key[1]
    metadata = {path.name: path.read_bytes() for path in metadata_dir.iterdir()}
    second = prepare(h100.dra_socket, "v1", [key])
    assert first == second
    assert len(spec_files(h100)) == 1
    assert list(metadata) == ["gpus.json"]
    assert {path.name: path.read_bytes() for path in metadata_dir.iterdir()} == metadata
    for _ in range(2):
        assert unprepare(h100.dra_socket, "v1", [key]).claims[key[1]].error == ""
    assert spec_files(h100) == []
    assert not metadata_dir.exists()


def test_each_bad_claim_gets_its_own_precise_error_and_good_ones_are_prepared(
    api: client.ApiClient, namespace: str, fake_nodes: Callable[..., str], h100: NodePlugin
) -> None:
    good = claim_key(whole_gpu_claim(api, namespace, "good", h100.node))
    other_node = fake_nodes("elsewhere")
    SlicePublisher(api, other_node).reconcile(
        build_slices(load_profile(resolve_profile("l4-4x")), PublishConfig(), other_node)
    )
    elsewhere = claim_key(whole_gpu_claim(api, namespace, "elsewhere", other_node))
    create_claim(api, namespace, "idle", [request("gpus", GPU_CLASS)])
    idle = RESOURCE_CLAIMS.get(api, "idle", namespace)
    bad_config_template(api, namespace)
    gpu_pod(api, namespace, "bad-config", "bad-config", node=h100.node)
    configured = claim_key(allocated_claim(api, namespace, "bad-config"))
    unknown = (namespace, str(uuid.uuid4()), "does-not-exist")
    replaced = (namespace, str(uuid.uuid4()), good[2])

    response = prepare(h100.dra_socket, "v1", [good, unknown, replaced, claim_key(idle), elsewhere, configured])
    errors = {uid: entry.error for uid, entry in response.claims.items()}
    assert errors[good[1]] == "" and len(response.claims[good[1]].devices) == 1
    assert "does-not-exist" in errors[unknown[1]] and "not found" in errors[unknown[1]]
    assert "metadata.uid" in errors[replaced[1]] and good[1] in errors[replaced[1]]
    assert "idle" in errors[idle["metadata"]["uid"]] and "status.allocation is empty" in errors[idle["metadata"]["uid"]]
    assert f"pool {h100.node}" in errors[elsewhere[1]] and other_node in errors[elsewhere[1]]
    assert "status.allocation.devices.config[0]" in errors[configured[1]]
    assert "sharing.mps.activeThreadPercentage" in errors[configured[1]]
    assert [p.name for p in spec_files(h100)] == [f"{CDI_PREFIX}{good[1]}.yaml"]
    assert set(_checkpoint_claims(h100)) == {good[1]}


def test_restart_restores_lost_specs_and_survives_a_corrupted_checkpoint(
    api: client.ApiClient, namespace: str, h100: NodePlugin
) -> None:
    key = claim_key(whole_gpu_claim(api, namespace, "running", h100.node))
    prepare(h100.dra_socket, "v1", [key])
    [spec_file] = spec_files(h100)
    content = spec_file.read_text()
    h100.stop()
    spec_file.unlink()  # /var/run is tmpfs: a reboot or a cleanup loses it
    h100.start()
    assert spec_file.read_text() == content

    h100.stop()
    checkpoint = h100.data_dir / "checkpoint.json"
    checkpoint.write_text(checkpoint.read_text().replace("PrepareCompleted", "PrepareCompleteX"))
    h100.start()
    assert list(h100.data_dir.glob("checkpoint.json.corrupt-*")), "the corrupted file is kept aside"
    assert "checkpoint" in h100.log.read_text() and "checksum mismatch" in h100.log.read_text()
    fresh = claim_key(whole_gpu_claim(api, namespace, "after-corruption", h100.node))
    assert prepare(h100.dra_socket, "v1", [fresh]).claims[fresh[1]].error == ""


def test_a_faulty_gpu_is_tainted_reported_unhealthy_and_recovers(
    api: client.ApiClient, namespace: str, h100: NodePlugin
) -> None:
    channel, stream = health_stream(h100.dra_socket)
    try:
        first = next(stream)
        assert {d.device.device_name for d in first.devices} == set(published_devices(api, h100.node))
        assert all(d.health == HEALTHY for d in first.devices)

        h100.fault_file.write_text(yaml.safe_dump({"unhealthy": [2]}))
        wait_for(
            lambda: any(
                t["key"] == UNHEALTHY_TAINT_KEY for t in published_devices(api, h100.node)["gpu-2"].get("taints", [])
            ),
            30,
            "the taint on gpu-2",
        )
        update = next(d for d in stream if any(x.health == UNHEALTHY for x in d.devices))
        sick = {d.device.device_name for d in update.devices if d.health == UNHEALTHY}
        assert "gpu-2" in sick and "gpu-2-1of8-0" in sick and "gpu-3" not in sick
    finally:
        channel.close()

    claim_template(
        api,
        namespace,
        "gpu-2",
        [request("gpus", GPU_CLASS, f"device.attributes['{DRIVER_NAME}'].index == 2")],
    )
    gpu_pod(api, namespace, "wants-gpu-2", "gpu-2", node=h100.node)
    assert "cannot allocate all claims" in wait_pod_unschedulable(api, namespace, "wants-gpu-2")

    h100.fault_file.write_text(yaml.safe_dump({"unhealthy": []}))
    assert wait_pod_scheduled(api, namespace, "wants-gpu-2", timeout_s=90) == h100.node
    assert not published_devices(api, h100.node)["gpu-2"].get("taints")


def test_metrics_endpoint_reports_publishing_and_prepares(
    api: client.ApiClient, namespace: str, fake_nodes: Callable[..., str], node_plugin: Callable[..., NodePlugin]
) -> None:
    port = free_port()
    node = fake_nodes("metrics")
    plugin = node_plugin(node, "--backend", "simulated", "--profile", "l4-4x", "--metrics-port", str(port))
    wait_for(lambda: len(published_devices(api, node)) == 60, 60, "60 published devices")
    key = claim_key(whole_gpu_claim(api, namespace, "measured", node))
    assert prepare(plugin.dra_socket, "v1", [key]).claims[key[1]].error == ""

    def scrape() -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            return str(response.read().decode())

    text = scrape()
    assert "nativedra_devices_published 60.0" in text
    assert "nativedra_prepared_claims 1.0" in text
    assert 'nativedra_claim_operation_seconds_count{operation="prepare"} 1.0' in text
    assert 'nativedra_resourceslice_writes_total{verb="create"}' in text
