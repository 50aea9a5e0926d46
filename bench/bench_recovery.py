"""Gang recovery after a GPU fault (`python -m bench recovery`): fault to whole again, p50/p95 over
FAULTS faults on a NODES-node simulated cluster that is busy, with queued work waiting and
background churn; figures to bench-results/recovery.json.

NODES nodes of 8 A100s, racks of 16 (`bench.busy_nodes`), all but the first rack running a pod that
holds all 8 GPUs. The real JobSet controller (with its webhooks), the real kube-controller-manager
(its device-taint eviction controller, default gates) and the real kube-scheduler calling a
`nativedra extender` process. In the free rack:
- the training JobSet, TRAINING pods x 8 GPUs exclusive in a rack, restarted whole by its failure
  policy;
- queued work of the same priority: a JobSet of QUEUED pods x 8 GPUs that needs one rack, more
  than the rack has free while the training runs, so it waits;
- churn: a 1-GPU pod created every CHURN_EVERY_S, the oldest deleted past CHURN_PODS.

Each fault: XID 79 on a GPU of one of the training JobSet's nodes under NoExecute (its slices
republished with the plugin's own builder). The pod there is evicted, its Job fails, JobSet recreates
every Job; timed from the taint's publication to every pod of the next attempt bound, at most
WHOLE_WITHIN_S. The node is healed before the next fault. Two modes in the same run, in turns: the
extender as shipped (returnHoldSeconds 60: the healthy nodes kept for the returning gang) and, as the
baseline, returnHoldSeconds 0 (the returning gang planned from scratch). Without the hold the
queued JobSet, older than the recreated pods, takes the freed nodes; the training then waits. A
fault not recovered within WHOLE_WITHIN_S counts as such, and the queued JobSet is deleted so the
training can come back (and created again, waiting, for the next fault).

Hot spares are not measured here (the free rack has room for the returning gang without one):
e2e/test_workload_controllers.py measures a rack whose only free node is the spare.
"""

from __future__ import annotations

import contextlib
import itertools
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from kubernetes import client

from bench.busy_nodes import RACK_SIZE, a100_inventory, busy_cluster, scheduler, workload_namespace
from bench.timing import Timing, write_results
from dra_driver.faults import xid_fault
from dra_driver.publishing.publish_config import PublishConfig
from dra_driver.publishing.publisher import SlicePublisher
from dra_driver.publishing.slices import build_slices
from extender.plan.config import RACK_LABEL
from nativedra.base.kube.names import GPU_CLASS
from nativedra.base.kube.resources import JOBSETS
from nativedra.cluster import ControlPlane, wait_for
from nativedra.cluster.addons import JOBSET, start_addon
from nativedra.cluster.waits import WaitTimeoutError
from nativedra.objects import apply_file, claim_template, device_classes, gpu_pod, request
from nativedra.workload_objects import ReplicatedJob, create_jobset, pods_with
from testkit.extender_harness import fresh_namespace

NODES = 64
TRAINING = 4
QUEUED = 12  # more than the free rack has while the training runs (16 less 4, less 2-3 nodes of churn)
FAULTS = 20
CHURN_EVERY_S = 0.5
CHURN_PODS = 16  # 1-GPU pods alive at once: two nodes' worth, packed
WHOLE_WITHIN_S = 30.0
RESTART_ATTEMPT = "jobset.sigs.k8s.io/restart-attempt"
JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
MODES = (("returns", 60), ("from scratch", 0))


class Churn:
    """1-GPU pods created and deleted in the background, as other teams' work arrives and ends."""

    def __init__(self, api: client.ApiClient, namespace: str) -> None:
        self.api, self.namespace = api, namespace
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="churn", daemon=True)

    def _run(self) -> None:
        core = client.CoreV1Api(self.api)
        alive: list[str] = []
        for index in itertools.count():
            if self.stop.wait(CHURN_EVERY_S):
                return
            name = f"churn-{index}"
            with contextlib.suppress(client.ApiException):
                gpu_pod(self.api, self.namespace, name, "one")
                alive.append(name)
            while len(alive) > CHURN_PODS:
                with contextlib.suppress(client.ApiException):
                    core.delete_namespaced_pod(alive.pop(0), self.namespace, grace_period_seconds=0)


def publish_gpus(api: client.ApiClient, node: str, faulty_gpu: int | None) -> None:
    inventory = a100_inventory()
    if faulty_gpu is not None:
        gpus = tuple(g.with_fault(xid_fault(79)) if g.index == faulty_gpu else g for g in inventory.gpus)
        inventory = inventory.model_copy(update={"gpus": gpus})
    config = PublishConfig(fractions=(), fatal_fault_effect="NoExecute")
    SlicePublisher(api, node).reconcile(build_slices(inventory, config, node))


def whole(api: client.ApiClient, namespace: str, attempt: int, within_s: float) -> set[str]:
    """The nodes of the training JobSet's pods of restart `attempt`, once all are bound."""
    selector = f"{JOBSET_NAME}=training,{RESTART_ATTEMPT}={attempt}"

    def bound() -> set[str] | None:
        nodes = {p.spec.node_name for p in pods_with(api, namespace, selector) if p.spec.node_name}
        return nodes if len(nodes) == TRAINING else None

    def explain() -> str:
        pods = client.CoreV1Api(api).list_namespaced_pod(namespace, label_selector=selector).items
        return "\n".join(
            f"{p.metadata.name} node={p.spec.node_name}: "
            + next((c.message or "" for c in p.status.conditions or [] if c.type == "PodScheduled"), "")
            for p in pods
        )

    return wait_for(bound, within_s, f"restart attempt {attempt} whole", explain)


