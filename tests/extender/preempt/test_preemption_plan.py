"""Preemption decisions on small clusters of real node models (the plugin's own slices), fed to a
real ClusterState: victims chosen as brute force over every set of lower-priority pods would choose
them, gangs whole or not at all, and nothing evicted where nothing would help."""

from __future__ import annotations

import dataclasses
import itertools
import json
import random
from typing import Any

import pytest

from extender.cluster.reservation import Reservation, Reserved
from extender.cluster.state import ClusterState
from extender.cluster.view import ClusterView
from extender.devices.cel_eval import Selectors
from extender.devices.node_usage import Usage
from extender.plan.capacity import Matcher
from extender.plan.config import ExtenderConfig
from extender.plan.current import CurrentPlan
from extender.plan.holds import kept_from_preemptor
from extender.pods.demand import demand_of
from extender.pods.facts import PodFacts
from extender.preempt.preemption_plan import (
    Budget,
    Decision,
    NoHelp,
    Occupancy,
    Preemptor,
    decide,
    gang_preemptor,
    pod_preemptor,
    victim_units,
)
from extender.preempt.victims import cost_of
from testkit import builders
from testkit.builders import DRIVER, GPU_CLASS, claim_template, claimed_pod, gang_labels

NS = "ns"
GPUS = [f"gpu-{index}" for index in range(8)]


class Cluster:
    def __init__(self, nodes: dict[str, dict[str, str]]) -> None:
        self.node_objects, self.slices = builders.node_objects(nodes)
        self.templates = {n: claim_template(f"t{n}", n, namespace=NS) for n in (1, 2, 4, 8)}
        self.pods: list[dict[str, Any]] = []
        self.claims: list[dict[str, Any]] = []
        self.free = {name: list(GPUS) for name in nodes}
        self.workloads: list[dict[str, Any]] = []  # Kueue's

    def run(
        self, name: str, node: str, gpus: int, priority: int, *, labels: dict[str, str] | None = None, started: int = 0
    ) -> None:
        member, claim = claimed_pod(name, self.templates[gpus], NS, labels=labels)
        taken, self.free[node] = self.free[node][:gpus], self.free[node][gpus:]
        member["spec"]["nodeName"] = node
        member["spec"]["priority"] = priority
        member["status"]["phase"] = "Running"
        member["status"]["startTime"] = f"2026-11-29T00:{started:02d}:00Z"
        claim["status"] = builders.allocated_claim(claim["metadata"]["name"], node, taken, NS, reserved_for=name)[
            "status"
        ]
        self.pods.append(member)
        self.claims.append(claim)

    def fill(self, priorities: dict[str, int], labels: dict[str, str] | None = None) -> None:
        """Eight 1-GPU pods on each node, at that node's priority."""
        for node, priority in priorities.items():
            for index in range(8):
                self.run(f"{node}{index}", node, 1, priority, labels=labels)

    def wait(
        self,
        name: str,
        gpus: int,
        priority: int,
        *,
        labels: dict[str, str] | None = None,
        annotations: dict[str, str] | None = None,
        group: str | None = None,
    ) -> dict[str, Any]:
        member, claim = claimed_pod(name, self.templates[gpus], NS, labels=labels)
        member["spec"]["priority"] = priority
        member["metadata"]["annotations"] = annotations or {}
        if group:
            member["spec"]["schedulingGroup"] = {"podGroupName": group}
        self.pods.append(member)
        self.claims.append(claim)
        return member

    def view(
        self,
        groups: list[dict[str, Any]] | None = None,
        jobsets: list[dict[str, Any]] | None = None,
        extra_classes: list[dict[str, Any]] | None = None,
    ) -> ClusterView:
        state = ClusterState(DRIVER)
        objects = {
            "nativepodgroups": groups or [],
            "nodes": self.node_objects,
            "resourceslices": self.slices,
            "pods": self.pods,
            "resourceclaims": self.claims,
            "resourceclaimtemplates": list(self.templates.values()),
            "deviceclasses": [GPU_CLASS, *(extra_classes or [])],
            "podgroups": [],
            "jobsets": jobsets or [],
            "workloads": self.workloads,
        }
        for kind, items in objects.items():
            state.replace(kind, json.loads(json.dumps(items)))
        self.state = state
        return state.view()

    def occupancy(self, view: ClusterView) -> Occupancy:
        """As the leader reads it: with every node's admission facts and what its pods ask."""
        return Occupancy.of(view, DRIVER, {}, *self.state.node_room())


