"""What the demo asks of the cluster: a JobSet and a LeaderWorkerSet run by their real
controllers, a gang too big for any rack, the shipped examples, then two JobSets sent to a Kueue
queue whose GPU quota is smaller than the cluster."""

from __future__ import annotations

from kubernetes import client, dynamic

from extender.plan.config import RACK_LABEL
from extender.pods.gang import GANG, GANG_SIZE, JOBSET_NAME, TOPOLOGY_REQUIRED
from nativedra.base.kube.names import GPU_CLASS, SHARE_CLASS
from nativedra.base.kube.resources import JOBSETS
from nativedra.cluster import kueue_config
from nativedra.objects import apply_documents, apply_file, claim_template, gpu_pod, request, shipped
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


QUEUED_NAMESPACE = "demo-queued"
QUEUE = "team-a"
QUEUE_SHARES = 2  # the team's quota: 2 GPU shares, far less than the L4 node's 4 shareable GPUs hold
QUEUED_JOBSETS = ("finetune-a", "finetune-b")  # 2 pods x 1 share each: one fits the quota at a time


def _queued_jobset(api: client.ApiClient, name: str) -> None:
    """A JobSet of 2 pods x one 8Gi GPU share sent to the team's LocalQueue: Kueue's webhook creates
    it suspended and Kueue starts it once its Workload is admitted. Shares, on the L4 node: the
    training JobSet's exclusive racks keep every other JobSet's pods off the H100 racks."""
    template = {
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {"name": "main", "image": "registry.invalid/cuda:12", "resources": {"claims": [{"name": "gpus"}]}}
            ],
            "resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": "share-8gi"}],
        }
    }
    job = {"parallelism": 1, "completions": 1, "backoffLimit": 0, "template": template}
    body = {
        "apiVersion": JOBSETS.api_version,
        "kind": JOBSETS.kind,
        "metadata": {"name": name, "labels": {kueue_config.QUEUE_LABEL: QUEUE}},
        "spec": {"replicatedJobs": [{"name": "workers", "replicas": 2, "template": {"spec": job}}]},
    }
    JOBSETS.create(api, body, QUEUED_NAMESPACE)


def queued_workloads(api: client.ApiClient) -> None:
    """Kueue in front: a ClusterQueue of QUEUE_SHARES GPU shares (nativedra.dev/gpu-share, counted
    from the claim templates through Kueue's deviceClassMappings: one per share, whatever memory it
    asks) and two JobSets of 2 shares sent to it: one is admitted and placed whole, the other waits
    suspended, with Kueue's reason."""
    claim_template(api, QUEUED_NAMESPACE, "share-8gi", [request("gpus", SHARE_CLASS, capacity={"memory": "8Gi"})])
    flavor = f"{QUEUE}-shares"
    quota = kueue_config.flavor_quota(flavor, {kueue_config.SHARES: str(QUEUE_SHARES)})
    apply_documents(
        api,
        [
            kueue_config.resource_flavor(flavor),
            kueue_config.cluster_queue(QUEUE, [([kueue_config.SHARES], [quota])]),
            kueue_config.local_queue(QUEUE, QUEUED_NAMESPACE, QUEUE),
        ],
    )
    for name in QUEUED_JOBSETS:
        _queued_jobset(api, name)


def kueue_verdicts(api: client.ApiClient) -> dict[str, str]:
    """JobSet -> what Kueue decided ("admitted", or why it waits); empty until Kueue has judged each."""
    workloads = dynamic.DynamicClient(api).resources.get(api_version=kueue_config.API_VERSION, kind="Workload")
    verdicts: dict[str, str] = {}
    for workload in workloads.get(namespace=QUEUED_NAMESPACE).items:
        owner = next((o["name"] for o in workload.metadata.get("ownerReferences") or []), "")
        conditions = {c["type"]: c for c in (workload.get("status") or {}).get("conditions") or []}
        if conditions.get("Admitted", {}).get("status") == "True":
            verdicts[owner] = "admitted"
        elif conditions.get("QuotaReserved", {}).get("status") == "False":
            verdicts[owner] = f"waits: {conditions['QuotaReserved'].get('message', '')}"
    return verdicts


def queued_settled(api: client.ApiClient) -> bool:
    """Kueue judged both JobSets and the admitted one's pods are bound."""
    verdicts = kueue_verdicts(api)
    if sorted(verdicts) != sorted(QUEUED_JOBSETS):
        return False
    admitted = [name for name, verdict in verdicts.items() if verdict == "admitted"]
    return all(
        len([p for p in pods_with(api, QUEUED_NAMESPACE, f"{JOBSET_NAME}={name}") if p.spec.node_name]) == 2
        for name in admitted
    )
