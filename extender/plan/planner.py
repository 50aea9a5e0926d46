"""Plan every waiting gang at once, highest priority then oldest first, and hold the planned capacity. Pure.

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
import operator
import time
from collections import defaultdict
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property

from extender.cluster.reservation import Reservation
from extender.devices.node_usage import Node, Usage, total_allocations
from extender.plan.capacity import Matcher, members_fit, most_members
from extender.plan.hold_clock import Room, hold_clock, room_counts
from extender.plan.holds import of_record
from extender.pods.demand import Demand
from extender.pods.gang import GangRef, Part
from extender.pods.model import ANYWHERE, Gang, HoldClock, Plan, PlanLimits
from extender.recover.records import lost_members, vacated


@dataclass
class ClusterPlan:
    plans: dict[str, Plan]
    held: dict[str, Usage]  # usage per node including holds of active gangs
    holders: dict[str, list[str]]  # node -> gangs holding capacity there
    clocks: dict[str, HoldClock] = field(default_factory=dict)  # per gang, for the next plan
    valid_until: float = math.inf  # the first moment a hold in it expires
    base: Mapping[str, Usage] | None = field(default=None, compare=False, repr=False)  # the usage it was made on
    # Gangs whose records keep nothing yet whose nodes it kept, having seen them lose members: the
    # record going (the leader let it go) must be planned anew, although no usage moved.
    kept_for_lost: frozenset[str] = frozenset()
    # Each holding gang's priority: what it holds is held from pods of equal or lower priority only.
    priorities: Mapping[str, int] = field(default_factory=dict)

    def made_on(self, usage: dict[str, Usage]) -> bool:
        """Whether this plan was made on `usage` (the very mapping): then `held` differs from it only
        on the nodes in `holders`."""
        return self.base is usage


class _BudgetSpentError(Exception):
    """A gang's planning went past its budget."""


def gang_domains(
    nodes: dict[str, Node], level: str | None, gang: Gang, part: Part | None = None
) -> dict[str, list[str]]:
    """Domain value -> nodes the gang (or one part) may use there; members already placed decide
    the domain."""
    return _placed_in(_domains_of(nodes, level, gang.usable_nodes(nodes, part)), nodes, level, gang, part)


def _domains_of(nodes: dict[str, Node], level: str | None, usable: Collection[str]) -> dict[str, list[str]]:
    """Domain value -> the `usable` nodes there, by name."""
    if not level:
        return {ANYWHERE: sorted(usable)}
    domains: dict[str, list[str]] = defaultdict(list)
    for name in sorted(usable):
        labels = nodes[name].labels
        if level in labels:
            domains[labels[level]].append(name)
    return dict(domains)


def _placed_in(
    domains: dict[str, list[str]], nodes: dict[str, Node], level: str | None, gang: Gang, part: Part | None
) -> dict[str, list[str]]:
    """The domains where the gang's (or part's) placed members are, if any are: they decide it."""
    if not level:
        return domains
    members = gang.part_placed(part) if part is not None else gang.placed
    placed = {nodes[m.node].labels.get(level) for m in members if m.node in nodes}
    if placed:
        return {value: names for value, names in domains.items() if value in placed}
    return domains


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


@dataclass
class _LevelFits:
    """Every domain's fit on one usage mapping, as of its `seen` first changes."""

    usage: dict[str, Usage]
    domains: dict[str, list[str]]
    fits: dict[str, _DomainFit]
    seen: int

    @cached_property
    def domain_of(self) -> dict[str, str]:
        return {name: domain for domain, names in self.domains.items() for name in names}


