"""Kueue in front: the real Kueue controller (v0.19.0; `NATIVEDRA_KUEUE_VERSION=v0.17.0` for the one
before) admits JobSets and LeaderWorkerSets (real controllers, their webhooks) by a quota that
counts nativedra GPUs, and the real kube-scheduler calling the extender places what Kueue admitted,
whole, in the domain Kueue chose; the two never contradict each other.

Kueue runs with nativedra's Configuration (nativedra/cluster/kueue_config.py): DRA quota on
(`deviceClassMappings`; v0.19 charges fractions and MIG placements their memory counter, v0.17 one
device each and needs its alpha `DynamicResourceAllocation` gate), the extender marker left out of
quota. Kueue v0.17 has no support for Kubernetes' native PodGroup (docs/kueue.md).
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import shutil
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.utils.quantity import parse_quantity

from dra_driver.discovery.simulated import load_profile, resolve_profile
from dra_driver.publishing.publish_config import PublishConfig
from dra_driver.publishing.publisher import SlicePublisher
from dra_driver.publishing.slices import build_slices
from extender.plan.config import RACK_LABEL
from extender.preempt.duty import COMPONENT as PREEMPTOR_COMPONENT
from nativedra.base.kube.names import FRACTION_CLASS, GPU_CLASS, MIG_CLASS, SHARE_CLASS
from nativedra.base.kube.resources import JOBSETS
from nativedra.cluster import ControlPlane, create_fake_node, wait_for
from nativedra.cluster.addons import JOBSET, KUEUE, LWS
from nativedra.cluster.kueue_config import (
    FRACTIONS,
    GPU_MEMORY,
    MIG_PARTITIONS,
    QUEUE_LABEL,
    SHARES,
    WHOLE_GPUS,
    cluster_queue,
    counts_by_counter,
    flavor_quota,
    local_queue,
    resource_flavor,
    topology,
)
from nativedra.objects import claim_template, request
from nativedra.workload_objects import pods_with
from testkit.extender_harness import ExtenderCluster, bound, extender_cluster, fresh_namespace
from testkit.kueue import (
    REQUIRED_TOPOLOGY,
    admitted,
    apply,
    condition,
    create_queued_jobset,
    create_queued_lws,
    delete_cluster_scoped,
    ensure_addon,
    kueue_objects,
    kueue_running,
    pod_template,
    topology_domains,
    workload_of,
)

log = logging.getLogger(__name__)
TEST_LABEL = "e2e.nativedra.dev/test"
HOSTNAME = "kubernetes.io/hostname"
JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
LWS_NAME = "leaderworkerset.sigs.k8s.io/name"
LWS_GROUP = "leaderworkerset.sigs.k8s.io/group-index"
# Rounds of the TAS test (about 7 s each here, 3 of them waiting for Kueue).
TAS_ROUNDS = int(os.environ.get("NATIVEDRA_KUEUE_TAS_ROUNDS", "20"))
KUEUE_CATCH_UP_S = 3  # TAS test: how long Kueue gets to see the pods outside Kueue that came or went
KUEUE_ASK_AGAIN_S = 10  # TAS test: a workload still without quota this long is judged again
KUEUE_REFUSED_S = 60  # TAS test: still without quota after this long, Kueue has refused the round
ASK_AGAIN_LABEL = "e2e.nativedra.dev/kueue-ask-again"
NODE_CPU = 8  # TAS test: allocatable cpu of a node = its GPUs, and GPU pods ask 1 cpu per GPU


@pytest.fixture(scope="module")
def cluster(control_plane: ControlPlane) -> Iterator[ExtenderCluster]:
    """The session's plane, its scheduler calling the extender, the JobSet and LWS controllers (kept
    for the session, as e2e/test_workload_controllers.py does) and Kueue for this module only."""
    root = Path(tempfile.mkdtemp(prefix="nd-kueue-", dir="/tmp"))
    try:
        with extender_cluster(root, {"planTimeoutSeconds": 600}, shared=control_plane) as harness:
            for addon in (JOBSET, LWS):
                ensure_addon(harness.plane, harness.api, addon)
            with kueue_running(harness.plane, harness.api):
                yield harness
    finally:
        shutil.rmtree(root, ignore_errors=True)


@dataclass
class Team:
    """One test's namespace, nodes and Kueue objects (cleaned up after the test)."""

    cluster: ExtenderCluster
    namespace: str
    test: str
    cluster_queues: list[str]
    flavors: list[str]
    topologies: list[str]

    @property
    def api(self) -> client.ApiClient:
        return self.cluster.api

    def nodes(self, layout: dict[str, int], cpu: int | None = None) -> dict[str, str]:
        """node -> rack; with `cpu`, the nodes' allocatable cpu (Kueue's TAS sees only that)."""
        rack_of = {
            node: rack
            for rack, count in layout.items()
            for node in self.cluster.add_gpu_nodes(count, {TEST_LABEL: self.test, RACK_LABEL: rack})
        }
        if cpu is not None:
            core = client.CoreV1Api(self.api)
            resources = {"cpu": str(cpu), "memory": "1Ti", "pods": "250"}
            for node in rack_of:
                core.patch_node_status(node, {"status": {"capacity": resources, "allocatable": resources}})
        return rack_of

    def queue(self, name: str, groups: list[tuple[list[str], list[dict[str, Any]]]], **fields: Any) -> str:
        """A ClusterQueue for this test's namespace and a LocalQueue of the same name in it."""
        full = f"{name}-{self.test}"
        selector = {"matchLabels": {"kubernetes.io/metadata.name": self.namespace}}
        apply(self.api, cluster_queue(full, groups, namespace_selector=selector, **fields))
        apply(self.api, local_queue(name, self.namespace, full))
        self.cluster_queues.append(full)
        return name

    def publish_h100(self, prefix: str, config: PublishConfig) -> str:
        """A node of this test publishing the h100-8x profile's devices as the plugin would with
        `config` (fractions, MIG on GPUs 6-7, shares where asked); removed after the test."""
        node = f"{prefix}-{self.test}"
        create_fake_node(self.api, node, {TEST_LABEL: self.test})
        self.cluster.nodes.append(node)
        inventory = load_profile(resolve_profile("h100-8x"))
        SlicePublisher(self.api, node).reconcile(build_slices(inventory, config, node))
        return node

    def flavor(self, name: str, topology_name: str | None = None) -> str:
        full = f"{name}-{self.test}"
        apply(self.api, resource_flavor(full, {TEST_LABEL: self.test}, topology_name))
        self.flavors.append(full)
        return full


