"""Priority preemption for DRA pods and gangs, against the real kube-scheduler (v1.37.2, default
gates), which never preempts for devices: the extender picks the victims, evicts them through the
Eviction API and keeps the freed devices for the preemptor. Nodes of 8 A100s published with the
plugin's builder; pods of real PriorityClasses."""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from extender.plan.config import RACK_LABEL
from nativedra.base.kube.names import GPU_CLASS
from nativedra.base.kube.resources import JOBSETS
from nativedra.cluster import ControlPlane, wait_for
from nativedra.cluster.addons import JOBSET, start_addon
from nativedra.objects import claim_template, gpu_pod, request
from nativedra.workload_objects import ReplicatedJob, create_jobset
from testkit.extender_harness import (
    ExtenderCluster,
    bound,
    extender_cluster,
    fresh_namespace,
    gang_pods,
    wait_judged_unschedulable,
)

pytestmark = pytest.mark.timeout(600)
LOW, MID, HIGH, NEVER = 100, 500, 1000, 1000
BOUND_S = 60.0


@pytest.fixture(scope="module")
def classes(control_plane: ControlPlane) -> Iterator[dict[str, str]]:
    """PriorityClasses low < mid < high, and high that never preempts; unique names per run."""
    api = control_plane.api_client()
    scheduling = client.SchedulingV1Api(api)
    suffix = uuid.uuid4().hex[:6]
    names = {}
    for label, value, policy in (
        ("low", LOW, None),
        ("mid", MID, None),
        ("high", HIGH, None),
        ("never", NEVER, "Never"),
    ):
        name = f"nd-{label}-{suffix}"
        body = {"metadata": {"name": name}, "value": value, **({"preemptionPolicy": policy} if policy else {})}
        scheduling.create_priority_class(body)
        names[label] = name
    yield names
    for name in names.values():
        scheduling.delete_priority_class(name)


@pytest.fixture(scope="module")
def extender(control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ExtenderCluster]:
    root = Path(tmp_path_factory.mktemp("preemption"))
    config = {"topologyLevels": [RACK_LABEL, "kubernetes.io/hostname"], "preemptionHoldSeconds": 120}
    with extender_cluster(root, config, shared=control_plane) as harness:
        yield harness


@pytest.fixture
def env(extender: ExtenderCluster) -> Iterator[tuple[ExtenderCluster, str]]:
    with fresh_namespace(extender.api, "preempt") as namespace:
        for count in (1, 4, 8):
            claim_template(extender.api, namespace, f"gpus-{count}", [request("gpus", GPU_CLASS, count=count)])
        try:
            yield extender, namespace
        finally:
            # A preemptor a test leaves waiting (budgets, refusals) would otherwise wait on while its
            # namespace ends, and take the next test's free nodes, or preempt on them. Preemptors
            # here are bare pods; controllers' pods go with their namespace.
            core = client.CoreV1Api(extender.api)

            def bare() -> list[str]:
                pods = core.list_namespaced_pod(namespace).items
                return [p.metadata.name for p in pods if not p.metadata.owner_references]

            for name in bare():
                with contextlib.suppress(client.ApiException):
                    core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
            wait_for(lambda: not bare(), 60, "the test's own pods gone")
            extender.remove_nodes()


def _fill(harness: ExtenderCluster, namespace: str, nodes: list[str], priority_class: str, prefix: str) -> list[str]:
    """Eight 1-GPU pods on each node, bound (each pinned to its node, as a busy cluster leaves them)."""
    names = []
    for node in nodes:
        for index in range(8):
            name = f"{prefix}-{node[-6:]}-{index}"
            gpu_pod(harness.api, namespace, name, "gpus-1", node=node, priority_class=priority_class)
            names.append(name)
    wait_for(lambda: len(bound(harness.api, namespace, names)) == len(names), 90, f"{len(names)} pods bound")
    return names


def _gone(harness: ExtenderCluster, namespace: str, names: list[str]) -> list[str]:
    pods = client.CoreV1Api(harness.api).list_namespaced_pod(namespace).items
    present = {p.metadata.name for p in pods if p.metadata.deletion_timestamp is None}
    return sorted(set(names) - present)


