"""The harness runs a control plane whose real scheduler allocates DRA devices."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from kubernetes import client

from e2e.cluster import wait_for, wait_pod_scheduled, wait_pod_unschedulable

DRIVER = "smoke.nativedra.dev"


def _resource(api: client.ApiClient) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api)


def _device_class(api: client.ApiClient, name: str) -> None:
    _resource(api).create_cluster_custom_object(
        "resource.k8s.io",
        "v1",
        "deviceclasses",
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": name},
            "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{DRIVER}'"}}]},
        },
    )


def _slice_for(api: client.ApiClient, node: str) -> None:
    _resource(api).create_cluster_custom_object(
        "resource.k8s.io",
        "v1",
        "resourceslices",
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"generateName": f"{node}-smoke-"},
            "spec": {
                "driver": DRIVER,
                "nodeName": node,
                "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                "devices": [
                    {"name": "gpu-0", "attributes": {"model": {"string": "small"}}},
                    {"name": "gpu-1", "attributes": {"model": {"string": "small"}}},
                ],
            },
        },
    )


def _template(api: client.ApiClient, namespace: str, name: str, class_name: str, selector: str) -> None:
    _resource(api).create_namespaced_custom_object(
        "resource.k8s.io",
        "v1",
        namespace,
        "resourceclaimtemplates",
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": name},
            "spec": {
                "spec": {
                    "devices": {
                        "requests": [
                            {
                                "name": "gpu",
                                "exactly": {
                                    "deviceClassName": class_name,
                                    "selectors": [{"cel": {"expression": selector}}],
                                },
                            }
                        ]
                    }
                }
            },
        },
    )


def _pod(api: client.ApiClient, namespace: str, name: str, template: str) -> None:
    client.CoreV1Api(api).create_namespaced_pod(
        namespace,
        {
            "metadata": {"name": name},
            "spec": {
                "containers": [
                    {
                        "name": "main",
                        "image": "registry.invalid/cuda:latest",
                        "resources": {"claims": [{"name": "gpu"}]},
                    }
                ],
                "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": template}],
            },
        },
    )


def _allocated_claim(api: client.ApiClient, namespace: str, pod: str) -> dict[str, Any] | None:
    claims = _resource(api).list_namespaced_custom_object("resource.k8s.io", "v1", namespace, "resourceclaims")
    for claim in claims["items"]:
        owners = claim["metadata"].get("ownerReferences", [])
        if any(o["name"] == pod for o in owners) and claim.get("status", {}).get("allocation"):
            return dict(claim)
    return None


def test_real_scheduler_allocates_a_device_from_a_slice(
    api: client.ApiClient, namespace: str, fake_nodes: Callable[..., str]
) -> None:
    node = fake_nodes("smoke")
    class_name = f"smoke-{uuid.uuid4().hex[:6]}"
    _device_class(api, class_name)
    _slice_for(api, node)
    _template(api, namespace, "one-gpu", class_name, "device.attributes['smoke.nativedra.dev'].model == 'small'")
    _pod(api, namespace, "consumer", "one-gpu")

    assert wait_pod_scheduled(api, namespace, "consumer") == node
    claim = wait_for(lambda: _allocated_claim(api, namespace, "consumer"), 30, "claim allocation")
    results = claim["status"]["allocation"]["devices"]["results"]
    assert len(results) == 1
    assert results[0]["driver"] == DRIVER
    assert results[0]["pool"] == node
    assert results[0]["device"] in {"gpu-0", "gpu-1"}


def test_unsatisfiable_claim_leaves_pod_pending_with_scheduler_reason(
    api: client.ApiClient, namespace: str, fake_nodes: Callable[..., str]
) -> None:
    node = fake_nodes("smoke")
    class_name = f"smoke-{uuid.uuid4().hex[:6]}"
    _device_class(api, class_name)
    _slice_for(api, node)
    _template(api, namespace, "huge-gpu", class_name, "device.attributes['smoke.nativedra.dev'].model == 'huge'")
    _pod(api, namespace, "waiting", "huge-gpu")

    message = wait_pod_unschedulable(api, namespace, "waiting")
    assert "cannot allocate all claims" in message
    assert client.CoreV1Api(api).read_namespaced_pod("waiting", namespace).spec.node_name is None
