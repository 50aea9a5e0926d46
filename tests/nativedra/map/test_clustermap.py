"""The cluster map, from plain API objects: who holds how much of which GPU, gangs and pending
pods with the scheduler's reason, drawn as text and as a picture."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Any

import pytest

from dra_driver.discovery.simulated import SimulatedBackend
from dra_driver.publishing.publish_config import PublishConfig
from dra_driver.publishing.slices import devices_and_counters, pack_slices
from extender.pods.gang import GANG, GANG_SIZE
from nativedra.base.kube.names import DRIVER_NAME
from nativedra.map.clustermap import BAR, GPU_W, ClusterMap, build_map, render_svg, render_text

NODE = "node-a"
INVENTORY = SimulatedBackend("h100-8x").discover()


def _slices(node: str) -> list[dict[str, Any]]:
    """What the plugin publishes for an H100 node."""
    devices, counters = devices_and_counters(INVENTORY, PublishConfig())
    return [{"spec": spec} for spec in pack_slices(devices, counters, node)]


def _claim(name: str, device: str, pods: list[str], driver: str = DRIVER_NAME, **result: Any) -> dict[str, Any]:
    allocated = {"request": "gpus", "driver": driver, "pool": NODE, "device": device, **result}
    return {
        "metadata": {"namespace": "ns", "name": name},
        "status": {
            "allocation": {"devices": {"results": [allocated]}},
            "reservedFor": [{"resource": "pods", "name": pod} for pod in pods],
        },
    }


def _pod(
    name: str, node: str | None = None, labels: dict[str, str] | None = None, reason: str | None = None
) -> dict[str, Any]:
    conditions = [{"type": "PodScheduled", "status": "False", "message": reason}] if reason else []
    return {
        "metadata": {"namespace": "ns", "name": name, "labels": labels or {}},
        "spec": {"nodeName": node} if node else {},
        "status": {"conditions": conditions},
    }


def _mig_device() -> tuple[str, int, float]:
    """A published 1g.10gb placement: (device name, GPU index, the part of the GPU it holds)."""
    devices, _ = devices_and_counters(INVENTORY, PublishConfig())
    device = next(d for d in devices if d.mig_profile == "1g.10gb")
    profile = next(p for p in device.gpu.mig_profiles if p.name == "1g.10gb")
    return device.name, device.gpu_index, profile.placements[0].size / device.gpu.mig_memory_slices


@pytest.fixture
def cluster() -> ClusterMap:
    gang = {GANG: "train", GANG_SIZE: "2"}
    mig, _, _ = _mig_device()
    return build_map(
        [{"metadata": {"name": NODE, "labels": {"example.com/rack": "r1"}}}, {"metadata": {"name": "cpu-only"}}],
        [*_slices(NODE), *_slices("not-a-node")],
        [
            _claim("whole", "gpu-0", ["train-0"]),
            _claim("quarter", "gpu-1-1of4-0", ["infer"]),
            _claim("slice", mig, []),
            _claim("foreign", "gpu-2", ["other"], driver="gpu.example.com"),
            {"metadata": {"namespace": "ns", "name": "unallocated"}, "status": {}},
        ],
        [
            _pod("train-0", NODE, gang),
            _pod("infer", NODE),
            _pod("train-1", labels=gang, reason="0/1 nodes have 2 free GPUs"),
            _pod("new"),
        ],
    )


def test_each_allocation_is_the_part_of_its_gpu_it_holds(cluster: ClusterMap) -> None:
    (node,) = [n for n in cluster.nodes if n.gpus]
    assert node.name == NODE and sorted(node.gpus) == [gpu.index for gpu in INVENTORY.gpus]
    whole, quarter = node.gpus[0].holdings, node.gpus[1].holdings
    assert [(h.share, h.label, h.pods) for h in whole] == [(1.0, "whole", ["ns/train-0"])]
    assert [(h.share, h.label, h.pods) for h in quarter] == [(0.25, "1/4", ["ns/infer"])]
    mig, index, share = _mig_device()
    (held,) = node.gpus[index].holdings
    assert (held.device, held.share, held.label, held.pods) == (mig, share, "1g.10gb", [])
    assert node.gpus[2].holdings == [], "another driver's allocation is not ours to draw"
    assert index not in {0, 1, 2}


def test_pods_are_bound_or_pending_with_the_schedulers_reason(cluster: ClusterMap) -> None:
    assert cluster.bound == {"ns/train-0": NODE, "ns/infer": NODE}
    assert cluster.pending == [
        ("ns/new", "not yet considered by the scheduler"),
        ("ns/train-1", "0/1 nodes have 2 free GPUs"),
    ]
    assert cluster.gangs == {"ns/train-0": "gang:train", "ns/train-1": "gang:train"}


def test_the_text_map_draws_each_gpu_as_a_bar_with_its_holders(cluster: ClusterMap) -> None:
    text = render_text(cluster, ("example.com/rack",))
    assert f"node {NODE}  rack=r1  ({len(INVENTORY.gpus)} GPUs, " in text
    lines = {line.split()[0]: line for line in text.splitlines() if line.startswith("  gpu-")}
    assert "[" + "#" * BAR + "]" in lines["gpu-0"] and "whole -> ns/train-0 [gang:train]" in lines["gpu-0"]
    assert "[" + "#" * (BAR // 4) + "." * (BAR - BAR // 4) + "]" in lines["gpu-1"]
    assert lines["gpu-2"].endswith("free")
    _, index, _ = _mig_device()
    assert "(claim not in use)" in lines[f"gpu-{index}"]
    assert "cpu-only" not in text, "a node without GPUs is left out"
    assert text.endswith(
        "pending pods:\n  ns/new: not yet considered by the scheduler\n"
        "  ns/train-1 [gang:train]: 0/1 nodes have 2 free GPUs"
    )


def test_the_picture_is_svg_with_a_bar_part_per_holding_and_escaped_text(cluster: ClusterMap) -> None:
    cluster.pending.append(("ns/<script>", "a & b"))
    svg = ET.fromstring(render_svg(cluster))  # noqa: S314 - our own output
    assert svg.tag == "{http://www.w3.org/2000/svg}svg"
    parts = [
        r
        for r in svg.iter("{http://www.w3.org/2000/svg}rect")
        if r.find("{http://www.w3.org/2000/svg}title") is not None
    ]
    widths = sorted(float(r.attrib["width"]) for r in parts)
    _, _, mig_share = _mig_device()
    assert widths == sorted([round(GPU_W * mig_share, 1), GPU_W * 0.25, float(GPU_W)])
    texts = [t.text for t in svg.iter("{http://www.w3.org/2000/svg}text")]
    assert "ns/<script>: a & b" in texts, "text is escaped, so the document still parses"


def test_an_empty_cluster_still_renders() -> None:
    empty = build_map([], [], [], [])
    assert render_text(empty) == "\npending pods: none"
    picture = ET.fromstring(render_svg(empty))  # noqa: S314 - our own output
    assert picture.tag.endswith("svg")
