"""Node scores: NUMA fit, packing, fraction packing."""

from __future__ import annotations

from extender.devices.cel_eval import Selectors
from extender.devices.node_usage import Node, Usage, usage_from
from extender.plan.capacity import Matcher
from extender.plan.config import ScoreWeights
from extender.plan.scoring import score
from extender.pods.demand import Demand, Request
from testkit.builders import DRIVER, FRACTION, GPU, allocated_claim, gpu_nodes

MATCHER = Matcher(Selectors(), DRIVER)
WEIGHTS = ScoreWeights()
# a100-8x: gpu-0..3 sit on NUMA node 0, gpu-4..7 on NUMA node 1.
NUMA_0 = ["gpu-0", "gpu-1", "gpu-2", "gpu-3"]


def scores(nodes: dict[str, Node], usage: dict[str, Usage], demand: Demand) -> dict[str, int]:
    return {name: score(node, usage[name], demand, MATCHER, WEIGHTS) for name, node in nodes.items()}


def test_numa_fit_beats_a_split() -> None:
    nodes = gpu_nodes({"fit": {}, "split": {}})
    usage = {
        "fit": Usage(devices=set(NUMA_0)),  # gpu-4..7 free: one NUMA node
        "split": Usage(devices={"gpu-0", "gpu-1", "gpu-4", "gpu-5"}),  # two free on each NUMA node
    }
    result = scores(nodes, usage, Demand((Request((GPU,), 4),)))
    assert result["fit"] > result["split"] > 0


def test_packing_prefers_the_fuller_node() -> None:
    nodes = gpu_nodes({"full": {}, "empty": {}})
    usage = {"full": Usage(devices={f"gpu-{i}" for i in range(6)}), "empty": Usage()}
    result = scores(nodes, usage, Demand((Request((GPU,), 1),)))
    assert result["full"] > result["empty"] > 0, "a whole free node stays free for a big job"


def test_fraction_packing_prefers_an_already_shared_gpu() -> None:
    nodes = gpu_nodes({"shared": {}, "fresh": {}}, fractions=(2,))
    usage = usage_from([allocated_claim("half", "shared", ["gpu-0-1of2-0"])], nodes, DRIVER)
    result = scores(nodes, usage, Demand((Request((FRACTION,), 1),)))
    assert result["shared"] > result["fresh"] > 0, "the other half of gpu-0 goes first"
