"""Comparing desired and stored slices ignores only what the API server rewrites."""

from __future__ import annotations

from dra_driver.publishing.publisher import same_spec, slice_name
from dra_driver.publishing.slices import UNHEALTHY_TAINT_KEY


def test_quantity_spellings_and_taint_timestamps_are_ignored() -> None:
    desired = {
        "devices": [
            {
                "name": "gpu-0",
                "attributes": {"index": {"int": 0}},
                "capacity": {"memory": {"value": "1000"}},
                "consumesCounters": [{"counterSet": "c", "counters": {"compute": {"value": "1000"}}}],
                "taints": [{"key": UNHEALTHY_TAINT_KEY, "value": "true", "effect": "NoSchedule"}],
            }
        ]
    }
    stored = {
        "devices": [
            {
                "name": "gpu-0",
                "attributes": {"index": {"int": 0}},
                "capacity": {"memory": {"value": "1k"}},
                "consumesCounters": [{"counterSet": "c", "counters": {"compute": {"value": "1k"}}}],
                "taints": [{"key": UNHEALTHY_TAINT_KEY, "value": "true", "effect": "NoSchedule", "timeAdded": "now"}],
            }
        ]
    }
    assert same_spec(desired, stored)


def test_real_differences_are_seen() -> None:
    base = {"capacity": {"memory": {"value": "1Gi"}}, "taints": [{"key": "k", "value": "true"}]}
    assert not same_spec(base, {"capacity": {"memory": {"value": "2Gi"}}, "taints": [{"key": "k", "value": "true"}]})
    assert not same_spec(base, {"capacity": {"memory": {"value": "1Gi"}}, "taints": [{"key": "k", "value": "false"}]})
    assert not same_spec(base, {"capacity": {"memory": {"value": "1Gi"}}})


def test_slice_names_fit_the_api_limit_for_long_node_names() -> None:
    long_node = "n" * 250
    name = slice_name(long_node, 7)
    assert len(name) <= 253 and name.endswith("-gpu-nativedra-dev-007")
    assert slice_name("node-a", 0) == "node-a-gpu-nativedra-dev-000"
