"""Two teams on one cluster, with the real API server, kube-scheduler and extender. Team B writes
every label and annotation a namespace user can on its pods: a forged gang of 8 with one pod
created, a gang of 2 with one pod created, spares it was never granted, a Kueue label with no Kueue
behind it, and a required rack. Team A's priority-0 pods are kept off no more than the admin's
`maxNamespaceHoldShare` of the nodes, and off no node once team B's pods are gone. On 424026c the
forged gang alone held all 8 nodes from team A for the plan's 300 s, and again whenever capacity
freed."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from extender.plan.config import RACK_LABEL
from extender.recover.records import SPARES
from nativedra.base.kube.names import GPU_CLASS
from nativedra.cluster import ControlPlane, wait_for
from nativedra.objects import claim_template, gpu_pod, request
from testkit.extender_harness import ExtenderCluster, bound, extender_cluster, fresh_namespace, gang_pods

pytestmark = pytest.mark.timeout(600)
NODES = 8
SHARE = 0.25  # of 8 nodes: team B's waiting gangs hold capacity on 2 at most


@pytest.fixture(scope="module")
def extender(control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ExtenderCluster]:
    root = Path(tmp_path_factory.mktemp("tenants"))
    config = {"topologyLevels": [RACK_LABEL, "kubernetes.io/hostname"], "maxNamespaceHoldShare": SHARE}
    with extender_cluster(root, config, shared=control_plane) as harness:
        try:
            yield harness
        finally:
            harness.remove_nodes()


def test_a_team_writing_every_label_and_annotation_keeps_another_off_at_most_its_share_and_then_none(
    extender: ExtenderCluster,
) -> None:
    api = extender.api
    extender.add_gpu_nodes(NODES, labels={RACK_LABEL: "shared"})
    with fresh_namespace(api, "team-b") as team_b, fresh_namespace(api, "team-a") as team_a:
        forged = {"kueue.x-k8s.io/podset": "main", "kueue.x-k8s.io/queue-name": "none"}
        asks = {SPARES: "4", "nativedra.dev/topology-required": RACK_LABEL}
        b_pods = gang_pods(api, team_b, "big", 8, 8, extra_labels=forged, annotations=asks, members=range(1))
        b_pods += gang_pods(api, team_b, "pair", 2, 8, extra_labels=forged, annotations=asks, members=range(1))
        wait_for(lambda: len(bound(api, team_b, ["pair-0"])) == 1, 90, "team B's pair member bound")

        claim_template(api, team_a, "eight", [request("gpus", GPU_CLASS, count=8)])
        a_pods = [f"a-{index}" for index in range(NODES)]
        for name in a_pods:
            gpu_pod(api, team_a, name, "eight")
        # Team B runs on one node and may hold one more (its pair's missing member): 2 of 8.
        allowed = NODES - int(SHARE * NODES)
        wait_for(lambda: len(bound(api, team_a, a_pods)) >= allowed, 120, f"team A on {allowed} nodes")
        core = client.CoreV1Api(api)
        assert core.read_namespaced_pod("big-0", team_b).spec.node_name is None, "the forged gang never runs"

        for name in b_pods:
            core.delete_namespaced_pod(name, team_b, grace_period_seconds=0)
        wait_for(lambda: len(bound(api, team_a, a_pods)) == NODES, 120, "team A on every node once team B is gone")
