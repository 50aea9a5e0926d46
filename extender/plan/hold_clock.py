"""Each gang's hold clock: when its current hold began, and whether it lapsed. The rules that decide
correctness live here alone; the planner's memo only tells them which nodes need a look. Pure.

A gang holds capacity from its last progress (created, a member bound, its members changed) until
the plan timeout passes without progress. An expired gang holds again only once its members
change or capacity is freed on a node it may use, so a gang that cannot complete stops blocking
others until the cluster changes in a way that may let it.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Mapping

from extender.devices.node_usage import Node, Usage
from extender.plan.capacity import Matcher, members_fit
from extender.pods.model import Gang, HoldClock

Room = Callable[[Gang, Node, Usage, Matcher], tuple[int, ...]]


class UsageOn(Mapping[str, Usage]):
    """A plan's usage mapping (never changed once made) seen on some nodes only: what an expired
    gang keeps of the nodes it may use, without a copy per gang per plan (20 waiting gangs that may
    use any of 10,000 nodes copied 200,000 entries on every GPU freed or taken)."""

    def __init__(self, usage: Mapping[str, Usage], names: Collection[str]) -> None:
        self._usage, self.names = usage, names

    def __getitem__(self, name: str) -> Usage:
        if name not in self.names:
            raise KeyError(name)
        return self._usage[name]

    def __contains__(self, name: object) -> bool:
        return name in self.names and name in self._usage

    def __iter__(self) -> Iterator[str]:
        return (name for name in self.names if name in self._usage)

    def __len__(self) -> int:
        return sum(1 for name in self.names if name in self._usage)


def room_counts(gang: Gang, node: Node, usage: Usage, matcher: Matcher) -> tuple[int, ...]:
    """How many members of each of the gang's demands fit on `node` with `usage`: all that a plan
    reads of a node it holds nothing on, so a usage change that leaves these counts alone (a 1-GPU
    pod coming or going beside an 8-GPU member's worth of used devices) cannot change the plan."""
    limit, demands = gang.room_shape()
    return tuple(members_fit(node, usage, demand, limit, matcher)[0] for demand in demands)


def _room_grew(
    gang: Gang,
    node: Node | None,
    before: Usage | None,
    now: Usage | None,
    matcher: Matcher,
    *,
    room: Room = room_counts,
) -> bool:
    """Capacity was freed on `node` for this gang: more of its members fit there than before (or
    the node is new to it)."""
    if node is None or now is None:
        return False
    if before is None:
        return True
    if before is now or before.within(now):
        return False
    return any(a > b for a, b in zip(room(gang, node, now, matcher), room(gang, node, before, matcher), strict=True))


def hold_clock(
    gang: Gang,
    previous: HoldClock | None,
    nodes: dict[str, Node],
    usage: dict[str, Usage],
    matcher: Matcher,
    *,
    now: float,
    timeout: float,
    changed: Collection[str] | None = None,
    room: Room = room_counts,
) -> HoldClock:
    """The gang's hold clock after this plan. Without a previous one (a fresh or restarted extender)
    it starts at the gang's last progress, as read from the API. `changed`, when given, names every
    node whose usage may differ from what `previous` saw (it was made on these node objects, for
    these members): only those are looked at."""
    members = gang.progress

    def usable() -> UsageOn:  # only expired gangs look at usage: most plans skip the nodes
        return UsageOn(usage, gang.usable_nodes(nodes))

    looked_at: dict[str, Usage | None] | None = None
    if previous is None:
        since = gang.anchor()
    elif previous.members != members:
        since = now
    elif previous.expired:
        if changed is None:
            looked_at = dict[str, Usage | None](usable())
        else:
            looked_at = {name: usage.get(name) for name in changed if name in previous.usage}
        freed = any(
            _room_grew(gang, nodes.get(name), previous.usage.get(name), used, matcher, room=room)
            for name, used in looked_at.items()
        )
        since = now if freed else previous.since
    else:
        since = previous.since
    since = max(since, gang.anchor())
    if now - since <= timeout:
        return HoldClock(since, members, False, {})
    if changed is not None and looked_at is not None and previous is not None:
        # The nodes it may use, as now: those not `changed` hold the objects it saw before.
        kept = previous.usage
        names = kept.names if isinstance(kept, UsageOn) else frozenset(kept)  # never the old mapping itself
        return HoldClock(since, members, True, UsageOn(usage, names))
    return HoldClock(since, members, True, usable())
