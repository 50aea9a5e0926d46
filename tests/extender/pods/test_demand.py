"""A pod's demand for our devices (its claims, and the extended resources our DeviceClasses name),
and where it is placed before it is bound: its claim allocated and reserved for it."""

from __future__ import annotations

from typing import Any

from extender.pods.demand import allocated_node, demand_of
from extender.pods.facts import PodFacts
from testkit import builders
from testkit.builders import DRIVER, allocated_claim, pod


def claims(*items: dict[str, object]) -> dict[tuple[str, str], dict[str, object]]:
    return {("ns", str(c["metadata"]["name"])): c for c in items}  # type: ignore[index]


def test_a_claim_allocated_for_the_pod_places_it_on_that_node() -> None:
    member = pod("t-0", template="four", claim="t-0-gpus")
    reserved = allocated_claim("t-0-gpus", "a-0", ["gpu-0"], reserved_for="t-0")
    assert allocated_node(PodFacts.of(member), claims(reserved), DRIVER) == "a-0"


def test_a_claim_allocated_for_other_pods_places_nobody_else() -> None:
    member = pod("t-1", template="four", claim="shared")
    shared = allocated_claim("shared", "a-0", ["gpu-0"], reserved_for="t-0")
    assert allocated_node(PodFacts.of(member), claims(shared), DRIVER) is None
    not_generated_yet = pod("t-2", template="four")
    assert allocated_node(PodFacts.of(not_generated_yet), claims(shared), DRIVER) is None


def _extended_pod(limits: dict[str, str], init: dict[str, str] | None = None) -> dict[str, Any]:
    pod = builders.pod("legacy")
    pod["spec"]["containers"] = [{"name": "main", "resources": {"limits": limits}}]
    if init:
        pod["spec"]["initContainers"] = [{"name": "setup", "resources": {"requests": init}}]
    return pod


GPU_CLASS_WITH_NAME = {
    **builders.GPU_CLASS,
    "spec": {**builders.GPU_CLASS["spec"], "extendedResourceName": "nativedra.dev/gpu"},
}


def test_an_extended_resource_named_by_our_class_is_a_request_of_that_class() -> None:
    classes = {builders.DRIVER: GPU_CLASS_WITH_NAME}
    demand = demand_of(
        PodFacts.of(_extended_pod({"nativedra.dev/gpu": "2", "cpu": "1"})), {}, {}, classes, builders.DRIVER
    )
    assert [(r.selectors, r.count) for r in demand.requests] == [((builders.GPU,), 2)]


def test_the_implicit_class_resource_and_init_containers_count_as_the_scheduler_counts_them() -> None:
    classes = {builders.DRIVER: builders.GPU_CLASS}
    implicit = f"deviceclass.resource.kubernetes.io/{builders.DRIVER}"
    pod = _extended_pod({implicit: "1"}, init={implicit: "3"})  # init 3 > containers' 1
    assert [r.count for r in demand_of(PodFacts.of(pod), {}, {}, classes, builders.DRIVER).requests] == [3]


def test_a_device_plugins_resource_is_not_ours_and_an_allocated_special_claim_needs_nothing() -> None:
    classes = {builders.DRIVER: GPU_CLASS_WITH_NAME}
    assert not demand_of(
        PodFacts.of(_extended_pod({"nvidia.com/gpu": "1"})), {}, {}, classes, builders.DRIVER
    ).needs_devices
    pod = _extended_pod({"nativedra.dev/gpu": "2"})
    pod["status"]["extendedResourceClaimStatus"] = {"resourceClaimName": "legacy-extended-resources-x"}
    claim = builders.allocated_claim("legacy-extended-resources-x", "n1", ["gpu-0", "gpu-1"], reserved_for="legacy")
    claims = {("ns", "legacy-extended-resources-x"): claim}
    assert not demand_of(PodFacts.of(pod), claims, {}, classes, builders.DRIVER).needs_devices
    assert allocated_node(PodFacts.of(pod), claims, builders.DRIVER) == "n1"
    assert demand_of(PodFacts.of(pod), claims, {}, classes, builders.DRIVER, include_allocated=True).devices == 2