@pytest.fixture
def team(cluster: ExtenderCluster) -> Iterator[Team]:
    with fresh_namespace(cluster.api, "kq") as namespace:
        claim_template(cluster.api, namespace, "eight", [request("gpus", GPU_CLASS, count=8)])
        claim_template(cluster.api, namespace, "one", [request("gpus", GPU_CLASS, count=1)])
        made = Team(cluster, namespace, uuid.uuid4().hex[:6], [], [], [])
        try:
            yield made
        finally:
            delete_cluster_scoped(cluster.api, "ClusterQueue", made.cluster_queues)
            delete_cluster_scoped(cluster.api, "ResourceFlavor", made.flavors)
            delete_cluster_scoped(cluster.api, "Topology", made.topologies)
    cluster.remove_nodes()


def _explain(api: client.ApiClient, namespace: str) -> str:
    lines = []
    for pod in client.CoreV1Api(api).list_namespaced_pod(namespace).items:
        message = next((c.message for c in pod.status.conditions or [] if c.type == "PodScheduled"), "")
        gates = [g.name for g in pod.spec.scheduling_gates or []]
        lines.append(f"{pod.metadata.name} node={pod.spec.node_name} gates={gates} {pod.status.phase}: {message}")
    for workload in kueue_objects(api, "Workload").get(namespace=namespace).items:
        conditions = [(c["type"], c["status"], c.get("message", "")) for c in workload.status.get("conditions") or []]
        lines.append(f"workload {workload.metadata.name}: {conditions}")
    return "\n".join(lines) or "(nothing)"


def _bound(api: client.ApiClient, namespace: str, selector: str) -> list[client.V1Pod]:
    return [p for p in pods_with(api, namespace, selector) if p.spec.node_name]


def _wait_bound(team: Team, selector: str, count: int, what: str, timeout: float = 180) -> float:
    """Seconds until `count` pods matching `selector` are bound."""
    started = time.monotonic()
    wait_for(
        lambda: len(_bound(team.api, team.namespace, selector)) == count,
        timeout,
        what,
        lambda: _explain(team.api, team.namespace),
    )
    return time.monotonic() - started


def _workload(team: Team, owner: dict[str, Any]) -> dict[str, Any] | None:
    return workload_of(team.api, team.namespace, owner["metadata"]["uid"])


def _wait_workload(team: Team, owner: dict[str, Any], test: Any, what: str, timeout: float = 60) -> dict[str, Any]:
    found: dict[str, Any] = {}

    def check() -> bool:
        workload = _workload(team, owner)
        if workload is not None and test(workload):
            found["workload"] = workload
            return True
        return False

    wait_for(check, timeout, what, lambda: _explain(team.api, team.namespace))
    workload: dict[str, Any] = found["workload"]
    return workload


def _queued_job(team: Team, name: str, queue: str, template: dict[str, Any]) -> dict[str, Any]:
    """A Job of one pod of `template` in `queue`, never retried; returns what `_workload` takes."""
    body = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": {QUEUE_LABEL: queue}},
        "spec": {"backoffLimit": 0, "template": template},
    }
    job = client.BatchV1Api(team.api).create_namespaced_job(team.namespace, body)
    return {"metadata": {"uid": job.metadata.uid}}


def _gpu_quota(team: Team, name: str, gpus: int, flavor: str | None = None, **fields: Any) -> str:
    """A queue of `gpus` whole GPUs in `flavor` (default: a flavor of its own; queues of a cohort
    lend and borrow quota of the flavors they share)."""
    flavor = flavor or team.flavor(f"{name}-gpus")
    return team.queue(name, [([WHOLE_GPUS], [flavor_quota(flavor, {WHOLE_GPUS: str(gpus)})])], **fields)


