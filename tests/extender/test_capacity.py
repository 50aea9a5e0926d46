"""Consumable capacity as the DRA allocator charges it, and bounded fitting."""

from __future__ import annotations

from decimal import Decimal

from extender.capacity import Matcher, members_fit
from extender.cel_eval import Selectors
from extender.demand import Demand, Request
from extender.model import Usage
from tests.builders import DRIVER, SHARE, gpu_nodes

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
