"""A gang's return record worked out from the view, and what became of a return. Pure.

The record is an `extender.cluster.reservation.Reservation` with `returning` set: per node, how
many members ran there and the devices their claims held. Written while the gang runs whole, it
keeps nothing; once the gang lost members it is vacated: it keeps the devices of the nodes that are
still fit for it (node present, none of those devices tainted), so the planner sends the returning
gang back there and keeps everyone else of equal or lower priority off them.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import re
from collections import Counter
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from enum import StrEnum

from extender.cluster.reservation import Reservation, Reserved, return_lease_name
from extender.cluster.view import ClusterView
from extender.devices.node_usage import Node, Usage, allocated_results, take, usage_of
from extender.pods.keys import key_of
from extender.pods.model import Gang
from extender.recover.grant import SparesGrant


def placed_usage(view: ClusterView, gang: Gang, driver: str) -> dict[str, Reserved]:
    """Per node of the gang's placed members: how many run there and what their claims hold."""
    slots = Counter(member.node for member in gang.placed if member.node in view.nodes)
    allocations = []
    for member in gang.placed:
        namespace, _, name = member.pod.partition("/")
        pod = view.pods.get((namespace, name))
        if pod is None:
            continue
        for claim_name in pod.read_claims().names:
            claim = view.claims.get((namespace, claim_name))
            if claim is not None:
                allocations.append(allocated_results(claim))
    nodes = {name: view.nodes[name] for name in slots if name is not None}
    usage = usage_of(allocations, nodes, driver)
    return {name: Reserved(count, usage[name]) for name, count in slots.items() if name is not None}


RETURNING_SOURCES = ("jobset", "lws", "native", "podgroup")  # gangs an object owns and recreates
SPARES = "nativedra.dev/spares"  # pod annotation (set on the template): spare nodes kept in the gang's domain


def spares_asked(view: ClusterView, gang: Gang, grant: SparesGrant) -> tuple[int, str | None]:
    """How many spare nodes the gang may have kept: what its pods ask for, within the admin's
    `grant`; with a sentence naming the pod, the annotation and the limit when that is fewer than
    asked (none for a value that is not a whole number from 0 to the nodes the gang runs on)."""
    for member in gang.members:
        pod = view.pods.get(key_of(member.pod))
        text = ((pod.obj.get("metadata") or {}).get("annotations") or {}).get(SPARES) if pod is not None else None
        if text is None:
            continue
        bound = len({m.node for m in gang.placed}) or gang.size
        if not re.fullmatch(r"[0-9]{1,4}", text) or int(text) > bound:
            return 0, f"{SPARES} of pod {member.pod}: expected a whole number from 0 to {bound}, got {text!r}"
        asked = int(text)
        refused = grant.refusal(member.pod.partition("/")[0], gang.priority) if asked else None
        if refused is not None:
            return 0, f"{SPARES} of pod {member.pod} asks for {asked}: {refused}"
        if asked > grant.max_per_gang:
            limit = f"the grant allows {grant.max_per_gang} per gang (extender config spares.maxPerGang)"
            return grant.max_per_gang, f"{SPARES} of pod {member.pod} asks for {asked}: {limit}"
        return asked, None
    return 0, None


def spare_usage(node: Node, count: int, first: Collection[str] = (), last: Collection[str] = ()) -> Usage:
    """`count` devices of `node`, one per GPU (no fraction or share, no two drawing on one counter
    set), with what they consume: a spare sized by its gang's per-node demand, not the whole node,
    whose other devices stay free for anyone. The devices in `first` (those it kept) come first,
    those in `last` (in use) last."""
    chosen, drawn = Usage(), set[str]()
    for device in sorted(node.devices.values(), key=lambda d: (d.name not in first, d.name in last, d.name)):
        if len(chosen.devices) >= count:
            break
        if device.multi or device.part or drawn & set(device.counter_sets):
            continue
        drawn |= set(device.counter_sets)
        take(chosen, device)
    return chosen


def per_node_demand(placed: Mapping[str, Reserved]) -> int:
    """The devices the gang holds on its busiest node: what a spare keeps for it."""
    return max((len(reserved.usage.devices) for reserved in placed.values() if reserved.slots), default=0)


def spare_room(
    view: ClusterView, domain_nodes: Collection[str], held: Collection[str], grant: SparesGrant, where: str
) -> tuple[int, str]:
    """How many more spares the grant's shares leave in the gang's domain and the cluster, given
    the spare nodes `held` by every gang; and the limit that bounds it, named."""
    in_domain = len(set(held) & set(domain_nodes))
    domain_cap = math.floor(grant.max_domain_share * len(domain_nodes))
    cluster_cap = math.floor(grant.max_cluster_share * len(view.nodes))
    by_domain = (
        domain_cap - in_domain,
        f"spares.maxDomainShare {grant.max_domain_share} of the {len(domain_nodes)} node(s) of {where}: "
        f"{domain_cap}, {in_domain} kept already",
    )
    by_cluster = (
        cluster_cap - len(held),
        f"spares.maxClusterShare {grant.max_cluster_share} of the cluster's {len(view.nodes)} node(s): "
        f"{cluster_cap}, {len(held)} kept already",
    )
    room, limit = min(by_domain, by_cluster)
    return max(0, room), limit


