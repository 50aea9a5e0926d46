"""The inventory model every backend produces refuses what downstream code could not use: a
malformed PCI address, MIG facts that contradict each other, two GPUs with one index."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError

from dra_driver.inventory import Gpu, Health, Inventory, Vendor


def _gpu(index: int = 0, **changes: Any) -> dict[str, Any]:
    """A GPU as a profile or a recording spells it (camelCase)."""
    facts: dict[str, Any] = {
        "vendor": "nvidia",
        "index": index,
        "minor": index,
        "uuid": f"GPU-{index}",
        "productName": "NVIDIA H100 80GB HBM3",
        "brand": "NVIDIA",
        "architecture": "Hopper",
        "memoryBytes": 80 * 2**30,
        "pciBusID": f"0000:{index + 1:02x}:00.0",
    }
    facts.update(changes)
    return facts


def _mig(slices: int = 8, start: int = 0, size: int = 1) -> dict[str, Any]:
    profile = {
        "name": "1g.10gb",
        "id": 19,
        "sliceCount": 1,
        "instanceCount": 7,
        "multiprocessorCount": 16,
        "memorySizeMB": 9856,
        "placements": [{"start": start, "size": size}],
    }
    return {"migCapable": True, "migMemorySlices": slices, "migProfiles": [profile]}


def _load(*gpus: dict[str, Any]) -> Inventory:
    return Inventory.model_validate_json(json.dumps({"gpus": list(gpus)}))


def test_a_gpu_reads_from_camel_case_with_its_defaults() -> None:
    (gpu,) = _load(_gpu(pcieRoot="pci0000:3a", numaNode=1)).gpus
    facts = (gpu.vendor, gpu.pci_bus_id, gpu.pcie_root, gpu.numa_node)
    assert facts == (Vendor.NVIDIA, "0000:01:00.0", "pci0000:3a", 1)
    assert gpu.health is Health.HEALTHY and not gpu.mig_capable and gpu.multiprocessors is None


@pytest.mark.parametrize("bus_id", ["0000:3B:00.0", "3b:00.0", "0000:3b:00", "0000:3b:00.0 "])
def test_a_malformed_pci_address_is_refused(bus_id: str) -> None:
    with pytest.raises(ValidationError, match=r"must look like 0000:3b:00\.0"):
        _load(_gpu(pciBusID=bus_id))


def test_a_malformed_pcie_root_is_refused() -> None:
    with pytest.raises(ValidationError, match="must look like pci0000:3a"):
        _load(_gpu(pcieRoot="0000:3a"))


def test_mig_enabled_needs_mig_capable() -> None:
    with pytest.raises(ValidationError, match="migEnabled is true but migCapable is false"):
        _load(_gpu(migEnabled=True))


def test_a_mig_capable_gpu_needs_its_slices_and_profiles() -> None:
    with pytest.raises(ValidationError, match="needs migMemorySlices and migProfiles"):
        _load(_gpu(migCapable=True))
    with pytest.raises(ValidationError, match="needs migMemorySlices and migProfiles"):
        _load(_gpu(**{**_mig(), "migMemorySlices": 0}))


def test_a_placement_must_fit_the_memory_slices() -> None:
    assert _load(_gpu(**_mig(slices=8, start=7, size=1))).gpus[0].mig_memory_slices == 8
    with pytest.raises(ValidationError, match=r"1g\.10gb: placement 7\+2 exceeds migMemorySlices=8"):
        _load(_gpu(**_mig(slices=8, start=7, size=2)))


def test_two_gpus_with_one_index_are_refused_and_distinct_ones_are_found_by_index() -> None:
    with pytest.raises(ValidationError, match="duplicate GPU index 1"):
        _load(_gpu(1), _gpu(1, uuid="GPU-other"))
    inventory = _load(_gpu(0), _gpu(3))
    assert {index: gpu.uuid for index, gpu in inventory.by_index().items()} == {0: "GPU-0", 3: "GPU-3"}


@pytest.mark.parametrize(("field", "value"), [("colour", "green"), ("memoryBytes", 0), ("index", 1024), ("uuid", "")])
def test_unknown_fields_and_out_of_range_facts_are_refused(field: str, value: object) -> None:
    with pytest.raises(ValidationError, match=field):
        _load({**_gpu(), field: value})


def test_the_model_is_immutable() -> None:
    """Snapshots are compared and shared between threads; nobody may change one in place."""
    (gpu,) = _load(_gpu()).gpus
    with pytest.raises(ValidationError):
        gpu.health = Health.UNHEALTHY  # type: ignore[misc]
    assert gpu == Gpu.model_validate_json(json.dumps(_gpu()))
