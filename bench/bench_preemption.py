"""Priority preemption for DRA pods and gangs (`python -m bench preemption`), in one run.

Kubernetes 1.37 never preempts for devices (the DRA filter's failure is unresolvable, so
DefaultPreemption finds no candidate); the extender chooses victims and evicts them itself. Four
parts, figures to bench-results/preemption.json:

1. A busy 500-node cluster (`bench.busy_nodes`: 8 A100s a node, racks of 16), every node but the
   first IDLE running one low-priority pod that holds its 8 GPUs, bound directly with its claim
   allocated: no rack has room for a gang of 8 pods x 8 GPUs. The real scheduler calls a
   `nativedra extender` process. A high-priority 8 x 8 gang requiring one rack is created; the
   seconds from its first member's creation to the last bound, the pods evicted (gone from the busy
   namespace, and Preempted events) against the fewest that could make room, and, as a baseline in
   the same run, the same gang placed at once on the room it leaves when deleted. Victims are pods
   with terminationGracePeriodSeconds 0: evicted, they end at once (no kubelet runs here).
2. The extender's /filter latency for a 1-GPU pod (one the scheduler never places, schedulerName
   "nobody", so it stays the same pod), POSTed over one kept-alive mutual-TLS connection every
   CALL_EVERY_S for WINDOW_S with every node name (the scheduler sends only those its own filters
   pass), while high-priority 8-GPU pods, one every STREAM_EVERY_S, each pinned to a full rack, ask
   for devices: with `preemption: true` each evicts a low pod and is bound; the baseline, same run,
   same stream, is the extender with `preemption: false` (they wait).
3. Victim choice against brute force on random small clusters (2-3 nodes of 1/2/4-GPU pods, or two
   racks of two nodes for a 2 x 8 gang; random priorities, start times, a running 2-pod gang, a
   PodDisruptionBudget), in this process: how often `preemption_plan.decide` evicts at the least
   cost brute force finds over every set of lower-priority pods in every region (DefaultPreemption's
   order), by its exact search and by the reprieve method (`victims.cheapest(exact_tests=0)`), and
   how long a decision takes.
4. Side by side, small: one high-priority 8-GPU pod on 2 nodes full of low-priority 1-GPU pods, and
   a high-priority 2 x 8 gang on 4 such nodes, at once (each pinned to its own nodes), in four modes:
   Kubernetes 1.37 DRA alone (the scheduler without the extender), the device plugin's way (nodes
   advertising `nvidia.com/gpu: 8` as an extended resource, pods requesting it: DefaultPreemption),
   native gang scheduling (a second plane with the GenericWorkload gates, DRA pods in PodGroups),
   and nativedra (the extender). Each waits at most SIDE_WAIT_S; what is not bound by then is
   reported with the scheduler's message.
"""

from __future__ import annotations

import contextlib
import functools
import http.client
import itertools
import json
import os
import random
import socket
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Generator, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from unittest import mock

from kubernetes import client, config
from prometheus_client.parser import text_string_to_metric_families

from bench.busy_cluster import CALL_TIMEOUT_S, Client
from bench.busy_nodes import GPUS, RACK_SIZE, a100_inventory, busy_cluster, gpu_node, scheduler, workload_namespace
from bench.cpu_use import growth
from bench.timing import Timing, write_results
from extender.cluster.reservation import LABEL as PREEMPTION_LABEL
from extender.cluster.state import ClusterState
from extender.cluster.view import ClusterView
from extender.devices.cel_eval import Selectors
from extender.plan.capacity import Matcher
from extender.plan.config import RACK_LABEL, ExtenderConfig
from extender.plan.current import CurrentPlan
from extender.pods.demand import demand_of
from extender.pods.gang import TOPOLOGY_REQUIRED
from extender.preempt import preemption_plan
from extender.preempt.preemption_plan import (
    Budget,
    Decision,
    Occupancy,
    Preemptor,
    _freeing,
    _RegionFit,
    decide,
    gang_preemptor,
    pod_preemptor,
    victim_units,
)
from extender.preempt.victims import Cost, cheapest, cost_of
from nativedra.base.kube.names import GPU_CLASS
from nativedra.base.kube.resources import NATIVE_POD_GROUPS
from nativedra.cluster import ControlPlane, create_fake_node, resolve, wait_for
from nativedra.cluster.nodes import DEFAULT_CAPACITY
from nativedra.cluster.waits import unschedulable_message
from nativedra.objects import apply_file, claim_template, device_classes, gpu_pod, request
from testkit import builders
from testkit.bindings import Bindings
from testkit.extender_harness import ExtenderCluster, delete_pods, fresh_namespace, gang_pods
from testkit.four_way import NATIVE_GANGS
from testkit.priority_classes import priority_classes

