"""What the planner plans with and what it answers: gang members as the API shows them, gangs
(with the stand-in that speaks for members not created yet), per-gang plans, hold clocks and the
limits on planning. Pure data and the questions a gang answers about itself.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from extender.devices.lru import LruCache
from extender.devices.node_usage import Node, Usage
from extender.pods.demand import Demand
from extender.pods.eligibility import ANY_NODE, PodAffinity, eligible, selection_key
from extender.pods.gang import GangRef, Part

ANYWHERE = "the cluster"
# Usable node sets shared by gangs that select nodes alike (see `Gang.usable_nodes`): an entry keeps
# its nodes mapping, so the mapping's id is not reused while the entry is there.
_USABLE: LruCache[tuple[int, str, PodAffinity], tuple[Mapping[str, Node], frozenset[str]]] = LruCache(256)
# How long a gang holds capacity without progress, and how long one gang's planning may take (so
# one gang never delays the answers of the others past the scheduler's httpTimeout); the
# extender's configuration starts from these.
HOLD_TIMEOUT_SECONDS = 300.0
PLAN_BUDGET_SECONDS = 2.0


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


@dataclass(frozen=True)
class Entry:
    """One gang pod as the planner reads it (see extender.cluster.membership): `member` is None when the
    pod is in no gang, or gone for good (Failed, being deleted: its controller creates a
    replacement if one is needed)."""

    pod: dict[str, Any]
    ref: GangRef | None
    member: Member | None


@dataclass
class Gang:
    """Members are fixed once planning starts: the stand-in per part is worked out once."""

    ref: GangRef
    members: list[Member] = field(default_factory=list)
    _stand_ins: dict[tuple[str | None, int], Member | None] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    _shape: tuple[int, tuple[int, tuple[Demand, ...]]] | None = field(
        default=None, init=False, repr=False, compare=False
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
    def priority(self) -> int:
        """The priority its pods run at (the highest, should they differ)."""
        return max((int(member.spec.get("priority") or 0) for member in self.members), default=0)

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
        return self._anchor

    @cached_property
    def _anchor(self) -> float:
        times = [m.created for m in self.members] + [m.bound_at for m in self.members if m.bound_at]
        return max(times) if self.placed else min(m.created for m in self.members)

    @cached_property
    def created(self) -> float:
        """When its first member was created: gangs hold room oldest first."""
        return min(m.created for m in self.members)

    @cached_property
    def progress(self) -> frozenset[tuple[str, str | None, bool]]:
        """Each member and where it stands (node, done): a hold clock restarts when this changes.
        Members are fixed once planning starts, and a gang is planned again and again unchanged."""
        return frozenset((m.pod, m.node, m.done) for m in self.members)

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

    def room_shape(self) -> tuple[int, tuple[Demand, ...]]:
        """What incremental planning counts on every node whose usage changed, for every gang: how
        many members (up to the gang's size) of each stand-in's demand fit, the gang's then each
        part's, each demand once. Gangs of one shape (a JobSet's replicas, a queue of like jobs)
        share it, so a node is counted once per shape."""
        if self._shape is None or self._shape[0] != len(self.members):
            demands = tuple(dict.fromkeys(self.demand(part) for part in (None, *self.parts)))
            self._shape = (len(self.members), (max(self.size, 1), demands))
        return self._shape[1]

    def usable_nodes(self, nodes: Mapping[str, Node], part: Part | None = None) -> frozenset[str]:
        """The names of `nodes` that `may_use` accepts. Gangs whose stand-ins select nodes alike (most
        select none) share one answer per nodes mapping: planning asks it of every gang, for every
        node, so a cluster of 10,000 nodes and 20 waiting gangs asked 600,000 times per plan."""
        member = self.representative(part)
        if member is None:
            return frozenset(nodes)
        own = len(self.parts) == 1 or (part is not None and member.part == part.key)
        affinity = member.affinity if own else ANY_NODE
        selection = selection_key(member.spec)
        key = (id(nodes), selection, affinity)
        cached = _USABLE.get(key)
        if cached is not None and cached[0] is nodes:
            return cached[1]
        if not selection and affinity.allows_any():  # every node: no need to ask each of them
            found = frozenset(nodes)
        else:
            found = frozenset(name for name, node in nodes.items() if self.may_use(node, part))
        _USABLE.put(key, (nodes, found))
        return found

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
    # An elastic gang (a minimum, met) with members beyond it still to place: they may go on any of
    # these nodes, its required domain, as room frees there, and nowhere else.
    confine: frozenset[str] | None = None


@dataclass(frozen=True)
class HoldClock:
    """When a gang's current hold began, and what it saw at its last plan: an expired gang holds
    again only once its members change or capacity is freed where it may go."""

    since: float
    members: frozenset[tuple[str, str | None, bool]]
    expired: bool
    usage: Mapping[str, Usage] = field(default_factory=dict, compare=False)  # kept only while expired


@dataclass(frozen=True)
class PlanLimits:
    """What bounds planning: the hold timeout, each gang's time budget (seconds of the planner's
    clock), an optional ceiling on gang size under what the cluster could ever hold, and the
    topology levels (widest first) a preferred level widens through before giving up on one domain."""

    timeout: float = HOLD_TIMEOUT_SECONDS
    budget: float = PLAN_BUDGET_SECONDS
    max_gang_size: int | None = None
    levels: tuple[str, ...] = ()
    namespace_hold_share: float = 1.0  # of the nodes, where one namespace's waiting gangs may hold

    def namespace_hold_nodes(self, nodes: int) -> int | None:
        """How many nodes one namespace's gangs may hold capacity on; None: no bound."""
        return None if self.namespace_hold_share >= 1 else max(1, math.floor(self.namespace_hold_share * nodes))
