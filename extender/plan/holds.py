"""Capacity kept for someone other than the pod asking: one type, one rule of whom it is kept from,
read alike by `/filter` (extender.plan.decide), preemption (extender.preempt.preemptor) and the held
devices metric. Four kinds keep capacity:

- `plan`: a waiting gang's planned slots (the current plan's, extender.plan.planner);
- `preemption`: devices freed by preemption for their preemptor (its Lease);
- `return`: the nodes of a gang that lost members, until it is whole again (its vacated record);
- `spare`: a running gang's spare nodes (its record).

Each is kept from pods of its own priority and lower, never from higher (which could preempt what
it keeps for anyway), and never from its own holder; a spare is lent to lower priority too (the gang
may preempt a borrower when it needs the spare), so it is kept from its own priority only. Every
hold ends: a plan's with its timeout, the others at their `expires`, which each replica reads on its
own clock (extender.cluster.state). Pure.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING

from extender.cluster.reservation import Reservation
from extender.cluster.view import ClusterView
from extender.devices.node_usage import Node, Usage
from extender.plan.capacity import Matcher, place
from extender.pods.demand import Demand
from extender.recover.records import per_node_demand, spare_usage

if TYPE_CHECKING:  # the planner reads holds too
    from extender.plan.planner import ClusterPlan

UNKNOWN_PRIORITY = 2**31 - 1  # a plan holder whose priority is not known: kept from every pod


class Kind(StrEnum):
    PLAN = "plan"
    PREEMPTION = "preemption"
    RETURN = "return"
    SPARE = "spare"


@dataclass(frozen=True)
class Hold:
    kind: Kind
    holders: tuple[str, ...]  # gang keys, or a pod's namespace/name
    what: str  # as events name it: "gang ns/gang:g", "pod ns/p"
    priority: int
    expires: float  # unix seconds; a plan's hold: math.inf (its clock is the planner's)
    nodes: Mapping[str, Usage]  # what it keeps on each node

    def keeps_from(self, priority: int, asker: str = "") -> bool:
        if asker in self.holders:
            return False
        return priority == self.priority if self.kind is Kind.SPARE else priority <= self.priority

    @property
    def namespace(self) -> str:
        return self.holders[0].partition("/")[0] if self.holders else ""

    def reason(self, node: str) -> str:
        """Why a pod is refused `node`, as `/filter` answers it."""
        if self.kind is Kind.PLAN:
            return f"the free devices on {node} are held for gang(s) {', '.join(sorted(self.holders))}"
        if self.kind is Kind.SPARE:
            return (
                f"{node} is a spare of {self.what} (priority {self.priority}): kept from pods of its "
                "priority, lent to lower ones until the gang needs it"
            )
        why = (
            "which ran there until it lost members; kept until it is whole again, at most until "
            f"{time.strftime('%H:%M:%S', time.gmtime(self.expires))} UTC"
            if self.kind is Kind.RETURN
            else "which preempted pods there"
        )
        return f"the free devices on {node} are kept for {self.what} (priority {self.priority}), {why}"


def _nodes(reservation: Reservation) -> dict[str, Usage]:
    return {name: reserved.usage for name, reserved in reservation.nodes.items()}


def of_record(kept: Reservation) -> Hold | None:
    """What a preemption's Lease or a return record keeps now: None once lapsed, or for a running
    gang without spares."""
    if kept.holds:
        kind = Kind.RETURN if kept.returning else Kind.PREEMPTION
        return Hold(kind, (kept.preemptor,), kept.what, kept.priority, kept.expires, _nodes(kept))
    if kept.running and kept.spares:
        spares = {name: reserved.usage for name, reserved in kept.spares.items()}
        return Hold(Kind.SPARE, (kept.preemptor,), kept.what, kept.priority, kept.expires, spares)
    return None


def recorded(view: ClusterView) -> list[Hold]:
    """The holds the view's Leases record. The view's usage counts preemptions' and returns'
    devices already (extender.cluster.device_index); spares it does not (they are lent)."""
    holds = (of_record(kept) for kept in (*view.reservations.values(), *view.returns.values()))
    return [hold for hold in holds if hold is not None]


def planned(cluster: ClusterPlan) -> Iterator[Hold]:
    """The plan's holds, one per node: what the gangs holding there keep beyond the usage the plan
    was made on, at the highest of their priorities (a node held for two gangs is kept from what
    either is kept from)."""
    base = cluster.base or {}
    for name, holders in cluster.holders.items():
        if holders and name in cluster.held:
            priority = max(cluster.priorities.get(holder, UNKNOWN_PRIORITY) for holder in holders)
            usage = cluster.held[name].minus(base[name]) if name in base else cluster.held[name]
            yield Hold(Kind.PLAN, tuple(holders), "gang(s)", priority, math.inf, {name: usage})


def refused(
    cluster: ClusterPlan,
    view: ClusterView,
    demand: Demand,
    names: list[str],
    matcher: Matcher,
    *,
    priority: int = 0,
    asker: str = "",
) -> dict[str, str]:
    """Nodes of `names` where `demand` fits only in capacity kept from a pod of `priority`, with
    why. Only held nodes can fail, and they are few against 5,000 names."""
    asked = set(names)
    failed: dict[str, str] = {}
    for hold in planned(cluster):
        (name,) = hold.nodes
        node = view.nodes.get(name)
        kept = name in asked and node is not None and hold.keeps_from(priority, asker)
        if kept and node is not None and place(node, cluster.held[name], demand, matcher) is None:
            failed[name] = hold.reason(name)
    # Preemptions' and returns' devices are in the view's usage (a plan may be older than the
    # view); spares are not, they are added.
    for hold in recorded(view):
        if not hold.keeps_from(priority, asker):
            continue
        for name, usage in hold.nodes.items():
            node, used = view.nodes.get(name), view.usage.get(name)
            if name not in asked or name in failed or node is None or used is None:
                continue
            if place(node, used.plus(usage) if hold.kind is Kind.SPARE else used, demand, matcher) is None:
                failed[name] = hold.reason(name)
    return failed


def kept_for_return(view: ClusterView, cluster: ClusterPlan, names: list[str], own: str | None = None) -> bool:
    """Whether a node offered is kept for a returning gang (its record vacated, or the plan keeping
    it since it saw the gang short): a refusal may then end with the hold, which no event tells the
    scheduler of. Not for gang `own` itself: the hold is its own, and what it lacks is room (a
    spare's borrower), which its refusal as unschedulable lets preemption free."""
    holding = [kept for kept in view.returns.values() if kept.holds and kept.preemptor != own]
    short = {
        name for name, holders in cluster.holders.items() if any(key in view.returns and key != own for key in holders)
    }
    if not holding and not short:
        return False
    asked = set(names)
    return bool(short & asked) or any(name in asked for kept in holding for name in kept.nodes)


def kept_from_preemptor(
    view: ClusterView, cluster: ClusterPlan | None, key: str, priority: int, nodes: Mapping[str, Node]
) -> dict[str, Usage]:
    """What a preemptor (`key`, at `priority`) must not count free: every hold kept from it. A
    returning gang's spares count at their full size (its record keeps only their free part, and
    evicting a borrower there would hand the gang's spare to another)."""
    kept: list[Mapping[str, Usage]] = []
    for hold in (*recorded(view), *(planned(cluster) if cluster is not None else ())):
        if not hold.keeps_from(priority, key):
            continue
        if hold.kind is Kind.RETURN:
            record = view.returns[hold.holders[0]]
            needed = per_node_demand(record.nodes)
            full = {
                # A record that names no member's node (none left fit) keeps its spares whole.
                name: spare_usage(nodes[name], needed or len(nodes[name].devices), spare.usage.devices)
                for name, spare in record.spares.items()
                if name in nodes
            }
            kept.append({**hold.nodes, **full})
        else:
            kept.append(hold.nodes)
    return added(kept)


def added(kept: Iterable[Mapping[str, Usage]]) -> dict[str, Usage]:
    total: dict[str, Usage] = {}
    for nodes in kept:
        for name, usage in nodes.items():
            total[name] = total[name].plus(usage) if name in total else usage
    return total


def refused_where_freed(
    view: ClusterView, reservation: Reservation, demand: Demand, names: list[str], matcher: Matcher
) -> bool:
    """Whether the scheduler refuses a preemptor on every node kept for it although its devices
    are free there: its victims are gone and, its own hold counted free, it fits (what refuses it
    is no device: a host port, a volume's node, a spread the decision could not see). Pinned there
    it would wait for the hold to lapse; unpinned it goes where the scheduler finds room. `names`
    must be the whole offer (every feasible node), which the caller checks."""
    if any(name in reservation.nodes for name in names):
        return False
    if any(tuple(victim.pod.split("/", 1)) in view.pods for victim in reservation.victims):
        return False
    for name, reserved in reservation.nodes.items():
        node = view.nodes.get(name)
        if node is None or name not in view.usage:
            return False
        if place(node, view.usage[name].minus(reserved.usage), demand, matcher) is None:
            return False
    return bool(reservation.nodes)