def _metric(harness: ExtenderCluster, sample: str) -> float:
    """A sample's value on the extender's /metrics (0 when absent)."""
    lines = harness.metrics().splitlines()
    values = [float(line.rsplit(" ", 1)[1]) for line in lines if line.startswith(sample + " ")]
    return values[0] if values else 0.0


def _events(harness: ExtenderCluster, namespace: str, reason: str) -> list[client.CoreV1Event]:
    events = client.CoreV1Api(harness.api).list_namespaced_event(namespace, field_selector=f"reason={reason}")
    return list(events.items)


def test_an_eight_gpu_pod_preempts_exactly_eight_low_pods_on_one_node(
    env: tuple[ExtenderCluster, str], classes: dict[str, str]
) -> None:
    harness, namespace = env
    nodes = harness.add_gpu_nodes(2)
    low = _fill(harness, namespace, nodes, classes["low"], "low")
    # Low pods waiting beside it: the devices freed for the preemptor must not go to them.
    waiting = [f"late-{index}" for index in range(4)]
    for name in waiting:
        gpu_pod(harness.api, namespace, name, "gpus-1", priority_class=classes["low"])
    wait_judged_unschedulable(harness.api, namespace, waiting)
    started = time.monotonic()
    gpu_pod(harness.api, namespace, "big", "gpus-8", priority_class=classes["high"])
    node = wait_for(lambda: bound(harness.api, namespace, ["big"]).get("big"), BOUND_S, "the 8-GPU pod bound")
    took = time.monotonic() - started
    evicted = _gone(harness, namespace, low)
    assert len(evicted) == 8, evicted
    assert {name.rsplit("-", 1)[0] for name in evicted} == {f"low-{node[-6:]}"}, "all from the preemptor's node"
    assert bound(harness.api, namespace, waiting) == {}, "the freed GPUs went to the preemptor alone"
    preempted = _events(harness, namespace, "Preempted")
    assert sorted(e.involved_object.name for e in preempted) == evicted
    assert all(f"(priority {HIGH})" in e.message and f"pod {namespace}/big" in e.message for e in preempted)
    (told,) = _events(harness, namespace, "Preempting")
    assert told.involved_object.name == "big" and "preempting 8 pod(s) of lower priority" in told.message
    # The time from decision to bound is observed once the leader sees the preemptor placed.
    wait_for(lambda: _metric(harness, "nativedra_extender_preemption_seconds_count") >= 1, 15, "the time to bound")
    assert _metric(harness, 'nativedra_extender_evictions_total{result="evicted"}') >= 8
    assert _metric(harness, 'nativedra_extender_preemption_decisions_total{outcome="evicting"}') >= 1
    print(f"\n8-GPU pod bound {took:.1f} s after creation, 8 of 16 low pods evicted")


def test_a_two_by_eight_gang_preempts_at_most_sixteen_and_is_placed_whole(
    env: tuple[ExtenderCluster, str], classes: dict[str, str]
) -> None:
    harness, namespace = env
    low = _fill(harness, namespace, harness.add_gpu_nodes(4), classes["low"], "low")
    started = time.monotonic()
    members = gang_pods(harness.api, namespace, "train", 2, 8, priority_class=classes["high"])
    wait_for(lambda: len(bound(harness.api, namespace, members)) == 2, BOUND_S, "the gang bound whole")
    took = time.monotonic() - started
    evicted = _gone(harness, namespace, low)
    assert len(evicted) == 16, evicted
    print(f"\n2 x 8 gang bound {took:.1f} s after creation, {len(evicted)} of 32 low pods evicted")


def test_a_gang_that_cannot_be_made_whole_evicts_nothing(
    env: tuple[ExtenderCluster, str], classes: dict[str, str]
) -> None:
    harness, namespace = env
    low = _fill(harness, namespace, harness.add_gpu_nodes(4), classes["low"], "low")
    members = gang_pods(harness.api, namespace, "huge", 5, 8, priority_class=classes["high"])
    key = f"{namespace}/gang:huge"
    told = wait_for(lambda: _events(harness, namespace, "PreemptionNotHelpful"), 60, "why preemption would not help")
    assert told[0].message == (
        f"gang {key} needs 5 x 8 device(s) in the cluster; even evicting every lower-priority pod leaves room for 4"
    )
    time.sleep(3)
    assert _gone(harness, namespace, low) == []
    assert bound(harness.api, namespace, members) == {}


