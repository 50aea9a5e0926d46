"""Plan every waiting gang at once, oldest first, and hold the planned capacity. Pure.

Each gang's remaining members are planned into one domain at its required (or preferred)
topology level, best-fit: the feasible domain with the least room to spare, so big free domains
stay whole. A gang that already has placed members (bound, or with a claim allocated for them)
stays in their domain: that is read from the API, so every extender replica, restarted or not,
answers the same. Capacity planned for a gang is held against every later gang and every pod
outside a gang. A gang that cannot be placed holds nothing, so it never blocks others, and says
why. A hold expires after the plan timeout with no progress; the gang then plans behind the others
without holding until its members change or capacity is freed on a node it may use, which starts
a new hold. Every loop is bounded by the cluster (a gang larger than the cluster could ever hold is
refused) and every gang's planning by a time budget.
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from extender.capacity import Matcher, members_fit, most_members
from extender.demand import Demand
from extender.eligibility import eligible
from extender.gang import GangRef
from extender.model import Node, Usage

ANYWHERE = "the cluster"


@dataclass(frozen=True)
class Member:
    pod: str  # namespace/name
    node: str | None  # node it is bound to, or its claim is allocated on (placed)
    demand: Demand
    created: float  # unix seconds
    bound_at: float | None = None
    spec: dict[str, Any] = field(default_factory=dict, compare=False)  # for node eligibility
    done: bool = False  # Succeeded: it needs no capacity any more, and holds no domain


@dataclass
class Gang:
    ref: GangRef
    members: list[Member] = field(default_factory=list)

    @property
    def size(self) -> int:
        """A gang is never smaller than the members that exist (e.g. a Job not yet seen by the watch)."""
        return max(self.ref.size or 0, len(self.members))

    @property
    def placed(self) -> list[Member]:
        """Members on a node now: their devices are in use, and they fix the gang's domain."""
        return [m for m in self.members if m.node and not m.done]

    @property
    def remaining(self) -> int:
        """Members still to place: finished ones are done, not waiting."""
        return max(0, self.size - len(self.placed) - sum(m.done for m in self.members))

    def anchor(self) -> float:
        """When the gang last made progress (created, or a member bound)."""
        times = [m.created for m in self.members] + [m.bound_at for m in self.members if m.bound_at]
        return max(times) if self.placed else min(m.created for m in self.members)

    def representative(self) -> Member | None:
        """The newest member still to be placed (else the newest placed one) stands for those not created yet."""
        waiting = [m for m in self.members if not m.node and not m.done and m.demand.needs_devices]
        source = waiting or [m for m in self.members if m.demand.needs_devices]
        return max(source, key=lambda m: m.created) if source else None

    def demand(self) -> Demand:
        member = self.representative()
        return member.demand if member else Demand(())

    def may_use(self, node: Node) -> bool:
        member = self.representative()
        return member is None or eligible(member.spec, node.name, node.labels)


@dataclass
class Plan:
    gang: str
    feasible: bool
    slots: dict[str, int] = field(default_factory=dict)  # node -> members to place there
    domain: str = ANYWHERE
    reason: str = ""
    expired: bool = False


@dataclass(frozen=True)
class HoldClock:
    """When a gang's current hold began, and what it saw at its last plan: an expired gang holds
    again only once its members change or capacity is freed where it may go."""

    since: float
    members: frozenset[tuple[str, str | None, bool]]
    expired: bool
    usage: Mapping[str, Usage] = field(default_factory=dict, compare=False)  # kept only while expired


@dataclass
class ClusterPlan:
    plans: dict[str, Plan]
    held: dict[str, Usage]  # usage per node including holds of active gangs
    holders: dict[str, list[str]]  # node -> gangs holding capacity there
    clocks: dict[str, HoldClock] = field(default_factory=dict)  # per gang, for the next plan
    valid_until: float = math.inf  # the first moment a hold in it expires