LOW, HIGH = 100, 1000  # PriorityClass values
NODES = 500
IDLE = 4  # the first nodes run nothing: room for the filtered 1-GPU pod, half a gang's in rack 00
GANG_MEMBERS = 8  # x GPUS each, one rack
GANG_WAIT_S = 120.0
WINDOW_S = 40.0
CALL_EVERY_S = 0.1
STREAM_EVERY_S = 2.0
SMALL_CASES = 300  # half single pods, half gangs
SIDE_WAIT_S = 60.0
EXTENDED = "nvidia.com/gpu"  # the device plugin's extended resource
TRIAL = "bench.nativedra.dev/trial"  # node label: which side-by-side preemptor may go there
PREEMPTION_METRICS = (
    "nativedra_extender_preemption_decisions",
    "nativedra_extender_evictions",
    "nativedra_extender_preemption_seconds",
)


def _priority_classes(api: client.ApiClient) -> contextlib.AbstractContextManager[dict[str, str]]:
    """PriorityClasses low and high, unique to this run."""
    return priority_classes(api, {"low": LOW, "high": HIGH}, "bench")


def _present(api: client.ApiClient, namespace: str) -> set[str]:
    """Pods of `namespace` not being deleted."""
    pods = client.CoreV1Api(api).list_namespaced_pod(namespace).items
    return {p.metadata.name for p in pods if p.metadata.deletion_timestamp is None}


def _events(api: client.ApiClient, namespace: str, reason: str) -> list[client.CoreV1Event]:
    return list(client.CoreV1Api(api).list_namespaced_event(namespace, field_selector=f"reason={reason}").items)


def _preemption_metrics(extender: ExtenderCluster) -> dict[str, float]:
    """The extender's preemption counters and the preemption-seconds sum and count, by sample."""
    values = {}
    for family in text_string_to_metric_families(extender.metrics()):
        if family.name.startswith(PREEMPTION_METRICS):
            for sample in family.samples:
                if "le" in sample.labels or sample.name.endswith("_created"):
                    continue
                labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
                values[f"{sample.name}{{{labels}}}" if labels else sample.name] = sample.value
    return values


def _preemption_leases(api: client.ApiClient, namespace: str) -> list[str]:
    leases = client.CoordinationV1Api(api).list_namespaced_lease(namespace, label_selector=f"{PREEMPTION_LABEL}=true")
    return [lease.metadata.name for lease in leases.items]


# -- 1. the gang on the busy cluster --------------------------------------------------------------


def _least_evictions(rack_of: dict[str, str], running: set[str]) -> int:
    """The fewest busy pods (one per node) any rack needs gone for GANG_MEMBERS whole nodes."""
    racks: dict[str, list[str]] = {}
    for node, rack in rack_of.items():
        racks.setdefault(rack, []).append(node)
    options = [
        max(0, GANG_MEMBERS - sum(1 for n in nodes if n not in running))
        for nodes in racks.values()
        if len(nodes) >= GANG_MEMBERS
    ]
    return min(options)


def _place_gang(
    api: client.ApiClient, namespace: str, gang: str, priority_class: str
) -> tuple[float | None, dict[str, str]]:
    """A gang of GANG_MEMBERS pods x GPUS requiring one rack; seconds from its first create to its
    last member bound (None: not within GANG_WAIT_S) and where its members went."""
    with Bindings(api, namespace) as bindings:
        start = time.perf_counter()
        members = gang_pods(
            api,
            namespace,
            gang,
            GANG_MEMBERS,
            GPUS,
            annotations={TOPOLOGY_REQUIRED: RACK_LABEL},
            priority_class=priority_class,
        )
        bindings.wait(set(members), GANG_WAIT_S)
        at, node = bindings.snapshot()
    seconds = max(at[m] for m in members) - start if all(m in at for m in members) else None
    return seconds, {m: node[m] for m in members if m in node}


