"""Recorded NVML answers replay into the inventory of the shipped simulated profile for the same
GPU: the round trip through the fake proves the recording loses nothing, and every recording made
on real hardware (`make test-gpu`, committed under data/) proves the profile is what NVML says."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dra_driver.discovery import pci
from dra_driver.discovery.nvml import read_inventory
from dra_driver.discovery.simulated import load_profile, model_facts, resolve_profile, shipped_models
from dra_driver.inventory import Inventory, Vendor
from tests.dra_driver.discovery.fake_nvml import FakeNvml
from tests.dra_driver.discovery.fakesys import FakePciDevice, build_sysfs
from tests.dra_driver.discovery.recorded_nvml import RecordedNvml, record

RECORDINGS = sorted((Path(__file__).parent / "data").glob("nvml-*.json"))


def _sysfs_of(recording: dict[str, Any], root: Path) -> Path:
    """The sysfs the recorded machine showed: the PCIe root and NUMA node of each GPU."""
    devices = []
    for device in recording["devices"]:
        seen = device["sysfs"]
        if seen["pcieRoot"] is None:
            continue
        bus_id = pci.normalize_bus_id(device["nvmlDeviceGetPciInfo"]["busId"])
        numa = -1 if seen["numaNode"] is None else seen["numaNode"]
        devices.append(FakePciDevice(bus_id=bus_id, pcie_root=seen["pcieRoot"], numa_node=numa))
    return build_sysfs(root, devices)


def _replayed(recording: dict[str, Any], root: Path) -> Inventory:
    return read_inventory(RecordedNvml(json.loads(json.dumps(recording))), _sysfs_of(recording, root))


@pytest.mark.parametrize("profile", ["h100-8x", "a100-8x", "l4-4x"])
def test_a_recording_replays_into_the_same_inventory(profile: str, tmp_path: Path) -> None:
    expected = load_profile(resolve_profile(profile))
    sys_root = build_sysfs(
        tmp_path / "recorded",
        [
            FakePciDevice(bus_id=g.pci_bus_id, pcie_root=str(g.pcie_root), numa_node=g.numa_node or 0)
            for g in expected.gpus
        ],
    )
    recording = record(FakeNvml(expected), sys_root)
    assert _replayed(recording, tmp_path / "replayed") == expected


def test_a_recorded_error_is_replayed_as_the_same_nvml_error(tmp_path: Path) -> None:
    expected = load_profile(resolve_profile("l4-4x"))
    recording = record(FakeNvml(expected), tmp_path)
    recording["devices"][0]["nvmlDeviceGetMigMode"] = {"nvmlError": 3}
    nvml = RecordedNvml(recording)
    with pytest.raises(nvml.NVMLError) as raised:
        nvml.nvmlDeviceGetMigMode(0)
    assert raised.value.value == 3


@pytest.mark.parametrize("path", RECORDINGS, ids=[p.stem for p in RECORDINGS])
def test_the_shipped_profile_of_a_recorded_gpu_is_what_its_nvml_said(path: Path, tmp_path: Path) -> None:
    recording = json.loads(path.read_text())
    inventory = _replayed(recording, tmp_path)
    assert inventory.gpus, f"{path.name} recorded no GPU"
    for gpu in inventory.gpus:
        assert gpu.vendor is Vendor.NVIDIA
        assert shipped_models(gpu.product_name) == [model_facts(gpu)], (
            f"{path.name}: GPU {gpu.index} ({gpu.product_name}): no shipped profile model, or one that differs "
            "from what NVML reported"
        )


def test_recordings_from_real_hardware_are_committed() -> None:
    """The replay test above must have something to replay: at least the H200 recorded here."""
    assert any("h200" in path.stem for path in RECORDINGS), RECORDINGS
