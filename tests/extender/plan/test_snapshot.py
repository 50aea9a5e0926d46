"""The one classifier of what changed since a plan: the same view or only events no plan reads,
usage alone (naming the nodes), or members; inter-pod terms make every placed pod count."""

from __future__ import annotations

import copy
import dataclasses

from extender.plan.config import ExtenderConfig
from extender.plan.decide import Decider
from extender.plan.snapshot import Change, Kind, PlanSnapshot, classify
from tests.extender.random_events import SOON, Cluster


def _planned(cluster: Cluster) -> PlanSnapshot:
    decider = Decider(ExtenderConfig())
    decider.plans.plan(cluster.state.view(), None, SOON)
    assert decider.plans.snapshot is not None
    return decider.plans.snapshot


def test_events_no_plan_reads_leave_it_the_same() -> None:
    cluster = Cluster(31)
    snapshot = _planned(cluster)
    assert classify(snapshot, cluster.state.view()) == Change(Kind.SAME, frozenset())
    cluster.touch_claim()
    assert classify(snapshot, cluster.state.view()) == Change(Kind.SAME, frozenset())


def test_a_gpu_freed_outside_gangs_is_usage_on_that_node_alone() -> None:
    cluster = Cluster(32)
    snapshot = _planned(cluster)
    claim = next(
        c
        for c in cluster.state.objects["resourceclaims"].values()
        if (c.get("status") or {}).get("allocation") and not c["metadata"]["name"].startswith("pending")
    )
    node = claim["status"]["allocation"]["devices"]["results"][0]["pool"]
    cluster.state.apply("DELETED", "resourceclaims", claim)
    assert classify(snapshot, cluster.state.view()) == Change(Kind.USAGE, frozenset({node}))


def test_a_new_gang_member_changes_members() -> None:
    cluster = Cluster(33)
    snapshot = _planned(cluster)
    cluster.add_member()
    change = classify(snapshot, cluster.state.view())
    assert change.kind is Kind.MEMBERS
    assert change.nodes == frozenset(), "a new member moves no node: the planner compares none with its memo"


def test_with_inter_pod_terms_a_freed_gpu_changes_members() -> None:
    """A placed pod can move what a member's (anti-)affinity allows, so every placement counts."""
    cluster = Cluster(34)
    picky = copy.deepcopy(cluster.single)
    picky["metadata"]["name"] = "picky"
    term = {"labelSelector": {"matchLabels": {"app": "x"}}, "topologyKey": "kubernetes.io/hostname"}
    picky["spec"]["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}
    cluster._put("pods", picky)
    snapshot = _planned(cluster)
    cluster.free()
    assert classify(snapshot, cluster.state.view()).kind is Kind.MEMBERS


def test_past_the_journal_usage_names_no_nodes() -> None:
    """The journal no longer reaches back to the plan: the same members, every node compared."""
    cluster = Cluster(35)
    snapshot = _planned(cluster)
    cluster.free()
    forgetful = dataclasses.replace(cluster.state.view(), changes=lambda since: None)
    assert classify(snapshot, forgetful) == Change(Kind.USAGE, None)
