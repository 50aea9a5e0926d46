"""Gangs made by the real JobSet and LeaderWorkerSet controllers (with their webhooks), placed by
the real kube-scheduler calling the extender: whole, in their topology, never half-placed."""

from __future__ import annotations

import shutil
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kubernetes import client

from dra_driver.faults import xid_fault
from extender.cluster.reservation import from_lease
from extender.plan.config import RACK_LABEL
from extender.recover.records import SPARES
from nativedra.base.kube.names import GPU_CLASS
from nativedra.base.kube.resources import JOBSETS
from nativedra.cluster import ControlPlane, wait_for, wait_pod_scheduled
from nativedra.cluster.addons import JOBSET, LWS, start_addon
from nativedra.objects import claim_template, gpu_pod, request
from nativedra.workload_objects import ReplicatedJob, create_jobset, create_lws, pods_with
from testkit.extender_harness import (
    ExtenderCluster,
    bound,
    delete_pods,
    extender_cluster,
    fresh_namespace,
    gang_pods,
    wait_judged_unschedulable,
)
from testkit.pod_reaper import PodReaper
from testkit.priority_classes import priority_classes

TEST_LABEL = "e2e.nativedra.dev/test"
JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
JOB_KEY = "jobset.sigs.k8s.io/job-key"
LWS_NAME = "leaderworkerset.sigs.k8s.io/name"
LWS_GROUP = "leaderworkerset.sigs.k8s.io/group-index"


@pytest.fixture(scope="module")
def cluster(control_plane: ControlPlane) -> Iterator[ExtenderCluster]:
    """The session's plane, its scheduler calling the extender; the JobSet and LWS controllers
    started on it stay for the rest of the session (their webhooks answer as long as they run)."""
    root = Path(tempfile.mkdtemp(prefix="nd-wl-", dir="/tmp"))
    try:
        # Spares granted to the JobSet's priority (100), one node of a 5-node rack.
        spares = {"minPriority": 100, "maxDomainShare": 0.2, "maxClusterShare": 0.2}
        with extender_cluster(root, {"planTimeoutSeconds": 600, "spares": spares}, shared=control_plane) as harness:
            for addon in (JOBSET, LWS):
                start_addon(harness.plane, harness.api, addon)
            yield harness
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def setup(cluster: ExtenderCluster) -> Iterator[tuple[ExtenderCluster, str, str]]:
    """(cluster, namespace with an 8-GPU claim template `eight`, test label value); cleaned after."""
    with fresh_namespace(cluster.api, "w") as namespace:
        claim_template(cluster.api, namespace, "eight", [request("gpus", GPU_CLASS, count=8)])
        yield cluster, namespace, uuid.uuid4().hex[:6]
    cluster.remove_nodes()


def _racks(cluster: ExtenderCluster, test: str, layout: dict[str, int]) -> dict[str, str]:
    return {
        node: rack
        for rack, count in layout.items()
        for node in cluster.add_gpu_nodes(count, {TEST_LABEL: test, RACK_LABEL: rack})
    }


def _explain(api: client.ApiClient, namespace: str) -> str:
    lines = []
    for pod in client.CoreV1Api(api).list_namespaced_pod(namespace).items:
        message = next((c.message for c in pod.status.conditions or [] if c.type == "PodScheduled"), "")
        lines.append(f"{pod.metadata.name} node={pod.spec.node_name} phase={pod.status.phase}: {message}")
    return "\n".join(lines) or "(no pods)"


def _serve(
    cluster: ExtenderCluster,
    namespace: str,
    test: str,
    *,
    replicas: int,
    size: int,
    exclusive: bool,
    grace_seconds: int = 0,
) -> None:
    """LeaderWorkerSet `serve` of this test's nodes, groups of `size` pods x 8 GPUs, each in one rack if `exclusive`."""
    create_lws(
        cluster.api,
        namespace,
        "serve",
        replicas=replicas,
        size=size,
        template="eight",
        node_selector={TEST_LABEL: test},
        exclusive_topology=RACK_LABEL if exclusive else None,
        grace_seconds=grace_seconds,
    )


