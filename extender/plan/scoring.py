"""Node scores for `/prioritize` (0..10 each, weighted). Pure.

- NUMA fit: all devices of a request on one NUMA node scores highest; when the pod also asks other
  drivers for devices that publish the standard NUMA attribute (a NIC), only where those fit on
  that NUMA node too (cross-driver alignment, e.g. GPUDirect RDMA).
- Packing: the node whose free matching devices best fit the pod (least left over) wins, so
  whole nodes stay free for big jobs.
- Fraction packing: fractions and shares go to GPUs that are already shared.

Each node's free matching devices are listed once per request and every score is read from them.
"""

from __future__ import annotations

from collections import Counter

from extender.devices.node_usage import Node, NodeDevice, Usage
from extender.plan.capacity import Matcher, free_matching, free_partners, place
from extender.plan.config import ScoreWeights
from extender.pods.demand import Demand, Request
from nativedra.base.kube.names import STANDARD_NUMA_ATTRIBUTE

MAX = 10


def numa_score(free: list[NodeDevice], request: Request, partners: list[tuple[list[NodeDevice], int]]) -> int:
    """`partners`: for each of the pod's partner requests, its free devices here and its count."""
    per_numa = Counter(d.attribute("numaNode") for d in free)
    fitting = [numa for numa, count in per_numa.items() if count >= request.count]
    if not fitting:
        return MAX // 3
    for numa in fitting:
        if all(
            sum(1 for d in devices if d.attribute(STANDARD_NUMA_ATTRIBUTE) == numa) >= count
            for devices, count in partners
        ):
            return MAX
    return MAX // 2  # ours on one NUMA node, another driver's devices only on others


def packing_score(free: list[NodeDevice], matching: int, request: Request) -> int:
    return round(MAX * (1 - (len(free) - request.count) / matching)) if matching else 0


def fraction_packing_score(free: list[NodeDevice], usage: Usage) -> int:
    """10 when a requested part fits on a GPU that already serves someone."""
    parts = [device for device in free if device.part]
    if not parts:
        return 0
    shared_sets = {name for name, used in usage.counters.items() if any(v > 0 for v in used.values())}
    shared_devices = {name for name, used in usage.shared.items() if any(v > 0 for v in used.values())}
    for device in parts:
        if device.name in shared_devices or any(counter_set in shared_sets for counter_set, _ in device.consumes):
            return MAX
    return 0


def score(node: Node, usage: Usage, demand: Demand, matcher: Matcher, weights: ScoreWeights) -> int:
    free_lists = [free_matching(node, usage, request, matcher) for request in demand.requests]
    if any(len(free) < request.count for free, request in zip(free_lists, demand.requests, strict=True)):
        return 0
    exact_check_needed = len(demand.requests) > 1 or any(r.match_attribute or r.capacity for r in demand.requests)
    if exact_check_needed and place(node, usage, demand, matcher) is None:
        return 0
    # A partner none of whose devices here has a NUMA node (or none at all) cannot be aligned on any node.
    partners = [
        (free_partners(node, usage, p, matcher), p.count)
        for p in demand.partners
        if matcher.partners_matching(node, p.selectors)
    ]
    numa = min(numa_score(free, r, partners) for free, r in zip(free_lists, demand.requests, strict=True))
    packing = min(
        packing_score(free, len(matcher.matching(node, r.selection)), r)
        for free, r in zip(free_lists, demand.requests, strict=True)
    )
    fractions = max(fraction_packing_score(free, usage) for free in free_lists)
    parts = [(weights.numa, numa), (weights.packing, packing), (weights.fraction_packing, fractions)]
    total = sum(weight for weight, _ in parts)
    return round(sum(weight * value for weight, value in parts) / total) if total else 0
