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


def _busy_state(rng: random.Random) -> tuple[ClusterState, list[dict[str, Any]], list[dict[str, Any]]]:
    """120 nodes in a few usage patterns, every GPU with a uuid of its own; the pod shapes; the claims."""
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
    return state, shapes, claims


@pytest.mark.parametrize("seed", [1, 2])
def test_every_nodes_score_equals_a_fresh_score_of_that_node(seed: int) -> None:
    state, shapes, _ = _busy_state(random.Random(seed))  # noqa: S311 - reproducible layouts, not secrets
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


def test_an_answer_patched_after_watch_events_equals_a_fresh_one() -> None:
    """`prioritize` rescores only the nodes whose objects changed since its last answer for the
    pod's demand: after each round of claims freed or taken and node labels changed, the answer
    equals a fresh score of every node."""
    rng = random.Random(3)  # noqa: S311 - reproducible events, not secrets
    state, shapes, claims = _busy_state(rng)
    decider = Decider(ExtenderConfig(stale_plan_seconds=0))  # judged by a plan of each view, not an older one
    pods = [builders.pod(f"asks-{s['metadata']['name']}", namespace=NS, template=s["metadata"]["name"]) for s in shapes]
    allocations = {c["metadata"]["name"]: c["status"] for c in claims}
    changed_scores = 0
    for round_number in range(25):
        view = state.view()
        for pod in pods:
            scores = decider.prioritize(view, pod, sorted(view.nodes))  # a new list, as each request decodes one
            demand = decider.demand(view, pod)
            fresh = {
                name: score(node, view.usage[name], demand, decider.matcher, decider.config.weights)
                for name, node in view.nodes.items()
            }
            assert scores == fresh, (round_number, pod["metadata"]["name"])
        before = dict(scores)
        for listed in rng.sample(claims, 6):
            claim = json.loads(json.dumps(listed))
            claim["status"] = {} if rng.random() < 0.5 else allocations[claim["metadata"]["name"]]
            state.apply("MODIFIED", "resourceclaims", claim)
        node = json.loads(json.dumps(rng.choice(list(state.objects["nodes"].values()))))
        node["metadata"].setdefault("labels", {})["round"] = str(round_number)
        state.apply("MODIFIED", "nodes", node)
        view = state.view()
        changed_scores += decider.prioritize(view, pods[-1], sorted(view.nodes)) != before
    assert changed_scores > 10, "the events changed answers: the patching was put to the test"