def test_a_disruption_budget_steers_preemption_to_other_pods(
    env: tuple[ExtenderCluster, str], classes: dict[str, str]
) -> None:
    harness, namespace = env
    guarded_node, open_node = harness.add_gpu_nodes(2)
    guarded = []
    for index in range(8):
        name = f"guarded-{index}"
        gpu_pod(
            harness.api,
            namespace,
            name,
            "gpus-1",
            node=guarded_node,
            labels={"app": "guarded"},
            priority_class=classes["low"],
        )
        guarded.append(name)
    budget = {
        "metadata": {"name": "guard"},
        "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": "guarded"}}},
    }
    client.PolicyV1Api(harness.api).create_namespaced_pod_disruption_budget(namespace, budget)
    others = _fill(harness, namespace, [open_node], classes["mid"], "mid")
    wait_for(lambda: len(bound(harness.api, namespace, guarded)) == 8, 60, "guarded pods bound")
    gpu_pod(harness.api, namespace, "big", "gpus-8", priority_class=classes["high"])
    node = wait_for(lambda: bound(harness.api, namespace, ["big"]).get("big"), BOUND_S, "the 8-GPU pod bound")
    assert node == open_node
    assert _gone(harness, namespace, guarded) == []
    assert len(_gone(harness, namespace, others)) == 8


def test_preemption_policy_never_and_equal_priority_evict_nothing(
    env: tuple[ExtenderCluster, str], classes: dict[str, str]
) -> None:
    harness, namespace = env
    nodes = harness.add_gpu_nodes(1)
    running = _fill(harness, namespace, nodes, classes["mid"], "mid")
    gpu_pod(harness.api, namespace, "polite", "gpus-8", priority_class=classes["never"])
    gpu_pod(harness.api, namespace, "peer", "gpus-8", priority_class=classes["mid"])
    wait_judged_unschedulable(harness.api, namespace, ["polite", "peer"])
    time.sleep(5)  # several preemption steps
    assert _gone(harness, namespace, running) == []
    assert bound(harness.api, namespace, ["polite", "peer"]) == {}
    assert _events(harness, namespace, "Preempting") == []


def test_two_preemptors_for_the_same_victims_evict_no_more_than_one_needs(
    env: tuple[ExtenderCluster, str], classes: dict[str, str]
) -> None:
    harness, namespace = env
    nodes = harness.add_gpu_nodes(1)
    low = _fill(harness, namespace, nodes, classes["low"], "low")
    for name in ("first", "second"):
        gpu_pod(harness.api, namespace, name, "gpus-8", priority_class=classes["high"])
    wait_for(lambda: bound(harness.api, namespace, ["first", "second"]), BOUND_S, "one preemptor bound")
    time.sleep(5)  # several preemption steps more: the other finds nothing more worth evicting
    assert len(_gone(harness, namespace, low)) == 8
    assert len(bound(harness.api, namespace, ["first", "second"])) == 1
    assert len(_events(harness, namespace, "Preempting")) == 1


def test_a_low_priority_jobset_chosen_as_victim_is_evicted_whole_and_restarted_by_its_controller(
    env: tuple[ExtenderCluster, str], classes: dict[str, str]
) -> None:
    harness, namespace = env
    start_addon(harness.plane, harness.api, JOBSET)
    nodes = harness.add_gpu_nodes(2)
    selector = {"kubernetes.io/hostname": nodes[0]}
    # A 2-pod JobSet (4 GPUs each) on the first node, 1-GPU pods of higher priority beside it.
    create_jobset(
        harness.api,
        namespace,
        "batch",
        [ReplicatedJob("workers", 2, 1, "gpus-4")],
        selector,
        max_restarts=3,
        priority_class=classes["low"],
    )
    # Both members: the scheduler binds a gang's pods one after the other, so one may be seen alone.
    first = wait_for(
        lambda: members if len(members := _jobset_pods(harness, namespace, bound_only=True)) == 2 else None,
        90,
        "the JobSet's 2 pods bound",
    )
    _fill(harness, namespace, nodes[1:], classes["mid"], "mid")
    gpu_pod(harness.api, namespace, "big", "gpus-8", priority_class=classes["high"])
    node = wait_for(lambda: bound(harness.api, namespace, ["big"]).get("big"), BOUND_S, "the 8-GPU pod bound")
    assert node == nodes[0]
    assert set(_gone(harness, namespace, first)) == set(first), "both members evicted: the gang whole"
    restarts = wait_for(
        lambda: (JOBSETS.get(harness.api, "batch", namespace).get("status") or {}).get("restarts"),
        60,
        "the JobSet controller to restart the JobSet",
    )
    assert restarts >= 1
    replacements = wait_for(
        lambda: [p for p in _jobset_pods(harness, namespace, bound_only=False) if p not in first],
        60,
        "the restarted JobSet's pods",
    )
    assert replacements and not set(replacements) & set(bound(harness.api, namespace, replacements))
    preempted = {e.involved_object.name for e in _events(harness, namespace, "Preempted")}
    assert preempted == set(first)


