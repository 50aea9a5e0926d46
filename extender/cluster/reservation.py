"""Devices kept for a preemptor while its victims end, or for a gang coming back after it lost
members, stored as a Lease in the extender's own namespace: every replica watches them, so all
answer alike, and a replica that takes over a preemption or a return half done finds what was
decided. Pure: a reservation to a Lease body and back.

A return record (extender.recover) is written when a gang is whole and keeps nothing then; once
the gang loses members it is marked vacated and keeps its nodes' devices for the returning gang
until it is whole again or the hold ends.

The Lease holds the preemptor, its priority, the victims (each by UID, with the devices it held)
and, per node, how many members go there and which devices and amounts they take. The state adds
those to the node's usage, so no other pod or gang is planned onto them; the preemptor alone is
answered with its nodes.

An object's annotations may hold 256 KiB in all. A large one is written compact (device names
grouped under their driver/pool, then gzip and base64): thousands of victims and return records of
thousands of nodes fit. What still does not is refused by its writer (`annotation_bytes`) before
anything is done, never sent to fail and be decided again. Small ones stay plain JSON, as earlier
releases read them.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import hashlib
import json
import zlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from extender.devices.node_usage import Usage
from nativedra.base.kube.micro_time import micro_time

LABEL = "nativedra.dev/preemption"
PREEMPTOR = "nativedra.dev/preemptor"
DESCRIBED = "nativedra.dev/preemptor-description"
PRIORITY = "nativedra.dev/priority"
NODES = "nativedra.dev/reserved"
VICTIMS = "nativedra.dev/victims"
RETURNING = "nativedra.dev/returning"  # a return record: {"vacated": time or null, "members": fingerprint}
LEASE_PREFIX = "preempt-"
RETURN_PREFIX = "return-"
ANNOTATIONS_LIMIT = 256 * 1024  # the API's limit on one object's annotations, keys and values together
COMPACT_ABOVE = 32 * 1024  # an annotation longer than this as plain JSON is written compact
COMPACT = "gzip+base64:"
UNPACKED_LIMIT = 64 * 1024 * 1024  # what a compact annotation may unpack to: a forged one cannot exhaust memory


@dataclass(frozen=True)
class Reserved:
    """Devices kept for a preemptor on one node: how many members go there and what they take."""

    slots: int
    usage: Usage


class ReservationError(ValueError):
    """A preemption Lease that cannot be read; the message names the Lease and the field."""


@dataclass(frozen=True)
class Victim:
    """A pod a decision evicts, by identity: a pod recreated under its name (a StatefulSet's, an
    LWS group's) is another pod, and never a victim of that decision."""

    pod: str  # namespace/name
    uid: str  # "" for a Lease written before UIDs were recorded: such a victim is never evicted
    devices: tuple[str, ...] = ()  # what it held when chosen: driver/pool/device

    def to_json(self, compact: bool = False) -> dict[str, Any]:
        return {"pod": self.pod, "uid": self.uid, "devices": _devices_json(self.devices, compact)}


@dataclass(frozen=True)
class Reservation:
    lease: str
    preemptor: str  # a pod's namespace/name, or a gang's key
    what: str
    priority: int
    nodes: Mapping[str, Reserved]
    victims: tuple[Victim, ...]
    created: float  # unix seconds
    expires: float
    uid: str = ""  # the Lease's UID once written: it is deleted only under that precondition
    returning: bool = False  # a gang's return record, not a preemption
    vacated: float | None = None  # a return record: when the gang lost members (unix seconds)
    members: str = ""  # a return record: a fingerprint of the pods it was written for
    # Past `expires` as this replica's clock reads it: kept from no one any more, whether or not the
    # leader has let its Lease go yet (a leader that cannot reach the API holds nothing for ever).
    lapsed: bool = False

    @property
    def victim_pods(self) -> tuple[str, ...]:
        return tuple(victim.pod for victim in self.victims)

    @property
    def spares(self) -> dict[str, Reserved]:
        """A return record's spare nodes: kept with no member slot (extender.recover.records)."""
        return {name: reserved for name, reserved in self.nodes.items() if not reserved.slots}

    @property
    def holds(self) -> bool:
        """Whether its devices are kept from others: a preemption's until it lapses, a return
        record's only once its gang has lost members, until it lapses."""
        return not self.lapsed and (not self.returning or self.vacated is not None)

    @property
    def running(self) -> bool:
        """A return record of a gang that runs whole: it keeps only its spares."""
        return self.returning and self.vacated is None


def lease_name(preemptor: str) -> str:
    """One Lease per preemptor: a second replica deciding the same preemption finds it taken."""
    return LEASE_PREFIX + hashlib.sha256(preemptor.encode()).hexdigest()[:32]


def return_lease_name(gang: str) -> str:
    """One return record per gang, apart from a preemption for it."""
    return RETURN_PREFIX + hashlib.sha256(gang.encode()).hexdigest()[:32]


def _grouped(names: Iterable[str]) -> dict[str, list[str]]:
    """Device names under their driver/pool: one node's devices share it, and a gzip window then
    finds every node's list of device names alike."""
    grouped: dict[str, list[str]] = {}
    for name in sorted(names):
        prefix, _, device = name.rpartition("/")
        grouped.setdefault(prefix, []).append(device)
    return grouped


def _devices_json(names: Iterable[str], compact: bool) -> list[str] | dict[str, list[str]]:
    return _grouped(names) if compact else sorted(names)


def _usage_json(usage: Usage, compact: bool) -> dict[str, Any]:
    def amounts(values: Mapping[str, Mapping[str, Decimal]]) -> dict[str, dict[str, str]]:
        return {key: {name: str(amount) for name, amount in sorted(a.items())} for key, a in sorted(values.items())}

    return {
        "devices": _devices_json(usage.devices, compact),
        "shared": amounts(usage.shared),
        "counters": amounts(usage.counters),
        "groups": {counter_set: sorted(groups) for counter_set, groups in sorted(usage.groups.items())},
        "partners": sorted(usage.partners),
    }


def _annotation(make: Callable[[bool], Any]) -> str:
    """Plain JSON, or compact where that is long (see the module docstring)."""
    text = json.dumps(make(False), sort_keys=True)
    if len(text) <= COMPACT_ABOVE:
        return text
    packed = zlib.compress(json.dumps(make(True), sort_keys=True, separators=(",", ":")).encode(), 9)
    return COMPACT + base64.b64encode(packed).decode("ascii")


def annotation_bytes(body: Mapping[str, Any]) -> int:
    """What a Lease body's annotations count against ANNOTATIONS_LIMIT."""
    annotations = (body.get("metadata") or {}).get("annotations") or {}
    return sum(len(key.encode()) + len(value.encode()) for key, value in annotations.items())


def lease_body(reservation: Reservation, holder: str) -> dict[str, Any]:
    def nodes(compact: bool) -> dict[str, Any]:
        return {name: {"slots": r.slots, **_usage_json(r.usage, compact)} for name, r in reservation.nodes.items()}

    def victims(compact: bool) -> list[dict[str, Any]]:
        return [v.to_json(compact) for v in sorted(reservation.victims, key=lambda v: v.pod)]

    returning = (
        {
            RETURNING: json.dumps(
                {
                    "vacated": None if reservation.vacated is None else micro_time(reservation.vacated),
                    "members": reservation.members,
                }
            )
        }
        if reservation.returning
        else {}
    )
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": reservation.lease,
            "labels": {LABEL: "true"},
            "annotations": {
                PREEMPTOR: reservation.preemptor,
                DESCRIBED: reservation.what,
                PRIORITY: str(reservation.priority),
                NODES: _annotation(nodes),
                VICTIMS: _annotation(victims),
                **returning,
            },
        },
        "spec": {
            "holderIdentity": holder,
            "leaseDurationSeconds": max(1, round(reservation.expires - reservation.created)),
            "acquireTime": micro_time(reservation.created),
            "renewTime": micro_time(reservation.created),
        },
    }


