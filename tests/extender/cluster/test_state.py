"""ClusterState: objects from list+watch, node models and usage rebuilt only where they changed."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from extender.cluster.state import ClusterState
from extender.cluster.view import ClusterView
from testkit.builders import DRIVER, allocated_claim, gang_labels, node_objects, pod

NODES, SLICES = node_objects({"a": {"rack": "r1"}, "b": {"rack": "r1"}})
CLAIM_ON_A = allocated_claim("c-a", "a", ["gpu-0"])


def listed(claims: Sequence[dict[str, Any]] = (CLAIM_ON_A,)) -> ClusterState:
    """A state after the first list of every required kind."""
    state = ClusterState(DRIVER)
    for kind in ClusterState.REQUIRED_KINDS:
        state.replace(kind, [])
    state.replace("nodes", NODES)
    state.replace("resourceslices", SLICES)
    state.replace("resourceclaims", list(claims))
    return state


def contents(view: ClusterView) -> dict[str, Any]:
    """Everything a decision reads; the versions and the journal only say what changed."""
    versions = ("version", "unjournaled_version", "changes")
    return {name: value for name, value in asdict(view).items() if name not in versions}


def slice_of(node: str) -> dict[str, Any]:
    return copy.deepcopy(next(s for s in SLICES if s["spec"]["nodeName"] == node))


def test_a_slice_event_rebuilds_only_that_node() -> None:
    state = listed()
    before = state.view()
    smaller = slice_of("a")
    smaller["spec"]["devices"] = smaller["spec"]["devices"][:4]
    state.apply("MODIFIED", "resourceslices", smaller)
    after = state.view()
    assert sorted(after.nodes["a"].devices) == ["gpu-0", "gpu-1", "gpu-2", "gpu-3"]
    assert after.usage["a"].devices == {"gpu-0"}, "usage is rebuilt against the new model"
    assert after.nodes["b"] is before.nodes["b"] and after.usage["b"] is before.usage["b"]


def test_a_claim_event_rebuilds_only_that_nodes_usage() -> None:
    state = listed()
    before = state.view()
    claim = allocated_claim("c-b", "b", ["gpu-1", "gpu-2"])
    state.apply("ADDED", "resourceclaims", claim)
    added = state.view()
    assert added.usage["b"].devices == {"gpu-1", "gpu-2"}
    assert added.nodes["b"] is before.nodes["b"], "a claim never rebuilds the node model"
    assert added.usage["a"] is before.usage["a"] and added.nodes["a"] is before.nodes["a"]
    state.apply("DELETED", "resourceclaims", claim)
    assert state.view().usage["b"].devices == set(), "a deleted claim frees its devices"


def test_a_claim_modified_out_of_its_allocation_and_back_frees_and_takes_its_devices() -> None:
    """A claim's devices are read as it arrives: a MODIFIED event that drops the allocation (the
    pod ended) frees them, one that allocates it elsewhere moves them."""
    state = listed()
    unallocated = copy.deepcopy(CLAIM_ON_A)
    unallocated["status"] = {}
    state.apply("MODIFIED", "resourceclaims", unallocated)
    assert state.view().usage["a"].devices == set()
    state.apply("MODIFIED", "resourceclaims", allocated_claim("c-a", "b", ["gpu-3"]))
    assert state.view().usage["a"].devices == set() and state.view().usage["b"].devices == {"gpu-3"}
    state.apply("DELETED", "resourceclaims", allocated_claim("c-a", "b", ["gpu-3"]))
    assert state.view().usage["b"].devices == set()


def test_a_nodes_model_follows_what_its_slices_publish() -> None:
    """Node models come from digests made as each slice arrives: a slice that publishes something
    else makes its node another model, and publishing the same again makes it its twin's."""
    state = listed()
    assert state.view().nodes["a"].model == state.view().nodes["b"].model, "one hardware model"
    renamed = slice_of("a")
    renamed["spec"]["devices"][0]["attributes"]["productName"] = {"string": "another GPU"}
    state.apply("MODIFIED", "resourceslices", renamed)
    assert state.view().nodes["a"].model != state.view().nodes["b"].model
    state.apply("MODIFIED", "resourceslices", slice_of("a"))
    assert state.view().nodes["a"].model == state.view().nodes["b"].model


def test_a_node_event_rebuilds_only_that_node() -> None:
    state = listed()
    before = state.view()
    relabelled = copy.deepcopy(NODES[0])
    relabelled["metadata"]["labels"] = {"rack": "r2"}
    state.apply("MODIFIED", "nodes", relabelled)
    after = state.view()
    assert after.nodes["a"].labels == {"rack": "r2"} and len(after.nodes["a"].devices) == 8
    assert after.nodes["b"] is before.nodes["b"] and after.usage["b"] is before.usage["b"]


def test_a_deleted_node_disappears() -> None:
    state = listed()
    state.apply("DELETED", "nodes", NODES[0])
    after = state.view()
    assert sorted(after.nodes) == ["b"] and sorted(after.usage) == ["b"]


def test_a_relist_after_events_gives_the_view_a_restarted_extender_builds() -> None:
    state = listed()
    claim = allocated_claim("c-b", "b", ["gpu-5"])
    smaller = slice_of("b")
    smaller["spec"]["devices"] = smaller["spec"]["devices"][4:]
    state.apply("ADDED", "resourceclaims", claim)
    state.apply("MODIFIED", "resourceslices", smaller)
    state.apply("DELETED", "resourceclaims", CLAIM_ON_A)
    slices = [slice_of("a"), smaller]
    state.replace("resourceslices", slices)
    state.replace("resourceclaims", [claim])
    restarted = listed(claims=[claim])
    restarted.replace("resourceslices", slices)
    assert contents(state.view()) == contents(restarted.view())
    assert state.view().usage["b"].devices == {"gpu-5"} and state.view().usage["a"].devices == set()


def test_only_pods_with_claims_or_a_gang_are_kept() -> None:
    state = listed()
    member = pod("m", labels=gang_labels("g", 2))
    state.replace("pods", [pod("web"), pod("gpu", template="t"), member])
    assert sorted(state.view().pods) == [("ns", "gpu"), ("ns", "m")]
    left_the_gang = pod("m")
    state.apply("MODIFIED", "pods", left_the_gang)
    assert sorted(state.view().pods) == [("ns", "gpu")]


def test_readiness_waits_for_required_kinds_only() -> None:
    state = ClusterState(DRIVER)
    assert state.missing() == sorted(ClusterState.REQUIRED_KINDS)
    for kind in ClusterState.REQUIRED_KINDS:
        state.replace(kind, [])
    assert state.missing() == [], "an optional CRD kind never holds readiness back"


def test_an_absent_optional_kind_has_no_objects() -> None:
    state = listed()
    group = {"metadata": {"name": "pg", "namespace": "ns"}, "spec": {"minMember": 3}}
    state.replace("podgroups", [group])
    assert state.view().pod_group_min == {("ns", "pg"): 3}
    state.absent("podgroups")
    assert state.view().pod_group_min == {}, "pod groups seen before the CRD went away are gone"