def _bound(api: client.ApiClient, namespace: str, selector: str) -> list[client.V1Pod]:
    return [p for p in pods_with(api, namespace, selector) if p.spec.node_name]


def _wait_bound(
    cluster: ExtenderCluster, namespace: str, selector: str, count: int, what: str, timeout: float = 180
) -> None:
    wait_for(
        lambda: len(_bound(cluster.api, namespace, selector)) == count,
        timeout,
        what,
        lambda: _explain(cluster.api, namespace),
    )


def _racks_by(
    cluster: ExtenderCluster, namespace: str, selector: str, label: str, rack_of: dict[str, str]
) -> dict[str, set[str]]:
    """Racks of the bound pods, per value of `label` (a JobSet's Job, an LWS group)."""
    racks: dict[str, set[str]] = {}
    for pod in _bound(cluster.api, namespace, selector):
        racks.setdefault(pod.metadata.labels[label], set()).add(rack_of[pod.spec.node_name])
    return racks


def _each_alone_in_a_rack(racks: dict[str, set[str]], expected: set[str]) -> bool:
    return all(len(r) == 1 for r in racks.values()) and set.union(*racks.values()) == expected


@pytest.mark.parametrize("layout", [{"rack-a": 2, "rack-b": 2}, {"rack-a": 2, "rack-b": 4}], ids=["2+2", "2+4"])
def test_exclusive_jobset_places_each_job_alone_in_a_rack(
    setup: tuple[ExtenderCluster, str, str], layout: dict[str, int]
) -> None:
    cluster, namespace, test = setup
    rack_of = _racks(cluster, test, layout)
    workers = ReplicatedJob("workers", replicas=2, parallelism=2, template="eight")
    create_jobset(cluster.api, namespace, "train", [workers], {TEST_LABEL: test}, exclusive_topology=RACK_LABEL)
    selector = f"{JOBSET_NAME}=train"
    _wait_bound(cluster, namespace, selector, 4, "all 4 JobSet pods bound", 180)
    racks_per_job = _racks_by(cluster, namespace, selector, JOB_KEY, rack_of)
    assert len(racks_per_job) == 2, racks_per_job
    assert _each_alone_in_a_rack(racks_per_job, {"rack-a", "rack-b"}), f"one rack per Job: {racks_per_job}"


def test_driver_and_workers_of_one_jobset_are_one_gang(setup: tuple[ExtenderCluster, str, str]) -> None:
    cluster, namespace, test = setup
    _racks(cluster, test, {"rack-a": 4})
    jobs = [ReplicatedJob("driver", 1, 1, "eight"), ReplicatedJob("workers", 4, 1, "eight")]
    create_jobset(cluster.api, namespace, "pipeline", jobs, {TEST_LABEL: test})
    selector = f"{JOBSET_NAME}=pipeline"
    wait_for(lambda: len(pods_with(cluster.api, namespace, selector)) == 5, 60, "the JobSet's 5 pods")
    names = [p.metadata.name for p in pods_with(cluster.api, namespace, selector)]
    wait_judged_unschedulable(cluster.api, namespace, names)
    assert _bound(cluster.api, namespace, selector) == [], "5 pods x 8 GPUs on 4 nodes: none may hold GPUs"
    assert "5" in _explain(cluster.api, namespace)
    _racks(cluster, test, {"rack-a": 1})
    _wait_bound(cluster, namespace, selector, 5, "the whole JobSet once a node is added", 120)