MATCHER = Matcher(Selectors(), DRIVER)


def _single(view: ClusterView, pod: dict[str, Any]) -> Preemptor:
    demand = demand_of(PodFacts.of(pod), view.claims, view.templates, view.classes, DRIVER)
    return pod_preemptor(PodFacts.of(pod), demand, view)


def _gang(view: ClusterView, key: str, priority: int) -> Preemptor:
    gangs = CurrentPlan(ExtenderConfig(), MATCHER).gangs(view)
    return gang_preemptor(next(g for g in gangs if g.ref.key == key), view, priority)


def _preempt(cluster: Cluster, gpus: int, budgets: tuple[Budget, ...] = ()) -> Decision | NoHelp:
    """The decision for a pod `big` of priority 100 asking for `gpus` GPUs."""
    waiting = cluster.wait("big", gpus, 100)
    view = cluster.view()
    return decide(Occupancy.of(view, DRIVER, {}), _single(view, waiting), list(budgets), MATCHER)


def _brute_force_single(view: ClusterView, preemptor: Preemptor) -> Any:
    """The least cost over every node and every set of lower-priority pods on it."""
    occupancy = Occupancy.of(view, DRIVER, {})
    units = victim_units(occupancy, preemptor, [])
    best = None
    for node in view.nodes:
        here = [i for i, u in enumerate(units) if all(occupancy.placed[p] == {node} for p in u.pods)]
        used = len(view.usage[node].devices)
        for size in range(1, len(here) + 1):
            for chosen in itertools.combinations(here, size):
                freed = sum(len(view.usage[node].devices & _devices(view, units[i].pods)) for i in chosen)
                if 8 - used + freed >= preemptor.demand.devices:
                    cost = cost_of(units, frozenset(chosen), {})
                    best = cost if best is None else min(best, cost)
    return best


def _devices(view: ClusterView, pods: tuple[str, ...]) -> set[str]:
    devices = set()
    for claim in view.claims.values():
        reserved = {f"{NS}/{c['name']}" for c in (claim.get("status") or {}).get("reservedFor") or []}
        if reserved & set(pods):
            devices |= {r["device"] for r in claim["status"]["allocation"]["devices"]["results"]}
    return devices


@pytest.mark.parametrize("seed", range(40))
def test_a_pods_victims_cost_what_brute_force_finds_least(seed: int) -> None:
    rng = random.Random(seed)  # noqa: S311 - reproducible cases, not secrets
    cluster = Cluster({"a": {}, "b": {}})
    for node in ("a", "b"):
        index = 0
        while cluster.free[node]:
            gpus = rng.choice([g for g in (1, 2, 4) if g <= len(cluster.free[node])])
            cluster.run(f"{node}{index}", node, gpus, rng.choice((0, 5, 10, 100)), started=rng.randint(0, 59))
            index += 1
    waiting = cluster.wait("high", rng.choice((1, 2, 4, 8)), 50)
    view = cluster.view()
    preemptor = _single(view, waiting)
    decision = decide(Occupancy.of(view, DRIVER, {}), preemptor, [], MATCHER)
    best = _brute_force_single(view, preemptor)
    if best is None:
        assert isinstance(decision, NoHelp)
        return
    assert isinstance(decision, Decision)
    assert decision.cost == best
    assert all(max(v.priorities) < 50 for v in decision.victims)
    assert sum(r.slots for r in decision.reserved.values()) == 1


def test_an_eight_gpu_pod_evicts_exactly_the_eight_lowest_one_gpu_pods_on_one_node() -> None:
    cluster = Cluster({"a": {}, "b": {}})
    cluster.fill({"a": 0, "b": 10})
    decision = _preempt(cluster, 8)
    assert isinstance(decision, Decision)
    assert sorted(v.key for v in decision.victims) == [f"{NS}/a{i}" for i in range(8)]
    assert list(decision.reserved) == ["a"] and len(decision.reserved["a"].usage.devices) == 8


