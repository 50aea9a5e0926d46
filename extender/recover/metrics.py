"""Prometheus metrics of gang recovery (`nativedra_extender_*`)."""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import Counter, Gauge, Histogram

from extender.cluster.reservation import Reservation

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
    "Devices kept from others for gangs, per namespace: spare (running gangs' spares, lent to lower "
    "priority) and return (the nodes of gangs that lost members, until they are whole again)",
    ["namespace", "hold"],
)


def count_held(records: Iterable[Reservation]) -> None:
    """Set the spare and held gauges from the return records (namespaces gone are dropped)."""
    records = [kept for kept in records if kept.returning]
    SPARE_NODES.set(sum(len(kept.spares) for kept in records if kept.running))
    held: dict[tuple[str, str], int] = {}
    for kept in records:
        if not kept.holds and not kept.running:
            continue  # lapsed: kept from no one
        hold = "return" if kept.holds else "spare"
        nodes = kept.nodes.values() if kept.holds else kept.spares.values()
        key = (kept.preemptor.partition("/")[0], hold)
        held[key] = held.get(key, 0) + sum(len(reserved.usage.devices) for reserved in nodes)
    HELD_DEVICES.clear()
    for (namespace, hold), devices in held.items():
        HELD_DEVICES.labels(namespace, hold).set(devices)
