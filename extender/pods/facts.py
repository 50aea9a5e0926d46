"""A pod as every room of the extender reads it, worked out once where it enters: at the informer
edge as the watches deliver it, and at the wire as the scheduler asks about it. Downstream code reads
these fields; only the parsers of this room (demand, gang, eligibility, admission) open the object.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from extender.pods.gang import may_belong_to_gang
from extender.pods.keys import Key, timestamp
from extender.pods.kueue import managed_by_kueue
from nativedra.base.kube.pods import extended_claim_name, extended_resources, pod_claim_names


@dataclass(frozen=True, slots=True)
class ClaimRef:
    """One entry of the pod's spec.resourceClaims."""

    name: str  # the pod's own name for it
    claim: str | None  # the ResourceClaim: named directly, or generated and listed in the status
    template: str | None  # the ResourceClaimTemplate it is generated from


def _bound_at(status: dict[str, Any]) -> float | None:
    for condition in status.get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "True":
            return timestamp(condition.get("lastTransitionTime"))
    return None


def _unschedulable(status: dict[str, Any]) -> bool:
    """The scheduler has tried the pod and found no node (its PodScheduled condition says so)."""
    return any(
        c.get("type") == "PodScheduled" and c.get("status") == "False" and c.get("reason") == "Unschedulable"
        for c in status.get("conditions") or []
    )


@dataclass(frozen=True, slots=True)
class PodFacts:
    key: Key
    name: str  # namespace/name
    uid: str
    node: str | None  # spec.nodeName: bound
    phase: str
    priority: int
    created: float  # unix seconds
    started: float  # status.startTime, else created
    terminating: bool  # a deletionTimestamp is set
    bound_at: float | None  # when its PodScheduled condition turned True
    claims: tuple[ClaimRef, ...]
    claim_names: tuple[str, ...]  # the ResourceClaims it uses that exist by name, its extended-resource claim last
    extended_claim: str | None  # the scheduler's claim for its extended resources, once made
    extended: tuple[tuple[str, int], ...]  # extended resources asked, sorted by name
    may_join_gang: bool  # gang labels or a scheduling group (extender.pods.gang)
    needs_planning: bool  # claims or a gang: without either every node passes with a score of 0
    may_preempt: bool  # preemptionPolicy is not Never
    unschedulable: bool
    managed_by_kueue: bool
    has_pod_affinity: bool
    labels: dict[str, str] = field(compare=False, repr=False)
    obj: dict[str, Any] = field(compare=False, repr=False)  # for the parsers that read further

    @classmethod
    def of(cls, pod: dict[str, Any]) -> PodFacts:
        metadata, spec, status = pod["metadata"], pod.get("spec") or {}, pod.get("status") or {}
        namespace = metadata.get("namespace", "")
        names, extended_claim, extended = pod_claim_names(pod), extended_claim_name(pod), extended_resources(pod)
        created = timestamp(metadata.get("creationTimestamp"))
        claims = tuple(
            ClaimRef(ref["name"], names.get(ref["name"]), ref.get("resourceClaimTemplateName"))
            for ref in spec.get("resourceClaims") or []
        )
        found = [ref.claim for ref in claims if ref.claim]
        may_join_gang = may_belong_to_gang(pod)
        affinity = spec.get("affinity") or {}
        return cls(
            key=(namespace, metadata["name"]),
            name=f"{namespace}/{metadata['name']}",
            uid=metadata.get("uid") or "",
            node=spec.get("nodeName") or None,
            phase=status.get("phase") or "",
            priority=int(spec.get("priority") or 0),
            created=created,
            started=timestamp(status["startTime"]) if status.get("startTime") else created,
            terminating=bool(metadata.get("deletionTimestamp")),
            bound_at=_bound_at(status),
            claims=claims,
            claim_names=(*found, extended_claim) if extended_claim else tuple(found),
            extended_claim=extended_claim,
            extended=tuple(sorted(extended.items())),
            may_join_gang=may_join_gang,
            needs_planning=bool(claims) or may_join_gang,
            may_preempt=spec.get("preemptionPolicy") != "Never",
            unschedulable=_unschedulable(status),
            managed_by_kueue=managed_by_kueue(pod),
            has_pod_affinity=bool(affinity.get("podAffinity") or affinity.get("podAntiAffinity")),
            labels=metadata.get("labels") or {},
            obj=pod,
        )

    @property
    def spec(self) -> dict[str, Any]:
        """The spec, for the parsers of node eligibility and requests (extender.pods)."""
        return self.obj.get("spec") or {}

    @property
    def finished(self) -> bool:
        return self.phase in ("Succeeded", "Failed")

    @property
    def relevant(self) -> bool:
        """Whether the extender keeps it: with claims (the scheduler's special claim for extended
        resources among them, or extended resources it may make one for), or in a gang."""
        return bool(self.claims) or self.may_join_gang or self.extended_claim is not None or bool(self.extended)


def facts_of(pod: PodFacts | dict[str, Any]) -> PodFacts:
    """`pod` as facts: the scheduler's request and the watches hand over objects, callers inside
    the extender hand over facts already worked out."""
    return pod if isinstance(pod, PodFacts) else PodFacts.of(pod)
