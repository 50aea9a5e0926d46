"""Which fields the API server dropped, and what stays safe to publish without them."""

from __future__ import annotations

from dra_driver.publishing.api_features import FieldsDroppedError, describe, dropped_fields, feature_fields, safe_config
from dra_driver.publishing.publish_config import PublishConfig
from dra_driver.publishing.slices import UNHEALTHY_TAINT_KEY

COUNTERS = {"sharedCounters": [{"name": "gpu-0-counters", "counters": {"memory": {"value": "1"}}}]}
PARTITION = {"name": "gpu-0-1of2-0", "consumesCounters": [{"counterSet": "gpu-0-counters", "counters": {}}]}
SHARE = {"name": "gpu-1-share", "allowMultipleAllocations": True}


def test_nothing_is_dropped_when_the_server_keeps_every_field() -> None:
    assert dropped_fields(COUNTERS, COUNTERS) == frozenset()
    assert dropped_fields({"devices": [PARTITION, SHARE]}, {"devices": [PARTITION, SHARE]}) == frozenset()


def test_counters_and_multiple_allocations_dropped_are_named() -> None:
    assert dropped_fields(COUNTERS, {}) == {"sharedCounters"}
    stored = {"devices": [{"name": "gpu-0-1of2-0"}, {"name": "gpu-1-share"}]}
    assert dropped_fields({"devices": [PARTITION, SHARE]}, stored) == {"consumesCounters", "allowMultipleAllocations"}


def test_without_counters_only_whole_gpus_are_published_and_the_gate_is_named() -> None:
    config = PublishConfig(fractions=(2, 4), mig=True, share_gpus="all")
    partitions = frozenset({"sharedCounters", "consumesCounters"})
    assert safe_config(config, partitions) == PublishConfig(fractions=(), mig=False, share_gpus="all")
    assert safe_config(config, frozenset({"allowMultipleAllocations"})).share_gpus == ()
    message = str(FieldsDroppedError(partitions))
    assert message == describe(partitions)
    assert "fractions and MIG placements" in message and "DRAPartitionableDevices" in message
    assert "DRAConsumableCapacity" in describe(frozenset({"allowMultipleAllocations"}))


def test_without_compatibility_groups_each_gpu_keeps_the_fixed_split() -> None:
    grouped = {
        "name": "gpu-0-1of2-0",
        "consumesCounters": [{"counterSet": "c", "counters": {}, "compatibilityGroups": ["x"]}],
    }
    stripped = {"name": "gpu-0-1of2-0", "consumesCounters": [{"counterSet": "c", "counters": {}}]}
    dropped = dropped_fields({"devices": [grouped]}, {"devices": [stripped]})
    assert dropped == {"compatibilityGroups"}
    config = safe_config(PublishConfig(mig_or_fractions=True), dropped)
    assert config == PublishConfig(), "fractions and MIG placements as before, no choice per GPU"
    message = describe(dropped)
    assert "DRADeviceCompatibilityGroups" in message and "whole GPUs" not in message


def test_without_taints_a_faulty_gpu_is_left_out_rather_than_published_allocatable() -> None:
    tainted = {"name": "gpu-3", "taints": [{"key": UNHEALTHY_TAINT_KEY, "effect": "NoSchedule"}]}
    dropped = dropped_fields({"devices": [tainted]}, {"devices": [{"name": "gpu-3"}]})
    assert dropped == {"taints"}
    assert safe_config(PublishConfig(), dropped) == PublishConfig(omit_unhealthy=True)
    assert "DRADeviceTaints" in describe(dropped) and "whole GPUs" not in describe(dropped)


def test_the_fields_a_slice_uses_are_what_a_dry_run_must_show_kept() -> None:
    consumption = {"counterSet": "c", "counters": {}, "compatibilityGroups": ["mig"]}
    spec = {"devices": [{"name": "a", "consumesCounters": [consumption], "taints": [{"key": "k"}]}, SHARE]}
    assert feature_fields(spec) == {"consumesCounters", "compatibilityGroups", "taints", "allowMultipleAllocations"}
    assert feature_fields(COUNTERS) == {"sharedCounters"}
    assert feature_fields({"devices": [{"name": "gpu-0"}]}) == frozenset()
