"""Preemption against an oracle nobody here wrote (`python -m bench preemption_oracle`): the real
kube-scheduler's DefaultPreemption, on the same scenarios.

Each scenario (seeded): 2 or 3 nodes of 8 GPUs, each full of running pods of 1, 2 or 4 GPUs at one of
three low priorities with distinct start times, sometimes a PodDisruptionBudget over some of them
(the pods are Running and Ready, so the disruption controller counts them), and one high-priority
pod of 2, 4 or 8 GPUs that fits nowhere without evictions. It runs twice on the real control plane:
- "device plugin": nodes advertise `nvidia.com/gpu: 8`, pods request it, and the scheduler's own
  DefaultPreemption chooses the node and the victims (this is what the project did not write);
- "nativedra": nodes publish 8 A100s with the plugin's builder, pods claim whole GPUs through
  ResourceClaimTemplates, and the extender chooses (Kubernetes never preempts for devices).
The node chosen and the victims' count per priority are compared. Where the scheduler's choice is
not unique (two nodes equal on every criterion of `pickOneNodeForPreemption`, worked out from its
own per-node method), the scenario is counted apart; every other mismatch is listed with a reason.
Figures in `bench-results/preemption_oracle.json`.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import random
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client

from bench.bench_preemption import EXTENDED, _extended_pod, _extender
from bench.busy_nodes import a100_inventory, gpu_node, scheduler, workload_namespace
from bench.timing import write_results
from nativedra.base.kube.names import GPU_CLASS
from nativedra.cluster import ControlPlane, create_fake_node, wait_for
from nativedra.cluster.nodes import DEFAULT_CAPACITY
from nativedra.objects import apply_file, claim_template, device_classes, gpu_pod, request
from testkit.bindings import Bindings
from testkit.priority_classes import priority_classes

SCENARIOS = 50
GPUS = 8
LOW_PRIORITIES = (100, 200, 300)
HIGH = 1000
BOUND_S = 45.0
PRIORITY_OFFSET = 2**31
GUARD = "bench.nativedra.dev/guard"
STARTED = dt.datetime(2026, 12, 1, tzinfo=dt.UTC)


@dataclass(frozen=True)
class Running:
    name: str
    node: int
    gpus: int
    priority: int
    started_s: int  # after STARTED
    guarded: bool


@dataclass(frozen=True)
class Scenario:
    seed: int
    nodes: int
    pods: tuple[Running, ...]
    budget_allows: int | None  # disruptions the budget over the guarded pods allows; None: no budget
    preemptor_gpus: int

    @classmethod
    def random(cls, seed: int) -> Scenario:
        rng = random.Random(seed)  # noqa: S311 - reproducible scenarios, not secrets
        nodes = rng.choice((2, 3))
        pods: list[Running] = []
        starts = rng.sample(range(3600), 64)
        for node in range(nodes):
            free = GPUS
            while free:
                gpus = rng.choice([size for size in (1, 2, 4) if size <= free])
                free -= gpus
                pods.append(
                    Running(
                        f"p{len(pods)}", node, gpus, rng.choice(LOW_PRIORITIES), starts[len(pods)], rng.random() < 0.3
                    )
                )
        guarded = [pod for pod in pods if pod.guarded]
        allows = rng.choice((0, 1)) if guarded and rng.random() < 0.5 else None
        if allows is None:
            pods = [Running(p.name, p.node, p.gpus, p.priority, p.started_s, False) for p in pods]
        return cls(seed, nodes, tuple(pods), allows, rng.choice((2, 4, 8)))

    def criteria(self, evicted: list[Running], violations: int | None = None) -> tuple[float, ...]:
        """`pickOneNodeForPreemption`'s order for evicting `evicted` (lower is better): budget
        violations, the highest victim priority, the priority sum, the victims, and minus the earliest
        start among the highest-priority victims (later is better). Violations: as given (the
        scheduler's own count), or the budget-covered victims past what the budget allows."""
        if violations is None:
            guarded = sum(p.guarded for p in evicted) if self.budget_allows is not None else 0
            violations = max(0, guarded - (self.budget_allows or 0))
        highest = max(p.priority for p in evicted)
        earliest = min(p.started_s for p in evicted if p.priority == highest)
        total = sum(p.priority + PRIORITY_OFFSET for p in evicted)
        return (violations, highest, total, len(evicted), -earliest)

    def schedulers_choice(self) -> tuple[list[int], dict[int, list[str]]]:
        """The best nodes by DefaultPreemption's criteria, each node's victims worked out as the
        scheduler does (every lower-priority pod removed, then reprieved most important first, those
        a budget covers beyond what it allows first, while the preemptor still fits): more than one
        best node means the scheduler's choice is not unique."""
        victims: dict[int, list[str]] = {}
        criteria: dict[int, tuple[float, ...]] = {}
        for node in range(self.nodes):
            # MoreImportantPod: higher priority first, then the earlier start.
            here = sorted((p for p in self.pods if p.node == node), key=lambda p: (-p.priority, p.started_s))
            allowed = self.budget_allows or 0
            violating, fine = [], []
            for pod in here:  # filterPodsWithPDBViolation, in that order
                if pod.guarded and self.budget_allows is not None:
                    if allowed > 0:
                        allowed -= 1
                        fine.append(pod)
                    else:
                        violating.append(pod)
                else:
                    fine.append(pod)
            free = GPUS  # every lower-priority pod removed
            evicted = list(here)
            for pod in violating + fine:  # reprieved while the preemptor still fits
                if free - pod.gpus >= self.preemptor_gpus:
                    evicted.remove(pod)
                    free -= pod.gpus
            victims[node] = [p.name for p in evicted]
            criteria[node] = self.criteria(evicted, sum(1 for p in evicted if p in violating))
        least = min(criteria.values())
        return [node for node, value in criteria.items() if value == least], victims


@dataclass
class Outcome:
    node: int | None
    evicted: list[str]

    def by_priority(self, scenario: Scenario) -> dict[int, int]:
        priority = {p.name: p.priority for p in scenario.pods}
        return dict(sorted(Counter(priority[name] for name in self.evicted).items()))


def _classes(api: client.ApiClient) -> contextlib.AbstractContextManager[dict[int, str]]:
    return priority_classes(api, {value: value for value in (*LOW_PRIORITIES, HIGH)}, "oracle")


def _running_and_ready(core: client.CoreV1Api, namespace: str, pod: Running) -> None:
    started = (STARTED + dt.timedelta(seconds=pod.started_s)).strftime("%Y-%m-%dT%H:%M:%SZ")
    status = {
        "phase": "Running",
        "startTime": started,
        "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": started}],
    }
    core.patch_namespaced_pod_status(pod.name, namespace, {"status": status})


