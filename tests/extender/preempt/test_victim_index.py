"""The victim index a deciding replica keeps between decisions, brought up to each view from the
state's journal, equals one built from scratch on that view, over random streams of watch events
(claims allocated and freed, pods going, deleted and recreated under their names, other drivers'
devices, a whole kind listed again)."""

from __future__ import annotations

import copy
import random

import pytest

from extender.cluster.state import ClusterState
from extender.cluster.view import ClusterView
from extender.preempt.victim_index import VictimIndex
from testkit import builders
from testkit.builders import DRIVER, GPU_CLASS, claim_template, claimed_pod
from tests.extender.cluster.test_partners import nic_claim, nic_slice

NS = "ns"


def _same(kept: VictimIndex, view: ClusterView) -> None:
    fresh = VictimIndex(DRIVER)
    fresh.update(view)
    assert kept.claims == fresh.claims
    assert kept.pods == fresh.pods
    assert {n: c for n, c in kept.node_claims.items() if c} == dict(fresh.node_claims)
    assert {p: n for p, n in kept.placed.items() if n} == dict(fresh.placed)
    assert {p: c for p, c in kept.pod_claims.items() if c} == {p: c for p, c in fresh.pod_claims.items() if c}
    assert kept.gone == fresh.gone
    for node in view.nodes:
        assert kept.holders(node) == fresh.holders(node)
        for priority in (5, 50, 500):
            assert kept.region_costs((node,), priority) == fresh.region_costs((node,), priority)


@pytest.mark.parametrize("seed", range(12))
def test_kept_up_to_date_it_equals_one_built_anew(seed: int) -> None:
    rng = random.Random(seed)  # noqa: S311 - reproducible streams
    names = ["a", "b", "c"]
    nodes, slices = builders.node_objects({name: {} for name in names})
    slices.append(nic_slice("a", {"nic-0": 0, "nic-1": 1}))
    one = claim_template("one", 1, namespace=NS)
    state = ClusterState(DRIVER)
    pods, claims = [], []
    for index in range(18):
        pod, claim = claimed_pod(f"p{index}", one, NS)
        node = names[index % 3]
        pod["spec"]["nodeName"] = node
        pod["spec"]["priority"] = rng.choice((0, 10, 100))
        pod["status"]["startTime"] = f"2026-12-01T00:{index:02d}:00Z"
        claim["status"] = builders.allocated_claim(
            claim["metadata"]["name"], node, [f"gpu-{index // 3}"], NS, reserved_for=pod["metadata"]["name"]
        )["status"]
        pods.append(pod)
        claims.append(claim)
    nic = nic_claim("p0-nic", "a", "nic-0")
    nic["status"]["reservedFor"] = [{"resource": "pods", "name": "p0", "uid": "uid-p0"}]
    claims.append(nic)
    for kind, items in {
        "nodes": nodes,
        "resourceslices": slices,
        "pods": pods,
        "resourceclaims": claims,
        "resourceclaimtemplates": [one],
        "deviceclasses": [GPU_CLASS],
        "podgroups": [],
        "jobsets": [],
    }.items():
        state.replace(kind, copy.deepcopy(items))
    kept = VictimIndex(DRIVER)
    kept.update(state.view())
    _same(kept, state.view())
    for _ in range(60):
        event = rng.choice(("free", "take", "going", "delete", "recreate", "relist", "nic", "node"))
        key = (NS, f"p{rng.randrange(18)}")
        claim_key = (NS, f"{key[1]}-gpus")
        if event in ("free", "take") and claim_key in state.objects["resourceclaims"]:
            claim = copy.deepcopy(state.objects["resourceclaims"][claim_key])
            original = next(c for c in claims if c["metadata"]["name"] == claim_key[1])
            claim["status"] = {} if event == "free" else copy.deepcopy(original["status"])
            state.apply("MODIFIED", "resourceclaims", claim)
        elif event == "going" and key in state.objects["pods"]:
            pod = copy.deepcopy(state.objects["pods"][key])
            pod["metadata"]["deletionTimestamp"] = "2026-12-01T01:00:00Z"
            state.apply("MODIFIED", "pods", pod)
        elif event == "delete" and key in state.objects["pods"]:
            state.apply("DELETED", "pods", state.objects["pods"][key])
        elif event == "recreate":
            pod = copy.deepcopy(next(p for p in pods if p["metadata"]["name"] == key[1]))
            pod["metadata"]["uid"] = f"uid-{key[1]}-{rng.randrange(1000)}"
            pod["spec"]["priority"] = rng.choice((0, 10, 100))
            state.apply("ADDED", "pods", pod)
        elif event == "relist":
            state.replace("resourceclaims", copy.deepcopy(list(state.objects["resourceclaims"].values())))
        elif event == "nic":
            current = state.objects["resourceclaims"].get((NS, "p0-nic"))
            if current is None:
                state.apply("ADDED", "resourceclaims", copy.deepcopy(nic))
            else:
                state.apply("DELETED", "resourceclaims", current)
        else:  # the NIC slice goes or comes: the NIC's claim is placed by the node that publishes it
            node_a = copy.deepcopy(state.objects["nodes"][("", "a")])
            node_a["metadata"]["labels"] = {"bump": str(rng.randrange(1000))}
            state.apply("MODIFIED", "nodes", node_a)
        view = state.view()
        kept.update(view)
        _same(kept, view)