def test_competing_jobsets_one_whole_then_the_other(setup: tuple[ExtenderCluster, str, str]) -> None:
    cluster, namespace, test = setup
    _racks(cluster, test, {"rack-a": 3, "rack-b": 3})
    for name in ("first", "second"):
        create_jobset(cluster.api, namespace, name, [ReplicatedJob("workers", 4, 1, "eight")], {TEST_LABEL: test})
    both = f"{JOBSET_NAME} in (first,second)"
    wait_for(lambda: len(pods_with(cluster.api, namespace, both)) == 8, 60, "both JobSets' pods")
    wait_for(
        lambda: len(_bound(cluster.api, namespace, both)) >= 4,
        120,
        "one JobSet placed",
        lambda: _explain(cluster.api, namespace),
    )
    waiting = [p.metadata.name for p in pods_with(cluster.api, namespace, both) if not p.spec.node_name]
    wait_judged_unschedulable(cluster.api, namespace, waiting)
    counts = {name: len(_bound(cluster.api, namespace, f"{JOBSET_NAME}={name}")) for name in ("first", "second")}
    assert sorted(counts.values()) == [0, 4], counts
    winner = max(counts, key=lambda name: counts[name])
    loser = min(counts, key=lambda name: counts[name])
    JOBSETS.delete_namespaced(cluster.api, winner, namespace)
    _wait_bound(cluster, namespace, f"{JOBSET_NAME}={loser}", 4, f"JobSet {loser} whole once {winner} is gone")


@pytest.mark.parametrize("exclusive", [True, False], ids=["exclusive", "shared"])
def test_leaderworkerset_groups_are_placed_whole(setup: tuple[ExtenderCluster, str, str], exclusive: bool) -> None:
    cluster, namespace, test = setup
    rack_of = _racks(cluster, test, {"rack-a": 2, "rack-b": 2})
    _serve(cluster, namespace, test, replicas=2, size=2, exclusive=exclusive)
    selector = f"{LWS_NAME}=serve"
    _wait_bound(cluster, namespace, selector, 4, "both LWS groups placed", 180)
    racks = _racks_by(cluster, namespace, selector, LWS_GROUP, rack_of)
    if exclusive:
        assert _each_alone_in_a_rack(racks, {"rack-a", "rack-b"}), racks


RESTART_ATTEMPT = "jobset.sigs.k8s.io/restart-attempt"


def test_a_restarted_jobset_forms_its_gang_again(setup: tuple[ExtenderCluster, str, str]) -> None:
    """A failed pod makes JobSet's failure policy recreate every Job (restart-attempt + 1): the new
    pods are one gang again, each Job alone in a rack."""
    cluster, namespace, test = setup
    rack_of = _racks(cluster, test, {"rack-a": 2, "rack-b": 2})
    workers = ReplicatedJob("workers", replicas=2, parallelism=2, template="eight")
    create_jobset(
        cluster.api, namespace, "train", [workers], {TEST_LABEL: test}, exclusive_topology=RACK_LABEL, max_restarts=1
    )
    first = f"{JOBSET_NAME}=train,{RESTART_ATTEMPT}=0"
    _wait_bound(cluster, namespace, first, 4, "attempt 0 placed", 180)
    victim = _bound(cluster.api, namespace, first)[0]
    client.CoreV1Api(cluster.api).patch_namespaced_pod_status(
        victim.metadata.name, namespace, {"status": {"phase": "Failed", "reason": "e2e: simulated crash"}}
    )
    second = f"{JOBSET_NAME}=train,{RESTART_ATTEMPT}=1"
    _wait_bound(cluster, namespace, second, 4, "attempt 1 placed whole", 240)
    racks_per_job = _racks_by(cluster, namespace, second, JOB_KEY, rack_of)
    assert _each_alone_in_a_rack(racks_per_job, {"rack-a", "rack-b"}), racks_per_job


