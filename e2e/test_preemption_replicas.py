"""Preemption with two extender replicas behind one Service address: one decides (the Lease), both
keep the freed devices for the preemptor. The deciding replica is killed while its victims are still
terminating: the other takes over, evicts nothing twice, keeps the devices, and lets the preemption
go once the preemptor is bound. Its own module: the single-replica extender of test_preemption.py
must not run beside these (it would elect a decider of its own)."""

from __future__ import annotations

import os
import signal
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from extender.cluster.reservation import LABEL
from extender.preempt.preemptor import LEADER_LEASE
from nativedra.base.kube.names import GPU_CLASS
from nativedra.cluster import ControlPlane, wait_for
from nativedra.objects import claim_template, gpu_pod, request
from testkit.admission_webhooks import Evictions, eviction_webhook
from testkit.extender_harness import (
    ExtenderCluster,
    ReplicatedExtenders,
    bound,
    fresh_namespace,
    replicated_extender_cluster,
)
from testkit.pod_reaper import PodReaper
from testkit.priority_classes import priority_classes

pytestmark = pytest.mark.timeout(600)
PRIORITIES = {"low": 10, "high": 1000}
TERMINATING_S = 8.0  # victims' containers take this long to stop (the reaper confirms them then)


@pytest.fixture
def replicas(control_plane: ControlPlane, tmp_path: Path) -> Iterator[ReplicatedExtenders]:
    with replicated_extender_cluster(tmp_path, {"preemptionHoldSeconds": 120}, shared=control_plane) as cluster:
        yield cluster


def _node_of_victims(first: ExtenderCluster, namespace: str, low: str) -> list[str]:
    """A node whose 8 GPUs are held by 8 low-priority pods (30 s grace), bound; claim templates
    `one` and `eight`. Returns the pods."""
    api = first.api
    claim_template(api, namespace, "one", [request("gpus", GPU_CLASS, count=1)])
    claim_template(api, namespace, "eight", [request("gpus", GPU_CLASS, count=8)])
    (node,) = first.add_gpu_nodes(1)
    victims = [f"low-{index}" for index in range(8)]
    for name in victims:
        gpu_pod(api, namespace, name, "one", node=node, priority_class=low, grace_seconds=30)
    wait_for(lambda: len(bound(api, namespace, victims)) == 8, 90, "the low pods bound")
    return victims


def _leader(replicas: ReplicatedExtenders) -> int:
    """The index of the replica holding the preemption Lease (identity: host and process id)."""
    first = replicas.first
    lease = client.CoordinationV1Api(first.api).read_namespaced_lease(LEADER_LEASE, first.namespace)
    holder = lease.spec.holder_identity
    for index, replica in enumerate(replicas.replicas):
        assert replica.process is not None
        if holder == f"{socket.gethostname()}-{replica.process.pid}":
            return index
    raise AssertionError(f"no replica holds the Lease: {holder}")


def test_the_deciding_replica_killed_mid_preemption_loses_no_hold_and_evicts_nothing_twice(
    replicas: ReplicatedExtenders,
) -> None:
    first = replicas.first
    api = first.api
    try:
        with (
            priority_classes(api, PRIORITIES, "nd") as classes,
            fresh_namespace(api, "preempt-ha") as namespace,
            PodReaper(api, namespace, TERMINATING_S),
        ):
            low, high = classes["low"], classes["high"]
            victims = _node_of_victims(first, namespace, low)
            wait_for(lambda: _leader(replicas) is not None, 30, "a deciding replica")
            started = time.monotonic()
            gpu_pod(api, namespace, "big", "eight", priority_class=high)
            core = client.CoreV1Api(api)

            def terminating() -> list[str]:
                pods = core.list_namespaced_pod(namespace).items
                return [p.metadata.name for p in pods if p.metadata.deletion_timestamp and p.metadata.name in victims]

            wait_for(lambda: len(terminating()) == 8, 30, "the victims evicted (terminating)")
            killed = _leader(replicas)
            replicas.replicas[killed].kill_extender()
            killed_at = time.monotonic()
            # Low pods created now would take the GPUs as the victims end, were the hold lost.
            late = [f"late-{index}" for index in range(4)]
            for name in late:
                gpu_pod(api, namespace, name, "one", priority_class=low)
            wait_for(lambda: bound(api, namespace, ["big"]), 120, "the preemptor bound")
            took = time.monotonic() - started
            assert bound(api, namespace, late) == {}, "the devices kept for the preemptor went to no one else"
            events = core.list_namespaced_event(namespace, field_selector="reason=Preempted").items
            assert sorted(e.involved_object.name for e in events) == victims, "each victim evicted once"
            assert all(e.count in (None, 1) for e in events)
            leases = client.CoordinationV1Api(api)
            wait_for(
                lambda: not leases.list_namespaced_lease(first.namespace, label_selector=LABEL).items,
                60,
                "the surviving replica to let the preemption go once the preemptor is bound",
            )
            survivor = _leader(replicas)
            assert survivor != killed
            print(
                f"\npreemptor bound {took:.1f} s after creation; deciding replica killed "
                f"{killed_at - started:.1f} s in, replica {survivor} took over"
            )
    finally:
        first.remove_nodes()  # later tests on this plane must not find it
        replicas.start_stopped()


