"""Hold clocks: a hold starts at the gang's last progress, lapses after the timeout, and starts again
only when the members change or room is freed where the gang may go; told which nodes changed,
the clock looks only there and comes out the same."""

from __future__ import annotations

from extender.devices.cel_eval import Selectors
from extender.devices.node_usage import Node, Usage
from extender.plan.capacity import Matcher
from extender.plan.hold_clock import hold_clock
from extender.pods.demand import Demand, Request
from extender.pods.gang import gang_of
from extender.pods.model import Gang, HoldClock, Member
from testkit.builders import DRIVER, GPU, gang_labels, pod, racks

EIGHT = Demand((Request((GPU,), 8),))
TIMEOUT = 300.0
MATCHER = Matcher(Selectors(), DRIVER)


def _gang(size: int, created: float = 1.0) -> Gang:
    ref = gang_of(pod(labels=gang_labels("g", size)), {}, {})
    assert ref is not None
    return Gang(ref, [Member(f"ns/g-{i}", None, EIGHT, created + i) for i in range(size)])


def _full(nodes: dict[str, Node]) -> dict[str, Usage]:
    return {name: Usage(devices=set(node.devices)) for name, node in nodes.items()}


def _clock(gang: Gang, previous: HoldClock | None, usage: dict[str, Usage], now: float, **kw: object) -> HoldClock:
    return hold_clock(gang, previous, NODES, usage, MATCHER, now=now, timeout=TIMEOUT, **kw)  # type: ignore[arg-type]


NODES = racks({"r": 3})


def test_a_new_clock_starts_at_the_gangs_last_progress_and_lapses_after_the_timeout() -> None:
    gang = _gang(2, created=10.0)
    fresh = _clock(gang, None, _full(NODES), now=100.0)
    assert (fresh.since, fresh.expired, dict(fresh.usage)) == (10.0, False, {})
    lapsed = _clock(gang, fresh, _full(NODES), now=10.0 + TIMEOUT + 1)
    assert lapsed.expired and lapsed.since == 10.0
    assert set(lapsed.usage) == set(NODES), "an expired clock keeps the usage of every node it may use"


def test_changed_members_start_a_new_hold() -> None:
    gang = _gang(2)
    lapsed = _clock(gang, None, _full(NODES), now=1000.0)
    assert lapsed.expired
    grown = Gang(gang.ref, [*gang.members, Member("ns/g-2", None, EIGHT, 2.0)])  # members are fixed per object
    assert _clock(grown, lapsed, _full(NODES), now=1001.0) == HoldClock(1001.0, _members(grown), False)


def test_an_expired_hold_starts_again_only_where_room_is_freed() -> None:
    gang = _gang(2)
    full = _full(NODES)
    lapsed = _clock(gang, None, full, now=1000.0)
    still = _clock(gang, lapsed, dict(full), now=1100.0)
    assert still.expired and still.since == lapsed.since, "nothing freed: it stays lapsed"
    freed = {**full, "r-1": Usage()}
    again = _clock(gang, still, freed, now=1200.0)
    assert not again.expired and again.since == 1200.0


def test_told_which_nodes_changed_the_clock_is_the_one_a_full_look_gives() -> None:
    gang = _gang(2)
    full = _full(NODES)
    lapsed = _clock(gang, None, full, now=1000.0)
    for usage, changed in ((dict(full), set()), ({**full, "r-2": Usage()}, {"r-2"})):
        narrow = _clock(gang, lapsed, usage, now=1100.0, changed=changed)
        assert narrow == _clock(gang, lapsed, usage, now=1100.0)
        assert dict(narrow.usage) == dict(_clock(gang, lapsed, usage, now=1100.0).usage)


def _members(gang: Gang) -> frozenset[tuple[str, str | None, bool]]:
    return frozenset((m.pod, m.node, m.done) for m in gang.members)