def _gang(
    api: client.ApiClient, extender: ExtenderCluster, busy: str, rack_of: dict[str, str], classes: dict[str, str]
) -> dict[str, Any]:
    running = _present(api, busy)
    least = _least_evictions(rack_of, running)
    metrics = _preemption_metrics(extender)
    preempted_before = len(_events(api, busy, "Preempted"))
    with workload_namespace(api, "gang") as namespace:
        seconds, placed = _place_gang(api, namespace, "train", classes["high"])
        evicted = running - _present(api, busy)
        told = sorted({e.message for e in _events(api, namespace, "Preempting")})  # one a member
        unhelped = sorted({e.message for e in _events(api, namespace, "PreemptionNotHelpful")})
        # The baseline: the same gang placed on the room the first one leaves (no preemption), once
        # the extender has let that room go (the preemption's Lease is deleted the step after).
        delete_pods(api, namespace, [f"train-{i}" for i in range(GANG_MEMBERS)])
        wait_for(lambda: not _preemption_leases(api, extender.namespace), 30, "the preemption's Lease deleted")
        baseline, again = _place_gang(api, namespace, "again", classes["high"])
    return {
        "seconds": seconds,
        "baseline_seconds": baseline,
        "ratio": seconds / baseline if seconds and baseline else None,
        "evicted": len(evicted),
        "least_possible": least,
        "preempted_events": len(_events(api, busy, "Preempted")) - preempted_before,
        "racks": sorted({rack_of[node] for node in placed.values()}),
        "victim_racks": sorted({rack_of[name] for name in evicted}),
        "baseline_racks": sorted({rack_of[node] for node in again.values()}),
        "preempting_events": told,
        "not_helpful_events": unhelped,
        "metrics": growth(_preemption_metrics(extender), metrics),
    }


# -- 2. filter latency while preemption runs ----------------------------------------------------------


class _TlsClient(Client):
    """`bench.busy_cluster.Client` over mutual TLS, as the scheduler reaches the extender."""

    def __init__(self, extender: ExtenderCluster) -> None:
        self.connection = http.client.HTTPSConnection(
            "127.0.0.1", extender.port, timeout=CALL_TIMEOUT_S, context=extender.client_context()
        )
        self.connection.connect()
        self.connection.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def _filter_body(api: client.ApiClient, namespace: str, pod: str, nodes: list[str]) -> bytes:
    raw: bytes = client.CoreV1Api(api).read_namespaced_pod(pod, namespace, _preload_content=False).data
    return b'{"Pod":' + raw + b',"NodeNames":' + json.dumps(nodes).encode() + b"}"


def _answered(call: Callable[[], object]) -> bool:
    """Whether `call` is answered without an error (the extender may not have seen the pod's claim)."""
    try:
        call()
    except RuntimeError:
        return False
    return True


def _stream(
    api: client.ApiClient, namespace: str, racks: list[str], priority_class: str, stop: threading.Event
) -> list[str]:
    """High-priority 8-GPU pods, one every STREAM_EVERY_S until `stop`, each pinned to the next rack."""
    names = []
    for index in itertools.count():
        name = f"hi-{index:03d}"
        selector = {RACK_LABEL: racks[index % len(racks)]}
        gpu_pod(api, namespace, name, "eight", node_selector=selector, priority_class=priority_class)
        names.append(name)
        if stop.wait(STREAM_EVERY_S):
            return names
    return names  # not reached


def _filter_window(
    api: client.ApiClient, extender: ExtenderCluster, busy: str, rack_of: dict[str, str], classes: dict[str, str]
) -> tuple[Timing, dict[str, Any]]:
    racks = sorted(set(rack_of.values()))[1:-1]  # the full racks but the first (rack 00 keeps its IDLE nodes)
    running = _present(api, busy)
    with workload_namespace(api, "filter") as namespace:
        claim_template(api, namespace, "one", [request("gpus", GPU_CLASS, count=1)])
        claim_template(api, namespace, "eight", [request("gpus", GPU_CLASS, count=GPUS)])
        gpu_pod(api, namespace, "probe", "one", scheduler="nobody")
        wait_for(
            lambda: client.CoreV1Api(api).read_namespaced_pod("probe", namespace).status.resource_claim_statuses,
            30,
            "the probe pod's claim",
        )
        body = _filter_body(api, namespace, "probe", list(rack_of))
        caller = _TlsClient(extender)
        wait_for(lambda: _answered(lambda: caller.call("filter", body)), 30, "a filter answer for the probe pod")
        stop = threading.Event()
        samples: list[float] = []
        with Bindings(api, namespace) as bindings, ThreadPoolExecutor(1) as pool:
            stream = pool.submit(_stream, api, namespace, racks, classes["high"], stop)
            end = time.perf_counter() + WINDOW_S
            due = time.perf_counter()
            while due < end:
                time.sleep(max(0.0, due - time.perf_counter()))
                start = time.perf_counter()
                caller.call("filter", body)
                samples.append(time.perf_counter() - start)
                due = max(due + CALL_EVERY_S, time.perf_counter())
            stop.set()
            created = stream.result()
            bound = bindings.snapshot()[0]
        caller.connection.close()
    return Timing(tuple(samples)), {
        "stream_pods": len(created),
        "stream_bound": sum(1 for name in created if name in bound),
        "evicted": len(running - _present(api, busy)),
    }