def _finish(team: Team, selector: str) -> None:
    """What a kubelet reports when the containers exit 0: the pods Succeeded."""
    core = client.CoreV1Api(team.api)
    for pod in pods_with(team.api, team.namespace, selector):
        core.patch_namespaced_pod_status(pod.metadata.name, team.namespace, {"status": {"phase": "Succeeded"}})


def test_two_jobsets_over_one_teams_quota_one_runs_whole_and_the_other_waits_suspended(team: Team) -> None:
    """32 GPUs of quota on a 48-GPU cluster: the first 4 x 8-GPU JobSet is admitted and placed whole;
    the second stays suspended with no pod and Kueue's reason, and runs whole once the first is done."""
    team.nodes({"rack-a": 3, "rack-b": 3})
    queue = _gpu_quota(team, "team-a", 32)
    first = create_queued_jobset(team.api, team.namespace, "first", queue, replicas=4, template=pod_template("eight"))
    took = _wait_bound(team, f"{JOBSET_NAME}=first", 4, "the first JobSet admitted and placed whole")
    log.info("first JobSet: 4 pods bound %.1f s after creation", took)
    second = create_queued_jobset(team.api, team.namespace, "second", queue, replicas=4, template=pod_template("eight"))
    pending = _wait_workload(
        team,
        second,
        lambda w: (condition(w, "QuotaReserved") or {}).get("status") == "False",
        "Kueue's verdict on the second JobSet",
    )
    reason = condition(pending, "QuotaReserved")
    assert reason is not None and "insufficient" in reason["message"].lower(), reason
    log.info("the second JobSet waits: %s", reason["message"])
    time.sleep(3)
    assert JOBSETS.get(team.api, "second", team.namespace)["spec"]["suspend"] is True
    assert pods_with(team.api, team.namespace, f"{JOBSET_NAME}=second") == [], "a suspended JobSet has no pods"
    assert len(_bound(team.api, team.namespace, f"{JOBSET_NAME}=first")) == 4
    _finish(team, f"{JOBSET_NAME}=first")
    took = _wait_bound(team, f"{JOBSET_NAME}=second", 4, "the second JobSet admitted and placed whole", 240)
    log.info("second JobSet: 4 pods bound %.1f s after the first finished", took)
    assert admitted(_workload(team, second))
    assert admitted(_workload(team, first)) or condition(_workload(team, first), "Finished") is not None


