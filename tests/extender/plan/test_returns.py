"""A gang coming back after it lost members: its previous nodes and their domain first, the
devices kept for it given back to it alone (and to gangs of higher priority), kept from the rest."""

from __future__ import annotations

import dataclasses

from extender.cluster.membership import entries_of, sources_of
from extender.cluster.reservation import Reservation, Reserved
from extender.devices.cel_eval import Selectors
from extender.devices.node_usage import Node, Usage
from extender.plan.capacity import Matcher
from extender.plan.config import RACK_LABEL, ExtenderConfig
from extender.plan.current import CurrentPlan
from extender.plan.decide import RETRY, Decider
from extender.plan.planner import ClusterPlan, plan_cluster
from extender.pods.demand import Demand, Request
from extender.pods.gang import gang_of
from extender.pods.model import Gang, Member, PlanLimits
from testkit.builders import DRIVER, GPU, claim_template, gang_labels, pod, racks, view
from tests.extender.plan.test_planner import EIGHT
from tests.extender.plan.test_planner import gang as make_gang


def _returning(nodes: dict[str, Node], key: str, kept: list[str], priority: int = 0) -> Reservation:
    held = {name: Reserved(1, Usage(devices=set(nodes[name].devices))) for name in kept}
    return Reservation(f"return-{key}", key, f"gang {key}", priority, held, (), 50.0, 110.0, "", True, 50.0)


def _plan(nodes: dict[str, Node], gangs: list[Gang], returns: list[Reservation]) -> ClusterPlan:
    """Planned as the extender plans it: the held devices are in the nodes' usage (the state adds them)."""
    usage = {name: Usage() for name in nodes}
    for kept in returns:
        for name, reserved in kept.nodes.items():
            usage[name] = usage[name].plus(reserved.usage)
    return plan_cluster(
        nodes,
        usage,
        gangs,
        Matcher(Selectors(), DRIVER),
        now=100.0,
        limits=PlanLimits(timeout=300.0, levels=("rack",)),
        returns={kept.preemptor: kept for kept in returns},
    )


def _at(gang: Gang, priority: int) -> Gang:
    members = [Member(m.pod, m.node, EIGHT, m.created, spec={"priority": priority}) for m in gang.members]
    return Gang(gang.ref, members)


def test_a_returning_gang_goes_back_to_its_nodes_and_rack_before_best_fit() -> None:
    nodes = racks({"a": 4, "b": 3})
    fresh = make_gang("g", 3, 1.0, "rack")
    assert set(_plan(nodes, [fresh], []).plans["ns/gang:g"].slots) == {"b-0", "b-1", "b-2"}, "best fit: rack b"
    # a-3 had the failed GPU: not kept; the member that was there goes to another node of rack a
    back = _plan(nodes, [fresh], [_returning(nodes, "ns/gang:g", ["a-1", "a-2"])]).plans["ns/gang:g"]
    assert back.feasible and {"a-1", "a-2"} <= set(back.slots) and len(back.slots) == 3
    assert all(name.startswith("a-") for name in back.slots)


def test_its_kept_nodes_are_kept_from_gangs_of_equal_or_lower_priority_but_not_higher() -> None:
    nodes = racks({"a": 4})
    kept = _returning(nodes, "ns/gang:g", ["a-1", "a-2"], priority=100)
    for priority, placed in ((0, False), (100, False), (1000, True)):
        other = _at(make_gang("other", 3, 1.0, "rack"), priority)
        found = _plan(nodes, [other], [kept]).plans["ns/gang:other"]
        assert found.feasible is placed, (priority, found.reason)


