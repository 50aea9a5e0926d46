"""A GPU and another driver's NIC on one NUMA node, through the standard attribute
resource.kubernetes.io/numaNode (KEP-6072): nodes of 8 A100s (NUMA 0 and 1, four each) published
by the plugin's builder, and a second driver's slices (nic.example.com) whose NICs all sit on one
NUMA node per node, alternating. Each claim asks for 1 GPU + 1 NIC with matchAttribute on the
standard name; the real scheduler (v1.37.2, default gates, the extender called) must allocate both
on one NUMA node, so each node takes only the four GPUs beside its NICs."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from kube.names import GPU_CLASS
from kube.resources import DEVICE_CLASSES, RESOURCE_CLAIMS, RESOURCE_SLICES
from nativedra.cluster import ControlPlane, wait_for
from nativedra.objects import claim_template, gpu_pod, request
from testkit.extender_harness import ExtenderCluster, bound, extender_cluster, fresh_namespace

pytestmark = pytest.mark.timeout(600)
NIC_DRIVER = "nic.example.com"
NIC_CLASS = "nic.example.com"
NUMA = "resource.kubernetes.io/numaNode"
NODES, CLAIMS = 5, 20  # 4 GPUs beside the NICs on each node: 20 claims fill them exactly


@pytest.fixture(scope="module")
def harness(control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ExtenderCluster]:
    with extender_cluster(Path(tmp_path_factory.mktemp("numa")), {}, shared=control_plane) as cluster:
        yield cluster


def _nic_slice(node: str, numa: int) -> dict[str, Any]:
    devices = [{"name": f"nic-{index}", "attributes": {NUMA: {"int": numa}}} for index in range(8)]
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


def test_twenty_claims_each_get_a_gpu_and_a_nic_of_one_numa_node(harness: ExtenderCluster) -> None:
    api = harness.api
    nodes = harness.add_gpu_nodes(NODES)
    nic_numa = {node: index % 2 for index, node in enumerate(nodes)}
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
            RESOURCE_SLICES.create(api, _nic_slice(node, numa))
        with fresh_namespace(api, "numa") as namespace:
            claim_template(
                api,
                namespace,
                "gpu-and-nic",
                [request("gpu", GPU_CLASS), request("nic", NIC_CLASS)],
                [{"requests": ["gpu", "nic"], "matchAttribute": NUMA}],
            )
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
    finally:
        for node in nodes:
            RESOURCE_SLICES.delete(api, f"{node}-nics")
        DEVICE_CLASSES.delete(api, NIC_CLASS)
        harness.remove_nodes()
