"""Decisions and return records of any size against the real API server: thousands of victims and a
record of a 2,000-node gang with spares are written and read back; the limit the writers measure is
the API's own; and a decision the API refuses to record backs its preemptor off while the next
preemptor is decided on (on 424026c the refusal reached the leader's loop, which picked the same
preemptor the next second, dry-ran its evictions again and failed again, blocking every other)."""

from __future__ import annotations

import copy
import dataclasses
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from extender.cluster.reservation import (
    ANNOTATIONS_LIMIT,
    COMPACT,
    NODES,
    Reservation,
    Reserved,
    Victim,
    annotation_bytes,
    from_lease,
    lease_body,
    lease_name,
    return_lease_name,
)
from extender.cluster.state import ClusterState
from extender.devices.node_usage import Usage
from extender.plan.config import ExtenderConfig
from extender.plan.decide import Decider
from extender.preempt.leader import LeaderLease
from extender.preempt.preemptor import BACK_OFF_S, Preemption
from nativedra.cluster import ControlPlane, wait_for
from testkit import builders
from testkit.admission_webhooks import Evictions, eviction_webhook
from testkit.builders import DRIVER, GPU_CLASS, claim_template, claimed_pod
from testkit.extender_harness import fresh_namespace

REFUSED = "first"  # the preemptor whose decision the API refuses to record
T0 = 1e9 + 0.25  # a stamp with a fraction: it is read back exactly (a whole second is written 1 µs on)


@pytest.fixture
def namespace(api: client.ApiClient) -> Iterator[str]:
    with fresh_namespace(api, "leases") as name:
        yield name


def _written_and_read(api: client.ApiClient, namespace: str, reservation: Reservation) -> Reservation:
    leases = client.CoordinationV1Api(api)
    body = lease_body(reservation, "replica-0")
    leases.create_namespaced_lease(namespace, body)
    read = api.sanitize_for_serialization(leases.read_namespaced_lease(reservation.lease, namespace))
    return dataclasses.replace(from_lease(read), uid="")


def _nodes(count: int, per_node: int, spares: int = 0) -> dict[str, Reserved]:
    return {
        f"node-{n:05d}": Reserved(
            1 if n < count else 0, Usage({f"{DRIVER}/node-{n:05d}/gpu-{d}" for d in range(per_node)})
        )
        for n in range(count + spares)
    }


def test_thousands_of_victims_and_a_two_thousand_node_record_with_spares_are_written_and_read_back(
    api: client.ApiClient, namespace: str
) -> None:
    victims = tuple(
        sorted(
            (
                Victim(f"team-b/low-{i}", str(uuid.uuid4()), (f"{DRIVER}/node-{i // 8:05d}/gpu-{i % 8}",))
                for i in range(4096)
            ),
            key=lambda victim: victim.pod,
        )
    )
    decision = Reservation(lease_name("ns/big"), "ns/big", "gang ns/big", 100, _nodes(512, 8), victims, T0, T0 + 300)
    record = Reservation(
        return_lease_name("jobset/ns/big"),
        "jobset/ns/big",
        "gang jobset/ns/big",
        0,
        _nodes(2000, 8, spares=64),
        (),
        T0,
        T0 + 300,
        returning=True,
        vacated=T0 + 10,
    )
    for reservation in (decision, record):
        assert lease_body(reservation, "replica-0")["metadata"]["annotations"][NODES].startswith(COMPACT)
        assert _written_and_read(api, namespace, reservation) == reservation


def test_the_limit_the_writers_measure_is_the_api_servers(api: client.ApiClient, namespace: str) -> None:
    leases = client.CoordinationV1Api(api)

    def lease(name: str, total: int) -> dict[str, Any]:
        key = "nativedra.dev/padding"
        body = {"metadata": {"name": name, "annotations": {key: "x" * (total - len(key))}}, "spec": {}}
        assert annotation_bytes(body) == total
        return body

    leases.create_namespaced_lease(namespace, lease("at-limit", ANNOTATIONS_LIMIT))
    with pytest.raises(client.ApiException) as refused:
        leases.create_namespaced_lease(namespace, lease("over-limit", ANNOTATIONS_LIMIT + 1))
    assert refused.value.status == 422
    assert "may not be more than 262144 bytes" in str(refused.value.body)