def _webhook_in_force(api: client.ApiClient, namespace: str, pod: str, evictions: Evictions) -> bool:
    """A dry-run eviction of `pod` reaches the webhook (its configuration is read asynchronously)."""
    body = {"metadata": {"name": pod, "namespace": namespace}, "deleteOptions": {"dryRun": ["All"]}}
    client.CoreV1Api(api).create_namespaced_pod_eviction(pod, namespace, body, dry_run="All")
    return pod in evictions.dry_runs()


def test_a_leader_paused_mid_decision_evicts_nothing_more_once_another_replica_took_over(
    replicas: ReplicatedExtenders,
) -> None:
    """The deciding replica is stopped (SIGSTOP) while its first eviction is in the API server; the
    other replica takes the lead after a whole Lease duration and finishes the decision; the first
    is resumed (SIGCONT) afterwards. Its next eviction would come from a view and a lead it no
    longer has: the renewal guarding it is refused, so the API server sees each victim evicted
    once, eight in all, as one decision evicts."""
    first = replicas.first
    api = first.api
    paused: int | None = None
    try:
        with (
            priority_classes(api, PRIORITIES, "nd") as classes,
            fresh_namespace(api, "fence") as namespace,
            PodReaper(api, namespace, TERMINATING_S),
            eviction_webhook(first.plane, namespace, hold_first=True) as evictions,
        ):
            high = classes["high"]
            victims = _node_of_victims(first, namespace, classes["low"])
            wait_for(lambda: _webhook_in_force(api, namespace, victims[0], evictions), 30, "the webhook in force")
            checked = len(evictions.dry_runs())
            leader = _leader(replicas)
            gpu_pod(api, namespace, "big", "eight", priority_class=high)
            assert evictions.held.wait(60), "the leader's first eviction never came"
            process = replicas.replicas[leader].process
            assert process is not None
            os.kill(process.pid, signal.SIGSTOP)
            paused = process.pid
            evictions.release.set()  # the API server completes it; the paused replica hears later
            wait_for(lambda: bound(api, namespace, ["big"]), 120, "the other replica to finish and big bound")
            assert _leader(replicas) != leader
            leases = client.CoordinationV1Api(api)
            wait_for(
                lambda: not leases.list_namespaced_lease(first.namespace, label_selector=LABEL).items,
                60,
                "the new leader to let the preemption go",
            )
            os.kill(process.pid, signal.SIGCONT)
            paused = None
            time.sleep(5)  # the resumed replica's step goes on from where it stopped
            real = evictions.real()
            assert sorted(real) == victims, f"each victim evicted once, eight in all: {real}"
            assert sorted(evictions.dry_runs()[checked:]) == victims, "every victim tried as a dry run first"
            events = client.CoreV1Api(api).list_namespaced_event(namespace, field_selector="reason=Preempted").items
            assert sorted(e.involved_object.name for e in events) == victims
            print(f"\npaused leader {leader} resumed after the takeover: {len(real)} evictions in all")
    finally:
        if paused is not None:
            os.kill(paused, signal.SIGCONT)
        first.remove_nodes()
        replicas.start_stopped()