@pytest.mark.parametrize("gpus", [1, 2])
def test_a_free_device_anywhere_means_no_victims_even_where_emptying_costs_most(gpus: int) -> None:
    """Node b has room among pods that cost more to evict than node a's: the search, cheapest
    region first, would have stopped at a (issue 48); the pod fits as things are, so nothing is
    preempted for it (it may still be marked unschedulable from before b's devices freed)."""
    cluster = Cluster({"a": {}, "b": {}})
    cluster.fill({"a": 0})
    for index in range(8 - gpus):
        cluster.run(f"b{index}", "b", 1, 50)
    decision = _preempt(cluster, gpus)
    assert isinstance(decision, NoHelp), decision
    assert "fits in" in decision.reason and "without evicting anything" in decision.reason
    cluster.run("b-last", "b", gpus, 50)
    cluster.pods = [p for p in cluster.pods if p["metadata"]["name"] != "big"]
    cluster.claims = [c for c in cluster.claims if not c["metadata"]["name"].startswith("big")]
    full = _preempt(cluster, gpus)
    assert isinstance(full, Decision) and {v.key[len(NS) + 1] for v in full.victims} == {"a"}, full


def test_no_victim_where_a_pod_that_stays_binds_the_preemptors_host_port() -> None:
    """Issue 48: node a's cheapest victims would free a GPU, but a priority-1000 pod there binds
    host port 8080, which the preemptor asks too: the scheduler's NodePorts filter would refuse it on
    a whatever is evicted, so the decision evicts on b. Evicting the holder itself (low priority)
    frees the port."""
    port = {"containerPort": 80, "hostPort": 8080}
    for holder_priority, expected in ((1000, "b"), (0, "a")):
        cluster = Cluster({"a": {}, "b": {}})
        for index in range(7):
            cluster.run(f"a{index}", "a", 1, 0)
        cluster.run("web", "a", 1, holder_priority)
        cluster.pods[-1]["spec"]["containers"] = [{"name": "main", "ports": [port]}]
        for index in range(8):
            cluster.run(f"b{index}", "b", 1, 10)
        waiting = cluster.wait("big", 1, 100)
        waiting["spec"]["containers"] = [{"name": "main", "ports": [port]}]
        view = cluster.view()
        decision = decide(cluster.occupancy(view), _single(view, waiting), [], MATCHER)
        assert isinstance(decision, Decision), decision
        assert list(decision.reserved) == [expected], (holder_priority, decision)


def test_equal_or_higher_priority_is_never_a_victim() -> None:
    cluster = Cluster({"a": {}})
    for index in range(8):
        cluster.run(f"a{index}", "a", 1, 100 if index < 4 else 0)
    decision = _preempt(cluster, 8)
    assert isinstance(decision, NoHelp)
    assert "leaves room for 0" in decision.reason


def test_a_pod_being_deleted_counts_as_gone() -> None:
    cluster = Cluster({"a": {}})
    cluster.fill({"a": 0})
    for pod in cluster.pods[:6]:
        pod["metadata"]["deletionTimestamp"] = "2026-11-29T01:00:00Z"
    decision = _preempt(cluster, 8)
    assert isinstance(decision, Decision)
    assert len(decision.victims) == 2  # the six ending are not evicted again


def test_devices_kept_for_another_preemptor_are_not_counted_free() -> None:
    cluster = Cluster({"a": {}, "b": {}})
    cluster.fill({"a": 0, "b": 0})
    view = cluster.view()
    first = decide(Occupancy.of(view, DRIVER, {}), _single(view, cluster.wait("one", 8, 100)), [], MATCHER)
    assert isinstance(first, Decision)
    kept = {node: r.usage for node, r in first.reserved.items()}
    evicted = {p for v in first.victims for p in v.pods}
    for pod in cluster.pods:
        if f"{NS}/{pod['metadata']['name']}" in evicted:
            pod["metadata"]["deletionTimestamp"] = "2026-11-29T01:00:00Z"
    view = cluster.view()
    second = decide(Occupancy.of(view, DRIVER, kept), _single(view, cluster.wait("two", 8, 100)), [], MATCHER)
    assert isinstance(second, Decision)
    assert set(second.reserved) != set(first.reserved)
    assert {p for v in second.victims for p in v.pods}.isdisjoint(evicted)


