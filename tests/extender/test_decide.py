"""Decider: filter answers for plain pods, gang members, held capacity and unseen objects."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from extender.config import ExtenderConfig
from extender.decide import Decider
from extender.view import ClusterView
from tests.builders import CREATED, claim_template, gang_labels, pod, racks, view

SOON_AFTER = datetime.fromisoformat(CREATED.replace("Z", "+00:00")).timestamp() + 10
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


def test_a_pod_whose_template_is_not_seen_yet_waits() -> None:
    cluster = gang_view({"r": 2}, [])
    names = sorted(cluster.nodes)
    early = pod("early", template="missing", created=CREATED)
    passing, failed, path = Decider(ExtenderConfig()).filter(cluster, early, names, now=SOON_AFTER)
    assert (passing, path) == ([], "unresolved")
    assert failed == dict.fromkeys(names, "waiting to see ResourceClaimTemplate ns/missing")