def test_a_jobset_under_kueue_tas_is_placed_whole_in_the_rack_kueue_chose(team: Team) -> None:
    """Kueue's TAS chooses the rack of a podset-required-topology JobSet, and each pod's host, from its
    own view (node cpu, pods' cpu requests: GPU pods ask 1 cpu per GPU on nodes of 8 cpu; Kueue v0.17
    TAS counts no DRA device), and every pod is placed on the host Kueue chose for it. Over several
    rounds on racks of uneven free capacity, 1-GPU pods outside Kueue arriving and leaving in
    between: every pod bound, in Kueue's rack, none stuck."""
    rng = random.Random(22)  # noqa: S311 - a reproducible test, not cryptography
    name = f"racks-{team.test}"
    apply(team.api, topology(name, [RACK_LABEL, HOSTNAME]))
    team.topologies.append(name)
    rack_of = team.nodes({"rack-a": 2, "rack-b": 3, "rack-c": 4}, cpu=NODE_CPU)
    tas = team.flavor("tas", name)
    gpus = team.flavor("gpus")
    queue = team.queue(
        "team-tas",
        [(["cpu"], [flavor_quota(tas, {"cpu": "1000"})]), ([WHOLE_GPUS], [flavor_quota(gpus, {WHOLE_GPUS: "1000"})])],
    )
    singles: list[str] = []
    durations = []
    refused: list[str] = []  # rounds Kueue never admitted although the API showed room
    made_room = 0
    for round_ in range(TAS_ROUNDS):
        singles += _singles_with_cpu(team, rng.randint(2, 6), rng, rack_of)
        _wait_all_bound(team, list(singles), "the 1-GPU pods bound")
        size = rng.choice([2, 3])
        # Kueue v0.17 does not try a workload again when pods outside Kueue leave (only on its own
        # events), so 1-GPU pods leave first until some rack has room for the round's JobSet.
        left: set[str] = set()
        while _most_free_nodes_in_a_rack(team, singles, rack_of) < size:
            gone = singles.pop(rng.randrange(len(singles)))
            client.CoreV1Api(team.api).delete_namespaced_pod(gone, team.namespace, grace_period_seconds=0)
            left.add(gone)
            made_room += 1
        # Kueue admits from its own view of the pods outside Kueue, which its reconciler updates some
        # time after each one is bound or gone, and it never looks again at a workload it admitted on
        # a stale view (it pins a pod to a host that was full) nor at one it refused when such pods
        # leave. So the pods that made room must be gone from the API, and Kueue given time to see
        # every change of this round, arrivals too (nothing tells when; 1 s was too short once on a
        # loaded 2-core machine, and a round with no departure once admitted onto a new arrival).
        wait_for(lambda left=left: not left & _pod_names(team), 60, "the 1-GPU pods that made room gone")  # type: ignore[misc]
        time.sleep(KUEUE_CATCH_UP_S)
        jobset_name = f"train-{round_}"
        template = pod_template("eight", cpu=str(NODE_CPU), annotations={REQUIRED_TOPOLOGY: RACK_LABEL})
        owner = create_queued_jobset(team.api, team.namespace, jobset_name, queue, replicas=size, template=template)
        selector = f"{JOBSET_NAME}={jobset_name}"
        took = _wait_bound_asking_kueue_again(
            team, selector, size, f"round {round_}: the {size}-pod JobSet placed whole", owner, rack_of
        )
        workload = _workload(team, owner)
        if took is None:  # Kueue's own count refused it: nothing of the extender's to judge
            refused.append(f"round {round_}: {_quota_reason(workload)}")
            JOBSETS.delete_namespaced(team.api, jobset_name, team.namespace)
            _wait_workload_gone(team, owner, f"round {round_}: the refused Workload gone")
            continue
        assert workload is not None and admitted(workload)
        domains = topology_domains(workload)
        hosts = {values[HOSTNAME]: count for values, count in domains}
        chosen = {values.get(RACK_LABEL) or rack_of[values[HOSTNAME]] for values, _ in domains}
        nodes = [p.spec.node_name for p in _bound(team.api, team.namespace, selector)]
        placed = {rack_of[node] for node in nodes}
        log.info("round %d: Kueue chose %s %s, pods placed in %s after %.1f s", round_, chosen, hosts, placed, took)
        assert len(chosen) == 1 and placed == chosen, f"round {round_}: Kueue chose {domains}, pods in {placed}"
        assert {node: nodes.count(node) for node in nodes} == hosts, f"round {round_}: {domains} vs {nodes}"
        durations.append(took)
        _finish(team, selector)
        JOBSETS.delete_namespaced(team.api, jobset_name, team.namespace)
        # Kueue frees the quota and its TAS usage with the Workload, and does not look again at a
        # workload it refused when only pods outside Kueue leave: the next round starts after.
        _wait_workload_gone(team, owner, f"round {round_}: the Workload gone")
        leaving = rng.sample(singles, k=min(len(singles), rng.randint(0, 4)))
        for pod in leaving:
            client.CoreV1Api(team.api).delete_namespaced_pod(pod, team.namespace, grace_period_seconds=0)
        singles = [s for s in singles if s not in leaving]
    log.info(
        "TAS rounds: %d (%d 1-GPU pods removed to make room), seconds to bound per round %s; refused by Kueue: %s",
        TAS_ROUNDS,
        made_room,
        [round(d, 1) for d in durations],
        refused,
    )
    assert len(refused) <= TAS_ROUNDS // 4, f"Kueue refused {len(refused)} of {TAS_ROUNDS} rounds: {refused}"


def _wait_bound_asking_kueue_again(
    team: Team, selector: str, count: int, what: str, owner: dict[str, Any], rack_of: dict[str, str]
) -> float | None:
    """Seconds until `count` pods matching `selector` are bound; None when Kueue never reserved
    quota for the workload within KUEUE_REFUSED_S. Kueue retries a workload it found inadmissible
    on its own events only (a node's labels, allocatable or taints changing), never when pods
    outside Kueue leave, and judges from its own count of them, which lags and, in CI, once kept
    counting pods gone for good ("allows to fit only 1 out of 2 pod(s) ... excluded: resource
    cpu: 7" with 5 nodes in use, through 18 node updates). So while the workload has no quota,
    every KUEUE_ASK_AGAIN_S a label of one of the test's nodes changes, as node updates do in a
    live cluster, and Kueue judges it again; a workload it still refuses is Kueue's own verdict,
    with nothing placed for the extender to follow. Once quota is reserved, the pods must bind."""
    started = time.monotonic()
    asked = [started]

    def placed() -> bool | str:
        if len(_bound(team.api, team.namespace, selector)) == count:
            return True
        now = time.monotonic()
        reserved = condition(_workload(team, owner), "QuotaReserved")
        if reserved and reserved["status"] == "True":
            return False
        if now - started > KUEUE_REFUSED_S:
            return "refused"
        if now - asked[-1] > KUEUE_ASK_AGAIN_S:
            node = sorted(rack_of)[len(asked) % len(rack_of)]
            patch = {"metadata": {"labels": {ASK_AGAIN_LABEL: str(len(asked))}}}
            client.CoreV1Api(team.api).patch_node(node, patch)
            asked.append(now)
        return False

    outcome = wait_for(placed, 180, what, lambda: _explain(team.api, team.namespace))
    if len(asked) > 1:
        log.info("%s: Kueue asked again %d time(s)", what, len(asked) - 1)
    return None if outcome == "refused" else time.monotonic() - started