class DomainMemo:
    """What one plan works out once and every gang in it may reuse: the domains of a usable-node
    set, and a domain's fit for a demand while the usage of its nodes is unchanged. Twenty waiting
    gangs of one shape on 10,000 nodes asked each of 625 racks for its room once per gang (200,000
    node fits); only the racks an earlier gang's plan touched change between them. The next plan
    on the same node objects keeps the domains and fits (`renewed`): after a watch event only the
    racks whose usage it changed are asked again."""

    # Domain fits and usable sets kept from plan to plan, per node of the cluster, past which they
    # are dropped (each new pod shape or usable set adds entries).
    FITS_PER_NODE = 4
    MAX_USABLE_SETS = 1_024

    def __init__(self, nodes: dict[str, Node]) -> None:
        self.nodes = nodes
        # (usable set, level) -> domain -> names.
        self._domains: dict[tuple[frozenset[str], str | None], dict[str, list[str]]] = {}
        # (id of a domain's names, demand, need) -> (those names, their usage objects, the fit).
        self._fits: dict[tuple[int, Demand, int], tuple[list[str], list[Usage], _DomainFit]] = {}
        # id of a usage mapping the plan changes in place -> the names changed there, change by change.
        self._applied: dict[int, list[Collection[str]]] = defaultdict(list)
        # (id of a usage mapping, id of a domains mapping, demand, need) -> every domain's fit there.
        self._tables: dict[tuple[int, int, Demand, int], _LevelFits] = {}

    def domains(self, level: str | None, gang: Gang, part: Part | None = None) -> dict[str, list[str]]:
        """`gang_domains`: the domains of the same usable nodes are worked out once for every gang
        (sorting 5,000 names for each partly placed gang was 44% of a plan's time while 1-GPU pods
        and gangs were scheduled at 5,000 nodes), then narrowed to where its members are."""
        usable = gang.usable_nodes(self.nodes, part)
        # By value: an equal set made anew (another nodes mapping of the same node objects, a
        # stand-in's set recomputed) finds the same domains, whose name lists key the fits kept.
        key = (usable, level)
        domains = self._domains.get(key)
        if domains is None:
            domains = self._domains[key] = _domains_of(self.nodes, level, usable)
        return _placed_in(domains, self.nodes, level, gang, part)

    def fit(
        self,
        domain: str,
        names: list[str],
        usage: dict[str, Usage],
        demand: Demand,
        *,
        need: int,
        matcher: Matcher,
        out_of_time: Callable[[], bool],
    ) -> _DomainFit:
        """How many members fit in the domain (up to `need` per node); tightest nodes come first so
        they fill before roomier ones. Reused while every node of the domain has the same usage
        object."""
        key = (id(names), demand, need)
        found = self._fits.get(key)
        if found is not None and found[0] is names and all(map(operator.is_, map(usage.__getitem__, names), found[1])):
            return found[2]
        room = []
        for name in names:
            if out_of_time():
                raise _BudgetSpentError
            fits, _ = members_fit(self.nodes[name], usage[name], demand, need, matcher)
            if fits:
                room.append((name, fits))
        room.sort(key=lambda item: (item[1], item[0]))
        fit = _DomainFit(domain, sum(fits for _, fits in room), room)
        self._fits[key] = (names, list(map(usage.__getitem__, names)), fit)
        return fit

    def renewed(self, nodes: dict[str, Node]) -> DomainMemo:
        """This memo for the next plan, whose `nodes` are the same objects as this one's."""
        self.nodes = nodes
        self._applied.clear()
        self._tables.clear()
        if len(self._fits) > self.FITS_PER_NODE * len(nodes) + self.MAX_USABLE_SETS:
            self._fits.clear()
        if len(self._domains) > self.MAX_USABLE_SETS:
            self._domains.clear()
            self._fits.clear()  # keyed by the domains' name lists, dropped with them
        return self

    def applied(self, usage: dict[str, Usage], names: Collection[str]) -> None:
        """`usage` was changed in place on `names`: tables made on it look at those domains again."""
        if names:
            self._applied[id(usage)].append(names)

    def level_fits(
        self,
        domains: dict[str, list[str]],
        usage: dict[str, Usage],
        demand: Demand,
        *,
        need: int,
        matcher: Matcher,
        out_of_time: Callable[[], bool],
    ) -> dict[str, _DomainFit]:
        """Every domain's `fit`. Waiting gangs of one shape ask the same domains in turn; between two
        of them only the domains an earlier gang's plan changed (`applied`) are asked again, not all
        625 racks of 10,000 nodes each time (each ask compares every node's usage object)."""
        key = (id(usage), id(domains), demand, need)
        changes = self._applied[id(usage)]
        table = self._tables.get(key)
        if table is None or table.usage is not usage or table.domains is not domains:
            fits = {
                domain: self.fit(domain, names, usage, demand, need=need, matcher=matcher, out_of_time=out_of_time)
                for domain, names in domains.items()
            }
            self._tables[key] = _LevelFits(usage, domains, fits, len(changes))
            return fits
        if table.seen < len(changes):
            where = table.domain_of
            for domain in {where[name] for names in changes[table.seen :] for name in names if name in where}:
                table.fits[domain] = self.fit(
                    domain, domains[domain], usage, demand, need=need, matcher=matcher, out_of_time=out_of_time
                )
            table.seen = len(changes)
        return table.fits

    @cached_property
    def allocations(self) -> int | None:
        """The most allocations all nodes' devices hold at once (None: unbounded)."""
        return total_allocations(node.allocations for node in self.nodes.values())


