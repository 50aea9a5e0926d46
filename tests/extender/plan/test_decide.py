"""Decider: filter answers for plain pods, gang members, held capacity, unseen objects, pod affinity."""

from __future__ import annotations

import logging
import threading
from datetime import datetime
from typing import Any

import pytest

from extender.cluster.view import ClusterView
from extender.devices.node_usage import Usage
from extender.plan.config import ExtenderConfig
from extender.plan.decide import RETRY, Decider
from extender.plan.in_flight import feasible_nodes_to_find
from extender.pods.gang import GANG, GANG_SIZE, TOPOLOGY_PREFERRED
from testkit.builders import (
    CREATED,
    SHARE_CLASS,
    allocated_claim,
    claim_template,
    gang_labels,
    gpu_nodes,
    jobset,
    jobset_pod,
    pod,
    racks,
    view,
)

SOON_AFTER = datetime.fromisoformat(CREATED.replace("Z", "+00:00")).timestamp() + 10
LATER = "2026-11-29T00:00:05Z"
TEMPLATES = [claim_template("one", 1), claim_template("eight", 8)]


def member(name: str, gang: str, size: int, required: str | None = None) -> dict[str, Any]:
    return pod(name, labels=gang_labels(gang, size, required), template="eight", created=CREATED)


def gang_view(counts: dict[str, int], members: list[dict[str, Any]]) -> ClusterView:
    return view(racks(counts), pods=members, templates=TEMPLATES)


def test_a_pod_without_claims_or_gang_takes_the_fast_path() -> None:
    cluster = gang_view({"r": 2}, [member("g-0", "g", 2), member("g-1", "g", 2)])
    names = sorted(cluster.nodes)
    assert Decider(ExtenderConfig()).filter(cluster, pod("web"), names, now=SOON_AFTER) == (names, {}, "fast")


def test_a_gang_member_is_answered_with_only_its_planned_nodes() -> None:
    members = [member("g-0", "g", 2, "rack"), member("g-1", "g", 2, "rack")]
    cluster = gang_view({"big": 4, "small": 2}, members)
    names = sorted(cluster.nodes)
    passing, failed, path = Decider(ExtenderConfig()).filter(cluster, members[0], names, now=SOON_AFTER)
    assert (passing, path) == (["small-0", "small-1"], "gang")
    assert sorted(failed) == [f"big-{i}" for i in range(4)]
    assert failed["big-0"] == "gang ns/gang:g is planned onto rack small: small-0, small-1"


def test_a_plain_pod_is_refused_nodes_held_for_a_gang_and_told_which() -> None:
    cluster = gang_view({"r": 3}, [member("g-0", "g", 2), member("g-1", "g", 2)])
    names = sorted(cluster.nodes)
    single = pod("single", template="one", created=CREATED)
    passing, failed, path = Decider(ExtenderConfig()).filter(cluster, single, names, now=SOON_AFTER)
    assert (passing, path) == (["r-2"], "held-check")
    assert failed == {name: f"the free devices on {name} are held for gang(s) ns/gang:g" for name in ("r-0", "r-1")}


def test_capacity_held_for_a_gang_is_held_from_equal_and_lower_priority_only() -> None:
    """On 424026c a pending gang's slots refused a pod of any priority, higher ones too."""
    members = [member("g-0", "g", 2), member("g-1", "g", 2)]
    for body in members:
        body["spec"]["priority"] = 10
    cluster = gang_view({"r": 3}, members)
    names = sorted(cluster.nodes)
    for priority, passing_nodes in ((0, ["r-2"]), (10, ["r-2"]), (100, names)):
        single = pod(f"single-{priority}", template="one", created=CREATED)
        single["spec"]["priority"] = priority
        passing, failed, _ = Decider(ExtenderConfig()).filter(cluster, single, names, now=SOON_AFTER)
        assert passing == passing_nodes, (priority, failed)


