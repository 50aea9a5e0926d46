"""Helpers for e2e tests that create DRA objects and read what the real scheduler allocated."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from kubernetes import client, dynamic

from e2e.cluster import wait_for
from e2e.cluster.waits import describe_pod

GROUP, VERSION = "resource.k8s.io", "v1"
REPO = Path(__file__).resolve().parent.parent
DEVICE_CLASSES = REPO / "manifests" / "base" / "deviceclasses.yaml"


def apply_documents(api: client.ApiClient, documents: list[dict[str, Any]], namespace: str | None = None) -> None:
    """Server-side apply, so applying the same manifest twice is harmless."""
    dyn = dynamic.DynamicClient(api)
    for document in documents:
        resource = dyn.resources.get(api_version=document["apiVersion"], kind=document["kind"])
        kwargs: dict[str, Any] = {"field_manager": "nativedra-e2e", "force_conflicts": True}
        if resource.namespaced:
            kwargs["namespace"] = document.get("metadata", {}).get("namespace") or namespace
        resource.server_side_apply(body=document, **kwargs)


def apply_file(api: client.ApiClient, path: Path, namespace: str | None = None) -> None:
    apply_documents(api, [d for d in yaml.safe_load_all(path.read_text()) if d], namespace)


def request(
    name: str, device_class: str, selector: str | None = None, count: int = 1, capacity: dict[str, str] | None = None
) -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": device_class, "count": count}
    if selector:
        exactly["selectors"] = [{"cel": {"expression": selector}}]
    if capacity:
        exactly["capacity"] = {"requests": capacity}
    return {"name": name, "exactly": exactly}


def claim_template(
    api: client.ApiClient,
    namespace: str,
    name: str,
    requests: list[dict[str, Any]],
    constraints: list[dict[str, Any]] | None = None,
) -> None:
    devices: dict[str, Any] = {"requests": requests}
    if constraints:
        devices["constraints"] = constraints
    client.CustomObjectsApi(api).create_namespaced_custom_object(
        GROUP,
        VERSION,
        namespace,
        "resourceclaimtemplates",
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": name},
            "spec": {"spec": {"devices": devices}},
        },
    )


def create_claim(api: client.ApiClient, namespace: str, name: str, requests: list[dict[str, Any]]) -> dict[str, Any]:
    """A ResourceClaim (not from a template); returns it as stored."""
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": {"devices": {"requests": requests}},
    }
    return dict(
        client.CustomObjectsApi(api).create_namespaced_custom_object(GROUP, VERSION, namespace, "resourceclaims", body)
    )


def gpu_pod(
    api: client.ApiClient,
    namespace: str,
    name: str,
    template: str,
    *,
    node: str | None = None,
    node_selector: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
) -> None:
    spec: dict[str, Any] = {
        "containers": [
            {"name": "main", "image": "registry.invalid/cuda:12", "resources": {"claims": [{"name": "gpus"}]}}
        ],
        "resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": template}],
        "terminationGracePeriodSeconds": 0,
    }
    selector = dict(node_selector or {})
    if node:
        selector["kubernetes.io/hostname"] = node
    if selector:
        spec["nodeSelector"] = selector
    metadata: dict[str, Any] = {"name": name, "labels": labels or {}, "annotations": annotations or {}}
    client.CoreV1Api(api).create_namespaced_pod(namespace, {"metadata": metadata, "spec": spec})


def pod_claim(api: client.ApiClient, namespace: str, pod: str) -> dict[str, Any] | None:
    """The ResourceClaim generated for the pod, once it exists."""
    status = client.CoreV1Api(api).read_namespaced_pod(pod, namespace).status
    for entry in status.resource_claim_statuses or []:
        if entry.resource_claim_name:
            return dict(
                client.CustomObjectsApi(api).get_namespaced_custom_object(
                    GROUP, VERSION, namespace, "resourceclaims", entry.resource_claim_name
                )
            )
    return None


def allocated_results(api: client.ApiClient, namespace: str, pod: str, timeout_s: float = 60) -> list[dict[str, Any]]:
    """Wait for the pod's claim to be allocated and return its device results."""
    return list(allocated_claim(api, namespace, pod, timeout_s)["status"]["allocation"]["devices"]["results"])


def our_slices(api: client.ApiClient, node: str) -> list[dict[str, Any]]:
    slices = client.CustomObjectsApi(api).list_cluster_custom_object(
        GROUP, VERSION, "resourceslices", field_selector=f"spec.nodeName={node},spec.driver=gpu.nativedra.dev"
    )
    return list(slices["items"])


def allocated_claim(api: client.ApiClient, namespace: str, pod: str, timeout_s: float = 60) -> dict[str, Any]:
    """The pod's claim once the scheduler has allocated it."""

    def claim() -> dict[str, Any] | None:
        found = pod_claim(api, namespace, pod)
        return found if found and found.get("status", {}).get("allocation") else None

    return wait_for(
        claim, timeout_s, f"allocation of pod {namespace}/{pod}'s claim", lambda: describe_pod(api, namespace, pod)
    )


def claim_key(claim: dict[str, Any]) -> tuple[str, str, str]:
    """(namespace, uid, name), as the kubelet names a claim."""
    metadata = claim["metadata"]
    return metadata["namespace"], metadata["uid"], metadata["name"]


def published_devices(api: client.ApiClient, node: str) -> dict[str, dict[str, Any]]:
    """Every device our driver publishes for `node`, by name."""
    return {d["name"]: d for s in our_slices(api, node) for d in s["spec"].get("devices", [])}
