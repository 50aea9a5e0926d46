"""The nvml backend reads NVML into the same inventory the simulated profile of the GPU gives."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from dra_driver.discovery import DiscoveryError
from dra_driver.discovery.nvml import (
    CRITICAL_XID_EVENTS,
    DOUBLE_BIT_ECC_EVENT,
    NON_FATAL_FOR_S,
    NvmlBackend,
    cuda_version,
    event_fault,
    find_nvml_library,
    load_nvml,
    nvml_library_candidates,
    read_inventory,
)
from dra_driver.discovery.simulated import load_profile, resolve_profile
from dra_driver.faults import DOUBLE_BIT_ECC, xid_fault
from tests.dra_driver.discovery.fake_nvml import FakeNvml
from tests.dra_driver.discovery.fakesys import FakePciDevice, build_sysfs


@pytest.mark.parametrize("profile", ["h100-8x", "a100-8x", "l4-4x"])
def test_nvml_inventory_equals_simulated_profile(profile: str, tmp_path: Path) -> None:
    expected = load_profile(resolve_profile(profile))
    sys_root = build_sysfs(
        tmp_path, [FakePciDevice(bus_id=g.pci_bus_id, pcie_root=str(g.pcie_root)) for g in expected.gpus]
    )
    actual = read_inventory(FakeNvml(expected), sys_root)
    assert actual == expected


def test_numa_falls_back_to_sysfs_when_nvml_has_none(tmp_path: Path) -> None:
    expected = load_profile(resolve_profile("l4-4x"))
    nvml = FakeNvml(
        expected.model_copy(update={"gpus": tuple(g.model_copy(update={"numa_node": None}) for g in expected.gpus)})
    )

    def no_numa(_handle: int) -> int:
        raise nvml.NVMLError(3)

    nvml.nvmlDeviceGetNumaNodeId = no_numa  # type: ignore[method-assign,assignment]
    sys_root = build_sysfs(
        tmp_path, [FakePciDevice(bus_id=g.pci_bus_id, pcie_root=str(g.pcie_root), numa_node=1) for g in expected.gpus]
    )
    assert {g.numa_node for g in read_inventory(nvml, sys_root).gpus} == {1}


def test_backend_gives_gpus_their_faults_by_uuid(tmp_path: Path) -> None:
    expected = load_profile(resolve_profile("l4-4x"))
    backend = NvmlBackend(sys_root=tmp_path, nvml=FakeNvml(expected))
    seen = time.monotonic()
    backend.faults[expected.gpus[2].uuid] = (xid_fault(79), seen)
    backend.faults[expected.gpus[3].uuid] = (xid_fault(13), seen)
    gpus = backend.discover().gpus
    assert [g.health.value for g in gpus] == ["Healthy", "Healthy", "Unhealthy", "Healthy"]
    assert [g.fault.reason if g.fault else None for g in gpus] == [None, None, "xid-79", "xid-13"]
    # an application's XID passes; a fatal fault stays
    assert set(backend.standing(seen + NON_FATAL_FOR_S + 1)) == {expected.gpus[2].uuid}


def test_events_become_faults_fatal_or_not() -> None:
    assert event_fault(CRITICAL_XID_EVENTS, 79) == xid_fault(79)
    assert xid_fault(79).fatal and "fallen off the bus" in xid_fault(79).description
    assert not xid_fault(13).fatal  # the application's own error: the GPU is fit for other work
    assert event_fault(DOUBLE_BIT_ECC_EVENT, 0) == DOUBLE_BIT_ECC
    assert event_fault(0x1, 0) is None  # a type not registered for health


def test_missing_nvml_says_so_and_suggests_another_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    import pynvml  # noqa: PLC0415

    def library_not_found() -> None:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)

    monkeypatch.setattr(pynvml, "nvmlInit", library_not_found)  # as on a node without the NVIDIA driver
    with pytest.raises(DiscoveryError) as error:
        load_nvml()
    assert "NVML is not available" in str(error.value)
    assert "--backend sysfs" in str(error.value) and "--backend simulated" in str(error.value)


def test_cuda_version_format() -> None:
    assert cuda_version(12040) == "12.4"


def test_nvml_is_found_under_the_driver_root_in_search_order(tmp_path: Path) -> None:
    assert find_nvml_library(tmp_path) is None
    for directory in ("lib", "usr/lib/x86_64-linux-gnu"):
        (tmp_path / directory).mkdir(parents=True)
        (tmp_path / directory / "libnvidia-ml.so.1").write_bytes(b"not a library")
    (tmp_path / "usr/lib64").mkdir()
    (tmp_path / "usr/lib64/libnvidia-ml.so.1").mkdir()  # a directory of that name is not the library
    assert find_nvml_library(tmp_path) == tmp_path / "usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"


def test_a_driver_root_that_is_the_library_directory_itself_is_searched_first(tmp_path: Path) -> None:
    """The shipped DaemonSet mounts only the host's library directory (never its /)."""
    (tmp_path / "usr/lib64").mkdir(parents=True)
    (tmp_path / "usr/lib64/libnvidia-ml.so.1").write_bytes(b"not a library")
    (tmp_path / "libnvidia-ml.so.1").write_bytes(b"not a library")
    assert find_nvml_library(tmp_path) == tmp_path / "libnvidia-ml.so.1"


def test_an_unloadable_library_falls_back_and_the_error_names_the_paths_tried(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import pynvml  # noqa: PLC0415

    (tmp_path / "lib").mkdir()
    (tmp_path / "lib/libnvidia-ml.so.1").write_bytes(b"not a library")

    def library_not_found() -> None:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)

    monkeypatch.setattr(pynvml, "nvmlInit", library_not_found)
    with pytest.raises(DiscoveryError) as error:
        load_nvml(tmp_path)
    assert pynvml.nvmlLib is None, "a library that does not load is not handed to pynvml"
    for path in nvml_library_candidates(tmp_path):
        assert str(path) in str(error.value)
    assert str(tmp_path / "usr/lib/aarch64-linux-gnu/libnvidia-ml.so.1") in str(error.value)