def test_one_namespaces_gangs_hold_capacity_on_at_most_the_admins_share_of_the_nodes() -> None:
    """On 424026c one pod labelled as a member of a gang of 8 (the rest never created) held all 8
    nodes from every other pod of its priority, and held them again whenever capacity freed."""
    forged = [pod("b-0", namespace="team-b", labels=gang_labels("big", 8), template="eight", created=CREATED)]
    small = [
        pod(f"s-{i}", namespace="team-b", labels=gang_labels("small", 2), template="eight", created=LATER)
        for i in range(2)
    ]
    templates = [*TEMPLATES, claim_template("eight", 8, namespace="team-b")]
    cluster = view(racks({"r": 8}), pods=[*forged, *small], templates=templates)
    names = sorted(cluster.nodes)
    team_a = pod("a", template="eight", created=CREATED)
    unbounded = Decider(ExtenderConfig()).filter(cluster, team_a, names, now=SOON_AFTER)
    assert unbounded[0] == [], "with no bound, team B's gangs hold every node"
    decider = Decider(ExtenderConfig(max_namespace_hold_share=0.25))  # 2 of 8 nodes
    passing, failed, _ = decider.filter(cluster, team_a, names, now=SOON_AFTER)
    assert len(passing) == 6 and len(failed) == 2, failed
    assert all("team-b/gang:small" in why for why in failed.values()), (
        "the gang of 8 is past the share: it holds nothing"
    )
    alone = view(racks({"r": 8}), pods=forged, templates=templates)
    bounded = Decider(ExtenderConfig(max_namespace_hold_share=0.25))
    assert bounded.filter(alone, team_a, names, now=SOON_AFTER)[0] == names, "the gang of 8 alone holds nothing"


def test_a_pod_whose_template_is_not_seen_yet_waits() -> None:
    cluster = gang_view({"r": 2}, [])
    names = sorted(cluster.nodes)
    early = pod("early", template="missing", created=CREATED)
    passing, failed, path = Decider(ExtenderConfig()).filter(cluster, early, names, now=SOON_AFTER)
    assert (passing, path) == ([], "retry"), "answered as an error the scheduler retries soon"
    assert failed == dict.fromkeys(names, "waiting to see ResourceClaimTemplate ns/missing")


FOUR = claim_template("four", 4)


def four_gpu_member(index: int, **fields: Any) -> dict[str, Any]:
    """Member t-<index> of gang t: 4 pods x 4 GPUs that must share one rack."""
    return pod(f"t-{index}", labels=gang_labels("t", 4, "rack"), template="four", created=CREATED, **fields)


def test_a_member_whose_claim_is_allocated_before_it_is_bound_counts_as_placed() -> None:
    """The scheduler writes the allocation before nodeName: the member is on a-0, not waiting."""
    first = four_gpu_member(0, claim="t-0-gpus")
    claim = allocated_claim("t-0-gpus", "a-0", [f"gpu-{i}" for i in range(4)], reserved_for="t-0")
    members = [first, *(four_gpu_member(i) for i in range(1, 4))]
    cluster = view(racks({"a": 2, "b": 2}), pods=members, templates=[FOUR], claims=[claim])
    passing, failed, path = Decider(ExtenderConfig()).filter(cluster, members[1], sorted(cluster.nodes), SOON_AFTER)
    assert path == "gang" and passing and set(passing) <= {"a-0", "a-1"}, (passing, failed)


def test_a_restarted_extender_answers_every_member_as_the_running_one_does() -> None:
    """Domains come from the API (placed members), never from what one process remembers."""
    members = [member(f"g-{i}", "g", 2, "rack") for i in range(2)]
    nodes = racks({"big": 4, "small": 2})
    others = [allocated_claim(f"o-{i}", f"big-{i}", [f"gpu-{d}" for d in range(8)]) for i in range(2)]
    placed = member("g-0", "g", 2, "rack") | {"status": {"resourceClaimStatuses": [{"name": "gpus"}]}}
    placed["status"]["resourceClaimStatuses"][0]["resourceClaimName"] = "g-0-gpus"
    g0_claim = allocated_claim("g-0-gpus", "small-0", [f"gpu-{d}" for d in range(8)], reserved_for="g-0")
    sequence = [
        view(nodes, pods=members, templates=TEMPLATES, version=1),
        view(nodes, pods=members, templates=TEMPLATES, claims=others, version=2),  # big now as tight as small
        view(nodes, pods=[placed, members[1]], templates=TEMPLATES, claims=[*others, g0_claim], version=3),
    ]
    running = Decider(ExtenderConfig())
    for cluster in sequence:
        for asking in cluster.pods.values():
            names = sorted(cluster.nodes)
            restarted = Decider(ExtenderConfig())
            assert running.filter(cluster, asking, names, SOON_AFTER) == restarted.filter(
                cluster, asking, names, SOON_AFTER
            ), (cluster.version, asking.name)
    final = running.filter(sequence[-1], members[1], sorted(nodes), SOON_AFTER)
    assert final[0] == ["small-1"], "the placed member fixes the rack"