def _jobset_pods(harness: ExtenderCluster, namespace: str, *, bound_only: bool, name: str = "batch") -> list[str]:
    pods = (
        client.CoreV1Api(harness.api)
        .list_namespaced_pod(namespace, label_selector=f"jobset.sigs.k8s.io/jobset-name={name}")
        .items
    )
    return sorted(
        p.metadata.name for p in pods if p.metadata.deletion_timestamp is None and (p.spec.node_name or not bound_only)
    )


def test_an_exclusive_jobset_preempts_a_rack_per_job_and_spares_the_higher_rack(
    env: tuple[ExtenderCluster, str], classes: dict[str, str]
) -> None:
    """Two Jobs of 2 pods x 8 GPUs, each alone in a rack (JobSet exclusive-topology): of three full
    racks, the two running low pods are preempted, the one running mid pods is not."""
    harness, namespace = env
    start_addon(harness.plane, harness.api, JOBSET)
    test = uuid.uuid4().hex[:6]
    racks = {rack: harness.add_gpu_nodes(2, {RACK_LABEL: rack, "e2e.nativedra.dev/test": test}) for rack in "abc"}
    low = _fill(harness, namespace, racks["a"] + racks["b"], classes["low"], "low")
    mid = _fill(harness, namespace, racks["c"], classes["mid"], "mid")
    started = time.monotonic()
    create_jobset(
        harness.api,
        namespace,
        "train",
        [ReplicatedJob("workers", 2, 2, "gpus-8")],
        {"e2e.nativedra.dev/test": test},
        exclusive_topology=RACK_LABEL,
        priority_class=classes["high"],
    )

    def all_bound() -> list[str] | None:
        found = _jobset_pods(harness, namespace, bound_only=True, name="train")
        return found if len(found) == 4 else None

    pods = wait_for(all_bound, 120, "the JobSet's 4 pods bound")
    took = time.monotonic() - started
    rack_of = {node: rack for rack, nodes in racks.items() for node in nodes}
    placed = bound(harness.api, namespace, pods)
    by_job: dict[str, set[str]] = {}
    for pod in pods:
        by_job.setdefault(pod.rsplit("-", 2)[0], set()).add(rack_of[placed[pod]])
    assert sorted(map(sorted, by_job.values())) == [["a"], ["b"]], by_job
    assert len(_gone(harness, namespace, low)) == 32
    assert _gone(harness, namespace, mid) == []
    print(f"\nexclusive 2 x 2 x 8 JobSet bound {took:.1f} s after creation, 32 low pods evicted, mid rack spared")


# -- trust: what an adversary would try (issue "Preemption an admin can trust") ------------------

HOLD = "e2e.nativedra.dev/hold"


def _hold(harness: ExtenderCluster, namespace: str, name: str, held: bool) -> None:
    """A finalizer keeps a deleted pod (and its devices) until the test lets it go."""
    client.CoreV1Api(harness.api).patch_namespaced_pod(
        name, namespace, {"metadata": {"finalizers": [HOLD] if held else None}}
    )


def _pod(harness: ExtenderCluster, namespace: str, name: str) -> client.V1Pod | None:
    try:
        return client.CoreV1Api(harness.api).read_namespaced_pod(name, namespace)
    except client.ApiException as error:
        if error.status == 404:
            return None
        raise


