"""Plan every waiting gang at once, oldest first, and hold the planned capacity. Pure.

Each gang's remaining members are planned into one domain at its required (or preferred)
topology level, best-fit: the feasible domain with the least room to spare, so big free domains
stay whole; a preferred level that has no room widens through the configured levels, then to
anywhere. Nodes a gang may use follow its members' node selection and required inter-pod
(anti-)affinity against placed pods, so a plan never contradicts what the scheduler enforces.
A gang that already has placed members (bound, or with a claim allocated for them) stays in their
domain: that is read from the API, so every extender replica, restarted or not, answers the same.
Capacity planned for a gang is held against every later gang and every pod outside a gang. A gang
that cannot be placed holds nothing, so it never blocks others, and says why. A hold expires after
the plan timeout with no progress; the gang then plans behind the others without holding until its
members change or capacity is freed on a node it may use, which starts a new hold. Every loop is
bounded by the cluster (a gang larger than the cluster could ever hold is refused) and every gang's
planning by a time budget.
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from extender.capacity import Matcher, members_fit, most_members
from extender.demand import Demand
from extender.eligibility import ANY_NODE, PodAffinity, eligible
from extender.gang import GangRef, Part
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
    part: str = ""  # the gang part (a JobSet's Job) it belongs to
    affinity: PodAffinity = field(default=ANY_NODE, compare=False)  # its inter-pod (anti-)affinity


@dataclass
class Gang:
    """Members are fixed once planning starts: the stand-in per part is worked out once."""

    ref: GangRef
    members: list[Member] = field(default_factory=list)
    _stand_ins: dict[tuple[str | None, int], Member | None] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    @property
    def parts(self) -> tuple[Part, ...]:
        """The gang's parts; a gang without parts is one part, exclusive when the gang is."""
        if self.ref.parts:
            return self.ref.parts
        level = self.ref.required_topology if self.ref.exclusive else None
        return (Part("", self.ref.size or 0, level),)

    @property
    def size(self) -> int:
        """A gang is never smaller than the members that exist (e.g. a Job not yet seen by the
        watch), unless its size is a minimum: members past it are planned only where they fit
        (see `_plan_gang`)."""
        declared = sum(p.size for p in self.parts)
        return declared if self.ref.minimum else max(declared, len(self.members))

    @property
    def placed(self) -> list[Member]:
        """Members on a node now: their devices are in use, and they fix the gang's domain."""
        return [m for m in self.members if m.node and not m.done]

    @property
    def remaining(self) -> int:
        """Members still to place: finished ones are done, not waiting."""
        return max(0, self.size - len(self.placed) - sum(m.done for m in self.members))

    def part_remaining(self, part: Part) -> int:
        """A part's members still to place (a one-part gang: the gang's)."""
        if len(self.parts) == 1:
            return self.remaining
        mine = [m for m in self.members if m.part == part.key]
        return max(0, part.size - sum(1 for m in mine if m.node or m.done))

    def part_placed(self, part: Part) -> list[Member]:
        return [m for m in self.placed if len(self.parts) == 1 or m.part == part.key]

    def anchor(self) -> float:
        """When the gang last made progress (created, or a member bound)."""
        times = [m.created for m in self.members] + [m.bound_at for m in self.members if m.bound_at]
        return max(times) if self.placed else min(m.created for m in self.members)

    def representative(self, part: Part | None = None) -> Member | None:
        """Who stands for members not created yet: the newest member still to be placed (else the
        newest placed one) of the part, else of the same replicated job, else of the gang. A
        stand-in from another part must not carry a node selector that pins it to its own part's
        domain (JobSet followers get their leader's domain as a selector). Worked out once per part
        and member count: planning asks it for every node."""
        key = (part.key if part is not None else None, len(self.members))
        if key not in self._stand_ins:
            self._stand_ins[key] = self._representative(part)
        return self._stand_ins[key]

    def _representative(self, part: Part | None) -> Member | None:
        pools = [self.members]
        if part is not None and len(self.parts) > 1:
            family = part.key.rsplit("/", 1)[0]
            pools = [
                [m for m in self.members if m.part == part.key],
                [m for m in self.members if m.part.rsplit("/", 1)[0] == family and not _pinned(m, part)],
                [m for m in self.members if not _pinned(m, part)],
            ]
        for pool in pools:
            waiting = [m for m in pool if not m.node and not m.done and m.demand.needs_devices]
            source = waiting or [m for m in pool if m.demand.needs_devices]
            if source:
                return max(source, key=lambda m: m.created)
        return None

    def demand(self, part: Part | None = None) -> Demand:
        member = self.representative(part)
        return member.demand if member else Demand(())

    def may_use(self, node: Node, part: Part | None = None) -> bool:
        """By the stand-in's node selection, and by its inter-pod (anti-)affinity where that speaks
        for the members it stands for: in a gang of one part, or a stand-in of the part itself. A
        stand-in from another part would impose its own part's terms (JobSet writes each Job's key
        into its pods' affinity), so those are left to the scheduler."""
        member = self.representative(part)
        if member is None:
            return True
        if not eligible(member.spec, node.name, node.labels):
            return False
        own = len(self.parts) == 1 or (part is not None and member.part == part.key)
        return not own or member.affinity.allows(node.labels)


