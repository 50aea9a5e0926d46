"""One plan of every gang, with what it was made from, and the one question asked of it: what
changed since? Pure and immutable: the planner replaces a snapshot whole, so readers on any
thread see one consistent plan without a lock.
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Mapping
from dataclasses import dataclass

from extender.cluster.view import ClusterView
from extender.devices.node_usage import Node, Usage
from extender.plan.planner import ClusterPlan
from extender.pods.keys import Key
from extender.pods.model import Entry, Gang

# allocated (it places its pod), a node's labels.
_AFFINITY_KINDS = frozenset({"pods", "resourceclaims", "node"})


@dataclass(frozen=True)
class PlanInputs:
    """What a plan reads besides the view: the pod asked about, when the view does not hold that
    very body (a digest), and the version of the gang pods asked about before the watches had them."""

    body: str | None
    unwatched: int


@dataclass(frozen=True)
class Depends:
    """The parts of a view a plan read, as the very objects the view handed out (a view replaces a
    mapping when anything in it changes), and whether inter-pod terms made every pod count."""

    members: Mapping[Key, Entry] | None
    nodes: Mapping[str, Node]
    usage: Mapping[str, Usage]
    affinity: bool
    holding: frozenset[tuple[str, float | None, frozenset[str]]] = frozenset()
    kept_for_lost: frozenset[str] = frozenset()  # the plan's (ClusterPlan.kept_for_lost)

    @classmethod
    def of(cls, view: ClusterView, kept_for_lost: frozenset[str] = frozenset()) -> Depends:
        holding = holding_of(view, kept_for_lost)
        return cls(view.members, view.nodes, view.usage, affinity_matters(view), holding, kept_for_lost)


def holding_of(
    view: ClusterView, kept_for_lost: Collection[str] = ()
) -> frozenset[tuple[str, float | None, frozenset[str]]]:
    """The return records that keep devices, those with spares, and those of `kept_for_lost` (whose
    nodes a plan kept before the leader marked them vacated): a change among them changes what each gang is given
    back and preferred, which usage objects alone do not show (a claim released and the same
    devices kept leave a node's usage the very object; a record let go changes no usage)."""
    return frozenset(
        (k.preemptor, k.vacated, frozenset(k.nodes))
        for k in view.returns.values()
        if k.holds or k.preemptor in kept_for_lost or k.spares
    )


@dataclass(frozen=True)
class PlanSnapshot:
    version: int  # of the view it was made from
    inputs: PlanInputs
    plan: ClusterPlan
    gangs: list[Gang]
    depends: Depends
    made_at: float  # monotonic seconds: answers outside gangs may use it for a while


class Kind(enum.Enum):
    SAME = "same"  # nothing a plan reads changed: the snapshot's plan answers this view
    USAGE = "usage"  # only node models or usage moved: the same gangs, planned again where needed
    MEMBERS = "members"  # a member may differ: gangs are assembled again


@dataclass(frozen=True)
class Change:
    kind: Kind
    nodes: frozenset[str] | None = None  # every node whose model or usage may differ; None: any


def affinity_matters(view: ClusterView) -> bool:
    """Some pod has inter-pod (anti-)affinity terms (or the view does not say): every placed pod
    can then change a member's affinity."""
    return view.affinity_pods is None or bool(view.affinity_pods)


def classify(snapshot: PlanSnapshot, view: ClusterView) -> Change:
    """What changed between the snapshot's view and `view`, for the snapshot's inputs, with the nodes
    whose model or usage may differ (read once from the view's journal; None past its reach)."""
    if view.version == snapshot.version:
        return Change(Kind.SAME, frozenset())
    changes = view.changes(snapshot.version)
    moved = None if changes is None else frozenset(key[1] for kind, key in changes if kind in ("node", "usage"))
    depends = snapshot.depends
    if depends.holding != holding_of(view, depends.kept_for_lost):
        return Change(Kind.MEMBERS, None)
    if view.members is None or view.members is not depends.members:
        return Change(Kind.MEMBERS, moved)
    if (depends.affinity or affinity_matters(view)) and (
        changes is None or any(kind in _AFFINITY_KINDS for kind, _ in changes)
    ):
        return Change(Kind.MEMBERS, moved)
    if view.nodes is depends.nodes and view.usage is depends.usage:
        return Change(Kind.SAME, frozenset())
    return Change(Kind.USAGE, moved)
