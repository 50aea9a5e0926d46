"""Other drivers' devices beside ours (KEP-6072's standard NUMA attribute): a NIC driver's slices
on a100-8x nodes (gpu-0..3 on NUMA node 0, gpu-4..7 on 1), claims that ask for a GPU and a NIC,
and what placing, scoring and the watched state make of them."""

from __future__ import annotations

import dataclasses
from typing import Any

from extender.cluster.state import ClusterState
from extender.devices.cel_eval import Selectors
from extender.devices.node_usage import Node, Usage, partner_name, usage_from
from extender.devices.slices import nodes_from
from extender.plan.capacity import Matcher, members_fit, place
from extender.plan.config import ScoreWeights
from extender.plan.scoring import score
from extender.pods.demand import Demand, Partner, Request, requests_of
from nativedra.base.kube.names import STANDARD_NUMA_ATTRIBUTE
from testkit.builders import DRIVER, GPU, GPU_CLASS, allocated_claim, node_objects

NIC_DRIVER = "nic.example.com"
NIC = f"device.driver == '{NIC_DRIVER}'"
NIC_CLASS = {"metadata": {"name": "nic"}, "spec": {"selectors": [{"cel": {"expression": NIC}}]}}
CLASSES = {DRIVER: GPU_CLASS, "nic": NIC_CLASS}
MATCHER = Matcher(Selectors(), DRIVER)
NUMA_0 = {"gpu-0", "gpu-1", "gpu-2", "gpu-3"}
NUMA_1 = {"gpu-4", "gpu-5", "gpu-6", "gpu-7"}


def nic_slice(node: str, numa_by_nic: dict[str, int | None], generation: int = 1) -> dict[str, Any]:
    """NICs of another driver on `node` (None: a NIC that publishes no NUMA node)."""
    devices = [
        {"name": name, "attributes": {STANDARD_NUMA_ATTRIBUTE: {"int": numa}} if numa is not None else {}}
        for name, numa in numa_by_nic.items()
    ]
    return {
        "metadata": {"name": f"{node}-nics"},
        "spec": {
            "driver": NIC_DRIVER,
            "nodeName": node,
            "pool": {"name": f"nics-{node}", "generation": generation, "resourceSliceCount": 1},
            "devices": devices,
        },
    }


def nodes_with_nics(nics: dict[str, dict[str, int | None]]) -> dict[str, Node]:
    node_list, slices = node_objects({name: {} for name in nics})
    return nodes_from(node_list, slices + [nic_slice(name, numa) for name, numa in nics.items()], DRIVER)


def nic_claim(name: str, node: str, nic: str) -> dict[str, Any]:
    result = {"request": "nic", "driver": NIC_DRIVER, "pool": f"nics-{node}", "device": nic}
    return {
        "metadata": {"name": name, "namespace": "ns"},
        "spec": {},
        "status": {"allocation": {"devices": {"results": [result]}}},
    }


def gpu_and_nic(constraint: bool) -> dict[str, Any]:
    requests = [
        {"name": "gpu", "exactly": {"deviceClassName": DRIVER}},
        {"name": "nic", "exactly": {"deviceClassName": "nic"}},
    ]
    constraints = [{"requests": ["gpu", "nic"], "matchAttribute": STANDARD_NUMA_ATTRIBUTE}] if constraint else []
    return {"devices": {"requests": requests, "constraints": constraints}}


ALIGNED = Request((GPU,), 1, match_attribute=STANDARD_NUMA_ATTRIBUTE, partners=(Partner((NIC,), 1),))
ALIGNED_DEMAND = Demand((ALIGNED,), partners=(Partner((NIC,), 1),))
LOOSE_DEMAND = Demand((Request((GPU,), 1),), partners=(Partner((NIC,), 1),))


def test_a_constraint_on_the_standard_attribute_ties_the_nic_to_the_gpu_request() -> None:
    found = requests_of(gpu_and_nic(constraint=True), CLASSES, DRIVER)
    assert found == ((ALIGNED,), (Partner((NIC,), 1),))


def test_without_a_constraint_the_nic_is_a_partner_tied_to_nothing() -> None:
    found = requests_of(gpu_and_nic(constraint=False), CLASSES, DRIVER)
    assert found == ((Request((GPU,), 1),), (Partner((NIC,), 1),))


def test_each_partner_is_tied_to_one_of_our_requests_only() -> None:
    spec = gpu_and_nic(constraint=True)
    spec["devices"]["requests"].insert(1, {"name": "gpu2", "exactly": {"deviceClassName": DRIVER}})
    spec["devices"]["constraints"] = [{"matchAttribute": STANDARD_NUMA_ATTRIBUTE}]  # every request
    found = requests_of(spec, CLASSES, DRIVER)
    assert found is not None
    assert [len(r.partners) for r in found[0]] == [1, 0], "the NIC is asked once, not once per GPU request"