def _assign(
    fit: _DomainFit,
    nodes: dict[str, Node],
    usage: dict[str, Usage],
    demand: Demand,
    *,
    need: int,
    matcher: Matcher,
    prefer: Collection[str] = (),
) -> tuple[dict[str, int], dict[str, Usage]]:
    """Members per node, filling the nodes a returning gang had (`prefer`) first, then the
    tightest, and each touched node's usage with them placed: that usage is what the plan holds
    against others."""
    slots: dict[str, int] = {}
    changed: dict[str, Usage] = {}
    left = need
    room = sorted(fit.room, key=lambda item: item[0] not in prefer) if prefer else fit.room
    for name, fits in room:
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


def _confined(plan: Plan, gang: Gang, nodes: dict[str, Node]) -> Plan:
    """An elastic gang whose minimum is placed grows inside its required domain: members beyond the
    minimum wait for room there instead of going wherever the scheduler finds some."""
    level = gang.ref.required_topology
    if not (plan.feasible and gang.ref.minimum and level and gang.placed):
        return plan
    if len(gang.placed) + sum(member.done for member in gang.members) >= len(gang.members):
        return plan
    domains = gang_domains(nodes, level, gang)
    if len(domains) != 1:
        return plan
    [(domain, names)] = domains.items()
    return replace(plan, domain=f"{level} {domain}", confine=frozenset(names))


def _no_room(gang: Gang, demand: Demand, best_seen: tuple[int, str]) -> str:
    """Why the gang cannot be placed, with the best domain's room, so the user can act on it."""
    level = gang.ref.required_topology or gang.ref.preferred_topology
    where = f" in one {level}" if level else ""
    needs = f"gang {gang.ref.key} needs {gang.remaining} more pod(s) x {demand.devices} device(s){where}"
    level_text = f"{level} " if level else ""
    total, domain = best_seen
    best = f"the best {level_text}({domain}) has room for {total}" if domain else "no node has room"
    return f"{needs}; {best}"


