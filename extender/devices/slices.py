"""ResourceSlices as the extender keeps them: what a slice publishes less its devices' identities,
in one table shared by every slice that publishes the same (the slices of one node model), and per
slice only its identity values and pool. The raw slices are never kept.

Slices are read from the API's JSON bytes. A slice's devices are not decoded into dicts: at 10,000
nodes publishing the shipped defaults that is 1.2 million devices and 950 MB of JSON per LIST,
about 9 s on the 2-core machine the benchmarks run on. Instead the identity values are cut out of
the devices' bytes in one pass (`_IDENTITY`), what remains is the table's key, and only the first
slice of each key is decoded and made into a table. That first decoding also checks that the cut found every
identity attribute and nothing else; a slice where it did not (an identity value with escaped
characters, one that is no string) gets a table of its own, decoded whole.
"""

from __future__ import annotations

import hashlib
import re
import sys
import weakref
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, NamedTuple

import msgspec

from extender.devices.node_usage import (
    IDENTITY_ATTRIBUTES,
    DeviceSet,
    IdentityPlaces,
    Node,
    NodeDevice,
    identity_attributes,
    make_device,
    numa_placed,
    partner_device,
    partner_name,
)
from nativedra.base.kube.units import quantity

Key = tuple[str, str]
# An identity attribute's string value as the API server writes it (Go's encoder: no spaces), found
# from the literal that opens every string attribute value (a fast search), then checked to follow
# an identity attribute's name. Written otherwise (spaces, escapes), a slice is kept whole.
_IDENTITY = re.compile(
    rb'\{"string":"(?:'
    + b"|".join(b'(?<="' + re.escape(name.encode()) + rb'":\{"string":")' for name in IDENTITY_ATTRIBUTES)
    + rb')([^"\\]*)"'
)
DIGEST_SIZE = 16


class _Pool(msgspec.Struct):
    name: str = ""
    generation: int = 0


class _Spec(msgspec.Struct):
    driver: str = ""
    nodeName: str | None = None  # noqa: N815 - the API's field name
    pool: _Pool = msgspec.field(default_factory=_Pool)
    sharedCounters: msgspec.Raw = msgspec.Raw(b"null")  # noqa: N815
    devices: msgspec.Raw = msgspec.Raw(b"null")


class _Metadata(msgspec.Struct):
    name: str = ""
    namespace: str = ""


class _Slice(msgspec.Struct):
    metadata: _Metadata = msgspec.field(default_factory=_Metadata)
    spec: _Spec = msgspec.field(default_factory=_Spec)


class _ListMetadata(msgspec.Struct):
    resourceVersion: str = ""  # noqa: N815
    continue_: str = msgspec.field(name="continue", default="")


class _List(msgspec.Struct):
    metadata: _ListMetadata = msgspec.field(default_factory=_ListMetadata)
    items: list[_Slice] | None = None


@dataclass(frozen=True, eq=False)
class SliceTable:
    """What slices alike publish: devices less identity, shared counters, and where each identity
    value goes (`by_device`: a slice's values are in the order it publishes them)."""

    key: bytes  # a digest of what it publishes less identity values (a node model is named by these)
    driver: str
    devices: tuple[NodeDevice, ...]
    counters: Mapping[str, Mapping[str, Decimal]]
    counter_sets: tuple[dict[str, Any], ...]  # spec.sharedCounters as published
    by_device: IdentityPlaces = field(default_factory=dict)  # device -> ((index into the values, attribute), ...)


class PublishedSlice(NamedTuple):
    """One ResourceSlice as kept: its key, node, pool, its table and its identity values."""

    key: Key
    node: str
    driver: str
    pool: str
    generation: int
    table: SliceTable
    identity: tuple[str, ...]

    def device_raw(self, device: NodeDevice) -> dict[str, Any]:
        """`device` (one of the table's) as this slice publishes it, identity included."""
        own = identity_attributes(self.table.by_device, self.identity, device.name)
        if not own:
            return device.raw
        return {**device.raw, "attributes": {**(device.raw.get("attributes") or {}), **own}}

    def as_api(self) -> dict[str, Any]:
        """The slice as the API serves it, for readers of whole slices (`nativedra map`)."""
        spec = {
            "driver": self.driver,
            "nodeName": self.node,
            "pool": {"name": self.pool, "generation": self.generation},
            "sharedCounters": list(self.table.counter_sets),
            "devices": [self.device_raw(device) for device in self.table.devices],
        }
        return {"metadata": {"name": self.key[1]}, "spec": spec}


