"""A GPU and another driver's NIC on one NUMA node, through the standard attribute
resource.kubernetes.io/numaNode (KEP-6072): nodes of 8 A100s (NUMA 0 and 1, four each) published
by the plugin's builder, and a second driver's slices (nic.example.com) whose NICs all sit on one
NUMA node per node. The real scheduler (v1.37.2, default gates) calls the extender.

- One claim of 1 GPU + 1 NIC with matchAttribute on the standard name: the allocator must put both
  on one NUMA node, so each node takes only the four GPUs beside its NICs.
- Separate GPU and NIC claims (a constraint cannot span claims): only the extender's NUMA score,
  which counts the other driver's NICs, sends the GPU pod to the node where they can align."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from nativedra.base.kube.names import DRIVER_NAME, GPU_CLASS
from nativedra.base.kube.resources import DEVICE_CLASSES, RESOURCE_CLAIMS, RESOURCE_SLICES
from nativedra.cluster import ControlPlane, wait_for
from nativedra.objects import claim_template, gpu_pod, request
from testkit.extender_harness import ExtenderCluster, bound, extender_cluster, fresh_namespace
from testkit.priority_classes import priority_classes

pytestmark = pytest.mark.timeout(600)
NIC_DRIVER = "nic.example.com"
NIC_CLASS = "nic.example.com"
NUMA = "resource.kubernetes.io/numaNode"
NODES, CLAIMS = 5, 20  # 4 GPUs beside the NICs on each node: 20 claims fill them exactly


@pytest.fixture(scope="module")
def harness(control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ExtenderCluster]:
    with extender_cluster(Path(tmp_path_factory.mktemp("numa")), {}, shared=control_plane) as cluster:
        yield cluster


def _nic_slice(node: str, numa: int, count: int = 8) -> dict[str, Any]:
    devices = [{"name": f"nic-{index}", "attributes": {NUMA: {"int": numa}}} for index in range(count)]
    return {
        "apiVersion": RESOURCE_SLICES.api_version,
        "kind": RESOURCE_SLICES.kind,
        "metadata": {"name": f"{node}-nics"},
        "spec": {
            "driver": NIC_DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
        },
    }


def _numa_of(api: client.ApiClient, node: str, driver: str, device: str) -> int:
    for resource_slice in RESOURCE_SLICES.list(api).get("items") or []:
        spec = resource_slice["spec"]
        if spec.get("nodeName") == node and spec["driver"] == driver:
            for published in spec.get("devices") or []:
                if published["name"] == device:
                    return int(published["attributes"][NUMA]["int"])
    raise AssertionError(f"{driver} device {device} on {node} not published")


@contextmanager
def _nics(harness: ExtenderCluster, nic_numa: dict[str, int], count: int = 8) -> Iterator[None]:
    """The NIC driver's DeviceClass and one slice per node; all gone afterwards, nodes too."""
    api = harness.api
    DEVICE_CLASSES.create(
        api,
        {
            "apiVersion": DEVICE_CLASSES.api_version,
            "kind": DEVICE_CLASSES.kind,
            "metadata": {"name": NIC_CLASS},
            "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{NIC_DRIVER}'"}}]},
        },
    )
    try:
        for node, numa in nic_numa.items():
            RESOURCE_SLICES.create(api, _nic_slice(node, numa, count))
        yield
    finally:
        for node in nic_numa:
            RESOURCE_SLICES.delete(api, f"{node}-nics")
        DEVICE_CLASSES.delete(api, NIC_CLASS)
        harness.remove_nodes()


def _gpu_beside_nic(api: client.ApiClient, namespace: str, name: str) -> None:
    """A claim template of 1 GPU + 1 NIC on one NUMA node (the standard attribute)."""
    claim_template(
        api,
        namespace,
        name,
        [request("gpu", GPU_CLASS), request("nic", NIC_CLASS)],
        [{"requests": ["gpu", "nic"], "matchAttribute": NUMA}],
    )


