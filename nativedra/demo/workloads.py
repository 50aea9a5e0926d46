"""What the demo asks of the cluster: a JobSet and a LeaderWorkerSet run by their real
controllers, a gang too big for any rack, then the shipped examples."""

from __future__ import annotations

from kubernetes import client

from extender.config import RACK_LABEL
from extender.gang import GANG, GANG_SIZE, JOBSET_NAME, TOPOLOGY_REQUIRED
from kube.names import GPU_CLASS
from nativedra.objects import apply_file, claim_template, gpu_pod, request, shipped
from nativedra.workload_objects import ReplicatedJob, create_jobset, create_lws, pods_with

DEMO_NAMESPACE = "demo"
EXAMPLES = (
    "one-gpu.yaml",
    "two-gpus-same-numa.yaml",
    "mig-partition.yaml",
    "quarter-gpu.yaml",
    "share-10gi.yaml",
    "shared-claim.yaml",
)


TRAINING_PODS = 4  # 2 Jobs x 2 pods; JobSet creates a Job's followers once its leader is bound


def bound_pods(api: client.ApiClient) -> frozenset[str]:
    return frozenset(
        p.metadata.name for p in client.CoreV1Api(api).list_namespaced_pod(DEMO_NAMESPACE).items if p.spec.node_name
    )


def settled(api: client.ApiClient) -> bool:
    """Every demo pod is bound or has the scheduler's verdict, the JobSet's followers included."""
    pods = client.CoreV1Api(api).list_namespaced_pod(DEMO_NAMESPACE).items
    training = pods_with(api, DEMO_NAMESPACE, f"{JOBSET_NAME}=train")
    return (
        bool(pods)
        and len(training) == TRAINING_PODS
        and all(
            pod.spec.node_name
            or any(c.type == "PodScheduled" and c.reason == "Unschedulable" for c in pod.status.conditions or [])
            for pod in pods
        )
    )


def _gang(api: client.ApiClient, name: str, size: int, template: str, topology: dict[str, str]) -> None:
    for index in range(size):
        labels = {GANG: name, GANG_SIZE: str(size)}
        gpu_pod(api, DEMO_NAMESPACE, f"{name}-{index}", template, labels=labels, annotations=topology)


def gang_workloads(api: client.ApiClient) -> None:
    """A training JobSet of 2 Jobs x 2 pods x 2 GPUs with exclusive rack placement (each Job alone
    in a rack), a LeaderWorkerSet group of 2 pods, and a pretraining gang too big for any rack (it
    waits whole, with the reason)."""
    claim_template(api, DEMO_NAMESPACE, "two-gpus", [request("gpus", GPU_CLASS, count=2)])
    workers = ReplicatedJob("workers", replicas=2, parallelism=2, template="two-gpus")
    create_jobset(api, DEMO_NAMESPACE, "train", [workers], {}, exclusive_topology=RACK_LABEL)
    create_lws(api, DEMO_NAMESPACE, "serve", replicas=1, size=2, template="two-gpus", node_selector={})
    # 3 pods x 4 GPUs in one rack can never fit: a rack has 2 H100 nodes with 6 whole GPUs each.
    claim_template(api, DEMO_NAMESPACE, "four-gpus", [request("gpus", GPU_CLASS, count=4)])
    _gang(api, "pretrain", 3, "four-gpus", {TOPOLOGY_REQUIRED: RACK_LABEL})


def apply_examples(api: client.ApiClient) -> None:
    for example in EXAMPLES:
        apply_file(api, shipped(f"examples/{example}"), DEMO_NAMESPACE)
