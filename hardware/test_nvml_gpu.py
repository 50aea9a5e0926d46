"""The nvml backend on a real NVIDIA GPU: what it discovers agrees with nvidia-smi and sysfs, the
shipped simulated profile of this model is exactly what NVML reports, the slices it would publish
keep the API's limits, health events can be watched, and a claim's CDI edits name device nodes
that exist. Read-only throughout."""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path
from typing import Any

import pytest

from dra_driver.discovery.nvml import CRITICAL_XID_EVENTS, DOUBLE_BIT_ECC_EVENT, NvmlBackend
from dra_driver.discovery.simulated import model_facts, shipped_models
from dra_driver.inventory import Inventory, Vendor
from dra_driver.kubelet.cdi_edits import ClaimDevice, HostDevices, claim_spec
from dra_driver.kubelet.opaque_config import DEFAULT
from dra_driver.publishing.publish_config import PublishConfig
from dra_driver.publishing.published import DeviceKind
from dra_driver.publishing.slices import (
    MAX_DEVICES_PER_SLICE,
    build_slices,
    devices_and_counters,
)
from nativedra.base.kube.units import MIB


def test_every_gpu_nvidia_smi_lists_is_discovered(inventory: Inventory, smi: dict[int, dict[str, str]]) -> None:
    assert inventory.gpus
    assert {g.index: g.uuid for g in inventory.gpus} == {index: row["uuid"] for index, row in smi.items()}


def test_each_gpu_s_facts_agree_with_nvidia_smi(inventory: Inventory, smi: dict[int, dict[str, str]]) -> None:
    for gpu in inventory.gpus:
        row = smi[gpu.index]
        assert gpu.vendor is Vendor.NVIDIA
        assert gpu.product_name == row["name"]
        assert gpu.pci_bus_id == row["pci.bus_id"].lower()[4:]
        assert gpu.memory_bytes // MIB == int(row["memory.total"])
        assert gpu.cuda_compute_capability == row["compute_cap"]
        assert inventory.driver_version == row["driver_version"]
        mode = row["mig.mode.current"]
        assert gpu.mig_enabled == (mode == "Enabled"), mode
        if mode == "Disabled":
            assert gpu.mig_capable, "nvidia-smi says MIG can be enabled, the inventory says the GPU cannot do MIG"


def test_pcie_root_and_numa_node_agree_with_sysfs(inventory: Inventory) -> None:
    for gpu in inventory.gpus:
        device = Path("/sys/bus/pci/devices") / gpu.pci_bus_id
        if not device.exists():
            pytest.fail(f"GPU {gpu.index}: {device} is missing; sysfs is not the host's")
        real = os.path.realpath(device)
        if gpu.pcie_root is not None:
            assert f"/devices/{gpu.pcie_root}/" in real, real
        numa = int((device / "numa_node").read_text())
        assert gpu.numa_node == (numa if numa >= 0 else None), f"GPU {gpu.index}: sysfs says NUMA node {numa}"


def test_the_shipped_profile_of_this_model_is_what_nvml_reports(inventory: Inventory) -> None:
    for gpu in inventory.gpus:
        assert shipped_models(gpu.product_name) == [model_facts(gpu)], (
            f"GPU {gpu.index} ({gpu.product_name}): `nativedra inventory --backend nvml -o profile` gives the model "
            "this machine has; the shipped profile must hold exactly that"
        )


def test_the_real_gpus_publish_whole_and_mig_devices_within_the_api_limits(inventory: Inventory) -> None:
    slices = build_slices(inventory, PublishConfig(), "gpu-node")  # raises where a device breaks a limit
    names = [d["name"] for s in slices for d in s.get("devices", [])]
    assert len(names) == len(set(names))
    published, _ = devices_and_counters(inventory, PublishConfig())
    whole = [d for d in published if d.kind is DeviceKind.GPU]
    assert len(whole) == len(inventory.gpus)
    in_mig_mode = [g for g in inventory.gpus if g.mig_enabled]
    placements = sum(len(p.placements) for g in in_mig_mode for p in g.mig_profiles)
    assert len([d for d in published if d.kind is DeviceKind.MIG]) == placements
    if len(in_mig_mode) < len(inventory.gpus):
        assert DeviceKind.FRACTION in {d.kind for d in published}, "a GPU out of MIG mode offers fractions"
    assert all(len(s.get("devices", [])) <= MAX_DEVICES_PER_SLICE for s in slices)


def test_health_events_can_be_watched(nvml: Any, backend: NvmlBackend, caplog: pytest.LogCaptureFixture) -> None:
    for index in range(nvml.nvmlDeviceGetCount()):
        supported = nvml.nvmlDeviceGetSupportedEventTypes(nvml.nvmlDeviceGetHandleByIndex(index))
        assert supported & CRITICAL_XID_EVENTS, f"GPU {index}: critical XID events not supported ({supported:#x})"
        assert supported & DOUBLE_BIT_ECC_EVENT, f"GPU {index}: double-bit ECC events not supported ({supported:#x})"
    stop = threading.Event()
    changes: list[int] = []
    watcher = threading.Thread(target=backend.watch, args=(stop, lambda: changes.append(1)), daemon=True)
    with caplog.at_level(logging.WARNING, logger="dra_driver.discovery.nvml"):
        watcher.start()
        stop.wait(3)
        stop.set()
        watcher.join(timeout=5)
    assert not watcher.is_alive()
    assert not [r.getMessage() for r in caplog.records], "the health watch warned on a healthy GPU"
    assert changes == []
    assert all(g.health.value == "Healthy" for g in backend.discover().gpus)


def test_a_claim_s_cdi_edits_name_existing_device_nodes(inventory: Inventory) -> None:
    published, _ = devices_and_counters(inventory, PublishConfig())
    whole = [d for d in published if d.kind is DeviceKind.GPU]
    spec = claim_spec(
        "3f6f6a3e-0000-4000-8000-000000000001",
        [ClaimDevice(request="gpu", device=d, config=DEFAULT) for d in whole],
        HostDevices(Path("/dev")),
    )
    nodes = [n for d in spec.devices for n in d.container_edits.device_nodes] + list(spec.container_edits.device_nodes)
    assert {f"/dev/nvidia{g.minor}" for g in inventory.gpus} <= {n.path for n in nodes}
    for node in nodes:
        info = Path(node.path).stat()
        assert (os.major(info.st_rdev), os.minor(info.st_rdev)) == (node.major, node.minor), node.path