def _quota_reason(workload: dict[str, Any] | None) -> str:
    reserved = condition(workload, "QuotaReserved")
    return str(reserved.get("message")) if reserved else "no QuotaReserved condition"


def _wait_workload_gone(team: Team, owner: dict[str, Any], what: str) -> None:
    wait_for(lambda: _workload(team, owner) is None, 60, what, lambda: _explain(team.api, team.namespace))


def _pod_names(team: Team) -> set[str]:
    return {p.metadata.name for p in client.CoreV1Api(team.api).list_namespaced_pod(team.namespace).items}


def _most_free_nodes_in_a_rack(team: Team, singles: list[str], rack_of: dict[str, str]) -> int:
    """The most nodes without a 1-GPU pod in one rack (an 8-GPU pod needs a whole node)."""
    busy = set(bound(team.api, team.namespace, singles).values())
    free: dict[str, int] = {}
    for node, rack in rack_of.items():
        free[rack] = free.get(rack, 0) + (node not in busy)
    return max(free.values())


def _wait_all_bound(team: Team, names: list[str], what: str) -> None:
    wait_for(
        lambda: len(bound(team.api, team.namespace, names)) == len(names),
        120,
        what,
        lambda: _explain(team.api, team.namespace),
    )


def _singles_with_cpu(team: Team, count: int, rng: random.Random, rack_of: dict[str, str]) -> list[str]:
    core = client.CoreV1Api(team.api)
    racks = sorted(set(rack_of.values()))
    names = []
    for _ in range(count):
        name = f"single-{uuid.uuid4().hex[:6]}"
        body = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name},
            "spec": {
                "terminationGracePeriodSeconds": 0,
                "nodeSelector": {TEST_LABEL: team.test, RACK_LABEL: rng.choice(racks)},
                "containers": [
                    {
                        "name": "main",
                        "image": "registry.invalid/cuda:12",
                        "resources": {"claims": [{"name": "gpus"}], "requests": {"cpu": "1"}},
                    }
                ],
                "resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": "one"}],
            },
        }
        core.create_namespaced_pod(team.namespace, body)
        names.append(name)
    return names


def test_a_leaderworkerset_through_kueues_pod_groups_is_admitted_and_placed_group_by_group(team: Team) -> None:
    """Quota for one 2 x 8-GPU group on 4 nodes: one group is admitted and placed whole; the other
    stays gated by Kueue and holds nothing (16 1-GPU pods outside Kueue take the 2 nodes it would
    need); once they are gone, raising the quota admits it, placed whole."""
    team.nodes({"rack-a": 4})
    queue = _gpu_quota(team, "team-lws", 16)
    create_queued_lws(
        team.api,
        team.namespace,
        "serve",
        queue,
        replicas=2,
        size=2,
        template=pod_template("eight", restart_policy="Always"),
    )
    selector = f"{LWS_NAME}=serve"
    wait_for(lambda: len(pods_with(team.api, team.namespace, selector)) == 4, 60, "the LWS's 4 pods")
    took = _wait_bound(team, selector, 2, "one LWS group admitted and placed whole", 180)
    groups = {p.metadata.labels[LWS_GROUP] for p in _bound(team.api, team.namespace, selector)}
    assert len(groups) == 1, f"one whole group, not halves of two: {groups}"
    waiting = [p for p in pods_with(team.api, team.namespace, selector) if not p.spec.node_name]
    assert all("kueue.x-k8s.io/admission" in [g.name for g in p.spec.scheduling_gates or []] for p in waiting)
    single = _singles_with_cpu(team, 16, random.Random(1), dict.fromkeys(team.cluster.nodes, "rack-a"))  # noqa: S311
    wait_for(
        lambda: len(bound(team.api, team.namespace, single)) == 16,
        120,
        "1-GPU pods on the GPUs the gated group does not hold",
        lambda: _explain(team.api, team.namespace),
    )
    for pod in single:
        client.CoreV1Api(team.api).delete_namespaced_pod(pod, team.namespace, grace_period_seconds=0)
    wait_for(lambda: not bound(team.api, team.namespace, single), 60, "the 1-GPU pods gone")
    apply(
        team.api,
        cluster_queue(
            f"team-lws-{team.test}",
            [([WHOLE_GPUS], [flavor_quota(f"team-lws-gpus-{team.test}", {WHOLE_GPUS: "32"})])],
            namespace_selector={"matchLabels": {"kubernetes.io/metadata.name": team.namespace}},
        ),
    )
    took2 = _wait_bound(team, selector, 4, "the second group admitted and placed whole once quota allows", 180)
    log.info("LWS: first group bound after %.1f s, second %.1f s after the quota was raised", took, took2)
    per_group: dict[str, int] = {}
    for pod in _bound(team.api, team.namespace, selector):
        per_group[pod.metadata.labels[LWS_GROUP]] = per_group.get(pod.metadata.labels[LWS_GROUP], 0) + 1
    assert per_group == {"0": 2, "1": 2}, per_group


