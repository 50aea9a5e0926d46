"""Gang recovery with and without a hot spare (`python -m bench recovery_spares`): fault to whole
again, p50/p95 over FAULTS faults on a NODES-node simulated cluster whose free rack is full of work
of the training's priority; figures to bench-results/recovery_spares.json.

The cluster, the components, the training JobSet (TRAINING pods x 8 GPUs, exclusive in a rack,
restarted whole by its failure policy) and the faults are those of `bench.bench_recovery`, with the
training and the busy racks' pods at a PriorityClass of value PRIORITY. The rest of the free
rack: TEAM pods of 8 GPUs of the same priority, one node's worth more than the rack has room for
beside the training and a spare; and churn of lower priority (`bench_recovery.Churn`, 1-GPU pods).
Two modes in the same run:
- one spare (`nativedra.dev/spares: "1"`): the training's record keeps a node of the rack from the
  team's pods, the churn borrows it; on a fault the extender preempts the borrowers and the training
  comes back onto its healthy nodes and the spare. The node it left becomes its spare once the record
  says so; it is healed after that;
- no spare: the team's pods fill the rack; on a fault the training finds no room in any rack. Not
  whole within WHOLE_WITHIN_S, a team pod is deleted so that it can come back, and created again
  (onto the healed node) for the next fault.
"""

from __future__ import annotations

import contextlib
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from kubernetes import client

from bench.bench_recovery import FAULTS, TRAINING, WHOLE_WITHIN_S, Churn, line, publish_gpus, summary, whole
from bench.busy_nodes import RACK_SIZE, busy_cluster, scheduler, workload_namespace
from bench.timing import write_results
from extender.cluster.reservation import from_lease
from extender.plan.config import RACK_LABEL
from extender.recover.records import SPARES
from nativedra.base.kube.names import GPU_CLASS
from nativedra.base.kube.resources import JOBSETS
from nativedra.cluster import ControlPlane, wait_for
from nativedra.cluster.addons import JOBSET, start_addon
from nativedra.cluster.waits import WaitTimeoutError
from nativedra.objects import apply_file, claim_template, device_classes, gpu_pod, request
from nativedra.workload_objects import ReplicatedJob, create_jobset
from testkit.extender_harness import ExtenderCluster, bound, delete_pods, fresh_namespace
from testkit.priority_classes import priority_classes

NODES = 64
PRIORITY = 100
TEAM = RACK_SIZE - TRAINING  # one more than fits beside the training and a spare
MODES = (("one spare", 1), ("no spare", 0))


def _spares(api: client.ApiClient, leases: str) -> set[str]:
    """The nodes the training's return record keeps as spares."""
    serialize = client.ApiClient().sanitize_for_serialization
    items = client.CoordinationV1Api(api).list_namespaced_lease(leases).items
    records = [from_lease(serialize(lease)) for lease in items if lease.metadata.name.startswith("return-")]
    return {name for kept in records if kept.returning and not kept.holds for name in kept.spares}


def _faults(
    api: client.ApiClient, namespace: str, extender: ExtenderCluster, spares: int, job: str
) -> Iterator[dict[str, Any]]:
    leases = extender.namespace

    def log() -> str:
        return extender.log.read_text()[-3000:]

    before = whole(api, namespace, 0, 180)
    if spares:
        wait_for(lambda: _spares(api, leases), 30, "the training's spare", log)
    team = [f"team-{index}" for index in range(TEAM)]
    for name in team:
        gpu_pod(api, namespace, name, "eight", priority_class=job)
    placed = TEAM - spares  # the rest is kept off the spare
    wait_for(lambda: len(bound(api, namespace, team)) == placed, 120, f"{placed} of the team's pods bound", log)
    for attempt in range(FAULTS):
        failing = sorted(before)[attempt % TRAINING]
        publish_gpus(api, failing, attempt % 8)
        started = time.monotonic()
        try:
            after = whole(api, namespace, attempt + 1, WHOLE_WITHIN_S)
            recovered = True
        except WaitTimeoutError:
            pods = client.CoreV1Api(api).list_namespaced_pod(
                namespace, label_selector="!jobset.sigs.k8s.io/jobset-name"
            )
            room = next(p.metadata.name for p in pods.items if p.metadata.name.startswith("team-") and p.spec.node_name)
            delete_pods(api, namespace, [room])  # let the training come back; the pod returns for the next fault
            after = whole(api, namespace, attempt + 1, 180)
            gpu_pod(api, namespace, room, "eight", priority_class=job)
            recovered = False
        seconds = time.monotonic() - started
        if spares:  # the node it left is its spare before it is healed
            wait_for(lambda: failing in _spares(api, leases), 30, "the node it left kept as its spare", log)  # noqa: B023
        publish_gpus(api, failing, None)
        yield {"seconds": seconds, "recovered": recovered, "healthy_nodes_reused": len((before - {failing}) & after)}
        before = after


def _mode(plane: ControlPlane, api: client.ApiClient, scratch: Path, spares: int, job: str) -> Iterator[dict[str, Any]]:
    # Spares granted to the training's priority; shares wide enough for its one spare in a rack.
    grant = {"minPriority": PRIORITY, "maxDomainShare": 1.0, "maxClusterShare": 1.0}
    extender_config = {"returnHoldSeconds": 60, "planTimeoutSeconds": 600, "spares": grant}
    with (
        fresh_namespace(api, "nativedra-spare") as leases,
        scheduler(plane, api, scratch, extender_config, leases) as extender,
        workload_namespace(api, "spares") as namespace,
    ):
        claim_template(api, namespace, "eight", [request("gpus", GPU_CLASS, count=8)])
        claim_template(api, namespace, "one", [request("gpus", GPU_CLASS, count=1)])
        create_jobset(
            api,
            namespace,
            "training",
            [ReplicatedJob("workers", replicas=1, parallelism=TRAINING, template="eight")],
            {},
            exclusive_topology=RACK_LABEL,
            max_restarts=FAULTS,
            priority_class=job,
            pod_annotations={SPARES: str(spares)},
        )
        churn = Churn(api, namespace)
        churn.thread.start()
        try:
            assert extender is not None
            yield from _faults(api, namespace, extender, spares, job)
        finally:
            churn.stop.set()
            churn.thread.join()
            with contextlib.suppress(client.ApiException):
                JOBSETS.delete_namespaced(api, "training", namespace)


def run(api: client.ApiClient, plane: ControlPlane) -> Iterator[str]:
    apply_file(api, device_classes())
    start_addon(plane, api, JOBSET)
    figures: dict[str, Any] = {
        "nodes": NODES,
        "free_rack_nodes": RACK_SIZE,
        "training": f"{TRAINING} x 8 GPUs, priority {PRIORITY}",
        "team": f"{TEAM} x 8 GPUs, priority {PRIORITY}",
        "faults": FAULTS,
        "whole_within_s": WHOLE_WITHIN_S,
    }
    with (
        priority_classes(api, {"job": PRIORITY}, "spares") as classes,
        busy_cluster(api, NODES, RACK_SIZE, "spr", classes["job"]),
        tempfile.TemporaryDirectory(prefix="nativedra-spr-") as scratch,
    ):
        yield f"{NODES} nodes of 8 GPUs, racks of {RACK_SIZE}, all but the first rack busy at priority {PRIORITY}"
        for mode, spares in MODES:
            faults = list(_mode(plane, api, Path(scratch) / mode.replace(" ", "-"), spares, classes["job"]))
            figures[mode] = summary(faults)
            yield f"  {mode:<10} {line(figures[mode])}"
    write_results("recovery_spares", figures)