@contextlib.contextmanager
def _extender(
    plane: ControlPlane, api: client.ApiClient, scratch: Path, extender_config: dict[str, Any]
) -> Iterator[ExtenderCluster]:
    """The scheduler calling a fresh extender whose namespace (its Leases) is fresh too: a new
    replica finding the leader Lease of one killed before would wait out its 15 s before deciding."""
    with (
        fresh_namespace(api, "nativedra-bench") as leases,
        scheduler(plane, api, scratch, extender_config, leases) as found,
    ):
        assert found is not None  # with a config, always
        yield found


def _busy(
    plane: ControlPlane, api: client.ApiClient, scratch: Path, classes: dict[str, str]
) -> Generator[str, None, dict[str, Any]]:
    figures: dict[str, Any] = {"nodes": NODES, "idle_nodes": IDLE, "filter": {}}
    with busy_cluster(api, NODES, IDLE, "p500", classes["low"]) as (rack_of, busy):
        yield (
            f"{NODES} nodes of {GPUS} GPUs, racks of {RACK_SIZE}; {NODES - IDLE} run a low-priority pod holding "
            f"all {GPUS} (no rack has {GANG_MEMBERS} free nodes)"
        )
        timings: dict[str, Timing] = {}
        for mode, preemption in (("without", False), ("with", True)):
            with _extender(plane, api, scratch / f"busy-{mode}", {"preemption": preemption}) as extender:
                timings[mode], stream = _filter_window(api, extender, busy, rack_of, classes)
                figures["filter"][mode] = {**timings[mode].figures(timings["without"]), **stream}
                yield (
                    f"  filter, 1-GPU pod, {len(rack_of)} node names, preemption {mode}: "
                    f"p50 {timings[mode].p50_ms:.2f} ms, p99 {timings[mode].p99_ms:.2f} ms "
                    f"({len(timings[mode].samples_s)} calls); {stream['stream_pods']} high-priority 8-GPU pods "
                    f"created, {stream['stream_bound']} bound, {stream['evicted']} low pods evicted"
                )
                if preemption:
                    gang = figures["gang"] = _gang(api, extender, busy, rack_of, classes)
                    yield "  " + _describe_gang(gang)
        ratio = timings["with"].p99_ms / timings["without"].p99_ms
        figures["filter"]["p99_ratio"] = ratio
        p50_ratio = figures["filter"]["with"]["ratio"]
        yield f"  filter p99 with preemption running = {ratio:.2f} x without (p50 {p50_ratio:.2f} x)"
    return figures


def _describe_gang(gang: dict[str, Any]) -> str:
    took = f"bound {gang['seconds']:.1f} s after creation" if gang["seconds"] is not None else "NOT bound"
    again = f"{gang['baseline_seconds']:.1f} s" if gang["baseline_seconds"] is not None else "never"
    return (
        f"high-priority {GANG_MEMBERS} x {GPUS} gang in one rack: {took} ({gang['racks']}), "
        f"{gang['evicted']} pods evicted (least possible {gang['least_possible']}), "
        f"{gang['preempted_events']} Preempted events; the same gang on the room it left: {again}"
    )


# -- 3. victims against brute force -----------------------------------------------------------------

NS = "small"
MATCHER = Matcher(Selectors(), builders.DRIVER)


