"""CurrentPlan: a plan reused across watch events is never reused when something it depends on
changed, and always equals a plan made from scratch (a fresh Decider, or the planner without its
memo) on the same view: the oracle of the incremental planner."""

from __future__ import annotations

import copy
import gc
import threading
import time
from typing import Any

import pytest

from extender.cluster.state import ClusterState
from extender.plan.config import ExtenderConfig
from extender.plan.decide import Decider
from extender.plan.planner import ClusterPlan
from extender.plan.scoring import score
from extender.pods.model import Gang
from testkit import builders
from testkit.builders import DRIVER
from tests.extender.random_events import LATE, SOON, Cluster, same_plan


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_reused_plan_equals_a_fresh_deciders_plan_over_random_events(seed: int) -> None:
    cluster = Cluster(seed)
    decider = Decider(ExtenderConfig())
    for _ in range(50):
        cluster.step()
        view = cluster.state.view()
        same_plan(
            decider.plans.plan(view, cluster.single, SOON),
            Decider(ExtenderConfig()).plans.plan(view, cluster.single, SOON),
        )


def test_an_unrelated_event_reuses_every_gang_plan() -> None:
    cluster = Cluster(6)
    decider = Decider(ExtenderConfig())
    before = decider.plans.plan(cluster.state.view(), cluster.single, SOON)
    cluster.touch_claim()
    view = cluster.state.view()
    after = decider.plans.plan(view, cluster.single, SOON)
    assert all(after.plans[key] is plan for key, plan in before.plans.items())
    assert after.held == before.held


def test_a_gpu_freed_beside_used_ones_reuses_every_whole_node_gang_plan() -> None:
    """A 1-GPU pod ends on a node whose other 7 GPUs stay busy: no 8-GPU member fits there before
    or after, so no gang's plan can change and none is planned again."""
    cluster = Cluster(10)
    decider = Decider(ExtenderConfig())
    before = decider.plans.plan(cluster.state.view(), cluster.single, SOON)
    cluster.free()
    view = cluster.state.view()
    after = decider.plans.plan(view, cluster.single, SOON)
    assert all(after.plans[key] is plan for key, plan in before.plans.items())
    same_plan(after, Decider(ExtenderConfig()).plans.plan(view, cluster.single, SOON))


def test_an_expired_hold_revives_only_where_a_member_now_fits() -> None:
    """Past the hold timeout a gang holds again once capacity is freed where it may go; a freed
    GPU that still leaves no room for one of its 8-GPU members is not such capacity."""
    cluster = Cluster(11)
    decider = Decider(ExtenderConfig())
    expired = decider.plans.plan(cluster.state.view(), cluster.single, LATE)
    waiting = [key for key, clock in expired.clocks.items() if clock.expired]
    assert waiting
    node = next(name for name, used in cluster.state.view().usage.items() if len(used.devices) == 8)
    claims = [
        c
        for c in cluster.state.objects["resourceclaims"].values()
        if any(
            r.get("pool") == node
            for r in ((c.get("status") or {}).get("allocation") or {}).get("devices", {}).get("results", [])
        )
    ]
    cluster.state.apply("DELETED", "resourceclaims", claims[0])
    one_freed = decider.plans.plan(cluster.state.view(), cluster.single, LATE + 1)
    assert all(one_freed.clocks[key].expired for key in waiting), "one GPU beside 7 busy ones fits no member"
    for claim in claims[1:]:
        cluster.state.apply("DELETED", "resourceclaims", claim)
    node_freed = decider.plans.plan(cluster.state.view(), cluster.single, LATE + 2)
    assert not any(node_freed.clocks[key].expired for key in waiting), "a whole free node fits a member"