def _statefulset(harness: ExtenderCluster, namespace: str, name: str, priority_class: str) -> None:
    template = {
        "metadata": {"labels": {"app": name}},
        "spec": {
            "priorityClassName": priority_class,
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {"name": "main", "image": "registry.invalid/cuda:12", "resources": {"claims": [{"name": "gpus"}]}}
            ],
            "resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": "gpus-1"}],
        },
    }
    body = {
        "metadata": {"name": name},
        "spec": {"serviceName": name, "replicas": 1, "selector": {"matchLabels": {"app": name}}, "template": template},
    }
    client.AppsV1Api(harness.api).create_namespaced_stateful_set(namespace, body)


def test_a_statefulset_victims_replacement_of_the_same_name_is_never_evicted(
    env: tuple[ExtenderCluster, str], classes: dict[str, str]
) -> None:
    """A StatefulSet pod is one of eight victims on node a; the StatefulSet controller recreates it
    under its old name while another victim is still ending (a finalizer holds it), and the new pod
    runs on node b. The preemptor still waits, and the decision is tended every second: the pod of
    the same name and another UID is not evicted."""
    harness, namespace = env
    (node_a,) = harness.add_gpu_nodes(1)
    _statefulset(harness, namespace, "db", classes["low"])
    first = wait_for(lambda: (p := _pod(harness, namespace, "db-0")) and p.spec.node_name and p, 90, "db-0 bound")
    low = [f"low-{index}" for index in range(7)]
    for name in low:
        gpu_pod(harness.api, namespace, name, "gpus-1", node=node_a, priority_class=classes["low"])
    wait_for(lambda: len(bound(harness.api, namespace, low)) == 7, 90, "node a full")
    _hold(harness, namespace, "low-0", True)
    node_b = harness.add_gpu_nodes(1)[0]
    mid = [f"mid-{index}" for index in range(7)]
    for name in mid:
        gpu_pod(harness.api, namespace, name, "gpus-1", node=node_b, priority_class=classes["mid"])
    wait_for(lambda: len(bound(harness.api, namespace, mid)) == 7, 90, "node b holding 7")
    try:
        gpu_pod(harness.api, namespace, "big", "gpus-8", priority_class=classes["high"])

        def replaced() -> client.V1Pod | None:
            pod = _pod(harness, namespace, "db-0")
            return pod if pod and pod.metadata.uid != first.metadata.uid and pod.spec.node_name else None

        replacement = wait_for(replaced, 90, "db-0 recreated by its controller and bound")
        assert replacement.spec.node_name == node_b
        assert bound(harness.api, namespace, ["big"]) == {}, "low-0 still holds a GPU: the preemptor waits"
        time.sleep(6)  # six preemption steps tend the decision while the preemptor waits
        now = _pod(harness, namespace, "db-0")
        assert now is not None and now.metadata.uid == replacement.metadata.uid
        assert now.metadata.deletion_timestamp is None, "the replacement was evicted"
        preempted = [e for e in _events(harness, namespace, "Preempted") if e.involved_object.name == "db-0"]
        assert [e.involved_object.uid for e in preempted] == [first.metadata.uid]
    finally:
        _hold(harness, namespace, "low-0", False)
    assert wait_for(lambda: bound(harness.api, namespace, ["big"]).get("big"), BOUND_S, "big bound") == node_a
    client.AppsV1Api(harness.api).delete_namespaced_stateful_set("db", namespace)