@dataclass
class _Case:
    """A random small cluster whose nodes are full, and one waiting preemptor of priority 50."""

    rng: random.Random
    gang: bool
    nodes: dict[str, dict[str, str]] = field(default_factory=dict)
    objects: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    budgets: list[Budget] = field(default_factory=list)

    def __post_init__(self) -> None:
        racks = (("r1", 2), ("r2", 2)) if self.gang else (("r1", self.rng.choice((2, 3))),)
        self.nodes = {f"{rack}-{i}": {RACK_LABEL: rack} for rack, count in racks for i in range(count)}
        templates = {n: builders.claim_template(f"t{n}", n, namespace=NS) for n in (1, 2, 4, 8)}
        self.objects = {"pods": [], "resourceclaims": [], "resourceclaimtemplates": list(templates.values())}
        room = dict.fromkeys(self.nodes, GPUS)
        guarded = self.rng.random() < 0.3
        first, second = list(self.nodes)[:2]
        if self.rng.random() < 0.5:  # a running 2-pod gang of 4 GPUs a member, across two nodes
            labels = builders.gang_labels("low", 2)
            for index, node in enumerate((first, second)):
                self._running(f"low-{index}", node=node, template=templates[4], room=room, priority=5, labels=labels)
        sizes = (2, 4) if self.gang else (1, 2, 4)
        for node in self.nodes:
            for index in itertools.count():
                if not room[node]:
                    break
                gpus = self.rng.choice([g for g in sizes if g <= room[node]])
                labels = {"app": "guarded"} if guarded and self.rng.random() < 0.4 else {}
                priority = self.rng.choice((0, 5, 10, 100))
                self._running(
                    f"{node}-{index}", node=node, template=templates[gpus], room=room, priority=priority, labels=labels
                )
        if guarded:
            selector = {"matchLabels": {"app": "guarded"}}
            pdb = {"metadata": {"name": "guard", "namespace": NS}, "spec": {"selector": selector}}
            self.budgets = [Budget.from_api({**pdb, "status": {"disruptionsAllowed": self.rng.choice((0, 1))}})]
        waiting = builders.gang_labels("train", 2, RACK_LABEL) if self.gang else {}
        for index in range(2 if self.gang else 1):
            size = GPUS if self.gang else self.rng.choice((1, 2, 4, 8))
            pod, claim = builders.claimed_pod(f"train-{index}", templates[size], NS, labels=waiting)
            pod["spec"]["priority"] = 50
            self.objects["pods"].append(pod)
            self.objects["resourceclaims"].append(claim)

    def _running(
        self,
        name: str,
        *,
        node: str,
        template: dict[str, Any],
        room: dict[str, int],
        priority: int,
        labels: dict[str, str],
    ) -> None:
        gpus = template["spec"]["spec"]["devices"]["requests"][0]["exactly"]["count"]
        taken = [f"gpu-{GPUS - room[node] + i}" for i in range(gpus)]
        room[node] -= gpus
        pod, claim = builders.claimed_pod(name, template, NS, labels=labels)
        pod["spec"].update(nodeName=node, priority=priority)
        pod["status"].update(phase="Running", startTime=f"2026-12-01T00:{self.rng.randint(0, 59):02d}:00Z")
        claim["status"] = builders.allocated_claim(claim["metadata"]["name"], node, taken, NS, reserved_for=name)[
            "status"
        ]
        self.objects["pods"].append(pod)
        self.objects["resourceclaims"].append(claim)

    def view(self) -> ClusterView:
        state = ClusterState(builders.DRIVER)
        node_objects, slices = builders.node_objects(self.nodes)
        kinds = {
            "nodes": node_objects,
            "resourceslices": slices,
            "deviceclasses": [builders.GPU_CLASS],
            "podgroups": [],
            "jobsets": [],
            **self.objects,
        }
        for kind, items in kinds.items():
            state.replace(kind, json.loads(json.dumps(items)))
        return state.view()

    def preemptor(self, view: ClusterView) -> Preemptor:
        if self.gang:
            gangs = CurrentPlan(ExtenderConfig(), MATCHER).gangs(view)
            return gang_preemptor(next(g for g in gangs if g.ref.key == f"{NS}/gang:train"), view, 50)
        pod = view.pods[(NS, "train-0")]
        return pod_preemptor(pod, demand_of(pod, view.claims, view.templates, view.classes, builders.DRIVER), view)


def _brute_force(view: ClusterView, preemptor: Preemptor, budgets: list[Budget]) -> Cost | None:
    """The least cost over every region and every nonempty set of the units freeing devices there."""
    occupancy = Occupancy.of(view, builders.DRIVER, {})
    units = victim_units(occupancy, preemptor, budgets)
    allowed = {budget.key: budget.allowed for budget in budgets}
    best = None
    for nodes in preemptor.regions.values():
        here = [units[i] for i in _freeing(units, occupancy, nodes)]
        fits = _RegionFit(occupancy, preemptor, nodes, here, MATCHER)
        for size in range(1, len(here) + 1):
            for chosen in map(frozenset, itertools.combinations(range(len(here)), size)):
                if fits(chosen) is not None:
                    cost = cost_of(here, chosen, allowed)
                    best = cost if best is None or cost < best else best
    return best


SEARCHES: dict[str, Callable[..., Any]] = {
    "exact": cheapest,
    "reprieve": functools.partial(cheapest, exact_tests=0),
}