@pytest.mark.parametrize("event", ["allocate", "add_member", "taint"])
def test_a_plan_is_not_reused_when_something_it_depends_on_changed(event: str) -> None:
    cluster = Cluster(7)
    decider = Decider(ExtenderConfig())
    before = decider.plans.plan(cluster.state.view(), cluster.single, SOON)
    planned = next(plan for plan in before.plans.values() if plan.slots)
    node = sorted(planned.slots)[0]
    if event == "allocate":
        cluster.allocate(node)  # a claim allocated on a planned node
    elif event == "add_member":
        cluster.add_member()
    else:  # the planned node's slice changes
        changed = next(s for s in cluster.state.slices.values() if s.node == node and s.table.devices).as_api()
        for device in changed["spec"]["devices"]:
            device["taints"] = [{"key": "broken", "effect": "NoSchedule"}]
        cluster._put("resourceslices", changed)
    view = cluster.state.view()
    after = decider.plans.plan(view, cluster.single, SOON)
    same_plan(after, Decider(ExtenderConfig()).plans.plan(view, cluster.single, SOON))
    assert after.plans != before.plans or after.held != before.held


@pytest.mark.parametrize("seed", [8, 9])
def test_cached_members_and_scores_equal_a_fresh_deciders_over_random_events(seed: int) -> None:
    """Members taken from the last pass by the watches' journal, and node scores remembered per
    demand, are what a fresh Decider works out from the same view."""
    cluster = Cluster(seed)
    decider = Decider(ExtenderConfig())
    names = sorted(cluster.state.view().nodes)
    member_key = next(key for key in cluster.state.objects["pods"] if key[1].startswith("pending"))
    for _ in range(40):
        cluster.step()
        view = cluster.state.view()
        fresh = Decider(ExtenderConfig())
        assert decider.plans.gangs(view, cluster.single) == fresh.plans.gangs(view, cluster.single)
        member = view.pods[member_key]
        assert decider.prioritize(view, member, names) == fresh.prioritize(view, member, names)
        # A pod outside a gang is scored on the usage its plan holds (which, with hold clocks kept
        # across plans, a fresh Decider need not share): the scores of that very usage.
        scores = decider.prioritize(view, cluster.single, names)
        assert decider.plans.snapshot is not None
        held = decider.plans.snapshot.plan.held
        demand = decider.demand(view, cluster.single)
        weights = decider.config.weights
        assert scores == {name: score(view.nodes[name], held[name], demand, decider.matcher, weights) for name in names}


def test_the_journal_names_what_changed_and_gives_up_past_its_floor() -> None:
    cluster = Cluster(10)
    before = cluster.state.view()
    cluster.free()
    cluster.touch_claim()
    after = cluster.state.view()
    changes = after.changes(before.version)
    assert changes is not None
    assert {kind for kind, _ in changes} == {"resourceclaims", "usage"}
    assert after.changes(before.version - 1) is None, "before the last LIST: not known"
    assert after.changes(after.version) == set()
    unchanged = cluster.state.view()
    assert unchanged is after, "no event since: the same view"
    assert after.pods is before.pods, "only claims changed: the pods mapping is shared"


def test_objects_that_plans_and_watches_keep_are_frozen_out_of_full_collections() -> None:
    """A full collection walking what a plan from scratch leaves, or what watch events bring,
    stalls a call; both are frozen (a plan from scratch at once, events every REFREEZE_EVENTS)."""
    cluster = Cluster(12)
    decider = Decider(ExtenderConfig())
    gc.unfreeze()
    try:
        decider.plans.plan(cluster.state.view(), cluster.single, SOON)
        assert gc.get_freeze_count() > 0, "a plan from scratch freezes what it made"
        gc.unfreeze()
        for _ in range(ClusterState.REFREEZE_EVENTS - 1):
            cluster.touch_claim()
        assert gc.get_freeze_count() == 0
        cluster.touch_claim()
        assert gc.get_freeze_count() > 0, "watch events freeze what they stored"
    finally:
        gc.unfreeze()


