"""Hot spares: nodes in a running gang's domain kept from work of its priority, lent to lower
priority (which the gang may preempt), and kept for the gang once it loses members."""

from __future__ import annotations

import dataclasses
from typing import Any

from extender.cluster.reservation import Reservation, Reserved, from_lease, lease_body
from extender.devices.cel_eval import Selectors
from extender.devices.node_usage import Node, Usage
from extender.plan.capacity import Matcher
from extender.plan.config import RACK_LABEL, ExtenderConfig
from extender.plan.decide import Decider
from extender.plan.planner import plan_cluster
from extender.pods.model import Gang, Member, PlanLimits
from extender.recover.records import SPARES, choose_spares, record, spares_asked, vacated
from testkit.builders import DRIVER, claim_template, gang_labels, pod, racks, view
from tests.extender.plan.test_planner import EIGHT
from tests.extender.plan.test_planner import gang as make_gang

LEVELS = ("rack",)


def _running(priority: int = 0) -> Gang:
    gang = make_gang("g", 3, 1.0, "rack", bound={"g-0": "a-0", "g-1": "a-1", "g-2": "a-2"})
    return Gang(gang.ref, [dataclasses.replace(m, spec={"priority": priority}) for m in gang.members])


def _placed(nodes: dict[str, Node]) -> dict[str, Reserved]:
    return {name: Reserved(1, Usage(devices=set(nodes[name].devices))) for name in ("a-0", "a-1", "a-2")}


def _member_pods(annotation: str | None) -> list[dict[str, Any]]:
    annotations = {SPARES: annotation} if annotation is not None else {}
    return [pod(f"g-{i}", annotations=annotations, node=f"a-{i}") for i in range(3)]


def _holder(name: str, node: str, priority: int) -> dict[str, Any]:
    """A pod on `node` holding devices through a claim, at `priority`."""
    body = pod(name, template="eight", claim=f"{name}-gpus", node=node)
    body["spec"]["priority"] = priority
    return body


def test_the_spares_a_gang_asks_for_are_read_from_its_pods_and_a_bad_value_is_named() -> None:
    nodes = racks({"a": 5})
    gang = _running()
    assert spares_asked(view(nodes, pods=_member_pods(None)), gang) == (0, None)
    assert spares_asked(view(nodes, pods=_member_pods("2")), gang) == (2, None)
    for bad in ("two", "-1", "4", "\u00b2", "1" * 5000):  # a superscript two is a digit to str.isdigit
        asked, error = spares_asked(view(nodes, pods=_member_pods(bad)), gang)
        assert asked == 0 and error is not None
        assert SPARES in error and "ns/g-0" in error and repr(bad)[:40] in error, error


def test_spares_are_the_emptiest_nodes_of_the_gangs_rack_that_only_lower_priority_work_uses() -> None:
    nodes = racks({"a": 7, "b": 2})
    device = next(iter(nodes["a-6"].devices))
    nodes["a-6"] = dataclasses.replace(
        nodes["a-6"],
        devices={**nodes["a-6"].devices, device: dataclasses.replace(nodes["a-6"].devices[device], tainted=True)},
    )
    pods = [*_member_pods("1"), _holder("same", "a-3", 100), _holder("low", "a-4", 0)]
    cluster = view(nodes, pods=pods, usage={name: Usage() for name in nodes} | {"a-4": Usage(devices={device})})
    gang = _running(priority=100)
    chosen = choose_spares(cluster, gang, _placed(nodes), asked=3, levels=LEVELS, taken=())
    # a-3: work of the gang's priority; rack b: another domain; a-4 is lent, after a-5; a-6 (tainted) last
    assert list(chosen) == ["a-5", "a-4", "a-6"]
    assert chosen["a-5"].slots == 0 and chosen["a-5"].usage.devices == set(nodes["a-5"].devices)
    assert list(choose_spares(cluster, gang, _placed(nodes), asked=1, levels=LEVELS, taken={"a-5"})) == ["a-4"]


def test_a_record_keeps_its_spares_through_its_lease_and_for_the_gang_once_vacated() -> None:
    nodes = racks({"a": 5})
    spares = {"a-4": Reserved(0, Usage(devices=set(nodes["a-4"].devices)))}
    running = record(_running(), _placed(nodes), priority=0, now=10.0, hold=60, spares=spares)
    body = lease_body(running, "me")
    read = from_lease({**body, "metadata": {**body["metadata"], "namespace": "n"}})
    assert set(read.spares) == {"a-4"} and not read.holds
    left = vacated(read, nodes, 20.0, 60)
    assert left is not None and left.holds and "a-4" in left.nodes, "the spare is kept for the returning gang"


