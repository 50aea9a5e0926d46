"""The real Kueue controller beside the real JobSet and LWS controllers on an e2e plane, and the
objects the Kueue tests submit: queues whose quota counts nativedra GPUs, JobSets and LWSs sent to
a LocalQueue, and what Kueue decided (its Workloads, their admission and topology assignment)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from kubernetes import client, dynamic

from nativedra.base.kube.resources import JOBSETS, LEADER_WORKER_SETS
from nativedra.cluster import ControlPlane
from nativedra.cluster.addons import KUEUE, Addon, start_addon, stop_addon
from nativedra.cluster.kueue_config import API_VERSION, QUEUE_LABEL
from nativedra.cluster.processes import alive
from nativedra.objects import apply_documents

REQUIRED_TOPOLOGY = "kueue.x-k8s.io/podset-required-topology"
JOB_UID = "kueue.x-k8s.io/job-uid"


def running(plane: ControlPlane, addon: Addon) -> bool:
    name = f"{addon.name}-controller"
    return any(p.name == name and alive(p.pid) for p in plane.supervisor.processes)


def ensure_addon(plane: ControlPlane, api: client.ApiClient, addon: Addon) -> None:
    """Start the controller unless this session's plane runs it already (JobSet and LWS stay for the
    session once a module started them: two controllers would reconcile the same objects)."""
    if not running(plane, addon):
        start_addon(plane, api, addon)


@contextlib.contextmanager
def kueue_running(plane: ControlPlane, api: client.ApiClient) -> Iterator[None]:
    """Kueue for the block only: its pod webhook sees every namespace, so it leaves with the block."""
    start_addon(plane, api, KUEUE)
    try:
        yield
    finally:
        stop_addon(plane, api, KUEUE)


def kueue_objects(api: client.ApiClient, kind: str) -> Any:
    return dynamic.DynamicClient(api).resources.get(api_version=API_VERSION, kind=kind)


def apply(api: client.ApiClient, *documents: dict[str, Any]) -> None:
    apply_documents(api, list(documents))


def delete_cluster_scoped(api: client.ApiClient, kind: str, names: list[str]) -> None:
    resource = kueue_objects(api, kind)
    for name in names:
        with contextlib.suppress(Exception):
            resource.delete(name=name)


def pod_template(
    claim_template: str,
    *,
    cpu: str | None = None,
    node_selector: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    restart_policy: str = "Never",
) -> dict[str, Any]:
    resources: dict[str, Any] = {"claims": [{"name": "gpus"}]}
    if cpu:
        resources["requests"] = {"cpu": cpu}
    return {
        "metadata": {"annotations": annotations or {}},
        "spec": {
            "restartPolicy": restart_policy,
            "terminationGracePeriodSeconds": 0,
            "nodeSelector": node_selector or {},
            "containers": [{"name": "main", "image": "registry.invalid/cuda:12", "resources": resources}],
            "resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": claim_template}],
        },
    }


def create_queued_jobset(
    api: client.ApiClient,
    namespace: str,
    name: str,
    queue: str,
    *,
    replicas: int,
    template: dict[str, Any],
) -> dict[str, Any]:
    """A JobSet of one replicated job (`replicas` Jobs of one pod) submitted to LocalQueue `queue`."""
    body = {
        "apiVersion": JOBSETS.api_version,
        "kind": JOBSETS.kind,
        "metadata": {"name": name, "labels": {QUEUE_LABEL: queue}},
        "spec": {
            "failurePolicy": {"maxRestarts": 0},
            "replicatedJobs": [
                {
                    "name": "workers",
                    "replicas": replicas,
                    "template": {"spec": {"parallelism": 1, "completions": 1, "backoffLimit": 0, "template": template}},
                }
            ],
        },
    }
    return JOBSETS.create(api, body, namespace)


def create_queued_lws(
    api: client.ApiClient, namespace: str, name: str, queue: str, *, replicas: int, size: int, template: dict[str, Any]
) -> dict[str, Any]:
    body = {
        "apiVersion": LEADER_WORKER_SETS.api_version,
        "kind": LEADER_WORKER_SETS.kind,
        "metadata": {"name": name, "labels": {QUEUE_LABEL: queue}},
        "spec": {"replicas": replicas, "leaderWorkerTemplate": {"size": size, "workerTemplate": template}},
    }
    return LEADER_WORKER_SETS.create(api, body, namespace)


def workloads(api: client.ApiClient, namespace: str) -> list[dict[str, Any]]:
    return [w.to_dict() for w in kueue_objects(api, "Workload").get(namespace=namespace).items]


def workload_of(api: client.ApiClient, namespace: str, owner_uid: str) -> dict[str, Any] | None:
    found = [w for w in workloads(api, namespace) if (w["metadata"].get("labels") or {}).get(JOB_UID) == owner_uid]
    return found[0] if found else None


def condition(workload: dict[str, Any] | None, kind: str) -> dict[str, Any] | None:
    if workload is None:
        return None
    return next((c for c in (workload.get("status") or {}).get("conditions") or [] if c["type"] == kind), None)


def admitted(workload: dict[str, Any] | None) -> bool:
    found = condition(workload, "Admitted")
    return found is not None and found["status"] == "True"


def topology_domains(workload: dict[str, Any]) -> list[tuple[dict[str, str], int]]:
    """Kueue's topology assignment of every podset: ({level label: value}, pods there), from the
    v1beta2 slice encoding (a level's values are either one universal value or prefix+root+suffix;
    Kueue keeps only the levels it needs, e.g. the hostname alone)."""
    domains: list[tuple[dict[str, str], int]] = []
    for assignment in ((workload.get("status") or {}).get("admission") or {}).get("podSetAssignments") or []:
        topology_assignment = assignment.get("topologyAssignment") or {}
        keys = topology_assignment.get("levels") or []
        for piece in topology_assignment.get("slices") or []:
            count = int(piece.get("domainCount") or 1)
            levels = []
            for level in piece.get("valuesPerLevel") or []:
                if level.get("universal") is not None:
                    levels.append([level["universal"]] * count)
                else:
                    individual = level.get("individual") or {}
                    prefix, suffix = individual.get("prefix") or "", individual.get("suffix") or ""
                    levels.append([f"{prefix}{root}{suffix}" for root in individual.get("roots") or []])
            pods = piece.get("podCounts") or {}
            counts = [pods["universal"]] * count if pods.get("universal") is not None else pods.get("individual") or []
            for *values, n in zip(*levels, counts, strict=True):
                domains.append((dict(zip(keys, values, strict=True)), int(n)))
    return domains
