"""`nativedra map` against a cluster it knows only through a kubeconfig: the real scheduler calling
the extender, nodes published with the plugin's builder, a gang holding its last slot, a gang that
cannot fit waiting with the extender's reason, and GPU pods running. The command lists the API and
runs the extender's planner itself: what it shows as held is what the running extender holds."""

from __future__ import annotations

import subprocess
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import pytest

from extender.plan.config import RACK_LABEL
from nativedra.base.kube.names import GPU_CLASS
from nativedra.cluster import ControlPlane, commands, wait_for
from nativedra.objects import claim_template, gpu_pod, request
from testkit.extender_harness import (
    ExtenderCluster,
    bound,
    extender_cluster,
    fresh_namespace,
    gang_pods,
    wait_judged_unschedulable,
)

pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def harness(control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ExtenderCluster]:
    config = {"topologyLevels": [RACK_LABEL, "kubernetes.io/hostname"], "planTimeoutSeconds": 600}
    with extender_cluster(Path(tmp_path_factory.mktemp("map")), config, shared=control_plane) as cluster:
        yield cluster


def test_the_map_of_a_cluster_shows_holds_waiting_gangs_and_fragmentation(
    harness: ExtenderCluster, tmp_path: Path
) -> None:
    api = harness.api
    with fresh_namespace(api, "map") as namespace:
        try:
            harness.add_gpu_nodes(2, {RACK_LABEL: "rack-a"})
            harness.add_gpu_nodes(1, {RACK_LABEL: "rack-b"})
            claim_template(api, namespace, "one", [request("gpus", GPU_CLASS, count=1)])
            gpu_pod(api, namespace, "small", "one", node=harness.nodes[2])
            # One member of a gang of two created and bound: the extender holds the other's node.
            held = gang_pods(
                api,
                namespace,
                "held",
                2,
                8,
                annotations={"nativedra.dev/topology-required": RACK_LABEL},
                members=range(1),
            )
            wait_for(lambda: len(bound(api, namespace, [*held, "small"])) == 2, 60, "the member and a pod bound")
            waiting = gang_pods(api, namespace, "huge", 4, 8)
            wait_judged_unschedulable(api, namespace, waiting)
            started = time.monotonic()
            svg = tmp_path / "map.svg"
            command = commands.nativedra(
                "map",
                "--kubeconfig",
                str(harness.plane.kubeconfig),
                "--namespace",
                harness.namespace,
                "--svg",
                str(svg),
            )
            done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=True)
            took = time.monotonic() - started
        finally:
            harness.remove_nodes()
    text = done.stdout
    assert all(len(line) <= 80 for line in text.splitlines()), text
    assert text.startswith("3 GPU nodes, 24 GPUs, 15.00 free"), text
    joined = " ".join(line.strip() for line in text.splitlines())  # wrapped lines read whole
    assert f"{namespace}/gang:held 1/2: holding 1 slot(s) in {RACK_LABEL} rack-a for " in joined, text
    assert f"{namespace}/gang:huge 0/4: waiting: gang {namespace}/gang:huge" in joined, text
    assert "pending GPU pods: 4" in text and f"{namespace}/huge-0: " in text
    assert "rack-b: 1 nodes, 7.00 free, 100% stranded" in text, text
    assert ET.parse(svg).getroot().tag.endswith("svg")  # noqa: S314 - our own output
    print(f"\nnativedra map on 3 nodes: {took:.1f} s ({done.stderr.strip()})")