def _too_big(gang: Gang, demand: Demand, memo: DomainMemo, matcher: Matcher, limits: PlanLimits) -> str | None:
    """Why the gang can never be placed whatever frees up, if its size is past a ceiling; checked
    before planning so no loop ever runs toward an absurd size."""
    key, size = gang.ref.key, gang.size
    if limits.max_gang_size is not None and size > limits.max_gang_size:
        return f"gang {key} has {size} pods, more than maxGangSize {limits.max_gang_size}"
    # Every member takes at least `fewest` allocations: when all the node's devices together hold
    # that many for every member (a sum of cached per-node counts), the exact count per matching
    # device is not needed: the fit loops are bounded per node anyway.
    allocations = memo.allocations
    fewest = min(1 if r.all_devices else max(1, r.count) for r in demand.requests)
    if allocations is not None and size * fewest <= allocations:
        return None
    most = most_members(demand, memo.nodes, matcher)
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
    usage: dict[str, Usage],
    matcher: Matcher,
    *,
    taken: Mapping[str, str],
    used: set[str],
    memo: DomainMemo,
    out_of_time: Callable[[], bool],
    prefer: Collection[str] = (),
) -> tuple[str, dict[str, int], dict[str, Usage]] | str:
    """A domain of its own for one part: (domain, slots, usage) or why there is none."""
    level, need, demand = part.exclusive, gang.part_remaining(part), gang.demand(part)
    mine = owner(gang, part.key)
    free = {
        domain: names
        for domain, names in memo.domains(level, gang, part).items()
        if domain not in used and not _held_by_another(names, taken, mine)
    }
    fits = [
        memo.fit(domain, names, usage, demand, need=need, matcher=matcher, out_of_time=out_of_time)
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
    chosen = min(candidates, key=lambda c: (_elsewhere(free[c.domain], prefer), c.total, c.domain))
    slots, changed = _assign(chosen, memo.nodes, usage, demand, need=need, matcher=matcher, prefer=prefer)
    return chosen.domain, slots, changed


def _elsewhere(names: list[str], prefer: Collection[str]) -> bool:
    """Whether a domain holds none of the nodes a returning gang had: those domains come after."""
    return bool(prefer) and not any(name in prefer for name in names)


def _fit_together(
    gang: Gang,
    parts: list[Part],
    fit: _DomainFit,
    names: list[str],
    usage: dict[str, Usage],
    *,
    matcher: Matcher,
    memo: DomainMemo,
    out_of_time: Callable[[], bool],
    prefer: Collection[str] = (),
) -> _Placement | None:
    """All `parts` in one domain (`fit` is the first part's fit there, `names` its nodes), one after
    the other on the usage the earlier ones leave; None if one does not fit."""
    placement = _Placement()
    working = dict(usage)
    for index, part in enumerate(parts):
        demand, need = gang.demand(part), gang.part_remaining(part)
        if index:
            fit = memo.fit(fit.domain, names, working, demand, need=need, matcher=matcher, out_of_time=out_of_time)
            if fit.total < need:
                return None
        slots, changed = _assign(fit, memo.nodes, working, demand, need=need, matcher=matcher, prefer=prefer)
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
    usage: dict[str, Usage],
    matcher: Matcher,
    *,
    taken: Mapping[str, str],
    levels: tuple[str, ...],
    memo: DomainMemo,
    out_of_time: Callable[[], bool],
    prefer: Collection[str] = (),
) -> _Together:
    """The non-exclusive parts in one domain at the first of the gang's levels with room, best fit: the feasible domain
    with the least room to spare, so big free domains stay whole for big gangs. A returning gang
    tries the domains holding nodes it had (`prefer`) first."""
    first, need = parts[0], gang.part_remaining(parts[0])
    demand = gang.demand(first)
    best_seen: tuple[int, str] = (0, "")
    for level in _levels(gang.ref, levels):
        domains = memo.domains(level, gang)
        every = memo.level_fits(domains, usage, demand, need=need, matcher=matcher, out_of_time=out_of_time)
        fits = [
            fit
            for domain, fit in every.items()
            if not (gang.ref.exclusive and _held_by_another(domains[domain], taken, gang.ref.key))
        ]
        best_seen = max([best_seen, *((fit.total, fit.domain) for fit in fits)])
        feasible = (f for f in fits if f.total >= need)
        for fit in sorted(feasible, key=lambda c: (_elsewhere(domains[c.domain], prefer), c.total, c.domain)):
            placement = _fit_together(
                gang,
                parts,
                fit,
                domains[fit.domain],
                usage,
                matcher=matcher,
                memo=memo,
                out_of_time=out_of_time,
                prefer=prefer,
            )
            if placement is not None:
                return _Together(placement, level)
    return _Together(None, best_seen=best_seen)