def _devices_numa(api: client.ApiClient, namespace: str, pod: str) -> dict[str, int]:
    """Request name -> NUMA node of the device allocated for it, over the pod's claims."""
    claims = RESOURCE_CLAIMS.list(api).get("items") or []
    found = {}
    for claim in claims:
        owners = claim["metadata"].get("ownerReferences") or []
        if claim["metadata"]["namespace"] != namespace or not any(o["name"] == pod for o in owners):
            continue
        for result in claim["status"]["allocation"]["devices"]["results"]:
            found[result["request"]] = _numa_of(api, result["pool"], result["driver"], result["device"])
    return found


def test_twenty_claims_each_get_a_gpu_and_a_nic_of_one_numa_node(harness: ExtenderCluster) -> None:
    api = harness.api
    nodes = harness.add_gpu_nodes(NODES)
    nic_numa = {node: index % 2 for index, node in enumerate(nodes)}
    with _nics(harness, nic_numa), fresh_namespace(api, "numa") as namespace:
        _gpu_beside_nic(api, namespace, "gpu-and-nic")
        pods = [f"p{index:02d}" for index in range(CLAIMS)]
        for name in pods:
            gpu_pod(api, namespace, name, "gpu-and-nic")
        wait_for(lambda: len(bound(api, namespace, pods)) == CLAIMS, 120, f"{CLAIMS} pods bound")
        claims = [
            c
            for c in RESOURCE_CLAIMS.list(api).get("items") or []
            if c["metadata"]["namespace"] == namespace and (c.get("status") or {}).get("allocation")
        ]
        assert len(claims) == CLAIMS
        for claim in claims:
            results = claim["status"]["allocation"]["devices"]["results"]
            got = {r["request"]: _numa_of(api, r["pool"], r["driver"], r["device"]) for r in results}
            node = results[0]["pool"]
            assert got == {"gpu": nic_numa[node], "nic": nic_numa[node]}, (claim["metadata"]["name"], got)


def test_the_extender_sends_a_gpu_pod_where_its_separately_claimed_nic_shares_a_numa_node(
    harness: ExtenderCluster,
) -> None:
    """Both nodes have only NUMA node 0's GPUs free (a filler holds NUMA node 1's), the far node one
    fewer (a second filler); the far node's NICs sit on NUMA node 1, the near node's on 0. Four
    pods, one at a time, each claiming a GPU and a NIC apart, must all go to the near node. Without
    the cross-driver score the far node wins every time: its GPUs are as well placed on NUMA node
    0, and fuller (packing). The fifth pod, with no GPU left beside a NIC, still goes to the far
    node: a preference, never a refusal."""
    api = harness.api
    far, near = harness.add_gpu_nodes(2)
    with _nics(harness, {far: 1, near: 0}), fresh_namespace(api, "numa-score") as namespace:
        on_numa = "device.attributes['" + DRIVER_NAME + "'].numaNode == {}"
        claim_template(api, namespace, "numa-1", [request("gpus", GPU_CLASS, on_numa.format(1), count=4)])
        claim_template(api, namespace, "numa-0", [request("gpus", GPU_CLASS, on_numa.format(0))])
        claim_template(api, namespace, "one-gpu", [request("gpu", GPU_CLASS)])
        claim_template(api, namespace, "one-nic", [request("nic", NIC_CLASS)])
        fillers = {f"filler-{far}": ("numa-1", far), f"filler-{near}": ("numa-1", near), "one-more": ("numa-0", far)}
        for name, (template, node) in fillers.items():
            gpu_pod(api, namespace, name, template, node=node)
        wait_for(lambda: len(bound(api, namespace, list(fillers))) == len(fillers), 60, "fillers bound")
        for index in range(5):
            name = f"p{index}"
            gpu_pod(api, namespace, name, "one-gpu", more_claims={"nic": "one-nic"})
            wait_for(partial(bound, api, namespace, [name]), 60, f"{name} bound")
            placed = bound(api, namespace, [name])[name]
            numa = _devices_numa(api, namespace, name)
            if index < 4:
                assert placed == near, f"{name} went to {placed}, where its NIC cannot share the GPU's NUMA node"
                assert numa == {"gpu": 0, "nic": 0}, (name, numa)
            else:
                assert placed == far, "with the near node's GPUs gone, the pod still runs elsewhere"