def _queue(api: client.ApiClient, namespace: str) -> None:
    """The queued JobSet: one rack of QUEUED nodes, which the free rack cannot give while training runs."""
    queued = ReplicatedJob("workers", replicas=1, parallelism=QUEUED, template="eight")
    create_jobset(api, namespace, "queued", [queued], {}, exclusive_topology=RACK_LABEL)


def _unqueue(api: client.ApiClient, namespace: str) -> None:
    JOBSETS.delete_namespaced(api, "queued", namespace)
    wait_for(lambda: not pods_with(api, namespace, f"{JOBSET_NAME}=queued"), 60, "the queued JobSet's pods gone")


def _faults(api: client.ApiClient, namespace: str) -> Iterator[dict[str, Any]]:
    """Each fault's figures, as the training comes back."""
    before = whole(api, namespace, 0, 180)
    _queue(api, namespace)
    for attempt in range(FAULTS):
        failing = sorted(before)[attempt % TRAINING]
        publish_gpus(api, failing, attempt % 8)
        started = time.monotonic()
        try:
            after = whole(api, namespace, attempt + 1, WHOLE_WITHIN_S)
            recovered = True
        except WaitTimeoutError:
            _unqueue(api, namespace)  # let the training come back, then queue again
            after = whole(api, namespace, attempt + 1, 180)
            recovered = False
        seconds = time.monotonic() - started
        publish_gpus(api, failing, None)
        if not recovered:
            _queue(api, namespace)
        yield {"seconds": seconds, "recovered": recovered, "healthy_nodes_reused": len((before - {failing}) & after)}
        before = after


def _mode(plane: ControlPlane, api: client.ApiClient, scratch: Path, hold: int) -> Iterator[dict[str, Any]]:
    extender_config = {"returnHoldSeconds": hold, "planTimeoutSeconds": 600}
    with (
        fresh_namespace(api, "nativedra-rec") as leases,
        scheduler(plane, api, scratch, extender_config, leases),
        workload_namespace(api, "recovery") as namespace,
    ):
        claim_template(api, namespace, "eight", [request("gpus", GPU_CLASS, count=8)])
        claim_template(api, namespace, "one", [request("gpus", GPU_CLASS, count=1)])
        training = ReplicatedJob("workers", replicas=1, parallelism=TRAINING, template="eight")
        create_jobset(api, namespace, "training", [training], {}, exclusive_topology=RACK_LABEL, max_restarts=FAULTS)
        churn = Churn(api, namespace)
        churn.thread.start()
        try:
            yield from _faults(api, namespace)
        finally:
            churn.stop.set()
            churn.thread.join()
            with contextlib.suppress(client.ApiException):
                JOBSETS.delete_namespaced(api, "queued", namespace)
            JOBSETS.delete_namespaced(api, "training", namespace)


def run(api: client.ApiClient, plane: ControlPlane) -> Iterator[str]:
    apply_file(api, device_classes())
    start_addon(plane, api, JOBSET)
    figures: dict[str, Any] = {
        "nodes": NODES,
        "free_rack_nodes": RACK_SIZE,
        "training": f"{TRAINING} x 8 GPUs",
        "queued": f"{QUEUED} x 8 GPUs, same priority",
        "faults": FAULTS,
        "churn_pods": CHURN_PODS,
        "whole_within_s": WHOLE_WITHIN_S,
    }
    with busy_cluster(api, NODES, RACK_SIZE, "rec"), tempfile.TemporaryDirectory(prefix="nativedra-rec-") as scratch:
        yield f"{NODES} nodes of 8 GPUs, racks of {RACK_SIZE}, all but the first rack busy"
        for mode, hold in MODES:
            faults = list(_mode(plane, api, Path(scratch) / mode.replace(" ", "-"), hold))
            figures[mode] = summary(faults)
            yield f"  {mode:<13} {line(figures[mode])}"
    write_results("recovery", figures)


def summary(faults: list[dict[str, Any]]) -> dict[str, Any]:
    """One mode's figures from its faults (each: seconds, recovered, healthy_nodes_reused)."""
    timing = Timing(tuple(f["seconds"] for f in faults))
    ordered = sorted(timing.samples_s)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return {
        "p50_s": round(timing.p50_ms / 1000, 2),
        "p95_s": round(p95, 2),
        "max_s": round(ordered[-1], 2),
        f"whole_within_{WHOLE_WITHIN_S:.0f}_s": f"{sum(f['recovered'] for f in faults)} of {len(faults)}",
        "healthy_nodes_reused": f"{sum(f['healthy_nodes_reused'] for f in faults)} of {(TRAINING - 1) * len(faults)}",
        "samples_s": [round(f["seconds"], 2) for f in faults],
    }


def line(figures: dict[str, Any]) -> str:
    """A mode's `summary` in one line of progress."""
    return (
        f"fault to whole again p50 {figures['p50_s']:.1f} s, p95 {figures['p95_s']:.1f} s, "
        f"max {figures['max_s']:.1f} s; "
        f"whole within {WHOLE_WITHIN_S:.0f} s {figures[f'whole_within_{WHOLE_WITHIN_S:.0f}_s']}; healthy nodes "
        f"reused {figures['healthy_nodes_reused']}"
    )