def _pinned(member: Member, part: Part) -> bool:
    """The member's node selector names the part's exclusive level (its own part's domain)."""
    return bool(part.exclusive and part.exclusive in (member.spec.get("nodeSelector") or {}))


@dataclass
class Plan:
    gang: str
    feasible: bool
    slots: dict[str, int] = field(default_factory=dict)  # node -> members to place there
    domain: str = ANYWHERE
    reason: str = ""
    expired: bool = False
    part_slots: dict[str, dict[str, int]] = field(default_factory=dict)  # part -> node -> members
    # Not placeable only until the watches deliver an object it needs: worth retrying soon.
    transient: bool = False


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
    memo: PlanMemo | None = field(default=None, compare=False, repr=False)  # for the next plan_cluster


@dataclass(frozen=True)
class Limits:
    """What bounds planning: the hold timeout, each gang's time budget (seconds of the planner's
    clock), an optional ceiling on gang size under what the cluster could ever hold, and the
    topology levels (widest first) a preferred level widens through before giving up on one domain."""

    timeout: float = 300.0
    budget: float = 2.0
    max_gang_size: int | None = None
    levels: tuple[str, ...] = ()


class _BudgetSpentError(Exception):
    """A gang's planning went past its budget."""


def _room(gang: Gang, node: Node, usage: Usage, matcher: Matcher) -> tuple[int, ...]:
    """How many members of each of the gang's demands fit on `node` with `usage`: all that a plan
    reads of a node it holds nothing on, so a usage change that leaves these counts alone (a 1-GPU
    pod coming or going beside an 8-GPU member's worth of used devices) cannot change the plan."""
    limit = max(gang.size, 1)
    demands = dict.fromkeys(gang.demand(part) for part in (None, *gang.parts))
    return tuple(members_fit(node, usage, demand, limit, matcher)[0] for demand in demands)


def _room_grew(gang: Gang, node: Node | None, before: Usage | None, now: Usage | None, matcher: Matcher) -> bool:
    """Capacity was freed on `node` for this gang: more of its members fit there than before (or
    the node is new to it)."""
    if node is None or now is None:
        return False
    if before is None:
        return True
    if before is now or before.within(now):
        return False
    return any(a > b for a, b in zip(_room(gang, node, now, matcher), _room(gang, node, before, matcher), strict=True))


