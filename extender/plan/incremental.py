"""The incremental wrapper around the planner: what one plan leaves for the next (a memo of what
each gang was planned against), so the next plan re-plans only the gangs an event can affect. A
performance memo only: `plan_incrementally` gives what `plan_cluster` (extender.plan.planner) gives
from scratch. Hold clocks are extender.plan.hold_clock's.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field

from extender.cluster.reservation import Reservation
from extender.devices.node_usage import Node, Usage
from extender.plan.capacity import Matcher
from extender.plan.hold_clock import Room, room_counts
from extender.plan.planner import ClusterPlan, DomainMemo, Planning
from extender.pods.gang import GangRef, Part
from extender.pods.model import Gang, HoldClock, Member, Plan, PlanLimits


def _same_members(before: list[Member], now: list[Member]) -> bool:
    """The same members, spec and affinity included (those are left out of Member equality)."""
    return len(before) == len(now) and all(
        a is b or (a == b and a.spec == b.spec and a.affinity == b.affinity) for a, b in zip(before, now, strict=True)
    )


def _usable_names(gang: Gang, nodes: dict[str, Node]) -> frozenset[str]:
    """Every node whose usage can change the gang's plan: one it, or any of its parts, may use."""
    parts: list[Part | None] = [None, *gang.parts]
    found = {id(usable): usable for usable in (gang.usable_nodes(nodes, part) for part in parts)}
    if len(found) == 1:  # most gangs: one set (shared by gangs alike), not a copy of it each
        return next(iter(found.values()))
    return frozenset().union(*found.values())


@dataclass(frozen=True)
class Seen:
    """One gang as the last plan saw it: the nodes it may use are fixed by its members and the nodes."""

    ref: GangRef
    members: list[Member]
    usable: frozenset[str]
    clock: HoldClock
    gang: Gang  # the very object: planned again unchanged (only usage moved), it needs no comparing


@dataclass(frozen=True)
class Record:
    """One gang's planning in the last plan, in planning order: what it was planned against
    (`taken`) and what came out (its plan and the usage it holds)."""

    key: str
    expired: bool
    taken: dict[str, str]
    plan: Plan
    changed: dict[str, Usage]
    reusable: bool  # planned within its budget: a plan cut short by time is tried again


@dataclass(frozen=True)
class PlanMemo:
    """What one `plan_incrementally` call saw and decided, for the next call to re-plan only what changed.

    Its size is bounded by the cluster: the node and usage dicts it was given (references, not
    copies) and one entry per gang of that plan; each new plan replaces it."""

    nodes: dict[str, Node]
    usage: dict[str, Usage]
    limits: PlanLimits
    seen: dict[str, Seen]
    records: list[Record]
    # id of a gang object -> (that gang, its plan when nodes do not matter, else None): most gangs
    # of a busy cluster are bound ones, the same objects plan after plan while only usage moves.
    settled: dict[int, tuple[Gang, Plan | None]]
    domains: DomainMemo  # domains and their fits, for the next plan on the same node objects