def play(api: client.ApiClient, scenario: Scenario, mode: str, classes: dict[int, str]) -> Outcome:
    """One scenario in one mode, on nodes and in a namespace of its own."""
    core = client.CoreV1Api(api)
    prefix = f"o{scenario.seed}-{mode[:2]}-{uuid.uuid4().hex[:4]}"
    nodes = [f"{prefix}-{index}" for index in range(scenario.nodes)]
    trial = {"bench.nativedra.dev/oracle": prefix}
    inventory = a100_inventory()
    for name in nodes:
        if mode == "device_plugin":
            create_fake_node(api, name, trial, {**DEFAULT_CAPACITY, EXTENDED: str(GPUS)})
        else:
            gpu_node(api, inventory, name, trial)
    try:
        with workload_namespace(api, "oracle") as namespace, Bindings(api, namespace) as bindings:
            if mode != "device_plugin":
                for count in (1, 2, 4, 8):
                    claim_template(api, namespace, f"gpus-{count}", [request("gpus", GPU_CLASS, count=count)])
            for pod in scenario.pods:
                labels = {GUARD: "yes"} if pod.guarded else {}
                host = {"kubernetes.io/hostname": nodes[pod.node]}
                if mode == "device_plugin":
                    _extended_pod(
                        api,
                        namespace,
                        pod.name,
                        gpus=pod.gpus,
                        priority_class=classes[pod.priority],
                        selector=host,
                        labels=labels,
                    )
                else:
                    gpu_pod(
                        api,
                        namespace,
                        pod.name,
                        f"gpus-{pod.gpus}",
                        node=nodes[pod.node],
                        priority_class=classes[pod.priority],
                        labels=labels,
                    )
            names = {pod.name for pod in scenario.pods}
            bindings.wait(names, 90)
            if not names <= bindings.snapshot()[0].keys():
                raise RuntimeError(f"scenario {scenario.seed} {mode}: the running pods were not all bound")
            for pod in scenario.pods:
                _running_and_ready(core, namespace, pod)
            if scenario.budget_allows is not None:
                guarded = sum(p.guarded for p in scenario.pods)
                budget = {
                    "metadata": {"name": "guard"},
                    "spec": {
                        "minAvailable": guarded - scenario.budget_allows,
                        "selector": {"matchLabels": {GUARD: "yes"}},
                    },
                }
                policy = client.PolicyV1Api(api)
                policy.create_namespaced_pod_disruption_budget(namespace, budget)

                def counted() -> bool:
                    status = policy.read_namespaced_pod_disruption_budget("guard", namespace).status
                    return bool(status and status.current_healthy == guarded and status.observed_generation)

                wait_for(counted, 60, "the disruption controller to count the budget")
            if mode == "device_plugin":
                _extended_pod(
                    api, namespace, "high", gpus=scenario.preemptor_gpus, priority_class=classes[HIGH], selector=trial
                )
            else:
                gpu_pod(
                    api,
                    namespace,
                    "high",
                    f"gpus-{scenario.preemptor_gpus}",
                    node_selector=trial,
                    priority_class=classes[HIGH],
                )
            bindings.wait({"high"}, BOUND_S)
            placed = bindings.snapshot()[1].get("high")
            present = {
                p.metadata.name for p in core.list_namespaced_pod(namespace).items if not p.metadata.deletion_timestamp
            }
            return Outcome(nodes.index(placed) if placed in nodes else None, sorted(names - present))
    finally:
        for name in nodes:
            with contextlib.suppress(client.ApiException):
                core.delete_node(name)


