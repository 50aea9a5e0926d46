"""A score worked out once serves every node built and used alike (extender.decide): on a cluster
of many identical nodes in a few usage patterns, every node's score equals a fresh `score` of that
node, for pod shapes whose selectors read a per-GPU attribute (uuid) and ask for equal attributes
too, and the state keeps one usage object per value."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from extender.config import ExtenderConfig
from extender.decide import Decider
from extender.scoring import score
from extender.state import ClusterState
from testkit import builders
from testkit.builders import CREATED, DRIVER, GPU_CLASS, claimed_pod

NS = "ns"
PATTERNS = [
    [],
    ["gpu-0"],
    ["gpu-0", "gpu-1", "gpu-2"],
    ["gpu-4", "gpu-5", "gpu-6", "gpu-7"],
    [f"gpu-{i}" for i in range(8)],
]


def _template(name: str, count: int, selector: str | None = None, match: str | None = None) -> dict[str, Any]:
    template = builders.claim_template(name, count, namespace=NS)
    request = template["spec"]["spec"]["devices"]["requests"][0]["exactly"]
    if selector:
        request["selectors"] = [{"cel": {"expression": selector}}]
    if match:
        template["spec"]["spec"]["devices"]["constraints"] = [{"requests": ["gpus"], "matchAttribute": match}]
    return template


@pytest.mark.parametrize("seed", [1, 2])
def test_every_nodes_score_equals_a_fresh_score_of_that_node(seed: int) -> None:
    rng = random.Random(seed)  # noqa: S311 - reproducible layouts, not secrets
    node_objects, slices = builders.node_objects({f"n{index:03d}": {} for index in range(120)})
    uuid_of = {}
    for resource_slice in slices:  # every GPU a uuid of its own, as on real hardware
        for device in resource_slice["spec"].get("devices") or []:
            attributes = device.get("attributes") or {}
            if "uuid" in attributes:
                attributes["uuid"] = {"string": f"GPU-{resource_slice['spec']['nodeName']}-{device['name']}"}
                uuid_of[(resource_slice["spec"]["nodeName"], device["name"])] = attributes["uuid"]["string"]
    one = builders.claim_template("one", 1, namespace=NS)
    pods, claims = [], []
    for node in node_objects:
        name = node["metadata"]["name"]
        for gpu in rng.choice(PATTERNS):
            member, claim = claimed_pod(f"{name}-{gpu}", one, NS)
            member["spec"]["nodeName"] = name
            claim["status"] = builders.allocated_claim(
                claim["metadata"]["name"], name, [gpu], NS, reserved_for=member["metadata"]["name"]
            )["status"]
            pods.append(member)
            claims.append(claim)
    target = "n007"
    shapes = [
        _template("two", 2),
        _template("four-same-numa", 4, match=f"{DRIVER}/numaNode"),
        _template("not-one-gpu", 1, selector=f"device.attributes['{DRIVER}'].uuid != '{uuid_of[(target, 'gpu-3')]}'"),
    ]
    state = ClusterState(DRIVER)
    objects = {
        "nodes": node_objects,
        "resourceslices": slices,
        "pods": pods,
        "resourceclaims": claims,
        "resourceclaimtemplates": [one, *shapes],
        "deviceclasses": [GPU_CLASS],
        "podgroups": [],
        "jobsets": [],
    }
    for kind, items in objects.items():
        state.replace(kind, json.loads(json.dumps(items)))
    view = state.view()
    assert len({id(u) for u in view.usage.values()}) <= len(PATTERNS), "one usage object per value"
    decider = Decider(ExtenderConfig())
    names = sorted(view.nodes)
    for shape in shapes:
        pod = builders.pod(
            f"asks-{shape['metadata']['name']}", namespace=NS, template=shape["metadata"]["name"], created=CREATED
        )
        scores = decider.prioritize(view, pod, names)
        demand = decider.demand(view, pod)
        fresh = {
            name: score(view.nodes[name], view.usage[name], demand, decider.matcher, decider.config.weights)
            for name in names
        }
        assert scores == fresh, shape["metadata"]["name"]
    assert len(set(fresh.values())) > 1