def test_a_record_not_yet_vacated_already_sends_its_returning_gang_back() -> None:
    """A gang recreated faster than the leader marks its record vacated (an LWS group in about a
    second) still goes back to where it ran. While its gang runs whole, a record keeps nothing."""
    nodes = racks({"a": 4, "b": 3})
    running = dataclasses.replace(_returning(nodes, "ns/gang:g", ["a-1", "a-2"]), vacated=None)
    matcher, limits = Matcher(Selectors(), DRIVER), PlanLimits(timeout=300.0, levels=("rack",))
    usage = {name: Usage() for name in nodes}
    returns = {"ns/gang:g": running}
    back = plan_cluster(
        nodes, usage, [make_gang("g", 3, 1.0, "rack")], matcher, now=100.0, limits=limits, returns=returns
    )
    assert {"a-1", "a-2"} <= set(back.plans["ns/gang:g"].slots)
    whole = make_gang("g", 2, 1.0, "rack", bound={"g-0": "a-1", "g-1": "a-2"})
    other = plan_cluster(nodes, usage, [whole], matcher, now=100.0, limits=limits, returns=returns)
    assert not other.holders, "a gang running whole keeps nothing beyond its own claims"


def test_a_kept_node_its_returning_member_took_is_not_given_back_again() -> None:
    """Once a returning member is placed on a kept node, its claims hold those devices: the node is
    full, however the kept devices and the claims' overlap."""
    nodes = racks({"a": 4})
    returning = make_gang("g", 3, 1.0, "rack", bound={"g-0": "a-1"})
    kept = _returning(nodes, "ns/gang:g", ["a-1", "a-2"])
    usage_plan = _plan(nodes, [returning], [kept])
    slots = usage_plan.plans["ns/gang:g"].slots
    assert "a-1" not in slots and "a-2" in slots and sum(slots.values()) == 2, slots


def test_a_pod_refused_only_for_a_returning_gangs_nodes_is_retried_not_parked() -> None:
    """The hold ends with no event the scheduler watches: a refusal it causes is answered as an
    error the scheduler retries after its backoff, naming the hold."""
    nodes = racks({"a": 2})
    kept = _returning(nodes, "ns/gang:g", ["a-0", "a-1"])
    usage = {name: Usage(devices=set(nodes[name].devices)) for name in nodes}
    cluster = view(nodes, usage=usage, pods=[pod("lone", template="eight")], templates=[claim_template("eight", 8)])
    holding = dataclasses.replace(cluster, returns={kept.preemptor: kept})
    passing, failed, path = Decider(ExtenderConfig()).filter(holding, pod("lone", template="eight"), sorted(nodes))
    assert (passing, path) == ([], RETRY)
    assert "kept for gang ns/gang:g (priority 0), which ran there until it lost members" in failed["a-0"]
    _, _, alone = Decider(ExtenderConfig()).filter(cluster, pod("lone", template="eight"), sorted(nodes))
    assert alone == "pass", "without the hold the extender leaves the fit to the scheduler"
    urgent = pod("urgent", template="eight")
    urgent["spec"]["priority"] = 1000
    passing, _, path = Decider(ExtenderConfig()).filter(holding, urgent, sorted(nodes))
    assert (passing, path) == (sorted(nodes), "pass"), "kept from equal and lower priority only"


def test_a_gang_that_lost_members_keeps_its_nodes_from_the_first_plan_that_sees_it() -> None:
    """Its record not marked vacated yet (the leader looks once a second): queued work of the same
    priority, older than the recreated pods, is planned first and must not take the nodes."""
    nodes = racks({"a": 5})
    running = dataclasses.replace(_returning(nodes, "ns/gang:g", ["a-0", "a-1", "a-2"]), vacated=None)
    running = dataclasses.replace(
        running, nodes={**running.nodes, "a-0": Reserved(1, Usage(devices=set(nodes["a-0"].devices)))}
    )
    queued = make_gang("queued", 4, 0.5, "rack")  # older than the returning gang's new pods
    returning = make_gang("g", 3, 1.0, "rack")
    usage = {name: Usage() for name in nodes}
    plan = plan_cluster(
        nodes,
        usage,
        [queued, returning],
        Matcher(Selectors(), DRIVER),
        now=100.0,
        limits=PlanLimits(timeout=300.0, levels=("rack",)),
        returns={"ns/gang:g": running},
    )
    assert not plan.plans["ns/gang:queued"].feasible, plan.plans["ns/gang:queued"].slots
    assert set(plan.plans["ns/gang:g"].slots) == {"a-0", "a-1", "a-2"}
    assert "ns/gang:g" in plan.holders["a-1"], "pods outside gangs are told whom the nodes are held for"