def test_a_suspended_jobset_releases_its_capacity_and_takes_it_whole_on_resume(
    setup: tuple[ExtenderCluster, str, str],
) -> None:
    """Kueue-style admission: suspending a placed JobSet frees its GPUs for another gang; resumed
    once they are free again, it is placed whole."""
    cluster, namespace, test = setup
    _racks(cluster, test, {"rack-a": 4})
    create_jobset(cluster.api, namespace, "train", [ReplicatedJob("workers", 4, 1, "eight")], {TEST_LABEL: test})
    selector = f"{JOBSET_NAME}=train"
    _wait_bound(cluster, namespace, selector, 4, "the JobSet placed", 180)
    JOBSETS.patch(cluster.api, "train", {"spec": {"suspend": True}}, namespace)
    wait_for(lambda: not pods_with(cluster.api, namespace, selector), 120, "the suspended JobSet's pods gone")
    other = gang_pods(cluster.api, namespace, "other", 4, 8, selector={TEST_LABEL: test})
    wait_for(
        lambda: len(bound(cluster.api, namespace, other)) == 4,
        120,
        "another gang takes the freed GPUs",
        lambda: _explain(cluster.api, namespace) + "\n" + cluster.log.read_text()[-4000:],
    )
    for name in other:
        client.CoreV1Api(cluster.api).delete_namespaced_pod(name, namespace, grace_period_seconds=0)
    JOBSETS.patch(cluster.api, "train", {"spec": {"suspend": False}}, namespace)
    _wait_bound(cluster, namespace, selector, 4, "the resumed JobSet placed whole", 240)


def _gang_events(api: client.ApiClient, namespace: str, reason: str) -> list[str]:
    events = client.CoreV1Api(api).list_namespaced_event(namespace).items
    return [e.message for e in events if e.reason == reason]


def _returns_recorded(cluster: ExtenderCluster) -> bool:
    leases = client.CoordinationV1Api(cluster.api).list_namespaced_lease(cluster.namespace).items
    return any(lease.metadata.name.startswith("return-") for lease in leases)


def _fails_and_returns(
    cluster: ExtenderCluster, namespace: str, test: str, make: Callable[[], None], selector: str
) -> None:
    """`make` creates a gang of 4 pods x 8 GPUs exclusive in a rack; one of its GPUs fails under
    NoExecute. The real kube-controller-manager evicts the pod on it, its controller recreates the
    gang, and the extender sends the new gang back to its rack and the three nodes whose GPUs are
    fine, although best fit alone picks the other rack (rack-a has room for 5 with the faulty node
    left out, rack-b for exactly 4: with returnHoldSeconds 0 this fails there)."""
    rack_of = _racks(cluster, test, {"rack-a": 6, "rack-b": 4})
    filler_node = next(node for node, rack in rack_of.items() if rack == "rack-b")
    gpu_pod(cluster.api, namespace, "filler", "eight", node_selector={"kubernetes.io/hostname": filler_node})
    assert wait_pod_scheduled(cluster.api, namespace, "filler") == filler_node  # rack-b has room for 3 only
    make()
    _wait_bound(cluster, namespace, selector, 4, "the gang placed", 180)
    first = {p.metadata.uid: p.spec.node_name for p in _bound(cluster.api, namespace, selector)}
    before = set(first.values())
    assert {rack_of[node] for node in before} == {"rack-a"}
    delete_pods(cluster.api, namespace, ["filler"])  # rack-b is now the tighter fit for a fresh gang
    wait_for(
        lambda: _returns_recorded(cluster), 30, "the gang's return record", lambda: cluster.log.read_text()[-3000:]
    )
    failing = sorted(before)[0]
    cluster.fail_gpu(failing, 3, xid_fault(79))
    failed_at = time.monotonic()

    def again() -> list[client.V1Pod]:
        return [p for p in _bound(cluster.api, namespace, selector) if p.metadata.uid not in first]

    def explain() -> str:
        """Which pods are the first gang's (an eviction or a recreation that never came) and what
        the controllers and the extender said."""
        pods = client.CoreV1Api(cluster.api).list_namespaced_pod(namespace).items
        ages = [
            f"{p.metadata.name} {'first' if p.metadata.uid in first else 'new'} deleted={p.metadata.deletion_timestamp}"
            for p in pods
        ]
        events = [
            f"{e.involved_object.kind}/{e.involved_object.name} {e.reason}: {e.message}"
            for e in client.CoreV1Api(cluster.api).list_namespaced_event(namespace).items
        ]
        return "\n".join([_explain(cluster.api, namespace), *ages, *events[-30:], cluster.log.read_text()[-3000:]])

    wait_for(lambda: len(again()) == 4, 180, "the gang whole again", explain)
    elapsed = time.monotonic() - failed_at
    after = {p.spec.node_name for p in again()}
    print(f"{selector}: 4 x 8 GPUs whole again {elapsed:.1f} s after the fault was published")
    assert {rack_of[node] for node in after} == {"rack-a"}, "back in its rack"
    assert before - {failing} <= after and failing not in after, "the healthy nodes reused, the faulty one left"
    returned = wait_for(lambda: _gang_events(cluster.api, namespace, "GangReturned"), 30, "the GangReturned event")
    assert "3 of the 3 node(s) kept for it taken again, same" in returned[0], returned
    assert 'nativedra_extender_gang_returns_total{outcome="same_nodes"}' in cluster.metrics()