def _amounts(value: Any, where: str) -> dict[str, dict[str, Decimal]]:
    if not isinstance(value, dict):
        raise ReservationError(f"{where}: expected an object")
    try:
        return {str(k): {str(n): Decimal(str(a)) for n, a in v.items()} for k, v in value.items()}
    except (AttributeError, InvalidOperation) as error:
        raise ReservationError(f"{where}: expected amounts as decimal strings") from error


def _reserved(value: Any, where: str) -> Reserved:
    if not isinstance(value, dict) or not isinstance(value.get("slots"), int) or value["slots"] < 0:
        raise ReservationError(f"{where}.slots: expected a whole number (0: a spare node)")
    devices = _device_names(value.get("devices", []), f"{where}.devices")
    groups = value.get("groups", {})
    if not isinstance(groups, dict):
        raise ReservationError(f"{where}.groups: expected an object of counter set -> group names")
    usage = Usage(
        set(devices),
        _amounts(value.get("shared", {}), f"{where}.shared"),
        _amounts(value.get("counters", {}), f"{where}.counters"),
        {str(k): frozenset(_names(v, f"{where}.groups[{k}]")) for k, v in groups.items()},
        frozenset(_names(value.get("partners", []), f"{where}.partners")),
    )
    return Reserved(value["slots"], usage)


