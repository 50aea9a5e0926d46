"""Preemption decisions an admin can defend, on real node models fed to a real ClusterState: victims
recorded by UID with the devices they held; nothing that breaks a PodDisruptionBudget or would be
refused by the Eviction API; no Kueue-managed pod; only nodes the preemptor can then use (taints,
cordon, CPU, memory, pod slots); and what is freed counted as the scheduler counts it (other
drivers' devices, adminAccess)."""

from __future__ import annotations

import json
from typing import Any

from dra_driver.discovery.simulated import load_profile, resolve_profile
from dra_driver.publishing.publish_config import PublishConfig
from dra_driver.publishing.slices import build_slices
from extender.cluster.reservation import Reservation, Reserved, Victim, lease_body, lease_name
from extender.cluster.state import ClusterState
from extender.devices.node_usage import Usage, take
from extender.plan.capacity import available
from extender.pods.demand import Request
from extender.pods.facts import PodFacts
from extender.preempt.preemption_plan import Budget, Decision, NoHelp, decide
from extender.preempt.preemptor import lapsed_back_off, not_a_victim
from testkit.builders import DRIVER, FRACTION, pod
from tests.extender.cluster.test_partners import NIC_CLASS, NIC_DRIVER, gpu_and_nic, nic_claim, nic_slice
from tests.extender.preempt.test_preemption_plan import MATCHER, NS, Cluster, _single


def _decide(cluster: Cluster, waiting: dict[str, Any], budgets: tuple[Budget, ...] = ()) -> Decision | NoHelp:
    view = cluster.view()
    return decide(cluster.occupancy(view), _single(view, waiting), list(budgets), MATCHER)


def _budget(name: str, labels: dict[str, str], allowed: int) -> Budget:
    return Budget.from_api(
        {
            "metadata": {"name": name, "namespace": NS},
            "spec": {"selector": {"matchLabels": labels}},
            "status": {"disruptionsAllowed": allowed},
        }
    )


def test_victims_are_recorded_by_uid_with_the_devices_they_held() -> None:
    cluster = Cluster({"a": {}})
    cluster.fill({"a": 0})
    decision = _decide(cluster, cluster.wait("big", 2, 100))
    assert isinstance(decision, Decision)
    assert len(decision.identities) == 2
    for victim in decision.identities:
        name = victim.pod.split("/")[1]
        index = int(name[1:])
        assert victim == Victim(victim.pod, f"uid-{name}", (f"{DRIVER}/a/gpu-{index}",))


def test_a_tainted_or_cordoned_node_the_preemptor_cannot_use_is_never_a_place_to_evict() -> None:
    """Node a holds the cheapest victims but carries a taint the preemptor does not tolerate; node b
    is cordoned; only node c, with dearer victims, is one the scheduler would let it onto."""
    cluster = Cluster({"a": {}, "b": {}, "c": {}})
    cluster.fill({"a": 0, "b": 0, "c": 10})
    cluster.node_objects[0]["spec"] = {"taints": [{"key": "team", "value": "x", "effect": "NoSchedule"}]}
    cluster.node_objects[1]["spec"] = {"unschedulable": True}
    decision = _decide(cluster, cluster.wait("big", 8, 100))
    assert isinstance(decision, Decision)
    assert list(decision.reserved) == ["c"]
    tolerant = cluster.wait("tolerant", 8, 100)
    tolerant["spec"]["tolerations"] = [{"key": "team", "operator": "Exists"}]
    decision = _decide(cluster, tolerant)
    assert isinstance(decision, Decision)
    assert list(decision.reserved) == ["a"]


