"""`nativedra map`'s report, pure: fragmentation is free capacity no whole-node job can use, every
line fits the terminal, and gangs say what the extender holds for them and since when."""

from __future__ import annotations

from dra_driver.publishing.published import DeviceKind
from extender.pods.demand import Demand
from extender.pods.gang import GangRef
from extender.pods.model import Gang, HoldClock, Member, Plan
from nativedra.map.clustermap import ClusterMap, GpuView, Holding, NodeView
from nativedra.map.report import NODE_LINES_UP_TO, fragmentation, gang_rows, render_report


def _node(name: str, used: list[float], rack: str = "r1") -> NodeView:
    node = NodeView(name, {"rack": rack})
    for index, part in enumerate(used):
        gpu = GpuView(index, "NVIDIA H100 80GB HBM3", index // 4)
        if part:
            gpu.holdings.append(Holding(f"gpu-{index}", DeviceKind.GPU, part, "whole", [f"ns/p-{name}-{index}"]))
        node.gpus[index] = gpu
    return node


def test_free_capacity_on_nodes_partly_in_use_is_stranded() -> None:
    free_node = _node("a", [0] * 8)
    half = _node("b", [1, 1, 1, 1, 0, 0, 0, 0.5])
    result = fragmentation([free_node, half])
    assert result.free == 8 + 3.5
    assert result.stranded == 3.5 and result.partial_gpus == 0.5
    assert result.share == 3.5 / 11.5
    assert fragmentation([]).share == 0.0


def test_every_line_fits_the_terminal_for_small_and_large_clusters() -> None:
    for count in (3, NODE_LINES_UP_TO + 1):
        nodes = [_node(f"node-with-a-rather-long-name-{index:04d}", [1, 0.25] + [0] * 6) for index in range(count)]
        pending = [("team-with-long-name/pod-" + "x" * 60, "0/3 nodes are available: " + "y" * 200)]
        text = render_report(ClusterMap(nodes, pending, {}), [], [], level="rack", width=80, all_nodes=True)
        assert max(len(line) for line in text.splitlines()) <= 80
        assert "pending GPU pods: 1" in text


def test_a_gangs_row_says_what_is_held_where_and_for_how_long() -> None:
    ref = GangRef("ns/gang:train", 3, "gang", required_topology="rack")
    gang = Gang(ref, [Member("ns/t-0", "a", Demand(()), 0.0), Member("ns/t-1", None, Demand(()), 0.0)])
    plan = Plan("ns/gang:train", True, {"b": 1, "c": 1}, domain="r1")
    clock = HoldClock(since=100.0, members=frozenset(), expired=False)
    (row,) = gang_rows([gang], {ref.key: plan}, {ref.key: clock}, now=142.0)
    assert (row.placed, row.size) == (1, 3)
    assert row.state == "holding 2 slot(s) in r1 for 42 s: b, c"
    waiting = Plan("ns/gang:train", False, reason="gang ns/gang:train needs 2 more pod(s) x 8 device(s)")
    (row,) = gang_rows([gang], {ref.key: waiting}, {}, now=142.0)
    assert row.state == "waiting: gang ns/gang:train needs 2 more pod(s) x 8 device(s)"
