"""What a pod the scheduler asks about needs, worked out in one pass: its gang, its demand of our
devices, and the node its claims already went to."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from extender.pods.demand import Demand, allocated_node, demand_of
from extender.pods.facts import PodFacts, facts_of
from extender.pods.gang import GangRef, JobSetShape, NativeGroup, gang_of
from extender.pods.keys import Key


@dataclass(frozen=True)
class Asked:
    pod: PodFacts
    gang: GangRef | None
    demand: Demand
    placed: str | None  # the node its claims were allocated on for it, before it is bound


@dataclass(frozen=True)
class GangSources:
    """What decides a pod's gang and demand besides the pod and its claims; equal sources give
    equal members, so members are worked out again only when these change by value."""

    classes: dict[str, dict[str, Any]]
    jobsets: dict[Key, JobSetShape]
    pod_group_min: dict[Key, int]
    native_groups: dict[Key, NativeGroup] | None
    driver: str


def ask(
    pod: PodFacts | dict[str, Any],
    claims: Mapping[Key, dict[str, Any]],
    templates: Mapping[Key, dict[str, Any]],
    sources: GangSources,
) -> Asked:
    facts = facts_of(pod)
    read = facts.read_claims()
    return Asked(
        facts,
        gang_of(facts.obj, sources.jobsets, sources.pod_group_min, sources.native_groups),
        demand_of(facts, claims, templates, sources.classes, sources.driver, read=read),
        allocated_node(facts, claims, sources.driver, read),
    )
