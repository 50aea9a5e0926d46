"""Kueue admits and, under TAS, chooses the domain; the extender places: pods Kueue still gates are
in no plan and hold nothing, a gang Kueue pinned to a rack is planned inside it, and the extender
never preempts for pods Kueue manages."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest
from kubernetes import client

from extender.cluster.membership import work_out
from extender.devices.node_usage import Usage
from extender.plan.config import ExtenderConfig
from extender.plan.decide import Decider
from extender.pods.asked import GangSources
from extender.pods.facts import PodFacts
from extender.pods.gang import KUEUE_REQUIRED
from extender.pods.kueue import (
    ADMISSION_GATE,
    HOSTNAME,
    TOPOLOGY_GATE,
    gated_by_kueue,
    managed_by_kueue,
    pinned_by_kueue,
)
from extender.preempt.preemptor import Preemption
from testkit.builders import CREATED, DRIVER, claim_template, gpu_nodes, jobset, jobset_pod, pod, racks, view

SOON_AFTER = datetime.fromisoformat(CREATED.replace("Z", "+00:00")).timestamp() + 10
TEMPLATES = [claim_template("one", 1), claim_template("eight", 8)]


def _gated(member: dict[str, Any], gate: str) -> dict[str, Any]:
    member["spec"]["schedulingGates"] = [{"name": gate}]
    return member


def _kueue_tas_pod(completion: int, *, rack: str | None, gate: str | None = None) -> dict[str, Any]:
    """A pod of a 4-pod JobSet that Kueue admitted with podset-required-topology: rack. Ungated
    (`gate` None) it carries the nodeSelector Kueue's TopologyUngater wrote; gated it has none yet.
    Later completions are newer (the newest waiting member stands for the gang)."""
    member = jobset_pod("train", "workers", 0, completion, template="eight")
    member["metadata"]["annotations"][KUEUE_REQUIRED] = "rack"
    member["metadata"]["labels"]["kueue.x-k8s.io/podset"] = "workers"
    member["metadata"]["creationTimestamp"] = f"2026-11-29T00:00:0{completion}Z"
    if rack is not None:
        member["spec"]["nodeSelector"] = {"rack": rack}
    return _gated(member, gate) if gate else member


@pytest.mark.parametrize("gate", [ADMISSION_GATE, TOPOLOGY_GATE])
def test_a_pod_kueue_gates_is_managed_by_kueue_and_no_gang_member(gate: str) -> None:
    member = _gated(pod("g-0", labels={"nativedra.dev/gang": "g", "nativedra.dev/gang-size": "2"}), gate)
    assert gated_by_kueue(member) and managed_by_kueue(member)
    entry = work_out(PodFacts.of(member), {}, {}, GangSources({}, {}, {}, None, DRIVER))
    assert entry.ref is None and entry.member is None


def test_other_gates_and_plain_pods_are_left_to_the_extender() -> None:
    other = _gated(pod("g-0", labels={"nativedra.dev/gang": "g", "nativedra.dev/gang-size": "1"}), "example.com/x")
    assert not gated_by_kueue(other) and not managed_by_kueue(other)
    entry = work_out(PodFacts.of(other), {}, {}, GangSources({}, {}, {}, None, DRIVER))
    assert entry.ref is not None, "a gate of another controller does not hide the pod's gang"
    assert not managed_by_kueue(pod("plain"))


@pytest.mark.parametrize(
    ("labels", "annotations"),
    [
        ({"kueue.x-k8s.io/queue-name": "team-a"}, {}),
        ({"kueue.x-k8s.io/managed": "true"}, {}),
        ({"kueue.x-k8s.io/podset": "workers"}, {}),
        ({"kueue.x-k8s.io/cluster-queue-name": "team-a"}, {}),
        ({}, {"kueue.x-k8s.io/workload": "jobset-train-1a2b3"}),
    ],
)
def test_pods_of_kueue_workloads_are_managed_by_kueue(labels: dict[str, str], annotations: dict[str, str]) -> None:
    assert managed_by_kueue(pod("p", labels=labels, annotations=annotations))


def test_a_gang_kueue_pinned_to_a_rack_is_planned_there_while_newer_members_are_still_gated() -> None:
    """Rack a is the tighter fit, so the extender alone would choose it; Kueue chose rack b. Were the
    gated members (no nodeSelector yet, and the newest) counted, they would stand for the gang and
    plan it into rack a, which the ungated members' nodeSelector forbids."""
    members = [
        _kueue_tas_pod(0, rack="b"),
        _kueue_tas_pod(1, rack="b"),
        _kueue_tas_pod(2, rack=None, gate=TOPOLOGY_GATE),
        _kueue_tas_pod(3, rack=None, gate=TOPOLOGY_GATE),
    ]
    spec = jobset("train", [("workers", 1, 4)])
    cluster = view(racks({"a": 4, "b": 6}), pods=members, templates=TEMPLATES, jobsets=[spec])
    decider = Decider(ExtenderConfig())
    passing, failed, path = decider.filter(cluster, members[0], sorted(cluster.nodes), now=SOON_AFTER)
    assert path == "gang"
    assert passing and {name.split("-")[0] for name in passing} == {"b"}, failed
    plan = decider.plans.plan(cluster, None, SOON_AFTER).plans["ns/jobset:train"]
    assert plan.feasible and sum(plan.slots.values()) == 4, plan
    assert {name.split("-")[0] for name in plan.slots} == {"b"}, f"planned outside Kueue's rack: {plan.slots}"


