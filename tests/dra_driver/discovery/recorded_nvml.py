"""Record what a GPU machine's NVML answers to every call the nvml backend makes, and replay it.

A recording made on real hardware (`make test-gpu` writes one) is committed under `data/`, so CI
proves, without a GPU, that the backend turns a real driver's answers into exactly the inventory
of the shipped simulated profile for that GPU. Every answer is recorded under the NVML function's
name; an error is recorded as its NVML return code and replayed as the same `NVMLError`, because
what a GPU refuses (MIG queries in a VM, NUMA on one socket) decides the inventory as much as what
it answers.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from functools import partial
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pynvml

from dra_driver.discovery import pci
from dra_driver.discovery.nvml import possible_placements

SYSTEM_CALLS = ("nvmlSystemGetDriverVersion", "nvmlSystemGetCudaDriverVersion")
DEVICE_CALLS = (
    "nvmlDeviceGetIndex",
    "nvmlDeviceGetMinorNumber",
    "nvmlDeviceGetUUID",
    "nvmlDeviceGetName",
    "nvmlDeviceGetBrand",
    "nvmlDeviceGetArchitecture",
    "nvmlDeviceGetCudaComputeCapability",
    "nvmlDeviceGetMemoryInfo",
    "nvmlDeviceGetAttributes",
    "nvmlDeviceGetPciInfo",
    "nvmlDeviceGetNumaNodeId",
    "nvmlDeviceGetMigMode",
    "nvmlDeviceGetSupportedEventTypes",
)


def _json(value: Any) -> Any:
    """An NVML answer as JSON: structures (ctypes or not) as their fields, bytes as text."""
    if isinstance(value, bool | int | float | str) or value is None:
        return value
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    if isinstance(value, list | tuple):
        return [_json(item) for item in value]
    names = [name for name, *_ in getattr(type(value), "_fields_", ())] or list(vars(value))
    return {name: _json(getattr(value, name)) for name in names}


def _answer(nvml: Any, call: Callable[[], Any]) -> Any:
    try:
        return _json(call())
    except nvml.NVMLError as error:
        return {"nvmlError": int(error.value)}


def _placements(nvml: Any, handle: Any, profile_id: int) -> list[list[int]]:
    return [[p.start, p.size] for p in possible_placements(nvml, handle, profile_id)]


def _device(nvml: Any, handle: Any, sys_root: Path) -> dict[str, Any]:
    answers = {name: _answer(nvml, partial(getattr(nvml, name), handle)) for name in DEVICE_CALLS}
    profiles: dict[str, Any] = {}
    placements: dict[str, Any] = {}
    for profile in range(nvml.NVML_GPU_INSTANCE_PROFILE_COUNT):
        info = _answer(nvml, partial(nvml.nvmlDeviceGetGpuInstanceProfileInfo, handle, profile))
        profiles[str(profile)] = info
        if "nvmlError" not in info:
            placements[str(info["id"])] = _answer(nvml, partial(_placements, nvml, handle, info["id"]))
    bus_id = pci.normalize_bus_id(str(answers["nvmlDeviceGetPciInfo"]["busId"]))  # as recorded, asked once
    return {
        **answers,
        "nvmlDeviceGetGpuInstanceProfileInfo": profiles,
        "nvmlDeviceGetGpuInstancePossiblePlacements": placements,
        "sysfs": {"pcieRoot": pci.pcie_root(sys_root, bus_id), "numaNode": pci.numa_node(sys_root, bus_id)},
    }


def record(nvml: Any, sys_root: Path) -> dict[str, Any]:
    """Every answer the nvml backend's discovery reads, for each GPU (NVML already initialised),
    with what sysfs says of its PCIe root and NUMA node."""
    return {
        **{name: _answer(nvml, getattr(nvml, name)) for name in SYSTEM_CALLS},
        "NVML_GPU_INSTANCE_PROFILE_COUNT": int(nvml.NVML_GPU_INSTANCE_PROFILE_COUNT),
        "devices": [
            _device(nvml, nvml.nvmlDeviceGetHandleByIndex(index), sys_root)
            for index in range(nvml.nvmlDeviceGetCount())
        ],
    }


def _replay(answer: Any) -> Any:
    if isinstance(answer, dict):
        if "nvmlError" in answer:
            raise pynvml.NVMLError(answer["nvmlError"])
        return SimpleNamespace(**answer)
    return answer


class RecordedNvml:
    """Answers as the recorded machine's NVML did, errors included; a handle is a GPU's position."""

    NVMLError = pynvml.NVMLError
    NVMLError_Timeout = pynvml.NVMLError_Timeout
    c_nvmlGpuInstancePlacement_t = pynvml.c_nvmlGpuInstancePlacement_t  # noqa: N815 - NVML name

    def __init__(self, recording: dict[str, Any]) -> None:
        self.recording = recording
        self.devices: list[dict[str, Any]] = recording["devices"]
        self.NVML_GPU_INSTANCE_PROFILE_COUNT = int(recording["NVML_GPU_INSTANCE_PROFILE_COUNT"])
        for name, value in vars(pynvml).items():
            if name.startswith("NVML_BRAND_"):
                setattr(self, name, value)

    def __getattr__(self, name: str) -> Callable[..., Any]:
        if name in SYSTEM_CALLS:
            return lambda: _replay(self.recording[name])
        if name in DEVICE_CALLS:
            return lambda handle: _replay(self.devices[handle][name])
        raise AttributeError(name)

    def nvmlDeviceGetCount(self) -> int:  # noqa: N802 - NVML's names
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:  # noqa: N802
        return index

    def nvmlDeviceGetGpuInstanceProfileInfo(self, handle: int, profile: int) -> Any:  # noqa: N802
        return _replay(self.devices[handle]["nvmlDeviceGetGpuInstanceProfileInfo"][str(profile)])

    def nvmlDeviceGetGpuInstancePossiblePlacements(  # noqa: N802
        self, handle: int, profile_id: int, placements: Any, count: Any
    ) -> int:
        recorded = _replay(self.devices[handle]["nvmlDeviceGetGpuInstancePossiblePlacements"][str(profile_id)])
        counter = ctypes.cast(count, ctypes.POINTER(ctypes.c_uint)).contents
        if placements is None:
            counter.value = len(recorded)
            return 0
        for slot, (start, size) in enumerate(recorded[: counter.value]):
            placements[slot].start = start
            placements[slot].size = size
        return 0
