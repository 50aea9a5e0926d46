"""Fake Nodes: API objects the scheduler accepts although no kubelet runs."""

from __future__ import annotations

from collections.abc import Mapping

from kubernetes import client

NOT_READY_TAINT = "node.kubernetes.io/not-ready"
DEFAULT_CAPACITY = {"cpu": "128", "memory": "1Ti", "pods": "250", "ephemeral-storage": "1Ti"}


def create_fake_node(
    api: client.ApiClient,
    name: str,
    labels: Mapping[str, str] | None = None,
    capacity: Mapping[str, str] | None = None,
) -> None:
    """Create a Ready node without the not-ready taint that admission adds on creation.

    Idempotent: an existing node is brought to the same state.
    """
    core = client.CoreV1Api(api)
    node_labels = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", **(labels or {})}
    body = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": node_labels}}
    try:
        core.create_node(body)
    except client.ApiException as error:
        if error.status != 409:
            raise
        core.patch_node(name, {"metadata": {"labels": node_labels}})
    resources = dict(capacity or DEFAULT_CAPACITY)
    core.patch_node_status(
        name,
        {
            "status": {
                "capacity": resources,
                "allocatable": resources,
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "True",
                        "reason": "KubeletReady",
                        "message": "fake node managed by the nativedra test harness",
                    }
                ],
            }
        },
    )
    remove_not_ready_taint(core, name)


def remove_not_ready_taint(core: client.CoreV1Api, name: str) -> None:
    """What the node-lifecycle controller does once a node is Ready (the local cluster runs none)."""
    node = core.read_node(name)
    taints = [t for t in (node.spec.taints or []) if t.key != NOT_READY_TAINT]
    core.patch_node(name, {"spec": {"taints": [client.ApiClient().sanitize_for_serialization(t) for t in taints]}})
