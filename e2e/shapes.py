"""Pods shaped exactly as the JobSet and LeaderWorkerSet controllers create them (labels and
annotations), for tests and the demo where those controllers do not run."""

from __future__ import annotations

import contextlib

from kubernetes import client

from nativedra.objects import gpu_pod


def jobset_pods(
    api: client.ApiClient,
    namespace: str,
    jobset: str,
    template: str,
    *,
    replicas: int,
    parallelism: int,
    exclusive_topology: str | None = None,
    node_selector: dict[str, str] | None = None,
) -> list[str]:
    """A replicated job `workers`: one suspended Job per replica (for its parallelism) and its pods."""
    batch = client.BatchV1Api(api)
    names = []
    for job_index in range(replicas):
        job = f"{jobset}-workers-{job_index}"
        with contextlib.suppress(client.ApiException):
            batch.create_namespaced_job(
                namespace,
                {
                    "metadata": {"name": job, "labels": {"jobset.sigs.k8s.io/jobset-name": jobset}},
                    "spec": {
                        "parallelism": parallelism,
                        "completions": parallelism,
                        "suspend": True,
                        "template": {
                            "spec": {
                                "restartPolicy": "Never",
                                "containers": [{"name": "c", "image": "registry.invalid/x"}],
                            }
                        },
                    },
                },
            )
        labels = {
            "jobset.sigs.k8s.io/jobset-name": jobset,
            "jobset.sigs.k8s.io/replicatedjob-name": "workers",
            "jobset.sigs.k8s.io/replicatedjob-replicas": str(replicas),
            "jobset.sigs.k8s.io/job-index": str(job_index),
            "batch.kubernetes.io/job-name": job,
            "job-name": job,
        }
        annotations = dict(labels)
        if exclusive_topology:
            annotations["alpha.jobset.sigs.k8s.io/exclusive-topology"] = exclusive_topology
        for completion in range(parallelism):
            name = f"{job}-{completion}"
            gpu_pod(api, namespace, name, template, node_selector=node_selector, labels=labels, annotations=annotations)
            names.append(name)
    return names


def lws_pod(
    api: client.ApiClient,
    namespace: str,
    lws: str,
    template: str,
    *,
    size: int,
    worker: int,
    group: int = 0,
    node_selector: dict[str, str] | None = None,
) -> str:
    """The leader (worker 0) or a worker of one LeaderWorkerSet group; the controller makes the leader first."""
    leader = f"{lws}-{group}"
    labels = {
        "leaderworkerset.sigs.k8s.io/name": lws,
        "leaderworkerset.sigs.k8s.io/group-index": str(group),
        "leaderworkerset.sigs.k8s.io/worker-index": str(worker),
    }
    annotations = {"leaderworkerset.sigs.k8s.io/size": str(size)}
    if worker:
        annotations["leaderworkerset.sigs.k8s.io/leader-name"] = leader
    name = leader if worker == 0 else f"{leader}-{worker}"
    gpu_pod(api, namespace, name, template, node_selector=node_selector, labels=labels, annotations=annotations)
    return name
