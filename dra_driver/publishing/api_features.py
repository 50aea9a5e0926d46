"""What to publish when the API server silently drops fields it does not serve.

A server with partitionable devices off (1.34/1.35 defaults, or a gate turned off) stores a
ResourceSlice without `sharedCounters` / `consumesCounters`; one with consumable capacity off drops
`allowMultipleAllocations`. Published anyway, fractions and MIG placements would lose the counters
that keep them apart from their whole GPU, and the scheduler could hand out a GPU and a part of it
at once. So the publisher compares what it wrote with what was stored, stops at the first slice
that lost a field, and the plugin publishes only what stays safe: whole GPUs. Pure.
"""

from __future__ import annotations

from typing import Any

from dra_driver.publishing.publish_config import PublishConfig

GATE_OF_FIELD = {
    "sharedCounters": "DRAPartitionableDevices",
    "consumesCounters": "DRAPartitionableDevices",
    "allowMultipleAllocations": "DRAConsumableCapacity",
    "compatibilityGroups": "DRADeviceCompatibilityGroups",
    "taints": "DRADeviceTaints",
}


def feature_fields(spec: dict[str, Any]) -> frozenset[str]:
    """The fields of GATE_OF_FIELD that a slice spec uses."""
    used = {"sharedCounters"} if spec.get("sharedCounters") else set()
    for device in spec.get("devices") or []:
        used.update(field for field in ("consumesCounters", "allowMultipleAllocations", "taints") if device.get(field))
        if any(c.get("compatibilityGroups") for c in device.get("consumesCounters") or []):
            used.add("compatibilityGroups")
    return frozenset(used)


class FieldsDroppedError(RuntimeError):
    """The API server stored a slice without fields the plugin relies on."""

    def __init__(self, dropped: frozenset[str]) -> None:
        super().__init__(describe(dropped))
        self.dropped = dropped


def dropped_fields(desired: dict[str, Any], stored: dict[str, Any]) -> frozenset[str]:
    """Feature fields present in the slice spec we wrote but missing from the one stored."""
    dropped = set()
    if desired.get("sharedCounters") and not stored.get("sharedCounters"):
        dropped.add("sharedCounters")
    stored_devices = {device.get("name"): device for device in stored.get("devices") or []}
    for device in desired.get("devices") or []:
        kept = stored_devices.get(device["name"], {})
        dropped.update(
            field
            for field in ("consumesCounters", "allowMultipleAllocations", "taints")
            if device.get(field) and not kept.get(field)
        )
        grouped = any(c.get("compatibilityGroups") for c in device.get("consumesCounters") or [])
        if grouped and not any(c.get("compatibilityGroups") for c in kept.get("consumesCounters") or []):
            dropped.add("compatibilityGroups")
    return frozenset(dropped)


def safe_config(config: PublishConfig, dropped: frozenset[str]) -> PublishConfig:
    """What can still be published without double booking once `dropped` fields are not served."""
    changes: dict[str, Any] = {}
    if dropped & {"sharedCounters", "consumesCounters"}:
        changes.update(fractions=(), mig=False)
    if "allowMultipleAllocations" in dropped:
        changes["share_gpus"] = ()
    if "compatibilityGroups" in dropped:
        changes["mig_or_fractions"] = False
    if "taints" in dropped:
        changes["omit_unhealthy"] = True
    return config.model_copy(update=changes)


def describe(dropped: frozenset[str]) -> str:
    """For the log and the Node event: what is left out and which gate would bring it back."""
    gates = sorted({GATE_OF_FIELD[field] for field in dropped})
    left_out = []
    if dropped & {"sharedCounters", "consumesCounters"}:
        left_out.append("fractions and MIG placements")
    if "allowMultipleAllocations" in dropped:
        left_out.append("consumable shares")
    if "compatibilityGroups" in dropped:
        left_out.append("a choice of MIG placements or fractions per GPU (each keeps the fixed split)")
    if "taints" in dropped:
        left_out.append("taints on faulty GPUs (a faulty GPU is left out of the slices instead)")
    whole_only = bool(dropped - {"compatibilityGroups", "taints"})
    return (
        f"the API server does not store {', '.join(sorted(dropped))}: publishing "
        f"{'whole GPUs ' if whole_only else ''}without {' or '.join(left_out)}; enable the feature gate(s) "
        f"{', '.join(gates)} on the API server and scheduler to publish them"
    )
