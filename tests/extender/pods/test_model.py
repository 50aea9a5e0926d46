"""What a gang answers about itself: its size against the members that exist, what remains to
place, when it last made progress, who stands for members not created yet, and where it may go."""

from __future__ import annotations

from extender.pods.demand import Demand, Request
from extender.pods.gang import gang_of
from extender.pods.model import Gang, Member
from testkit.builders import GPU, gang_labels, pod, racks

EIGHT = Demand((Request((GPU,), 8),))
ONE = Demand((Request((GPU,), 1),))


def _gang(size: int, members: list[Member]) -> Gang:
    ref = gang_of(pod(labels=gang_labels("g", size)), {}, {})
    assert ref is not None
    return Gang(ref, members)


def test_a_gang_is_never_smaller_than_the_members_that_exist() -> None:
    members = [Member(f"ns/g-{i}", None, EIGHT, float(i)) for i in range(3)]
    assert _gang(2, members).size == 3
    assert _gang(4, members).size == 4


def test_what_remains_leaves_out_placed_and_finished_members() -> None:
    members = [
        Member("ns/g-0", "n-0", EIGHT, 1.0, bound_at=5.0),
        Member("ns/g-1", "n-1", EIGHT, 2.0, done=True),
        Member("ns/g-2", None, EIGHT, 3.0),
    ]
    gang = _gang(4, members)
    assert [m.pod for m in gang.placed] == ["ns/g-0"]
    assert gang.remaining == 2, "4 members, one placed, one finished"


def test_progress_is_the_first_creation_until_a_member_is_placed_then_the_latest_event() -> None:
    waiting = [Member("ns/g-0", None, EIGHT, 10.0), Member("ns/g-1", None, EIGHT, 20.0)]
    assert _gang(2, waiting).anchor() == 10.0
    placed = [Member("ns/g-0", "n-0", EIGHT, 10.0, bound_at=30.0), Member("ns/g-1", None, EIGHT, 20.0)]
    assert _gang(2, placed).anchor() == 30.0


def test_the_newest_waiting_member_stands_for_those_not_created_yet() -> None:
    members = [
        Member("ns/g-0", "n-0", ONE, 1.0),
        Member("ns/g-1", None, EIGHT, 2.0),
        Member("ns/g-2", None, EIGHT, 3.0),
        Member("ns/g-3", "n-1", ONE, 4.0),
    ]
    gang = _gang(6, members)
    stand_in = gang.representative()
    assert stand_in is not None and stand_in.pod == "ns/g-2"
    assert gang.demand() == EIGHT
    assert gang.room_shape() == (6, (EIGHT,))


def test_a_gang_may_use_only_nodes_its_stand_in_selects() -> None:
    nodes = racks({"a": 1, "b": 1})
    spec = {"nodeSelector": {"rack": "b"}}
    gang = _gang(2, [Member("ns/g-0", None, EIGHT, 1.0, spec=spec)])
    assert [name for name, node in nodes.items() if gang.may_use(node)] == ["b-0"]