@pytest.fixture
def refusing_policy(api: client.ApiClient, namespace: str) -> Iterator[None]:
    """A ValidatingAdmissionPolicy that refuses the Lease recording REFUSED's decision: the API
    fails that write as it fails one too large (422)."""
    admission = client.AdmissionregistrationV1Api(api)
    name = f"refuse-{namespace}"
    where = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}}
    rule = {
        "apiGroups": ["coordination.k8s.io"],
        "apiVersions": ["v1"],
        "operations": ["CREATE"],
        "resources": ["leases"],
    }
    admission.create_validating_admission_policy(
        {
            "metadata": {"name": name},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {"resourceRules": [rule], **where},
                "validations": [
                    {
                        "expression": "object.metadata.?annotations[?'nativedra.dev/preemptor'].orValue('')"
                        f" != '{namespace}/{REFUSED}'",
                        "message": "refused by the test",
                    }
                ],
            },
        }
    )
    admission.create_validating_admission_policy_binding(
        {
            "metadata": {"name": name},
            "spec": {"policyName": name, "validationActions": ["Deny"], "matchResources": where},
        }
    )
    leases = client.CoordinationV1Api(api)
    probe = {
        "metadata": {"generateName": "probe-", "annotations": {"nativedra.dev/preemptor": f"{namespace}/{REFUSED}"}}
    }

    def refusing() -> bool:
        try:
            leases.create_namespaced_lease(namespace, probe, dry_run="All")
        except client.ApiException as error:
            return bool(error.status == 422)
        return False

    wait_for(refusing, 30, "the policy refusing the first preemptor's Lease")
    try:
        yield
    finally:
        admission.delete_validating_admission_policy_binding(name)
        admission.delete_validating_admission_policy(name)


def _cluster(api: client.ApiClient, namespace: str) -> tuple[ClusterState, list[float]]:
    """Nodes a and b, each full with eight one-GPU pods of priority 0 (real pods in the API, so their
    evictions reach it; the state sees them bound); `first` (priority 100) and `second` (50) each
    wait for eight GPUs. The state is fed as the informer feeds it; its clock is the list's value."""
    core = client.CoreV1Api(api)
    now = [1e9]
    nodes, slices = builders.node_objects({"a": {}, "b": {}})
    one, eight = claim_template("one", 1, namespace=namespace), claim_template("eight", 8, namespace=namespace)
    pods, claims = [], []
    for node in ("a", "b"):
        for index in range(8):
            pod, claim = claimed_pod(f"low-{node}-{index}", one, namespace)
            builders.bind_to_node(pod, claim, node, [f"gpu-{index}"])
            pods.append(pod)
            claims.append(claim)
    for name, priority in ((REFUSED, 100), ("second", 50)):
        pod, claim = claimed_pod(name, eight, namespace)
        pod["spec"]["priority"] = priority
        pod["status"]["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]
        pods.append(pod)
        claims.append(claim)
    for pod in pods:  # pending for ever (no scheduler serves this name): evictions delete them at once
        spec = {"schedulerName": "nobody", "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}
        created = core.create_namespaced_pod(namespace, {"metadata": {"name": pod["metadata"]["name"]}, "spec": spec})
        pod["metadata"]["uid"] = created.metadata.uid
        for claim in claims:
            reserved = (claim.get("status") or {}).get("reservedFor") or []
            for entry in reserved:
                if entry["name"] == pod["metadata"]["name"]:
                    entry["uid"] = created.metadata.uid
    state = ClusterState(DRIVER, clock=lambda: now[0])
    objects = {
        "nodes": nodes,
        "resourceslices": slices,
        "pods": pods,
        "resourceclaims": claims,
        "resourceclaimtemplates": [one, eight],
        "deviceclasses": [GPU_CLASS],
        "podgroups": [],
        "jobsets": [],
    }
    for kind, items in objects.items():
        state.replace(kind, copy.deepcopy(items))
    return state, now


@pytest.mark.usefixtures("refusing_policy")
def test_a_decision_the_api_refuses_to_record_backs_off_and_the_next_preemptor_goes_on(
    api: client.ApiClient, namespace: str, control_plane: ControlPlane
) -> None:
    state, now = _cluster(api, namespace)
    leader = LeaderLease(api, namespace, "lead", "replica-0")
    assert leader.holding()
    decider = Decider(ExtenderConfig())
    preemption = Preemption(
        api, state, decider.config, plans=decider.plans, namespace=namespace, leader=leader, clock=lambda: now[0]
    )
    leases = client.CoordinationV1Api(api)

    def step(at: float, evictions: Evictions) -> int:
        """One step at `at` s, the state then shown the Leases written; dry runs sent for `first`."""
        now[0] = 1e9 + at
        before = len(evictions.dry_runs())
        preemption.step()
        for lease in leases.list_namespaced_lease(namespace, label_selector="nativedra.dev/preemption").items:
            state.apply("ADDED", "preemptions", api.sanitize_for_serialization(lease))
        return len(evictions.dry_runs()) - before

    with eviction_webhook(control_plane, namespace) as evictions:
        assert step(0, evictions) == 16, "both decisions dry-run in the first step: the refusal blocks nothing"
        recorded = {lease.metadata.name for lease in leases.list_namespaced_lease(namespace).items}
        assert lease_name(f"{namespace}/second") in recorded
        assert lease_name(f"{namespace}/{REFUSED}") not in recorded
        assert len(evictions.real()) == 8, "the second preemptor's victims evicted"
        # Backing off: not judged again (no dry run) until BACK_OFF_S, then twice as long.
        assert step(1, evictions) == 0
        assert step(BACK_OFF_S - 1, evictions) == 0
        assert step(BACK_OFF_S + 1, evictions) == 8
        assert step(BACK_OFF_S + 1 + BACK_OFF_S * 1.5, evictions) == 0
        assert step(BACK_OFF_S + 1 + BACK_OFF_S * 2 + 1, evictions) == 8
