"""Gang recovery after a GPU fault (`python -m bench recovery`): fault to whole again, p50/p95 over
FAULTS faults on a NODES-node simulated cluster with background churn; figures to
bench-results/recovery.json.

NODES nodes of 8 A100s in racks of RACK_NODES; the real JobSet controller (with its webhooks), the real
kube-controller-manager (its device-taint eviction controller, default gates) and the real
kube-scheduler calling a `nativedra extender` process. One JobSet of GANG pods x 8 GPUs, exclusive in
a rack, restarted whole by its failure policy. Background churn the whole time: a 1-GPU pod created
every CHURN_EVERY_S, the oldest deleted past CHURN_PODS, so freed GPUs are taken between calls.

Each fault: a GPU of one of the JobSet's nodes gets XID 79 under NoExecute (its slices republished
with the plugin's own builder), the pod there is evicted, the Job fails and JobSet recreates every
Job; timed from the taint's publication to every pod of the next attempt bound. The node is healed
before the next fault. Both modes run in the same session on the same cluster, in turns: the
extender as shipped (returnHoldSeconds 60: the healthy nodes kept for the gang's return) and,
as the baseline, returnHoldSeconds 0 (the returning gang planned from scratch, best fit). For each,
p50/p95/max seconds and how often the gang came back to the same rack and to its healthy nodes.

Hot spares are not measured: not built yet.
"""

from __future__ import annotations

import contextlib
import itertools
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from kubernetes import client

from bench.busy_nodes import a100_inventory, gpu_node, scheduler, workload_namespace
from bench.timing import Timing, write_results
from dra_driver.faults import xid_fault
from dra_driver.publishing.publish_config import PublishConfig
from dra_driver.publishing.publisher import SlicePublisher
from dra_driver.publishing.slices import build_slices
from extender.plan.config import RACK_LABEL
from nativedra.base.kube.names import GPU_CLASS
from nativedra.cluster import ControlPlane, wait_for
from nativedra.cluster.addons import JOBSET, start_addon
from nativedra.objects import claim_template, gpu_pod, request
from nativedra.workload_objects import ReplicatedJob, create_jobset, pods_with

NODES = 64
RACK_NODES = 8
GANG = 4
FAULTS = 20
CHURN_EVERY_S = 0.5
CHURN_PODS = 96  # 1-GPU pods alive at once: about a fifth of the cluster's GPUs
WHOLE_WITHIN_S = 120.0
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


def _publish(api: client.ApiClient, node: str, faulty_gpu: int | None) -> None:
    inventory = a100_inventory()
    if faulty_gpu is not None:
        gpus = tuple(g.with_fault(xid_fault(79)) if g.index == faulty_gpu else g for g in inventory.gpus)
        inventory = inventory.model_copy(update={"gpus": gpus})
    config = PublishConfig(fractions=(), fatal_fault_effect="NoExecute")
    SlicePublisher(api, node).reconcile(build_slices(inventory, config, node))


def _bound(api: client.ApiClient, namespace: str, selector: str) -> dict[str, str]:
    return {p.metadata.name: p.spec.node_name for p in pods_with(api, namespace, selector) if p.spec.node_name}


def _whole(api: client.ApiClient, namespace: str, attempt: int) -> set[str]:
    """The nodes of the JobSet's pods of restart `attempt`, once all are bound."""
    selector = f"{JOBSET_NAME}=train,{RESTART_ATTEMPT}={attempt}"

    def bound() -> set[str] | None:
        nodes = _bound(api, namespace, selector)
        return set(nodes.values()) if len(nodes) == GANG else None

    return wait_for(bound, WHOLE_WITHIN_S, f"restart attempt {attempt} whole")


def _faults(api: client.ApiClient, namespace: str, rack_of: dict[str, str]) -> Iterator[dict[str, Any]]:
    """Each fault's figures, as the gang comes back."""
    for attempt in range(FAULTS):
        before = _whole(api, namespace, attempt)
        failing = sorted(before)[attempt % GANG]
        _publish(api, failing, attempt % 8)
        started = time.monotonic()
        after = _whole(api, namespace, attempt + 1)
        seconds = time.monotonic() - started
        _publish(api, failing, None)
        yield {
            "seconds": seconds,
            "same_rack": {rack_of[n] for n in after} == {rack_of[n] for n in before},
            "healthy_nodes_reused": len((before - {failing}) & after),
        }


def _mode(
    plane: ControlPlane, api: client.ApiClient, scratch: Path, hold: int, rack_of: dict[str, str]
) -> Iterator[dict[str, Any]]:
    with (
        scheduler(
            plane,
            api,
            scratch,
            {"returnHoldSeconds": hold, "planTimeoutSeconds": 600},
            f"nd-rec-{uuid.uuid4().hex[:6]}",
        ),
        workload_namespace(api, "recovery") as namespace,
    ):
        claim_template(api, namespace, "eight", [request("gpus", GPU_CLASS, count=8)])
        claim_template(api, namespace, "one", [request("gpus", GPU_CLASS, count=1)])
        churn = Churn(api, namespace)
        churn.thread.start()
        try:
            workers = ReplicatedJob("workers", replicas=1, parallelism=GANG, template="eight")
            create_jobset(
                api, namespace, "train", [workers], {}, exclusive_topology=RACK_LABEL, max_restarts=FAULTS + 1
            )
            yield from _faults(api, namespace, rack_of)
        finally:
            churn.stop.set()
            churn.thread.join()


def run(api: client.ApiClient, plane: ControlPlane) -> Iterator[str]:
    start_addon(plane, api, JOBSET)
    inventory = a100_inventory()
    rack_of = {f"rec-n{i:02d}": f"rec-rack-{i // RACK_NODES}" for i in range(NODES)}
    core = client.CoreV1Api(api)
    for node, rack in rack_of.items():
        gpu_node(api, inventory, node, {RACK_LABEL: rack})
    figures: dict[str, Any] = {"nodes": NODES, "gang": f"{GANG} x 8 GPUs", "faults": FAULTS, "churn_pods": CHURN_PODS}
    try:
        with tempfile.TemporaryDirectory(prefix="nativedra-recovery-") as scratch:
            for mode, hold in MODES:
                faults = list(_mode(plane, api, Path(scratch) / mode.replace(" ", "-"), hold, rack_of))
                timing = Timing(tuple(f["seconds"] for f in faults))
                ordered = sorted(timing.samples_s)
                p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
                same_rack = sum(f["same_rack"] for f in faults)
                reused = sum(f["healthy_nodes_reused"] for f in faults)
                figures[mode] = {
                    "p50_s": timing.p50_ms / 1000,
                    "p95_s": p95,
                    "max_s": ordered[-1],
                    "same_rack": same_rack,
                    "healthy_nodes_reused": f"{reused} of {(GANG - 1) * FAULTS}",
                    "samples_s": [round(f["seconds"], 2) for f in faults],
                }
                yield (
                    f"  {mode:<13} fault to whole again p50 {timing.p50_ms / 1000:.1f} s, p95 {p95:.1f} s, max "
                    f"{ordered[-1]:.1f} s; same rack {same_rack}/{FAULTS}; healthy nodes reused {reused} of "
                    f"{(GANG - 1) * FAULTS}"
                )
    finally:
        for node in rack_of:
            with contextlib.suppress(client.ApiException):
                core.delete_node(node)
    write_results("recovery", figures)
