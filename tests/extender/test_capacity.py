"""Consumable capacity as the DRA allocator charges it, and bounded fitting."""

from __future__ import annotations

from decimal import Decimal

from dra_driver.discovery.simulated import load_profile, resolve_profile
from dra_driver.publishing.publish_config import PublishConfig
from dra_driver.publishing.slices import build_slices
from extender.capacity import Matcher, available, members_fit
from extender.cel_eval import Selectors
from extender.demand import Demand, Request
from extender.node_usage import Usage, nodes_from, take
from testkit.builders import DRIVER, FRACTION, SHARE, gpu_nodes

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
