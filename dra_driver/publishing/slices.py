"""Inventory + publish config -> ResourceSlice specs (resource.k8s.io/v1, 1.35+ layout). Pure.

Whole GPUs and their partitions (MIG placements, fixed fractions) consume counters from one
counter set per GPU, so the real scheduler never hands out a GPU and a part of it at once.
Counter sets live in slices of their own; devices are split so each slice respects the API
limits, and every slice carries the pool's total `resourceSliceCount`.

Each device is built once as a `PublishedDevice` (typed fields for the node, API form for
publishing); `pack_slices` is the edge that turns them into slice specs.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable
from typing import Any

from dra_driver.faults import taint_effect
from dra_driver.inventory import Fault, Gpu, Health, Inventory, MigProfile
from dra_driver.publishing.publish_config import PublishConfig
from dra_driver.publishing.published import DeviceKind, Fraction, PublishedDevice, memory_slice_counter
from nativedra.base.kube.names import DRIVER_NAME, STANDARD_NUMA_ATTRIBUTE
from nativedra.base.kube.units import MIB

MAX_DEVICES_PER_SLICE = 128
MAX_DEVICES_PER_SLICE_ADVANCED = 64  # with taints, counters or list attributes
MAX_COUNTER_SETS_PER_SLICE = 8
MAX_ATTRIBUTES_AND_CAPACITIES = 32
COMPUTE_UNITS = 1000  # the `compute` counter: thousandths of a GPU
UNHEALTHY_TAINT_KEY = f"{DRIVER_NAME}/unhealthy"

Spec = dict[str, Any]

_DNS_LABEL_INVALID = re.compile(r"[^a-z0-9-]+")


def dns_label(text: str) -> str:
    """`gpu-0-1g.10gb+me-3` -> `gpu-0-1g-10gb-me-3`."""
    label = _DNS_LABEL_INVALID.sub("-", text.lower()).strip("-")
    return re.sub(r"-{2,}", "-", label)[:63].rstrip("-")


def semver(version: str) -> str:
    """`550.90.07` -> `550.90.7`, `12.4` -> `12.4.0` (semver forbids leading zeros)."""
    parts = [str(int(part)) for part in version.split(".")]
    return ".".join([*parts, "0", "0"][:3])


def counter_set_name(gpu: Gpu) -> str:
    return f"gpu-{gpu.index}-counters"


def whole_device_name(gpu: Gpu) -> str:
    return f"gpu-{gpu.index}"


def fraction_profile(denominator: int) -> str:
    return f"1of{denominator}"


def _common_attributes(gpu: Gpu, inventory: Inventory) -> dict[str, Any]:
    attributes: dict[str, Any] = {
        "vendor": {"string": gpu.vendor.value},
        "index": {"int": gpu.index},
        "productName": {"string": gpu.product_name},
        "brand": {"string": gpu.brand},
        "architecture": {"string": gpu.architecture},
        "resource.kubernetes.io/pciBusID": {"string": gpu.pci_bus_id},
    }
    if gpu.cuda_compute_capability:
        attributes["cudaComputeCapability"] = {"version": semver(gpu.cuda_compute_capability)}
    if inventory.driver_version:
        attributes["driverVersion"] = {"version": semver(inventory.driver_version)}
    if inventory.cuda_driver_version:
        attributes["cudaDriverVersion"] = {"version": semver(inventory.cuda_driver_version)}
    if gpu.numa_node is not None:  # unknown NUMA (sysfs -1): omitted, as the standard says
        attributes["numaNode"] = {"int": gpu.numa_node}
        # KEP-6072's standard name, so a claim can align a GPU with another driver's NIC or CPU
        # (matchAttribute); a scalar, as drivers publish it while DRAListTypeAttributes is off.
        attributes[STANDARD_NUMA_ATTRIBUTE] = {"int": gpu.numa_node}
    if gpu.pcie_root:
        attributes["resource.kubernetes.io/pcieRoot"] = {"string": gpu.pcie_root}
    return attributes


def _published(
    api: Spec,
    kind: DeviceKind,
    gpu: Gpu,
    *,
    fraction: Fraction | None = None,
    mig_profile: str | None = None,
    mig_start: int | None = None,
) -> PublishedDevice:
    """The device with its API form (its taints are `_taint`'s)."""
    return PublishedDevice(api["name"], kind, gpu, api, fraction, mig_profile, mig_start)


def _memory_and_multiprocessors(gpu: Gpu, denominator: int) -> dict[str, Any]:
    capacity: dict[str, Any] = {"memory": {"value": str(gpu.memory_bytes // denominator)}}
    if gpu.multiprocessors:
        capacity["multiprocessors"] = {"value": str(gpu.multiprocessors // denominator)}
    return capacity


def _whole_counters(gpu: Gpu) -> dict[str, Any]:
    return {"memory": {"value": str(gpu.memory_bytes)}, "compute": {"value": str(COMPUTE_UNITS)}}


# Compatibility groups of a GPU that offers both modes: devices of one group only share a GPU.
MIG_GROUP = "mig"
FRACTION_GROUP = "fractions"


def _mig_slice_counters(gpu: Gpu) -> dict[str, Any]:
    return {memory_slice_counter(i): {"value": "1"} for i in range(gpu.mig_memory_slices)}


def _mig_counters(gpu: Gpu) -> dict[str, Any]:
    """A GPU in MIG mode: its memory slices, which keep placements apart, and its memory in bytes,
    which no placement can exceed but which says how big each is: Kueue's counter-based quota
    (v0.19) charges a placement the counters it consumes, so a 3g.40gb counts 40 GB, not one device."""
    return {"memory": {"value": str(gpu.memory_bytes)}, **_mig_slice_counters(gpu)}


def _consumption(gpu: Gpu, counters: dict[str, Any], group: str | None) -> dict[str, Any]:
    consumption: dict[str, Any] = {"counterSet": counter_set_name(gpu), "counters": counters}
    if group:
        consumption["compatibilityGroups"] = [group]
    return consumption


def _whole_gpu(gpu: Gpu, inventory: Inventory, with_counters: bool, both_modes: bool = False) -> PublishedDevice:
    device: Spec = {
        "name": whole_device_name(gpu),
        "attributes": {
            "type": {"string": DeviceKind.GPU.value},
            "uuid": {"string": gpu.uuid},
            "migCapable": {"bool": gpu.mig_capable},
            **_common_attributes(gpu, inventory),
        },
        "capacity": _memory_and_multiprocessors(gpu, 1),
    }
    if with_counters:
        counters = {**_whole_counters(gpu), **(_mig_slice_counters(gpu) if both_modes else {})}
        device["consumesCounters"] = [_consumption(gpu, counters, None)]
    return _published(device, DeviceKind.GPU, gpu)


def _fractions(
    gpu: Gpu, inventory: Inventory, denominators: tuple[int, ...], group: str | None = None
) -> list[PublishedDevice]:
    devices = []
    for denominator in denominators:
        fraction = Fraction(1, denominator)
        memory = fraction.of(gpu.memory_bytes)
        for placement in range(denominator):
            device: Spec = {
                "name": dns_label(f"gpu-{gpu.index}-{fraction_profile(denominator)}-{placement}"),
                "attributes": {
                    "type": {"string": DeviceKind.FRACTION.value},
                    "parentUUID": {"string": gpu.uuid},
                    "fraction": {"string": str(fraction)},
                    "profile": {"string": fraction_profile(denominator)},
                    **_common_attributes(gpu, inventory),
                },
                "capacity": _memory_and_multiprocessors(gpu, denominator),
                "consumesCounters": [
                    _consumption(
                        gpu,
                        {"memory": {"value": str(memory)}, "compute": {"value": str(COMPUTE_UNITS // denominator)}},
                        group,
                    )
                ],
            }
            devices.append(_published(device, DeviceKind.FRACTION, gpu, fraction=fraction))
    return devices


def mig_device_name(gpu: Gpu, profile: MigProfile, start: int) -> str:
    return dns_label(f"gpu-{gpu.index}-{profile.name}-{start}")


def _mig_placements(gpu: Gpu, inventory: Inventory, group: str | None = None) -> list[PublishedDevice]:
    devices = []
    for profile in gpu.mig_profiles:
        for placement in profile.placements:
            slices = range(placement.start, placement.start + placement.size)
            device: Spec = {
                "name": mig_device_name(gpu, profile, placement.start),
                "attributes": {
                    "type": {"string": DeviceKind.MIG.value},
                    "parentUUID": {"string": gpu.uuid},
                    "profile": {"string": profile.name},
                    "placementStart": {"int": placement.start},
                    **_common_attributes(gpu, inventory),
                },
                "capacity": {
                    "memory": {"value": str(profile.memory_size_mb * MIB)},
                    "multiprocessors": {"value": str(profile.multiprocessor_count)},
                    "copyEngines": {"value": str(profile.copy_engine_count)},
                    "decoders": {"value": str(profile.decoder_count)},
                    "encoders": {"value": str(profile.encoder_count)},
                    "jpegEngines": {"value": str(profile.jpeg_count)},
                    "ofaEngines": {"value": str(profile.ofa_count)},
                },
                "consumesCounters": [
                    _consumption(
                        gpu,
                        {
                            "memory": {"value": str(min(profile.memory_size_mb * MIB, gpu.memory_bytes))},
                            **{memory_slice_counter(i): {"value": "1"} for i in slices},
                        },
                        group,
                    )
                ],
            }
            devices.append(_published(device, DeviceKind.MIG, gpu, mig_profile=profile.name, mig_start=placement.start))
    return devices


def _share(gpu: Gpu, inventory: Inventory, config: PublishConfig) -> PublishedDevice:
    device: Spec = {
        "name": f"gpu-{gpu.index}-share",
        "allowMultipleAllocations": True,
        "attributes": {
            "type": {"string": DeviceKind.SHARE.value},
            "uuid": {"string": gpu.uuid},
            **_common_attributes(gpu, inventory),
        },
        "capacity": {
            "memory": {
                "value": str(gpu.memory_bytes),
                "requestPolicy": {
                    "default": f"{config.share_min_memory_mib}Mi",
                    "validRange": {"min": f"{config.share_min_memory_mib}Mi", "step": "1Mi"},
                },
            },
            "compute": {
                "value": "100",
                "requestPolicy": {
                    "default": str(config.share_default_compute),
                    "validRange": {"min": "1", "max": "100", "step": "1"},
                },
            },
        },
    }
    return _published(device, DeviceKind.SHARE, gpu)


def devices_and_counters(inventory: Inventory, config: PublishConfig) -> tuple[list[PublishedDevice], list[Spec]]:
    """Every device this node publishes, and the counter sets (API form) they consume."""
    devices: list[PublishedDevice] = []
    counter_sets: list[Spec] = []
    for gpu in sorted(inventory.gpus, key=lambda g: g.index):
        if config.omit_unhealthy and gpu.health is Health.UNHEALTHY:
            continue
        first = len(devices)
        if gpu.mig_enabled:
            if not config.mig:
                continue  # a GPU in MIG mode cannot run whole-GPU work
            counter_sets.append({"name": counter_set_name(gpu), "counters": _mig_counters(gpu)})
            devices.extend(_mig_placements(gpu, inventory))
        elif config.shares(gpu.index):
            devices.append(_share(gpu, inventory, config))
        elif config.mig_or_fractions and config.mig and config.fractions and gpu.mig_capable and gpu.mig_profiles:
            # Both modes: the whole GPU takes every counter; placements and fractions only their own
            # group's company, so the scheduler's first allocation on the GPU picks its mode.
            counters = {**_whole_counters(gpu), **_mig_slice_counters(gpu)}
            counter_sets.append({"name": counter_set_name(gpu), "counters": counters})
            devices.append(_whole_gpu(gpu, inventory, with_counters=True, both_modes=True))
            devices.extend(_fractions(gpu, inventory, config.fractions, FRACTION_GROUP))
            devices.extend(_mig_placements(gpu, inventory, MIG_GROUP))
        elif config.fractions:
            counter_sets.append({"name": counter_set_name(gpu), "counters": _whole_counters(gpu)})
            devices.append(_whole_gpu(gpu, inventory, with_counters=True))
            devices.extend(_fractions(gpu, inventory, config.fractions))
        else:
            devices.append(_whole_gpu(gpu, inventory, with_counters=False))
        devices[first:] = _tainted(devices[first:], gpu, config)
    return devices, counter_sets


def fault_taint(fault: Fault, config: PublishConfig) -> Spec:
    """The taint a faulty GPU's devices carry: its reason as value, so a toleration or a
    DeviceTaintRule can tell an application XID from a GPU gone."""
    return {"key": UNHEALTHY_TAINT_KEY, "value": fault.reason, "effect": taint_effect(fault, config.fatal_fault_effect)}


def _tainted(devices: list[PublishedDevice], gpu: Gpu, config: PublishConfig) -> list[PublishedDevice]:
    """A faulty GPU taints every device made from it."""
    fault = gpu.tainting_fault
    if fault is None:
        return devices
    taints = [fault_taint(fault, config)]
    return [dataclasses.replace(device, api={**device.api, "taints": taints}) for device in devices]


def _is_advanced(device: Spec) -> bool:
    return bool(device.get("taints") or device.get("consumesCounters"))


def _chunks(items: list[Any], size: int) -> list[list[Any]]:
    return [items[i : i + size] for i in range(0, len(items), size)]


def build_slices(inventory: Inventory, config: PublishConfig, node_name: str) -> list[Spec]:
    """The pool's slice specs, in publishing order. Generation is left to the publisher."""
    return pack_slices(*devices_and_counters(inventory, config), node_name)


def pack_slices(published: Iterable[PublishedDevice], counter_sets: list[Spec], node_name: str) -> list[Spec]:
    """Devices and counter sets -> slice specs that each respect the API limits."""
    devices = [device.api for device in published]
    for device in devices:
        fields = len(device["attributes"]) + len(device.get("capacity", {}))
        if fields > MAX_ATTRIBUTES_AND_CAPACITIES:
            raise ValueError(f"device {device['name']}: {fields} attributes+capacities exceed the API limit")
    per_slice = MAX_DEVICES_PER_SLICE_ADVANCED if any(_is_advanced(d) for d in devices) else MAX_DEVICES_PER_SLICE
    contents: list[Spec] = [{"sharedCounters": chunk} for chunk in _chunks(counter_sets, MAX_COUNTER_SETS_PER_SLICE)]
    contents += [{"devices": chunk} for chunk in _chunks(devices, per_slice)]
    if not contents:
        contents = [{"devices": []}]  # an empty pool still tells the scheduler "this node has none"
    return [
        {
            "driver": DRIVER_NAME,
            "nodeName": node_name,
            "pool": {"name": node_name, "resourceSliceCount": len(contents)},
            **content,
        }
        for content in contents
    ]