def _hold_clock(
    gang: Gang,
    previous: HoldClock | None,
    nodes: dict[str, Node],
    usage: dict[str, Usage],
    matcher: Matcher,
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
    elif previous.members != members or (
        previous.expired
        and any(_room_grew(gang, nodes.get(n), previous.usage.get(n), u, matcher) for n, u in usable().items())
    ):
        since = now
    else:
        since = previous.since
    since = max(since, gang.anchor())
    expired = now - since > timeout
    return HoldClock(since, members, expired, usable() if expired else {})


def _domains(nodes: dict[str, Node], level: str | None, gang: Gang, part: Part | None = None) -> dict[str, list[str]]:
    """Domain value -> nodes the gang (or one part) may use there; members already placed decide
    the domain."""
    usable = {name: node for name, node in nodes.items() if gang.may_use(node, part)}
    if not level:
        return {ANYWHERE: sorted(usable)}
    domains: dict[str, list[str]] = defaultdict(list)
    for name, node in sorted(usable.items()):
        if level in node.labels:
            domains[node.labels[level]].append(name)
    members = gang.part_placed(part) if part is not None else gang.placed
    placed = {nodes[m.node].labels.get(level) for m in members if m.node in nodes}
    if placed:
        return {value: names for value, names in domains.items() if value in placed}
    return dict(domains)


def owner(gang: Gang, part: str) -> str:
    """Who holds a domain exclusively: the gang, or one part (a JobSet's Job)."""
    return f"{gang.ref.key}#{part}" if part else gang.ref.key


def _held_by_another(names: list[str], taken: Mapping[str, str], mine: str) -> bool:
    """An exclusive part (JobSet/LWS exclusive-topology) shares its domain with no other one."""
    return any(taken.get(name, mine) != mine for name in names)


def _levels(ref: GangRef, levels: tuple[str, ...]) -> list[str | None]:
    """Topology levels to try, in order: a required level alone; a preferred one, then each wider
    one of `levels` (listed widest first, so walked back from it: rack, block, zone), then anywhere,
    so a gang that misses its rack still lands as close together as the cluster allows. A preferred
    level not listed is a plain label key: it, then anywhere."""
    if ref.required_topology:
        return [ref.required_topology]
    level = ref.preferred_topology
    if not level:
        return [None]
    wider = levels[: levels.index(level)][::-1] if level in levels else ()
    return [level, *wider, None]


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
    if gang.ref.unseen:
        return Plan(
            gang.ref.key, False, reason=f"gang {gang.ref.key}: waiting to see {gang.ref.unseen}", transient=True
        )
    if gang.remaining == 0:
        return Plan(gang.ref.key, True)
    if demand.unresolved:
        waiting_for = ", ".join(demand.unresolved)
        return Plan(gang.ref.key, False, reason=f"gang {gang.ref.key}: waiting to see {waiting_for}", transient=True)
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
        pods = f"needs at least {size} pods" if gang.ref.minimum else f"has {size} pods"
        return (
            f"gang {key} {pods} of {demand.devices} device(s) each; this cluster could ever hold at most {most} of them"
        )
    return None


def _why(gang: Gang, level: str | None) -> str:
    """Why the plan's domain was chosen, for the log."""
    if level and gang.placed:
        return f"its placed members are in this {level}"
    best = f"best fit: the {level} with the least room to spare" if level else ""
    wanted = gang.ref.preferred_topology
    if wanted and level != wanted and not gang.ref.required_topology:
        widened = f"no single {wanted} has room; it is preferred, not required"
        return f"{widened}; {best}" if best else widened
    return best or "no topology asked"


@dataclass
class _Placement:
    """Where a gang's remaining members go: per part, per node; and the usage that holds them."""

    part_slots: dict[str, dict[str, int]] = field(default_factory=dict)
    changed: dict[str, Usage] = field(default_factory=dict)
    domains: list[str] = field(default_factory=list)

    def add(self, part: str, slots: dict[str, int], changed: dict[str, Usage], where: str) -> None:
        self.part_slots[part] = slots
        self.changed.update(changed)
        self.domains.append(where)

    def slots(self) -> dict[str, int]:
        total: dict[str, int] = defaultdict(int)
        for slots in self.part_slots.values():
            for name, count in slots.items():
                total[name] += count
        return dict(total)


def _place_exclusive(
    gang: Gang,
    part: Part,
    nodes: dict[str, Node],
    usage: dict[str, Usage],
    matcher: Matcher,
    *,
    taken: Mapping[str, str],
    used: set[str],
    out_of_time: Callable[[], bool],
) -> tuple[str, dict[str, int], dict[str, Usage]] | str:
    """A domain of its own for one part: (domain, slots, usage) or why there is none."""
    level, need, demand = part.exclusive, gang.part_remaining(part), gang.demand(part)
    mine = owner(gang, part.key)
    free = {
        domain: names
        for domain, names in _domains(nodes, level, gang, part).items()
        if domain not in used and not _held_by_another(names, taken, mine)
    }
    fits = [
        _fit_domain(domain, names, nodes, usage, demand, need=need, matcher=matcher, out_of_time=out_of_time)
        for domain, names in free.items()
    ]
    candidates = [fit for fit in fits if fit.total >= need]
    if not candidates:
        best = max(fits, key=lambda fit: (fit.total, fit.domain), default=None)
        room = f"the best free {level} ({best.domain}) has room for {best.total}" if best else f"no {level} is free"
        label = f" ({part.key})" if part.key else ""
        return (
            f"gang {gang.ref.key}: a part{label} needs {need} more pod(s) x {demand.devices} device(s) "
            f"in a {level} of its own; {room}"
        )
    chosen = min(candidates, key=lambda c: (c.total, c.domain))
    slots, changed = _assign(chosen, nodes, usage, demand, need=need, matcher=matcher)
    return chosen.domain, slots, changed


def _fit_together(
    gang: Gang,
    parts: list[Part],
    fit: _DomainFit,
    domain_nodes: dict[str, Node],
    usage: dict[str, Usage],
    *,
    matcher: Matcher,
    out_of_time: Callable[[], bool],
) -> _Placement | None:
    """All `parts` in one domain (`fit` is the first part's fit there), one after the other on the
    usage the earlier ones leave; None if one does not fit."""
    placement = _Placement()
    working = dict(usage)
    for index, part in enumerate(parts):
        demand, need = gang.demand(part), gang.part_remaining(part)
        if index:
            fit = _fit_domain(
                fit.domain,
                sorted(domain_nodes),
                domain_nodes,
                working,
                demand,
                need=need,
                matcher=matcher,
                out_of_time=out_of_time,
            )
            if fit.total < need:
                return None
        slots, changed = _assign(fit, domain_nodes, working, demand, need=need, matcher=matcher)
        working.update(changed)
        placement.add(part.key, slots, changed, fit.domain)
    return placement


@dataclass(frozen=True)
class _Together:
    """The non-exclusive parts' placement and the level it is at, or the best room seen."""

    placement: _Placement | None
    level: str | None = None
    best_seen: tuple[int, str] = (0, "")


def _place_together(
    gang: Gang,
    parts: list[Part],
    nodes: dict[str, Node],
    usage: dict[str, Usage],
    matcher: Matcher,
    *,
    taken: Mapping[str, str],
    levels: tuple[str, ...],
    out_of_time: Callable[[], bool],
) -> _Together:
    """The non-exclusive parts in one domain at the first of the gang's levels with room, best fit: the feasible domain
    with the least room to spare, so big free domains stay whole for big gangs."""
    first, need = parts[0], gang.part_remaining(parts[0])
    demand = gang.demand(first)
    best_seen: tuple[int, str] = (0, "")
    for level in _levels(gang.ref, levels):
        domains = _domains(nodes, level, gang)
        fits = [
            _fit_domain(domain, names, nodes, usage, demand, need=need, matcher=matcher, out_of_time=out_of_time)
            for domain, names in domains.items()
            if not (gang.ref.exclusive and _held_by_another(names, taken, gang.ref.key))
        ]
        best_seen = max([best_seen, *((fit.total, fit.domain) for fit in fits)])
        for fit in sorted((f for f in fits if f.total >= need), key=lambda c: (c.total, c.domain)):
            in_domain = {name: nodes[name] for name in domains[fit.domain]}
            placement = _fit_together(gang, parts, fit, in_domain, usage, matcher=matcher, out_of_time=out_of_time)
            if placement is not None:
                return _Together(placement, level)
    return _Together(None, best_seen=best_seen)


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
    """One gang's remaining members, all of them or nothing held. A gang whose size is a minimum
    (a native PodGroup's minCount) with more members than that is planned with as many of them as
    fit together, at least the minimum: the native scheduler admits the group once the minimum
    fits and places every other member that fits in the same cycle, so planning the minimum alone
    would keep members pending it would place, and planning them all would refuse a group it
    admits. Whether a count fits only gets harder as it grows, so the largest is found by halving
    (a few plans, not one per member)."""
    if gang.ref.minimum and len(gang.members) > gang.size:
        best: tuple[Plan, dict[str, Usage]] | None = None
        low, high = gang.size + 1, len(gang.members)
        while low <= high:
            count = (low + high) // 2
            sized = Gang(replace(gang.ref, size=count), gang.members)
            attempt = _plan_members(sized, nodes, usage, matcher, taken=taken, limits=limits, out_of_time=out_of_time)
            if attempt[0].feasible:
                best, low = attempt, count + 1
            else:
                high = count - 1
        if best is not None:
            return best
    return _plan_members(gang, nodes, usage, matcher, taken=taken, limits=limits, out_of_time=out_of_time)


def _plan_members(
    gang: Gang,
    nodes: dict[str, Node],
    usage: dict[str, Usage],
    matcher: Matcher,
    *,
    taken: dict[str, str],
    limits: Limits,
    out_of_time: Callable[[], bool],
) -> tuple[Plan, dict[str, Usage]]:
    """The gang's remaining members: parts that need a domain of their own each get one, the rest
    go together into one domain; all of them, or nothing is held."""
    demand = gang.demand()
    settled = _settled(gang, demand)
    if settled is not None:
        return settled, {}
    too_big = _too_big(gang, demand, nodes, matcher, limits)
    if too_big is not None:
        return Plan(gang.ref.key, False, reason=too_big), {}
    placement = _Placement()
    working = dict(usage)
    used: set[str] = set()
    exclusive = [p for p in gang.parts if p.exclusive]
    for part in sorted(exclusive, key=lambda p: (not gang.part_placed(p), p.key)):  # placed parts keep theirs
        own = _place_exclusive(gang, part, nodes, working, matcher, taken=taken, used=used, out_of_time=out_of_time)
        if isinstance(own, str):
            return Plan(gang.ref.key, False, reason=own), {}
        domain, slots, changed = own
        used.add(domain)
        working.update(changed)
        placement.add(part.key, slots, changed, f"{part.exclusive} {domain}")
    together = [p for p in gang.parts if not p.exclusive and gang.part_remaining(p)]
    level: str | None = None
    if together:
        found = _place_together(
            gang, together, nodes, working, matcher, taken=taken, levels=limits.levels, out_of_time=out_of_time
        )
        if found.placement is None:
            return Plan(gang.ref.key, False, reason=_no_room(gang, demand, found.best_seen)), {}
        level = found.level
        for key, slots in found.placement.part_slots.items():
            placement.add(key, slots, {}, "")
        placement.changed.update(found.placement.changed)
        domain = found.placement.domains[0]
        placement.domains.append(f"{level} {domain}" if level else ANYWHERE)
    where = ", ".join(d for d in placement.domains if d) or ANYWHERE
    plan = Plan(gang.ref.key, True, placement.slots(), where, _why(gang, level), part_slots=placement.part_slots)
    return plan, placement.changed


def _plan_in_budget(
    gang: Gang,
    nodes: dict[str, Node],
    usage: dict[str, Usage],
    matcher: Matcher,
    *,
    taken: dict[str, str],
    limits: Limits,
    clock: Callable[[], float],
    spent: list[bool] | None = None,
) -> tuple[Plan, dict[str, Usage]]:
    """`_plan_gang` within the gang's time budget; past it, this gang alone is not placeable yet
    (it holds nothing) and the others are still planned; `spent` is told so."""
    deadline = clock() + limits.budget
    try:
        return _plan_gang(
            gang, nodes, usage, matcher, taken=taken, limits=limits, out_of_time=lambda: clock() > deadline
        )
    except _BudgetSpentError:
        if spent is not None:
            spent.append(True)
        reason = (
            f"gang {gang.ref.key} is not placeable yet: planning it took over {limits.budget:g}s; it is tried again"
        )
        return Plan(gang.ref.key, False, reason=reason), {}


def _by_age(gangs: list[Gang]) -> list[Gang]:
    return sorted(gangs, key=lambda g: (min(m.created for m in g.members), g.ref.key))


def _same_members(before: list[Member], now: list[Member]) -> bool:
    """The same members, spec and affinity included (those are left out of Member equality)."""
    return len(before) == len(now) and all(
        a is b or (a == b and a.spec == b.spec and a.affinity == b.affinity) for a, b in zip(before, now, strict=True)
    )


def _usable_names(gang: Gang, nodes: dict[str, Node]) -> frozenset[str]:
    """Every node whose usage can change the gang's plan: one it, or any of its parts, may use."""
    parts: list[Part | None] = [None, *gang.parts]
    return frozenset(name for name, node in nodes.items() if any(gang.may_use(node, part) for part in parts))


@dataclass(frozen=True)
class _Seen:
    """One gang as the last plan saw it: the nodes it may use are fixed by its members and the nodes."""

    ref: GangRef
    members: list[Member]
    usable: frozenset[str]
    clock: HoldClock


@dataclass(frozen=True)
class _Record:
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
    """What one `plan_cluster` call saw and decided, for the next call to re-plan only what changed.

    Its size is bounded by the cluster: the node and usage dicts it was given (references, not
    copies) and one entry per gang of that plan; each new plan replaces it."""

    nodes: dict[str, Node]
    usage: dict[str, Usage]
    limits: Limits
    seen: dict[str, _Seen]
    records: list[_Record]


class _Incremental:
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
        limits: Limits,
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
        self.records: list[_Record] = []

    def seen(self, gang: Gang) -> _Seen | None:
        if self.memo is None:
            return None
        seen = self.memo.seen.get(gang.ref.key)
        if seen is None or seen.ref != gang.ref or not _same_members(seen.members, gang.members):
            return None
        return seen

    def usable(self, gang: Gang, nodes: dict[str, Node]) -> frozenset[str]:
        seen = self.seen(gang)
        return seen.usable if seen is not None else _usable_names(gang, nodes)

    def clock(
        self,
        gang: Gang,
        previous: HoldClock | None,
        nodes: dict[str, Node],
        usage: dict[str, Usage],
        matcher: Matcher,
        **kw: float,
    ) -> HoldClock:
        """`_hold_clock`, looking only at the nodes whose usage changed when the gang's last clock
        is the one this memo made and the gang is unchanged."""
        seen = self.seen(gang)
        # The same members since this clock was made: it holds on until it expires.
        if (
            seen is not None
            and previous is seen.clock
            and not previous.expired
            and kw["now"] - previous.since <= kw["timeout"]
        ):
            return previous
        if seen is None or previous is not seen.clock or not previous.expired:
            return _hold_clock(gang, previous, nodes, usage, matcher, **kw)
        # The clock's usage covers the nodes the gang itself may use; unchanged ones are the same objects.
        changed = [name for name in self.base_dirty if name in previous.usage]
        freed = any(
            _room_grew(gang, nodes.get(name), previous.usage[name], usage.get(name), matcher) for name in changed
        )
        since = max(kw["now"] if freed else previous.since, gang.anchor())
        expired = kw["now"] - since > kw["timeout"]
        if not expired:
            return HoldClock(since, previous.members, False, {})
        held = dict(previous.usage)
        held.update({name: usage[name] for name in changed if name in usage})
        return HoldClock(since, previous.members, True, held)

    def reuse(
        self,
        gang: Gang,
        expired: bool,
        taken: dict[str, str],
        usable: frozenset[str],
        *,
        working: Mapping[str, Usage],
        matcher: Matcher,
    ) -> _Record | None:
        """The last plan's record for this gang, if nothing it depends on changed: on each node it
        may use whose usage differs from last time, it holds nothing and as many members fit."""
        if self.memo is None or self.index >= len(self.memo.records):
            self.memo = None
            return None
        record = self.memo.records[self.index]
        if record.key != gang.ref.key or record.expired != expired:
            self.memo = None  # another order: the last plan's usage at each point no longer applies
            return None
        if not (record.reusable and self.seen(gang) is not None and record.taken == taken):
            return None
        for name in self.dirty & usable:
            then, now = self.previous.get(name, self.before.get(name)), working.get(name)
            node = self.memo.nodes.get(name)
            if name in record.plan.slots or then is None or now is None or node is None:
                return None
            if _room(gang, node, then, matcher) != _room(gang, node, now, matcher):
                return None
        return record

    def done(self, record: _Record, working: dict[str, Usage]) -> None:
        """After a gang is planned (`working` is the usage before its plan is applied)."""
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
    memo: PlanMemo | None = None,
    changed: Collection[str] | None = None,
) -> ClusterPlan:
    """Plans for all gangs; `held` is what pods outside these gangs may still use.

    `clocks` are the hold clocks the previous plan returned (none after a restart); `clock`
    measures the planning budget. `memo` is the previous plan's `memo`: with it, only the gangs
    whose members, or the usage of nodes they may use, changed are planned again; the result is
    the same as without it. `changed`, when given, names every node whose node or usage object may
    differ from the memo's (from the watches' journal): only those are compared with it."""
    clocks = clocks or {}
    incremental = _Incremental(memo, nodes, usage, limits, changed)
    held = dict(usage)
    holders: dict[str, list[str]] = defaultdict(list)
    plans: dict[str, Plan] = {}
    taken = {m.node: owner(g, m.part) for g in gangs if g.ref.exclusive for m in g.placed if m.node}
    # A gang whose plan nodes cannot change (every member placed, a label error, an object not seen
    # yet) holds nothing and has no clock: on a busy cluster most gangs are bound ones, and each
    # event used to re-check the room on their nodes.
    present = []
    for gang in gangs:
        settled = _settled(gang, gang.demand()) if gang.members else None
        if settled is not None:
            plans[gang.ref.key] = settled
        elif gang.members:
            present.append(gang)
    usable = {g.ref.key: incremental.usable(g, nodes) for g in present}
    after = {
        g.ref.key: incremental.clock(g, clocks.get(g.ref.key), nodes, usage, matcher, now=now, timeout=limits.timeout)
        for g in present
    }
    active = [g for g in present if not after[g.ref.key].expired]
    waiting = [g for g in present if after[g.ref.key].expired]

    def planned(gang: Gang, working: dict[str, Usage], expired: bool) -> tuple[Plan, dict[str, Usage]]:
        record = incremental.reuse(gang, expired, taken, usable[gang.ref.key], working=working, matcher=matcher)
        if record is None:
            spent: list[bool] = []
            plan, changed = _plan_in_budget(
                gang, nodes, working, matcher, taken=taken, limits=limits, clock=clock, spent=spent
            )
            record = _Record(gang.ref.key, expired, dict(taken), plan, changed, not spent)
        incremental.done(record, working)
        return record.plan, record.changed

    for gang in _by_age(active):
        plan, changed = planned(gang, held, False)
        plans[gang.ref.key] = plan
        held.update(changed)
        for name in plan.slots:
            holders[name].append(gang.ref.key)
        if gang.ref.exclusive:
            for part, slots in plan.part_slots.items():
                taken.update(dict.fromkeys(slots, owner(gang, part)))
    after_active = dict(held)
    for gang in _by_age(waiting):
        plan, changed = planned(gang, after_active, True)
        plan.expired = True
        plans[gang.ref.key] = plan
        after_active.update(changed)
    valid_until = min((c.since + limits.timeout for c in after.values() if not c.expired), default=math.inf)
    seen = {g.ref.key: _Seen(g.ref, list(g.members), usable[g.ref.key], after[g.ref.key]) for g in present}
    next_memo = PlanMemo(nodes, usage, limits, seen, incremental.records)
    return ClusterPlan(plans, held, dict(holders), after, valid_until, next_memo)
