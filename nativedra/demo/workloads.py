"""What the demo asks of the cluster: gangs with topology, then the shipped examples."""

from __future__ import annotations

from kubernetes import client

from extender.config import RACK_LABEL
from extender.gang import GANG, GANG_SIZE, TOPOLOGY_REQUIRED
from nativedra.objects import apply_file, claim_template, gpu_pod, request, shipped

DEMO_NAMESPACE = "demo"
EXAMPLES = (
    "one-gpu.yaml",
    "two-gpus-same-numa.yaml",
    "mig-partition.yaml",
    "quarter-gpu.yaml",
    "share-10gi.yaml",
    "shared-claim.yaml",
)


def settled(api: client.ApiClient) -> bool:
    """Every demo pod is bound or has the scheduler's verdict."""
    pods = client.CoreV1Api(api).list_namespaced_pod(DEMO_NAMESPACE).items
    return bool(pods) and all(
        pod.spec.node_name
        or any(c.type == "PodScheduled" and c.reason == "Unschedulable" for c in pod.status.conditions or [])
        for pod in pods
    )


def _gang(api: client.ApiClient, name: str, size: int, template: str, topology: dict[str, str]) -> None:
    for index in range(size):
        labels = {GANG: name, GANG_SIZE: str(size)}
        gpu_pod(api, DEMO_NAMESPACE, f"{name}-{index}", template, labels=labels, annotations=topology)


def gang_workloads(api: client.ApiClient) -> None:
    """A training gang of 4 pods x 2 GPUs that must share a rack, a 2-pod serving gang, and a
    pretraining gang too big for any rack (it waits whole, with the reason)."""
    claim_template(api, DEMO_NAMESPACE, "two-gpus", [request("gpus", "gpu.nativedra.dev", count=2)])
    _gang(api, "train", 4, "two-gpus", {TOPOLOGY_REQUIRED: RACK_LABEL})
    _gang(api, "serve", 2, "two-gpus", {})
    # 3 pods x 4 GPUs in one rack can never fit: a rack has 2 H100 nodes with 6 whole GPUs each.
    claim_template(api, DEMO_NAMESPACE, "four-gpus", [request("gpus", "gpu.nativedra.dev", count=4)])
    _gang(api, "pretrain", 3, "four-gpus", {TOPOLOGY_REQUIRED: RACK_LABEL})


def apply_examples(api: client.ApiClient) -> None:
    for example in EXAMPLES:
        apply_file(api, shipped(f"examples/{example}"), DEMO_NAMESPACE)
