"""The planner's memo is a performance memo only: with it, `plan_incrementally` gives what the pure
`plan_cluster` gives from scratch, reuses a gang's plan only while what it was planned against is
unchanged, and ignores a memo made on other node objects."""

from __future__ import annotations

import copy

import pytest

from extender.devices.cel_eval import Selectors
from extender.devices.node_usage import Node
from extender.plan.capacity import Matcher
from extender.plan.config import ExtenderConfig
from extender.plan.decide import Decider
from extender.plan.incremental import IncrementalPlan, PlanMemo, plan_incrementally
from extender.plan.planner import plan_cluster
from extender.pods.model import HoldClock, PlanLimits
from testkit.builders import DRIVER
from tests.extender.random_events import LATE, SOON, Cluster, same_plan


@pytest.mark.parametrize("seed", [4, 5])
def test_a_plan_with_the_memo_equals_one_without_it_when_holds_have_expired(seed: int) -> None:
    cluster = Cluster(seed)
    decider = Decider(ExtenderConfig())
    clocks: dict[str, HoldClock] | None = None
    memo: PlanMemo | None = None
    for _ in range(50):
        cluster.step()
        view = cluster.state.view()
        gangs = Decider(ExtenderConfig()).plans.gangs(view, cluster.single)
        matcher = Matcher(Selectors(), DRIVER)
        limits = decider.plans.limits
        with_memo = plan_incrementally(
            view.nodes, view.usage, gangs, decider.matcher, now=LATE, limits=limits, clocks=clocks, memo=memo
        )
        without = plan_cluster(view.nodes, view.usage, gangs, matcher, now=LATE, limits=limits, clocks=clocks)
        same_plan(with_memo, without)
        assert with_memo.clocks == without.clocks
        clocks, memo = with_memo.clocks, with_memo.memo


def _plan(
    cluster: Cluster, previous: IncrementalPlan | None = None, nodes: dict[str, Node] | None = None
) -> IncrementalPlan:
    view = cluster.state.view()
    return plan_incrementally(
        view.nodes if nodes is None else nodes,
        view.usage,
        Decider(ExtenderConfig()).plans.gangs(view, cluster.single),
        Matcher(Selectors(), DRIVER),
        now=SOON,
        limits=PlanLimits(),
        clocks=None if previous is None else previous.clocks,
        memo=None if previous is None else previous.memo,
    )


def test_an_unchanged_cluster_reuses_every_gang_plan_from_the_memo() -> None:
    cluster = Cluster(41)
    first = _plan(cluster)
    again = _plan(cluster, first)
    assert again.plans and all(again.plans[key] is plan for key, plan in first.plans.items())


def test_a_memo_made_on_other_node_objects_is_not_used() -> None:
    """Equal nodes that are other objects may have been rebuilt from a changed slice: nothing is
    reused, and the plan equals the one from scratch."""
    cluster = Cluster(42)
    first = _plan(cluster)
    copied = {name: copy.copy(node) for name, node in cluster.state.view().nodes.items()}
    again = _plan(cluster, first, copied)
    assert again.plans and not any(again.plans[key] is plan for key, plan in first.plans.items())
    same_plan(again, first)


@pytest.mark.parametrize(("seed", "now"), [(6, SOON), (7, SOON), (8, LATE)])
def test_a_plan_told_what_changed_by_the_journal_equals_one_from_scratch(seed: int, now: float) -> None:
    """As the extender plans: the same gang objects while only usage moved (settled gangs reused by
    identity), `changed` from the view's journal, holds running or expired. Each step's plan equals
    the pure planner's from scratch, clocks included."""
    cluster = Cluster(seed)
    decider = Decider(ExtenderConfig())
    previous: IncrementalPlan | None = None
    last_version = None
    gangs = None
    for _ in range(60):
        event = cluster.step()
        view = cluster.state.view()
        changes = view.changes(last_version) if last_version is not None else None
        if gangs is None or changes is None or any(kind != "usage" for kind, _ in changes):
            gangs = decider.plans.gangs(view, cluster.single)
        changed = None if changes is None else {key[1] for kind, key in changes if kind in ("usage", "node")}
        clocks = None if previous is None else previous.clocks
        mine = plan_incrementally(
            view.nodes,
            view.usage,
            gangs,
            decider.matcher,
            now=now,
            limits=decider.plans.limits,
            clocks=clocks,
            memo=None if previous is None else previous.memo,
            changed=changed,
        )
        fresh = plan_cluster(
            view.nodes,
            view.usage,
            decider.plans.gangs(view, cluster.single),
            Matcher(Selectors(), DRIVER),
            now=now,
            limits=decider.plans.limits,
            clocks=clocks,
        )
        same_plan(mine, fresh)
        assert mine.clocks == fresh.clocks, event
        previous, last_version = mine, view.version