def _small_cases(count: int, seed: int = 21) -> dict[str, Any]:
    rng = random.Random(seed)  # noqa: S311 - reproducible cases, not a secret
    tally: dict[str, dict[str, Any]] = {
        path: {"decisions": 0, "optimal_cost": 0, "optimal_pods": 0, "extra_pods": 0, "exact_used": 0, "missed": 0}
        for path in SEARCHES
    }
    seconds: dict[str, list[float]] = {path: [] for path in SEARCHES}
    kinds = {"pod": 0, "gang": 0, "no_help": 0, "no_help_agreed": 0}
    for index in range(count):
        case = _Case(rng, gang=bool(index % 2))
        view = case.view()
        preemptor = case.preemptor(view)
        best = _brute_force(view, preemptor, case.budgets)
        kinds["gang" if case.gang else "pod"] += 1
        kinds["no_help"] += best is None
        for path, search in SEARCHES.items():
            occupancy = Occupancy.of(view, builders.DRIVER, {})
            with mock.patch.object(preemption_plan, "cheapest", search):
                start = time.perf_counter()
                decision = decide(occupancy, preemptor, case.budgets, MATCHER)
                seconds[path].append(time.perf_counter() - start)
            if not isinstance(decision, Decision):
                if best is not None:
                    tally[path]["missed"] += 1  # brute force finds a set that makes room
                elif path == "exact":
                    kinds["no_help_agreed"] += 1
                continue
            if best is None:
                raise RuntimeError(f"case {index}: a decision where brute force finds no set that makes room")
            counts = tally[path]
            counts["decisions"] += 1
            counts["exact_used"] += decision.exact
            counts["optimal_cost"] += decision.cost == best
            counts["optimal_pods"] += decision.cost.pods == best.pods
            counts["extra_pods"] += decision.cost.pods - best.pods
    for path in SEARCHES:
        timing = Timing(tuple(seconds[path]))
        tally[path].update(timing.figures(Timing(tuple(seconds["exact"]))), max_ms=timing.max_ms)
    return {"cases": count, "seed": seed, **kinds, **tally}


# -- 4. side by side --------------------------------------------------------------------------------

SIDE_MODES = {
    "dra": "Kubernetes 1.37 DRA alone",
    "device_plugin": "device plugin (extended resource)",
    "native": "native gang scheduling (1.37 PodGroup)",
    "nativedra": "nativedra",
}


def _extended_pod(
    api: client.ApiClient,
    namespace: str,
    name: str,
    *,
    gpus: int,
    priority_class: str,
    selector: dict[str, str],
    labels: dict[str, str] | None = None,
) -> None:
    """A pod asking for `gpus` of the device plugin's extended resource."""
    spec = {
        "containers": [
            {"name": "main", "image": "registry.invalid/cuda:12", "resources": {"limits": {EXTENDED: str(gpus)}}}
        ],
        "priorityClassName": priority_class,
        "nodeSelector": selector,
        "terminationGracePeriodSeconds": 0,
    }
    metadata = {"name": name, "labels": labels or {}}
    client.CoreV1Api(api).create_namespaced_pod(namespace, {"metadata": metadata, "spec": spec})