class SliceError(ValueError):
    """A ResourceSlice the extender cannot read; the message names the slice and the field."""


# Every table some slice holds, by what it publishes less identity values: a model's slices share one.
_TABLES: weakref.WeakValueDictionary[bytes, SliceTable] = weakref.WeakValueDictionary()


def published_slice(raw: bytes | dict[str, Any]) -> PublishedSlice:
    """One slice from its JSON bytes (or, for callers holding one, a dict)."""
    data = msgspec.json.encode(raw) if isinstance(raw, dict) else raw
    try:
        decoded = msgspec.json.decode(data, type=_Slice)
    except msgspec.DecodeError as error:
        raise SliceError(f"ResourceSlice {_name_of(data)}: {error}") from error
    return _kept(decoded)


class _Named(msgspec.Struct):
    metadata: _Metadata = msgspec.field(default_factory=_Metadata)


def slice_key(data: bytes) -> Key:
    """The key of a slice that cannot be read, so it can be named and forgotten (("", "") when even
    its metadata cannot be read)."""
    try:
        metadata = msgspec.json.decode(data, type=_Named).metadata
    except msgspec.DecodeError:
        return "", ""
    return metadata.namespace, metadata.name


def _name_of(data: bytes) -> str:
    return slice_key(data)[1] or "?"


def slice_list(body: bytes) -> tuple[list[PublishedSlice], str, str]:
    """A LIST answer's slices, its resourceVersion and its continue token."""
    try:
        listed = msgspec.json.decode(body, type=_List)
    except msgspec.DecodeError as error:
        raise SliceError(f"ResourceSliceList: {error}") from error
    return [_kept(item) for item in listed.items or ()], listed.metadata.resourceVersion, listed.metadata.continue_


def _kept(item: _Slice) -> PublishedSlice:
    spec, metadata = item.spec, item.metadata
    devices, counters = bytes(spec.devices), bytes(spec.sharedCounters)
    parts = _IDENTITY.split(devices)
    values = parts[1::2]
    del parts[1::2]
    # What the slice publishes less its identity values: the table's key itself, no digest of it, so
    # slices alike find their table exactly (a dict compares keys that hash alike).
    published = b"\0".join((spec.driver.encode(), counters, *parts))
    # One decoding of every value at once; a UUID is unique, a PCI address is the same on every node of a model.
    identity = tuple(map(sys.intern, b"\0".join(values).decode(errors="replace").split("\0"))) if values else ()
    table = _TABLES.get(published)
    if table is None:
        where = f"ResourceSlice {metadata.name}"
        table, found = _table(_digest(published), spec.driver, counters, devices, where)
        if found != identity:
            # The cut missed or mistook an identity value: this slice is kept whole, in a table of its own.
            published = b"\0".join((spec.driver.encode(), counters, devices))
            table = (
                _TABLES.get(published)
                or _table(_digest(published, whole=True), spec.driver, counters, devices, where, whole=True)[0]
            )
            identity = ()
        _TABLES[published] = table
    return PublishedSlice(
        (metadata.namespace, metadata.name),
        spec.nodeName or "",
        spec.driver,
        spec.pool.name,
        spec.pool.generation,
        table,
        identity,
    )


def _digest(published: bytes, *, whole: bool = False) -> bytes:
    """A table's short name for node models (`Node.published`); a slice kept whole is named apart
    from every slice whose identities were cut."""
    return hashlib.blake2b(published, digest_size=DIGEST_SIZE, person=b"whole" if whole else b"").digest()