class Incremental:
    """Reuse of the last plan's gang plans. The nodes must be the same objects (else nothing is
    reused); a gang's plan is reused when its members, the exclusive domains taken before it and the
    usage of every node it may use, as it stood when it was planned, are the same objects as last
    time. `dirty` holds the nodes whose usage, at this point of planning, differs from last time's
    at the same point: only those are looked at, so an unchanged plan costs a pass over the nodes."""

    def __init__(
        self,
        memo: PlanMemo | None,
        nodes: Mapping[str, Node],
        usage: Mapping[str, Usage],
        limits: PlanLimits,
        changed: Collection[str] | None = None,
    ) -> None:
        same = memo is not None and memo.limits == limits and _same_objects(memo.nodes, nodes)
        self.memo = memo if same else None
        self.base_dirty: frozenset[str] = frozenset()
        self.dirty: set[str] = set()
        # The usage at this point of the last plan, where it differs from the memo's base usage.
        self.previous: dict[str, Usage] = {}
        self.before: Mapping[str, Usage] = {}
        if self.memo is not None:
            before = self.before = self.memo.usage
            if changed is not None:  # the caller knows which names may differ: only those are compared
                self.dirty = {name for name in changed if before.get(name) is not usage.get(name)}
            else:
                self.dirty = {name for name, used in usage.items() if before.get(name) is not used}
                self.dirty.update(name for name in before if name not in usage)
            self.base_dirty = frozenset(self.dirty)
        self.index = 0
        self.records: list[Record] = []
        # (gang's room shape, node name, usage id) -> (node, usage, counts), for this plan only.
        self._rooms: dict[tuple[object, ...], tuple[Node, Usage, tuple[int, ...]]] = {}

    def room(self, gang: Gang, node: Node, usage: Usage, matcher: Matcher) -> tuple[int, ...]:
        """`room_counts`, once per gang shape, node and usage object in this plan."""
        key = (gang.room_shape(), node.name, id(usage))
        found = self._rooms.get(key)
        if found is not None and found[0] is node and found[1] is usage:
            return found[2]
        counts = room_counts(gang, node, usage, matcher)
        self._rooms[key] = (node, usage, counts)
        return counts

    def seen(self, gang: Gang) -> Seen | None:
        if self.memo is None:
            return None
        seen = self.memo.seen.get(gang.ref.key)
        if seen is not None and seen.gang is gang:
            return seen
        if seen is None or seen.ref != gang.ref or not _same_members(seen.members, gang.members):
            return None
        return seen

    def usable(self, gang: Gang, nodes: dict[str, Node]) -> frozenset[str]:
        seen = self.seen(gang)
        return seen.usable if seen is not None else _usable_names(gang, nodes)

    def clock_changes(self, gang: Gang, previous: HoldClock | None) -> frozenset[str] | None:
        """For `hold_clock`: the nodes whose usage changed, when the gang's last clock is the one
        this memo made on these very nodes for the same members (only those need a look)."""
        seen = self.seen(gang)
        return self.base_dirty if seen is not None and previous is seen.clock else None

    def next(
        self,
        gang: Gang,
        expired: bool,
        taken: dict[str, str],
        usable: frozenset[str],
        *,
        working: dict[str, Usage],
        matcher: Matcher,
        plan: Callable[[], Record],
    ) -> Record:
        """The record of the next gang in planning order: the last plan's, if nothing it depends on
        changed, else `plan()`'s. The memo follows the last plan's usage point by point, so each
        gang is taken in turn here, reused or planned, and the order is the caller's only duty
        (`working` is the usage before this gang's plan is applied)."""
        record = self._last_record(gang, expired, taken)
        if record is None or not self._room_unchanged(gang, record, usable & self.dirty, working, matcher):
            record = plan()
        self._done(record, working)
        return record

    def _last_record(self, gang: Gang, expired: bool, taken: dict[str, str]) -> Record | None:
        """The last plan's record at this point, if it is this gang's, reusable and planned against
        the same members and exclusive domains."""
        if self.memo is None or self.index >= len(self.memo.records):
            self.memo = None
            return None
        record = self.memo.records[self.index]
        if record.key != gang.ref.key or record.expired != expired:
            self.memo = None  # another order: the last plan's usage at each point no longer applies
            return None
        if not (record.reusable and self.seen(gang) is not None and record.taken == taken):
            return None
        return record

    def _room_unchanged(
        self, gang: Gang, record: Record, moved: Collection[str], working: Mapping[str, Usage], matcher: Matcher
    ) -> bool:
        """On each node it may use whose usage differs from last time (`moved`), the gang holds
        nothing and as many of its members fit."""
        nodes = self.memo.nodes if self.memo is not None else {}
        for name in moved:
            then, now = self.previous.get(name, self.before.get(name)), working.get(name)
            node = nodes.get(name)
            if name in record.plan.slots or then is None or now is None or node is None:
                return False
            if self.room(gang, node, then, matcher) != self.room(gang, node, now, matcher):
                return False
        return True

    def _done(self, record: Record, working: dict[str, Usage]) -> None:
        self.records.append(record)
        if self.memo is None:
            return
        before = self.memo.records[self.index]
        self.index += 1
        for name in record.changed.keys() | before.changed.keys():
            then = before.changed.get(name, self.previous.get(name, self.before.get(name)))
            if then is not None:
                self.previous[name] = then
            if record.changed.get(name, working.get(name)) is then:
                self.dirty.discard(name)
            else:
                self.dirty.add(name)


def _same_objects(before: Mapping[str, object], now: Mapping[str, object]) -> bool:
    return before is now or (len(before) == len(now) and all(before.get(name) is value for name, value in now.items()))


