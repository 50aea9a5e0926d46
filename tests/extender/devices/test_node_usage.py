"""A shared device's request policy, charged as the DRA allocator charges it."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from extender.devices.node_usage import NodeDevice


def shared(capacity: dict[str, Any]) -> NodeDevice:
    return NodeDevice("d", {"name": "d", "capacity": capacity}, "driver", (), multi=True, tainted=False)


def test_a_capacity_without_policy_costs_all_of_it_unless_asked() -> None:
    device = shared({"memory": {"value": "8"}})
    assert device.consumption({}) == {"memory": Decimal(8)}
    assert device.consumption({"memory": Decimal(3)}) == {"memory": Decimal(3)}
    assert device.allocations is None, "any amount may be asked: no bound from capacity alone"


def test_valid_values_round_up_to_the_next_one_and_refuse_past_the_last() -> None:
    device = shared({"slots": {"value": "8", "requestPolicy": {"default": "2", "validValues": ["2", "4"]}}})
    assert device.consumption({}) == {"slots": Decimal(2)}
    assert device.consumption({"slots": Decimal(3)}) == {"slots": Decimal(4)}
    assert device.consumption({"slots": Decimal(5)}) is None
    assert device.consumption({"other": Decimal(1)}) is None, "a capacity the device lacks"
    assert device.allocations == 4