def test_an_event_no_gang_reads_answers_with_the_same_plan_and_one_it_reads_does_not() -> None:
    """A status update of a pod outside every gang, or a DeviceClass (not journaled) changed where
    no member's demand reads it, leaves the whole plan as it was (no pass over gangs); a class's
    selectors, which every member's demand carries, or a gang member's claim allocated are planned
    again; a member's claim written again unchanged is not."""
    cluster = Cluster(13)
    decider = Decider(ExtenderConfig())
    before = decider.plans.plan(cluster.state.view(), cluster.single, SOON)
    cluster.touch_claim()
    assert decider.plans.plan(cluster.state.view(), cluster.single, SOON) is before
    device_class = copy.deepcopy(next(iter(cluster.state.objects["deviceclasses"].values())))
    device_class["metadata"]["labels"] = {"changed": "yes"}
    cluster._put("deviceclasses", device_class)
    assert decider.plans.plan(cluster.state.view(), cluster.single, SOON) is before
    device_class["spec"]["selectors"].append({"cel": {"expression": "true"}})
    cluster._put("deviceclasses", device_class)
    view = cluster.state.view()
    after_class = decider.plans.plan(view, cluster.single, SOON)
    assert after_class is not before
    same_plan(after_class, Decider(ExtenderConfig()).plans.plan(view, cluster.single, SOON))
    member_claim = next(
        c for c in cluster.state.objects["resourceclaims"].values() if c["metadata"]["name"].startswith("pending")
    )
    cluster._put("resourceclaims", member_claim)  # a new resourceVersion, the same member
    assert decider.plans.plan(cluster.state.view(), cluster.single, SOON) is after_class
    assert cluster.allocate() == "allocate"  # a member placed: its gang is planned again
    view = cluster.state.view()
    after_claim = decider.plans.plan(view, cluster.single, SOON)
    assert after_claim is not after_class
    same_plan(after_claim, Decider(ExtenderConfig()).plans.plan(view, cluster.single, SOON))