def test_a_node_without_cpu_for_the_preemptor_once_the_victims_are_gone_is_skipped() -> None:
    """Node a's CPUs are taken by a pod outside the view (no devices, no gang); evicting its GPU pods
    would free GPUs the preemptor could never use there."""
    cluster = Cluster({"a": {}, "b": {}})
    cluster.fill({"a": 0, "b": 10})
    for node in cluster.node_objects:
        node["status"] = {"allocatable": {"cpu": "16", "memory": "64Gi", "pods": "110"}}
    cpu_hog = {
        "metadata": {"name": "hog", "namespace": NS, "uid": "uid-hog"},
        "spec": {"nodeName": "a", "containers": [{"name": "c", "resources": {"requests": {"cpu": "14"}}}]},
        "status": {"phase": "Running"},
    }
    cluster.pods.append(cpu_hog)
    waiting = cluster.wait("big", 8, 100)
    waiting["spec"]["containers"] = [{"name": "c", "resources": {"requests": {"cpu": "4"}}}]
    decision = _decide(cluster, waiting)
    assert isinstance(decision, Decision)
    assert list(decision.reserved) == ["b"], "node a has 2 CPUs left, the preemptor asks 4"
    waiting["spec"]["containers"] = [{"name": "c", "resources": {"requests": {"cpu": "2"}}}]
    decision = _decide(cluster, waiting)
    assert isinstance(decision, Decision)
    assert list(decision.reserved) == ["a"]


def _workload(pods: list[dict[str, Any]], admitted: bool) -> dict[str, Any]:
    """A Workload of Kueue's pod groups: owned by its pods, admitted or not (Kueue writes its status)."""
    owners = [{"kind": "Pod", "name": p["metadata"]["name"], "uid": p["metadata"]["uid"]} for p in pods]
    condition = {"type": "Admitted", "status": "True" if admitted else "False"}
    return {
        "metadata": {"name": "wl", "namespace": NS, "uid": "wl-uid", "ownerReferences": owners},
        "spec": {"podSets": [{"name": "main", "count": len(pods), "template": {"spec": {}}}]},
        "status": {"conditions": [condition]},
    }


def test_kueue_admitted_pods_are_never_victims_and_a_kueue_label_alone_proves_nothing() -> None:
    """On 424026c the label alone made node a's pods immune: any namespace user can write it."""
    cluster = Cluster({"a": {}, "b": {}})
    cluster.fill({"a": 0}, labels={"kueue.x-k8s.io/queue-name": "team-a"})
    cluster.fill({"b": 10})
    waiting = cluster.wait("big", 8, 100)
    decision = _decide(cluster, waiting)
    assert isinstance(decision, Decision) and list(decision.reserved) == ["a"], "labelled, not admitted: a victim"
    on_a = [p for p in cluster.pods if p["spec"].get("nodeName") == "a"]
    cluster.workloads = [_workload(on_a, admitted=False)]
    decision = _decide(cluster, waiting)
    assert isinstance(decision, Decision) and list(decision.reserved) == ["a"], "a Workload not admitted proves nothing"
    cluster.workloads = [_workload(on_a, admitted=True)]
    decision = _decide(cluster, waiting)
    assert isinstance(decision, Decision) and list(decision.reserved) == ["b"]
    assert all("/b" in pod for pod in decision.evicted)
    stored = cluster.state.objects["workloads"][(NS, "wl")]
    assert "spec" not in stored, "the pod templates a Workload carries are not kept"


def test_a_gang_a_budget_would_split_is_no_victim_and_nothing_breaks_a_budget() -> None:
    """A 2-pod gang on node a under a budget that allows one disruption: evicting it whole would
    break the budget (the API refuses the second eviction after the first went), so it is no
    candidate; with no other victim, nothing is evicted and the reason names the budget."""
    cluster = Cluster({"a": {}})
    labels = {"app": "guarded", "nativedra.dev/gang": "low", "nativedra.dev/gang-size": "2"}
    cluster.run("low-0", "a", 4, 0, labels=labels)
    cluster.run("low-1", "a", 4, 0, labels=labels)
    decision = _decide(cluster, cluster.wait("big", 8, 100), (_budget("guard", {"app": "guarded"}, 1),))
    assert isinstance(decision, NoHelp)
    assert decision.candidates == 2, "both held back, and said so"
    assert f"would break a PodDisruptionBudget ({NS}/guard)" in decision.reason
    allowing = _decide(cluster, cluster.wait("big2", 8, 100), (_budget("guard", {"app": "guarded"}, 2),))
    assert isinstance(allowing, Decision) and allowing.evicted == (f"{NS}/low-0", f"{NS}/low-1")