class _Side:
    """One mode's nodes (2 for the pod, 4 for the gang, each node full of low-priority 1-GPU pods)
    and its preemptors."""

    def __init__(self, api: client.ApiClient, mode: str, namespace: str, classes: dict[str, str]) -> None:
        self.api, self.mode, self.namespace, self.classes = api, mode, namespace, classes
        prefix = f"{mode.replace('_', '-')}-{uuid.uuid4().hex[:4]}"
        self.nodes = {
            trial: [f"{prefix}-{trial}-{i}" for i in range(count)] for trial, count in (("pod", 2), ("gang", 4))
        }
        self.low: dict[str, list[str]] = {}
        self.preemptors = {"pod": ["big"], "gang": ["train-0", "train-1"]}

    def add_nodes(self) -> None:
        inventory = a100_inventory()
        for trial, names in self.nodes.items():
            for name in names:
                if self.mode == "device_plugin":
                    create_fake_node(self.api, name, {TRIAL: trial}, {**DEFAULT_CAPACITY, EXTENDED: str(GPUS)})
                else:
                    gpu_node(self.api, inventory, name, {TRIAL: trial})

    def remove_nodes(self) -> None:
        core = client.CoreV1Api(self.api)
        for name in itertools.chain(*self.nodes.values()):
            with contextlib.suppress(client.ApiException):
                core.delete_node(name)

    def fill(self) -> None:
        ns, low = self.namespace, self.classes["low"]
        if self.mode != "device_plugin":
            for count in (1, GPUS):
                claim_template(self.api, ns, f"gpus-{count}", [request("gpus", GPU_CLASS, count=count)])
        with Bindings(self.api, ns) as bindings:
            for trial, names in self.nodes.items():
                self.low[trial] = []
                for node, index in itertools.product(names, range(GPUS)):
                    name = f"low-{node}-{index}"
                    if self.mode == "device_plugin":
                        _extended_pod(
                            self.api, ns, name, gpus=1, priority_class=low, selector={"kubernetes.io/hostname": node}
                        )
                    else:
                        gpu_pod(self.api, ns, name, "gpus-1", node=node, priority_class=low)
                    self.low[trial].append(name)
            everyone = set(itertools.chain(*self.low.values()))
            bindings.wait(everyone, 120)
            if not everyone <= bindings.snapshot()[0].keys():
                raise RuntimeError(f"{self.mode}: the low-priority pods were not all bound in 120 s")

    def create_preemptors(self) -> None:
        ns, high = self.namespace, self.classes["high"]
        selector = {trial: {TRIAL: trial} for trial in self.nodes}
        if self.mode == "device_plugin":
            _extended_pod(self.api, ns, "big", gpus=GPUS, priority_class=high, selector=selector["pod"])
            for name in self.preemptors["gang"]:
                _extended_pod(
                    self.api,
                    ns,
                    name,
                    gpus=GPUS,
                    priority_class=high,
                    selector=selector["gang"],
                    labels=builders.gang_labels("train", 2),
                )
        elif self.mode == "native":
            for group, trial in (("big", "pod"), ("train", "gang")):
                # The scheduler asks every member to have the PodGroup's priority.
                spec = {
                    "schedulingPolicy": {"gang": {"minCount": len(self.preemptors[trial])}},
                    "priorityClassName": high,
                }
                body = {"apiVersion": NATIVE_POD_GROUPS.api_version, "kind": "PodGroup", "metadata": {"name": group}}
                NATIVE_POD_GROUPS.create(self.api, {**body, "spec": spec}, ns)
                for name in self.preemptors[trial]:
                    gpu_pod(
                        self.api,
                        ns,
                        name,
                        f"gpus-{GPUS}",
                        node_selector=selector[trial],
                        pod_group=group,
                        priority_class=high,
                    )
        else:
            gpu_pod(self.api, ns, "big", f"gpus-{GPUS}", node_selector=selector["pod"], priority_class=high)
            gang_pods(self.api, ns, "train", 2, GPUS, selector=selector["gang"], priority_class=high)

    def _told(self, pod: str) -> list[str]:
        """What the pod's events say, once each: `reason: message`."""
        selector = f"involvedObject.kind=Pod,involvedObject.name={pod}"
        events = client.CoreV1Api(self.api).list_namespaced_event(self.namespace, field_selector=selector).items
        return sorted({f"{e.reason}: {e.message}" for e in events})

    def run(self) -> dict[str, Any]:
        self.fill()
        with Bindings(self.api, self.namespace) as bindings:
            start = time.perf_counter()
            self.create_preemptors()
            everyone = set(itertools.chain(*self.preemptors.values()))
            bindings.wait(everyone, SIDE_WAIT_S)
            at = bindings.snapshot()[0]
        time.sleep(1)  # events are posted asynchronously
        present = _present(self.api, self.namespace)
        preempted = {e.involved_object.name for e in _events(self.api, self.namespace, "Preempted")}
        figures: dict[str, Any] = {}
        for trial, names in self.preemptors.items():
            bound = all(name in at for name in names)
            figures[trial] = {
                "bound": bound,
                "seconds": max(at[name] for name in names) - start if bound else None,
                "evicted": sum(1 for name in self.low[trial] if name not in present),
                "preempted_events": len(preempted & set(self.low[trial])),
                "low_pods": len(self.low[trial]),
                "message": None if bound else unschedulable_message(self.api, self.namespace, names[0]),
                "events": None if bound else self._told(names[0]),
            }
        figures["not_helpful"] = [e.message for e in _events(self.api, self.namespace, "PreemptionNotHelpful")]
        return figures


def _side_mode(
    api: client.ApiClient, mode: str, classes: dict[str, str], extender: ExtenderCluster | None = None
) -> dict[str, Any]:
    with workload_namespace(api, f"side-{mode.replace('_', '-')}") as namespace:
        side = _Side(api, mode, namespace, classes)
        side.add_nodes()
        before = _preemption_metrics(extender) if extender else {}
        try:
            figures = side.run()
        finally:
            side.remove_nodes()
        if extender:
            time.sleep(2)  # the preemption loop's next step observes the preemptors placed
            figures["metrics"] = growth(_preemption_metrics(extender), before)
        return figures