def test_a_budget_that_allows_no_disruption_steers_the_choice_to_the_other_node() -> None:
    cluster = Cluster({"a": {}, "b": {}})
    cluster.fill({"a": 0}, labels={"app": "guarded"})
    cluster.fill({"b": 10})
    pdb = {
        "metadata": {"name": "guard", "namespace": NS},
        "spec": {"selector": {"matchLabels": {"app": "guarded"}}},
        "status": {"disruptionsAllowed": 0},
    }
    decision = _preempt(cluster, 8, (Budget.from_api(pdb),))
    assert isinstance(decision, Decision)
    assert decision.cost.violations == 0
    assert list(decision.reserved) == ["b"]


def test_a_running_gang_chosen_as_victim_is_evicted_whole() -> None:
    """A 2-pod gang runs on nodes a and b (4 GPUs each); evicting it frees a, and costs both pods."""
    cluster = Cluster({"a": {}, "b": {}})
    labels = gang_labels("low", 2)
    cluster.run("low-0", "a", 4, 0, labels=labels)
    cluster.run("low-1", "b", 4, 0, labels=labels)
    for index in range(4):
        cluster.run(f"a{index}", "a", 1, 5)
        cluster.run(f"b{index}", "b", 1, 90)
    view = cluster.view()
    decision = decide(Occupancy.of(view, DRIVER, {}), _single(view, cluster.wait("big", 8, 100)), [], MATCHER)
    assert isinstance(decision, Decision)
    gang = next(v for v in decision.victims if v.key.endswith("gang:low"))
    assert gang.pods == (f"{NS}/low-0", f"{NS}/low-1")
    assert list(decision.reserved) == ["a"]


RACKS = {f"r{rack}-{i}": {"rack": f"r{rack}"} for rack in (1, 2) for i in range(2)}


def _racks(low_rack: str | None) -> Cluster:
    """Two racks of two full nodes: the pods of `low_rack` at priority 0, the others at 10."""
    cluster = Cluster(RACKS)
    cluster.fill({node: 0 if low_rack in (None, node[:2]) else 10 for node in RACKS})
    return cluster


def _gang_decision(cluster: Cluster, key: str, **view: Any) -> Decision | NoHelp:
    built = cluster.view(**view)
    return decide(Occupancy.of(built, DRIVER, {}), _gang(built, f"{NS}/{key}", 100), [], MATCHER)


def test_a_gang_preempts_whole_in_one_rack_or_not_at_all() -> None:
    cluster = _racks("r1")
    labels = gang_labels("train", 2, "rack")
    for member in range(2):
        cluster.wait(f"train-{member}", 8, 100, labels=labels)
    decision = _gang_decision(cluster, "gang:train")
    assert isinstance(decision, Decision)
    assert decision.region == "r1" and len(decision.victims) == 16
    assert {r.slots for r in decision.reserved.values()} == {1} and sorted(decision.reserved) == ["r1-0", "r1-1"]

    big = _racks(None)
    for member in range(3):
        big.wait(f"train-{member}", 8, 100, labels=gang_labels("train", 3, "rack"))
    refused = _gang_decision(big, "gang:train")
    assert isinstance(refused, NoHelp)
    assert refused.reason == (
        f"gang {NS}/gang:train needs 3 x 8 device(s) in one rack; even evicting every lower-priority pod "
        "leaves room for 2"
    )


LWS = {"leaderworkerset.sigs.k8s.io/name": "serve", "leaderworkerset.sigs.k8s.io/group-index": "0"}


