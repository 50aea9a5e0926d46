"""Prometheus metrics of gang recovery (`nativedra_extender_*`)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

GANGS_VACATED = Counter(
    "nativedra_extender_gangs_vacated_total",
    "Gangs that lost members while running whole; their healthy nodes are kept for their return",
)
GANG_RETURNS = Counter(
    "nativedra_extender_gang_returns_total",
    "Gangs whole again after losing members, by where: same_nodes (every kept node taken again), "
    "same_domain, elsewhere; expired: not back within the hold",
    ["outcome"],
)
GANG_RECOVERY_SECONDS = Histogram(
    "nativedra_extender_gang_recovery_seconds",
    "From a gang losing members to all its members placed again",
    buckets=(1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600),
)
SPARE_NODES = Gauge(
    "nativedra_extender_gang_spare_nodes",
    "Spare nodes kept for running gangs (nativedra.dev/spares), lent to lower priority meanwhile",
)