def test_a_jobset_that_loses_a_gpu_comes_back_whole_to_its_rack_and_its_healthy_nodes(
    setup: tuple[ExtenderCluster, str, str],
) -> None:
    """The pod on the GPU is evicted, its Job fails, JobSet's failure policy recreates every Job."""
    cluster, namespace, test = setup
    workers = ReplicatedJob("workers", replicas=1, parallelism=4, template="eight")

    def make() -> None:
        create_jobset(
            cluster.api,
            namespace,
            "train",
            [workers],
            {TEST_LABEL: test},
            exclusive_topology=RACK_LABEL,
            max_restarts=3,
        )

    _fails_and_returns(cluster, namespace, test, make, f"{JOBSET_NAME}=train")


def test_an_lws_group_that_loses_a_gpu_comes_back_whole_to_its_rack_and_its_healthy_nodes(
    setup: tuple[ExtenderCluster, str, str],
) -> None:
    """The pod on the GPU is evicted and LeaderWorkerSet recreates its whole group. Its pods
    terminate as on a real node (a grace period, then the kubelet's confirmation, here the reaper's
    after 2 s): LeaderWorkerSet recreates the group on seeing a worker Terminating, and a pod
    deleted at once (grace 0) may be gone before it looks (CI, once: only that pod came back)."""
    cluster, namespace, test = setup

    with PodReaper(cluster.api, namespace, after_s=2):
        _fails_and_returns(
            cluster,
            namespace,
            test,
            lambda: _serve(cluster, namespace, test, replicas=1, size=4, exclusive=True, grace_seconds=30),
            f"{LWS_NAME}=serve",
        )


def _spares_recorded(cluster: ExtenderCluster) -> set[str]:
    leases = client.CoordinationV1Api(cluster.api).list_namespaced_lease(cluster.namespace).items
    serialize = client.ApiClient().sanitize_for_serialization
    records = [from_lease(serialize(lease)) for lease in leases if lease.metadata.name.startswith("return-")]
    return {name for kept in records if kept.returning for name in kept.spares}