def test_a_second_body_for_the_same_pod_name_gets_its_own_answer() -> None:
    cluster = gang_view({"big": 4, "small": 2}, [])
    names = sorted(cluster.nodes)
    decider = Decider(ExtenderConfig())
    small = pod("same", labels=gang_labels("x", 2, "rack"), template="eight", created=CREATED)
    big = pod("same", labels=gang_labels("y", 3, "rack"), template="eight", created=CREATED)
    assert decider.filter(cluster, small, names, SOON_AFTER)[0] == ["small-0", "small-1"]
    passing, failed, _ = decider.filter(cluster, big, names, SOON_AFTER)
    assert len(passing) == 3 and set(passing) <= {f"big-{i}" for i in range(4)}, failed


def test_a_succeeded_member_needs_no_capacity() -> None:
    done = pod("g-0", labels=gang_labels("g", 2), template="eight", created=CREATED, node="r-0", phase="Succeeded")
    running = pod("g-1", labels=gang_labels("g", 2), template="eight", created=CREATED, node="r-1")
    claim = allocated_claim("g-1-gpus", "r-1", [f"gpu-{d}" for d in range(8)])
    cluster = view(racks({"r": 2}), pods=[done, running], templates=TEMPLATES, claims=[claim])
    single = pod("single", template="one", created=CREATED)
    passing, failed, _ = Decider(ExtenderConfig()).filter(cluster, single, ["r-0"], SOON_AFTER)
    assert passing == ["r-0"], f"r-0 was freed by the finished member, yet: {failed}"


def test_a_gang_that_cannot_complete_stops_holding_until_the_cluster_changes() -> None:
    """Gang g of 3 has only 2 members: its hold expires and stays expired, until capacity is freed."""
    members = [member("g-0", "g", 3), member("g-1", "g", 3)]
    nodes = racks({"r": 4})
    busy = allocated_claim("other", "r-3", ["gpu-0"])
    single = pod("single", template="one", created=CREATED)
    names = sorted(nodes)
    decider = Decider(ExtenderConfig(plan_timeout_seconds=300))

    def passing(cluster: ClusterView, at: float) -> list[str]:
        return decider.filter(cluster, single, names, at)[0]

    before = view(nodes, pods=members, templates=TEMPLATES, claims=[busy], version=1)
    assert passing(before, SOON_AFTER) == ["r-3"], "held while fresh"
    assert passing(before, SOON_AFTER + 400) == names, "expired: holds nothing"
    assert passing(before, SOON_AFTER + 700) == names, "nothing changed: still holds nothing"
    freed = view(nodes, pods=members, templates=TEMPLATES, version=2)
    assert passing(freed, SOON_AFTER + 800) == ["r-3"], "capacity freed where it may go: it holds again"


def test_an_absurd_gang_size_is_refused_for_that_gang_alone_and_quickly() -> None:
    shares = claim_template("shares", 8, device_class=SHARE_CLASS["metadata"]["name"])
    huge = pod("huge-0", labels=gang_labels("huge", 1_000_000_000), template="shares", created=CREATED)
    small = pod("s-0", labels=gang_labels("s", 1), template="shares", created=LATER)
    nodes = gpu_nodes({f"n-{i}": {} for i in range(2)}, shares=True)
    cluster = view(nodes, pods=[huge, small], templates=[shares], classes=[SHARE_CLASS])
    answers: list[tuple[list[str], dict[str, str], str]] = []
    worker = threading.Thread(
        target=lambda: answers.extend(
            Decider(ExtenderConfig()).filter(cluster, asking, sorted(nodes), SOON_AFTER) for asking in (huge, small)
        ),
        daemon=True,
    )
    worker.start()
    worker.join(20)
    assert len(answers) == 2, "planning a gang of a billion never finished"
    assert answers[0][0] == [] and "could ever hold at most 20" in answers[0][1]["n-0"], answers[0]
    assert answers[1][0] == ["n-0"] and answers[1][2] == "gang", "the other gang is still planned"


