"""A cluster whose API server does not serve partitionable devices or consumable capacity (the
1.34/1.35 defaults; here the 1.37 gates turned off, which needs no old build): the plugin sees
the fields dropped, publishes whole GPUs only, says so in its log and a Node event, and the real
scheduler never hands out a GPU twice."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client, config

from e2e.dra import allocated_results
from e2e.extender_harness import fresh_namespace
from e2e.node_plugin import NodePlugin
from nativedra.cluster import ControlPlane, create_fake_node, resolve, wait_for
from nativedra.cluster.commands import NodeDirs
from nativedra.cluster.components import Features
from nativedra.cluster.waits import unschedulable_message
from nativedra.kubelet_client import make_dev_tree
from nativedra.objects import apply_file, claim_template, device_classes, gpu_pod, published_devices, request

OLD_DEFAULTS = Features(
    {"DRAPartitionableDevices": False, "DRAConsumableCapacity": False},
    why="what 1.34/1.35 API servers serve by default: no partitionable devices, no consumable capacity",
)


@pytest.fixture(scope="module")
def old_plane() -> Iterator[ControlPlane]:
    root = Path(tempfile.mkdtemp(prefix="nd-old-", dir="/tmp"))
    plane = ControlPlane(state_dir=root / "cluster", binaries=resolve(), features=OLD_DEFAULTS)
    plane.start()
    try:
        yield plane
    finally:
        plane.stop()
        shutil.rmtree(root, ignore_errors=True)


def test_only_whole_gpus_are_published_and_none_is_handed_out_twice(old_plane: ControlPlane) -> None:
    api = config.new_client_from_config(config_file=str(old_plane.kubeconfig))
    apply_file(api, device_classes())
    create_fake_node(api, "old-node")
    root = Path(tempfile.mkdtemp(prefix="nd-oldp-", dir="/tmp"))
    make_dev_tree(NodeDirs(root).dev, range(8))
    plugin = NodePlugin(old_plane, root, "old-node", ("--backend", "simulated", "--profile", "h100-8x"))
    plugin.start()
    try:
        # h100-8x: 6 GPUs in whole-GPU mode, 2 in MIG mode (which can run no whole-GPU work).
        devices = wait_for(
            lambda: published_devices(api, "old-node") if len(published_devices(api, "old-node")) == 6 else None,
            60,
            "6 whole GPUs published",
            plugin.log.read_text,
        )
        assert {d["attributes"]["type"]["string"] for d in devices.values()} == {"gpu"}
        assert not any("consumesCounters" in d for d in devices.values())
        log = plugin.log.read_text()
        assert log.count("does not store") == 1 and "DRAPartitionableDevices" in log, log[-2000:]
        events = client.CoreV1Api(api).list_namespaced_event("default", field_selector="involvedObject.name=old-node")
        assert [e.reason for e in events.items] == ["DeviceFeaturesNotServed"]
        with fresh_namespace(api, "old") as namespace:
            claim_template(api, namespace, "one", [request("gpus", "gpu.nativedra.dev")])
            claim_template(api, namespace, "half", [request("gpus", "gpu-fraction.nativedra.dev")])
            names = [f"p{index}" for index in range(7)]
            for name in names:
                gpu_pod(api, namespace, name, "one")

            def six_bound_one_waiting() -> list[str] | None:
                pods = {p.metadata.name: p for p in client.CoreV1Api(api).list_namespaced_pod(namespace).items}
                placed = [name for name in names if pods[name].spec.node_name]
                waiting = [name for name in names if name not in placed]
                judged = len(waiting) == 1 and unschedulable_message(api, namespace, waiting[0])
                return placed if len(placed) == 6 and judged else None

            placed = wait_for(six_bound_one_waiting, 120, "6 of 7 one-GPU pods bound, the 7th judged")
            taken = [allocated_results(api, namespace, name)[0]["device"] for name in placed]
            assert len(set(taken)) == 6, f"a GPU was handed out twice: {taken}"
            gpu_pod(api, namespace, "fraction", "half")
            assert wait_for(lambda: unschedulable_message(api, namespace, "fraction"), 60, "no fraction is published")
    finally:
        plugin.stop()
        shutil.rmtree(root, ignore_errors=True)