@pytest.mark.parametrize("spares", [1, 0], ids=["one-spare", "no-spare"])
def test_a_spare_in_its_rack_brings_a_jobset_back_whole_by_preempting_the_spares_borrower(
    setup: tuple[ExtenderCluster, str, str], spares: int
) -> None:
    """Rack a has one node more than the 4 x 8 JobSet needs; rack b is full of work of the JobSet's
    priority. With one spare, that fifth node is kept from a pod of the JobSet's priority and lent
    to one of lower priority; when a GPU fails under NoExecute, the borrower is preempted and the
    JobSet is whole again in rack a, its healthy nodes reused. Without, the pod of equal priority
    takes the fifth node and the JobSet cannot come back while it runs."""
    cluster, namespace, test = setup
    api = cluster.api
    with priority_classes(api, {"job": 100}, "spare") as classes:
        rack_of = _racks(cluster, test, {"rack-a": 5, "rack-b": 4})
        for index, node in enumerate(node for node, rack in rack_of.items() if rack == "rack-b"):
            hostname = {"kubernetes.io/hostname": node}
            gpu_pod(api, namespace, f"busy-{index}", "eight", node_selector=hostname, priority_class=classes["job"])
            assert wait_pod_scheduled(api, namespace, f"busy-{index}") == node
        create_jobset(
            api,
            namespace,
            "train",
            [ReplicatedJob("workers", replicas=1, parallelism=4, template="eight")],
            {TEST_LABEL: test},
            exclusive_topology=RACK_LABEL,
            max_restarts=3,
            priority_class=classes["job"],
            pod_annotations={SPARES: str(spares)},
        )
        selector = f"{JOBSET_NAME}=train"
        _wait_bound(cluster, namespace, selector, 4, "the JobSet placed", 180)
        first = {p.metadata.uid: p.spec.node_name for p in _bound(api, namespace, selector)}
        before = set(first.values())
        (fifth,) = {node for node, rack in rack_of.items() if rack == "rack-a"} - before
        wait_for(lambda: _returns_recorded(cluster), 30, "the JobSet's return record")
        if spares:
            wait_for(lambda: _spares_recorded(cluster) == {fifth}, 30, "the fifth node kept as its spare")
            wait_for(lambda: "nativedra_extender_gang_spare_nodes 1.0" in cluster.metrics(), 10, "the spare counted")
        gpu_pod(api, namespace, "same", "eight", node_selector={TEST_LABEL: test}, priority_class=classes["job"])
        if spares:
            wait_judged_unschedulable(api, namespace, ["same"])
            assert not bound(api, namespace, ["same"]), "kept from work of the JobSet's priority"
            gpu_pod(api, namespace, "borrower", "eight", node_selector={TEST_LABEL: test})
            assert wait_pod_scheduled(api, namespace, "borrower") == fifth, "lent to lower priority"
        else:
            assert wait_pod_scheduled(api, namespace, "same") == fifth
        failing = sorted(before)[0]
        cluster.fail_gpu(failing, 3, xid_fault(79))
        failed_at = time.monotonic()

        def again() -> list[client.V1Pod]:
            return [p for p in pods_with(api, namespace, selector) if p.metadata.uid not in first]

        if not spares:  # JobSet's exclusive placement creates the other pods once its leader is placed
            wait_for(again, 120, "the JobSet's pods recreated", lambda: _explain(api, namespace))
            wait_judged_unschedulable(api, namespace, [p.metadata.name for p in again()])
            time.sleep(30)
            assert not [p for p in again() if p.spec.node_name], "no room in either rack while the pod runs"
            print(f"no spare: the JobSet is not whole {time.monotonic() - failed_at:.1f} s after the fault")
            return
        wait_for(
            lambda: len([p for p in again() if p.spec.node_name]) == 4,
            180,
            "the JobSet whole again",
            lambda: _explain(api, namespace) + "\n" + cluster.log.read_text()[-4000:],
        )
        print(f"one spare: 4 x 8 GPUs whole again {time.monotonic() - failed_at:.1f} s after the fault was published")
        assert {p.spec.node_name for p in again()} == (before - {failing}) | {fifth}
        assert _gang_events(api, namespace, "Preempted"), "the borrower was preempted"
        returned = wait_for(lambda: _gang_events(api, namespace, "GangReturned"), 30, "the GangReturned event")
        assert "(1 of its 1 spare(s))" in returned[0], returned
        wait_for(
            lambda: _spares_recorded(cluster) == {failing},
            30,
            "the node it left kept as its spare until healed",
            lambda: cluster.log.read_text()[-3000:],
        )