@dataclass
class IncrementalPlan(ClusterPlan):
    memo: PlanMemo | None = field(default=None, compare=False, repr=False)  # for the next plan


class IncrementalPlanning(Planning):
    """`Planning` whose steps reuse the last plan's answers where nothing they read changed."""

    def __init__(
        self,
        nodes: dict[str, Node],
        usage: dict[str, Usage],
        matcher: Matcher,
        *,
        now: float,
        limits: PlanLimits,
        clocks: Mapping[str, HoldClock] | None,
        clock: Callable[[], float],
        memo: PlanMemo | None,
        changed: Collection[str] | None,
        returns: Mapping[str, Reservation] | None = None,
    ) -> None:
        incremental = Incremental(memo, nodes, usage, limits, changed)
        domains = memo.domains if memo is not None and incremental.memo is not None else None  # same nodes
        super().__init__(
            nodes, usage, matcher, now=now, limits=limits, clocks=clocks, clock=clock, domains=domains, returns=returns
        )
        self.incremental = incremental
        self._known = memo.settled if memo is not None else {}
        self.settled_now: dict[int, tuple[Gang, Plan | None]] = {}
        self.usable: dict[str, frozenset[str]] = {}

    def settled(self, gang: Gang) -> Plan | None:
        found = self._known.get(id(gang))
        # Members fixed once planned: the same answer, unless it confines an elastic gang to the
        # nodes of its domain, which a node joining or leaving changes.
        known = found is not None and found[0] is gang and (found[1] is None or found[1].confine is None)
        settled = found[1] if known and found is not None else super().settled(gang)
        self.settled_now[id(gang)] = (gang, settled)
        if settled is None and gang.members:
            self.usable[gang.ref.key] = self.incremental.usable(gang, self.nodes)
        return settled

    def hold(self, gang: Gang, *, changed: Collection[str] | None = None, room: Room = room_counts) -> HoldClock:
        """The memo decides which nodes need a look and answers the room counts it has seen."""
        changed = self.incremental.clock_changes(gang, self.clocks.get(gang.ref.key))
        return super().hold(gang, changed=changed, room=self.incremental.room)

    def place(self, gang: Gang, working: dict[str, Usage], expired: bool) -> tuple[Plan, dict[str, Usage]]:
        def anew() -> Record:
            plan, changed, complete = self.plan_anew(gang, working)
            return Record(gang.ref.key, expired, dict(self.taken), plan, changed, complete)

        record = self.incremental.next(
            gang,
            expired,
            self.taken,
            self.usable[gang.ref.key],
            working=working,
            matcher=self.matcher,
            plan=anew,
        )
        return record.plan, record.changed

    def run(self, gangs: list[Gang]) -> IncrementalPlan:
        result = super().run(gangs)
        seen = {
            g.ref.key: Seen(g.ref, list(g.members), self.usable[g.ref.key], result.clocks[g.ref.key], g)
            for g in gangs
            if g.ref.key in self.usable
        }
        memo = PlanMemo(
            self.nodes, self.usage, self.limits, seen, self.incremental.records, self.settled_now, self.domains
        )
        return IncrementalPlan(
            result.plans,
            result.held,
            result.holders,
            result.clocks,
            result.valid_until,
            result.base,
            result.kept_for_lost,
            result.priorities,
            memo=memo,
        )


def plan_incrementally(
    nodes: dict[str, Node],
    usage: dict[str, Usage],
    gangs: list[Gang],
    matcher: Matcher,
    *,
    now: float,
    limits: PlanLimits,
    clocks: Mapping[str, HoldClock] | None = None,
    clock: Callable[[], float] = time.monotonic,
    memo: PlanMemo | None = None,
    changed: Collection[str] | None = None,
    returns: Mapping[str, Reservation] | None = None,
) -> IncrementalPlan:
    """`plan_cluster`'s plan, re-planning only the gangs whose members, or the usage of nodes they
    may use, changed since the plan that left `memo`. `changed`, when given, names every node whose
    node or usage object may differ from the memo's (from the watches' journal): only those are
    compared with it."""
    planning = IncrementalPlanning(
        nodes,
        usage,
        matcher,
        now=now,
        limits=limits,
        clocks=clocks,
        clock=clock,
        memo=memo,
        changed=changed,
        returns=returns,
    )
    return planning.run(gangs)
