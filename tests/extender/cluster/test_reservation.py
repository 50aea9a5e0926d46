"""Devices kept for a preemptor: a decision survives the trip through its Lease, a Lease that
cannot be read is refused naming the field (and the state carries on without it), and every
replica's state counts the kept devices as used, so the planner and the filter keep others off
them while the preemptor alone is answered with its nodes."""

from __future__ import annotations

import base64
import copy
import dataclasses
import hashlib
import json
import uuid
import zlib
from decimal import Decimal
from typing import Any

import pytest

from extender.cluster.reservation import (
    ANNOTATIONS_LIMIT,
    COMPACT,
    NODES,
    PRIORITY,
    VICTIMS,
    Reservation,
    ReservationError,
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
from testkit import builders
from testkit.builders import DRIVER, GPU_CLASS, claim_template, claimed_pod

NS = "ns"
BIG_LEASE = lease_name(f"{NS}/big")


def _reservation(nodes: dict[str, Reserved] | None = None) -> Reservation:
    kept = nodes or {"a": Reserved(1, Usage({"gpu-0", "gpu-1"}))}
    victims = (Victim(f"{NS}/low-0", "uid-low-0", (f"{DRIVER}/a/gpu-0",)),)
    return Reservation(BIG_LEASE, f"{NS}/big", f"pod {NS}/big", 1000, kept, victims, 1_000.5, 1_120.5)


def _lease(reservation: Reservation) -> dict[str, Any]:
    body = lease_body(reservation, "replica-0")
    body["metadata"]["namespace"] = "nativedra-system"
    return body


def test_a_reservation_survives_its_lease() -> None:
    reservation = _reservation()
    assert from_lease(json.loads(json.dumps(_lease(reservation)))) == reservation


def test_kept_devices_keep_their_compatibility_groups_and_other_drivers_devices() -> None:
    """A MIG preemptor's kept devices keep their groups, so no fraction is admitted beside them."""
    usage = Usage({"gpu-0-mig"}, {}, {"gpu-0": {"memory": Decimal(10)}}, {"gpu-0": frozenset({"mig"})}, frozenset())
    usage.partners = frozenset({"nic.example.com/a/nic-0"})
    reservation = _reservation({"a": Reserved(1, usage)})
    assert from_lease(json.loads(json.dumps(_lease(reservation)))) == reservation


def test_a_lease_of_an_earlier_release_names_victims_without_uid_and_none_is_ever_evicted() -> None:
    lease = _lease(_reservation())
    lease["metadata"]["annotations"][VICTIMS] = json.dumps([f"{NS}/low-0"])
    assert from_lease(lease).victims == (Victim(f"{NS}/low-0", ""),)


def _big(victims: int, nodes: int, per_node: int, spares: int = 0) -> Reservation:
    """A decision of `victims` one-GPU pods, or (no victims) a return record, over `nodes` nodes of
    `per_node` devices each, and `spares` spare nodes as big."""

    def devices(node: int) -> set[str]:
        return {f"{DRIVER}/node-{node:05d}/gpu-{device}" for device in range(per_node)}

    kept = {f"node-{n:05d}": Reserved(1 if n < nodes else 0, Usage(devices(n))) for n in range(nodes + spares)}
    who = tuple(  # in the order the Lease keeps them: by pod
        Victim(
            f"team-b/low-{i}",
            str(uuid.UUID(bytes=hashlib.sha256(str(i).encode()).digest()[:16])),
            (f"{DRIVER}/node-{i // 8:05d}/gpu-{i % 8}",),
        )
        for i in sorted(range(victims), key=lambda i: f"team-b/low-{i}")
    )
    name = BIG_LEASE if who else return_lease_name(f"{NS}/big")
    return Reservation(name, f"{NS}/big", "gang ns/big", 100, kept, who, 1_000.5, 1_300.5, returning=not who)


@pytest.mark.parametrize(
    ("victims", "nodes", "per_node", "spares"),
    [(4096, 512, 8, 0), (0, 2000, 8, 64), (0, 1500, 120, 200)],
    ids=["4096-victims", "2000-node-gang-with-spares", "1500-nodes-of-120-devices"],
)
def test_a_decision_of_thousands_of_victims_and_a_record_of_thousands_of_nodes_fit_one_lease(
    victims: int, nodes: int, per_node: int, spares: int
) -> None:
    reservation = _big(victims, nodes, per_node, spares)
    if reservation.returning:
        reservation = dataclasses.replace(reservation, vacated=1_010.5)
    lease = _lease(reservation)
    assert annotation_bytes(lease) <= ANNOTATIONS_LIMIT
    assert lease["metadata"]["annotations"][NODES].startswith(COMPACT)
    assert from_lease(json.loads(json.dumps(lease))) == reservation


def test_a_lease_not_named_as_the_extender_names_its_preemptors_record_is_not_the_extenders() -> None:
    """On 424026c any Lease labelled nativedra.dev/preemption was a decision: a planted one named
    victims by UID and was evicted by the leader."""
    for planted in ("preempt-planted", lease_name(f"{NS}/other"), return_lease_name(f"{NS}/big")):
        lease = _lease(_reservation())
        lease["metadata"]["name"] = planted
        with pytest.raises(ReservationError) as raised:
            from_lease(lease)
        assert f"not the name the extender gives the record of '{NS}/big' ({BIG_LEASE})" in str(raised.value)


def test_a_small_lease_stays_plain_json_as_earlier_releases_read_it() -> None:
    annotations = _lease(_reservation())["metadata"]["annotations"]
    assert json.loads(annotations[NODES]) and json.loads(annotations[VICTIMS])


def test_what_does_not_fit_even_compact_is_measured_over_the_limit() -> None:
    assert annotation_bytes(_lease(_big(12_000, 1_500, 8))) > ANNOTATIONS_LIMIT


def _packed(payload: bytes) -> str:
    return COMPACT + base64.b64encode(zlib.compress(payload, 9)).decode()


@pytest.mark.parametrize(
    ("value", "named"),
    [
        (COMPACT + "not base64!", "not gzip in base64"),
        (COMPACT + base64.b64encode(b"not gzip").decode(), "not gzip in base64"),
        (_packed(b"[" * 70_000_000), "unpacks to more than"),
        (_packed(b'{"a": '), "must be JSON"),
    ],
    ids=["base64", "gzip", "bomb", "json"],
)
def test_a_compact_annotation_that_cannot_be_read_is_refused_naming_it(value: str, named: str) -> None:
    lease = _lease(_reservation())
    lease["metadata"]["annotations"][NODES] = value
    with pytest.raises(ReservationError) as raised:
        from_lease(lease)
    assert f"Lease nativedra-system/{BIG_LEASE}: annotation {NODES}" in str(raised.value)
    assert named in str(raised.value)


@pytest.mark.parametrize(
    ("change", "named"),
    [
        (lambda lease: lease["metadata"]["annotations"].pop(PRIORITY), f"annotation {PRIORITY} is missing"),
        (lambda lease: lease["metadata"]["annotations"].update({NODES: "{"}), "must be JSON"),
        (lambda lease: lease["metadata"]["annotations"].update({NODES: "{}"}), "must name at least one node"),
        (
            lambda lease: lease["metadata"]["annotations"].update({NODES: '{"a": {"slots": -1}}'}),
            f"annotation {NODES}[a].slots",
        ),
        (
            lambda lease: lease["metadata"]["annotations"].update(
                {NODES: '{"a": {"slots": 1, "counters": {"c": {"x": "?"}}}}'}
            ),
            f"annotation {NODES}[a].counters",
        ),
        (lambda lease: lease["spec"].update(leaseDurationSeconds=0), "spec.leaseDurationSeconds"),
        (
            lambda lease: lease["metadata"]["annotations"].update({VICTIMS: '[{"pod": "ns/a"}]'}),
            f"annotation {VICTIMS}[0]: expected an object with pod (namespace/name) and uid",
        ),
        (
            lambda lease: lease["metadata"]["annotations"].update({NODES: '{"a": {"slots": 1, "groups": []}}'}),
            f"annotation {NODES}[a].groups",
        ),
        (lambda lease: lease["spec"].update(acquireTime="yesterday"), "spec.acquireTime"),
    ],
)
def test_a_lease_that_cannot_be_read_is_refused_naming_it_and_the_field(change: Any, named: str) -> None:
    lease = _lease(_reservation())
    change(lease)
    with pytest.raises(ReservationError) as raised:
        from_lease(lease)
    assert f"Lease nativedra-system/{BIG_LEASE}" in str(raised.value)
    assert named in str(raised.value)


def _state(now: list[float] | None = None) -> tuple[ClusterState, dict[str, Any], dict[str, Any]]:
    """Two nodes of 8 GPUs, node a running a 6-GPU pod; an 8-GPU pod and a 2-GPU pod waiting. The
    state's clock reads `now[0]` (default: inside `_reservation`'s hold, 1,000 to 1,120)."""
    now = now or [1_060.0]
    nodes, slices = builders.node_objects({"a": {}, "b": {}})
    six, eight, two = (claim_template(f"t{n}", n, namespace=NS) for n in (6, 8, 2))
    running, running_claim = claimed_pod("running", six, NS)
    running["spec"]["nodeName"] = "a"
    running_claim["status"] = builders.allocated_claim(
        "running-gpus", "a", [f"gpu-{i}" for i in range(2, 8)], NS, reserved_for="running"
    )["status"]
    big, big_claim = claimed_pod("big", eight, NS)
    small, small_claim = claimed_pod("small", two, NS)
    state = ClusterState(DRIVER, clock=lambda: now[0])
    objects = {
        "nodes": nodes,
        "resourceslices": slices,
        "pods": [running, big, small],
        "resourceclaims": [running_claim, big_claim, small_claim],
        "resourceclaimtemplates": [six, eight, two],
        "deviceclasses": [GPU_CLASS],
        "podgroups": [],
        "jobsets": [],
    }
    for kind, items in objects.items():
        state.replace(kind, copy.deepcopy(items))
    return state, big, small


def test_every_replica_lets_a_hold_go_at_its_expiry_without_the_leader() -> None:
    """On 424026c a hold lasted until the leader deleted its Lease: a leader unable to reach the API
    kept the devices from everyone indefinitely."""
    now = [1_060.0]
    state, big, small = _state(now)
    lease = _lease(_reservation({"a": Reserved(1, Usage({f"gpu-{i}" for i in range(8)}))}))
    state.apply("ADDED", "preemptions", lease)
    held = state.view()
    assert held.usage["a"].devices == {f"gpu-{i}" for i in range(8)} and held.reservations[f"{NS}/big"].holds
    now[0] = 1_120.5  # its expiry; no event arrives
    lapsed = state.view()
    assert lapsed.version > held.version, "a new view, as for an event"
    assert lapsed.usage["a"].devices == {f"gpu-{i}" for i in range(2, 8)}, "the kept GPUs are free again"
    kept = lapsed.reservations[f"{NS}/big"]
    assert kept.lapsed and not kept.holds, "still listed (the leader deletes it), kept from no one"
    decider = Decider(ExtenderConfig())
    assert decider.filter(lapsed, big, ["a", "b"], now=1_121.0)[0] == ["a", "b"], (
        "the preemptor is pinned to nothing and refused nowhere for a hold (the scheduler's own filter finds a full)"
    )
    assert decider.filter(lapsed, small, ["a", "b"], now=1_121.0)[0] == ["a", "b"], "node a's GPUs are anyone's"
    state.apply("MODIFIED", "preemptions", _lease(_reservation({"a": Reserved(1, Usage({"gpu-0"}))})))
    assert state.view().usage["a"].devices == {f"gpu-{i}" for i in range(2, 8)}, "same expiry: lapsed at once"


def test_every_replicas_state_counts_kept_devices_as_used_until_the_lease_goes() -> None:
    state, _, _ = _state()
    assert state.view().usage["a"].devices == {f"gpu-{i}" for i in range(2, 8)}
    lease = _lease(_reservation({"a": Reserved(1, Usage({f"gpu-{i}" for i in range(8)}))}))
    state.apply("ADDED", "preemptions", lease)
    view = state.view()
    assert view.usage["a"].devices == {f"gpu-{i}" for i in range(8)}, "the free GPUs are kept too"
    assert view.reservations[f"{NS}/big"].nodes["a"].slots == 1
    state.apply("DELETED", "preemptions", lease)
    assert state.view().usage["a"].devices == {f"gpu-{i}" for i in range(2, 8)}
    assert not state.view().reservations


def test_a_broken_lease_is_ignored_and_nothing_else_is_lost() -> None:
    state, _, _ = _state()
    lease = _lease(_reservation())
    lease["metadata"]["annotations"][NODES] = "not json"
    state.apply("ADDED", "preemptions", lease)
    view = state.view()
    assert not view.reservations
    assert view.usage["a"].devices == {f"gpu-{i}" for i in range(2, 8)}
    assert len(view.pods) == 3


def test_the_preemptor_is_answered_with_its_nodes_and_others_are_kept_off_them() -> None:
    state, big, small = _state()
    decider = Decider(ExtenderConfig())
    assert decider.filter(state.view(), small, ["a", "b"], now=0.0)[0] == ["a", "b"]
    kept = Reserved(1, Usage({f"gpu-{i}" for i in range(8)}))
    state.apply("ADDED", "preemptions", _lease(_reservation({"a": kept})))
    view = state.view()
    passing, failed, path = decider.filter(view, big, ["a", "b"], now=0.0)
    assert (passing, path) == (["a"], "preempting")
    assert "being freed for pod ns/big" in failed["b"]
    passing, failed, _ = decider.filter(view, small, ["a", "b"], now=0.0)
    assert passing == ["b"]
    assert failed["a"] == ("the free devices on a are kept for pod ns/big (priority 1000), which preempted pods there")


def test_a_preemptor_the_scheduler_refuses_where_its_devices_are_free_is_pinned_there_no_longer() -> None:
    """Issue 48: a preemptor stayed pinned to its kept nodes for the whole hold although the
    scheduler, for reasons no eviction changes (a host port, a volume's node), refused it there.
    While its victim runs, node a missing from the offer is the victim's devices: it stays pinned.
    Once the victim is gone and its devices free, a offered no more means the scheduler refuses it
    there: it may go to b. Offered a again, it is pinned again."""
    state, big, _ = _state()
    kept = Reserved(1, Usage({f"gpu-{i}" for i in range(8)}))
    victims = (Victim(f"{NS}/running", "uid-running", tuple(f"{DRIVER}/a/gpu-{i}" for i in range(2, 8))),)
    reservation = dataclasses.replace(_reservation({"a": kept}), victims=victims)
    state.apply("ADDED", "preemptions", _lease(reservation))
    decider = Decider(ExtenderConfig())
    passing, failed, path = decider.filter(state.view(), big, ["b"], now=1_060.0)
    assert (passing, path) == ([], "preempting") and "being freed for pod ns/big" in failed["b"]
    state.apply("DELETED", "pods", {"metadata": {"name": "running", "namespace": NS}})
    state.apply("DELETED", "resourceclaims", state.view().claims[(NS, "running-gpus")])
    passing, _, path = decider.filter(state.view(), big, ["b"], now=1_060.0)
    assert passing == ["b"] and path != "preempting", "refused where its devices are free: unpinned"
    passing, _, path = decider.filter(state.view(), big, ["a", "b"], now=1_060.0)
    assert (passing, path) == (["a"], "preempting"), "offered its kept node: pinned to it"
