"""MIG placements or fractions, chosen per GPU by the real scheduler (`--mig-or-fractions true`):
with the alpha gate DRADeviceCompatibilityGroups on (named below, with why), a GPU whose first
allocation is a MIG placement takes no fraction and the other way round; with default gates the API
server drops `compatibilityGroups`, and the plugin falls back to the fixed split and says so."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from e2e.dra import allocated_results
from e2e.extender_harness import fresh_namespace
from e2e.node_plugin import NodePlugin
from nativedra.cluster import ControlPlane, create_fake_node, resolve, wait_for, wait_pod_unschedulable
from nativedra.cluster.commands import NodeDirs
from nativedra.cluster.components import DEFAULTS, Features
from nativedra.kubelet_client import make_dev_tree
from nativedra.objects import apply_file, claim_template, device_classes, gpu_pod, published_devices, request

NODE = "mode-node"
COMPATIBILITY_GROUPS = Features(
    {"DRADeviceCompatibilityGroups": True},
    why="compatibility groups are alpha in 1.37: without the gate the API server drops them",
)
ON_GPU_0 = "device.attributes['gpu.nativedra.dev'].index == 0"
ON_GPU_1 = "device.attributes['gpu.nativedra.dev'].index == 1"


@pytest.fixture(params=[COMPATIBILITY_GROUPS, DEFAULTS], ids=["gate-on", "defaults"])
def plugin_on(request: pytest.FixtureRequest) -> Iterator[tuple[client.ApiClient, NodePlugin, bool]]:
    root = Path(tempfile.mkdtemp(prefix="nd-mode-", dir="/tmp"))
    plane = ControlPlane(state_dir=root / "cluster", binaries=resolve(), features=request.param)
    plane.start()
    plugin = None
    try:
        api = plane.api_client()
        apply_file(api, device_classes())
        create_fake_node(api, NODE)
        make_dev_tree(NodeDirs(root / "node").dev, range(8))
        args = ("--backend", "simulated", "--profile", "h100-8x", "--mig-or-fractions", "true")
        plugin = NodePlugin(plane, root / "node", NODE, args)
        plugin.start()
        yield api, plugin, request.param is COMPATIBILITY_GROUPS
    finally:
        if plugin is not None:
            plugin.stop()
        plane.stop()
        shutil.rmtree(root, ignore_errors=True)


def test_each_gpu_gets_one_mode_or_the_fixed_split(plugin_on: tuple[client.ApiClient, NodePlugin, bool]) -> None:
    api, plugin, gate_on = plugin_on

    def settled() -> dict[str, dict[str, object]] | None:
        """Every slice written (they are written one at a time): GPU 0's fractions, its placements
        only with the gate, and GPU 6's placements (in MIG mode) either way."""
        devices = published_devices(api, NODE)
        wanted = {"gpu-0-1of4-0", "gpu-6-1g-10gb-0"} <= set(devices)
        return devices if wanted and ("gpu-0-1g-10gb-0" in devices) == gate_on else None

    devices = wait_for(settled, 60, "the plugin's devices for GPU 0", plugin.log.read_text)
    if not gate_on:
        log = plugin.log.read_text()
        assert log.count("does not store") == 1 and "DRADeviceCompatibilityGroups" in log, log[-2000:]
        return
    stored = devices["gpu-0-1g-10gb-0"]["consumesCounters"][0]  # type: ignore[index]
    assert stored["compatibilityGroups"] == ["mig"], "the API server keeps the groups with the gate on"
    with fresh_namespace(api, "mode") as namespace:
        claim_template(api, namespace, "mig-0", [request("mig", "gpu-mig.nativedra.dev", ON_GPU_0)])
        claim_template(api, namespace, "quarter-0", [request("part", "gpu-fraction.nativedra.dev", ON_GPU_0)])
        gpu_pod(api, namespace, "mig", "mig-0")
        (placed,) = allocated_results(api, namespace, "mig")
        assert placed["device"].startswith("gpu-0-") and "of" not in placed["device"]
        gpu_pod(api, namespace, "quarter", "quarter-0")
        reason = wait_pod_unschedulable(api, namespace, "quarter")
        assert "cannot allocate all claims" in reason, reason
        # The same fraction on another GPU, whose mode is still open, is allocated.
        claim_template(api, namespace, "quarter-1", [request("part", "gpu-fraction.nativedra.dev", ON_GPU_1)])
        gpu_pod(api, namespace, "quarter-elsewhere", "quarter-1")
        (elsewhere,) = allocated_results(api, namespace, "quarter-elsewhere")
        assert elsewhere["device"].startswith("gpu-1-1of")
