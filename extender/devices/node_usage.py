"""The cluster as the extender needs it: nodes, their devices and counters, what claims use.

Built from raw API objects (dicts) so it can be rebuilt from the API at any time; nothing in it
lives only in memory.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from functools import cached_property
from typing import Any

from extender.devices.cel_eval import device_view
from extender.devices.lru import Numbering
from extender.devices.taints import Selection
from nativedra.base.kube.names import STANDARD_NUMA_ATTRIBUTE
from nativedra.base.kube.units import quantity


@dataclass(frozen=True)
class NodeDevice:
    """One device our driver publishes on a node, as the extender plans with it (not the plugin's
    or CDI's device types): its CEL view, the counters it consumes, whether it can be shared."""

    name: str
    raw: dict[str, Any]  # as published, less its identity (`IDENTITY_ATTRIBUTES`): twins share the object
    driver: str  # the driver that publishes it
    consumes: tuple[tuple[str, tuple[tuple[str, Decimal], ...]], ...]  # (counter set, ((counter, amount), ...))
    multi: bool
    tainted: bool
    # (counter set, its compatibility groups) where the device names some (1.37 alpha): devices that
    # draw on one counter set are allocated together only while they share a group.
    groups: tuple[tuple[str, frozenset[str]], ...] = ()

    @cached_property
    def view(self) -> dict[str, Any]:
        """What CEL sees, made when first needed: with node models (`Node.model`) selectors run on
        one node of each model, so most devices never need one."""
        return device_view(self.driver, self.raw)

    @cached_property
    def _attributes(self) -> dict[str, Any]:
        """Each attribute's plain value (scores read a few of them per device per node scored; the
        device object is its model's, so this is made once per model)."""
        return {name: next(iter(value.values())) for name, value in (self.raw.get("attributes") or {}).items() if value}

    def attribute(self, name: str) -> Any:
        return self._attributes.get(name)

    @cached_property
    def counter_sets(self) -> tuple[str, ...]:
        """The counter sets it draws on, or is grouped by."""
        return tuple(dict.fromkeys([counter_set for counter_set, _ in self.consumes + self.groups]))

    @cached_property
    def part(self) -> bool:
        """A fraction or share of a GPU (fraction packing prefers GPUs already shared for these)."""
        return self.attribute("type") in ("fraction", "share")

    def capacity(self, name: str) -> Decimal | None:
        found = self._capacities.get(name)
        return found.value if found is not None else None

    @cached_property
    def _capacities(self) -> dict[str, _Capacity]:
        return {name: _Capacity.parse(entry) for name, entry in (self.raw.get("capacity") or {}).items()}

    def consumption(self, requested: Mapping[str, Decimal]) -> dict[str, Decimal] | None:
        """What one allocation asking `requested` takes of this shared device, charged as the DRA
        allocator charges it: a capacity not asked for still costs its policy's default (the whole
        capacity without a policy), so a share can never be free. None when the request asks for
        a capacity the device lacks or breaks its policy: the device cannot serve it."""
        if any(name not in self._capacities for name in requested):
            return None
        consumed = {}
        for name, capacity in self._capacities.items():
            amount = capacity.charge(requested.get(name))
            if amount is None:
                return None
            consumed[name] = amount
        return consumed

    @cached_property
    def allocations(self) -> int | None:
        """The most allocations this device can ever hold at once (None: no capacity bounds it),
        which bounds every loop that places pods on it."""
        if not self.multi:
            return 1
        bounds = [c.value // c.smallest for c in self._capacities.values() if c.smallest]
        return int(min(bounds)) if bounds else None


@dataclass(frozen=True)
class _Capacity:
    """One consumable capacity of a shared device and its request policy."""

    value: Decimal
    default: Decimal | None
    valid_values: tuple[Decimal, ...]
    low: Decimal | None
    high: Decimal | None
    step: Decimal | None

    @classmethod
    def parse(cls, entry: dict[str, Any]) -> _Capacity:
        policy = entry.get("requestPolicy") or {}
        valid = policy.get("validRange") or {}

        def optional(text: str | None) -> Decimal | None:
            return quantity(text) if text is not None else None

        return cls(
            quantity(entry["value"]),
            optional(policy.get("default")),
            tuple(sorted(quantity(v) for v in policy.get("validValues") or [])),
            optional(valid.get("min")),
            optional(valid.get("max")),
            optional(valid.get("step")),
        )

    @property
    def smallest(self) -> Decimal | None:
        """The least one allocation can take (None: any amount, however small)."""
        return self.valid_values[0] if self.valid_values else self.low

    def charge(self, requested: Decimal | None) -> Decimal | None:
        """The amount consumed for `requested` (None: not asked), or None if the policy forbids it."""
        if requested is None:
            return self.default if self.default is not None else self.value
        if self.valid_values:
            return next((v for v in self.valid_values if v >= requested), None)
        if self.low is not None:
            requested = max(requested, self.low)
            if self.step:
                requested = self.low + math.ceil((requested - self.low) / self.step) * self.step
        if self.high is not None and requested > self.high:
            return None
        return requested


# What tells one GPU from its twin on another node of the same model: the attributes a node model
# (`Node.model`) leaves out, as published attribute names. A partition names its GPU's UUID.
IDENTITY_ATTRIBUTES = ("uuid", "parentUUID", "resource.kubernetes.io/pciBusID")
MAX_MODELS = 65_536  # distinct node models numbered at once
_MODELS: Numbering[bytes] = Numbering(MAX_MODELS)
# Where each identity value of a slice goes (device -> ((index into its values, attribute), ...)),
# and the values: see extender.devices.slices.
IdentityPlaces = Mapping[str, tuple[tuple[int, str], ...]]


@dataclass(eq=False)
class DeviceSet:
    """A node model's devices and counters, made once and shared by every node of the model (never
    changed once made): 10,000 nodes of five models hold five of these, not 1.2 million devices."""

    devices: dict[str, NodeDevice]
    counters: dict[str, dict[str, Decimal]]
    published: tuple[bytes, ...]  # the keys of the slice tables it is made of, in order

    @cached_property
    def model(self) -> int:
        return model_number(self.published)

    @cached_property
    def allocations(self) -> int | None:
        return allocation_bound(self.devices.values())

    @cached_property
    def fitting_unused(self) -> frozenset[str]:
        """The devices whose counters fit their sets' totals while nothing draws on those sets:
        free on any node of the model where their sets are untouched and they are not in use."""
        return frozenset(name for name, device in self.devices.items() if fits_unused(device, self.counters))


def model_number(published: tuple[bytes, ...]) -> int:
    """The number of the node model made of slice tables with these keys."""
    return _MODELS.number(b"".join(published))


def allocation_bound(devices: Collection[NodeDevice]) -> int | None:
    """The most allocations `devices` can hold at once (None: unbounded)."""
    if not any(device.multi for device in devices):
        return len(devices)  # one allocation each
    return total_allocations(device.allocations for device in devices)


def identity_attributes(places: IdentityPlaces, values: tuple[str, ...], device: str) -> dict[str, dict[str, str]]:
    """`device`'s identity attributes as one slice publishes them (empty when it publishes none)."""
    return {attribute: {"string": values[index]} for index, attribute in places.get(device, ())}


def fits_unused(device: NodeDevice, totals: Mapping[str, Mapping[str, Decimal]]) -> bool:
    return all(
        amount <= totals.get(counter_set, {}).get(name, Decimal(0))
        for counter_set, counters in device.consumes
        for name, amount in counters
    )


@dataclass
class Node:
    name: str
    labels: dict[str, str]
    devices: dict[str, NodeDevice] = field(default_factory=dict)
    counters: dict[str, dict[str, Decimal]] = field(default_factory=dict)
    # Selector tuple -> the shape number of the devices it matches (extender.plan.capacity).
    shapes: dict[Selection, int] = field(default_factory=dict, compare=False, repr=False)
    # Other drivers' devices here that publish the standard NUMA attribute, named
    # `partner_name(driver, pool, device)`: what our devices can be aligned with.
    partners: tuple[NodeDevice, ...] = ()
    # The keys of the slice tables the devices and counters come from, in order.
    published: tuple[bytes, ...] = field(default=(), compare=False, repr=False)
    # This node's devices' identities: (places, values) of each slice that publishes some.
    identity: tuple[tuple[IdentityPlaces, tuple[str, ...]], ...] = field(default=(), compare=False, repr=False)
    # The model's shared devices and counters, when the node was made from one (kept alive with it).
    device_set: DeviceSet | None = field(default=None, compare=False, repr=False)

    @classmethod
    def of_model(
        cls,
        name: str,
        labels: dict[str, str],
        device_set: DeviceSet,
        partners: tuple[NodeDevice, ...],
        identity: tuple[tuple[IdentityPlaces, tuple[str, ...]], ...],
    ) -> Node:
        node = cls(
            name,
            labels,
            device_set.devices,
            device_set.counters,
            partners=partners,
            published=device_set.published,
            identity=identity,
            device_set=device_set,
        )
        # The model's number and allocation bound, worked out once per model (cached_property's slots).
        node.__dict__.update(model=device_set.model, allocations=device_set.allocations)
        return node

    @cached_property
    def model(self) -> int:
        """A number for all that selectors, placing and scoring can read of this node's devices,
        less each device's identity (`IDENTITY_ATTRIBUTES`): nodes of one hardware model and
        configuration share it, so a selector that reads no identity matches the same devices on each
        of them (extender.plan.capacity)."""
        return model_number(self.published)

    def work_out(self) -> None:
        """Work out `model` and `allocations` now, off the request path (`Decider.warm_up`)."""
        _ = self.model, self.allocations

    @cached_property
    def allocations(self) -> int | None:
        """The most allocations all its devices can hold at once (None: unbounded). Devices never
        change in a Node object: the state builds a new one when a slice changes."""
        return allocation_bound(self.devices.values())

    def identity_of(self, device: str) -> dict[str, dict[str, str]]:
        """`device`'s identity attributes as published here (empty when it publishes none)."""
        for places, values in self.identity:
            if device in places:
                return identity_attributes(places, values, device)
        return {}

    def view_of(self, device: NodeDevice) -> dict[str, Any]:
        """What CEL sees of `device` on this node, identity included (`device.view` leaves it out)."""
        own = self.identity_of(device.name)
        if not own:
            return device.view
        attributes = {**(device.raw.get("attributes") or {}), **own}
        return device_view(device.driver, {**device.raw, "attributes": attributes})

    def fits_unused(self, device: NodeDevice) -> bool:
        """`DeviceSet.fitting_unused`, for any node."""
        if self.device_set is not None:
            return device.name in self.device_set.fitting_unused
        return fits_unused(device, self.counters)

    def attribute_of(self, device: NodeDevice, name: str) -> Any:
        """`device.attribute(name)`, identity attributes read from this node."""
        if name in IDENTITY_ATTRIBUTES:
            value = self.identity_of(device.name).get(name)
            return value["string"] if value else device.attribute(name)
        return device.attribute(name)


def total_allocations(counts: Iterable[int | None]) -> int | None:
    """The sum of allocation bounds, None (unbounded) if any one is."""
    listed = list(counts)
    return None if None in listed else sum(c for c in listed if c is not None)


def make_device(raw: dict[str, Any], driver: str) -> NodeDevice:
    """A device our driver publishes, as planning reads it."""
    # Most devices consume no counters and carry no taint: those skip building empty tuples.
    counters = raw.get("consumesCounters")
    consumes: tuple[tuple[str, tuple[tuple[str, Decimal], ...]], ...] = ()
    groups: tuple[tuple[str, frozenset[str]], ...] = ()
    if counters:
        consumes = tuple(
            (c["counterSet"], tuple((k, quantity(v["value"])) for k, v in c["counters"].items())) for c in counters
        )
        groups = tuple(
            (c["counterSet"], frozenset(c["compatibilityGroups"])) for c in counters if c.get("compatibilityGroups")
        )
    taints: list[dict[str, Any]] = raw.get("taints") or []
    tainted = any(t.get("effect") in ("NoSchedule", "NoExecute") for t in taints)
    multi = bool(raw.get("allowMultipleAllocations"))
    return NodeDevice(raw["name"], raw, driver, consumes, multi, tainted, groups)


def partner_name(driver: str, pool: str, device: str) -> str:
    return f"{driver}/{pool}/{device}"


def partner_device(name: str, raw: dict[str, Any], driver: str) -> NodeDevice:
    """Another driver's device with a NUMA node, modelled optimistically (the scheduler's DRA
    plugin has the last word): a shareable one is never used up, counters and taints are not
    read, so the extender never refuses a node the allocator would take."""
    return NodeDevice(name, raw, driver, (), bool(raw.get("allowMultipleAllocations")), False)


def numa_placed(raw: dict[str, Any]) -> bool:
    return STANDARD_NUMA_ATTRIBUTE in (raw.get("attributes") or {})


@dataclass
class Usage:
    """What allocated claims use on one node: whole devices, shared capacity, counters."""

    devices: set[str] = field(default_factory=set)
    shared: dict[str, dict[str, Decimal]] = field(default_factory=dict)  # multi device -> capacity used
    counters: dict[str, dict[str, Decimal]] = field(default_factory=dict)  # counter set -> used
    groups: dict[str, frozenset[str]] = field(default_factory=dict)  # counter set -> groups its users share
    partners: frozenset[str] = frozenset()  # other drivers' devices in use (`partner_name`)

    def within(self, other: Usage) -> bool:
        """Everything used here is used in `other` too (nothing was freed going from self to other)."""
        return (
            self.devices <= other.devices
            and self.partners <= other.partners
            and _amounts_within(self.shared, other.shared)
            and _amounts_within(self.counters, other.counters)
        )

    def plus(self, other: Usage) -> Usage:
        """Both at once: a device in either is in use, amounts add up. A reservation on top of the
        claims' usage: it names devices its victims may still hold, so those count once."""
        shared = {d: dict(c) for d, c in self.shared.items()}
        _add_amounts(shared, other.shared)
        counters = {s: dict(c) for s, c in self.counters.items()}
        _add_amounts(counters, other.counters)
        groups = {**other.groups, **self.groups}
        for counter_set in self.groups.keys() & other.groups.keys():  # users of both must share a group
            groups[counter_set] = self.groups[counter_set] & other.groups[counter_set]
        return Usage(self.devices | other.devices, shared, counters, groups, self.partners | other.partners)

    def minus(self, base: Usage) -> Usage:
        """What this usage holds beyond `base` (which it contains): what placing pods added, with the
        compatibility groups of the counter sets it draws on (devices kept for a MIG preemptor must
        keep a fraction off their GPU)."""
        shared = _subtract_amounts(self.shared, base.shared)
        counters = _subtract_amounts(self.counters, base.counters)
        groups = {counter_set: g for counter_set, g in self.groups.items() if counter_set in counters}
        return Usage(self.devices - base.devices, shared, counters, groups, self.partners - base.partners)

    def fingerprint(self) -> tuple[Any, ...]:
        """Equal for equal usages: the state keeps one object per value (see `DeviceIndex._canonical`)."""
        return (
            frozenset(self.devices),
            tuple((d, tuple(sorted(c.items()))) for d, c in sorted(self.shared.items())),
            tuple((s, tuple(sorted(c.items()))) for s, c in sorted(self.counters.items())),
            tuple(sorted(self.groups.items(), key=lambda item: item[0])),
            self.partners,
        )

    def copy(self) -> Usage:
        return Usage(
            set(self.devices),
            {d: dict(c) for d, c in self.shared.items()},
            {s: dict(c) for s, c in self.counters.items()},
            dict(self.groups),
            self.partners,
        )


def _add_amounts(into: dict[str, dict[str, Decimal]], more: dict[str, dict[str, Decimal]]) -> None:
    for key, amounts in more.items():
        target = into.setdefault(key, {})
        for name, amount in amounts.items():
            target[name] = target.get(name, Decimal(0)) + amount


def _subtract_amounts(
    mine: dict[str, dict[str, Decimal]], base: dict[str, dict[str, Decimal]]
) -> dict[str, dict[str, Decimal]]:
    left: dict[str, dict[str, Decimal]] = {}
    for key, amounts in mine.items():
        for name, amount in amounts.items():
            extra = amount - base.get(key, {}).get(name, Decimal(0))
            if extra > 0:
                left.setdefault(key, {})[name] = extra
    return left


def _amounts_within(mine: dict[str, dict[str, Decimal]], theirs: dict[str, dict[str, Decimal]]) -> bool:
    return all(
        amount <= theirs.get(key, {}).get(name, Decimal(0))
        for key, amounts in mine.items()
        for name, amount in amounts.items()
    )


# One device a claim's allocation names: (driver, pool, device, capacity it consumes of a shareable
# device, None when it names none).
Allocated = tuple[str, str, str, dict[str, Decimal] | None]


def allocated_results(claim: dict[str, Any]) -> tuple[Allocated, ...]:
    """The devices the claim is allocated (none while it is not): what its usage is made of, read
    once as the claim arrives (`extender.cluster.device_index`), not from the claim at each rebuild. An adminAccess
    result uses nothing, as the scheduler counts it (`foreachAllocatedDevice`): evicting its pod
    frees nothing, and it keeps nobody else off the device."""
    allocation = (claim.get("status") or {}).get("allocation")
    if not allocation:
        return ()
    found: list[Allocated] = []
    for result in allocation.get("devices", {}).get("results") or []:
        if result.get("adminAccess") is True:
            continue
        consumed = result.get("consumedCapacity")
        amounts = {k: quantity(v) for k, v in consumed.items()} if consumed else None
        found.append((result.get("driver", ""), result.get("pool", ""), result.get("device", ""), amounts))
    return tuple(found)


def usage_from(claims: list[dict[str, Any]], nodes: dict[str, Node], driver: str) -> dict[str, Usage]:
    return usage_of(map(allocated_results, claims), nodes, driver)


def usage_of(allocations: Iterable[tuple[Allocated, ...]], nodes: dict[str, Node], driver: str) -> dict[str, Usage]:
    """What the claims with these `allocated_results` use on `nodes`."""
    usage: dict[str, Usage] = {name: Usage() for name in nodes}
    partner_nodes = {d.name: node.name for node in nodes.values() for d in node.partners if not d.multi}
    in_use: dict[str, set[str]] = {}
    for results in allocations:
        for result_driver, pool, device_name, consumed in results:
            if result_driver != driver:
                name = partner_name(result_driver, pool, device_name)
                if name in partner_nodes:
                    in_use.setdefault(partner_nodes[name], set()).add(name)
                continue
            node = nodes.get(pool)
            device = node.devices.get(device_name) if node is not None else None
            if device is not None:
                take(usage[pool], device, consumed)
    for name, partners in in_use.items():
        usage[name].partners = frozenset(partners)
    return usage


def take(usage: Usage, device: NodeDevice, consumed: dict[str, Decimal] | None = None) -> None:
    """Record that `device` (or `consumed` of a shared device) is in use."""
    if device.multi:
        used = usage.shared.setdefault(device.name, {})
        for name, amount in (consumed or {}).items():
            used[name] = used.get(name, Decimal(0)) + amount
    else:
        usage.devices.add(device.name)
    for counter_set, counters in device.consumes:
        used_counters = usage.counters.setdefault(counter_set, {})
        for name, amount in counters:
            used_counters[name] = used_counters.get(name, Decimal(0)) + amount
    for counter_set, groups in device.groups:
        usage.groups[counter_set] = usage.groups.get(counter_set, groups) & groups
