"""Device-plugin-style requests on DRA (DRAExtendedResource, GA and on by default in 1.37): a pod
with `nativedra.dev/gpu: N` in its limits and no claim, against the real scheduler calling the
extender as shipped. The class gpu.nativedra.dev names that resource, so the scheduler makes the pod
a claim of N whole GPUs on one node; the scheduler's managedResources send the pod to the extender
(the marker policy leaves it unmarked, as it needs none), and the extender counts its demand like a
claim's, so a gang of such pods is placed whole or not at all. A pod that adds any extended resource
beside a claim, or asks for a class by its implicit name, is marked and sent all the same: the marker
is a zero request, which the DRA plugin's extended-resource checks skip."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from nativedra.base.kube.names import EXTENDER_MARKER, GPU_CLASS
from nativedra.base.kube.pods import CLASS_RESOURCE_PREFIX
from nativedra.base.kube.resources import RESOURCE_CLAIMS
from nativedra.cluster import ControlPlane, wait_for
from nativedra.objects import claim_template, request
from testkit.extender_harness import (
    ExtenderCluster,
    bound,
    extender_cluster,
    fresh_namespace,
    wait_judged_unschedulable,
)

pytestmark = pytest.mark.timeout(600)
RESOURCE = "nativedra.dev/gpu"


@pytest.fixture(scope="module")
def harness(control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ExtenderCluster]:
    with extender_cluster(Path(tmp_path_factory.mktemp("extended")), {}, shared=control_plane) as cluster:
        yield cluster


@pytest.fixture
def namespace(harness: ExtenderCluster) -> Iterator[str]:
    with fresh_namespace(harness.api, "extended") as name:
        try:
            yield name
        finally:
            harness.remove_nodes()


def _legacy_pod(
    api: client.ApiClient, namespace: str, name: str, gpus: int, labels: dict[str, str] | None = None
) -> None:
    """A pod written as for a device plugin: the GPUs in its limits, no resource claim."""
    container = {"name": "main", "image": "registry.invalid/cuda:12", "resources": {"limits": {RESOURCE: str(gpus)}}}
    body = {
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {"containers": [container], "terminationGracePeriodSeconds": 0},
    }
    client.CoreV1Api(api).create_namespaced_pod(namespace, body)


def _special_claim(api: client.ApiClient, namespace: str, pod: str) -> dict[str, Any] | None:
    status = client.CoreV1Api(api).read_namespaced_pod(pod, namespace).status
    claim_status = status.extended_resource_claim_status
    if claim_status is None or not claim_status.resource_claim_name:
        return None
    return RESOURCE_CLAIMS.get(api, claim_status.resource_claim_name, namespace)


def test_a_pod_asking_gpus_in_its_limits_gets_them_on_one_node_through_a_claim(
    harness: ExtenderCluster, namespace: str
) -> None:
    api = harness.api
    harness.add_gpu_nodes(2)
    _legacy_pod(api, namespace, "legacy", 2)
    node = wait_for(lambda: bound(api, namespace, ["legacy"]).get("legacy"), 60, "the pod bound")
    claim = wait_for(lambda: _special_claim(api, namespace, "legacy"), 30, "the scheduler's claim for the pod")
    results = claim["status"]["allocation"]["devices"]["results"]
    assert len(results) == 2 and {r["pool"] for r in results} == {node}
    assert {r["driver"] for r in results} == {"gpu.nativedra.dev"}
    assert all(r["device"].startswith("gpu-") and r["device"].count("-") == 1 for r in results), "whole GPUs"
    pod = client.CoreV1Api(api).read_namespaced_pod("legacy", namespace)
    # Not marked: the scheduler's managedResources send it to the extender for nativedra.dev/gpu itself.
    assert EXTENDER_MARKER not in (pod.spec.containers[0].resources.limits or {})


def test_a_gang_of_such_pods_waits_whole_where_it_cannot_fit_and_is_placed_whole_where_it_can(
    harness: ExtenderCluster, namespace: str
) -> None:
    """Three members of 8 GPUs on two free nodes: none is bound (the extender knows each needs 8).
    A third node arrives: all three are bound."""
    api = harness.api
    harness.add_gpu_nodes(2)
    members = [f"train-{index}" for index in range(3)]
    labels = {"nativedra.dev/gang": "train", "nativedra.dev/gang-size": "3"}
    for name in members:
        _legacy_pod(api, namespace, name, 8, labels)
    wait_judged_unschedulable(api, namespace, members)
    assert bound(api, namespace, members) == {}, "no member placed before the whole gang fits"
    harness.add_gpu_nodes(1)
    wait_for(lambda: len(bound(api, namespace, members)) == 3, 60, "the gang bound whole")


# Pods that stepped around the extender on 424026c: the marker policy skipped any pod asking for an
# extended resource, so these were placed by the scheduler alone, outside gang plans and holds.
AROUND_THE_EXTENDER = {
    "a claim beside a zero of an unknown resource": ({"example.com/x": "0"}, True),
    "a class by its implicit name": ({CLASS_RESOURCE_PREFIX + GPU_CLASS: "8"}, False),
}


@pytest.mark.parametrize("shape", sorted(AROUND_THE_EXTENDER))
def test_a_gang_asking_extended_resources_besides_is_sent_to_the_extender(
    harness: ExtenderCluster, namespace: str, shape: str
) -> None:
    """Three members of 8 GPUs on two free nodes: the scheduler alone binds two of them; sent to the
    extender (marked), none is bound until a third node makes room for the whole gang."""
    api = harness.api
    harness.add_gpu_nodes(2)
    limits, with_claim = AROUND_THE_EXTENDER[shape]
    if with_claim:
        claim_template(api, namespace, "eight", [request("gpus", GPU_CLASS, count=8)])
    members = [f"train-{index}" for index in range(3)]
    for name in members:
        container: dict[str, Any] = {
            "name": "main",
            "image": "registry.invalid/cuda:12",
            "resources": {"limits": limits},
        }
        spec: dict[str, Any] = {"containers": [container], "terminationGracePeriodSeconds": 0}
        if with_claim:
            container["resources"]["claims"] = [{"name": "gpus"}]
            spec["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": "eight"}]
        labels = {"nativedra.dev/gang": "train", "nativedra.dev/gang-size": "3"}
        client.CoreV1Api(api).create_namespaced_pod(
            namespace, {"metadata": {"name": name, "labels": labels}, "spec": spec}
        )
    pod = client.CoreV1Api(api).read_namespaced_pod(members[0], namespace)
    assert EXTENDER_MARKER in (pod.spec.containers[0].resources.limits or {}), "marked, so sent to the extender"
    wait_judged_unschedulable(api, namespace, members)
    assert bound(api, namespace, members) == {}, "no member placed before the whole gang fits"
    harness.add_gpu_nodes(1)
    wait_for(lambda: len(bound(api, namespace, members)) == 3, 60, "the gang bound whole")