@dataclass(frozen=True)
class Limits:
    """What bounds planning: the hold timeout, each gang's time budget (seconds of the planner's
    clock), and an optional ceiling on gang size under what the cluster could ever hold."""

    timeout: float = 300.0
    budget: float = 2.0
    max_gang_size: int | None = None


class _BudgetSpentError(Exception):
    """A gang's planning went past its budget."""


def _freed(before: Mapping[str, Usage], now: Mapping[str, Usage]) -> bool:
    """Capacity was freed (or a node appeared) among the nodes in `now` since `before`."""
    return any(
        name not in before or (before[name] is not used and not before[name].within(used)) for name, used in now.items()
    )


def _hold_clock(
    gang: Gang,
    previous: HoldClock | None,
    nodes: dict[str, Node],
    usage: dict[str, Usage],
    *,
    now: float,
    timeout: float,
) -> HoldClock:
    """The gang's hold clock after this plan. Without a previous one (a fresh or restarted extender)
    it starts at the gang's last progress, as read from the API."""
    members = frozenset((m.pod, m.node, m.done) for m in gang.members)

    def usable() -> dict[str, Usage]:  # only expired gangs look at usage: most plans skip the nodes
        return {name: usage[name] for name, node in nodes.items() if gang.may_use(node)}

    if previous is None:
        since = gang.anchor()
    elif previous.members != members or (previous.expired and _freed(previous.usage, usable())):
        since = now
    else:
        since = previous.since
    since = max(since, gang.anchor())
    expired = now - since > timeout
    return HoldClock(since, members, expired, usable() if expired else {})


def _domains(nodes: dict[str, Node], level: str | None, gang: Gang) -> dict[str, list[str]]:
    """Domain value -> nodes the gang may use there; members already placed decide the domain."""
    usable = {name: node for name, node in nodes.items() if gang.may_use(node)}
    if not level:
        return {ANYWHERE: sorted(usable)}
    domains: dict[str, list[str]] = defaultdict(list)
    for name, node in sorted(usable.items()):
        if level in node.labels:
            domains[node.labels[level]].append(name)
    placed = {nodes[m.node].labels.get(level) for m in gang.placed if m.node in nodes}
    if placed:
        return {value: names for value, names in domains.items() if value in placed}
    return dict(domains)


def _held_by_another_exclusive_gang(gang: Gang, names: list[str], taken: dict[str, str]) -> bool:
    """An exclusive gang (JobSet/LWS exclusive-topology) shares its domain with no other one."""
    return gang.ref.exclusive and any(taken.get(name, gang.ref.key) != gang.ref.key for name in names)


def _levels(ref: GangRef) -> list[str | None]:
    """Topology levels to try, in order: a required level alone; a preferred one, then anywhere."""
    level = ref.required_topology or ref.preferred_topology
    return [level] if ref.required_topology or not level else [level, None]


@dataclass(frozen=True)
class _DomainFit:
    domain: str
    total: int  # members that fit in the whole domain
    room: list[tuple[str, int]]  # node -> members that fit there, tightest first


def _fit_domain(
    domain: str,
    names: list[str],
    nodes: dict[str, Node],
    usage: dict[str, Usage],
    demand: Demand,
    *,
    need: int,
    matcher: Matcher,
    out_of_time: Callable[[], bool],
) -> _DomainFit:
    """How many members fit in the domain (up to `need` per node); tightest nodes come first so
    they fill before roomier ones."""
    room = []
    for name in names:
        if out_of_time():
            raise _BudgetSpentError
        fits, _ = members_fit(nodes[name], usage[name], demand, need, matcher)
        if fits:
            room.append((name, fits))
    room.sort(key=lambda item: (item[1], item[0]))
    return _DomainFit(domain, sum(fits for _, fits in room), room)


def _choose(candidates: list[_DomainFit], sticky: str | None) -> _DomainFit:
    """The domain already given to members not yet seen bound, while it still fits; else best fit:
    the least room to spare, so big free domains stay whole for big gangs."""
    kept = [c for c in candidates if c.domain == sticky]
    return kept[0] if kept else min(candidates, key=lambda c: (c.total, c.domain))


