"""The planner's memo is a performance memo only: with it, `plan_cluster` gives what it gives from
scratch, reuses a gang's plan only while what it was planned against is unchanged, and ignores a
memo made on other node objects."""

from __future__ import annotations

import copy

import pytest

from extender.devices.cel_eval import Selectors
from extender.devices.node_usage import Node
from extender.plan.capacity import Matcher
from extender.plan.config import ExtenderConfig
from extender.plan.decide import Decider
from extender.plan.memo import PlanMemo
from extender.plan.planner import ClusterPlan, plan_cluster
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
        with_memo = plan_cluster(
            view.nodes, view.usage, gangs, decider.matcher, now=LATE, limits=limits, clocks=clocks, memo=memo
        )
        without = plan_cluster(view.nodes, view.usage, gangs, matcher, now=LATE, limits=limits, clocks=clocks)
        same_plan(with_memo, without)
        assert with_memo.clocks == without.clocks
        clocks, memo = with_memo.clocks, with_memo.memo


def _plan(cluster: Cluster, previous: ClusterPlan | None = None, nodes: dict[str, Node] | None = None) -> ClusterPlan:
    view = cluster.state.view()
    return plan_cluster(
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