def test_only_nics_with_a_numa_node_of_the_latest_generation_are_partners() -> None:
    node_list, slices = node_objects({"a": {}})
    old = nic_slice("a", {"nic-old": 0})
    new = nic_slice("a", {"nic-0": 1, "nic-x": None}, generation=2)
    nodes = nodes_from(node_list, [*slices, old, new], DRIVER)
    assert [d.name for d in nodes["a"].partners] == [partner_name(NIC_DRIVER, "nics-a", "nic-0")]
    assert len(nodes["a"].devices) == 8, "our devices are unchanged"


def test_an_allocated_nic_is_in_use_on_its_node() -> None:
    nodes = nodes_with_nics({"a": {"nic-0": 0, "nic-1": 0}, "b": {"nic-0": 0}})
    usage = usage_from([nic_claim("c", "a", "nic-1"), allocated_claim("g", "b", ["gpu-0"])], nodes, DRIVER)
    assert usage["a"].partners == {partner_name(NIC_DRIVER, "nics-a", "nic-1")}
    assert usage["b"].partners == frozenset() and usage["b"].devices == {"gpu-0"}


def test_a_tied_nic_must_sit_on_the_numa_node_of_a_free_gpu() -> None:
    nodes = nodes_with_nics({"far": {"nic-0": 1}, "near": {"nic-0": 0}})
    numa_1_taken = Usage(devices=set(NUMA_1))  # only NUMA node 0's GPUs are free
    assert place(nodes["far"], numa_1_taken, ALIGNED_DEMAND, MATCHER) is None
    after = place(nodes["near"], numa_1_taken, ALIGNED_DEMAND, MATCHER)
    assert after is not None and after.partners == {partner_name(NIC_DRIVER, "nics-near", "nic-0")}
    assert place(nodes["far"], numa_1_taken, LOOSE_DEMAND, MATCHER) is not None, "without a constraint it fits"


def test_tied_nics_bound_how_many_pods_fit_on_a_node() -> None:
    nodes = nodes_with_nics({"a": {"nic-0": 0, "nic-1": 0, "nic-2": 1}})
    count, after = members_fit(nodes["a"], Usage(), ALIGNED_DEMAND, 8, MATCHER)
    assert count == 3, "two pods beside NUMA 0's NICs, one beside NUMA 1's"
    assert len(after.partners) == 3 and len(after.devices) == 3


def test_a_shareable_nic_is_never_used_up() -> None:
    nodes = nodes_with_nics({"a": {"nic-0": 0}})
    node = dataclasses.replace(nodes["a"], partners=(dataclasses.replace(nodes["a"].partners[0], multi=True),))
    count, _ = members_fit(node, Usage(), ALIGNED_DEMAND, 8, MATCHER)
    assert count == 4, "every GPU of NUMA node 0, each beside the shared NIC"


def test_numa_score_counts_the_nic_beside_the_gpus() -> None:
    nodes = nodes_with_nics({"far": {"nic-0": 1}, "near": {"nic-0": 0}, "plain": {}})
    numa_1_taken = Usage(devices=set(NUMA_1))
    weights = ScoreWeights(numa=1, packing=0, fraction_packing=0)
    result = {name: score(node, numa_1_taken, LOOSE_DEMAND, MATCHER, weights) for name, node in nodes.items()}
    assert result == {"near": 10, "far": 5, "plain": 10}, "a node without such NICs cannot align anywhere"
    busy_nic = Usage(devices=set(NUMA_1), partners=frozenset({partner_name(NIC_DRIVER, "nics-near", "nic-0")}))
    assert score(nodes["near"], busy_nic, LOOSE_DEMAND, MATCHER, weights) == 5, "an allocated NIC does not count"


def _listed(*objects: tuple[str, dict[str, Any]]) -> ClusterState:
    state = ClusterState(DRIVER)
    for kind in ClusterState.REQUIRED_KINDS:
        state.replace(kind, [])
    node_list, slices = node_objects({"a": {}})
    state.replace("nodes", node_list)
    state.replace("resourceslices", slices)
    for kind, obj in objects:
        state.apply("ADDED", kind, obj)
    return state


def test_the_state_counts_a_nic_claim_seen_before_its_slice_and_frees_it_on_delete() -> None:
    claim = nic_claim("c", "a", "nic-0")
    state = _listed(("resourceclaims", claim))
    assert state.view().usage["a"].partners == frozenset()
    state.apply("ADDED", "resourceslices", nic_slice("a", {"nic-0": 0, "nic-1": 1}))
    name = partner_name(NIC_DRIVER, "nics-a", "nic-0")
    assert state.view().usage["a"].partners == {name}, "the slice brought the claim's NIC into use"
    state.apply("ADDED", "resourceclaims", nic_claim("d", "a", "nic-1"))
    assert len(state.view().usage["a"].partners) == 2, "a claim after the slice counts at once"
    state.apply("DELETED", "resourceclaims", claim)
    assert state.view().usage["a"].partners == {partner_name(NIC_DRIVER, "nics-a", "nic-1")}
    state.apply("DELETED", "resourceslices", nic_slice("a", {}))
    view = state.view()
    assert view.nodes["a"].partners == () and view.usage["a"].partners == frozenset()