def _table(
    key: bytes, driver: str, counters: bytes, devices: bytes, where: str, *, whole: bool = False
) -> tuple[SliceTable, tuple[str | None, ...]]:
    """The table of a slice publishing `devices` and `counters`, and the identity values it found
    (None for one that is no string), in the order they are published. `whole`: identities are kept."""
    try:
        raws = msgspec.json.decode(devices) or []
        counter_sets = msgspec.json.decode(counters) or []
        made = []
        slots: list[tuple[str, str]] = []
        found: list[str | None] = []
        for raw in raws:
            attributes = raw.get("attributes") or {}
            identity = [] if whole else [name for name in attributes if name in IDENTITY_ATTRIBUTES]
            for name in identity:
                slots.append((raw["name"], name))
                value = attributes[name]
                found.append(value.get("string") if isinstance(value, dict) else None)
            kept = raw
            if identity:
                kept = {**raw, "attributes": {k: v for k, v in attributes.items() if k not in identity}}
            made.append(make_device(kept, driver))
        shared = {
            counter_set["name"]: {name: quantity(value["value"]) for name, value in counter_set["counters"].items()}
            for counter_set in counter_sets
        }
    except (KeyError, TypeError, AttributeError, ValueError, ArithmeticError, msgspec.DecodeError) as error:
        raise SliceError(f"{where}: spec.devices or spec.sharedCounters: {error!r}") from error
    by_device: dict[str, list[tuple[int, str]]] = {}
    for index, (device, attribute) in enumerate(slots):
        by_device.setdefault(device, []).append((index, attribute))
    by_device_kept = {device: tuple(places) for device, places in by_device.items()}
    table = SliceTable(key, driver, tuple(made), shared, tuple(counter_sets), by_device_kept)
    return table, tuple(found)


# Every model's shared devices by the keys of its tables: nodes of one model share one.
_DEVICE_SETS: weakref.WeakValueDictionary[tuple[bytes, ...], DeviceSet] = weakref.WeakValueDictionary()


def device_set(tables: Iterable[SliceTable]) -> DeviceSet:
    """The devices and counters of a node publishing `tables`, shared with the nodes that publish
    the same."""
    ordered = sorted(tables, key=lambda table: table.key)  # arrival order must not split a model
    keys = tuple(table.key for table in ordered)
    found = _DEVICE_SETS.get(keys)
    if found is None:
        devices = {device.name: device for table in ordered for device in table.devices}
        counters = {name: dict(amounts) for table in ordered for name, amounts in table.counters.items()}
        found = _DEVICE_SETS[keys] = DeviceSet(devices, counters, keys)
    return found


def nodes_from(
    node_objects: Iterable[dict[str, Any]], slices: Iterable[PublishedSlice | dict[str, Any]], driver: str
) -> dict[str, Node]:
    """Nodes with the devices our driver publishes, and other drivers' NUMA-placed devices (only
    pools whose latest generation is complete)."""
    kept = [s if isinstance(s, PublishedSlice) else published_slice(s) for s in slices]
    latest: dict[tuple[str, str], int] = {}
    for published in kept:
        pool = (published.driver, published.pool)
        latest[pool] = max(latest.get(pool, 0), published.generation)
    ours: dict[str, list[PublishedSlice]] = {}
    partners: dict[str, list[NodeDevice]] = {}
    for published in kept:
        if published.generation != latest[(published.driver, published.pool)]:
            continue
        if published.driver == driver:
            ours.setdefault(published.node, []).append(published)
        else:
            partners.setdefault(published.node, []).extend(_partners(published))
    nodes = {}
    for node_object in node_objects:
        name = node_object["metadata"]["name"]
        labels = dict(node_object["metadata"].get("labels") or {})
        mine = sorted(ours.get(name, ()), key=lambda published: published.table.key)
        identity = tuple((p.table.by_device, p.identity) for p in mine if p.identity)
        shared = device_set(p.table for p in mine)
        nodes[name] = Node.of_model(name, labels, shared, tuple(partners.get(name, ())), identity)
    return nodes


def _partners(published: PublishedSlice) -> list[NodeDevice]:
    """Another driver's devices with a NUMA node on the slice's node, identities included."""
    return [
        partner_device(
            partner_name(published.driver, published.pool, device.name), published.device_raw(device), published.driver
        )
        for device in published.table.devices
        if numa_placed(device.raw)
    ]