def test_cohort_borrowing_and_reclaim_move_whole_workloads(team: Team) -> None:
    """Two teams of 16 GPUs in one cohort on 32 GPUs: team A's 32-GPU JobSet borrows team B's idle
    quota and runs whole; team B's 16-GPU JobSet reclaims it: Kueue evicts A whole (no pod of it left
    holding GPUs), B is placed whole, and the extender evicts nothing of its own."""
    team.nodes({"rack-a": 2, "rack-b": 2})
    cohort = f"co-{team.test}"
    reclaim = {"reclaimWithinCohort": "Any", "withinClusterQueue": "Never"}
    shared = team.flavor("gpus")
    queue_a = _gpu_quota(team, "team-a", 16, shared, cohort=cohort, preemption=reclaim)
    queue_b = _gpu_quota(team, "team-b", 16, shared, cohort=cohort, preemption=reclaim)
    borrower = create_queued_jobset(
        team.api, team.namespace, "big", queue_a, replicas=4, template=pod_template("eight")
    )
    took = _wait_bound(team, f"{JOBSET_NAME}=big", 4, "team A's JobSet placed whole on borrowed quota")
    log.info("borrowing JobSet bound after %.1f s", took)
    started = time.monotonic()
    owner = create_queued_jobset(team.api, team.namespace, "own", queue_b, replicas=2, template=pod_template("eight"))
    took = _wait_bound(team, f"{JOBSET_NAME}=own", 2, "team B's JobSet placed whole after reclaiming", 240)
    log.info("reclaiming JobSet bound %.1f s after creation", time.monotonic() - started)
    assert _bound(team.api, team.namespace, f"{JOBSET_NAME}=big") == [], "the reclaimed JobSet left whole"
    assert JOBSETS.get(team.api, "big", team.namespace)["spec"]["suspend"] is True
    evicted = condition(_workload(team, borrower), "Evicted")
    assert evicted is not None and evicted["status"] == "True", evicted
    assert admitted(_workload(team, owner))
    events = client.CoreV1Api(team.api).list_namespaced_event(team.namespace).items
    assert not [e for e in events if e.reason == "Preempted" and e.source.component == PREEMPTOR_COMPONENT]


@dataclass(frozen=True)
class Counted:
    """A one-pod Job's devices, and what each Kueue release charges for it (None: inadmissible, with
    a message that says so). v0.19 quantities are the counters the matched devices consume."""

    requests: list[dict[str, Any]]
    v017: dict[str, str] | None
    v019: dict[str, str] | None
    message: str = ""
    constraints: list[dict[str, Any]] | None = None
    limits: dict[str, str] | None = None


def _of(selector: str, value: str) -> str:
    return f"device.attributes['gpu.nativedra.dev'].{selector} == '{value}'"


# The devices of the h100-8x node the test publishes (dra_driver/publishing/slices.py): an H100 has
# 85520809984 bytes; a half is 42760404992, a quarter 21380202496; MIG 1g.10gb 10334765056,
# 3g.40gb 42144366592 (40192 MiB) and 7g.80gb, the largest, 84825604096 (80896 MiB): NVML's profile sizes.
COUNTED = {
    "whole-gpus": Counted([request("gpus", GPU_CLASS, count=2)], {WHOLE_GPUS: "2"}, {WHOLE_GPUS: "2"}),
    "a-quarter-gpu": Counted(
        [request("gpus", FRACTION_CLASS, selector=_of("fraction", "1/4"))],
        None,
        {GPU_MEMORY: "21380202496"},
        "CEL selectors are not supported",
    ),
    "any-fraction": Counted([request("gpus", FRACTION_CLASS)], {FRACTIONS: "1"}, {GPU_MEMORY: "42760404992"}),
    "two-1g-mig-placements": Counted(
        [request("gpus", MIG_CLASS, count=2, selector=_of("profile", "1g.10gb"))],
        None,
        {GPU_MEMORY: str(2 * 10334765056)},
        "CEL selectors are not supported",
    ),
    "a-3g-mig-placement": Counted(
        [request("gpus", MIG_CLASS, selector=_of("profile", "3g.40gb"))],
        None,
        {GPU_MEMORY: "42144366592"},
        "CEL selectors are not supported",
    ),
    "two-mig-placements-of-any-size": Counted(
        [request("gpus", MIG_CLASS, count=2)], {MIG_PARTITIONS: "2"}, {GPU_MEMORY: str(2 * 84825604096)}
    ),
    "a-share-of-any-size": Counted(
        [request("gpus", SHARE_CLASS, capacity={"memory": "10Gi"})], {SHARES: "1"}, {SHARES: "1"}
    ),
    "extended-resource-limits": Counted([], {WHOLE_GPUS: "2"}, {WHOLE_GPUS: "2"}, limits={WHOLE_GPUS: "2"}),
    "cel-selector": Counted(
        [request("gpus", GPU_CLASS, selector="device.attributes['gpu.nativedra.dev'].productName != ''")],
        None,
        {WHOLE_GPUS: "1"},
        "CEL selectors are not supported",
    ),
    "same-numa-constraint": Counted(
        [request("gpus", GPU_CLASS, count=2)],
        None,
        {WHOLE_GPUS: "2"},
        "device constraints (MatchAttribute) are not supported",
        constraints=[{"requests": ["gpus"], "matchAttribute": "resource.kubernetes.io/numaNode"}],
    ),
}