def test_a_higher_priority_gang_planned_onto_kept_devices_leaves_the_rest_kept() -> None:
    """Given the kept devices, a gang of higher priority holds only what it adds: a gang of lower
    priority after it still finds the rest kept."""
    nodes = racks({"a": 1})
    kept = _returning(nodes, "ns/gang:r", ["a-0"], priority=100)
    four = Demand((Request((GPU,), 4),))

    def one(name: str, priority: int, created: float) -> Gang:
        ref = gang_of(pod(labels=gang_labels(name, 1, None)), {}, {})
        assert ref is not None
        return Gang(ref, [Member(f"ns/{name}-0", None, four, created, spec={"priority": priority})])

    plan = _plan(nodes, [one("high", 1000, 1.0), one("low", 0, 2.0)], [kept])
    assert plan.plans["ns/gang:high"].feasible
    assert not plan.plans["ns/gang:low"].feasible, "the other 4 GPUs are still kept for gang r"


def test_a_hold_that_starts_with_the_node_usage_unchanged_is_planned_anew() -> None:
    """A returning gang's member evicted, its claim released and the same devices kept for its
    return leave the node's usage the very object: a waiting gang of higher priority, refused while
    the claim held them, is given them back in the next plan, not answered from the last one."""
    nodes = racks({"a": 1}, label=RACK_LABEL)
    kept = _returning(nodes, "ns/gang:g", ["a-0"])
    usage = {"a-0": Usage(devices=set(nodes["a-0"].devices))}
    urgent = pod("o-0", labels=gang_labels("o", 1, RACK_LABEL), template="eight")
    urgent["spec"]["priority"] = 1000
    before = view(nodes, usage=usage, pods=[urgent], templates=[claim_template("eight", 8)])
    plans = CurrentPlan(ExtenderConfig(), Matcher(Selectors(), DRIVER))
    assert not plans.plan(before, None, 100.0).plans["ns/gang:o"].feasible
    after = dataclasses.replace(before, version=2, returns={kept.preemptor: kept}, members=before.members)
    assert plans.plan(after, None, 101.0).plans["ns/gang:o"].feasible


def test_nodes_kept_for_a_gang_that_lost_members_are_free_once_its_record_goes() -> None:
    """A JobSet suspended (or deleted) loses its pods; until the leader lets its record go, the plan
    keeps the gang's nodes. The record going is the only change: the next plan gives them to the
    gang waiting, not the last plan's answer (the waiting pods were parked until an unrelated event)."""
    nodes = racks({"a": 1}, label=RACK_LABEL)
    running = dataclasses.replace(_returning(nodes, "ns/jobset:train", ["a-0"]), vacated=None)
    waiting = pod("o-0", labels=gang_labels("o", 1, RACK_LABEL), template="eight")
    before = view(nodes, pods=[waiting], templates=[claim_template("eight", 8)])
    members = entries_of(before, sources_of(before, DRIVER))  # as the watches keep them: the same mapping
    before = dataclasses.replace(before, returns={running.preemptor: running}, members=members)
    plans = CurrentPlan(ExtenderConfig(), Matcher(Selectors(), DRIVER))
    assert not plans.plan(before, None, 100.0).plans["ns/gang:o"].feasible, "kept for the gang that lost members"
    after = dataclasses.replace(before, version=2, returns={})
    assert plans.plan(after, None, 101.0).plans["ns/gang:o"].feasible