def test_a_gpu_freed_outside_every_gang_skips_the_pass_over_gang_pods() -> None:
    """Only usage moved: the members are those the last pass found (the same list), the plan still
    equals a fresh Decider's. With a pod that has inter-pod terms, a claim's allocation can move what
    they count, so the pass runs again."""
    cluster = Cluster(14)
    decider = Decider(ExtenderConfig())
    decider.plans.plan(cluster.state.view(), cluster.single, SOON)
    found = _gangs_planned(decider)
    cluster.free()
    view = cluster.state.view()
    same_plan(
        decider.plans.plan(view, cluster.single, SOON), Decider(ExtenderConfig()).plans.plan(view, cluster.single, SOON)
    )
    assert _gangs_planned(decider) is found
    term = {"labelSelector": {"matchLabels": {"app": "x"}}, "topologyKey": "kubernetes.io/hostname"}
    picky = copy.deepcopy(cluster.single)
    picky["metadata"]["name"] = "picky"
    picky["spec"]["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}
    cluster._put("pods", picky)
    decider.plans.plan(cluster.state.view(), cluster.single, SOON)
    found = _gangs_planned(decider)
    cluster.free()
    view = cluster.state.view()
    same_plan(
        decider.plans.plan(view, cluster.single, SOON), Decider(ExtenderConfig()).plans.plan(view, cluster.single, SOON)
    )
    assert _gangs_planned(decider) is not found


def _running_claim(cluster: Cluster) -> dict[str, Any]:
    """The allocated claim of a 1-GPU pod outside every gang."""
    return next(
        c
        for c in cluster.state.objects["resourceclaims"].values()
        if c["metadata"]["name"].startswith("n0") and (c.get("status") or {}).get("allocation")
    )


def _gangs_planned(decider: Decider) -> list[Gang]:
    assert decider.plans.snapshot is not None
    return decider.plans.snapshot.gangs


def _wait_for_version(decider: Decider, version: int) -> None:
    deadline = time.monotonic() + 10
    while decider.plans.snapshot is None or decider.plans.snapshot.version < version:
        assert time.monotonic() < deadline, "the background planner did not catch up"
        time.sleep(0.01)


def test_a_pod_outside_gangs_is_answered_from_the_last_plan_while_only_usage_moved() -> None:
    """A GPU freed outside every gang: the 1-GPU pod's answer comes from the plan already made,
    and the background planner brings the plan to the new view; a new gang member is never
    answered around: the plan is made for the view that holds it."""
    cluster = Cluster(15)
    decider = Decider(ExtenderConfig())
    names = sorted(cluster.state.view().nodes)
    decider.filter(cluster.state.view(), cluster.single, names, now=SOON)
    made = decider.plans.snapshot
    assert made is not None
    cluster.state.apply("DELETED", "resourceclaims", _running_claim(cluster))
    view = cluster.state.view()
    decider.filter(view, cluster.single, names, now=SOON)
    assert decider.plans.snapshot is made and decider.plans.refresh_wanted.is_set()
    stop = threading.Event()
    planner = threading.Thread(target=decider.plans.keep_fresh, args=(cluster.state.view, stop))
    planner.start()
    try:
        _wait_for_version(decider, view.version)
    finally:
        stop.set()
        decider.plans.refresh_wanted.set()
        planner.join(5)
    cluster.add_member()
    view = cluster.state.view()
    decider.filter(view, cluster.single, names, now=SOON)
    assert decider.plans.snapshot is not None and decider.plans.snapshot.version == view.version


def test_a_pod_an_older_plan_refuses_everywhere_is_judged_again_by_a_plan_of_the_view() -> None:
    """A 1-GPU pod takes a GPU on a node held for a gang, which then plans elsewhere: the older plan
    still holds that node, but a pod it refuses on every node offered is judged by a plan of the
    view it is asked at, so a stale plan never parks it as unschedulable."""
    cluster = Cluster(16)
    decider = Decider(ExtenderConfig())
    first = decider.plans.plan(cluster.state.view(), None, SOON)
    for node in sorted(first.holders):
        taken = builders.allocated_claim(f"taken-{node}", node, ["gpu-0"], "ns")
        taken["metadata"]["resourceVersion"] = "1"
        cluster.state.apply("ADDED", "resourceclaims", taken)
        view = cluster.state.view()
        fresh = Decider(ExtenderConfig()).plans.plan(view, None, SOON)
        if node not in fresh.holders:
            break
        cluster.state.apply("DELETED", "resourceclaims", taken)
    else:
        pytest.fail("no held node whose gang can plan elsewhere")
    assert decider.plans.held_plan(view, SOON)[1], "the older plan is what a plain pod would be answered from"
    passing, failed, _ = decider.filter(view, cluster.single, [node], now=SOON)
    assert (passing, failed) == ([node], {})


def test_answers_asked_while_a_plan_is_being_made_wait_for_it_and_share_it() -> None:
    """Under the GIL two plans made side by side only share the CPU: an answer asked while a plan
    of the same view is being made waits for it and gets that very plan, not one of its own. (1,600
    nodes: the first plan takes tens of ms, so the second is asked while it runs.)"""
    busy = builders.busy_cluster(1600, rack_size=16, pending_gangs=12, pending_gang_size=8, namespace="ns")
    state = ClusterState(DRIVER)
    for kind, items in busy.objects.items():
        state.replace(kind, items)
    decider, view = Decider(ExtenderConfig()), state.view()
    first_started = threading.Event()
    plans: dict[str, ClusterPlan] = {}
    spans: dict[str, tuple[float, float]] = {}

    def plan(name: str) -> None:
        started = time.perf_counter()
        first_started.set()
        plans[name] = decider.plans.plan(view, None, SOON)
        spans[name] = (started, time.perf_counter())

    first = threading.Thread(target=plan, args=("first",))
    first.start()
    first_started.wait(5)  # asked at once: whichever registers its plan first, the other shares it
    plan("second")
    first.join(60)
    assert spans["second"][0] < spans["first"][1], "the second answer came after the first plan: nothing to share"
    assert plans["second"] is plans["first"], "the second answer made a plan of its own beside the first"