def _reason(scenario: Scenario, theirs: Outcome, ours: Outcome) -> str:
    if ours.node is None and theirs.node is not None:
        if scenario.budget_allows is not None:
            return (
                "nativedra placed nothing: every choice breaks the budget (the scheduler breaks it, nativedra will not)"
            )
        return "nativedra placed nothing"
    if theirs.node is None or ours.node is None:
        return "the scheduler placed nothing"
    pods = {p.name: p for p in scenario.pods}
    their_cost = scenario.criteria([pods[name] for name in theirs.evicted])
    our_cost = scenario.criteria([pods[name] for name in ours.evicted])
    if our_cost < their_cost:
        return (
            "nativedra's victims cost less by DefaultPreemption's own criteria: the scheduler reprieves greedily "
            "on each node (most important first, budget-covered first), nativedra searches for the cheapest set"
        )
    return "nativedra's victims cost more by DefaultPreemption's criteria"


def run(api: client.ApiClient, plane: ControlPlane, count: int = SCENARIOS) -> Iterator[str]:
    started = time.perf_counter()
    scenarios = [Scenario.random(seed) for seed in range(count)]
    apply_file(api, device_classes())
    outcomes: dict[str, dict[int, Outcome]] = {"device_plugin": {}, "nativedra": {}}
    with tempfile.TemporaryDirectory(prefix="nativedra-oracle-") as scratch, _classes(api) as classes:
        with scheduler(plane, api, Path(scratch) / "alone", None):
            for scenario in scenarios:
                outcomes["device_plugin"][scenario.seed] = play(api, scenario, "device_plugin", classes)
        with _extender(plane, api, Path(scratch) / "nativedra", {}):
            for scenario in scenarios:
                outcomes["nativedra"][scenario.seed] = play(api, scenario, "nativedra", classes)
    rows = []
    matched = tied = 0
    mismatches = []
    for scenario in scenarios:
        theirs, ours = outcomes["device_plugin"][scenario.seed], outcomes["nativedra"][scenario.seed]
        best, _ = scenario.schedulers_choice()
        same = theirs.node == ours.node and theirs.by_priority(scenario) == ours.by_priority(scenario)
        unique = len(best) == 1
        row: dict[str, Any] = {
            "seed": scenario.seed,
            "nodes": scenario.nodes,
            "preemptor_gpus": scenario.preemptor_gpus,
            "budget_allows": scenario.budget_allows,
            "scheduler": {"node": theirs.node, "evicted_by_priority": theirs.by_priority(scenario)},
            "nativedra": {"node": ours.node, "evicted_by_priority": ours.by_priority(scenario)},
            "evicted": {"scheduler": theirs.evicted, "nativedra": ours.evicted},
            "predicted": best,
            "unique": unique,
            "match": same,
        }
        if same:
            matched += 1
        elif not unique:
            tied += 1
        else:
            row["reason"] = _reason(scenario, theirs, ours)
            mismatches.append(row)
        rows.append(row)
    unique_count = sum(1 for row in rows if row["unique"])
    predicted = sum(1 for row in rows if row["scheduler"]["node"] in row["predicted"])
    yield f"the scheduler chose a node its own per-node method ranks best in {predicted} of {count}"
    yield (
        f"{count} scenarios: {matched} match the scheduler's choice (node and victims per priority); "
        f"{unique_count} where its choice is unique, {len(mismatches)} mismatches there; "
        f"{tied} differ where it is not unique"
    )
    for row in mismatches:
        yield f"  seed {row['seed']}: scheduler {row['scheduler']}, nativedra {row['nativedra']}: {row['reason']}"
    document = {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "command": "python -m bench preemption_oracle",
        "kubernetes": plane.binaries.version,
        "scenarios": rows,
        "matched": matched,
        "unique": unique_count,
        "predicted": predicted,
        "mismatches": len(mismatches),
        "seconds": time.perf_counter() - started,
    }
    yield f"figures written to {write_results('preemption_oracle', document)} ({document['seconds']:.0f} s)"