def choose_spares(
    view: ClusterView,
    gang: Gang,
    placed: Mapping[str, Reserved],
    *,
    asked: int,
    levels: tuple[str, ...],
    taken: Collection[str],
    grant: SparesGrant,
    held: Collection[str] = (),
) -> tuple[dict[str, Reserved], str | None]:
    """Up to `asked` nodes in the gang's domain (the narrowest of `levels` its nodes share; the
    cluster when they share none) to keep as spares, within the shares of the domain and the cluster
    the grant leaves besides the spares `held` already: none of the gang's, none in `taken` (kept for
    another gang), room for the gang's busiest node, and no pod of the gang's priority or higher on
    it (a spare is lent only to pods its gang may preempt). Healthy ones first, the emptiest first;
    then one with a tainted device (the node the gang just left): kept, it is not taken by work of
    the gang's priority once healed. Each keeps as many GPUs as the gang's busiest node holds, with
    no member slot. With the limit named when it allowed fewer than asked."""
    level = _shared_level(list(placed), view.nodes, levels)
    domain = _value(list(placed), view.nodes, level) if level is not None else None
    in_domain = [name for name, node in view.nodes.items() if level is None or node.labels.get(level) == domain]
    room, limit = spare_room(view, in_domain, held, grant, f"{level} {domain}" if level else "the cluster")
    needed = per_node_demand(placed)
    priority = gang.priority
    outranked = {
        pod.node for pod in view.pods.values() if pod.node and pod.priority >= priority and not pod.terminating
    }
    excluded = set(placed) | set(taken) | outranked
    candidates = [view.nodes[n] for n in in_domain if n not in excluded and len(view.nodes[n].devices) >= needed]

    def order(node: Node) -> tuple[bool, int, str]:
        tainted = any(device.tainted for device in node.devices.values())
        return tainted, len(view.usage[node.name].devices) if node.name in view.usage else 0, node.name

    candidates.sort(key=order)
    chosen = {
        node.name: Reserved(0, spare_usage(node, needed, last=_busy(view, node.name)))
        for node in candidates[: min(asked, room)]
    }
    return chosen, (limit if room < asked else None)


def _busy(view: ClusterView, name: str) -> set[str]:
    usage = view.usage.get(name)
    return usage.devices if usage is not None else set()


def owner(key: str) -> tuple[str, str, str]:
    """(source, namespace, name) of a gang key `namespace/source:name`."""
    namespace, _, rest = key.partition("/")
    source, _, name = rest.partition(":")
    return source, namespace, name


def expects_return(view: ClusterView, key: str) -> bool | None:
    """Whether the object that owns the gang still exists to recreate its pods: a JobSet (not
    suspended or being deleted), a PodGroup. None for a LeaderWorkerSet, which the extender does not
    watch: the API is asked. A gang deleted by its user, or suspended by Kueue, keeps nothing."""
    source, namespace, name = owner(key)
    if source == "jobset":
        shape = view.jobsets.get((namespace, name))
        return shape is not None and not shape.stopping
    if source == "podgroup":
        return (namespace, name) in view.pod_group_min
    if source == "native":
        return view.native_groups is None or (namespace, name) in view.native_groups
    return None if source == "lws" else False


def whole(gang: Gang) -> bool:
    """Every member placed or finished, and some still running."""
    return bool(gang.placed) and gang.remaining == 0


def record(
    gang: Gang,
    placed: Mapping[str, Reserved],
    *,
    priority: int,
    now: float,
    hold: float,
    members: str = "",
    spares: Mapping[str, Reserved] | None = None,
) -> Reservation:
    """The record of a gang running whole (`members`: `members_of` its pods): it keeps nothing
    until the gang loses members, but its `spares` (`choose_spares`) from pods of its own priority."""
    key = gang.ref.key
    return Reservation(
        return_lease_name(key),
        key,
        f"gang {key}",
        priority,
        {**placed, **(spares or {})},
        (),
        now,
        now + hold,
        returning=True,
        members=members,
    )


def members_of(view: ClusterView, gang: Gang) -> str:
    """A fingerprint of the gang's pods by UID: a gang recreated between two looks of the leader
    (an LWS group in about a second) is whole both times, with other pods."""
    uids = sorted(view.pods[key_of(m.pod)].uid for m in gang.members if key_of(m.pod) in view.pods)
    return hashlib.sha256(" ".join(uids).encode()).hexdigest()[:32]