def test_no_pod_is_evicted_on_a_node_the_preemptor_cannot_use(
    env: tuple[ExtenderCluster, str], classes: dict[str, str]
) -> None:
    """The cheapest victims run on a node the preemptor does not tolerate the taint of, on a
    cordoned node, and on a node whose CPUs a pod without GPUs holds; the scheduler would never put
    the preemptor there, whatever is evicted, so the dearer pods of the last node go."""
    harness, namespace = env
    tainted, cordoned, crowded, usable = harness.add_gpu_nodes(4)
    low = _fill(harness, namespace, [tainted, cordoned, crowded], classes["low"], "low")
    mid = _fill(harness, namespace, [usable], classes["mid"], "mid")
    core = client.CoreV1Api(harness.api)
    taint = {"key": "e2e.nativedra.dev/team", "value": "x", "effect": "NoSchedule"}
    core.patch_node(tainted, {"spec": {"taints": [taint]}})
    core.patch_node(cordoned, {"spec": {"unschedulable": True}})
    allocatable = int(core.read_node(crowded).status.allocatable["cpu"])
    hog = {
        "metadata": {"name": "cpu-hog"},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": crowded},
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {
                    "name": "main",
                    "image": "registry.invalid/busy:1",
                    "resources": {"requests": {"cpu": str(allocatable - 2)}},
                }
            ],
        },
    }
    core.create_namespaced_pod(namespace, hog)
    wait_for(lambda: bound(harness.api, namespace, ["cpu-hog"]), 60, "the CPU hog bound")
    big = {  # 8 GPUs and 4 CPUs: the crowded node has 2 left, whatever is evicted of the GPU pods
        "metadata": {"name": "big"},
        "spec": {
            "priorityClassName": classes["high"],
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {
                    "name": "main",
                    "image": "registry.invalid/cuda:12",
                    "resources": {"requests": {"cpu": "4"}, "claims": [{"name": "gpus"}]},
                }
            ],
            "resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": "gpus-8"}],
        },
    }
    core.create_namespaced_pod(namespace, big)
    node = wait_for(lambda: bound(harness.api, namespace, ["big"]).get("big"), BOUND_S, "the 8-GPU pod bound")
    assert node == usable
    assert _gone(harness, namespace, low) == []
    assert len(_gone(harness, namespace, mid)) == 8


def _running_and_ready(harness: ExtenderCluster, namespace: str, names: list[str]) -> None:
    """What a kubelet reports once the containers run (simulated nodes have none): the disruption
    controller counts only such pods healthy, and the Eviction API applies budgets only to them."""
    core = client.CoreV1Api(harness.api)
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    for name in names:
        status = {
            "phase": "Running",
            "startTime": now,
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": now}],
        }
        core.patch_namespaced_pod_status(name, namespace, {"status": status})


def test_a_gang_under_a_budget_that_allows_less_than_all_of_it_is_never_split(
    env: tuple[ExtenderCluster, str], classes: dict[str, str]
) -> None:
    """A running 2-pod gang (Running and Ready) under a PodDisruptionBudget the disruption
    controller reports as allowing one disruption: evicting it whole would have the API refuse the
    second pod after the first went, so nothing is evicted and the preemptor is told why."""
    harness, namespace = env
    harness.add_gpu_nodes(1)
    gang = gang_pods(harness.api, namespace, "pair", 2, 4, priority_class=classes["low"])
    wait_for(lambda: len(bound(harness.api, namespace, gang)) == 2, 90, "the gang bound")
    _running_and_ready(harness, namespace, gang)
    selector = {"matchLabels": {"nativedra.dev/gang": "pair"}}
    budget = {"metadata": {"name": "pair"}, "spec": {"minAvailable": 1, "selector": selector}}
    policy = client.PolicyV1Api(harness.api)
    policy.create_namespaced_pod_disruption_budget(namespace, budget)

    def allowing_one() -> bool:
        status = policy.read_namespaced_pod_disruption_budget("pair", namespace).status
        return bool(status and status.current_healthy == 2 and status.disruptions_allowed == 1)

    wait_for(allowing_one, 60, "the disruption controller to allow one disruption")
    gpu_pod(harness.api, namespace, "big", "gpus-8", priority_class=classes["high"])
    told = wait_for(lambda: _events(harness, namespace, "PreemptionNotHelpful"), 60, "why preemption would not help")
    assert "PodDisruptionBudget" in told[0].message, told[0].message
    time.sleep(3)  # more preemption steps
    assert _gone(harness, namespace, gang) == []
    assert bound(harness.api, namespace, ["big"]) == {}
    assert _events(harness, namespace, "Preempted") == []


