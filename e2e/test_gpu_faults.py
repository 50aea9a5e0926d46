"""A GPU fault on a running pod, with the real kube-controller-manager (default gates): with the
NoExecute effect its device-taint eviction controller evicts the pod using the faulty GPU and no
other; with NoSchedule (the default), or for an application XID, the pod keeps running. The pod is
told in a GPUFault event naming the GPU and the fault either way."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
import yaml
from kubernetes import client

from dra_driver.publishing.slices import UNHEALTHY_TAINT_KEY
from nativedra.cluster import wait_for
from nativedra.kubelet_client import prepare
from nativedra.objects import claim_key, published_devices
from testkit.dra import whole_gpu_claim
from testkit.node_plugin import NodePlugin

pytestmark = pytest.mark.usefixtures("device_classes_applied")
EVICTED_WITHIN_S = 60  # the controller acts on the slice update; measured below in seconds
STILL_RUNNING_FOR_S = 8  # how long a pod that must stay is watched after its GPU's taint is seen


def _plugin(
    api: client.ApiClient, fake_nodes: Callable[..., str], node_plugin: Callable[..., NodePlugin], effect: str
) -> NodePlugin:
    node = fake_nodes("faults")
    plugin = node_plugin(
        node, "--backend", "simulated", "--profile", "h100-8x", "--fractions", "none", "--fatal-fault-effect", effect
    )
    whole = {f"gpu-{index}" for index in range(6)}  # 6 and 7 are in MIG mode
    wait_for(lambda: whole <= set(published_devices(api, node)), 60, f"slices of {node}", plugin.log.read_text)
    return plugin


def _running_on(api: client.ApiClient, namespace: str, plugin: NodePlugin, pod: str, index: int) -> None:
    """A pod holding GPU `index`, prepared as the kubelet prepares it before starting the container."""
    prepare(plugin.dra_socket, "v1", [claim_key(whole_gpu_claim(api, namespace, pod, plugin.node, index))])


def _fault(api: client.ApiClient, plugin: NodePlugin, faults: list[dict[str, Any]], taint: str) -> float:
    """Write the fault; the moment its taint is published."""
    plugin.fault_file.write_text(yaml.safe_dump({"faults": faults}))

    def tainted() -> bool:
        taints = published_devices(api, plugin.node)[f"gpu-{faults[0]['gpu']}"].get("taints") or []
        return [f"{t['key']}={t['value']}:{t['effect']}" for t in taints] == [taint]

    wait_for(tainted, 30, f"the taint {taint}", plugin.log.read_text)
    return time.monotonic()


def _evicted(api: client.ApiClient, namespace: str, pod: str) -> bool:
    try:
        found = client.CoreV1Api(api).read_namespaced_pod(pod, namespace)
    except client.ApiException as error:
        return bool(error.status == 404)
    return found.metadata.deletion_timestamp is not None


def _fault_events(api: client.ApiClient, namespace: str, pod: str) -> list[str]:
    events = client.CoreV1Api(api).list_namespaced_event(namespace, field_selector=f"involvedObject.name={pod}")
    return [e.message for e in events.items if e.reason == "GPUFault"]


def _told(api: client.ApiClient, namespace: str, pod: str) -> str:
    return wait_for(lambda: next(iter(_fault_events(api, namespace, pod)), None), 30, f"the GPUFault event on {pod}")


def test_no_execute_evicts_the_pod_on_the_failed_gpu_and_no_other(
    api: client.ApiClient, namespace: str, fake_nodes: Callable[..., str], node_plugin: Callable[..., NodePlugin]
) -> None:
    plugin = _plugin(api, fake_nodes, node_plugin, "NoExecute")
    _running_on(api, namespace, plugin, "on-gpu-3", 3)
    _running_on(api, namespace, plugin, "on-gpu-4", 4)
    tainted_at = _fault(api, plugin, [{"gpu": 3, "xid": 79}], f"{UNHEALTHY_TAINT_KEY}=xid-79:NoExecute")
    wait_for(lambda: _evicted(api, namespace, "on-gpu-3"), EVICTED_WITHIN_S, "the eviction of on-gpu-3")
    print(f"on-gpu-3 evicted {time.monotonic() - tainted_at:.1f} s after the taint was published")
    events = client.CoreV1Api(api).list_namespaced_event(namespace, field_selector="involvedObject.name=on-gpu-3")
    by = {e.reason: e.source.component for e in events.items}
    assert by.get("DeviceTaintManagerEviction") == "device-taint-eviction-controller", by  # the real controller
    message = _told(api, namespace, "on-gpu-3")
    assert "GPU 3 (" in message and "XID 79" in message and "evicts the pods" in message
    assert not _evicted(api, namespace, "on-gpu-4") and not _fault_events(api, namespace, "on-gpu-4")


@pytest.mark.parametrize(
    ("effect", "fault", "taint"),
    [
        ("NoSchedule", {"gpu": 3, "xid": 79}, "xid-79:NoSchedule"),  # today's default: the pod stays
        ("NoExecute", {"gpu": 3, "xid": 13}, "xid-13:NoSchedule"),  # the application's own XID
    ],
    ids=["fatal-no-schedule", "application-xid"],
)
def test_the_pod_keeps_running_where_the_taint_only_keeps_new_work_off(
    api: client.ApiClient,
    namespace: str,
    fake_nodes: Callable[..., str],
    node_plugin: Callable[..., NodePlugin],
    effect: str,
    fault: dict[str, Any],
    taint: str,
) -> None:
    plugin = _plugin(api, fake_nodes, node_plugin, effect)
    _running_on(api, namespace, plugin, "on-gpu-3", 3)
    _fault(api, plugin, [fault], f"{UNHEALTHY_TAINT_KEY}={taint}")
    assert "keep running" in _told(api, namespace, "on-gpu-3")
    time.sleep(STILL_RUNNING_FOR_S)
    assert not _evicted(api, namespace, "on-gpu-3")