def _plan_gang(
    gang: Gang,
    usage: dict[str, Usage],
    matcher: Matcher,
    *,
    taken: dict[str, str],
    limits: PlanLimits,
    memo: DomainMemo,
    out_of_time: Callable[[], bool],
    prefer: Collection[str] = (),
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
            attempt = _plan_members(
                sized, usage, matcher, taken=taken, limits=limits, memo=memo, out_of_time=out_of_time, prefer=prefer
            )
            if attempt[0].feasible:
                best, low = attempt, count + 1
            else:
                high = count - 1
        if best is not None:
            return best
    return _plan_members(
        gang, usage, matcher, taken=taken, limits=limits, memo=memo, out_of_time=out_of_time, prefer=prefer
    )


def _plan_members(
    gang: Gang,
    usage: dict[str, Usage],
    matcher: Matcher,
    *,
    taken: dict[str, str],
    limits: PlanLimits,
    memo: DomainMemo,
    out_of_time: Callable[[], bool],
    prefer: Collection[str] = (),
) -> tuple[Plan, dict[str, Usage]]:
    """The gang's remaining members: parts that need a domain of their own each get one, the rest
    go together into one domain; all of them, or nothing is held."""
    demand = gang.demand()
    settled = _settled(gang, demand)
    if settled is not None:
        return settled, {}
    too_big = _too_big(gang, demand, memo, matcher, limits)
    if too_big is not None:
        return Plan(gang.ref.key, False, reason=too_big), {}
    placement = _Placement()
    exclusive = [p for p in gang.parts if p.exclusive]
    # Exclusive parts change a copy; without them the parts together read the plan's own mapping,
    # whose domain fits the gangs before this one left (`DomainMemo.level_fits`).
    working = dict(usage) if exclusive else usage
    used: set[str] = set()
    for part in sorted(exclusive, key=lambda p: (not gang.part_placed(p), p.key)):  # placed parts keep theirs
        own = _place_exclusive(
            gang, part, working, matcher, taken=taken, used=used, memo=memo, out_of_time=out_of_time, prefer=prefer
        )
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
            gang,
            together,
            working,
            matcher,
            taken=taken,
            levels=limits.levels,
            memo=memo,
            out_of_time=out_of_time,
            prefer=prefer,
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
    usage: dict[str, Usage],
    matcher: Matcher,
    *,
    taken: dict[str, str],
    limits: PlanLimits,
    memo: DomainMemo,
    clock: Callable[[], float],
    spent: list[bool] | None = None,
    prefer: Collection[str] = (),
) -> tuple[Plan, dict[str, Usage]]:
    """`_plan_gang` within the gang's time budget; past it, this gang alone is not placeable yet
    (it holds nothing) and the others are still planned; `spent` is told so."""
    deadline = clock() + limits.budget
    try:
        return _plan_gang(
            gang,
            usage,
            matcher,
            taken=taken,
            limits=limits,
            memo=memo,
            out_of_time=lambda: clock() > deadline,
            prefer=prefer,
        )
    except _BudgetSpentError:
        if spent is not None:
            spent.append(True)
        reason = (
            f"gang {gang.ref.key} is not placeable yet: planning it took over {limits.budget:g}s; it is tried again"
        )
        return Plan(gang.ref.key, False, reason=reason), {}


def _by_rank(gangs: list[Gang]) -> list[Gang]:
    """Higher priority first (what an older gang holds is never kept from a gang of higher
    priority, as no hold is kept from a pod of higher priority), then the oldest."""
    return sorted(gangs, key=lambda g: (-g.priority, g.created, g.ref.key))


