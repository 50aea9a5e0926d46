"""Prometheus metrics of preemption (`nativedra_extender_*`)."""

from __future__ import annotations

from prometheus_client import Counter, Histogram

PREEMPTION_DECISIONS = Counter(
    "nativedra_extender_preemption_decisions_total",
    "Preemption decisions: victims chosen and evicted (evicting), none would help (not_helpful), "
    "or one too large to record (too_large)",
    ["outcome"],
)
EVICTIONS = Counter(
    "nativedra_extender_evictions_total",
    "Evictions asked for preemptors, by answer: evicted, blocked (a PodDisruptionBudget refused), gone",
    ["result"],
)
PREEMPTION_SECONDS = Histogram(
    "nativedra_extender_preemption_seconds",
    "From a preemption decision to its preemptor placed",
    buckets=(1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600),
)