def test_a_victim_the_api_refuses_to_evict_stops_the_decision_before_anything_goes(
    env: tuple[ExtenderCluster, str], classes: dict[str, str]
) -> None:
    """An admission policy refuses evictions of one member of a running gang (what an admin's
    ValidatingAdmissionPolicy, a webhook or a budget race can do). The dry runs of every victim
    come before the first real eviction, so the other member is not evicted alone."""
    harness, namespace = env
    harness.add_gpu_nodes(1)
    gang = gang_pods(harness.api, namespace, "pair", 2, 4, priority_class=classes["low"])
    wait_for(lambda: len(bound(harness.api, namespace, gang)) == 2, 90, "the gang bound")
    admission = client.AdmissionregistrationV1Api(harness.api)
    name = f"nd-refuse-{namespace}"
    admission.create_validating_admission_policy(
        {
            "metadata": {"name": name},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {
                    "resourceRules": [
                        {
                            "apiGroups": [""],
                            "apiVersions": ["v1"],
                            "operations": ["CREATE"],
                            "resources": ["pods/eviction"],
                        }
                    ]
                },
                "validations": [{"expression": "request.name != 'pair-1'", "message": "pair-1 is not to be evicted"}],
            },
        }
    )
    admission.create_validating_admission_policy_binding(
        {
            "metadata": {"name": name},
            "spec": {
                "policyName": name,
                "validationActions": ["Deny"],
                "matchResources": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}},
            },
        }
    )
    core = client.CoreV1Api(harness.api)
    try:

        def refused() -> bool:
            body = {"metadata": {"name": "pair-1", "namespace": namespace}, "deleteOptions": {"dryRun": ["All"]}}
            try:
                core.create_namespaced_pod_eviction("pair-1", namespace, body, dry_run="All")
            except client.ApiException as error:
                return error.status in (403, 422)
            return False

        wait_for(refused, 30, "the admission policy in force")
        blocked_before = _metric(harness, 'nativedra_extender_evictions_total{result="blocked"}')
        gpu_pod(harness.api, namespace, "big", "gpus-8", priority_class=classes["high"])
        wait_for(
            lambda: _metric(harness, 'nativedra_extender_evictions_total{result="blocked"}') > blocked_before,
            60,
            "the dry run of pair-1's eviction refused",
        )
        time.sleep(3)  # more preemption steps: pair-1 is left out, so the gang is no victim
        assert _gone(harness, namespace, gang) == [], "half the gang was evicted"
        assert _events(harness, namespace, "Preempted") == []
    finally:
        admission.delete_validating_admission_policy_binding(name)
        admission.delete_validating_admission_policy(name)


def test_a_pod_with_admin_access_holds_no_device_and_is_never_evicted_for_one(
    env: tuple[ExtenderCluster, str], classes: dict[str, str]
) -> None:
    """A monitoring pod has adminAccess to all 8 GPUs of node a (DRAAdminAccess is GA and on in
    1.37; the namespace carries the admin-access label), beside eight low-priority 1-GPU pods; node b
    runs eight mid-priority ones. The scheduler counts an adminAccess allocation as using nothing,
    so freeing node a for an 8-GPU pod takes its eight 1-GPU pods, and the monitoring pod stays."""
    harness, namespace = env
    core = client.CoreV1Api(harness.api)
    core.patch_namespace(namespace, {"metadata": {"labels": {"resource.kubernetes.io/admin-access": "true"}}})
    admin = request("gpus", GPU_CLASS, count=8)
    admin["exactly"]["adminAccess"] = True
    claim_template(harness.api, namespace, "admin-8", [admin])
    node_a, node_b = harness.add_gpu_nodes(2)
    gpu_pod(harness.api, namespace, "monitor", "admin-8", node=node_a, priority_class=classes["low"])
    wait_for(lambda: bound(harness.api, namespace, ["monitor"]), 60, "the monitoring pod bound")
    low = _fill(harness, namespace, [node_a], classes["low"], "low")
    mid = _fill(harness, namespace, [node_b], classes["mid"], "mid")
    gpu_pod(harness.api, namespace, "big", "gpus-8", priority_class=classes["high"])
    node = wait_for(lambda: bound(harness.api, namespace, ["big"]).get("big"), BOUND_S, "the 8-GPU pod bound")
    assert node == node_a
    assert sorted(_gone(harness, namespace, [*low, *mid, "monitor"])) == sorted(low), "the monitor stays"
