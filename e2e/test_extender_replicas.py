"""Two extender replicas behind one Service: killing either one mid-gang changes no placement.

The real kube-scheduler calls a loopback round-robin balancer standing for the extender's Service
(mutual TLS passes through it to each replica). Each replica derives a gang's domain from the API
alone, from the members already placed, so the replica that survives answers as the killed one
would have: the rest of the gang joins the first members' rack, and a plain pod created meanwhile
does not take the nodes kept for them.
"""

from __future__ import annotations

import shutil
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from extender.plan.config import RACK_LABEL
from nativedra.base.kube.names import EXTENDER_MARKER, EXTENDER_MARKER_QUANTITY, GPU_CLASS
from nativedra.cluster import ControlPlane, wait_for
from nativedra.cluster.waits import unschedulable_message
from nativedra.objects import apply_documents, claim_template, gpu_pod, request
from testkit.extender_harness import (
    ReplicatedExtenders,
    bound,
    fresh_namespace,
    gang_pods,
    replicated_extender_cluster,
    scheduling_failures,
    settled_placement,
)
from testkit.second_scheduler import NAME as SECOND
from testkit.second_scheduler import second_scheduler

TEST_LABEL = "e2e.nativedra.dev/test"
GANG_SIZE = 4
# Two racks that could each hold the whole gang (4 pods x 8 GPUs, one per node): a replica that
# ignored the placed members would plan the rest in the other rack and split the gang.
RACKS = {"rack-a": 4, "rack-b": 4}
COMPETITOR = "competitor"
MANIFESTS = Path(__file__).resolve().parents[1] / "manifests"
PAUSE = {"name": "c", "image": "registry.k8s.io/pause:3.10"}


@pytest.fixture(scope="module")
def replicated(control_plane: ControlPlane) -> Iterator[ReplicatedExtenders]:
    root = Path(tempfile.mkdtemp(prefix="nd-replicas-", dir="/tmp"))
    try:
        config = {"topologyLevels": [RACK_LABEL, "kubernetes.io/hostname"]}
        with replicated_extender_cluster(root, config, shared=control_plane) as cluster:
            yield cluster
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def ext(replicated: ReplicatedExtenders) -> Iterator[ReplicatedExtenders]:
    """Both replicas running at the start (the Deployment replaced the one killed before); the
    test's nodes removed after."""
    replicated.start_stopped()
    yield replicated
    replicated.first.remove_nodes()


@pytest.fixture
def ns(replicated: ReplicatedExtenders) -> Iterator[str]:
    with fresh_namespace(replicated.first.api, "replicas") as name:
        yield name


@pytest.mark.parametrize(
    ("serving", "killed"),
    [
        pytest.param(0, None, id="no-kill"),
        pytest.param(0, "serving", id="kill-0-serving"),
        pytest.param(1, "serving", id="kill-1-serving"),
        pytest.param(1, "idle", id="kill-0-idle"),
        pytest.param(0, "idle", id="kill-1-idle"),
    ],
)
def test_killing_either_replica_mid_gang_changes_no_placement(
    ext: ReplicatedExtenders, ns: str, serving: int, killed: str | None, capsys: pytest.CaptureFixture[str]
) -> None:
    """A gang of 4 pods x 8 GPUs required in one rack is created two members at a time; between
    the halves one replica is SIGKILLed and a plain 8-GPU pod that fits only the gang's rack is
    created. The gang completes in the rack of its first member (what the run with no kill does)
    and the plain pod waits, told the nodes are held for the gang.

    The scheduler keeps its connection alive, so the replica the balancer routes it to ("serving")
    answers, and plans, the first members; the other one ("idle") only watches. Killing the serving
    one moves the scheduler to a replica that never saw the gang's plan; killing the idle one must
    disturb nothing. Each replica is killed in each role, and after each kill the balancer's next
    pick is the dead replica, so every new connection has to be skipped over to the survivor."""
    api = ext.first.api
    test = uuid.uuid4().hex[:6]
    rack_of = {
        node: rack
        for rack, count in RACKS.items()
        for node in ext.first.add_gpu_nodes(count, {TEST_LABEL: test, RACK_LABEL: rack})
    }
    required = {"nativedra.dev/topology-required": RACK_LABEL}

    def members(indices: range) -> list[str]:
        return gang_pods(
            api, ns, "train", GANG_SIZE, 8, selector={TEST_LABEL: test}, annotations=required, members=indices
        )

    ext.balancer.route_to(serving)
    first = members(range(2))
    wait_for(lambda: len(bound(api, ns, first)) == len(first), 60, "the first 2 members bound")
    rack = rack_of[bound(api, ns, first)[first[0]]]
    assert ext.balancer.latest == serving, f"the first members were answered by replica {ext.balancer.latest}"
    victim = {None: None, "serving": serving, "idle": (serving + 1) % len(ext.replicas)}[killed]
    served_before_kill = list(ext.balancer.served)
    if victim is not None:
        ext.replicas[victim].kill_extender()
        ext.balancer.route_to(victim)  # the scheduler's next connection tries the dead replica first

    claim_template(api, ns, COMPETITOR, [request("gpus", GPU_CLASS, count=8)])
    gpu_pod(api, ns, COMPETITOR, COMPETITOR, node_selector={TEST_LABEL: test, RACK_LABEL: rack})
    wait_for(
        lambda: "held for gang" in (unschedulable_message(api, ns, COMPETITOR) or ""),
        60,
        "the plain pod refused the gang's nodes",
        lambda: str(unschedulable_message(api, ns, COMPETITOR)),
    )
    rest = members(range(2, GANG_SIZE))
    wait_for(lambda: len(bound(api, ns, first + rest)) == GANG_SIZE, 60, "the whole gang bound")
    placement = settled_placement(api, ns, [*first, *rest, COMPETITOR])
    gang_racks = {rack_of[placement[name]] for name in first + rest}
    with capsys.disabled():
        print(
            f"\nreplica {serving} serving, killed {victim}: gang in {sorted(gang_racks)}, first member in {rack}; "
            f"connections per replica so far: {served_before_kill} before the kill, at the end {ext.balancer.served}"
        )
    assert gang_racks == {rack}, placement
    assert len(set(placement.values())) == GANG_SIZE, f"one member per 8-GPU node: {placement}"
    assert COMPETITOR not in placement, f"the plain pod took a node kept for the gang: {placement}"
    if victim is not None:
        survivor = (victim + 1) % len(ext.replicas)
        assert ext.balancer.served[survivor] > served_before_kill[survivor], "the survivor answered the rest"