def _assign(
    fit: _DomainFit, nodes: dict[str, Node], usage: dict[str, Usage], demand: Demand, *, need: int, matcher: Matcher
) -> tuple[dict[str, int], dict[str, Usage]]:
    """Members per node, filling the tightest nodes first, and each touched node's usage with
    them placed: that usage is what the plan holds against others."""
    slots: dict[str, int] = {}
    changed: dict[str, Usage] = {}
    left = need
    for name, fits in fit.room:
        placed, changed[name] = members_fit(nodes[name], usage[name], demand, min(fits, left), matcher)
        if placed:
            slots[name] = placed
        left -= placed
        if left == 0:
            break
    return slots, changed


def _settled(gang: Gang, demand: Demand) -> Plan | None:
    """The plan when nodes do not matter: a badly labelled gang, nothing left to place, a demand
    not known yet, or no demand for our devices."""
    if gang.ref.error:
        return Plan(gang.ref.key, False, reason=f"gang {gang.ref.key}: {gang.ref.error}")
    if gang.remaining == 0:
        return Plan(gang.ref.key, True)
    if demand.unresolved:
        waiting_for = ", ".join(demand.unresolved)
        return Plan(gang.ref.key, False, reason=f"gang {gang.ref.key}: waiting to see {waiting_for}")
    if not demand.requests:
        return Plan(gang.ref.key, True)
    return None


def _no_room(gang: Gang, demand: Demand, best_seen: tuple[int, str]) -> str:
    """Why the gang cannot be placed, with the best domain's room, so the user can act on it."""
    level = gang.ref.required_topology or gang.ref.preferred_topology
    where = f" in one {level}" if level else ""
    needs = f"gang {gang.ref.key} needs {gang.remaining} more pod(s) x {demand.devices} device(s){where}"
    level_text = f"{level} " if level else ""
    total, domain = best_seen
    best = f"the best {level_text}({domain}) has room for {total}" if domain else "no node has room"
    return f"{needs}; {best}"


def _too_big(gang: Gang, demand: Demand, nodes: dict[str, Node], matcher: Matcher, limits: Limits) -> str | None:
    """Why the gang can never be placed whatever frees up, if its size is past a ceiling; checked
    before planning so no loop ever runs toward an absurd size."""
    key, size = gang.ref.key, gang.size
    if limits.max_gang_size is not None and size > limits.max_gang_size:
        return f"gang {key} has {size} pods, more than maxGangSize {limits.max_gang_size}"
    # Every member takes at least `fewest` allocations: when all the node's devices together hold
    # that many for every member (a sum of cached per-node counts), the exact count per matching
    # device is not needed: the fit loops are bounded per node anyway.
    allocations = [node.allocations for node in nodes.values()]
    fewest = min(1 if r.all_devices else max(1, r.count) for r in demand.requests)
    if None not in allocations and size * fewest <= sum(a for a in allocations if a is not None):
        return None
    most = most_members(demand, nodes, matcher)
    if most is not None and size > most:
        return (
            f"gang {key} has {size} pods of {demand.devices} device(s) each; "
            f"this cluster could ever hold at most {most} of them"
        )
    return None


def _why(gang: Gang, level: str | None) -> str:
    """Why the plan's domain was chosen, for the log."""
    if level and gang.placed:
        return f"its placed members are in this {level}"
    if level:
        return f"best fit: the {level} with the least room to spare"
    wanted = gang.ref.preferred_topology
    return f"no single {wanted} has room; it is preferred, not required" if wanted else "no topology asked"


