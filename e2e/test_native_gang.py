"""Kubernetes 1.37's native gang scheduling, alone and with the extender beside it, on one real
control plane: the extender's rack choice wins the tie that native breaks at random, and together
they never leave pending a pod that native alone places. (Two competing gangs, one whole then the
other, natively and with the extender beside it: e2e/test_two_gangs.py.)

Gates beyond the defaults (users run defaults, so only the session's gated plane turns them on,
`testkit.four_way.NATIVE_GANGS`):
- `GenericWorkload` (beta in 1.37, off by default) on the API server, scheduler and controller
  manager, with `scheduling.k8s.io/v1beta1` in --runtime-config: the PodGroup API and the
  scheduler's GangScheduling plugin, which this module compares with and runs beside the extender.
- `TopologyAwareWorkloadScheduling` (alpha): without it the API server drops a PodGroup's
  `schedulingConstraints.topology`, so the rack-required groups would not ask for a rack.
"""

from __future__ import annotations

import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from extender.plan.config import RACK_LABEL
from nativedra.base.kube.resources import NATIVE_POD_GROUPS
from nativedra.cluster import ControlPlane, wait_for
from testkit.extender_harness import (
    ExtenderCluster,
    bound,
    delete_pods,
    extender_cluster,
    fresh_namespace,
    native_gang_pods,
    settled_placement,
    wait_judged_unschedulable,
)

TEST_LABEL = "e2e.nativedra.dev/test"
RACKS = {"rack-a": 3, "rack-b": 2, "rack-c": 1}  # 6 nodes of 8 GPUs
SETTLE_S = 90.0  # a rejected group is retried after up to 20 s of backoff: a few retries fit


@pytest.fixture(scope="module")
def gated(gated_plane: ControlPlane) -> Iterator[ExtenderCluster]:
    root = Path(tempfile.mkdtemp(prefix="nd-native-", dir="/tmp"))
    try:
        config = {"topologyLevels": [RACK_LABEL, "kubernetes.io/hostname"], "planTimeoutSeconds": 600}
        with extender_cluster(root, config, shared=gated_plane) as harness:
            yield harness
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def racks(gated: ExtenderCluster) -> Iterator[dict[str, str]]:
    """Six fresh nodes of 8 GPUs in racks of 3, 2 and 1 (node -> rack); removed after the test."""
    test = uuid.uuid4().hex[:6]
    rack_of = {}
    for rack, count in RACKS.items():
        for node in gated.add_gpu_nodes(count, {TEST_LABEL: test, RACK_LABEL: rack}):
            rack_of[node] = rack
    yield rack_of
    gated.remove_nodes()


@pytest.fixture
def namespace(gated: ExtenderCluster) -> Iterator[str]:
    with fresh_namespace(gated.api, "native") as name:
        yield name


def _selector(rack_of: dict[str, str], api: client.ApiClient) -> dict[str, str]:
    """The node selector that keeps this test's pods on its own nodes."""
    node = client.CoreV1Api(api).read_node(next(iter(rack_of)))
    return {TEST_LABEL: node.metadata.labels[TEST_LABEL]}


def test_with_the_extender_beside_it_a_rack_group_gets_the_tightest_rack(
    gated: ExtenderCluster, racks: dict[str, str], namespace: str
) -> None:
    # Racks of 3, 2 and 1 nodes; a 2-pod group arrives first, then a 3-pod one, each required in one
    # rack. Native alone ties the racks and may give the 2-pod group the only rack the other fits in.
    selector = _selector(racks, gated.api)
    pair = native_gang_pods(gated.api, namespace, "pair", 2, 8, topology=RACK_LABEL, selector=selector)
    wait_for(lambda: len(bound(gated.api, namespace, pair)) == 2, SETTLE_S, "the 2-pod group to run")
    trio = native_gang_pods(gated.api, namespace, "trio", 3, 8, topology=RACK_LABEL, selector=selector)
    wait_for(lambda: len(bound(gated.api, namespace, trio)) == 3, SETTLE_S, "the 3-pod group to run")
    placed = bound(gated.api, namespace, pair + trio)
    assert {racks[placed[p]] for p in pair} == {"rack-b"}, f"best fit: the rack of 2 ({placed})"
    assert {racks[placed[p]] for p in trio} == {"rack-a"}, placed


def _mixed(harness: ExtenderCluster, namespace: str, rack_of: dict[str, str]) -> dict[str, str]:
    """What the extender reads differently from a plain gang: a rack-required pair first, then a
    PodGroup of 5 pods that needs only 2 (minCount) while 4 fit. Native alone places 6 of 7."""
    selector = _selector(rack_of, harness.api)
    pair = native_gang_pods(harness.api, namespace, "pair", 2, 8, topology=RACK_LABEL, selector=selector)
    wait_for(lambda: len(bound(harness.api, namespace, pair)) == 2, SETTLE_S, "the 2-pod group to run")
    wide = native_gang_pods(harness.api, namespace, "wide", 5, 8, selector=selector, min_count=2)
    wait_for(lambda: len(bound(harness.api, namespace, wide)) >= 4, SETTLE_S, "4 of the 5-pod group to run")
    return settled_placement(harness.api, namespace, pair + wide, SETTLE_S)


def test_the_extender_leaves_pending_no_pod_that_native_alone_places(
    gated: ExtenderCluster, racks: dict[str, str]
) -> None:
    with gated.scheduler_alone(), fresh_namespace(gated.api, "alone") as namespace:
        alone = _mixed(gated, namespace, racks)
        delete_pods(gated.api, namespace, ["pair-0", "pair-1", *(f"wide-{i}" for i in range(5))])
    with fresh_namespace(gated.api, "both") as namespace:
        both = _mixed(gated, namespace, racks)
    assert len(alone) == len(both) == 6, (alone, both)


def test_an_elastic_group_grows_inside_its_rack_and_keeps_what_runs_when_its_min_count_rises(
    gated: ExtenderCluster, racks: dict[str, str], namespace: str
) -> None:
    """A rack-required PodGroup of 4 pods with minCount 2: 3 fit in rack-a and run. The fourth waits
    for room in rack-a although racks b and c have some. minCount raised to 4 while 3 run: nothing
    that runs is touched, and a node added to rack-a takes the fourth there."""
    selector = _selector(racks, gated.api)
    pods = native_gang_pods(gated.api, namespace, "elastic", 4, 8, topology=RACK_LABEL, selector=selector, min_count=2)
    wait_for(lambda: len(bound(gated.api, namespace, pods)) == 3, SETTLE_S, "3 of the group to run")
    first = bound(gated.api, namespace, pods)
    assert {racks[node] for node in first.values()} == {"rack-a"}, first
    [waiting] = [name for name in pods if name not in first]
    wait_judged_unschedulable(gated.api, namespace, [waiting])
    assert waiting not in bound(gated.api, namespace, pods), "never into rack b or c"
    NATIVE_POD_GROUPS.patch(gated.api, "elastic", {"spec": {"schedulingPolicy": {"gang": {"minCount": 4}}}}, namespace)
    test = next(iter(selector.values()))
    [added] = gated.add_gpu_nodes(1, {TEST_LABEL: test, RACK_LABEL: "rack-a"})
    wait_for(lambda: len(bound(gated.api, namespace, pods)) == 4, SETTLE_S, "the fourth on the new rack-a node")
    after = bound(gated.api, namespace, pods)
    assert after[waiting] == added and all(after[name] == node for name, node in first.items()), after