def _shipped(kinds: set[str]) -> list[dict[str, Any]]:
    documents = yaml.safe_load_all((MANIFESTS / "base" / "extender.yaml").read_text())
    return [d for d in documents if d and d["kind"] in kinds]


def _bound_within(api: client.ApiClient, ns: str, pods: Callable[[], list[str]], count: int, what: str) -> float:
    """Seconds until `count` pods of `pods()` are bound (the clock started by the caller's create)."""
    started = time.monotonic()
    wait_for(lambda: len(pods()) >= count and len(bound(api, ns, pods())) >= count, 30, what)
    return time.monotonic() - started


def _wait_told_the_extender_is_down(ext: ReplicatedExtenders, ns: str, waiting: list[str]) -> None:
    """Each pod of `waiting` judged, unbound, with a FailedScheduling that names the extender's URL."""
    api = ext.first.api
    wait_for(lambda: all(scheduling_failures(api, ns, name) for name in waiting), 60, "a verdict on each waiting pod")
    for name in waiting:
        events = client.CoreV1Api(api).list_namespaced_event(ns, field_selector=f"involvedObject.name={name}").items
        messages = [e.message for e in events]
        assert any(f":{ext.balancer.port}/filter" in (m or "") for m in messages), messages
    assert bound(api, ns, waiting) == {}


