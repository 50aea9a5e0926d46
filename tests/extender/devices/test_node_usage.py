"""A shared device's request policy, charged as the DRA allocator charges it."""

from __future__ import annotations

import copy
from decimal import Decimal
from typing import Any

from extender.devices.node_usage import NodeDevice, share_values
from testkit.builders import node_objects


def shared(capacity: dict[str, Any]) -> NodeDevice:
    return NodeDevice("n", "d", {"name": "d", "capacity": capacity}, "driver", (), multi=True, tainted=False)


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


def test_equal_attribute_values_of_listed_slices_are_one_object_and_identities_stay_their_own() -> None:
    _, slices = node_objects({"a": {}, "b": {}})
    before = copy.deepcopy(slices)
    for resource_slice in slices:
        resource_slice["spec"]["devices"][0]["attributes"]["uuid"] = {"string": resource_slice["spec"]["nodeName"]}
        before_uuid = resource_slice["spec"]["devices"][0]["attributes"]["uuid"]
        share_values(resource_slice)
        assert resource_slice["spec"]["devices"][0]["attributes"]["uuid"] is before_uuid
    for resource_slice, original in zip(slices, before, strict=True):
        original["spec"]["devices"][0]["attributes"]["uuid"] = {"string": original["spec"]["nodeName"]}
        assert resource_slice == original, "values are shared, never changed"
    a, b = (s["spec"]["devices"][0] for s in slices)
    assert a["attributes"]["productName"] is b["attributes"]["productName"]
    assert a["capacity"]["memory"] is b["capacity"]["memory"]
    assert a["attributes"]["uuid"] is not b["attributes"]["uuid"]
    assert a["attributes"]["index"] is not slices[0]["spec"]["devices"][1]["attributes"]["index"], "0 and 1 differ"
