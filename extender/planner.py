"""Plan every waiting gang at once, oldest first, and hold the planned capacity. Pure.

Each gang's remaining members are planned into one domain at its required (or preferred)
topology level, best-fit: the feasible domain with the least room to spare, so big free domains
stay whole. A gang that already has bound members stays in their domain. Capacity planned for a
gang is held against every later gang and every pod outside a gang. A gang that cannot be placed
holds nothing, so it never blocks others, and says why. A hold expires after the plan timeout with
no progress; the gang then waits behind the others for one timeout (backoff) before holding again.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from extender.capacity import Matcher, members_fit
from extender.demand import Demand
from extender.eligibility import eligible
from extender.gang import GangRef
from extender.model import Node, Usage

ANYWHERE = "the cluster"


@dataclass(frozen=True)
class Member:
    pod: str  # namespace/name
    node: str | None  # bound node
    demand: Demand
    created: float  # unix seconds
    bound_at: float | None = None
    spec: dict[str, Any] = field(default_factory=dict, compare=False)  # for node eligibility


@dataclass
class Gang:
    ref: GangRef
    members: list[Member] = field(default_factory=list)

    @property
    def size(self) -> int:
        """A gang is never smaller than the members that exist (e.g. a Job not yet seen by the watch)."""
        return max(self.ref.size or 0, len(self.members))

    @property
    def bound(self) -> list[Member]:
        return [m for m in self.members if m.node]

    @property
    def remaining(self) -> int:
        return max(0, self.size - len(self.bound))

    def anchor(self) -> float:
        """When the gang last made progress (created, or a member bound)."""
        times = [m.created for m in self.members] + [m.bound_at for m in self.members if m.bound_at]
        return max(times) if self.bound else min(m.created for m in self.members)

    def representative(self) -> Member | None:
        """The newest member still to be placed (else the newest placed one) stands for those not created yet."""
        waiting = [m for m in self.members if not m.node and m.demand.needs_devices]
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
    domain_value: str | None = None  # the label value of the chosen domain


@dataclass
class ClusterPlan:
    plans: dict[str, Plan]
    held: dict[str, Usage]  # usage per node including holds of active gangs
    holders: dict[str, list[str]]  # node -> gangs holding capacity there


def _expired(gang: Gang, now: float, timeout: float) -> bool:
    waited = now - gang.anchor()
    return waited > timeout and int(waited // timeout) % 2 == 1


def _domains(nodes: dict[str, Node], level: str | None, gang: Gang) -> dict[str, list[str]]:
    """Domain value -> nodes the gang may use there; members already bound decide the domain."""
    usable = {name: node for name, node in nodes.items() if gang.may_use(node)}
    if not level:
        return {ANYWHERE: sorted(usable)}
    domains: dict[str, list[str]] = defaultdict(list)
    for name, node in sorted(usable.items()):
        if level in node.labels:
            domains[node.labels[level]].append(name)
    bound = {nodes[m.node].labels.get(level) for m in gang.bound if m.node in nodes}
    if bound:
        return {value: names for value, names in domains.items() if value in bound}
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
) -> _DomainFit:
    """How many members fit in the domain (up to `need` per node); tightest nodes come first so
    they fill before roomier ones."""
    room = []
    for name in names:
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


def _plan_gang(
    gang: Gang,
    nodes: dict[str, Node],
    usage: dict[str, Usage],
    matcher: Matcher,
    *,
    taken: dict[str, str],
    sticky: str | None = None,
) -> tuple[Plan, dict[str, Usage]]:
    """One gang's remaining members in one domain, and the usage of the nodes the plan holds."""
    demand = gang.demand()
    settled = _settled(gang, demand)
    if settled is not None:
        return settled, {}
    best_seen: tuple[int, str] = (0, "")
    for level in _levels(gang.ref):
        fits = [
            _fit_domain(domain, names, nodes, usage, demand, need=gang.remaining, matcher=matcher)
            for domain, names in _domains(nodes, level, gang).items()
            if not _held_by_another_exclusive_gang(gang, names, taken)
        ]
        best_seen = max([best_seen, *((fit.total, fit.domain) for fit in fits)])
        candidates = [fit for fit in fits if fit.total >= gang.remaining]
        if candidates:
            chosen = _choose(candidates, sticky)
            slots, changed = _assign(chosen, nodes, usage, demand, need=gang.remaining, matcher=matcher)
            where = f"{level} {chosen.domain}" if level else ANYWHERE
            return Plan(gang.ref.key, True, slots, where, f"planned onto {where}", domain_value=chosen.domain), changed
    return Plan(gang.ref.key, False, reason=_no_room(gang, demand, best_seen)), {}


def plan_cluster(
    nodes: dict[str, Node],
    usage: dict[str, Usage],
    gangs: list[Gang],
    matcher: Matcher,
    *,
    now: float,
    timeout: float,
    sticky: dict[str, str] | None = None,
) -> ClusterPlan:
    """Plans for all gangs; `held` is what pods outside these gangs may still use.

    `sticky` maps a gang to the domain it was last planned into: members already answered may not
    be bound yet, so a feasible earlier choice is kept rather than re-chosen."""
    sticky = sticky or {}
    held = dict(usage)
    holders: dict[str, list[str]] = defaultdict(list)
    plans: dict[str, Plan] = {}
    taken = {m.node: g.ref.key for g in gangs if g.ref.exclusive for m in g.bound if m.node}
    active = [g for g in gangs if g.members and not _expired(g, now, timeout)]
    waiting = [g for g in gangs if g.members and _expired(g, now, timeout)]
    for gang in sorted(active, key=lambda g: (min(m.created for m in g.members), g.ref.key)):
        plan, changed = _plan_gang(gang, nodes, held, matcher, taken=taken, sticky=sticky.get(gang.ref.key))
        plans[gang.ref.key] = plan
        held.update(changed)
        for name in plan.slots:
            holders[name].append(gang.ref.key)
            if gang.ref.exclusive:
                taken[name] = gang.ref.key
    after_active = dict(held)
    for gang in sorted(waiting, key=lambda g: (min(m.created for m in g.members), g.ref.key)):
        plan, changed = _plan_gang(gang, nodes, after_active, matcher, taken=taken, sticky=sticky.get(gang.ref.key))
        plan.expired = True
        plans[gang.ref.key] = plan
        after_active.update(changed)
    return ClusterPlan(plans, held, dict(holders))