def test_a_gang_tied_to_nics_is_planned_only_where_each_member_has_a_nic_beside_its_gpu(
    harness: ExtenderCluster,
) -> None:
    """A gang of 8, each member's claim 1 GPU + 1 NIC on one NUMA node. The first node has four free
    GPUs, but on NUMA node 0 while its NICs sit on 1 (a filler holds NUMA node 1's GPUs): no
    member can go there. Counting GPUs alone, it is the tightest node, so the plan put four members
    on it, the scheduler's DRA filter refused them there, and the gang never completed. The other
    two nodes hold four members each, beside their NICs."""
    api = harness.api
    blocked, *good = harness.add_gpu_nodes(3)
    with _nics(harness, {blocked: 1, good[0]: 0, good[1]: 0}), fresh_namespace(api, "numa-gang") as namespace:
        on_numa_1 = f"device.attributes['{DRIVER_NAME}'].numaNode == 1"
        claim_template(api, namespace, "numa-1", [request("gpus", GPU_CLASS, on_numa_1, count=4)])
        gpu_pod(api, namespace, "filler", "numa-1", node=blocked)
        wait_for(partial(bound, api, namespace, ["filler"]), 60, "filler bound")
        _gpu_beside_nic(api, namespace, "gpu-and-nic")
        members = [f"m{index}" for index in range(8)]
        labels = {"nativedra.dev/gang": "train", "nativedra.dev/gang-size": str(len(members))}
        for name in members:
            gpu_pod(api, namespace, name, "gpu-and-nic", labels=labels)
        wait_for(lambda: len(bound(api, namespace, members)) == len(members), 90, "the whole gang bound")
        placed = bound(api, namespace, members)
        assert sorted(placed.values()) == sorted(good * 4), placed
        for name in members:
            assert _devices_numa(api, namespace, name) == {"gpu": 0, "nic": 0}, name


def test_preemption_for_a_gpu_beside_a_nic_evicts_the_nics_holder_too(harness: ExtenderCluster) -> None:
    """One node: its 8 GPUs held by low-priority 1-GPU pods, its one NIC (NUMA node 0) by a
    low-priority pod of NICs only. A high-priority pod asks for a GPU and the NIC on one NUMA node.
    Evicting GPU pods alone frees nothing it can use: the NIC's holder is a victim too, with one
    GPU pod on NUMA node 0, and no other."""
    api = harness.api
    (node,) = harness.add_gpu_nodes(1)
    values = {"low": 10, "high": 1000}
    with (
        _nics(harness, {node: 0}, count=1),
        fresh_namespace(api, "numa-preempt") as namespace,
        priority_classes(api, values, "numa") as classes,
    ):
        claim_template(api, namespace, "one-gpu", [request("gpu", GPU_CLASS)])
        claim_template(api, namespace, "one-nic", [request("nic", NIC_CLASS)])
        _gpu_beside_nic(api, namespace, "gpu-and-nic")
        gpu_pods = [f"low-{index}" for index in range(8)]
        for name in gpu_pods:
            gpu_pod(api, namespace, name, "one-gpu", node=node, priority_class=classes["low"])
        gpu_pod(api, namespace, "nic-holder", "one-nic", node=node, priority_class=classes["low"])
        everyone = [*gpu_pods, "nic-holder"]
        wait_for(lambda: len(bound(api, namespace, everyone)) == len(everyone), 90, "the low pods bound")
        numa_of = {name: _devices_numa(api, namespace, name)["gpu"] for name in gpu_pods}
        gpu_pod(api, namespace, "high", "gpu-and-nic", priority_class=classes["high"])
        wait_for(partial(bound, api, namespace, ["high"]), 90, "the preemptor bound")
        present = {p.metadata.name for p in client.CoreV1Api(api).list_namespaced_pod(namespace).items}
        evicted = sorted(set(everyone) - present)
        assert "nic-holder" in evicted, evicted
        gpu_victims = [name for name in evicted if name != "nic-holder"]
        assert len(gpu_victims) == 1 and numa_of[gpu_victims[0]] == 0, (evicted, numa_of)
        assert _devices_numa(api, namespace, "high") == {"gpu": 0, "nic": 0}
