"""No single pod or gang can stop scheduling, with the real kube-scheduler calling a real extender:
competing gangs created interleaved are never left partly placed, and a gang larger than the
cluster is refused alone while others are still placed."""

from __future__ import annotations

import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from extender.plan.config import RACK_LABEL
from nativedra.cluster import ControlPlane, wait_for
from nativedra.cluster.waits import unschedulable_message
from testkit.extender_harness import (
    ExtenderCluster,
    bound,
    delete_pods,
    extender_cluster,
    fresh_namespace,
    gang_pods,
    settled_placement,
)

TEST_LABEL = "e2e.nativedra.dev/test"
ROUNDS = 20
GANG_SIZE = 4


@pytest.fixture(scope="module")
def ext(control_plane: ControlPlane) -> Iterator[ExtenderCluster]:
    root = Path(tempfile.mkdtemp(prefix="nd-abuse-", dir="/tmp"))
    try:
        config = {"topologyLevels": [RACK_LABEL, "kubernetes.io/hostname"]}
        with extender_cluster(root, config, shared=control_plane) as harness:
            yield harness
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def ns(ext: ExtenderCluster) -> Iterator[str]:
    with fresh_namespace(ext.api, "abuse") as name:
        yield name
        ext.remove_nodes()


def test_interleaved_competing_gangs_are_never_left_partly_placed(ext: ExtenderCluster, ns: str) -> None:
    """Two gangs of 4 pods x 4 GPUs, each required in one rack, on two racks of 2 nodes: one gang
    per rack. Members are created a0, b0, a1, b1, ...; the scheduler writes each member's claim
    allocation before its nodeName, and a member seen in between must count as placed, or its
    rack looks too small and the rest of its gang is sent to the other rack. After each round
    settles every gang must be whole or not placed at all."""
    test = uuid.uuid4().hex[:6]
    selector = {TEST_LABEL: test}
    for rack in ("rack-a", "rack-b"):
        ext.add_gpu_nodes(2, {TEST_LABEL: test, RACK_LABEL: rack})
    required = {"nativedra.dev/topology-required": RACK_LABEL}
    rounds = []
    for round_ in range(ROUNDS):
        gangs = (f"r{round_}-a", f"r{round_}-b")
        names = []
        for index in range(GANG_SIZE):
            for gang in gangs:
                names += gang_pods(
                    ext.api,
                    ns,
                    gang,
                    GANG_SIZE,
                    4,
                    selector=selector,
                    annotations=required,
                    members=range(index, index + 1),
                )
        placed = settled_placement(ext.api, ns, names)
        rounds.append({gang: sum(1 for pod in placed if pod.startswith(f"{gang}-")) for gang in gangs})
        delete_pods(ext.api, ns, names)
    partial = [counts for counts in rounds if any(0 < count < GANG_SIZE for count in counts.values())]
    assert partial == [], f"{len(partial)} of {ROUNDS} rounds left a gang partly placed: {rounds}"


def test_a_gang_larger_than_the_cluster_is_refused_alone(ext: ExtenderCluster, ns: str) -> None:
    test = uuid.uuid4().hex[:6]
    selector = {TEST_LABEL: test}
    ext.add_gpu_nodes(2, {TEST_LABEL: test})
    huge = gang_pods(ext.api, ns, "huge", 1_000_000_000, 8, selector=selector, members=range(1))
    wait_for(lambda: unschedulable_message(ext.api, ns, huge[0]), 60, "the huge gang judged")
    reason = unschedulable_message(ext.api, ns, huge[0]) or ""
    assert "could ever hold at most 2 of them" in reason, reason
    small = gang_pods(ext.api, ns, "small", 2, 8, selector=selector)
    wait_for(lambda: len(bound(ext.api, ns, small)) == 2, 60, "the small gang placed beside the refused one")
