"""An API server that keeps no device taints (1.34/1.35 defaults; here v1.37 with DRADeviceTaints
turned off, which needs no old build): a GPU that turns faulty must not stay allocatable, and the
plugin must not rewrite its slices in a loop trying to store a taint that is always dropped."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
import yaml
from kubernetes import client
from kubernetes.watch.watch import iter_resp_lines

from nativedra.base.kube.names import DRIVER_NAME, GPU_CLASS
from nativedra.base.kube.resources import RESOURCE_SLICES
from nativedra.cluster import wait_for, wait_pod_unschedulable
from nativedra.cluster.binaries import minor_of, pinned_version
from nativedra.cluster.components import DEFAULTS, Features
from nativedra.objects import claim_template, gpu_pod, published_devices, request
from testkit.extender_harness import fresh_namespace
from testkit.node_plugin import NodePlugin, plugin_on_own_plane

NODE = "taint-node"
NO_TAINTS = Features(
    {"DRADeviceTaints": False, "DRADeviceTaintRules": False},
    why="what 1.34/1.35 API servers serve by default: no device taints (and so no taint rules)",
)
QUIET_S = 5  # the plugin reacts to its own write within a second: a loop shows well before
TAINTS_ON_BY_DEFAULT = 36  # 1.34 knows no DRADeviceTaintRules gate: older releases run as they are


def no_taints(version: str) -> Features:
    """1.34/1.35 with their defaults (taints not served); later releases with the gates turned off."""
    return DEFAULTS if minor_of(version) < TAINTS_ON_BY_DEFAULT else NO_TAINTS


GATES_LOCKED_SINCE = 38  # GA and locked on: `--feature-gates=...=false` stops the API server
pytestmark = pytest.mark.skipif(
    minor_of(pinned_version()) >= GATES_LOCKED_SINCE,
    reason="DRADeviceTaints and DRADeviceTaintRules are locked on from 1.38: no such API server exists",
)


@pytest.fixture
def plugin_without_taints() -> Iterator[tuple[client.ApiClient, NodePlugin]]:
    with plugin_on_own_plane(no_taints, NODE, fault_file=True) as running:
        yield running


def rewrites_within(api: client.ApiClient, seconds: int) -> list[str]:
    """The writes to this node's slices the API server reports in a watch of `seconds` from now on.
    A rewrite loop follows each write with the next as soon as the plugin's watch delivers it (its
    own write read back without the taint), so a loop shows in the first second; the watch ends at
    its first event, or after `seconds` with none."""
    listing = RESOURCE_SLICES.list(api, field_selector=f"spec.nodeName={NODE}")
    response = RESOURCE_SLICES.lister(api)(
        watch=True,
        resource_version=listing["metadata"]["resourceVersion"],
        field_selector=f"spec.nodeName={NODE}",
        timeout_seconds=seconds,
        _preload_content=False,
    )
    try:
        for line in iter_resp_lines(response):
            event = json.loads(line)
            if event.get("type") != "BOOKMARK":
                return [f"{event['type']} {event['object'].get('metadata', {}).get('name')}"]
        return []
    finally:
        response.close()
        response.release_conn()


def generations(api: client.ApiClient) -> set[int]:
    items = RESOURCE_SLICES.list(api, field_selector=f"spec.nodeName={NODE}")["items"]
    return {s["spec"]["pool"]["generation"] for s in items if s["spec"]["driver"] == DRIVER_NAME}


def test_a_faulty_gpu_is_left_out_and_the_plugin_stops_writing(
    plugin_without_taints: tuple[client.ApiClient, NodePlugin],
) -> None:
    api, plugin = plugin_without_taints
    wait_for(lambda: "gpu-2" in published_devices(api, NODE), 60, "gpu-2 published", plugin.log.read_text)
    plugin.fault_file.write_text(yaml.safe_dump({"unhealthy": [2]}))
    wait_for(
        lambda: not any(name == "gpu-2" or name.startswith("gpu-2-") for name in published_devices(api, NODE)),
        60,
        "gpu-2 and its parts left out of the slices",
        plugin.log.read_text,
    )
    log = plugin.log.read_text()
    # Said once; 1.34/1.35 defaults also drop partition fields, which is said apart.
    said = [line for line in log.splitlines() if "does not store" in line and "DRADeviceTaints" in line]
    assert len(said) == 1, log[-2000:]
    # Slices are rewritten one at a time: wait until they all carry one generation, then watch it hold.
    settled = wait_for(lambda: generations(api) if len(generations(api)) == 1 else None, 30, "one slice generation")
    assert rewrites_within(api, QUIET_S) == [], "no rewrite loop: the plugin's own last write started none"
    assert generations(api) == settled, "no rewrite loop: the slices stay at one generation"
    with fresh_namespace(api, "taint") as namespace:
        selector = f"device.attributes['{DRIVER_NAME}'].index == 2"
        claim_template(api, namespace, "gpu-2", [request("gpus", GPU_CLASS, selector)])
        gpu_pod(api, namespace, "wants-gpu-2", "gpu-2", node=NODE)
        assert "cannot allocate all claims" in wait_pod_unschedulable(api, namespace, "wants-gpu-2")
