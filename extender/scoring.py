"""Node scores for `/prioritize` (0..10 each, weighted). Pure.

- NUMA fit: all devices of a request on one NUMA node scores highest.
- Packing: the node whose free matching devices best fit the pod (least left over) wins, so
  whole nodes stay free for big jobs.
- Fraction packing: fractions and shares go to GPUs that are already shared.
"""

from __future__ import annotations

from collections import Counter

from extender.capacity import Matcher, free_matching, place
from extender.config import ScoreWeights
from extender.demand import Demand
from extender.model import Node, Usage

MAX = 10


def numa_score(node: Node, usage: Usage, demand: Demand, matcher: Matcher) -> int:
    scores = []
    for request in demand.requests:
        free = free_matching(node, usage, request, matcher)
        if len(free) < request.count:
            return 0
        per_numa = Counter(d.attribute("numaNode") for d in free)
        scores.append(MAX if max(per_numa.values()) >= request.count else MAX // 3)
    return min(scores) if scores else 0


def packing_score(node: Node, usage: Usage, demand: Demand, matcher: Matcher) -> int:
    scores = []
    for request in demand.requests:
        matching = matcher.matching(node, request.selectors)
        free = free_matching(node, usage, request, matcher)
        if not matching or len(free) < request.count:
            return 0
        left = len(free) - request.count
        scores.append(round(MAX * (1 - left / len(matching))))
    return min(scores) if scores else 0


def fraction_packing_score(node: Node, usage: Usage, demand: Demand, matcher: Matcher) -> int:
    """10 when a requested part fits on a GPU that already serves someone."""
    shared_sets = {name for name, used in usage.counters.items() if any(v > 0 for v in used.values())}
    shared_devices = {name for name, used in usage.shared.items() if any(v > 0 for v in used.values())}
    for request in demand.requests:
        for device in free_matching(node, usage, request, matcher):
            if device.attribute("type") not in ("fraction", "share"):
                continue
            if device.name in shared_devices or any(counter_set in shared_sets for counter_set, _ in device.consumes):
                return MAX
    return 0


def score(node: Node, usage: Usage, demand: Demand, matcher: Matcher, weights: ScoreWeights) -> int:
    if place(node, usage, demand, matcher) is None:
        return 0
    parts = [
        (weights.numa, numa_score(node, usage, demand, matcher)),
        (weights.packing, packing_score(node, usage, demand, matcher)),
        (weights.fraction_packing, fraction_packing_score(node, usage, demand, matcher)),
    ]
    total = sum(weight for weight, _ in parts)
    return round(sum(weight * value for weight, value in parts) / total) if total else 0