def test_each_gang_plan_is_logged_once_and_rejections_at_debug(caplog: pytest.LogCaptureFixture) -> None:
    members = [member("g-0", "g", 2, "rack"), member("g-1", "g", 2, "rack")]
    waiting = [member("w-0", "w", 5, "rack")]
    cluster = gang_view({"big": 4, "small": 2}, [*members, *waiting])
    decider = Decider(ExtenderConfig())
    with caplog.at_level(logging.DEBUG, logger="extender.plan"):
        for _ in range(3):
            for asking in (*members, *waiting):
                decider.filter(cluster, asking, sorted(cluster.nodes), SOON_AFTER)
    planned = [r for r in caplog.records if r.levelno == logging.INFO]
    rejected = [r for r in caplog.records if r.levelno == logging.DEBUG]
    assert [r.getMessage() for r in planned] == [
        "gang ns/gang:g planned onto rack small: small-0, small-1 (best fit: the rack with the least room to spare)"
    ]
    assert len(rejected) == 1 and "gang ns/gang:w needs 5 more pod(s)" in rejected[0].getMessage()


def test_a_member_asked_about_after_its_claim_was_allocated_keeps_its_node() -> None:
    """Its rack-mates are planned onto both nodes of rack a; the member itself can only go to a-0."""
    first = four_gpu_member(0, claim="t-0-gpus")
    claim = allocated_claim("t-0-gpus", "a-0", [f"gpu-{i}" for i in range(4)], reserved_for="t-0")
    members = [first, *(four_gpu_member(i) for i in range(1, 4))]
    cluster = view(racks({"a": 2, "b": 2}), pods=members, templates=[FOUR], claims=[claim])
    passing, failed, _ = Decider(ExtenderConfig()).filter(cluster, first, sorted(cluster.nodes), SOON_AFTER)
    assert passing == ["a-0"] and failed["a-1"] == "the claims of this pod are allocated on a-0"


def _rack(name: str) -> str:
    return name.split("-", maxsplit=1)[0]


@pytest.mark.parametrize("layout", [{"a": 2, "b": 2}, {"a": 2, "b": 4}], ids=["2+2", "2+4"])
def test_an_exclusive_jobset_plans_each_job_alone_in_a_rack(layout: dict[str, int]) -> None:
    """JobSet's webhook keeps each Job alone in a rack; planning the replicated job into one rack
    deadlocked (2+2: no rack holds 4 pods) or fought the anti-affinity (2+4)."""
    spec = jobset("train", [("workers", 2, 2)], exclusive="rack")
    leaders = [jobset_pod("train", "workers", index, 0, template="eight", exclusive="rack") for index in (0, 1)]
    decider = Decider(ExtenderConfig())
    cluster = view(racks(layout), pods=leaders, templates=TEMPLATES, jobsets=[spec])
    answers = {}
    for leader in leaders:
        passing, failed, _ = decider.filter(cluster, leader, list(cluster.nodes), now=SOON_AFTER)
        assert passing, failed
        answers[leader["metadata"]["name"]] = {_rack(name) for name in passing}
    assert all(len(racks_) == 1 for racks_ in answers.values()), answers
    assert set.union(*answers.values()) == {"a", "b"}, f"each Job in a rack of its own: {answers}"


def test_a_placed_job_keeps_its_rack_and_the_other_job_gets_another_one() -> None:
    """Job 1 is already in rack b (4 nodes, room for both Jobs); Job 0 must not be sent there."""
    spec = jobset("train", [("workers", 2, 2)], exclusive="rack")
    placed = [
        jobset_pod("train", "workers", 1, completion, template="eight", exclusive="rack", node=f"b-{completion}")
        for completion in (0, 1)
    ]
    leader = jobset_pod("train", "workers", 0, 0, template="eight", exclusive="rack")
    usage = {
        name: Usage(devices=set(node.devices)) if name in ("b-0", "b-1") else Usage()
        for name, node in racks({"a": 2, "b": 4}).items()
    }
    cluster = view(racks({"a": 2, "b": 4}), usage=usage, pods=[*placed, leader], templates=TEMPLATES, jobsets=[spec])
    passing, failed, _ = Decider(ExtenderConfig()).filter(cluster, leader, list(cluster.nodes), now=SOON_AFTER)
    assert {_rack(name) for name in passing} == {"a"}, failed


