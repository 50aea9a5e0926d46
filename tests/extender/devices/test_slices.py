"""Slices read from their JSON bytes into shared tables: twins share, identities stay their own, and
a slice the cut cannot read is kept whole or refused by name."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import orjson
import pytest

from extender.devices.slices import SliceError, nodes_from, published_slice
from testkit.builders import DRIVER, node_objects


def _twins(**attributes: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Nodes a and b of A100s with 1/2 fractions: every GPU (and its fractions, by parentUUID) with
    a UUID and PCI address of its node's own; `attributes` set on b's gpu-0."""
    nodes, slices = node_objects({"a": {}, "b": {}}, fractions=(2,))
    for resource_slice in slices:
        node = resource_slice["spec"]["nodeName"]
        for device in resource_slice["spec"].get("devices") or []:
            found = device["attributes"]
            for name in ("uuid", "parentUUID"):
                if name in found:
                    found[name] = {"string": f"GPU-{node}-{found['index']['int']}"}
            found["resource.kubernetes.io/pciBusID"] = {"string": f"{node}:{found['index']['int']}"}
            if node == "b" and device["name"] == "gpu-0":
                found.update(attributes)
    return nodes, slices


def _normal(resource_slice: dict[str, Any]) -> dict[str, Any]:
    """What a slice publishes, as `as_api` gives it back (no sizes or extra metadata)."""
    spec = resource_slice["spec"]
    return {
        "metadata": {"name": resource_slice["metadata"]["name"]},
        "spec": {
            "driver": spec["driver"],
            "nodeName": spec["nodeName"],
            "pool": {"name": spec["pool"]["name"], "generation": spec["pool"]["generation"]},
            "sharedCounters": spec.get("sharedCounters") or [],
            "devices": spec.get("devices") or [],
        },
    }


def test_twins_share_one_table_and_one_device_set_and_keep_their_identities() -> None:
    node_list, slices = _twins()
    published = [published_slice(orjson.dumps(s)) for s in slices]
    by_node = {node: [p for p in published if p.node == node] for node in ("a", "b")}
    assert all(p.table is q.table for p, q in zip(by_node["a"], by_node["b"], strict=True)), "one table per content"
    assert all(p.identity for p in published if p.table.devices), "identities cut out of every device slice"
    nodes = nodes_from(node_list, published, DRIVER)
    assert nodes["a"].devices is nodes["b"].devices and nodes["a"].model == nodes["b"].model
    half = nodes["b"].devices["gpu-1-1of2-0"]
    assert nodes["a"].identity_of(half.name)["parentUUID"] == {"string": "GPU-a-1"}
    assert nodes["b"].attribute_of(half, "parentUUID") == "GPU-b-1"
    assert nodes["b"].view_of(half)["attributes"]["resource.kubernetes.io"]["pciBusID"] == "b:1"
    assert "uuid" not in half.raw["attributes"] and "parentUUID" not in half.raw["attributes"], "no identity shared"
    assert [p.as_api() for p in published] == [_normal(s) for s in slices], "the slices as published"


def test_another_attribute_value_makes_another_model() -> None:
    node_list, slices = _twins(productName={"string": "NVIDIA H100 80GB HBM3"})
    nodes = nodes_from(node_list, slices, DRIVER)
    assert nodes["a"].model != nodes["b"].model
    assert nodes["b"].devices["gpu-0"].attribute("productName") == "NVIDIA H100 80GB HBM3"
    assert nodes["a"].devices["gpu-0"].attribute("productName") != "NVIDIA H100 80GB HBM3"


@pytest.mark.parametrize(
    "uuid",
    [{"string": 'GPU-"quoted"'}, {"string": "GPU-\\back"}, {"int": 7}],
    ids=["escaped-quote", "backslash", "not-a-string"],
)
def test_an_identity_the_cut_cannot_read_keeps_its_slice_whole(uuid: dict[str, Any]) -> None:
    node_list, slices = _twins(uuid=uuid)
    encoders: list[Callable[[Any], bytes]] = [orjson.dumps, lambda obj: json.dumps(obj).encode()]
    for encode in encoders:  # the API's compact form, and spaced (every slice kept whole)
        published = [published_slice(encode(s)) for s in slices]
        odd = next(p for p in published if p.node == "b" and any(d.name == "gpu-0" for d in p.table.devices))
        assert odd.identity == () and odd.table.devices[0].raw["attributes"]["uuid"] == uuid, "kept whole"
        assert [p.as_api() for p in published] == [_normal(s) for s in slices]
        nodes = nodes_from(node_list, published, DRIVER)
        assert nodes["b"].devices["gpu-1"].attribute("uuid") == "GPU-b-1"
        assert nodes["a"].attribute_of(nodes["a"].devices["gpu-0"], "uuid") == "GPU-a-0"


def test_a_slice_that_cannot_be_read_is_refused_by_name_and_field() -> None:
    _, slices = _twins()
    broken = copy.deepcopy(slices[1])
    del broken["spec"]["devices"][0]["name"]
    with pytest.raises(SliceError, match=r"ResourceSlice a-slice-1: spec.devices"):
        published_slice(orjson.dumps(broken))
    broken["spec"]["pool"] = "not an object"
    with pytest.raises(SliceError, match=r"ResourceSlice a-slice-1: .*spec.pool"):
        published_slice(broken)
