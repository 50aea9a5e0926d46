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
from extender.plan.holds import recorded
from extender.plan.planner import plan_cluster
from extender.pods.model import Gang, Member, PlanLimits
from extender.recover.grant import SparesGrant
from extender.recover.metrics import HELD_DEVICES, count_held
from extender.recover.records import SPARES, choose_spares, record, spare_usage, spares_asked, vacated
from testkit.builders import DRIVER, claim_template, gang_labels, pod, racks, view
from tests.extender.plan.test_planner import EIGHT
from tests.extender.plan.test_planner import gang as make_gang

LEVELS = ("rack",)
# The admin's grant the tests of spares' behaviour run under: the test namespace, shares of a whole domain.
GRANT = SparesGrant(namespaces=("ns",), max_per_gang=4, max_domain_share=1.0, max_cluster_share=1.0)


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
    assert spares_asked(view(nodes, pods=_member_pods(None)), gang, GRANT) == (0, None)
    assert spares_asked(view(nodes, pods=_member_pods("2")), gang, GRANT) == (2, None)
    for bad in ("two", "-1", "4", "\u00b2", "1" * 5000):  # a superscript two is a digit to str.isdigit
        asked, error = spares_asked(view(nodes, pods=_member_pods(bad)), gang, GRANT)
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
    chosen, limit = choose_spares(cluster, gang, _placed(nodes), asked=3, levels=LEVELS, taken=(), grant=GRANT)
    # a-3: work of the gang's priority; rack b: another domain; a-4 is lent, after a-5; a-6 (tainted) last
    assert list(chosen) == ["a-5", "a-4", "a-6"] and limit is None
    assert chosen["a-5"].slots == 0 and chosen["a-5"].usage.devices == set(nodes["a-5"].devices)
    one, _ = choose_spares(cluster, gang, _placed(nodes), asked=1, levels=LEVELS, taken={"a-5"}, grant=GRANT)
    assert list(one) == ["a-4"]


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


def test_spares_are_kept_only_where_the_admin_grants_them_and_the_refusal_names_the_setting() -> None:
    """On 424026c any pod's annotation kept whole nodes: now none without a grant."""
    nodes = racks({"a": 5})
    cluster = view(nodes, pods=_member_pods("2"))
    asked, refused = spares_asked(cluster, _running(), SparesGrant())
    assert asked == 0 and refused is not None
    assert "ns/g-0" in refused and "spares.namespaces" in refused and "spares.minPriority" in refused, refused
    other_team = SparesGrant(namespaces=("team-a",), min_priority=1000)
    asked, refused = spares_asked(cluster, _running(priority=100), other_team)
    assert asked == 0 and refused is not None and "not to namespace ns at priority 100" in refused, refused
    assert spares_asked(cluster, _running(priority=1000), other_team) == (2, None), "granted by priority"
    assert spares_asked(cluster, _running(), SparesGrant(namespaces=("ns",))) == (2, None), "granted by namespace"
    asked, limited = spares_asked(cluster, _running(), SparesGrant(namespaces=("ns",), max_per_gang=1))
    assert asked == 1 and limited is not None and "spares.maxPerGang" in limited, limited


def test_the_shares_of_the_domain_and_the_cluster_bound_all_gangs_spares_together() -> None:
    nodes = racks({"a": 8, "b": 8})
    cluster = view(nodes, pods=_member_pods("4"))
    gang = _running()
    by_domain = SparesGrant(namespaces=("ns",), max_per_gang=4, max_domain_share=0.25, max_cluster_share=1.0)
    chosen, limit = choose_spares(cluster, gang, _placed(nodes), asked=4, levels=LEVELS, taken=(), grant=by_domain)
    assert len(chosen) == 2 and limit is not None and "spares.maxDomainShare 0.25 of the 8 node(s) of rack a" in limit
    held = {"a-7"}  # another gang's spare in the rack counts against the same share
    chosen, _ = choose_spares(
        cluster, gang, _placed(nodes), asked=4, levels=LEVELS, taken=held, grant=by_domain, held=held
    )
    assert len(chosen) == 1
    by_cluster = SparesGrant(namespaces=("ns",), max_per_gang=4, max_domain_share=1.0, max_cluster_share=0.1)
    chosen, limit = choose_spares(cluster, gang, _placed(nodes), asked=4, levels=LEVELS, taken=(), grant=by_cluster)
    assert len(chosen) == 1 and limit is not None and "spares.maxClusterShare 0.1 of the cluster's 16 node(s)" in limit


def test_a_spare_keeps_the_gangs_per_node_demand_and_leaves_the_rest_of_its_node_free() -> None:
    """A gang of 2 GPUs per node keeps 2 GPUs of a spare node, its free ones first, not all 8."""
    nodes = racks({"a": 4})
    two = {name: Reserved(1, Usage(devices=set(sorted(nodes[name].devices)[:2]))) for name in ("a-0", "a-1", "a-2")}
    busy = set(sorted(nodes["a-3"].devices)[:3])
    cluster = view(
        nodes, pods=_member_pods("1"), usage={name: Usage() for name in nodes} | {"a-3": Usage(devices=busy)}
    )
    chosen, _ = choose_spares(cluster, _running(), two, asked=1, levels=LEVELS, taken=(), grant=GRANT)
    assert len(chosen["a-3"].usage.devices) == 2 and not chosen["a-3"].usage.devices & busy, chosen
    kept = record(_running(), two, priority=0, now=10.0, hold=60, spares=chosen)
    usage = {name: Usage(devices=set(reserved.usage.devices)) for name, reserved in two.items()} | {"a-3": Usage()}
    running = [pod(f"g-{i}", labels=gang_labels("g", 3, "rack"), node=f"a-{i}") for i in range(3)]
    templates = [claim_template("six", 6), claim_template("seven", 7)]
    state = dataclasses.replace(
        view(nodes, usage=usage, pods=running, templates=templates), returns={kept.preemptor: kept}
    )
    passing, _, _ = Decider(ExtenderConfig()).filter(state, pod("six", template="six"), ["a-3"])
    assert passing == ["a-3"], "the spare's other 6 GPUs are anyone's"
    passing, failed, _ = Decider(ExtenderConfig()).filter(state, pod("seven", template="seven"), ["a-3"])
    assert passing == [] and "spare" in failed["a-3"], "the 2 kept are not"


def test_a_spare_takes_one_device_per_gpu_and_no_fraction() -> None:
    nodes = racks({"a": 1})
    node = nodes["a-0"]
    usage = spare_usage(node, 3, first=[sorted(node.devices)[-1]])
    assert len(usage.devices) == 3 and sorted(node.devices)[-1] in usage.devices


def test_held_devices_are_counted_per_namespace_and_hold() -> None:
    nodes = racks({"a": 5})
    spares = {"a-4": Reserved(0, spare_usage(nodes["a-4"], 8))}
    running = record(_running(), _placed(nodes), priority=0, now=10.0, hold=60, spares=spares)
    other = dataclasses.replace(running, preemptor="team-b/jobset:x", vacated=20.0)
    cluster = dataclasses.replace(view(nodes), returns={running.preemptor: running, other.preemptor: other})
    count_held(recorded(cluster))
    assert HELD_DEVICES.labels("ns", "spare")._value.get() == 8
    assert HELD_DEVICES.labels("team-b", "return")._value.get() == 32, "the 3 nodes it ran on and its spare"