@pytest.mark.parametrize("source", ["lws", "native"])
def test_leaderworkerset_and_native_podgroup_gangs_preempt_whole_in_their_domain(source: str) -> None:
    cluster = _racks("r2")
    groups = []
    for member in range(2):
        if source == "lws":
            annotations = {"leaderworkerset.sigs.k8s.io/size": "2", "nativedra.dev/topology-required": "rack"}
            cluster.wait(f"serve-{member}", 8, 100, labels=LWS, annotations=annotations)
        else:
            cluster.wait(f"serve-{member}", 8, 100, group="serve")
    if source == "native":
        groups = [builders.pod_group("serve", 2, "rack", namespace=NS)]
    decision = _gang_decision(cluster, "lws:serve/0" if source == "lws" else "native:serve", groups=groups)
    assert isinstance(decision, Decision)
    assert decision.region == "r2" and len(decision.victims) == 16
    assert sorted(decision.reserved) == ["r2-0", "r2-1"]


def test_exclusive_parts_each_get_a_domain_of_their_own() -> None:
    """A JobSet of two Jobs x 1 pod x 8 GPUs, exclusive per rack: two racks are preempted, not two
    nodes of one rack, though one rack alone would have the room."""
    cluster = _racks(None)
    jobset = builders.jobset("train", [("workers", 2, 1)], exclusive="rack", namespace=NS)
    for job in range(2):
        labels = {
            "jobset.sigs.k8s.io/jobset-name": "train",
            "jobset.sigs.k8s.io/replicatedjob-name": "workers",
            "jobset.sigs.k8s.io/job-index": str(job),
        }
        cluster.wait(f"train-workers-{job}-0", 8, 100, labels=labels)
    decision = _gang_decision(cluster, "jobset:train", jobsets=[jobset])
    assert isinstance(decision, Decision)
    racks = {name.split("-")[0] for name in decision.reserved}
    assert racks == {"r1", "r2"} and len(decision.victims) == 16


def test_a_running_gangs_spare_is_no_room_for_a_preemptor_of_the_gangs_priority() -> None:
    """Its borrower (lower priority) would be evicted for nothing: the spare stays kept from the
    preemptor. One of higher priority may take it, as it could the gang's own nodes."""
    cluster = Cluster({"a": {}})
    cluster.fill({"a": 0})
    view = cluster.view()
    spare = Reserved(0, Usage(devices=set(view.nodes["a"].devices)))
    running = Reservation("return-g", f"{NS}/gang:g", "gang g", 100, {"a": spare}, (), 1.0, 61.0, returning=True)
    for priority, helped in ((100, False), (200, True)):
        preemptor = _single(view, cluster.wait(f"p{priority}", 8, priority))
        seen = dataclasses.replace(view, returns={running.preemptor: running})
        kept = kept_from_preemptor(seen, None, preemptor.key, preemptor.priority, view.nodes)
        decision = decide(Occupancy.of(view, DRIVER, kept), preemptor, [], MATCHER)
        assert isinstance(decision, Decision) is helped, (priority, decision)


def test_a_vacated_gangs_nodes_and_whole_spare_are_no_room_for_a_preemptor_of_its_priority() -> None:
    """The gang lost members: what is kept for its return, its spare's borrower included, is not
    handed to a preemptor of its priority (which the returning gang could not preempt back)."""
    cluster = Cluster({"a": {}})
    cluster.fill({"a": 0})  # the borrower's pods, lower priority
    view = cluster.view()
    emptied = Reserved(0, Usage())  # its free part when vacated: nothing (all borrowed)
    returning = Reservation(
        "return-g", f"{NS}/gang:g", "gang g", 100, {"a": emptied}, (), 1.0, 61.0, returning=True, vacated=1.0
    )
    for priority, helped in ((100, False), (200, True)):
        preemptor = _single(view, cluster.wait(f"q{priority}", 8, priority))
        seen = dataclasses.replace(view, returns={returning.preemptor: returning})
        kept = kept_from_preemptor(seen, None, preemptor.key, preemptor.priority, view.nodes)
        decision = decide(Occupancy.of(view, DRIVER, kept), preemptor, [], MATCHER)
        assert isinstance(decision, Decision) is helped, (priority, decision)
