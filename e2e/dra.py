"""Test-only helpers that read what the real scheduler allocated (builders live in `nativedra.objects`)."""

from __future__ import annotations

from typing import Any

from kubernetes import client

from kube.pods import pod_claim_names
from kube.resources import RESOURCE_CLAIMS
from nativedra.cluster import wait_for
from nativedra.cluster.waits import describe_pod


def pod_claim(api: client.ApiClient, namespace: str, pod: str) -> dict[str, Any] | None:
    """The ResourceClaim generated for the pod, once it exists."""
    raw = client.CoreV1Api(api).read_namespaced_pod(pod, namespace)
    for name in pod_claim_names(api.sanitize_for_serialization(raw)).values():
        if name:
            return RESOURCE_CLAIMS.get(api, name, namespace)
    return None


def allocated_claim(api: client.ApiClient, namespace: str, pod: str, timeout_s: float = 60) -> dict[str, Any]:
    """The pod's claim once the scheduler has allocated it."""

    def claim() -> dict[str, Any] | None:
        found = pod_claim(api, namespace, pod)
        return found if found and found.get("status", {}).get("allocation") else None

    return wait_for(
        claim, timeout_s, f"allocation of pod {namespace}/{pod}'s claim", lambda: describe_pod(api, namespace, pod)
    )


def allocated_results(api: client.ApiClient, namespace: str, pod: str, timeout_s: float = 60) -> list[dict[str, Any]]:
    """Wait for the pod's claim to be allocated and return its device results."""
    return list(allocated_claim(api, namespace, pod, timeout_s)["status"]["allocation"]["devices"]["results"])
