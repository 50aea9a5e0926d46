"""A score worked out once serves every node built and used alike (extender.plan.decide): on a cluster
of many identical nodes in a few usage patterns, every node's score equals a fresh `score` of that
node, for pod shapes whose selectors read a per-GPU attribute (uuid) and ask for equal attributes
too, and the state keeps one usage object per value."""

from __future__ import annotations

import json
import random
import time
from typing import Any

import pytest

from extender.cluster.state import ClusterState
from extender.plan.config import ExtenderConfig
from extender.plan.decide import Decider
from extender.plan.scoring import score
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
        # Asks as "two" does with other selectors: matching the same devices (its scores are
        # shared with "two"'s), and matching fewer (they must not be).
        _template("two-by-product", 2, selector=f"device.attributes['{DRIVER}'].productName.startsWith('NVIDIA')"),
        _template("two-low-index", 2, selector=f"device.attributes['{DRIVER}'].index < 4"),
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


def _churn(state: ClusterState, rng: random.Random, claims: list[dict[str, Any]], round_number: int) -> dict[str, Any]:
    """Six claims freed or allocated again as listed, and one node relabelled (returned)."""
    for listed in rng.sample(claims, 6):
        claim = json.loads(json.dumps(listed))
        if rng.random() < 0.5:
            claim["status"] = {}
        state.apply("MODIFIED", "resourceclaims", claim)
    node: dict[str, Any] = json.loads(json.dumps(rng.choice(list(state.objects["nodes"].values()))))
    node["metadata"].setdefault("labels", {})["round"] = str(round_number)
    state.apply("MODIFIED", "nodes", node)
    return node


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
        _churn(state, rng, claims, round_number)
        view = state.view()
        changed_scores += decider.prioritize(view, pods[-1], sorted(view.nodes)) != before
    assert changed_scores > 10, "the events changed answers: the patching was put to the test"


def test_a_new_shape_scored_by_node_group_after_watch_events_equals_a_fresh_score() -> None:
    """A demand seen for the first time is scored once per group of nodes (model, usage object),
    the groups moved along by the state's journal: round after round of claims freed or taken,
    labels changed and a node removed, with a pending gang holding capacity on some nodes, a new
    shape's scores equal a fresh score of every node on the usage its pod is judged by."""
    rng = random.Random(5)  # noqa: S311 - reproducible events, not secrets
    state, _, claims = _busy_state(rng)
    gang = builders.claim_template("gang-gpus", 8, namespace=NS)
    state.apply("ADDED", "resourceclaimtemplates", gang)
    for index in range(2):  # two whole free nodes' worth, held for the gang while it waits
        member = builders.pod(
            f"gang-{index}", namespace=NS, template="gang-gpus", labels=builders.gang_labels("g", 2), created=CREATED
        )
        state.apply("ADDED", "pods", member)
    decider = Decider(ExtenderConfig(stale_plan_seconds=0))
    held_somewhere = 0
    for round_number in range(12):
        view = state.view()
        shape = builders.claim_template(f"shape-{round_number}", 1 + round_number % 4, namespace=NS)
        state.apply("ADDED", "resourceclaimtemplates", shape)
        view = state.view()
        pod = builders.pod(f"asks-{round_number}", namespace=NS, template=f"shape-{round_number}", created=CREATED)
        names = sorted(view.nodes)
        scores = decider.prioritize(view, pod, names)
        held = decider.plans.held_plan(view, time.time())[0]
        demand = decider.demand(view, pod)
        fresh = {
            name: score(view.nodes[name], held.held[name], demand, decider.matcher, decider.config.weights)
            for name in names
        }
        assert scores == fresh, round_number
        held_somewhere += bool(held.holders)
        node = _churn(state, rng, claims, round_number)
        if round_number == 6:
            state.apply("DELETED", "nodes", node)
    assert held_somewhere, "the gang held capacity: scores on held nodes were put to the test"
