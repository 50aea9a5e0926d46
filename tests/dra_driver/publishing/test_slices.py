"""The slice builder respects every API limit, and partitions of a GPU exclude each other."""

from __future__ import annotations

import re
from collections import defaultdict
from decimal import Decimal
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from kubernetes.utils import parse_quantity

from dra_driver.discovery.simulated import load_profile, resolve_profile
from dra_driver.faults import xid_fault
from dra_driver.inventory import Fault, Gpu, Health, Inventory
from dra_driver.publishing.publish_config import PublishConfig
from dra_driver.publishing.slices import (
    COMPUTE_UNITS,
    MAX_ATTRIBUTES_AND_CAPACITIES,
    MAX_COUNTER_SETS_PER_SLICE,
    UNHEALTHY_TAINT_KEY,
    build_slices,
    dns_label,
    semver,
)
from nativedra.base.kube.names import DRIVER_NAME

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
C_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,31}$")


def h100() -> Inventory:
    return load_profile(resolve_profile("h100-8x"))


def devices_of(specs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [device for spec in specs for device in spec.get("devices", [])]


def counter_sets_of(specs: list[dict[str, Any]]) -> dict[str, dict[str, Decimal]]:
    return {
        counter_set["name"]: {name: Decimal(parse_quantity(c["value"])) for name, c in counter_set["counters"].items()}
        for spec in specs
        for counter_set in spec.get("sharedCounters", [])
    }


def assert_within_api_limits(specs: list[dict[str, Any]]) -> None:
    assert specs, "a pool always has at least one slice"
    assert {spec["pool"]["resourceSliceCount"] for spec in specs} == {len(specs)}
    names = [d["name"] for d in devices_of(specs)]
    assert len(names) == len(set(names)), "device names are unique in the pool"
    counter_sets = counter_sets_of(specs)
    for spec in specs:
        assert not ("devices" in spec and "sharedCounters" in spec), "1.35+: devices xor sharedCounters"
        assert len(spec.get("sharedCounters", [])) <= MAX_COUNTER_SETS_PER_SLICE
        devices = spec.get("devices", [])
        advanced = any(d.get("consumesCounters") or d.get("taints") for d in devices)
        assert len(devices) <= (64 if advanced else 128)
        for device in devices:
            assert DNS_LABEL.match(device["name"]), device["name"]
            assert len(device["attributes"]) + len(device.get("capacity", {})) <= MAX_ATTRIBUTES_AND_CAPACITIES
            for key, value in [*device["attributes"].items(), *device.get("capacity", {}).items()]:
                # Kubernetes 1.38 refuses qualified names with more than one "/".
                assert key.count("/") <= 1, key
                local = key.split("/")[-1]
                assert C_IDENTIFIER.match(local), key
                for text in value.values():
                    assert not isinstance(text, str) or len(text) <= 64
            assert len(device.get("consumesCounters", [])) <= 2
            for consumption in device.get("consumesCounters", []):
                available = counter_sets[consumption["counterSet"]]
                for name, counter in consumption["counters"].items():
                    assert Decimal(parse_quantity(counter["value"])) <= available[name]


def test_h100_layout() -> None:
    specs = build_slices(h100(), PublishConfig(), "node-a")
    assert_within_api_limits(specs)
    counter_slices = [s for s in specs if "sharedCounters" in s]
    assert len(counter_slices) == 1 and len(counter_slices[0]["sharedCounters"]) == 8
    devices = {d["name"]: d for d in devices_of(specs)}
    assert len(devices) == 6 * (1 + 2 + 4 + 8) + 2 * 25
    assert "gpu-0" in devices and "gpu-6" not in devices, "a GPU in MIG mode is published as MIG placements only"
    assert "gpu-6-1g-10gb-3" in devices and "gpu-7-1g-10gb-me-0" in devices
    assert devices["gpu-0"]["attributes"]["productName"] == {"string": "NVIDIA H100 80GB HBM3"}
    assert devices["gpu-0"]["attributes"]["cudaComputeCapability"] == {"version": "9.0.0"}
    assert devices["gpu-0"]["attributes"]["driverVersion"] == {"version": "550.90.7"}
    assert devices["gpu-4"]["attributes"]["numaNode"] == {"int": 1}
    assert devices["gpu-4"]["attributes"]["resource.kubernetes.io/numaNode"] == {"int": 1}
    assert devices["gpu-4"]["attributes"]["resource.kubernetes.io/pciBusID"] == {"string": "0000:9a:00.0"}
    assert devices["gpu-4"]["attributes"]["resource.kubernetes.io/pcieRoot"] == {"string": "pci0000:97"}


def test_whole_gpu_consumes_every_counter_of_its_set() -> None:
    specs = build_slices(h100(), PublishConfig(), "node-a")
    counter_sets = counter_sets_of(specs)
    whole = next(d for d in devices_of(specs) if d["name"] == "gpu-2")
    consumption = whole["consumesCounters"][0]
    assert consumption["counterSet"] == "gpu-2-counters"
    consumed = {name: Decimal(parse_quantity(c["value"])) for name, c in consumption["counters"].items()}
    assert consumed == counter_sets["gpu-2-counters"]


def test_all_fractions_of_one_size_fill_the_gpu_exactly_once() -> None:
    specs = build_slices(h100(), PublishConfig(), "node-a")
    total = counter_sets_of(specs)["gpu-0-counters"]
    eighths = [d for d in devices_of(specs) if d["name"].startswith("gpu-0-1of8-")]
    assert len(eighths) == 8
    compute = sum(Decimal(parse_quantity(d["consumesCounters"][0]["counters"]["compute"]["value"])) for d in eighths)
    memory = sum(Decimal(parse_quantity(d["consumesCounters"][0]["counters"]["memory"]["value"])) for d in eighths)
    assert compute == COMPUTE_UNITS == total["compute"]
    assert memory <= total["memory"] and total["memory"] - memory < 8


def test_mig_placements_consume_their_memory_slices_and_their_memory() -> None:
    """The slices keep placements apart; the memory counter says how big each is (what Kueue's
    counter-based quota charges), and the placements that fit side by side never exceed it."""
    specs = build_slices(h100(), PublishConfig(), "node-a")
    devices = {d["name"]: d for d in devices_of(specs)}
    three_g = devices["gpu-6-3g-40gb-4"]["consumesCounters"][0]
    assert three_g["counterSet"] == "gpu-6-counters"
    assert sorted(three_g["counters"]) == ["memory", *[f"memory-slice-{i}" for i in range(4, 8)]]
    assert three_g["counters"]["memory"] == devices["gpu-6-3g-40gb-4"]["capacity"]["memory"]
    assert devices["gpu-6-1g-10gb-3"]["attributes"]["profile"] == {"string": "1g.10gb"}
    total = counter_sets_of(specs)["gpu-6-counters"]
    one_g = [
        d
        for name, d in devices.items()
        if name.startswith("gpu-6-") and d["attributes"].get("profile") == {"string": "1g.10gb"}
    ]
    memory = sum(Decimal(parse_quantity(d["consumesCounters"][0]["counters"]["memory"]["value"])) for d in one_g)
    assert len(one_g) == 7 and memory <= total["memory"]


def test_share_mode_publishes_one_multi_allocatable_device_per_gpu() -> None:
    specs = build_slices(h100(), PublishConfig(share_gpus=(0, 1)), "node-a")
    assert_within_api_limits(specs)
    devices = {d["name"]: d for d in devices_of(specs)}
    share = devices["gpu-0-share"]
    assert share["allowMultipleAllocations"] is True
    assert share["attributes"]["type"] == {"string": "share"}
    assert share["capacity"]["memory"]["requestPolicy"]["validRange"]["step"] == "1Mi"
    assert "gpu-0" not in devices and "gpu-0-1of2-0" not in devices
    assert "gpu-2" in devices


def test_without_fractions_whole_gpus_need_no_counters() -> None:
    specs = build_slices(load_profile(resolve_profile("l4-4x")), PublishConfig(fractions=()), "node-a")
    assert [s for s in specs if "sharedCounters" in s] == []
    assert all("consumesCounters" not in d for d in devices_of(specs))


def test_unhealthy_gpu_is_tainted_with_all_its_partitions() -> None:
    inventory = h100()
    sick = inventory.gpus[1].model_copy(update={"health": Health.UNHEALTHY})
    inventory = inventory.model_copy(update={"gpus": (inventory.gpus[0], sick, *inventory.gpus[2:])})
    specs = build_slices(inventory, PublishConfig(), "node-a")
    for device in devices_of(specs):
        tainted = any(t["key"] == UNHEALTHY_TAINT_KEY for t in device.get("taints", []))
        assert tainted == (device["attributes"]["index"]["int"] == 1), device["name"]


def _faulty(index: int, fault: Fault) -> Inventory:
    inventory = h100()
    gpus = tuple(gpu.with_fault(fault) if gpu.index == index else gpu for gpu in inventory.gpus)
    return inventory.model_copy(update={"gpus": gpus})


def _taints(inventory: Inventory, config: PublishConfig) -> dict[str, list[dict[str, Any]]]:
    return {d["name"]: d.get("taints", []) for d in devices_of(build_slices(inventory, config, "node-a"))}


def test_a_fatal_fault_taints_with_the_admins_effect_and_names_the_fault() -> None:
    faulty = _faulty(3, xid_fault(79))
    for effect in ("NoSchedule", "NoExecute"):
        taints = _taints(faulty, PublishConfig(fatal_fault_effect=effect))
        tainted = {name for name, found in taints.items() if found}
        assert tainted == {name for name in taints if name == "gpu-3" or name.startswith("gpu-3-")}
        assert {(t["key"], t["value"], t["effect"]) for name in tainted for t in taints[name]} == {
            (UNHEALTHY_TAINT_KEY, "xid-79", effect)
        }


def test_a_non_fatal_xid_only_keeps_new_work_off_the_gpu() -> None:
    faulty = _faulty(2, xid_fault(13))  # the application's own error
    assert faulty.gpus[2].health is Health.HEALTHY
    taints = _taints(faulty, PublishConfig(fatal_fault_effect="NoExecute"))
    assert taints["gpu-2"] == [{"key": UNHEALTHY_TAINT_KEY, "value": "xid-13", "effect": "NoSchedule"}]
    # a fatal fault after it stands; a non-fatal one after a fatal one does not replace it
    worse = faulty.gpus[2].with_fault(xid_fault(48))
    assert worse.fault == xid_fault(48) and worse.health is Health.UNHEALTHY
    assert worse.with_fault(xid_fault(13)) == worse
    assert worse.with_fault(xid_fault(63)) == worse, "the first fatal fault stays: the taint does not flip"


def test_empty_node_still_publishes_one_empty_slice() -> None:
    specs = build_slices(Inventory(), PublishConfig(), "node-a")
    assert specs == [
        {
            "driver": DRIVER_NAME,
            "nodeName": "node-a",
            "pool": {"name": "node-a", "resourceSliceCount": 1},
            "devices": [],
        }
    ]


def test_names_and_versions() -> None:
    assert dns_label("gpu-0-1g.10gb+me-3") == "gpu-0-1g-10gb-me-3"
    assert semver("550.90.07") == "550.90.7"
    assert semver("12.4") == "12.4.0"


def _gpu(index: int, memory_gib: int, numa: int, mig: bool) -> Gpu:
    template = load_profile(resolve_profile("h100-8x")).gpus[0]
    return template.model_copy(
        update={
            "index": index,
            "minor": index,
            "uuid": f"GPU-{index:08d}",
            "memory_bytes": memory_gib * 1024**3,
            "numa_node": numa,
            "pci_bus_id": f"0000:{index % 256:02x}:00.0",
            "mig_enabled": mig,
        }
    )


@settings(max_examples=60, deadline=None)
@given(
    count=st.integers(min_value=0, max_value=80),
    mig_every=st.integers(min_value=0, max_value=5),
    fractions=st.sets(st.sampled_from([2, 3, 4, 8, 16]), max_size=5),
    share_first=st.integers(min_value=0, max_value=4),
)
def test_any_inventory_respects_limits(count: int, mig_every: int, fractions: set[int], share_first: int) -> None:
    gpus = tuple(_gpu(i, 80, i % 4, bool(mig_every) and i % mig_every == 0) for i in range(count))
    config = PublishConfig(fractions=tuple(fractions), share_gpus=tuple(range(share_first)))
    specs = build_slices(Inventory(gpus=gpus), config, "node-big")
    assert_within_api_limits(specs)
    per_gpu: dict[int, int] = defaultdict(int)
    for device in devices_of(specs):
        per_gpu[device["attributes"]["index"]["int"]] += 1
    assert set(per_gpu) == set(range(count))


def test_mig_or_fractions_offers_both_modes_kept_apart_by_compatibility_groups() -> None:
    """A MIG-capable GPU not in MIG mode offers its placements and its fractions: the whole GPU
    takes every counter of its set (so it excludes both), placements and fractions declare one group
    each (so the scheduler never puts both on one GPU); GPUs already in MIG mode are unchanged."""
    specs = build_slices(h100(), PublishConfig(mig_or_fractions=True), "node-a")
    assert_within_api_limits(specs)
    devices = {d["name"]: d for d in devices_of(specs)}
    counter_sets = counter_sets_of(specs)
    whole = devices["gpu-0"]["consumesCounters"][0]
    assert {n: Decimal(parse_quantity(c["value"])) for n, c in whole["counters"].items()} == counter_sets[
        "gpu-0-counters"
    ]
    assert "compatibilityGroups" not in whole
    groups = {
        name: d["consumesCounters"][0].get("compatibilityGroups")
        for name, d in devices.items()
        if name.startswith("gpu-0-")
    }
    assert groups["gpu-0-1of4-0"] == ["fractions"] and groups["gpu-0-1g-10gb-3"] == ["mig"]
    assert set(map(tuple, groups.values())) == {("fractions",), ("mig",)}
    assert "gpu-6" not in devices and "compatibilityGroups" not in devices["gpu-6-1g-10gb-3"]["consumesCounters"][0]
    default = {d["name"] for d in devices_of(build_slices(h100(), PublishConfig(), "node-a"))}
    assert "gpu-0-1g-10gb-3" not in default, "without the choice a GPU not in MIG mode offers no placements"


def test_a_faulty_gpu_is_left_out_where_taints_are_not_kept() -> None:
    inventory = h100()
    faulty = inventory.model_copy(
        update={
            "gpus": tuple(
                g.model_copy(update={"health": Health.UNHEALTHY}) if g.index == 2 else g for g in inventory.gpus
            )
        }
    )
    tainted = {d["name"]: d for d in devices_of(build_slices(faulty, PublishConfig(), "node-a"))}
    assert tainted["gpu-2"]["taints"] and tainted["gpu-2-1of2-0"]["taints"]
    left_out = {d["name"] for d in devices_of(build_slices(faulty, PublishConfig(omit_unhealthy=True), "node-a"))}
    assert not any(name == "gpu-2" or name.startswith("gpu-2-") for name in left_out)
    assert "gpu-3" in left_out


def test_a_gpu_of_unknown_numa_node_publishes_neither_numa_attribute() -> None:
    inventory = h100()
    unknown = inventory.model_copy(
        update={"gpus": tuple(g.model_copy(update={"numa_node": None}) for g in inventory.gpus)}
    )
    for device in devices_of(build_slices(unknown, PublishConfig(), "node-a")):
        attributes = device.get("attributes") or {}
        assert "numaNode" not in attributes and "resource.kubernetes.io/numaNode" not in attributes, device["name"]