def test_a_follower_pinned_to_its_leaders_rack_does_not_pin_the_other_jobs() -> None:
    spec = jobset("train", [("workers", 2, 2)], exclusive="rack")
    leader0 = jobset_pod("train", "workers", 0, 0, template="eight", exclusive="rack", node="a-0")
    follower0 = jobset_pod("train", "workers", 0, 1, template="eight", exclusive="rack", node_selector={"rack": "a"})
    leader1 = jobset_pod("train", "workers", 1, 0, template="eight", exclusive="rack")
    usage = {
        name: Usage(devices=set(node.devices)) if name == "a-0" else Usage()
        for name, node in racks({"a": 2, "b": 2}).items()
    }
    cluster = view(
        racks({"a": 2, "b": 2}), usage=usage, pods=[leader0, follower0, leader1], templates=TEMPLATES, jobsets=[spec]
    )
    decider = Decider(ExtenderConfig())
    passing, failed, _ = decider.filter(cluster, leader1, list(cluster.nodes), now=SOON_AFTER)
    assert {_rack(name) for name in passing} == {"b"}, failed
    passing, failed, _ = decider.filter(cluster, follower0, list(cluster.nodes), now=SOON_AFTER)
    assert passing == ["a-1"], failed


def test_driver_and_workers_are_one_gang_that_waits_whole() -> None:
    spec = jobset("pipeline", [("driver", 1, 1), ("workers", 4, 1)])
    pods = [jobset_pod("pipeline", "driver", 0, 0, template="eight")] + [
        jobset_pod("pipeline", "workers", index, 0, template="eight") for index in range(4)
    ]
    decider = Decider(ExtenderConfig())
    four = view(racks({"a": 4}), pods=pods, templates=TEMPLATES, jobsets=[spec])
    passing, failed, _ = decider.filter(four, pods[0], list(four.nodes), now=SOON_AFTER)
    assert passing == [] and "has 5 pods" in next(iter(failed.values())), failed
    five = view(racks({"a": 5}), pods=pods, templates=TEMPLATES, jobsets=[spec], version=2)
    passing, failed, _ = decider.filter(five, pods[0], list(five.nodes), now=SOON_AFTER)
    plan = decider.plans.plan(five, pods[0], SOON_AFTER).plans["ns/jobset:pipeline"]
    assert sum(plan.slots.values()) == 5 and set(plan.part_slots) == {"driver/0", *(f"workers/{i}" for i in range(4))}
    assert len(passing) == 1 and passing == list(plan.part_slots["driver/0"]), failed


def test_a_jobset_pod_waits_until_the_extender_has_seen_its_jobset() -> None:
    leader = jobset_pod("train", "workers", 0, 0, template="eight")
    cluster = view(racks({"a": 2}), pods=[leader], templates=TEMPLATES)
    passing, failed, _ = Decider(ExtenderConfig()).filter(cluster, leader, list(cluster.nodes), now=SOON_AFTER)
    assert passing == [] and "waiting to see JobSet ns/train" in next(iter(failed.values()))


def with_affinity(obj: dict[str, Any], kind: str, *terms: dict[str, Any]) -> dict[str, Any]:
    """`obj` with required `kind` (podAffinity or podAntiAffinity) terms added."""
    affinity = obj["spec"].setdefault("affinity", {}).setdefault(kind, {})
    affinity.setdefault("requiredDuringSchedulingIgnoredDuringExecution", []).extend(terms)
    return obj


def rack_term(labels: dict[str, str]) -> dict[str, Any]:
    return {"labelSelector": {"matchLabels": labels}, "topologyKey": "rack"}


@pytest.mark.parametrize(
    ("kind", "peer_rack", "planned_rack"),
    [("podAntiAffinity", "small", "big"), ("podAffinity", "big", "big")],
    ids=["anti-affinity-avoids-its-rack", "affinity-joins-its-rack"],
)
def test_a_gang_is_planned_by_its_pod_affinity_to_placed_pods(kind: str, peer_rack: str, planned_rack: str) -> None:
    """Best fit alone picks rack small; the scheduler would refuse any plan that breaks the terms."""
    peer = pod("peer", labels={"app": "peer"}, template="one", created=CREATED, node=f"{peer_rack}-0")
    members = [with_affinity(member(f"g-{i}", "g", 2, "rack"), kind, rack_term({"app": "peer"})) for i in range(2)]
    cluster = gang_view({"big": 4, "small": 2}, [peer, *members])
    passing, failed, _ = Decider(ExtenderConfig()).filter(cluster, members[0], sorted(cluster.nodes), SOON_AFTER)
    assert passing and {_rack(name) for name in passing} == {planned_rack}, failed


