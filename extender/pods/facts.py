"""A pod as every room of the extender reads it, worked out once where it enters: at the informer
edge as the watches deliver it, and at the wire as the scheduler asks about it. Downstream code reads
these fields. The object itself (`obj`, `spec`) is handed only to parsers that need the whole of a
part of it: this room's (demand, gang, eligibility, admission), an Event's involvedObject, and the
request body digest that tells two bodies of one pod apart.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from extender.pods.gang import may_belong_to_gang
from extender.pods.keys import Key, timestamp
from extender.pods.kueue import managed_by_kueue
from nativedra.base.kube.pods import extended_claim_name, extended_resources, pod_claims


class ClaimRef(NamedTuple):
    """One entry of the pod's spec.resourceClaims."""

    name: str  # the pod's own name for it
    claim: str | None  # the ResourceClaim: named directly, or generated and listed in the status
    template: str | None  # the ResourceClaimTemplate it is generated from


def _scheduled(status: dict[str, Any]) -> tuple[float | None, bool]:
    """From the PodScheduled condition: when it turned True (bound), and whether the scheduler tried
    the pod and found no node."""
    for condition in status.get("conditions") or ():
        if condition.get("type") == "PodScheduled":
            if condition.get("status") == "True":
                return timestamp(condition.get("lastTransitionTime")), False
            return None, condition.get("status") == "False" and condition.get("reason") == "Unschedulable"
    return None, False


class PodClaims(NamedTuple):
    refs: tuple[ClaimRef, ...]
    names: tuple[str, ...]  # the ResourceClaims it uses that exist by name, its extended-resource claim last
    extended_claim: str | None  # the scheduler's claim for its extended resources, once made
    extended: tuple[tuple[str, int], ...]  # extended resources asked, sorted by name


class PodFacts(NamedTuple):
    """Immutable, and a tuple: made for every pod event, a tuple costs a fifth of a frozen dataclass."""

    key: Key
    name: str  # namespace/name
    uid: str
    node: str | None  # spec.nodeName: bound
    phase: str
    priority: int
    terminating: bool  # a deletionTimestamp is set
    may_join_gang: bool  # gang labels or a scheduling group (extender.pods.gang)
    needs_planning: bool  # claims or a gang: without either every node passes with a score of 0
    relevant: bool  # the extender keeps it: claims, extended resources (or their claim), or a gang
    may_preempt: bool  # preemptionPolicy is not Never
    has_pod_affinity: bool
    labels: dict[str, str]
    obj: dict[str, Any]  # for the parsers that read further

    @classmethod
    def of(cls, pod: dict[str, Any]) -> PodFacts:
        metadata, spec, status = pod["metadata"], pod.get("spec") or {}, pod.get("status") or {}
        namespace, name = metadata.get("namespace", ""), metadata["name"]
        may_join_gang = may_belong_to_gang(pod)
        needs_planning = bool(spec.get("resourceClaims")) or may_join_gang
        affinity = spec.get("affinity") or {}
        # Positional, in field order: a tuple made from keywords costs twice as much.
        return cls(
            (namespace, name),
            f"{namespace}/{name}",
            metadata.get("uid") or "",
            spec.get("nodeName") or None,
            status.get("phase") or "",
            int(spec.get("priority") or 0),
            bool(metadata.get("deletionTimestamp")),
            may_join_gang,
            needs_planning,
            needs_planning or extended_claim_name(pod) is not None or bool(extended_resources(pod)),
            spec.get("preemptionPolicy") != "Never",
            bool(affinity.get("podAffinity") or affinity.get("podAntiAffinity")),
            metadata.get("labels") or {},
            pod,
        )

    # Read when asked, not as every watch event arrives (kopf's typed body views work alike): each
    # is read where a decision needs it, and most pods' events need none of them.

    def read_claims(self) -> PodClaims:
        """What the pod says of its claims: read where a decision needs them, once per decision."""
        names, special, extended = pod_claims(self.obj)
        refs = tuple(
            ClaimRef(ref["name"], names.get(ref["name"]), ref.get("resourceClaimTemplateName"))
            for ref in self.spec.get("resourceClaims") or ()
        )
        found = tuple(ref.claim for ref in refs if ref.claim)
        return PodClaims(refs, (*found, special) if special else found, special, tuple(sorted(extended.items())))

    @property
    def created(self) -> float:
        """creationTimestamp in unix seconds (now where the object has none)."""
        return timestamp(self.obj["metadata"].get("creationTimestamp"))

    @property
    def started(self) -> float:
        """status.startTime, else created."""
        start = (self.obj.get("status") or {}).get("startTime")
        return timestamp(start) if start else self.created

    @property
    def bound_at(self) -> float | None:
        """When its PodScheduled condition turned True."""
        return _scheduled(self.obj.get("status") or {})[0]

    @property
    def unschedulable(self) -> bool:
        """The scheduler has tried the pod and found no node (its PodScheduled condition says so)."""
        return _scheduled(self.obj.get("status") or {})[1]

    @property
    def managed_by_kueue(self) -> bool:
        return managed_by_kueue(self.obj)

    @property
    def spec(self) -> dict[str, Any]:
        """The spec, for the parsers of node eligibility and requests (extender.pods)."""
        return self.obj.get("spec") or {}

    @property
    def finished(self) -> bool:
        return self.phase in ("Succeeded", "Failed")


def facts_of(pod: PodFacts | dict[str, Any]) -> PodFacts:
    """`pod` as facts: the wire and the watches hand over facts already worked out; tests, benchmarks
    and the map hand over API objects."""
    return pod if isinstance(pod, PodFacts) else PodFacts.of(pod)
