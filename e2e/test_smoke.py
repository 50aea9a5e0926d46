"""The harness runs a control plane whose real scheduler allocates DRA devices."""

from __future__ import annotations

import uuid
from collections.abc import Callable

from kubernetes import client

from nativedra.base.kube.resources import DEVICE_CLASSES, RESOURCE_SLICES
from nativedra.cluster import wait_pod_scheduled, wait_pod_unschedulable
from nativedra.objects import apply_documents, claim_template, gpu_pod, request
from testkit.dra import allocated_results

DRIVER = "smoke.nativedra.dev"


def _class_and_slice(api: client.ApiClient, node: str) -> str:
    class_name = f"smoke-{uuid.uuid4().hex[:6]}"
    devices = [{"name": f"gpu-{i}", "attributes": {"model": {"string": "small"}}} for i in range(2)]
    apply_documents(
        api,
        [
            {
                "apiVersion": DEVICE_CLASSES.api_version,
                "kind": DEVICE_CLASSES.kind,
                "metadata": {"name": class_name},
                "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{DRIVER}'"}}]},
            },
            {
                "apiVersion": RESOURCE_SLICES.api_version,
                "kind": RESOURCE_SLICES.kind,
                "metadata": {"name": f"{node}-smoke"},
                "spec": {
                    "driver": DRIVER,
                    "nodeName": node,
                    "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                    "devices": devices,
                },
            },
        ],
    )
    return class_name


def test_real_scheduler_allocates_a_device_from_a_slice(
    api: client.ApiClient, namespace: str, fake_nodes: Callable[..., str]
) -> None:
    node = fake_nodes("smoke")
    class_name = _class_and_slice(api, node)
    selector = f"device.attributes['{DRIVER}'].model == 'small'"
    claim_template(api, namespace, "one-gpu", [request("gpus", class_name, selector)])
    gpu_pod(api, namespace, "consumer", "one-gpu", node=node)

    assert wait_pod_scheduled(api, namespace, "consumer") == node
    results = allocated_results(api, namespace, "consumer")
    assert len(results) == 1
    assert (results[0]["driver"], results[0]["pool"]) == (DRIVER, node)
    assert results[0]["device"] in {"gpu-0", "gpu-1"}


def test_unsatisfiable_claim_leaves_pod_pending_with_scheduler_reason(
    api: client.ApiClient, namespace: str, fake_nodes: Callable[..., str]
) -> None:
    node = fake_nodes("smoke")
    class_name = _class_and_slice(api, node)
    selector = f"device.attributes['{DRIVER}'].model == 'huge'"
    claim_template(api, namespace, "huge-gpu", [request("gpus", class_name, selector)])
    gpu_pod(api, namespace, "waiting", "huge-gpu", node=node)

    message = wait_pod_unschedulable(api, namespace, "waiting")
    assert "cannot allocate all claims" in message
    assert client.CoreV1Api(api).read_namespaced_pod("waiting", namespace).spec.node_name is None
