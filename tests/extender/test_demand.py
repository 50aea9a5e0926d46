"""Where a pod is placed before it is bound: its claim allocated and reserved for it."""

from __future__ import annotations

from extender.demand import allocated_node
from testkit.builders import DRIVER, allocated_claim, pod


def claims(*items: dict[str, object]) -> dict[tuple[str, str], dict[str, object]]:
    return {("ns", str(c["metadata"]["name"])): c for c in items}  # type: ignore[index]


def test_a_claim_allocated_for_the_pod_places_it_on_that_node() -> None:
    member = pod("t-0", template="four", claim="t-0-gpus")
    reserved = allocated_claim("t-0-gpus", "a-0", ["gpu-0"], reserved_for="t-0")
    assert allocated_node(member, claims(reserved), DRIVER) == "a-0"


def test_a_claim_allocated_for_other_pods_places_nobody_else() -> None:
    member = pod("t-1", template="four", claim="shared")
    shared = allocated_claim("shared", "a-0", ["gpu-0"], reserved_for="t-0")
    assert allocated_node(member, claims(shared), DRIVER) is None
    not_generated_yet = pod("t-2", template="four")
    assert allocated_node(not_generated_yet, claims(shared), DRIVER) is None
