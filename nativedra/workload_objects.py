"""JobSets and LeaderWorkerSets for the demo and the tests, run by their real controllers
(`nativedra cluster up --with jobset,lws`), each pod asking for GPUs through a claim template."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kubernetes import client

from extender.pods.gang import JOBSET_EXCLUSIVE, LWS_EXCLUSIVE
from nativedra.base.kube.resources import JOBSETS, LEADER_WORKER_SETS


@dataclass(frozen=True)
class ReplicatedJob:
    name: str
    replicas: int
    parallelism: int
    template: str  # ResourceClaimTemplate of each pod


def _pod_template(
    template: str,
    node_selector: dict[str, str],
    restart_policy: str = "Never",
    priority_class: str | None = None,
    annotations: dict[str, str] | None = None,
    *,
    grace_seconds: int = 0,
) -> dict[str, Any]:
    return {
        **({"metadata": {"annotations": annotations}} if annotations else {}),
        "spec": {
            **({"priorityClassName": priority_class} if priority_class else {}),
            "restartPolicy": restart_policy,
            "terminationGracePeriodSeconds": grace_seconds,
            "nodeSelector": node_selector,
            "containers": [
                {"name": "main", "image": "registry.invalid/cuda:12", "resources": {"claims": [{"name": "gpus"}]}}
            ],
            "resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": template}],
        },
    }


def create_jobset(
    api: client.ApiClient,
    namespace: str,
    name: str,
    replicated: Sequence[ReplicatedJob],
    node_selector: dict[str, str],
    *,
    exclusive_topology: str | None = None,
    suspend: bool = False,
    max_restarts: int = 0,
    priority_class: str | None = None,
    pod_annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    """`pod_annotations`: on every pod (e.g. nativedra.dev/spares)."""
    annotations = {JOBSET_EXCLUSIVE: exclusive_topology} if exclusive_topology else {}
    body = {
        "apiVersion": JOBSETS.api_version,
        "kind": JOBSETS.kind,
        "metadata": {"name": name, "annotations": annotations},
        "spec": {
            "suspend": suspend,
            "failurePolicy": {"maxRestarts": max_restarts},
            "replicatedJobs": [
                {
                    "name": job.name,
                    "replicas": job.replicas,
                    "template": {
                        "spec": {
                            "parallelism": job.parallelism,
                            "completions": job.parallelism,
                            "backoffLimit": 0,
                            "template": _pod_template(
                                job.template, node_selector, priority_class=priority_class, annotations=pod_annotations
                            ),
                        }
                    },
                }
                for job in replicated
            ],
        },
    }
    return JOBSETS.create(api, body, namespace)


def create_lws(
    api: client.ApiClient,
    namespace: str,
    name: str,
    *,
    replicas: int,
    size: int,
    template: str,
    node_selector: dict[str, str],
    exclusive_topology: str | None = None,
    grace_seconds: int = 0,
) -> dict[str, Any]:
    """`grace_seconds`: the pods' termination grace. LeaderWorkerSet recreates a group only when it
    sees a pod Terminating (deletionTimestamp set): a pod deleted at once (grace 0, no kubelet to
    wait for) can vanish before its controller reads it, and only that pod comes back."""
    annotations = {LWS_EXCLUSIVE: exclusive_topology} if exclusive_topology else {}
    body = {
        "apiVersion": LEADER_WORKER_SETS.api_version,
        "kind": LEADER_WORKER_SETS.kind,
        "metadata": {"name": name, "annotations": annotations},
        "spec": {
            "replicas": replicas,
            "leaderWorkerTemplate": {
                "size": size,
                "workerTemplate": _pod_template(template, node_selector, "Always", grace_seconds=grace_seconds),
            },
        },
    }
    return LEADER_WORKER_SETS.create(api, body, namespace)


def pods_with(api: client.ApiClient, namespace: str, selector: str) -> list[client.V1Pod]:
    """Live pods (not terminating, not finished) matching a label selector."""
    pods = client.CoreV1Api(api).list_namespaced_pod(namespace, label_selector=selector).items
    return [p for p in pods if not p.metadata.deletion_timestamp and p.status.phase not in ("Succeeded", "Failed")]
