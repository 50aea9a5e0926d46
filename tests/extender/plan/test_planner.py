"""Gang planning: best fit, holds by age, placed members, expiry and backoff, time budgets, levels."""

from __future__ import annotations

import dataclasses

from extender.devices.cel_eval import Selectors
from extender.devices.node_usage import Node, Usage
from extender.plan.capacity import Matcher
from extender.plan.planner import ClusterPlan, DomainMemo, gang_domains, plan_cluster
from extender.pods.demand import Demand, Request
from extender.pods.gang import GANG, GANG_SIZE, TOPOLOGY_PREFERRED, gang_of
from extender.pods.model import ANYWHERE, Gang, Member, PlanLimits
from testkit.builders import DRIVER, GPU, gang_labels, gpu_nodes, pod, racks

EIGHT = Demand((Request((GPU,), 8),))


def gang(
    name: str, size: int, created: float, required: str | None = None, bound: dict[str, str] | None = None
) -> Gang:
    """A nativedra gang of `size` members of 8 GPUs each, created a second apart from `created`."""
    ref = gang_of(pod(labels=gang_labels(name, size, required)), {}, {})
    assert ref is not None
    members = [Member(f"ns/{name}-{i}", (bound or {}).get(f"{name}-{i}"), EIGHT, created + i) for i in range(size)]
    return Gang(ref, members)


def plan(
    nodes: dict[str, Node], gangs: list[Gang], now: float = 100.0, timeout: float = 300.0, full: tuple[str, ...] = ()
) -> ClusterPlan:
    usage = {name: Usage(devices=set(nodes[name].devices) if name in full else set()) for name in nodes}
    return plan_cluster(nodes, usage, gangs, Matcher(Selectors(), DRIVER), now=now, limits=PlanLimits(timeout=timeout))


def test_best_fit_keeps_the_big_rack_whole() -> None:
    result = plan(racks({"big": 4, "small": 2}), [gang("g", 2, 1.0, "rack")])
    assert set(result.plans["ns/gang:g"].slots) == {"small-0", "small-1"}


def test_older_gang_holds_and_the_younger_one_holds_nothing() -> None:
    nodes = racks({"r": 6})
    result = plan(nodes, [gang("young", 4, 2.0), gang("old", 4, 1.0)])
    assert result.plans["ns/gang:old"].feasible and sum(result.plans["ns/gang:old"].slots.values()) == 4
    young = result.plans["ns/gang:young"]
    assert not young.feasible and young.slots == {}
    assert "needs 4 more pod(s) x 8 device(s)" in young.reason and "room for 2" in young.reason
    assert sum(len(h) for h in result.holders.values()) == 4


def test_a_younger_gang_of_higher_priority_is_planned_first_and_holds() -> None:
    """On 424026c gangs held oldest first whatever their priority: an older priority-0 gang's hold
    refused a priority-100 gang, whose members the extender then answered as unplaceable."""
    nodes = racks({"r": 6})
    old = gang("old", 4, 1.0)
    young = gang("young", 4, 2.0)
    urgent = Gang(young.ref, [dataclasses.replace(m, spec={"priority": 100}) for m in young.members])
    result = plan(nodes, [old, urgent])
    assert result.plans["ns/gang:young"].feasible and sum(result.plans["ns/gang:young"].slots.values()) == 4
    assert not result.plans["ns/gang:old"].feasible


def test_bound_members_fix_the_domain() -> None:
    nodes = racks({"a": 3, "b": 4})
    result = plan(nodes, [gang("g", 3, 1.0, "rack", bound={"g-0": "a-0"})], full=("a-0",))
    assert result.plans["ns/gang:g"].slots == {"a-1": 1, "a-2": 1}, "rack b has more room, but the gang is in rack a"


def test_a_partly_placed_gang_shares_the_domains_of_its_usable_nodes_narrowed_to_where_it_is() -> None:
    """The domains of one usable-node set are worked out once per plan: a gang with a member bound
    gets the very lists an unplaced gang gets (so their fits are shared too), narrowed to its rack,
    as `gang_domains` alone gives them."""
    nodes = racks({"a": 3, "b": 4})
    placed, waiting = gang("p", 3, 1.0, "rack", bound={"p-0": "a-0"}), gang("w", 2, 2.0, "rack")
    memo = DomainMemo(nodes)
    everywhere = memo.domains("rack", waiting)
    narrowed = memo.domains("rack", placed)
    assert narrowed == gang_domains(nodes, "rack", placed) == {"a": ["a-0", "a-1", "a-2"]}
    assert narrowed["a"] is everywhere["a"]
    assert set(everywhere) == {"a", "b"} and memo.domains(None, placed) == {ANYWHERE: sorted(nodes)}


