"""The read-only picture of the cluster that decisions are made from.

Its own module because two sides share it: `state` builds it from the watches and `decide`
reads it; neither owns the other.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from extender.cluster.reservation import Reservation
from extender.devices.node_usage import Node, Usage
from extender.pods.demand import Demand, demand_of
from extender.pods.facts import PodFacts
from extender.pods.gang import GangRef, JobSetShape, NativeGroup, gang_of
from extender.pods.model import Entry


@dataclass(frozen=True)
class ClusterView:
    """A consistent snapshot (rebuilt from the API at any time); `version` changes with any event,
    so answers derived from one view can be cached under it."""

    version: int
    nodes: dict[str, Node]
    usage: dict[str, Usage]
    pods: dict[tuple[str, str], PodFacts]
    claims: dict[tuple[str, str], dict[str, Any]]
    templates: dict[tuple[str, str], dict[str, Any]]
    classes: dict[str, dict[str, Any]]
    jobsets: dict[tuple[str, str], JobSetShape] = field(default_factory=dict)
    pod_group_min: dict[tuple[str, str], int] = field(default_factory=dict)
    # Native PodGroups (scheduling.k8s.io); None where the cluster does not serve that API.
    native_groups: dict[tuple[str, str], NativeGroup] | None = None
    # The pods that may be gang members, each with its gang and member as the watches keep them
    # current (extender.cluster.membership; the same mapping until one changes), and the keys of the pods
    # with inter-pod (anti-)affinity terms; None: not indexed, readers work out every pod.
    members: Mapping[tuple[str, str], Entry] | None = None
    affinity_pods: frozenset[tuple[str, str]] | None = None
    # Devices kept for preemptors, by preemptor (a pod's namespace/name or a gang's key), and the
    # PodDisruptionBudgets preemption counts; both empty where not watched.
    reservations: Mapping[str, Reservation] = field(default_factory=dict)
    # Gangs' return records (extender.recover), by gang key; those that hold keep devices like a
    # preemption's.
    returns: Mapping[str, Reservation] = field(default_factory=dict)
    budgets: Mapping[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    # The owners of the Workloads Kueue admitted (extender.pods.kueue): their pods are never victims.
    kueue_admitted: frozenset[tuple[str, str]] = frozenset()
    # Bumped by every change to a kind the journal below does not name (classes, JobSets, PodGroups,
    # a whole kind re-listed): equal numbers mean only journaled kinds changed in between.
    unjournaled_version: int = 0
    # What changed after a version up to this view's: {(kind, key)} for pods, resourceclaims,
    # resourceclaimtemplates, node models ("node", ("", name)) and usage ("usage", ("", name));
    # None when not known (no journal, or it no longer reaches back): readers look at everything.
    # The mappings above are never changed once handed out: the state replaces them.
    changes: Callable[[int], set[tuple[str, tuple[str, str]]] | None] = field(
        default=lambda since: None, compare=False, repr=False
    )

    def demand_of(self, pod: PodFacts, driver: str) -> Demand:
        """What `pod` asks of `driver`'s devices, its claims and templates read from this view."""
        return demand_of(pod, self.claims, self.templates, self.classes, driver)

    def gang_of(self, pod: PodFacts) -> GangRef | None:
        """The gang `pod` belongs to, as this view's JobSets and PodGroups shape it."""
        return gang_of(pod.obj, self.jobsets, self.pod_group_min, self.native_groups)