def _lending(nodes: dict[str, Node], priority: int) -> Reservation:
    spares = {"a-3": Reserved(0, Usage(devices=set(nodes["a-3"].devices)))}
    return record(_running(), _placed(nodes), priority=priority, now=10.0, hold=60, spares=spares)


def test_a_running_gangs_spare_is_kept_from_gangs_of_its_priority_and_lent_to_lower_and_higher() -> None:
    nodes = racks({"a": 4})
    kept = _lending(nodes, priority=100)
    usage = {name: Usage(devices=set(nodes[name].devices)) for name in ("a-0", "a-1", "a-2")} | {"a-3": Usage()}
    for priority, placed in ((0, True), (100, False), (1000, True)):
        other = make_gang("other", 1, 5.0)
        other = Gang(
            other.ref, [Member(m.pod, None, EIGHT, m.created, spec={"priority": priority}) for m in other.members]
        )
        found = plan_cluster(
            nodes,
            usage,
            [_running(priority=100), other],
            Matcher(Selectors(), DRIVER),
            now=100.0,
            limits=PlanLimits(timeout=300.0, levels=LEVELS),
            returns={kept.preemptor: kept},
        ).plans["ns/gang:other"]
        assert found.feasible is placed, (priority, found.reason)


def test_a_pod_of_the_gangs_priority_is_refused_a_spare_and_told_why() -> None:
    nodes = racks({"a": 4})
    kept = _lending(nodes, priority=0)
    usage = {name: Usage(devices=set(nodes[name].devices)) for name in ("a-0", "a-1", "a-2")} | {"a-3": Usage()}
    running = [pod(f"g-{i}", labels=gang_labels("g", 3, "rack"), node=f"a-{i}") for i in range(3)]
    cluster = dataclasses.replace(
        view(nodes, usage=usage, pods=running, templates=[claim_template("eight", 8)]), returns={kept.preemptor: kept}
    )
    passing, failed, _ = Decider(ExtenderConfig()).filter(cluster, pod("lone", template="eight"), ["a-3"])
    assert passing == [] and "a-3 is a spare of gang ns/gang:g (priority 0)" in failed["a-3"]
    low = pod("low", template="eight")
    low["spec"]["priority"] = -10
    passing, _, _ = Decider(ExtenderConfig()).filter(cluster, low, ["a-3"])
    assert passing == ["a-3"], "lent to lower priority"


def test_a_returning_gang_short_of_room_on_its_own_kept_nodes_is_unschedulable_so_preemption_can_free_them() -> None:
    """Its spare is lent out: the hold is its own, so waiting for the hold to end would not help;
    told unschedulable (not retried as for others' holds), its pods are what preemption looks for."""
    nodes = racks({"a": 4}, label=RACK_LABEL)
    spares = {"a-3": Reserved(0, Usage(devices=set(nodes["a-3"].devices)))}
    placed = {name: Reserved(1, Usage(devices=set(nodes[name].devices))) for name in ("a-0", "a-1")}
    gang = make_gang("g", 3, 1.0, RACK_LABEL)
    usage = {"a-0": Usage(), "a-1": Usage(), "a-2": Usage(devices=set(nodes["a-2"].devices))}
    usage["a-3"] = Usage(devices=set(nodes["a-3"].devices))  # the borrower
    kept = vacated(record(gang, placed, priority=0, now=10.0, hold=60, spares=spares), nodes, 20.0, 60, usage)
    assert kept is not None and kept.nodes["a-3"].usage.devices == set(), "the borrower's devices are not kept"
    for name in ("a-0", "a-1"):
        usage[name] = usage[name].plus(kept.nodes[name].usage)
    members = [pod(f"g-{i}", labels=gang_labels("g", 3, RACK_LABEL), template="eight") for i in range(3)]
    cluster = dataclasses.replace(
        view(nodes, usage=usage, pods=members, templates=[claim_template("eight", 8)]), returns={kept.preemptor: kept}
    )
    passing, _, path = Decider(ExtenderConfig()).filter(cluster, members[0], sorted(nodes))
    assert (passing, path) == ([], "gang-rejected")