def test_single_victims_that_break_a_budget_only_together_are_refused_as_a_set() -> None:
    cluster = Cluster({"a": {}})
    cluster.fill({"a": 0}, labels={"app": "guarded"})
    decision = _decide(cluster, cluster.wait("big", 2, 100), (_budget("guard", {"app": "guarded"}, 1),))
    assert isinstance(decision, NoHelp)
    assert "would break a PodDisruptionBudget" in decision.reason


def test_a_pod_under_two_budgets_is_no_victim_the_eviction_api_refuses_it() -> None:
    cluster = Cluster({"a": {}, "b": {}})
    cluster.fill({"a": 0}, labels={"app": "guarded", "tier": "x"})
    cluster.fill({"b": 10})
    budgets = (_budget("by-app", {"app": "guarded"}, 8), _budget("by-tier", {"tier": "x"}, 8))
    decision = _decide(cluster, cluster.wait("big", 8, 100), budgets)
    assert isinstance(decision, Decision)
    assert list(decision.reserved) == ["b"]


def test_an_admin_access_claim_frees_nothing_and_its_pod_is_never_evicted_for_devices() -> None:
    """A monitoring pod with adminAccess to all 8 GPUs of node a holds none of them as the scheduler
    counts: a preemptor fits on a's free GPUs with no eviction at all, and b's pods stay."""
    cluster = Cluster({"a": {}, "b": {}})
    cluster.run("monitor", "a", 8, 0)
    for result in cluster.claims[-1]["status"]["allocation"]["devices"]["results"]:
        result["adminAccess"] = True
    cluster.fill({"b": 0})
    view = cluster.view()
    assert view.usage["a"].devices == set(), "adminAccess uses nothing"
    decision = _decide(cluster, cluster.wait("big", 8, 100))
    assert isinstance(decision, NoHelp), "it fits without evicting: no preemption"


def test_another_drivers_device_the_preemptor_needs_counts_and_its_holder_is_a_victim() -> None:
    """Node a: every GPU and its one NIC (NUMA node 0) held by low pods. A preemptor asking for a GPU
    and a NIC on one NUMA node must evict the NIC's holder too, not a GPU pod alone."""
    cluster = Cluster({"a": {}})
    cluster.fill({"a": 0})
    cluster.slices.append(nic_slice("a", {"nic-0": 0}))
    nic_user: dict[str, Any] = {
        "metadata": {"name": "nic-user", "namespace": NS, "uid": "uid-nic-user"},
        "spec": {"nodeName": "a", "priority": 0, "containers": [], "resourceClaims": [{"name": "nic"}]},
        "status": {"phase": "Running", "startTime": "2026-11-29T00:00:00Z"},
    }
    claim = nic_claim("nic-user-nic", "a", "nic-0")
    claim["status"]["reservedFor"] = [{"resource": "pods", "name": "nic-user", "uid": "uid-nic-user"}]
    nic_user["status"]["resourceClaimStatuses"] = [{"name": "nic", "resourceClaimName": "nic-user-nic"}]
    cluster.pods.append(nic_user)
    cluster.claims.append(claim)
    template: dict[str, Any] = {"metadata": {"name": "aligned", "namespace": NS}, "spec": {"spec": gpu_and_nic(True)}}
    cluster.templates[0] = template  # (index 0 is unused by the GPU counts)
    waiting = cluster.wait("big", 1, 100)
    waiting["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": "aligned"}]
    cluster.claims[-1]["spec"] = template["spec"]["spec"]
    view = cluster.view(extra_classes=[NIC_CLASS])
    decision = decide(cluster.occupancy(view), _single(view, waiting), [], MATCHER)
    assert isinstance(decision, Decision)
    assert f"{NS}/nic-user" in decision.evicted
    nic_victim = next(v for v in decision.identities if v.pod == f"{NS}/nic-user")
    assert nic_victim.devices == (f"{NIC_DRIVER}/nics-a/nic-0",)
    gpu_victims = [pod for pod in decision.evicted if pod != f"{NS}/nic-user"]
    assert len(gpu_victims) == 1 and int(gpu_victims[0].rsplit("a", 1)[1]) < 4, "a GPU on the NIC's NUMA node"


