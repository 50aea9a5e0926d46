"""Waiting for cluster state, with failure messages that show why it did not happen."""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Callable
from typing import TypeVar

from kubernetes import client

from nativedra.base.kube.resources import RESOURCE_CLAIMS

T = TypeVar("T")


class WaitTimeoutError(AssertionError):
    """The awaited condition did not hold in time; the message carries the evidence."""


def wait_for(
    probe: Callable[[], T | None],
    timeout_s: float,
    what: str,
    explain: Callable[[], str] = lambda: "",
    interval_s: float = 0.2,
) -> T:
    """Poll `probe` until it returns something truthy; on timeout raise with `explain()`."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = probe()
        if result:
            return result
        if time.monotonic() > deadline:
            raise WaitTimeoutError(f"timed out after {timeout_s:.0f}s waiting for {what}\n{explain()}")
        time.sleep(interval_s)


def pod_events(api: client.ApiClient, namespace: str, pod: str) -> list[str]:
    events = client.CoreV1Api(api).list_namespaced_event(
        namespace, field_selector=f"involvedObject.kind=Pod,involvedObject.name={pod}"
    )
    return [f"{e.type} {e.reason}: {e.message}" for e in events.items]


def describe_pod(api: client.ApiClient, namespace: str, name: str) -> str:
    core = client.CoreV1Api(api)
    lines = []
    try:
        pod = core.read_namespaced_pod(name, namespace)
    except client.ApiException as error:
        return f"pod {namespace}/{name}: {error.status} {error.reason}"
    lines.append(f"pod {namespace}/{name}: phase={pod.status.phase} node={pod.spec.node_name}")
    for condition in pod.status.conditions or []:
        lines.append(f"  condition {condition.type}={condition.status} {condition.reason}: {condition.message}")
    lines.extend(f"  event {event}" for event in pod_events(api, namespace, name))
    for status in pod.status.resource_claim_statuses or []:
        lines.append(f"  claim {status.name} -> {status.resource_claim_name}")
        if status.resource_claim_name:
            lines.append("    " + describe_claim(api, namespace, status.resource_claim_name))
    return "\n".join(lines)


def describe_claim(api: client.ApiClient, namespace: str, name: str) -> str:
    claim = RESOURCE_CLAIMS.get(api, name, namespace)
    return f"claim {namespace}/{name} status={claim.get('status', {})}"


def pod_is_scheduled(api: client.ApiClient, namespace: str, name: str) -> str | None:
    pod = client.CoreV1Api(api).read_namespaced_pod(name, namespace)
    return str(pod.spec.node_name) if pod.spec.node_name else None


def wait_pod_scheduled(api: client.ApiClient, namespace: str, name: str, timeout_s: float = 60) -> str:
    """Wait until the pod is bound to a node and return the node name."""
    return wait_for(
        lambda: pod_is_scheduled(api, namespace, name),
        timeout_s,
        f"pod {namespace}/{name} to be scheduled",
        lambda: describe_pod(api, namespace, name),
    )


def unschedulable_message(api: client.ApiClient, namespace: str, name: str) -> str | None:
    """The scheduler's reason when it has marked the pod unschedulable."""
    pod = client.CoreV1Api(api).read_namespaced_pod(name, namespace)
    for condition in pod.status.conditions or []:
        if condition.type == "PodScheduled" and condition.status == "False" and condition.reason == "Unschedulable":
            return str(condition.message)
    return None


def wait_pod_unschedulable(api: client.ApiClient, namespace: str, name: str, timeout_s: float = 60) -> str:
    """Wait until the scheduler has marked the pod unschedulable and return its message."""
    return wait_for(
        lambda: unschedulable_message(api, namespace, name),
        timeout_s,
        f"pod {namespace}/{name} to be marked unschedulable",
        lambda: describe_pod(api, namespace, name),
    )


def http_ok(url: str) -> bool:
    """True when `url` answers 200 (readiness of a local HTTP service)."""
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return bool(response.status == 200)
    except OSError:
        return False