def test_with_every_replica_down_only_gpu_and_gang_pods_wait(ext: ReplicatedExtenders, ns: str) -> None:
    """Both replicas killed, the shipped wiring (the marker policy, managedResources): a bare pod,
    a DaemonSet's pods, a Deployment's and the extender's own Deployment (from the shipped manifest)
    are bound within 5 s, and a replacement of the extender's pod too; a GPU pod and a gang wait,
    their FailedScheduling naming the extender; started again, the gang is placed whole."""
    api = ext.first.api
    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    test = uuid.uuid4().hex[:6]
    ext.first.add_gpu_nodes(3, {TEST_LABEL: test})
    selector = {TEST_LABEL: test}
    claim_template(api, ns, "one", [request("gpu", GPU_CLASS, count=1)])
    for replica in ext.replicas:
        replica.kill_extender()

    def names(prefix: str) -> list[str]:
        return [p.metadata.name for p in core.list_namespaced_pod(ns).items if p.metadata.name.startswith(prefix)]

    def template(app: str) -> dict[str, Any]:
        return {"metadata": {"labels": {"app": app}}, "spec": {"nodeSelector": selector, "containers": [PAUSE]}}

    def workload(name: str, **spec: Any) -> dict[str, Any]:
        return {"metadata": {"name": name}, "spec": {"selector": {"matchLabels": {"app": name}}, **spec}}

    core.create_namespaced_pod(ns, {"metadata": {"name": "bare"}, "spec": template("bare")["spec"]})
    seconds = {"bare pod": _bound_within(api, ns, lambda: names("bare"), 1, "the bare pod bound")}
    apps.create_namespaced_daemon_set(ns, workload("agent", template=template("agent")))
    seconds["DaemonSet, 3 pods"] = _bound_within(api, ns, lambda: names("agent-"), 3, "the DaemonSet's pods bound")
    apps.create_namespaced_deployment(ns, workload("web", replicas=2, template=template("web")))
    seconds["Deployment, 2 pods"] = _bound_within(api, ns, lambda: names("web-"), 2, "the Deployment's pods bound")
    for document in _shipped({"ServiceAccount", "Deployment"}):
        document["metadata"]["namespace"] = ns
        if document["kind"] == "Deployment":
            document["spec"]["template"]["spec"]["nodeSelector"] = selector
        apply_documents(api, [document], ns)
    extender = "nativedra-extender-"
    seconds["the extender's Deployment"] = _bound_within(api, ns, lambda: names(extender), 2, "its pods bound")
    deleted = names(extender)[0]
    core.delete_namespaced_pod(deleted, ns, grace_period_seconds=0)  # no kubelet here to confirm a graceful end
    seconds["the extender's replacement pod"] = _bound_within(
        api, ns, lambda: [n for n in names(extender) if n != deleted], 2, "a replacement of the extender's pod bound"
    )

    gpu_pod(api, ns, "gpu", "one", node_selector=selector)
    gang = gang_pods(api, ns, "train", 2, 8, selector=selector)
    waiting = ["gpu", *gang]
    _wait_told_the_extender_is_down(ext, ns, waiting)
    marker = core.read_namespaced_pod("gpu", ns).spec.containers[0].resources.limits or {}
    assert marker.get(EXTENDER_MARKER) == EXTENDER_MARKER_QUANTITY, "the shipped policy marked the GPU pod"
    assert EXTENDER_MARKER not in (core.read_namespaced_pod("bare", ns).spec.containers[0].resources.limits or {})
    print(f"\nwith every extender replica down, bound after: {seconds}")
    assert all(value <= 5.0 for value in seconds.values()), seconds

    started = time.monotonic()
    ext.start_stopped()
    wait_for(lambda: len(bound(api, ns, waiting)) == len(waiting), 60, "the GPU pod and the whole gang bound")
    print(f"extender back: GPU pod and gang bound {time.monotonic() - started:.1f} s after the restart began")
    apps.delete_namespaced_daemon_set("agent", ns)


def test_through_the_second_scheduler_an_outage_stops_only_its_gpu_and_gang_pods(
    ext: ReplicatedExtenders, ns: str
) -> None:
    """The second-scheduler overlay's wiring (its scheduler and marker policy; the default scheduler
    not calling the extender): both replicas killed, a bare pod of nativedra-scheduler and a GPU pod
    of the default scheduler are bound within 5 s, nativedra-scheduler's GPU pod and gang wait
    naming the extender, and started again the gang is placed whole."""
    api = ext.first.api
    test = uuid.uuid4().hex[:6]
    ext.first.add_gpu_nodes(3, {TEST_LABEL: test})
    selector = {TEST_LABEL: test}
    claim_template(api, ns, "one", [request("gpu", GPU_CLASS, count=1)])
    root = Path(tempfile.mkdtemp(prefix="nd-second-", dir="/tmp"))
    try:
        with ext.first.scheduler_alone(), second_scheduler(ext.first.plane, root, ext.balancer.port, ext.first.tls):
            for replica in ext.replicas:
                replica.kill_extender()
            spec = {"schedulerName": SECOND, "nodeSelector": selector, "containers": [PAUSE]}
            client.CoreV1Api(api).create_namespaced_pod(ns, {"metadata": {"name": "bare"}, "spec": spec})
            seconds = {f"bare pod of {SECOND}": _bound_within(api, ns, lambda: ["bare"], 1, "the bare pod bound")}
            gpu_pod(api, ns, "plain-gpu", "one", node_selector=selector)
            seconds["GPU pod of the default scheduler"] = _bound_within(
                api, ns, lambda: ["plain-gpu"], 1, "the default scheduler's GPU pod bound"
            )
            gpu_pod(api, ns, "gpu", "one", node_selector=selector, scheduler=SECOND)
            waiting = ["gpu", *gang_pods(api, ns, "train", 2, 8, selector=selector, scheduler=SECOND)]
            _wait_told_the_extender_is_down(ext, ns, waiting)
            print(f"\nsecond scheduler, every extender replica down, bound after: {seconds}")
            assert all(value <= 5.0 for value in seconds.values()), seconds
            ext.start_stopped()
            wait_for(lambda: len(bound(api, ns, waiting)) == len(waiting), 60, "its GPU pod and whole gang bound")
    finally:
        shutil.rmtree(root, ignore_errors=True)