def exclusive_leader(jobset_name: str, job: str, index: int, **fields: Any) -> dict[str, Any]:
    """A Job's leader as JobSet's webhook writes exclusive placement at rack level: affinity to its
    own Job, anti-affinity to every other Job, in every namespace."""
    leader = jobset_pod(jobset_name, job, index, 0, exclusive="rack", **fields)
    key = "jobset.sigs.k8s.io/job-key"
    mine = leader["metadata"]["labels"][key]
    own = {"key": key, "operator": "In", "values": [mine]}
    others = [{"key": key, "operator": "Exists"}, {"key": key, "operator": "NotIn", "values": [mine]}]
    everywhere = {"topologyKey": "rack", "namespaceSelector": {}}
    with_affinity(leader, "podAffinity", {"labelSelector": {"matchExpressions": [own]}} | everywhere)
    return with_affinity(leader, "podAntiAffinity", {"labelSelector": {"matchExpressions": others}} | everywhere)


def test_an_exclusive_job_is_not_planned_into_a_rack_holding_another_jobsets_pod() -> None:
    """A non-exclusive JobSet's pod in rack a is a Job the leader's anti-affinity keeps away from."""
    other = jobset_pod("web", "web", 0, 0, template="one", node="a-0")
    leader = exclusive_leader("train", "workers", 0, template="four")
    specs = [jobset("web", [("web", 1, 1)]), jobset("train", [("workers", 1, 2)], exclusive="rack")]
    cluster = view(racks({"a": 2, "b": 4}), pods=[other, leader], templates=[*TEMPLATES, FOUR], jobsets=specs)
    passing, failed, _ = Decider(ExtenderConfig()).filter(cluster, leader, sorted(cluster.nodes), SOON_AFTER)
    assert passing and {_rack(name) for name in passing} == {"b"}, failed


def test_a_placed_jobs_leader_does_not_pin_the_other_job_by_its_own_affinity() -> None:
    """Job 0 has no pod yet: Job 1's leader stands in for its demand, not for its Job-keyed terms."""
    spec = jobset("train", [("workers", 2, 2)], exclusive="rack")
    leader1 = exclusive_leader("train", "workers", 1, template="eight", node="b-0")
    follower1 = jobset_pod("train", "workers", 1, 1, template="eight", exclusive="rack", node_selector={"rack": "b"})
    nodes = racks({"a": 2, "b": 2})
    usage = {name: Usage(devices=set(node.devices)) if name == "b-0" else Usage() for name, node in nodes.items()}
    cluster = view(nodes, usage=usage, pods=[leader1, follower1], templates=TEMPLATES, jobsets=[spec])
    passing, failed, _ = Decider(ExtenderConfig()).filter(cluster, follower1, sorted(nodes), SOON_AFTER)
    assert passing == ["b-1"], failed


def test_the_configured_levels_widen_a_preferred_rack() -> None:
    """No rack holds 3; block y does, and is preferred to anywhere (which would start at a-0)."""
    layout = {"a-0": ("x", "a"), "b-0": ("x", "b"), "c-0": ("y", "c"), "c-1": ("y", "c"), "d-0": ("y", "d")}
    nodes = gpu_nodes({name: {"block": block, "rack": rack} for name, (block, rack) in layout.items()})
    labels = {GANG: "p", GANG_SIZE: "3", TOPOLOGY_PREFERRED: "rack"}
    members = [pod(f"p-{i}", labels=labels, template="eight", created=CREATED) for i in range(3)]
    cluster = view(nodes, pods=members, templates=TEMPLATES)
    decider = Decider(ExtenderConfig(topology_levels=("block", "rack")))
    passing, failed, _ = decider.filter(cluster, members[0], sorted(nodes), SOON_AFTER)
    assert passing == ["c-0", "c-1", "d-0"], failed


