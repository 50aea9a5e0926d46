"""The member index a ClusterState keeps as events arrive equals members worked out from scratch, is
the very same mapping while no member changed, and forgets deleted pods."""

from __future__ import annotations

import pytest

from extender.cluster.membership import dependencies, sources_of, work_out
from extender.cluster.view import ClusterView
from extender.pods.facts import PodFacts
from extender.pods.model import Entry
from testkit.builders import DRIVER
from tests.extender.random_events import Cluster

Key = tuple[str, str]


def _from_scratch(view: ClusterView) -> dict[Key, Entry]:
    sources = sources_of(view, DRIVER)
    return {
        key: work_out(pod, view.claims, view.templates, sources) for key, pod in view.pods.items() if pod.may_join_gang
    }


def _values(entries: dict[Key, Entry]) -> dict[Key, tuple[object, ...]]:
    """What a plan reads of each entry (Member equality leaves out its spec)."""
    return {key: (e.ref, e.member, None if e.member is None else e.member.spec) for key, e in sorted(entries.items())}


@pytest.mark.parametrize("seed", [21, 22, 23])
def test_the_index_equals_members_worked_out_from_scratch_over_random_events(seed: int) -> None:
    cluster = Cluster(seed)
    for _ in range(60):
        event = cluster.step()
        view = cluster.state.view()
        assert view.members is not None
        assert _values(dict(view.members)) == _values(_from_scratch(view)), event


def test_an_event_that_changes_no_member_hands_out_the_same_mapping() -> None:
    cluster = Cluster(24)
    before = cluster.state.view().members
    cluster.touch_claim()  # a claim outside every gang written again
    cluster.free()  # a GPU freed outside every gang
    assert cluster.state.view().members is before
    assert cluster.allocate() == "allocate"  # a pending member's claim allocated: it is placed
    after = cluster.state.view().members
    assert after is not before
    assert after is not None and before is not None
    changed = [key for key in after if after[key] is not before.get(key)]
    assert len(changed) == 1, "only the member whose claim was allocated is worked out again"
    member = after[changed[0]].member
    assert member is not None and member.node is not None


def test_deleted_gang_pods_and_their_claims_leave_the_index() -> None:
    cluster = Cluster(25)
    start = cluster.state.view().members
    assert start is not None
    for _ in range(20):
        cluster.add_member()
    grown = cluster.state.view().members
    assert grown is not None and len(grown) == len(start) + 20
    late = [key for key in grown if key[1].startswith("late-")]
    for key in late:
        pod = cluster.state.objects["pods"][key]
        for kind, dependency in dependencies(PodFacts.of(pod)):
            obj = cluster.state.objects[kind].get(dependency)
            if obj is not None:
                cluster.state.apply("DELETED", kind, obj)
        cluster.state.apply("DELETED", "pods", pod)
    left = cluster.state.view().members
    assert left is not None and sorted(left) == sorted(start)


def test_a_pod_that_leaves_its_gang_leaves_the_index_and_keeps_no_place() -> None:
    cluster = Cluster(26)
    members = cluster.state.view().members
    assert members is not None
    key = next(iter(members))
    pod = dict(cluster.state.objects["pods"][key])
    pod["metadata"] = {**pod["metadata"], "labels": {}, "resourceVersion": "900"}
    cluster.state.apply("MODIFIED", "pods", pod)
    after = cluster.state.view().members
    assert after is not None and key not in after
