"""Two extender replicas behind one Service: killing either one mid-gang changes no placement.

The real kube-scheduler calls a loopback round-robin balancer standing for the extender's Service
(mutual TLS passes through it to each replica). Each replica derives a gang's domain from the API
alone, from the members already placed, so the replica that survives answers as the killed one
would have: the rest of the gang joins the first members' rack, and a plain pod created meanwhile
does not take the nodes kept for them.
"""

from __future__ import annotations

import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from extender.config import RACK_LABEL
from kube.names import GPU_CLASS
from nativedra.cluster import ControlPlane, wait_for
from nativedra.cluster.waits import unschedulable_message
from nativedra.objects import claim_template, gpu_pod, request
from testkit.extender_harness import (
    ReplicatedExtenders,
    bound,
    fresh_namespace,
    gang_pods,
    replicated_extender_cluster,
    settled_placement,
)

TEST_LABEL = "e2e.nativedra.dev/test"
GANG_SIZE = 4
# Two racks that could each hold the whole gang (4 pods x 8 GPUs, one per node): a replica that
# ignored the placed members would plan the rest in the other rack and split the gang.
RACKS = {"rack-a": 4, "rack-b": 4}
COMPETITOR = "competitor"


@pytest.fixture(scope="module")
def replicated(control_plane: ControlPlane) -> Iterator[ReplicatedExtenders]:
    root = Path(tempfile.mkdtemp(prefix="nd-replicas-", dir="/tmp"))
    try:
        config = {"topologyLevels": [RACK_LABEL, "kubernetes.io/hostname"]}
        with replicated_extender_cluster(root, config, shared=control_plane) as cluster:
            yield cluster
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def ext(replicated: ReplicatedExtenders) -> Iterator[ReplicatedExtenders]:
    """Both replicas running at the start (the Deployment replaced the one killed before); the
    test's nodes removed after."""
    replicated.start_stopped()
    yield replicated
    replicated.first.remove_nodes()


@pytest.fixture
def ns(replicated: ReplicatedExtenders) -> Iterator[str]:
    with fresh_namespace(replicated.first.api, "replicas") as name:
        yield name


@pytest.mark.parametrize(
    ("serving", "killed"),
    [
        pytest.param(0, None, id="no-kill"),
        pytest.param(0, "serving", id="kill-0-serving"),
        pytest.param(1, "serving", id="kill-1-serving"),
        pytest.param(1, "idle", id="kill-0-idle"),
        pytest.param(0, "idle", id="kill-1-idle"),
    ],
)
def test_killing_either_replica_mid_gang_changes_no_placement(
    ext: ReplicatedExtenders, ns: str, serving: int, killed: str | None, capsys: pytest.CaptureFixture[str]
) -> None:
    """A gang of 4 pods x 8 GPUs required in one rack is created two members at a time; between
    the halves one replica is SIGKILLed and a plain 8-GPU pod that fits only the gang's rack is
    created. The gang completes in the rack of its first member (what the run with no kill does)
    and the plain pod waits, told the nodes are held for the gang.

    The scheduler keeps its connection alive, so the replica the balancer routes it to ("serving")
    answers, and plans, the first members; the other one ("idle") only watches. Killing the serving
    one moves the scheduler to a replica that never saw the gang's plan; killing the idle one must
    disturb nothing. Each replica is killed in each role, and after each kill the balancer's next
    pick is the dead replica, so every new connection has to be skipped over to the survivor."""
    api = ext.first.api
    test = uuid.uuid4().hex[:6]
    rack_of = {
        node: rack
        for rack, count in RACKS.items()
        for node in ext.first.add_gpu_nodes(count, {TEST_LABEL: test, RACK_LABEL: rack})
    }
    required = {"nativedra.dev/topology-required": RACK_LABEL}

    def members(indices: range) -> list[str]:
        return gang_pods(
            api, ns, "train", GANG_SIZE, 8, selector={TEST_LABEL: test}, annotations=required, members=indices
        )

    ext.balancer.route_to(serving)
    first = members(range(2))
    wait_for(lambda: len(bound(api, ns, first)) == len(first), 60, "the first 2 members bound")
    rack = rack_of[bound(api, ns, first)[first[0]]]
    assert ext.balancer.latest == serving, f"the first members were answered by replica {ext.balancer.latest}"
    victim = {None: None, "serving": serving, "idle": (serving + 1) % len(ext.replicas)}[killed]
    served_before_kill = list(ext.balancer.served)
    if victim is not None:
        ext.replicas[victim].kill_extender()
        ext.balancer.route_to(victim)  # the scheduler's next connection tries the dead replica first

    claim_template(api, ns, COMPETITOR, [request("gpus", GPU_CLASS, count=8)])
    gpu_pod(api, ns, COMPETITOR, COMPETITOR, node_selector={TEST_LABEL: test, RACK_LABEL: rack})
    wait_for(
        lambda: "held for gang" in (unschedulable_message(api, ns, COMPETITOR) or ""),
        60,
        "the plain pod refused the gang's nodes",
        lambda: str(unschedulable_message(api, ns, COMPETITOR)),
    )
    rest = members(range(2, GANG_SIZE))
    wait_for(lambda: len(bound(api, ns, first + rest)) == GANG_SIZE, 60, "the whole gang bound")
    placement = settled_placement(api, ns, [*first, *rest, COMPETITOR])
    gang_racks = {rack_of[placement[name]] for name in first + rest}
    with capsys.disabled():
        print(
            f"\nreplica {serving} serving, killed {victim}: gang in {sorted(gang_racks)}, first member in {rack}; "
            f"connections per replica so far: {served_before_kill} before the kill, at the end {ext.balancer.served}"
        )
    assert gang_racks == {rack}, placement
    assert len(set(placement.values())) == GANG_SIZE, f"one member per 8-GPU node: {placement}"
    assert COMPETITOR not in placement, f"the plain pod took a node kept for the gang: {placement}"
    if victim is not None:
        survivor = (victim + 1) % len(ext.replicas)
        assert ext.balancer.served[survivor] > served_before_kill[survivor], "the survivor answered the rest"
