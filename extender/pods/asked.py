"""What a pod the scheduler asks about needs, worked out in one pass: its gang, its demand of our
devices, and the node its claims already went to."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from extender.pods.demand import Demand, allocated_node, demand_of
from extender.pods.facts import PodFacts
from extender.pods.gang import GangRef, JobSetShape, NativeGroup, gang_of
from extender.pods.keys import Key


@dataclass(frozen=True)
class Asked:
    pod: PodFacts
    gang: GangRef | None
    demand: Demand
    placed: str | None  # the node its claims were allocated on for it, before it is bound


@dataclass(frozen=True)
class Sources:
    """What decides an asked pod's gang and demand besides the pod (a view's mappings)."""

    claims: Mapping[Key, dict[str, Any]]
    templates: Mapping[Key, dict[str, Any]]
    classes: Mapping[str, dict[str, Any]]
    jobsets: Mapping[Key, JobSetShape]
    pod_group_min: Mapping[Key, int]
    native_groups: Mapping[Key, NativeGroup] | None
    driver: str


def ask(pod: PodFacts, sources: Sources) -> Asked:
    read = pod.read_claims()
    return Asked(
        pod,
        gang_of(pod.obj, sources.jobsets, sources.pod_group_min, sources.native_groups),
        demand_of(pod, sources.claims, sources.templates, sources.classes, sources.driver, read=read),
        allocated_node(pod, sources.claims, sources.driver, read),
    )
