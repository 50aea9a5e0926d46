"""Kubernetes 1.37's native gang scheduling, alone and with the extender beside it, on one real
control plane: whole gangs or none either way, the extender's rack choice wins the tie that native
breaks at random, and together they never leave pending a pod that native alone places.

Gates beyond the defaults (users run defaults, so only this module turns them on):
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

from extender.config import RACK_LABEL
from kube.resources import NATIVE_POD_GROUPS
from nativedra.cluster import wait_for
from nativedra.cluster.components import Features
from nativedra.cluster.waits import unschedulable_message
from testkit.extender_harness import (
    ExtenderCluster,
    bound,
    delete_pods,
    extender_cluster,
    fresh_namespace,
    native_gang_pods,
    settled_placement,
)

NATIVE_GANGS = Features(
    {"GenericWorkload": True, "TopologyAwareWorkloadScheduling": True},
    ("scheduling.k8s.io/v1beta1",),
    "native gang scheduling (PodGroup API, GangScheduling plugin) and PodGroup rack constraints, "
    "to compare with the extender and to run beside it",
)
TEST_LABEL = "e2e.nativedra.dev/test"
RACKS = {"rack-a": 3, "rack-b": 2, "rack-c": 1}  # 6 nodes of 8 GPUs
SETTLE_S = 90.0  # a rejected group is retried after up to 20 s of backoff: a few retries fit


@pytest.fixture(scope="module")
def gated() -> Iterator[ExtenderCluster]:
    root = Path(tempfile.mkdtemp(prefix="nd-native-", dir="/tmp"))
    try:
        config = {"topologyLevels": [RACK_LABEL, "kubernetes.io/hostname"], "planTimeoutSeconds": 600}
        with extender_cluster(root, config, NATIVE_GANGS) as harness:
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


def _two_gangs(harness: ExtenderCluster, namespace: str, rack_of: dict[str, str]) -> dict[str, list[str]]:
    """PodGroups a and b of 4 pods x 8 GPUs, their members created interleaved (a0, b0, a1, ...)
    as a busy cluster sees them; returns group -> pods."""
    selector = _selector(rack_of, harness.api)
    pods: dict[str, list[str]] = {"a": [], "b": []}
    for index in range(4):
        for group in pods:
            pods[group] += native_gang_pods(
                harness.api, namespace, group, 4, 8, selector=selector, members=range(index, index + 1)
            )
    return pods


def _counts(harness: ExtenderCluster, namespace: str, pods: dict[str, list[str]]) -> dict[str, int]:
    placed = settled_placement(harness.api, namespace, [p for names in pods.values() for p in names], SETTLE_S)
    return {group: sum(1 for p in names if p in placed) for group, names in pods.items()}


def _condition(api: client.ApiClient, namespace: str, group: str) -> str | None:
    """The PodGroup's PodGroupInitiallyScheduled status ("True", "False"), None before the scheduler sets it."""
    status = NATIVE_POD_GROUPS.get(api, group, namespace).get("status") or {}
    found = [c["status"] for c in status.get("conditions") or [] if c["type"] == "PodGroupInitiallyScheduled"]
    return found[0] if found else None


def _winner(counts: dict[str, int]) -> tuple[str, str]:
    assert sorted(counts.values()) == [0, 4], f"expected one whole gang and one waiting: {counts}"
    return max(counts, key=lambda g: counts[g]), min(counts, key=lambda g: counts[g])


def test_native_gang_scheduling_alone_places_one_gang_whole_and_the_other_waits(
    gated: ExtenderCluster, racks: dict[str, str], namespace: str
) -> None:
    with gated.scheduler_alone():
        pods = _two_gangs(gated, namespace, racks)
        counts = _counts(gated, namespace, pods)
        winner, loser = _winner(counts)
        wait_for(lambda: _condition(gated.api, namespace, winner) == "True", 30, f"PodGroup {winner} scheduled")
        reason = unschedulable_message(gated.api, namespace, f"{loser}-0") or ""
        assert "ns/native:" not in reason, f"the extender is not called here, yet it answered: {reason}"


def test_with_the_extender_beside_it_gangs_are_whole_and_a_rack_group_gets_the_tightest_rack(
    gated: ExtenderCluster, racks: dict[str, str], namespace: str
) -> None:
    pods = _two_gangs(gated, namespace, racks)
    counts = _counts(gated, namespace, pods)
    winner, loser = _winner(counts)
    log = gated.log.read_text()
    assert f"gang {namespace}/native:{winner} planned onto the cluster" in log, "the extender planned the PodGroup"
    assert "v1beta1/podgroups is not served" not in log, log
    assert log.count("PodGroup scheduling.k8s.io/v1alpha2/podgroups is not served") == 1, "1.36's API: said once"
    reason = unschedulable_message(gated.api, namespace, f"{loser}-0") or ""
    assert f"gang {namespace}/native:{loser} needs 4 more pod(s) x 8 device(s)" in reason, reason

    # The waiting gang runs once the first one's pods are gone, whole.
    delete_pods(gated.api, namespace, pods[winner])
    wait_for(lambda: len(bound(gated.api, namespace, pods[loser])) == 4, SETTLE_S, f"gang {loser} to run whole")
    delete_pods(gated.api, namespace, pods[loser])

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