def lost_members(kept: Reservation, gang: Gang | None) -> bool:
    """Whether a running gang's record has lost members: fewer of them placed or finished than it
    recorded (a member that completed is not lost)."""
    recorded = sum(reserved.slots for reserved in kept.nodes.values())
    if gang is None:
        return True
    # An elastic gang (a minimum) that shrinks but keeps its minimum scaled down; it did not fail.
    needed = min(recorded, gang.size) if gang.ref.minimum else recorded
    return len(gang.placed) + sum(member.done for member in gang.members) < needed


def finished(gang: Gang | None) -> bool:
    """Its pods completed: nothing is coming back."""
    return gang is not None and bool(gang.members) and all(member.done for member in gang.members)


class Step(StrEnum):
    """What a gang's return record needs now."""

    NOTHING = "nothing"
    RECORD = "record"  # the gang runs whole: say where
    VACATE = "vacate"  # it lost members and its owner will recreate them: keep its nodes
    RETURNED = "returned"  # whole again after losing members: say so, and where it is now
    FINISHED = "finished"  # its pods completed: let the record go
    GONE = "gone"  # its owner is gone or suspended: nothing is coming back
    EXPIRED = "expired"  # not whole again within the hold


def next_step(kept: Reservation, gang: Gang | None, owner_expected: bool | None, now: float, members: str = "") -> Step:
    """`owner_expected`: `expects_return` (None: not known from the view; the caller asks the API
    before it vacates); `members`: `members_of` the gang now."""
    if finished(gang):
        return Step.FINISHED
    if kept.running:
        if gang is not None and whole(gang):
            recreated = bool(kept.members) and members != kept.members
            return Step.RETURNED if recreated else Step.RECORD
        if not lost_members(kept, gang):
            return Step.NOTHING
        return Step.GONE if owner_expected is False else Step.VACATE
    if gang is not None and whole(gang):
        return Step.RETURNED
    if owner_expected is False:
        return Step.GONE
    return Step.EXPIRED if now >= kept.expires else Step.NOTHING


def vacated(
    kept: Reservation,
    nodes: Mapping[str, Node],
    now: float,
    hold: float,
    usage: Mapping[str, Usage] | None = None,
) -> Reservation | None:
    """The record once its gang lost members: it keeps the nodes still fit for it until `now + hold`;
    None when no node is (every one tainted or gone). A spare keeps only what is free of `usage`
    then: what a borrower holds is freed by preemption, not by planning as if it were gone."""
    fit = {name: reserved for name, reserved in kept.nodes.items() if _fit(nodes.get(name), reserved.usage.devices)}
    if not fit:
        return None
    if usage is not None:
        fit = {
            name: Reserved(0, reserved.usage.minus(usage[name])) if not reserved.slots and name in usage else reserved
            for name, reserved in fit.items()
        }
    return dataclasses.replace(kept, nodes=fit, created=now, expires=now + hold, vacated=now)


def _fit(node: Node | None, devices: Collection[str]) -> bool:
    """The node is still there and none of the devices the gang held on it is tainted."""
    return node is not None and not any(node.devices[d].tainted for d in devices if d in node.devices)


@dataclass(frozen=True)
class Outcome:
    """Where a returning gang went: how many of the nodes kept for it it took again, and whether
    it is in the same domain as those, at the narrowest configured level they share."""

    reused: int
    kept: int
    same_domain: bool
    level: str | None

    @property
    def label(self) -> str:
        """The metric's outcome label."""
        if self.kept and self.reused == self.kept:
            return "same_nodes"
        return "same_domain" if self.same_domain else "elsewhere"


def outcome(kept: Reservation, now_on: Collection[str], nodes: Mapping[str, Node], levels: tuple[str, ...]) -> Outcome:
    """`kept`: the vacated record; `now_on`: the nodes the gang runs on again."""
    previous = list(kept.nodes)
    level = _shared_level(previous, nodes, levels)
    same = level is not None and _value(previous, nodes, level) == _value(now_on, nodes, level) is not None
    return Outcome(len(set(kept.nodes) & set(now_on)), len(kept.nodes), same, level)


def _value(names: Collection[str], nodes: Mapping[str, Node], level: str) -> str | None:
    values = {nodes[name].labels.get(level) for name in names if name in nodes}
    return values.pop() if len(values) == 1 else None


def _shared_level(names: Collection[str], nodes: Mapping[str, Node], levels: tuple[str, ...]) -> str | None:
    """The narrowest of `levels` (listed widest first) whose label all `names` share."""
    for level in reversed(levels):
        if _value(names, nodes, level) is not None:
            return level
    return None