def _names(value: Any, where: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ReservationError(f"{where}: expected a list of names")
    return value


def _device_names(value: Any, where: str) -> list[str]:
    """A list of driver/pool/device names, or (compact) an object of driver/pool -> device names."""
    if isinstance(value, dict):
        return [f"{prefix}/{device}" for prefix, devices in value.items() for device in _names(devices, where)]
    return _names(value, where)


def _unpacked(text: str, where: str) -> Any:
    """An annotation's JSON, plain or compact, unpacked to at most UNPACKED_LIMIT bytes."""
    if text.startswith(COMPACT):
        try:
            inflate = zlib.decompressobj()
            unpacked = inflate.decompress(base64.b64decode(text[len(COMPACT) :], validate=True), UNPACKED_LIMIT)
        except (binascii.Error, zlib.error) as error:
            raise ReservationError(f"{where}: not gzip in base64 after {COMPACT}: {error}") from error
        if inflate.unconsumed_tail or not inflate.eof:
            raise ReservationError(f"{where}: unpacks to more than {UNPACKED_LIMIT} bytes, or is cut short")
        text = unpacked.decode("utf-8", errors="replace")
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as error:
        raise ReservationError(f"{where}: must be JSON: {error}") from error


def _victim(value: Any, where: str) -> Victim:
    """A victim as recorded; a bare namespace/name (a Lease of an earlier release) has no UID."""
    if isinstance(value, str):
        return Victim(value, "")
    if not isinstance(value, dict) or not isinstance(value.get("pod"), str) or not isinstance(value.get("uid"), str):
        raise ReservationError(f"{where}: expected an object with pod (namespace/name) and uid")
    return Victim(value["pod"], value["uid"], tuple(_device_names(value.get("devices", []), f"{where}.devices")))


def _seconds(text: Any, where: str) -> float:
    try:
        return dt.datetime.fromisoformat(str(text).replace("Z", "+00:00")).timestamp()
    except ValueError as error:
        raise ReservationError(f"{where}: expected a timestamp, got {text!r}") from error


def from_lease(lease: dict[str, Any]) -> Reservation:
    metadata = lease.get("metadata") or {}
    name = f"Lease {metadata.get('namespace', '')}/{metadata.get('name', '')}"
    annotations = metadata.get("annotations") or {}
    spec = lease.get("spec") or {}
    for field in (PREEMPTOR, PRIORITY, NODES, VICTIMS):
        if field not in annotations:
            raise ReservationError(f"{name}: annotation {field} is missing")
    try:
        priority = int(annotations[PRIORITY])
    except ValueError as error:
        raise ReservationError(f"{name}: annotation {PRIORITY} must be a whole number: {error}") from error
    nodes_json = _unpacked(annotations[NODES], f"{name}: annotation {NODES}")
    victims = _unpacked(annotations[VICTIMS], f"{name}: annotation {VICTIMS}")
    if not isinstance(nodes_json, dict) or not nodes_json:
        raise ReservationError(f"{name}: annotation {NODES} must name at least one node")
    if not isinstance(victims, list):
        raise ReservationError(f"{name}: annotation {VICTIMS} must be a list of victims")
    nodes = {str(node): _reserved(value, f"{name}: annotation {NODES}[{node}]") for node, value in nodes_json.items()}
    duration = spec.get("leaseDurationSeconds")
    if not isinstance(duration, int) or duration < 1:
        raise ReservationError(f"{name}: spec.leaseDurationSeconds must be a positive integer")
    created = _seconds(spec.get("acquireTime"), f"{name}: spec.acquireTime")
    returning, vacated, members = RETURNING in annotations, None, ""
    if returning:
        try:
            returned = json.loads(annotations[RETURNING])
            vacated_text, members = returned["vacated"], str(returned.get("members") or "")
        except (ValueError, TypeError, KeyError, RecursionError) as error:
            raise ReservationError(f"{name}: annotation {RETURNING} must be JSON with vacated: {error}") from error
        vacated = None if vacated_text is None else _seconds(vacated_text, f"{name}: annotation {RETURNING}.vacated")
    expected = return_lease_name(annotations[PREEMPTOR]) if returning else lease_name(annotations[PREEMPTOR])
    if metadata.get("name") != expected:
        raise ReservationError(
            f"{name}: not the name the extender gives the record of {annotations[PREEMPTOR]!r} ({expected}): "
            "not the extender's, ignored"
        )
    return Reservation(
        str(metadata.get("name", "")),
        annotations[PREEMPTOR],
        annotations.get(DESCRIBED, annotations[PREEMPTOR]),
        priority,
        nodes,
        tuple(_victim(v, f"{name}: annotation {VICTIMS}[{i}]") for i, v in enumerate(victims)),
        created,
        created + duration,
        str(metadata.get("uid") or ""),
        returning,
        vacated,
        members,
    )