def _plan_gang(
    gang: Gang,
    nodes: dict[str, Node],
    usage: dict[str, Usage],
    matcher: Matcher,
    *,
    taken: dict[str, str],
    limits: Limits,
    out_of_time: Callable[[], bool],
) -> tuple[Plan, dict[str, Usage]]:
    """One gang's remaining members in one domain, and the usage of the nodes the plan holds."""
    demand = gang.demand()
    settled = _settled(gang, demand)
    if settled is not None:
        return settled, {}
    too_big = _too_big(gang, demand, nodes, matcher, limits)
    if too_big is not None:
        return Plan(gang.ref.key, False, reason=too_big), {}
    best_seen: tuple[int, str] = (0, "")
    for level in _levels(gang.ref):
        fits = [
            _fit_domain(
                domain, names, nodes, usage, demand, need=gang.remaining, matcher=matcher, out_of_time=out_of_time
            )
            for domain, names in _domains(nodes, level, gang).items()
            if not _held_by_another_exclusive_gang(gang, names, taken)
        ]
        best_seen = max([best_seen, *((fit.total, fit.domain) for fit in fits)])
        candidates = [fit for fit in fits if fit.total >= gang.remaining]
        if candidates:
            chosen = min(candidates, key=lambda c: (c.total, c.domain))
            slots, changed = _assign(chosen, nodes, usage, demand, need=gang.remaining, matcher=matcher)
            where = f"{level} {chosen.domain}" if level else ANYWHERE
            return Plan(gang.ref.key, True, slots, where, _why(gang, level)), changed
    return Plan(gang.ref.key, False, reason=_no_room(gang, demand, best_seen)), {}


def _plan_in_budget(
    gang: Gang,
    nodes: dict[str, Node],
    usage: dict[str, Usage],
    matcher: Matcher,
    *,
    taken: dict[str, str],
    limits: Limits,
    clock: Callable[[], float],
) -> tuple[Plan, dict[str, Usage]]:
    """`_plan_gang` within the gang's time budget; past it, this gang alone is not placeable yet
    (it holds nothing) and the others are still planned."""
    deadline = clock() + limits.budget
    try:
        return _plan_gang(
            gang, nodes, usage, matcher, taken=taken, limits=limits, out_of_time=lambda: clock() > deadline
        )
    except _BudgetSpentError:
        reason = (
            f"gang {gang.ref.key} is not placeable yet: planning it took over {limits.budget:g}s; it is tried again"
        )
        return Plan(gang.ref.key, False, reason=reason), {}


def _by_age(gangs: list[Gang]) -> list[Gang]:
    return sorted(gangs, key=lambda g: (min(m.created for m in g.members), g.ref.key))


def plan_cluster(
    nodes: dict[str, Node],
    usage: dict[str, Usage],
    gangs: list[Gang],
    matcher: Matcher,
    *,
    now: float,
    limits: Limits,
    clocks: Mapping[str, HoldClock] | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> ClusterPlan:
    """Plans for all gangs; `held` is what pods outside these gangs may still use.

    `clocks` are the hold clocks the previous plan returned (none after a restart); `clock`
    measures the planning budget."""
    clocks = clocks or {}
    held = dict(usage)
    holders: dict[str, list[str]] = defaultdict(list)
    plans: dict[str, Plan] = {}
    taken = {m.node: g.ref.key for g in gangs if g.ref.exclusive for m in g.placed if m.node}
    present = [g for g in gangs if g.members]
    after = {
        g.ref.key: _hold_clock(g, clocks.get(g.ref.key), nodes, usage, now=now, timeout=limits.timeout) for g in present
    }
    active = [g for g in present if not after[g.ref.key].expired]
    waiting = [g for g in present if after[g.ref.key].expired]
    for gang in _by_age(active):
        plan, changed = _plan_in_budget(gang, nodes, held, matcher, taken=taken, limits=limits, clock=clock)
        plans[gang.ref.key] = plan
        held.update(changed)
        for name in plan.slots:
            holders[name].append(gang.ref.key)
            if gang.ref.exclusive:
                taken[name] = gang.ref.key
    after_active = dict(held)
    for gang in _by_age(waiting):
        plan, changed = _plan_in_budget(gang, nodes, after_active, matcher, taken=taken, limits=limits, clock=clock)
        plan.expired = True
        plans[gang.ref.key] = plan
        after_active.update(changed)
    valid_until = min((c.since + limits.timeout for c in after.values() if not c.expired), default=math.inf)
    return ClusterPlan(plans, held, dict(holders), after, valid_until)