def test_a_gang_kueue_has_not_admitted_holds_nothing() -> None:
    """All 8 GPUs of the only rack: a gated gang must leave them to a plain pod."""
    members = [_kueue_tas_pod(i, rack=None, gate=ADMISSION_GATE) for i in range(2)]
    plain = pod("single", template="one", created=CREATED)
    spec = jobset("train", [("workers", 1, 2)])
    cluster = view(racks({"a": 2}), pods=[*members, plain], templates=TEMPLATES, jobsets=[spec])
    decider = Decider(ExtenderConfig())
    assert "ns/jobset:train" not in decider.plans.plan(cluster, None, SOON_AFTER).plans
    passing, failed, _ = decider.filter(cluster, plain, sorted(cluster.nodes), now=SOON_AFTER)
    assert sorted(passing) == ["a-0", "a-1"], failed


def test_pods_kueue_pinned_to_hosts_are_placed_there_not_planned_as_a_gang() -> None:
    """Kueue's Topology ends at the host: it chose one host per pod (here across both racks' roomier
    nodes, not the extender's best fit). Each pod may go to its host; no gang plan refuses them."""
    members = [_kueue_tas_pod(i, rack="b") for i in range(3)]
    for index, member in enumerate(members):
        member["spec"]["nodeSelector"]["kubernetes.io/hostname"] = f"b-{index + 3}"
    assert all(pinned_by_kueue(m) for m in members)
    spec = jobset("train", [("workers", 1, 3)])
    hosts = {
        f"{rack}-{i}": {"rack": rack, HOSTNAME: f"{rack}-{i}"} for rack, n in (("a", 3), ("b", 6)) for i in range(n)
    }
    cluster = view(gpu_nodes(hosts), pods=members, templates=TEMPLATES, jobsets=[spec])
    decider = Decider(ExtenderConfig())
    assert "ns/jobset:train" not in decider.plans.plan(cluster, None, SOON_AFTER).plans
    for index, member in enumerate(members):
        passing, failed, _ = decider.filter(cluster, member, sorted(cluster.nodes), now=SOON_AFTER)
        assert f"b-{index + 3}" in passing, failed


def test_a_host_selector_alone_does_not_take_a_pod_out_of_its_gang() -> None:
    member = jobset_pod("train", "workers", 0, 0, template="eight", node_selector={"kubernetes.io/hostname": "a-0"})
    assert not pinned_by_kueue(member), "not Kueue's: the pod's own selector"
    member["metadata"]["annotations"][KUEUE_REQUIRED] = "rack"
    assert not pinned_by_kueue(member), "a Kueue annotation on a pod Kueue does not manage"


def _waiting_pod(name: str, labels: dict[str, str] | None = None, template: str = "eight") -> dict[str, Any]:
    """A pod of priority 100 the scheduler found no node for."""
    member = pod(name, labels=labels, template=template, created=CREATED)
    member["spec"]["priority"] = 100
    member["status"]["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]
    return member


def test_the_extender_never_preempts_for_pods_kueue_manages() -> None:
    """Kueue decides which of its workloads runs when quota is short (e.g. it just evicted one to
    reclaim quota for this one): a Kueue-managed pod or gang waiting for devices is no preemptor,
    while the same pod outside Kueue is."""
    outside = _waiting_pod("outside")
    queued = _waiting_pod("queued", {"kueue.x-k8s.io/queue-name": "team-a"})
    admitted_gang = [_kueue_tas_pod(i, rack=None) for i in range(2)]
    for member in admitted_gang:
        member["spec"]["priority"] = 100
        member["status"]["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]
    spec = jobset("train", [("workers", 1, 2)])
    full = {"a-0": Usage(devices={f"gpu-{i}" for i in range(8)})}
    cluster = view(
        racks({"a": 1}), usage=full, pods=[outside, queued, *admitted_gang], templates=TEMPLATES, jobsets=[spec]
    )
    decider = Decider(ExtenderConfig())
    preemption = Preemption(
        client.ApiClient(),
        None,  # type: ignore[arg-type]
        decider.config,
        plans=decider.plans,
        namespace="ns",
        leader=None,  # type: ignore[arg-type]
    )
    gangs = {gang.ref.key: gang for gang in preemption.plans.gangs(cluster)}
    waiting = preemption._waiting(cluster, gangs, SOON_AFTER)
    assert [preemptor.key for preemptor, _ in waiting] == ["ns/outside"]