def test_a_gang_member_asked_about_before_the_watch_delivers_it_keeps_its_gangs_hold() -> None:
    """The scheduler can ask about a gang's first member before the extender's watch has it: the
    gang is planned (and the member admitted) with the pod from the request. A 1-GPU pod asked
    about next, still before the watch delivers it, must not get the capacity held for the rest
    of that gang, or the gang could be left half placed; once the watch has it, as before."""
    cluster = gang_view({"r": 3}, [])
    names = sorted(cluster.nodes)
    decider = Decider(ExtenderConfig())
    first = member("g-0", "g", 2)
    passing, _, path = decider.filter(cluster, first, names, now=SOON_AFTER)
    assert path == "gang" and len(passing) == 2
    decider.plans.plan(cluster, None, SOON_AFTER)  # as the background planner does between two answers
    single = pod("single", template="one", created=CREATED)
    passing, failed, path = decider.filter(cluster, single, names, now=SOON_AFTER)
    assert path == "held-check" and len(failed) == 2, "the held nodes are refused"
    delivered = gang_view({"r": 3}, [first])
    passing, failed, _ = decider.filter(delivered, single, names, now=SOON_AFTER)
    assert len(failed) == 2, "and stay held once the watch has the member"


@pytest.mark.parametrize(
    ("nodes", "percentage", "expected"),
    [(50, 0, 50), (200, 0, 100), (500, 0, 230), (5000, 0, 500), (20000, 0, 1000), (1000, 30, 300), (1000, 100, 1000)],
)
def test_the_scheduler_stops_looking_after_as_many_feasible_nodes_as_it_does(
    nodes: int, percentage: int, expected: int
) -> None:
    assert feasible_nodes_to_find(nodes, percentage) == expected


def test_a_member_is_not_admitted_while_the_scheduler_has_no_room_where_its_gang_is_planned() -> None:
    """The scheduler counts allocations its watch-fed cache assumed a moment ago; the extender
    sees them later. A planned node the scheduler no longer offers, where the extender's view says
    the member fits, means its view is behind: the member waits (retry) rather than start a gang
    that may not fit whole. With every planned node offered it is admitted as usual."""
    members = [member("g-0", "g", 2), member("g-1", "g", 2)]
    cluster = gang_view({"r": 3}, members)
    decider = Decider(ExtenderConfig())
    passing, _, path = decider.filter(cluster, members[0], sorted(cluster.nodes), now=SOON_AFTER)
    assert path == "gang" and len(passing) == 2
    offered = [name for name in sorted(cluster.nodes) if name != passing[0]]
    passing_now, failed, path = decider.filter(cluster, members[0], offered, now=SOON_AFTER)
    assert (passing_now, path) == ([], RETRY)
    assert f"planned onto {passing[0]}, where the scheduler finds no room" in failed[offered[0]]


def test_a_gang_pod_asked_about_long_after_its_creation_and_absent_from_the_view_holds_nothing() -> None:
    """The scheduler can still ask about a pod the watch has seen deleted: it is not counted, so a
    deleted gang holds no capacity for the pods asked about after it."""
    cluster = gang_view({"r": 3}, [])
    names = sorted(cluster.nodes)
    decider = Decider(ExtenderConfig())
    later = SOON_AFTER + 3600
    decider.filter(cluster, member("g-0", "g", 2), names, now=later)
    decider.plans.plan(cluster, None, later)
    single = pod("single", template="one", created=CREATED)
    assert decider.filter(cluster, single, names, now=later) == (names, {}, "pass")


def test_a_planned_node_taken_by_a_member_in_flight_does_not_hold_back_the_next() -> None:
    """The first member was admitted and the scheduler assumed it on a planned node the view does
    not show used yet: that node missing from the second member's offer is the gang's own doing."""
    members = [member("g-0", "g", 2), member("g-1", "g", 2)]
    cluster = gang_view({"r": 3}, members)
    decider = Decider(ExtenderConfig())
    first, _, _ = decider.filter(cluster, members[0], sorted(cluster.nodes), now=SOON_AFTER)
    offered = [name for name in sorted(cluster.nodes) if name != first[0]]
    passing, _, path = decider.filter(cluster, members[1], offered, now=SOON_AFTER)
    assert (passing, path) == ([first[1]], "gang")