def test_devices_kept_for_a_mig_preemptor_keep_a_fraction_off_their_gpu_in_every_replicas_state() -> None:
    """`--mig-or-fractions`: a MIG placement kept for a preemptor (its Lease, read by every replica's
    state) puts its GPU in the `mig` group, so no fraction of that GPU is admitted while the victims
    end; a fraction of another GPU still is."""
    inventory = load_profile(resolve_profile("h100-8x"))
    specs = build_slices(inventory, PublishConfig(mig_or_fractions=True), "n")
    state = ClusterState(DRIVER, clock=lambda: 5.0)  # within the hold below (0 to 9)
    state.replace("nodes", [{"metadata": {"name": "n"}}])
    state.replace("resourceslices", [{"metadata": {"name": f"n-{i}"}, "spec": spec} for i, spec in enumerate(specs)])
    node = state.view().nodes["n"]
    placed = Usage()
    take(placed, node.devices["gpu-0-1g-10gb-0"])
    kept = Reservation(
        lease_name(f"{NS}/mig"), f"{NS}/mig", f"pod {NS}/mig", 100, {"n": Reserved(1, placed.minus(Usage()))}, (), 0, 9
    )
    lease = lease_body(kept, "replica-0")
    lease["metadata"]["namespace"] = "nativedra-system"
    state.apply("ADDED", "preemptions", json.loads(json.dumps(lease)))
    usage = state.view().usage["n"]
    half = Request((FRACTION,), 1)
    assert not available(node, usage, node.devices["gpu-0-1of2-0"], half)
    assert available(node, usage, node.devices["gpu-1-1of2-0"], half)


def test_a_pod_a_decision_names_is_evicted_only_below_the_preemptors_priority_and_on_its_nodes() -> None:
    """Re-checked before each eviction: on 424026c a Lease naming a pod by UID was enough."""
    kept = Reservation(
        lease_name(f"{NS}/big"), f"{NS}/big", f"pod {NS}/big", 100, {"a": Reserved(1, Usage())}, (), 0, 9
    )

    def victim(priority: int, node: str | None) -> PodFacts:
        body = pod("v", node=node)
        body["spec"]["priority"] = priority
        return PodFacts.of(body)

    assert not_a_victim(victim(10, "a"), kept) is None
    assert "priority 100 is not lower than the preemptor's 100" in (not_a_victim(victim(100, "a"), kept) or "")
    assert "priority 2000000000 is not lower" in (not_a_victim(victim(2_000_000_000, "a"), kept) or "")
    assert "runs on b, none of the nodes the decision keeps" in (not_a_victim(victim(10, "b"), kept) or "")


def test_a_preemptor_whose_hold_lapsed_unplaced_waits_longer_each_time_in_a_row() -> None:
    """Issue 48: a hold lapsed with its preemptor unplaced (something the decision could not see
    keeps it out), and the next step could evict again on the same nodes once lower priority work
    refilled them, every hold. It now waits 30 s, then twice as long each time, up to 30 min."""
    waits = [lapsed_back_off(None)]
    for _ in range(8):
        waits.append(lapsed_back_off(waits[-1]))
    assert waits == [30.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1_800.0, 1_800.0, 1_800.0]