def _describe_side(mode: str, figures: dict[str, Any]) -> Iterator[str]:
    for trial, what in (("pod", "8-GPU pod, 2 full nodes"), ("gang", "2 x 8 gang, 4 full nodes")):
        result = figures[trial]
        took = f"bound in {result['seconds']:.1f} s" if result["bound"] else f"not bound in {SIDE_WAIT_S:.0f} s"
        said = "" if result["bound"] else f": {result['message'] or '; '.join(result['events']) or 'no event'}"
        evicted = f"{result['evicted']} of {result['low_pods']} low pods evicted"
        yield f"  {SIDE_MODES[mode]}, {what}: {took}, {evicted}{said}"


def _side_by_side(
    plane: ControlPlane, api: client.ApiClient, scratch: Path, classes: dict[str, str]
) -> Generator[str, None, dict[str, Any]]:
    figures: dict[str, Any] = {}
    for mode in ("dra", "device_plugin"):
        with scheduler(plane, api, scratch / f"side-{mode}", None):
            figures[mode] = _side_mode(api, mode, classes)
        yield from _describe_side(mode, figures[mode])
    with _extender(plane, api, scratch / "side-nativedra", {}) as extender:
        figures["nativedra"] = _side_mode(api, "nativedra", classes, extender)
    yield from _describe_side("nativedra", figures["nativedra"])
    gated = ControlPlane(state_dir=scratch / "gated", binaries=resolve(), features=NATIVE_GANGS)
    gated.start()
    try:
        gated_api = config.new_client_from_config(config_file=str(gated.kubeconfig))
        apply_file(gated_api, device_classes())
        with _priority_classes(gated_api) as gated_classes:
            figures["native"] = _side_mode(gated_api, "native", gated_classes)
    finally:
        gated.stop()
    yield from _describe_side("native", figures["native"])
    return figures


def table(side: dict[str, Any]) -> list[str]:
    """The side-by-side table of docs/preemption.md."""
    modes = list(SIDE_MODES)

    def cell(result: dict[str, Any]) -> str:
        if not result["bound"]:
            return f"not bound in {SIDE_WAIT_S:.0f} s, {result['evicted']} evicted"
        return f"bound in {result['seconds']:.1f} s, {result['evicted']} evicted"

    lines = [
        "| | " + " | ".join(SIDE_MODES[m] for m in modes) + " |",
        "|---|" + "---|" * len(modes),
    ]
    for trial, what in (
        ("pod", "8-GPU pod, 2 nodes full of 1-GPU pods"),
        ("gang", "2 x 8 gang, 4 nodes full of 1-GPU pods"),
    ):
        lines.append(f"| {what} | " + " | ".join(cell(side[m][trial]) for m in modes) + " |")
    return lines


def run(api: client.ApiClient, plane: ControlPlane) -> Iterator[str]:
    started = time.perf_counter()
    document: dict[str, Any] = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": "python -m bench preemption",
        "cpus": os.cpu_count(),
        "kubernetes": plane.binaries.version,
        "priorities": {"low": LOW, "high": HIGH},
        "victims": "pods with terminationGracePeriodSeconds 0 (evicted, they end at once)",
    }
    small = document["small_cases"] = _small_cases(SMALL_CASES)
    for path in SEARCHES:
        result = small[path]
        yield (
            f"{small['cases']} small cases ({small['pod']} pods, {small['gang']} 2 x 8 gangs; {small['no_help']} "
            f"where nothing helps, {small['no_help_agreed']} of them told so), {path} search: "
            f"{result['optimal_cost']}/{result['decisions']} at brute force's least cost, "
            f"{result['optimal_pods']}/{result['decisions']} with its pod count ({result['extra_pods']} pods more "
            f"in all), {result['missed']} missed; decision p50 {result['p50_ms']:.2f} ms, "
            f"p99 {result['p99_ms']:.2f} ms, max {result['max_ms']:.2f} ms"
        )
    apply_file(api, device_classes())
    with (
        tempfile.TemporaryDirectory(prefix="nativedra-bench-") as scratch,
        _priority_classes(api) as classes,
    ):
        document["busy"] = yield from _busy(plane, api, Path(scratch), classes)
        document["side_by_side"] = yield from _side_by_side(plane, api, Path(scratch), classes)
    document["table"] = table(document["side_by_side"])
    document["seconds"] = time.perf_counter() - started
    yield f"figures written to {write_results('preemption', document)} ({document['seconds']:.0f} s)"
    yield from document["table"]
