"""Tainted devices, as the DRA allocator reads them: a NoSchedule or NoExecute taint keeps a
device from every request that does not tolerate it, and from none that does (a diagnostics pod
on a GPU the plugin marked unhealthy). The taint is the plugin's own, built by its builder."""

from __future__ import annotations

from typing import Any

import pytest

from dra_driver.discovery.simulated import load_profile, resolve_profile
from dra_driver.faults import xid_fault
from dra_driver.publishing.publish_config import PublishConfig
from dra_driver.publishing.slices import UNHEALTHY_TAINT_KEY, build_slices
from extender.devices.cel_eval import Selectors
from extender.devices.node_usage import Node, Usage
from extender.devices.slices import nodes_from
from extender.devices.taints import Toleration, all_tolerated, tolerations_of
from extender.plan.capacity import Matcher, place
from extender.pods.demand import Demand, requests_of
from testkit.builders import DRIVER, GPU_CLASS

FAILED = 3


def _node(effect: str) -> Node:
    inventory = load_profile(resolve_profile("a100-8x"))
    gpus = tuple(gpu.with_fault(xid_fault(79)) if gpu.index == FAILED else gpu for gpu in inventory.gpus)
    config = PublishConfig(fractions=(), fatal_fault_effect=effect)
    specs = build_slices(inventory.model_copy(update={"gpus": gpus}), config, "n")
    slices = [
        {"metadata": {"name": f"n-{index}"}, "spec": {**spec, "pool": {**spec["pool"], "generation": 1}}}
        for index, spec in enumerate(specs)
    ]
    return nodes_from([{"metadata": {"name": "n", "labels": {}}}], slices, DRIVER)["n"]


def _taint(node: Node) -> dict[str, Any]:
    (taint,) = next(d for d in node.devices.values() if d.tainted).raw["taints"]
    return dict(taint)


def _request(tolerations: list[dict[str, Any]] | None, count: int = 1) -> Any:
    exactly: dict[str, Any] = {"deviceClassName": DRIVER, "count": count}
    if tolerations is not None:
        exactly["tolerations"] = tolerations
    found = requests_of({"devices": {"requests": [{"name": "gpus", "exactly": exactly}]}}, CLASSES, DRIVER)
    assert found is not None
    return found[0][0]


CLASSES = {DRIVER: GPU_CLASS}
MATCHER = Matcher(Selectors(), DRIVER)


@pytest.mark.parametrize("effect", ["NoSchedule", "NoExecute"])
@pytest.mark.parametrize(
    ("tolerations", "matched"),
    [
        (None, 7),
        ([{"key": UNHEALTHY_TAINT_KEY, "operator": "Exists"}], 8),
        ([{"operator": "Exists"}], 8),
        ([{"key": UNHEALTHY_TAINT_KEY, "operator": "Exists", "effect": "{effect}"}], 8),
        ([{"key": UNHEALTHY_TAINT_KEY, "value": "{value}"}], 8),
        ([{"key": UNHEALTHY_TAINT_KEY, "operator": "Equal", "value": "{value}"}], 8),
        ([{"key": UNHEALTHY_TAINT_KEY, "value": "other"}], 7),
        ([{"key": "example.com/other", "operator": "Exists"}], 7),
        ([{"key": UNHEALTHY_TAINT_KEY, "operator": "Exists", "effect": "{other_effect}"}], 7),
    ],
)
def test_a_request_gets_a_tainted_gpu_only_if_it_tolerates_the_taint(
    effect: str, tolerations: list[dict[str, str]] | None, matched: int
) -> None:
    node = _node(effect)
    taint = _taint(node)
    assert (taint["key"], taint["effect"]) == (UNHEALTHY_TAINT_KEY, effect)
    other_effect = "NoExecute" if effect == "NoSchedule" else "NoSchedule"
    filled = [
        {k: v.format(effect=effect, value=taint["value"], other_effect=other_effect) for k, v in t.items()}
        for t in tolerations or []
    ]
    request = _request(filled if tolerations is not None else None)
    assert len(MATCHER.matching(node, request.selection)) == matched
    assert (request.tolerations == tolerations_of(filled)) and (matched == 8) == all_tolerated(
        [taint], request.tolerations
    )


def test_a_tolerating_pod_is_placed_on_the_failed_gpu_when_it_is_the_only_free_one() -> None:
    """Seven healthy GPUs in use: the pod that tolerates the taint fits (on the failed GPU), the
    same pod without the toleration does not; their fits are cached apart."""
    node = _node("NoSchedule")
    failed = next(name for name, d in node.devices.items() if d.tainted)
    usage = Usage(devices={name for name in node.devices if name != failed})
    tolerating = _request([{"key": UNHEALTHY_TAINT_KEY, "operator": "Exists"}])
    plain = _request(None)
    after = place(node, usage, Demand((tolerating,)), MATCHER)
    assert after is not None and failed in after.devices
    assert place(node, usage, Demand((plain,)), MATCHER) is None
    assert MATCHER.matching_shape(node, tolerating.selection) != MATCHER.matching_shape(node, plain.selection)


def test_effects_other_than_noschedule_and_noexecute_keep_nothing_off() -> None:
    assert all_tolerated([{"key": "k", "effect": "None"}], ())
    assert not all_tolerated([{"key": "k", "effect": "NoSchedule"}], (Toleration.of({"key": "k", "value": "v"}),))
    assert all_tolerated(
        [{"key": "k", "value": "v", "effect": "NoSchedule"}], (Toleration.of({"key": "k", "value": "v"}),)
    )