def test_an_expired_hold_waits_behind_others_until_its_members_change() -> None:
    nodes = racks({"r": 6})
    usage = {name: Usage() for name in nodes}
    matcher = Matcher(Selectors(), DRIVER)
    stale, fresh = gang("stale", 4, 0.0), gang("fresh", 4, 350.0)
    last = stale.members.pop()  # not created yet: the stale gang cannot complete
    expired = plan(nodes, [stale, fresh], now=400.0, timeout=300.0)
    assert expired.plans["ns/gang:stale"].expired and expired.plans["ns/gang:fresh"].feasible
    assert not expired.plans["ns/gang:stale"].feasible, "it backs off while the fresh gang holds"
    later = plan_cluster(
        nodes, usage, [stale], matcher, now=700.0, limits=PlanLimits(timeout=300.0), clocks=expired.clocks
    )
    assert later.plans["ns/gang:stale"].expired and later.holders == {}, "one timeout later it still holds nothing"
    whole = Gang(stale.ref, [*stale.members, last])  # the state makes a new gang when its members change
    changed = plan_cluster(
        nodes, usage, [whole], matcher, now=760.0, limits=PlanLimits(timeout=300.0), clocks=later.clocks
    )
    assert not changed.plans["ns/gang:stale"].expired and sum(len(h) for h in changed.holders.values()) == 4


def test_a_gang_is_never_smaller_than_its_members() -> None:
    undercounted = gang("g", 2, 1.0)
    undercounted.members += [Member(f"ns/g-{i}", None, EIGHT, 5.0 + i) for i in (2, 3)]
    assert undercounted.size == 4
    result = plan(racks({"r": 6}), [undercounted])
    assert sum(result.plans["ns/gang:g"].slots.values()) == 4


def test_a_gang_whose_plan_runs_out_of_time_is_not_placeable_yet_alone() -> None:
    """Each gang has its own budget: the one that spends it holds nothing, the next is planned."""
    nodes = racks({"r": 20, "s": 2})
    narrow = gang("other", 1, 3.0)
    narrow.members[0] = Member("ns/other-0", None, EIGHT, 3.0, spec={"nodeSelector": {"rack": "s"}})
    ticks = iter(range(1000))  # one second per look at the clock: 5 looks per gang
    result = plan_cluster(
        nodes,
        {name: Usage() for name in nodes},
        [gang("slow", 4, 1.0), narrow],
        Matcher(Selectors(), DRIVER),
        now=10.0,
        limits=PlanLimits(budget=5.0),
        clock=lambda: float(next(ticks)),
    )
    slow, other = result.plans["ns/gang:slow"], result.plans["ns/gang:other"]
    assert not slow.feasible and "not placeable yet" in slow.reason and slow.slots == {}
    assert other.feasible and sum(other.slots.values()) == 1, other.reason


def preferring(level: str, size: int) -> Gang:
    """Gang p of `size` members of 8 GPUs each that prefers one domain of label `level`."""
    ref = gang_of(pod(labels={GANG: "p", GANG_SIZE: str(size), TOPOLOGY_PREFERRED: level}), {}, {})
    assert ref is not None
    return Gang(ref, [Member(f"ns/p-{i}", None, EIGHT, 1.0 + i) for i in range(size)])


# Racks a (1 node) and b (1 node) in block x, rack c (2 nodes) in block y, all in zone z: no rack
# holds 3 members; block y does; anywhere (and zone z, all of it) takes the first nodes by name.
LAYERED = gpu_nodes(
    {
        "a-0": {"zone": "z", "block": "x", "rack": "a"},
        "b-0": {"zone": "z", "block": "x", "rack": "b"},
        "c-0": {"zone": "z", "block": "y", "rack": "c"},
        "c-1": {"zone": "z", "block": "y", "rack": "c"},
        "d-0": {"zone": "z", "block": "y", "rack": "d"},
    }
)


def plan_with_levels(gang: Gang, levels: tuple[str, ...]) -> ClusterPlan:
    usage = {name: Usage() for name in LAYERED}
    limits = PlanLimits(levels=levels)
    return plan_cluster(LAYERED, usage, [gang], Matcher(Selectors(), DRIVER), now=10.0, limits=limits)


def test_a_preferred_rack_without_room_widens_to_the_next_wider_level_before_anywhere() -> None:
    result = plan_with_levels(preferring("rack", 3), ("zone", "block", "rack")).plans["ns/gang:p"]
    assert set(result.slots) == {"c-0", "c-1", "d-0"}, "block y, tried before zone z and anywhere"
    assert result.domain == "block y"
    assert result.reason == (
        "no single rack has room; it is preferred, not required; best fit: the block with the least room to spare"
    )


def test_a_preferred_level_that_fits_is_kept_and_an_unlisted_one_falls_back_to_anywhere() -> None:
    fits = plan_with_levels(preferring("rack", 2), ("zone", "block", "rack")).plans["ns/gang:p"]
    assert set(fits.slots) == {"c-0", "c-1"} and fits.domain == "rack c"
    unlisted = plan_with_levels(preferring("rack", 3), ("zone", "block")).plans["ns/gang:p"]
    assert set(unlisted.slots) == {"a-0", "b-0", "c-0"} and unlisted.domain == "the cluster"


def test_a_required_level_tries_only_its_own() -> None:
    required = gang("r", 3, 1.0, "rack")
    result = plan_with_levels(required, ("zone", "block", "rack")).plans["ns/gang:r"]
    assert not result.feasible and "in one rack" in result.reason
