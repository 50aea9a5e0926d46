"""Prioritize's memory between calls: one demand's last answer, and scores shared by nodes that
score alike (same model, same usage object). Pure: `extender.plan.decide` keeps the caches."""

from __future__ import annotations

import itertools
import operator
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from extender.devices.node_usage import Node, Usage
from extender.plan.capacity import Matcher
from extender.plan.config import ScoreWeights
from extender.plan.scoring import score
from extender.pods.demand import Demand


@dataclass(frozen=True)
class Answer:
    """One prioritize answer and what it was worked out from (mappings the state never changes)."""

    names: list[str]
    nodes: Mapping[str, Node]
    usage: Mapping[str, Usage]
    scores: dict[str, int]


class Scorer:
    """One demand's scores on one view's nodes: nodes with equal keys (the shape of what the demand
    matches there, `Matcher.demand_key`) and the same usage object score alike, so each such pair is
    scored once for every call (`shared`, kept per demand by the Decider)."""

    def __init__(
        self,
        nodes: Mapping[str, Node],
        demand: Demand,
        matcher: Matcher,
        weights: ScoreWeights,
        shared: dict[tuple[object, ...], tuple[Usage, int]],
    ) -> None:
        self.nodes, self.demand, self.matcher, self.weights, self.shared = nodes, demand, matcher, weights, shared
        # Nodes of one model match a demand that reads no device identity alike: its key is worked
        # out once per model, so a new pod shape costs a few dictionary reads per node (at 10,000
        # nodes a method call or two more per node was a third of its first prioritize).
        self._by_model: dict[int, object] | None = {} if matcher.alike_by_model(demand) else None

    def fill(self, usage: Mapping[str, Usage], names: list[str], scores: dict[str, int]) -> None:
        for name in names:
            scores[name] = self.value(name, usage[name]) if name in self.nodes else 0

    def value(self, name: str, used: Usage) -> int:
        node = self.nodes[name]
        if self._by_model is None:
            key = self.matcher.demand_key(node, self.demand)
        else:
            key = self._by_model.get(node.model)
            if key is None:
                key = self._by_model[node.model] = self.matcher.demand_key(node, self.demand)
        alike = (key, id(used))
        found = self.shared.get(alike)
        if found is not None and found[0] is used:  # the entry holds `used`: its id is not reused
            return found[1]
        value = score(node, used, self.demand, self.matcher, self.weights)
        self.shared[alike] = (used, value)
        return value


def asks_of(demand: Demand) -> object:
    """All that scoring reads of `demand` besides the devices its selectors match (which
    `Matcher.demand_key` gives per node): each request's count, capacity, matchAttribute, mode and
    partners, and the pod's other-driver partners. Partners' selectors are part of it: scores that
    read other drivers' devices are keyed by node, not by shape."""
    return (
        tuple((r.count, r.capacity, r.match_attribute, r.all_devices, r.partners) for r in demand.requests),
        demand.partners,
    )


def moved(
    names: list[str],
    nodes: Mapping[str, Node],
    nodes_before: Mapping[str, Node],
    usage: Mapping[str, Usage],
    usage_before: Mapping[str, Usage],
) -> list[str]:
    """The names whose node or usage object is not the one it was: compared in C loops (a list
    comprehension over every name the scheduler sends was a tenth of a 1-GPU pod's CPU at 500 nodes)."""

    def differing(now: Mapping[str, object], before: Mapping[str, object]) -> Iterator[str]:
        return itertools.compress(names, map(operator.is_not, map(now.get, names), map(before.get, names)))

    moved = set(differing(usage, usage_before))
    if nodes is not nodes_before:
        moved.update(differing(nodes, nodes_before))
    return list(moved)