@pytest.mark.parametrize("case", list(COUNTED))
def test_what_kueue_counts_for_each_nativedra_device_kind(team: Team, case: str) -> None:
    """Kueue's quota usage for one pod's claim template (the `deviceClassMappings` of
    nativedra/cluster/kueue_config.py). v0.17: a device counts 1 of its class's resource whatever its
    size; CEL selectors and constraints make the workload inadmissible. v0.19: fractions and MIG
    placements are charged the memory counter their matched devices consume (read from the slices of
    one published h100-8x node: fractions on GPUs 0-4, a share GPU 5, MIG on GPUs 6-7); selectors and
    constraints are accepted. Admission is quota alone: nothing is scheduled."""
    counted = COUNTED[case]
    expected = counted.v019 if counts_by_counter(KUEUE.version) else counted.v017
    team.publish_h100("count", PublishConfig(share_gpus=(5,)))
    parts = {GPU_MEMORY: "10Ti"} if counts_by_counter(KUEUE.version) else {FRACTIONS: "100", MIG_PARTITIONS: "100"}
    quota = {WHOLE_GPUS: "100", SHARES: "100", **parts}
    flavor = team.flavor("devices")
    queue = team.queue("devices", [(list(quota), [flavor_quota(flavor, quota)])])
    if counted.requests:
        claim_template(team.api, team.namespace, "devices", counted.requests, counted.constraints)
    resources: dict[str, Any] = {"claims": [{"name": "gpus"}]} if counted.requests else {}
    if counted.limits:
        resources["limits"] = counted.limits
    claims = [{"name": "gpus", "resourceClaimTemplateName": "devices"}] if counted.requests else []
    container = {"name": "main", "image": "registry.invalid/cuda:12", "resources": resources}
    owner = _queued_job(
        team, "count", queue, {"spec": {"restartPolicy": "Never", "containers": [container], "resourceClaims": claims}}
    )
    if expected is None:
        workload = _wait_workload(
            team,
            owner,
            lambda w: (
                (condition(w, "QuotaReserved") or {}).get("reason") == "Inadmissible"
                or counted.message in str(w.get("status"))
            ),
            f"Kueue's verdict on {case}",
        )
        assert counted.message in str(workload.get("status")), workload.get("status")
        assert not admitted(workload)
        log.info("%s: inadmissible: %s", case, (condition(workload, "QuotaReserved") or {}).get("message"))
        return
    workload = _wait_workload(team, owner, admitted, f"{case} admitted")
    usage = workload["status"]["admission"]["podSetAssignments"][0]["resourceUsage"]
    log.info("Kueue %s, %s: charged %s", KUEUE.version, case, usage)
    assert {name: parse_quantity(value) for name, value in usage.items()} == {
        name: parse_quantity(value) for name, value in expected.items()
    }, usage


def test_a_pod_kueue_admitted_is_never_a_victim_of_the_extenders_preemption(team: Team) -> None:
    """A 2 x 4-GPU JobSet admitted by Kueue runs on the one node, at a low priority; a high-priority
    8-GPU pod outside Kueue waits for that node. Kueue owns the JobSet's admission and eviction, so
    the extender evicts nothing of it (not even whole) and the pod keeps waiting."""
    team.nodes({"rack-a": 1})
    scheduling = client.SchedulingV1Api(team.api)
    low, high = f"kq-low-{team.test}", f"kq-high-{team.test}"
    scheduling.create_priority_class({"metadata": {"name": low}, "value": 10})
    scheduling.create_priority_class({"metadata": {"name": high}, "value": 1000})
    try:
        claim_template(team.api, team.namespace, "four", [request("gpus", GPU_CLASS, count=4)])
        template = pod_template("four")
        template["spec"]["priorityClassName"] = low
        queue = _gpu_quota(team, "team-a", 8)
        create_queued_jobset(team.api, team.namespace, "held", queue, replicas=2, template=template)
        _wait_bound(team, f"{JOBSET_NAME}=held", 2, "the Kueue-admitted JobSet placed")
        running = {p.metadata.uid for p in _bound(team.api, team.namespace, f"{JOBSET_NAME}=held")}
        body = {
            "metadata": {"name": "big"},
            "spec": {
                "priorityClassName": high,
                "containers": [
                    {
                        "name": "main",
                        "image": "registry.invalid/cuda:12",
                        "resources": {"claims": [{"name": "gpus"}]},
                    }
                ],
                "resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": "eight"}],
            },
        }
        core = client.CoreV1Api(team.api)
        core.create_namespaced_pod(team.namespace, body)
        wait_for(
            lambda: any(
                c.type == "PodScheduled" and c.reason == "Unschedulable"
                for c in core.read_namespaced_pod("big", team.namespace).status.conditions or []
            ),
            60,
            "the high-priority pod judged unschedulable",
        )
        time.sleep(5)  # five preemption steps
        still = _bound(team.api, team.namespace, f"{JOBSET_NAME}=held")
        assert {p.metadata.uid for p in still} == running
        assert all(p.metadata.deletion_timestamp is None for p in still)
        assert bound(team.api, team.namespace, ["big"]) == {}
        events = core.list_namespaced_event(team.namespace).items
        assert not [e for e in events if e.reason == "Preempted" and e.source.component == PREEMPTOR_COMPONENT]
    finally:
        with contextlib.suppress(client.ApiException):  # waiting, it would take a later test's nodes
            client.CoreV1Api(team.api).delete_namespaced_pod("big", team.namespace, grace_period_seconds=0)
        for name in (low, high):
            scheduling.delete_priority_class(name)


