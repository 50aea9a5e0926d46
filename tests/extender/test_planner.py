"""Gang planning: best fit, holds by age, bound members, expiry and backoff, sticky domains."""

from __future__ import annotations

from extender.capacity import Matcher
from extender.cel_eval import Selectors
from extender.demand import Demand, Request
from extender.gang import gang_of
from extender.model import Node, Usage
from extender.planner import ClusterPlan, Gang, Member, plan_cluster
from tests.builders import DRIVER, GPU, gang_labels, pod, racks

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
    return plan_cluster(nodes, usage, gangs, Matcher(Selectors(), DRIVER), now=now, timeout=timeout)


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


def test_bound_members_fix_the_domain() -> None:
    nodes = racks({"a": 3, "b": 4})
    result = plan(nodes, [gang("g", 3, 1.0, "rack", bound={"g-0": "a-0"})], full=("a-0",))
    assert result.plans["ns/gang:g"].slots == {"a-1": 1, "a-2": 1}, "rack b has more room, but the gang is in rack a"


def test_an_expired_hold_waits_behind_others_for_one_timeout() -> None:
    nodes = racks({"r": 6})
    stale, fresh = gang("stale", 4, 0.0), gang("fresh", 4, 350.0)
    expired = plan(nodes, [stale, fresh], now=400.0, timeout=300.0)
    assert expired.plans["ns/gang:stale"].expired and expired.plans["ns/gang:fresh"].feasible
    assert not expired.plans["ns/gang:stale"].feasible, "it backs off while the fresh gang holds"
    again = plan(nodes, [gang("stale", 4, 0.0)], now=700.0, timeout=300.0)
    assert not again.plans["ns/gang:stale"].expired and again.plans["ns/gang:stale"].feasible


def test_a_gang_is_never_smaller_than_its_members() -> None:
    undercounted = gang("g", 2, 1.0)
    undercounted.members += [Member(f"ns/g-{i}", None, EIGHT, 5.0 + i) for i in (2, 3)]
    assert undercounted.size == 4
    result = plan(racks({"r": 6}), [undercounted])
    assert sum(result.plans["ns/gang:g"].slots.values()) == 4


def test_a_domain_already_given_to_members_is_kept_while_feasible() -> None:
    nodes = racks({"big": 4, "small": 2})
    usage = {name: Usage() for name in nodes}
    matcher = Matcher(Selectors(), DRIVER)
    fresh = plan_cluster(nodes, usage, [gang("g", 2, 1.0, "rack")], matcher, now=2.0, timeout=300.0)
    assert fresh.plans["ns/gang:g"].domain_value == "small", "best fit on first sight"
    kept = plan_cluster(
        nodes, usage, [gang("g", 2, 1.0, "rack")], matcher, now=2.0, timeout=300.0, sticky={"ns/gang:g": "big"}
    )
    assert set(kept.plans["ns/gang:g"].slots) <= {f"big-{i}" for i in range(4)}
    gone = plan_cluster(
        nodes, usage, [gang("g", 5, 1.0, "rack")], matcher, now=2.0, timeout=300.0, sticky={"ns/gang:g": "small"}
    )
    assert not gone.plans["ns/gang:g"].feasible, "a remembered domain never makes an impossible plan look possible"
