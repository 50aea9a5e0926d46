"""Consumable capacity as the DRA allocator charges it, and bounded fitting."""

from __future__ import annotations

import random
from decimal import Decimal

import pytest

from dra_driver.discovery.simulated import load_profile, resolve_profile
from dra_driver.publishing.publish_config import PublishConfig
from dra_driver.publishing.slices import build_slices
from extender.devices.cel_eval import Selectors
from extender.devices.node_usage import Node, Usage, take
from extender.devices.slices import nodes_from
from extender.plan.capacity import Matcher, available, consumed, free_matching, members_fit
from extender.pods.demand import Demand, Request
from testkit.builders import DRIVER, FRACTION, GPU, SHARE, gpu_nodes, node_objects

SHARE_NODE = gpu_nodes({"n": {}}, shares=True)["n"]


def fit(request: Request, limit: int = 1000) -> int:
    return members_fit(SHARE_NODE, Usage(), Demand((request,)), limit, Matcher(Selectors(), DRIVER))[0]


def test_a_share_without_a_capacity_request_costs_the_policy_default() -> None:
    """compute: default 10 of 100, so 10 members of 8 shares fit on 8 shared GPUs, not any number."""
    assert fit(Request((SHARE,), 8), limit=16) == 10


def test_a_capacity_request_is_rounded_up_to_the_valid_range() -> None:
    assert fit(Request((SHARE,), 1, (("compute", Decimal(25)),))) == 8 * 4
    assert fit(Request((SHARE,), 1, (("compute", Decimal("33.2")),))) == 8 * 2, "step 1: 33.2 costs 34"
    assert fit(Request((SHARE,), 1, (("compute", Decimal(101)),))) == 0, "above the range's max: never fits"


def test_a_gpu_whose_mig_placement_is_in_use_offers_no_fraction() -> None:
    """Compatibility groups (`--mig-or-fractions`): a MIG placement in use puts its GPU in the `mig`
    group, so a fraction (group `fractions`) of that GPU cannot be given beside it, while another
    placement of it and a fraction of another GPU can, as the scheduler's allocator decides."""
    inventory = load_profile(resolve_profile("h100-8x"))
    specs = build_slices(inventory, PublishConfig(mig_or_fractions=True), "n")
    node = nodes_from([{"metadata": {"name": "n"}}], [{"spec": spec} for spec in specs], DRIVER)["n"]
    usage = Usage()
    take(usage, node.devices["gpu-0-1g-10gb-0"])
    half = Request((FRACTION,), 1)
    assert not available(node, usage, node.devices["gpu-0-1of2-0"], half)
    assert available(node, usage, node.devices["gpu-1-1of2-0"], half)
    assert available(node, usage, node.devices["gpu-0-1g-10gb-1"], Request(("true",), 1))
    assert available(node, Usage(), node.devices["gpu-0-1of2-0"], half), "a free GPU takes either mode"


def _twins(product_of_b: str | None = None) -> dict[str, Node]:
    """Nodes a and b of one model, every GPU with a uuid and PCI address of its own; b's product
    name changed when asked (another model)."""
    node_list, slices = node_objects({"a": {}, "b": {}})
    for resource_slice in slices:
        node = resource_slice["spec"]["nodeName"]
        for device in resource_slice["spec"].get("devices") or []:
            attributes = device.get("attributes") or {}
            if "uuid" in attributes:
                attributes["uuid"] = {"string": f"GPU-{node}-{device['name']}"}
                attributes["resource.kubernetes.io/pciBusID"] = {"string": f"{node}:{device['name']}"}
                if node == "b" and product_of_b:
                    attributes["productName"] = {"string": product_of_b}
    return nodes_from(node_list, slices, DRIVER)


def _matched(nodes: dict[str, Node], selector: str) -> dict[str, list[str]]:
    matcher = Matcher(Selectors(), DRIVER)
    found = {name: matcher.matching(node, ((GPU, selector), ())) for name, node in nodes.items()}
    assert all(d is nodes[name].devices[d.name] for name, devices in found.items() for d in devices), "its own"
    return {name: [d.name for d in devices] for name, devices in found.items()}


def test_nodes_that_differ_only_in_device_identity_are_one_model() -> None:
    assert _twins()["a"].model == _twins()["b"].model
    other = _twins(product_of_b="NVIDIA H100 80GB HBM3")
    assert other["a"].model != other["b"].model


def test_a_selector_on_a_non_identity_attribute_matches_each_model_apart() -> None:
    nodes = _twins(product_of_b="NVIDIA H100 80GB HBM3")
    found = _matched(nodes, f"device.attributes['{DRIVER}'].productName == 'NVIDIA H100 80GB HBM3'")
    assert found == {"a": [], "b": [f"gpu-{i}" for i in range(8)]}


def test_a_selector_on_a_devices_identity_is_matched_device_by_device() -> None:
    nodes = _twins()
    assert _matched(nodes, f"device.attributes['{DRIVER}'].uuid != 'GPU-a-gpu-3'")["a"] == [
        f"gpu-{i}" for i in range(8) if i != 3
    ]
    assert len(_matched(nodes, f"device.attributes['{DRIVER}'].uuid != 'GPU-a-gpu-3'")["b"]) == 8
    pci = "device.attributes['resource.kubernetes.io'].pciBusID == 'b:gpu-5'"
    assert _matched(nodes, pci) == {"a": [], "b": ["gpu-5"]}


def _random_usage(node: Node, rng: random.Random, matcher: Matcher) -> Usage:
    """Random devices of every kind taken one after the other, each only while it is available."""
    usage = Usage()
    anything = Request((), 1)
    devices = list(node.devices.values())
    for device in rng.sample(devices, rng.randint(0, min(12, len(devices)))):
        taken = consumed(node, usage, device, anything)
        if taken is not None:
            take(usage, device, taken)
    return usage


@pytest.mark.parametrize(
    ("profile", "publish"),
    [
        ("h100-8x", PublishConfig()),
        ("h100-8x", PublishConfig(mig_or_fractions=True)),
        ("a100-8x", PublishConfig(share_gpus="all")),
    ],
    ids=["shipped", "mig-or-fractions", "shares"],
)
def test_free_matching_finds_what_available_finds(profile: str, publish: PublishConfig) -> None:
    """`free_matching` skips counting for untouched counter sets; device by device `available`
    decides the same on random usages, for whole GPUs, fractions, MIG placements and shares."""
    inventory = load_profile(resolve_profile(profile))
    slices = [{"metadata": {"name": f"n-{i}"}, "spec": s} for i, s in enumerate(build_slices(inventory, publish, "n"))]
    node = nodes_from([{"metadata": {"name": "n"}}], slices, DRIVER)["n"]
    matcher = Matcher(Selectors(), DRIVER)
    requests = [Request((GPU,), 1), Request((FRACTION,), 1), Request((SHARE,), 1, (("compute", Decimal(25)),))]
    rng = random.Random(7)  # noqa: S311 - reproducible usages, not secrets
    checked = 0
    for _ in range(200):
        usage = _random_usage(node, rng, matcher)
        for request in requests:
            expected = [d for d in matcher.matching(node, request.selection) if available(node, usage, d, request)]
            assert free_matching(node, usage, request, matcher) == expected
            checked += len(expected)
    assert checked > 0
