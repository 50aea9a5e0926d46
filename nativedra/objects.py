"""Build, apply and read the Kubernetes objects the demo (and the tests) create: claims, claim
templates, GPU pods, shipped manifests, and the devices a node publishes."""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client, dynamic

from nativedra.base.kube.names import DRIVER_NAME
from nativedra.base.kube.resources import NATIVE_POD_GROUPS, RESOURCE_CLAIM_TEMPLATES, RESOURCE_CLAIMS, RESOURCE_SLICES

FIELD_MANAGER = "nativedra"


def shipped(name: str) -> Path:
    """A manifest shipped with the package (`deviceclasses.yaml`, `examples/<file>`)."""
    return Path(str(resources.files("nativedra") / "data" / name))


def device_classes() -> Path:
    return shipped("deviceclasses.yaml")


def extender_marker_policy() -> Path:
    """The MutatingAdmissionPolicy that marks the pods the extender serves (1.36+)."""
    return shipped("extender-marker-policy.yaml")


def apply_documents(api: client.ApiClient, documents: list[dict[str, Any]], namespace: str | None = None) -> None:
    """Server-side apply, so applying the same manifest twice is harmless."""
    dyn = dynamic.DynamicClient(api)
    for document in documents:
        resource = dyn.resources.get(api_version=document["apiVersion"], kind=document["kind"])
        kwargs: dict[str, Any] = {"field_manager": FIELD_MANAGER, "force_conflicts": True}
        if resource.namespaced:
            kwargs["namespace"] = document.get("metadata", {}).get("namespace") or namespace
        resource.server_side_apply(body=document, **kwargs)


def apply_file(api: client.ApiClient, path: Path, namespace: str | None = None) -> None:
    apply_documents(api, [d for d in yaml.safe_load_all(path.read_text()) if d], namespace)


def request(
    name: str,
    device_class: str,
    selector: str | None = None,
    count: int = 1,
    capacity: dict[str, str] | None = None,
    *,
    tolerations: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """One `exactly` device request of a claim spec; `tolerations` of device taints."""
    exactly: dict[str, Any] = {"deviceClassName": device_class, "count": count}
    if selector:
        exactly["selectors"] = [{"cel": {"expression": selector}}]
    if capacity:
        exactly["capacity"] = {"requests": capacity}
    if tolerations:
        exactly["tolerations"] = tolerations
    return {"name": name, "exactly": exactly}


def claim_template(
    api: client.ApiClient,
    namespace: str,
    name: str,
    requests: list[dict[str, Any]],
    constraints: list[dict[str, Any]] | None = None,
    *,
    config: list[dict[str, Any]] | None = None,
) -> None:
    devices: dict[str, Any] = {"requests": requests}
    if constraints:
        devices["constraints"] = constraints
    if config:
        devices["config"] = config
    body = {
        "apiVersion": RESOURCE_CLAIM_TEMPLATES.api_version,
        "kind": RESOURCE_CLAIM_TEMPLATES.kind,
        "metadata": {"name": name},
        "spec": {"spec": {"devices": devices}},
    }
    RESOURCE_CLAIM_TEMPLATES.create(api, body, namespace)


def create_claim(api: client.ApiClient, namespace: str, name: str, requests: list[dict[str, Any]]) -> dict[str, Any]:
    """A ResourceClaim (not from a template); returns it as stored."""
    body = {
        "apiVersion": RESOURCE_CLAIMS.api_version,
        "kind": RESOURCE_CLAIMS.kind,
        "metadata": {"name": name},
        "spec": {"devices": {"requests": requests}},
    }
    return RESOURCE_CLAIMS.create(api, body, namespace)


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
    pod_group: str | None = None,
    scheduler: str | None = None,
    priority_class: str | None = None,
    grace_seconds: int = 0,
    more_claims: dict[str, str] | None = None,
) -> None:
    """A pod whose one container uses one claim generated from `template` (and one from each
    template of `more_claims`, by claim name); with `pod_group`, a member of that native PodGroup
    (spec.schedulingGroup, immutable once created); with
    `scheduler`, placed by that scheduler instead of the default one; with `priority_class`, of
    that PriorityClass; `grace_seconds` is its termination grace period."""
    claims = {"gpus": template, **(more_claims or {})}
    spec: dict[str, Any] = {
        "containers": [
            {
                "name": "main",
                "image": "registry.invalid/cuda:12",
                "resources": {"claims": [{"name": claim} for claim in claims]},
            }
        ],
        "resourceClaims": [{"name": claim, "resourceClaimTemplateName": t} for claim, t in claims.items()],
        "terminationGracePeriodSeconds": grace_seconds,
    }
    if scheduler:
        spec["schedulerName"] = scheduler
    if priority_class:
        spec["priorityClassName"] = priority_class
    selector = dict(node_selector or {})
    if node:
        selector["kubernetes.io/hostname"] = node
    if selector:
        spec["nodeSelector"] = selector
    if pod_group:
        spec["schedulingGroup"] = {"podGroupName": pod_group}
    metadata: dict[str, Any] = {"name": name, "labels": labels or {}, "annotations": annotations or {}}
    client.CoreV1Api(api).create_namespaced_pod(namespace, {"metadata": metadata, "spec": spec})


def native_pod_group(
    api: client.ApiClient, namespace: str, name: str, min_count: int, topology: str | None = None
) -> dict[str, Any]:
    """A native PodGroup (Kubernetes 1.37, `GenericWorkload` gate): a gang of at least
    `min_count` pods, all in one domain of node label `topology` when given (that field needs the
    `TopologyAwareWorkloadScheduling` gate too; without it the API server drops it)."""
    spec: dict[str, Any] = {"schedulingPolicy": {"gang": {"minCount": min_count}}}
    if topology:
        spec["schedulingConstraints"] = {"topology": [{"key": topology}]}
    body = {"apiVersion": NATIVE_POD_GROUPS.api_version, "kind": "PodGroup", "metadata": {"name": name}, "spec": spec}
    return NATIVE_POD_GROUPS.create(api, body, namespace)


def claim_key(claim: dict[str, Any]) -> tuple[str, str, str]:
    """(namespace, uid, name), as the kubelet names a claim."""
    metadata = claim["metadata"]
    return metadata["namespace"], metadata["uid"], metadata["name"]


def our_slices(api: client.ApiClient, node: str) -> list[dict[str, Any]]:
    selector = f"spec.nodeName={node},spec.driver={DRIVER_NAME}"
    return list(RESOURCE_SLICES.list(api, field_selector=selector)["items"])


def published_devices(api: client.ApiClient, node: str) -> dict[str, dict[str, Any]]:
    """Every device our driver publishes for `node`, by name."""
    return {d["name"]: d for s in our_slices(api, node) for d in s["spec"].get("devices") or []}
