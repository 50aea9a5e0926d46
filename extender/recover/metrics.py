"""Prometheus metrics of gang recovery (`nativedra_extender_*`)."""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import Counter, Gauge, Histogram

from extender.plan.holds import Hold, Kind

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
HELD_DEVICES = Gauge(
    "nativedra_extender_held_devices",
    "Devices kept from others, per namespace: spare (running gangs' spares, lent to lower priority), "
    "return (the nodes of gangs that lost members, until they are whole again) and preemption "
    "(freed by preemption for their preemptor)",
    ["namespace", "hold"],
)


def count_held(holds: Iterable[Hold]) -> None:
    """Set the spare and held gauges from the holds the Leases record (extender.plan.holds);
    namespaces gone are dropped."""
    holds = list(holds)
    SPARE_NODES.set(sum(len(hold.nodes) for hold in holds if hold.kind is Kind.SPARE))
    held: dict[tuple[str, str], int] = {}
    for hold in holds:
        key = (hold.namespace, str(hold.kind))
        held[key] = held.get(key, 0) + sum(len(usage.devices) for usage in hold.nodes.values())
    HELD_DEVICES.clear()
    for (namespace, kind), devices in held.items():
        HELD_DEVICES.labels(namespace, kind).set(devices)