def test_a_kueue_label_without_an_admitted_workload_is_an_ordinary_victim(team: Team) -> None:
    """On 424026c the label alone made a pod Kueue's: a low-priority pod labelled
    `kueue.x-k8s.io/podset`, which no Workload owns (Kueue runs here and admitted nothing of it),
    kept the node's 8 GPUs from a high-priority pod for ever. Now it is preempted like any other."""
    team.nodes({"rack-a": 1})
    scheduling = client.SchedulingV1Api(team.api)
    low, high = f"kf-low-{team.test}", f"kf-high-{team.test}"
    scheduling.create_priority_class({"metadata": {"name": low}, "value": 10})
    scheduling.create_priority_class({"metadata": {"name": high}, "value": 1000})
    core = client.CoreV1Api(team.api)

    def pod(name: str, priority_class: str, labels: dict[str, str]) -> dict[str, Any]:
        container = {"name": "main", "image": "registry.invalid/cuda:12", "resources": {"claims": [{"name": "gpus"}]}}
        return {
            "metadata": {"name": name, "labels": labels},
            "spec": {
                "priorityClassName": priority_class,
                "terminationGracePeriodSeconds": 0,  # no kubelet here confirms a graceful end
                "containers": [container],
                "resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": "eight"}],
            },
        }

    try:
        core.create_namespaced_pod(team.namespace, pod("forged", low, {"kueue.x-k8s.io/podset": "main"}))
        wait_for(lambda: bound(team.api, team.namespace, ["forged"]) != {}, 90, "the forged pod bound")
        core.create_namespaced_pod(team.namespace, pod("big", high, {}))
        wait_for(lambda: bound(team.api, team.namespace, ["big"]) != {}, 120, "the high-priority pod placed")
        events = core.list_namespaced_event(team.namespace, field_selector="reason=Preempted").items
        assert [e.involved_object.name for e in events if e.source.component == PREEMPTOR_COMPONENT] == ["forged"]
    finally:
        for name in ("forged", "big"):  # waiting, it would take a later test's nodes
            with contextlib.suppress(client.ApiException):
                core.delete_namespaced_pod(name, team.namespace, grace_period_seconds=0)
        for name in (low, high):
            scheduling.delete_priority_class(name)


def test_a_memory_quota_admits_as_many_parts_as_fit_in_it(team: Team) -> None:
    """v0.19: a queue of one H100's memory (80Gi of `nativedra.dev/gpu-memory`) admits four
    quarter-GPU Jobs and keeps the fifth waiting. v0.17 (no counters, no selectors): a queue of 4
    fractions admits four fractions of any size and keeps the fifth waiting."""
    team.publish_h100("quota", PublishConfig())
    if counts_by_counter(KUEUE.version):
        quota = {GPU_MEMORY: "80Gi"}
        claim_template(
            team.api, team.namespace, "part", [request("gpus", FRACTION_CLASS, selector=_of("fraction", "1/4"))]
        )
    else:
        quota = {FRACTIONS: "4"}
        claim_template(team.api, team.namespace, "part", [request("gpus", FRACTION_CLASS)])
    flavor = team.flavor("parts")
    queue = team.queue("parts", [(list(quota), [flavor_quota(flavor, quota)])])
    owners = []
    for index in range(5):
        owners.append(_queued_job(team, f"part-{index}", queue, pod_template("part")))
        time.sleep(0.2)  # Kueue admits in creation order: the fifth is the one that waits

    def verdicts() -> list[bool]:
        workloads = [_workload(team, owner) for owner in owners]
        return [w is not None and admitted(w) for w in workloads]

    wait_for(lambda: sum(verdicts()) == 4, 60, "four Jobs admitted", lambda: _explain(team.api, team.namespace))
    time.sleep(3)  # and the fifth still waits once Kueue has had its chance
    assert verdicts() == [True, True, True, True, False]
    waiting = _workload(team, owners[4])
    assert waiting is not None
    reserved = condition(waiting, "QuotaReserved") or {}
    log.info("Kueue %s, the fifth: %s", KUEUE.version, reserved.get("message"))
    assert reserved.get("status") == "False", reserved