class Planning:
    """One plan of every gang, step by step: gangs whose plan nodes cannot change first (`settled`),
    then each other gang's hold clock (`hold`), then the gangs still holding, highest priority then
    oldest first, each against the usage the ones before left (`place`), and last the expired ones
    (and those past their namespace's share) behind them, holding nothing. Each step is a method so
    that the incremental wrapper (extender.plan.incremental) can answer it from what the last plan
    worked out; the rule itself lives here only."""

    def __init__(
        self,
        nodes: dict[str, Node],
        usage: dict[str, Usage],
        matcher: Matcher,
        *,
        now: float,
        limits: PlanLimits,
        clocks: Mapping[str, HoldClock] | None = None,
        clock: Callable[[], float] = time.monotonic,
        domains: DomainMemo | None = None,
        returns: Mapping[str, Reservation] | None = None,
    ) -> None:
        """`domains`: the last plan's memo, when its nodes are these very objects. `returns`: the
        gangs' return records (their devices are in `usage` while they hold)."""
        self.nodes, self.usage, self.matcher = nodes, usage, matcher
        # Every record names where its gang ran: a gang planned again lost members, and goes back
        # there first even before the leader has marked its record vacated. Only those that hold
        # keep devices, which are given back.
        self.returns = dict(returns or {})
        self.holding = {key: kept for key, kept in self.returns.items() if kept.holds}
        # Running gangs' spares: kept from gangs of their priority alone (lent to lower priority,
        # which the gang may preempt; open to higher, which could take the gang's own nodes).
        self.lent = {key: kept for key, kept in self.returns.items() if kept.running and kept.spares}
        self.back: dict[str, frozenset[str]] = {}  # per record, the nodes its gang has members on now
        self.now, self.limits, self.clock = now, limits, clock
        self.clocks = clocks or {}
        self.taken: dict[str, str] = {}  # node -> the exclusive gang part whose domain holds it
        self.domains = domains.renewed(nodes) if domains is not None else DomainMemo(nodes)

    def settled(self, gang: Gang) -> Plan | None:
        """The plan of a gang whose plan nodes cannot change (every member placed, a label error,
        an object not seen yet): it holds nothing and has no clock."""
        if not gang.members:
            return None
        plan = _settled(gang, gang.demand())
        return _confined(plan, gang, self.nodes) if plan is not None else None

    def hold(self, gang: Gang, *, changed: Collection[str] | None = None, room: Room = room_counts) -> HoldClock:
        """The gang's hold clock after this plan; `changed` and `room` as `hold_clock` takes them."""
        return hold_clock(
            gang,
            self.clocks.get(gang.ref.key),
            self.nodes,
            self.usage,
            self.matcher,
            now=self.now,
            timeout=self.limits.timeout,
            changed=changed,
            room=room,
        )

    def place(self, gang: Gang, working: dict[str, Usage], expired: bool) -> tuple[Plan, dict[str, Usage]]:
        """The gang's plan against `working` (the usage the gangs before it left) and the usage it
        holds. `expired` (the gang plans behind the others) does not change the rule, only which of
        the last plan's answers the incremental wrapper may reuse."""
        plan, changed, _ = self.plan_anew(gang, working)
        return plan, changed

    def plan_anew(self, gang: Gang, working: dict[str, Usage]) -> tuple[Plan, dict[str, Usage], bool]:
        """`place` worked out, and whether it finished within the gang's budget."""
        spent: list[bool] = []
        own = self.returns.get(gang.ref.key)
        given = self._given_back(gang, working)
        plan, changed = _plan_in_budget(
            gang,
            given,
            self.matcher,
            taken=self.taken,
            limits=self.limits,
            memo=self.domains,
            clock=self.clock,
            spent=spent,
            prefer=frozenset(own.nodes) if own is not None else frozenset(),
        )
        if given is not working:  # what it holds is what it adds, on top of what others keep there
            changed = {name: working[name].plus(usage.minus(given[name])) for name, usage in changed.items()}
        return plan, changed, not spent

    def _given_back(self, gang: Gang, working: dict[str, Usage]) -> dict[str, Usage]:
        """`working` as the gang sees it (extender.plan.holds): the devices of a return not kept
        from it (its own, and those of lower priority) given back, but on a node where that
        returning gang has members again (their claims hold what was kept there); the spares of
        running gangs that are kept from it (its priority's) added."""
        if not self.holding and not self.lent:
            return working
        priority, key = gang.priority, gang.ref.key
        given: dict[str, Usage] | None = None
        for holder, kept in self.holding.items():
            hold = of_record(kept)
            if hold is not None and hold.keeps_from(priority, key):
                continue
            given = dict(working) if given is None else given
            back = self.back.get(holder, frozenset())
            for name, reserved in kept.nodes.items():
                if name in given and name not in back:
                    given[name] = given[name].minus(reserved.usage)
        for holder, kept in self.lent.items():
            spare = of_record(kept)
            if holder in self.holding or spare is None or not spare.keeps_from(priority, key):
                continue
            given = dict(working) if given is None else given
            for name, usage in spare.nodes.items():
                if name in given:
                    given[name] = given[name].plus(usage)
        return working if given is None else given

    def _hold_lost(self, gangs: list[Gang], held: dict[str, Usage], holders: dict[str, list[str]]) -> frozenset[str]:
        """A gang that lost members keeps its fit nodes from the plan that first sees it, not a
        second later when the leader has marked its record vacated (and the state counts it): in
        between, queued work would take them. Its own members' nodes are counted by their claims.
        Returns the gangs it kept nodes for."""
        by_key = {gang.ref.key: gang for gang in gangs}
        self.back = {
            key: frozenset(m.node for m in by_key[key].placed if m.node) for key in self.returns if key in by_key
        }
        kept_for: set[str] = set()
        for key, kept in self.returns.items():
            gang = by_key.get(key)
            if not kept.running or not lost_members(kept, gang):
                continue
            fit = vacated(kept, self.nodes, self.now, 0, self.usage)
            if fit is None:
                continue
            self.holding[key] = fit
            kept_for.add(key)
            back = self.back.get(key, frozenset())
            for name, reserved in fit.nodes.items():
                if name in held and name not in back:
                    held[name] = held[name].plus(reserved.usage)
                    holders[name].append(key)
        return frozenset(kept_for)

    def run(self, gangs: list[Gang]) -> ClusterPlan:
        held = dict(self.usage)
        holders: dict[str, list[str]] = defaultdict(list)
        kept_for_lost = self._hold_lost(gangs, held, holders)
        plans: dict[str, Plan] = {}
        self.taken = {m.node: owner(g, m.part) for g in gangs if g.ref.exclusive for m in g.placed if m.node}
        present = []
        for gang in gangs:
            settled = self.settled(gang)
            if settled is not None:
                plans[gang.ref.key] = settled
            elif gang.members:
                present.append(gang)
        after = {g.ref.key: self.hold(g) for g in present}
        active = [g for g in present if not after[g.ref.key].expired]
        waiting = [g for g in present if after[g.ref.key].expired]
        bound = self.limits.namespace_hold_nodes(len(self.nodes))
        by_namespace: dict[str, set[str]] = defaultdict(set)  # nodes each namespace's gangs hold on
        for gang in _by_rank(active):
            plan, changed = self.place(gang, held, False)
            namespace = gang.ref.key.partition("/")[0]
            if bound is not None and len(by_namespace[namespace] | plan.slots.keys()) > bound:
                waiting.append(gang)  # past its namespace's share: it waits holding nothing
                continue
            by_namespace[namespace].update(plan.slots)
            plans[gang.ref.key] = plan
            held.update(changed)
            self.domains.applied(held, changed)
            for name in plan.slots:
                holders[name].append(gang.ref.key)
            if gang.ref.exclusive:
                for part, slots in plan.part_slots.items():
                    self.taken.update(dict.fromkeys(slots, owner(gang, part)))
        after_active = dict(held)
        for gang in _by_rank(waiting):
            plan, changed = self.place(gang, after_active, True)
            plan.expired = True
            plans[gang.ref.key] = plan
            after_active.update(changed)
            self.domains.applied(after_active, changed)
        valid_until = min((c.since + self.limits.timeout for c in after.values() if not c.expired), default=math.inf)
        priorities = {key: kept.priority for key, kept in self.returns.items()} | {g.ref.key: g.priority for g in gangs}
        return ClusterPlan(plans, held, dict(holders), after, valid_until, self.usage, kept_for_lost, priorities)


def plan_cluster(
    nodes: dict[str, Node],
    usage: dict[str, Usage],
    gangs: list[Gang],
    matcher: Matcher,
    *,
    now: float,
    limits: PlanLimits,
    clocks: Mapping[str, HoldClock] | None = None,
    clock: Callable[[], float] = time.monotonic,
    returns: Mapping[str, Reservation] | None = None,
) -> ClusterPlan:
    """Plans for all gangs, from scratch; `held` is what pods outside these gangs may still use.

    `clocks` are the hold clocks the previous plan returned (none after a restart); `clock`
    measures the planning budget."""
    return Planning(nodes, usage, matcher, now=now, limits=limits, clocks=clocks, clock=clock, returns=returns).run(
        gangs
    )
