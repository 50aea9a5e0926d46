"""MIG placements or fractions, chosen per GPU by the real scheduler (`--mig-or-fractions true`):
with the alpha gate DRADeviceCompatibilityGroups on (named below, with why), a GPU whose first
allocation is a MIG placement takes no fraction and the other way round; with default gates the API
server drops `compatibilityGroups`, and the plugin falls back to the fixed split and says so."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes import client

from nativedra.base.kube.names import DRIVER_NAME, FRACTION_CLASS, MIG_CLASS
from nativedra.cluster import wait_for, wait_pod_unschedulable
from nativedra.cluster.components import DEFAULTS, Features
from nativedra.objects import claim_template, gpu_pod, published_devices, request
from testkit.dra import allocated_results
from testkit.extender_harness import fresh_namespace
from testkit.node_plugin import NodePlugin, plugin_on_own_plane, plugin_on_plane

NODE = "mode-node"
COMPATIBILITY_GROUPS = Features(
    {"DRADeviceCompatibilityGroups": True},
    why="compatibility groups are alpha in 1.37: without the gate the API server drops them",
)
ON_GPU_0 = f"device.attributes['{DRIVER_NAME}'].index == 0"
ON_GPU_1 = f"device.attributes['{DRIVER_NAME}'].index == 1"


@pytest.fixture(params=[COMPATIBILITY_GROUPS, DEFAULTS], ids=["gate-on", "defaults"])
def plugin_on(request: pytest.FixtureRequest) -> Iterator[tuple[client.ApiClient, NodePlugin, bool]]:
    """The gate's own plane, or the session's (default gates)."""
    flags = ("--mig-or-fractions", "true")
    if request.param is DEFAULTS:
        running = plugin_on_plane(request.getfixturevalue("control_plane"), NODE, *flags)
    else:
        running = plugin_on_own_plane(request.param, NODE, *flags)
    with running as (api, plugin):
        yield api, plugin, request.param is COMPATIBILITY_GROUPS


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
        claim_template(api, namespace, "mig-0", [request("mig", MIG_CLASS, ON_GPU_0)])
        claim_template(api, namespace, "quarter-0", [request("part", FRACTION_CLASS, ON_GPU_0)])
        gpu_pod(api, namespace, "mig", "mig-0")
        (placed,) = allocated_results(api, namespace, "mig")
        assert placed["device"].startswith("gpu-0-") and "of" not in placed["device"]
        gpu_pod(api, namespace, "quarter", "quarter-0")
        reason = wait_pod_unschedulable(api, namespace, "quarter")
        assert "cannot allocate all claims" in reason, reason
        # The same fraction on another GPU, whose mode is still open, is allocated.
        claim_template(api, namespace, "quarter-1", [request("part", FRACTION_CLASS, ON_GPU_1)])
        gpu_pod(api, namespace, "quarter-elsewhere", "quarter-1")
        (elsewhere,) = allocated_results(api, namespace, "quarter-elsewhere")
        assert elsewhere["device"].startswith("gpu-1-1of")
