"""A stand-in for the third-party `pynvml` module that answers from an Inventory the way NVML
does (raw NVML formats: 8-digit uppercase bus ids, enum integers, ctypes placement arrays).

Used to prove that the nvml backend turns NVML's answers into exactly the inventory a simulated
profile describes. On a machine with a GPU the real module is used instead.
"""

from __future__ import annotations

import ctypes
from types import SimpleNamespace
from typing import Any

import pynvml

from dra_driver.discovery.nvml import ARCHITECTURES
from dra_driver.inventory import Inventory

NOT_SUPPORTED = pynvml.NVML_ERROR_NOT_SUPPORTED


class FakeNvml:
    NVMLError = pynvml.NVMLError
    NVMLError_Timeout = pynvml.NVMLError_Timeout
    NVML_GPU_INSTANCE_PROFILE_COUNT = pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT
    c_nvmlGpuInstancePlacement_t = pynvml.c_nvmlGpuInstancePlacement_t  # noqa: N815 - NVML name

    def __init__(self, inventory: Inventory) -> None:
        self.inventory = inventory
        for name, value in vars(pynvml).items():
            if name.startswith("NVML_BRAND_"):
                setattr(self, name, value)
        self.calls: list[str] = []

    # -- system ----------------------------------------------------------------------------
    def nvmlSystemGetDriverVersion(self) -> str:  # noqa: N802 - NVML's names
        return str(self.inventory.driver_version)

    def nvmlSystemGetCudaDriverVersion(self) -> int:  # noqa: N802
        major, minor = str(self.inventory.cuda_driver_version).split(".")[:2]
        return int(major) * 1000 + int(minor) * 10

    def nvmlDeviceGetCount(self) -> int:  # noqa: N802
        return len(self.inventory.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:  # noqa: N802
        return index

    # -- per device --------------------------------------------------------------------------
    def _gpu(self, handle: int) -> Any:
        return self.inventory.gpus[handle]

    def nvmlDeviceGetIndex(self, handle: int) -> int:  # noqa: N802
        return int(self._gpu(handle).index)

    def nvmlDeviceGetMinorNumber(self, handle: int) -> int:  # noqa: N802
        return int(self._gpu(handle).minor)

    def nvmlDeviceGetUUID(self, handle: int) -> str:  # noqa: N802
        return str(self._gpu(handle).uuid)

    def nvmlDeviceGetName(self, handle: int) -> str:  # noqa: N802
        return str(self._gpu(handle).product_name)

    def nvmlDeviceGetBrand(self, handle: int) -> int:  # noqa: N802
        wanted = self._gpu(handle).brand.upper().replace(" ", "_")
        return int(getattr(pynvml, f"NVML_BRAND_{wanted}"))

    def nvmlDeviceGetArchitecture(self, handle: int) -> int:  # noqa: N802
        return next(code for code, name in ARCHITECTURES.items() if name == self._gpu(handle).architecture)

    def nvmlDeviceGetCudaComputeCapability(self, handle: int) -> tuple[int, int]:  # noqa: N802
        major, minor = self._gpu(handle).cuda_compute_capability.split(".")
        return int(major), int(minor)

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> SimpleNamespace:  # noqa: N802
        total = self._gpu(handle).memory_bytes
        return SimpleNamespace(total=total, free=total, used=0)

    def nvmlDeviceGetAttributes(self, handle: int) -> SimpleNamespace:  # noqa: N802
        """Only MIG device handles have attributes (a whole H200 says Not Supported)."""
        multiprocessors = self._gpu(handle).multiprocessors
        if multiprocessors is None:
            raise pynvml.NVMLError(NOT_SUPPORTED)
        return SimpleNamespace(multiprocessorCount=multiprocessors)

    def nvmlDeviceGetPciInfo(self, handle: int) -> SimpleNamespace:  # noqa: N802
        domain, rest = self._gpu(handle).pci_bus_id.split(":", 1)
        return SimpleNamespace(busId=f"{int(domain, 16):08X}:{rest.upper()}")

    def nvmlDeviceGetNumaNodeId(self, handle: int) -> int:  # noqa: N802
        numa = self._gpu(handle).numa_node
        return -1 if numa is None else int(numa)

    def nvmlDeviceGetSupportedEventTypes(self, handle: int) -> int:  # noqa: N802
        return int(pynvml.nvmlEventTypeXidCriticalError | pynvml.nvmlEventTypeDoubleBitEccError)

    def nvmlDeviceGetMigMode(self, handle: int) -> list[int]:  # noqa: N802
        gpu = self._gpu(handle)
        if not gpu.mig_capable:
            raise pynvml.NVMLError(NOT_SUPPORTED)
        mode = int(gpu.mig_enabled)
        return [mode, mode]

    def nvmlDeviceGetGpuInstanceProfileInfo(self, handle: int, profile: int) -> SimpleNamespace:  # noqa: N802
        profiles = self._gpu(handle).mig_profiles
        if profile >= len(profiles):
            raise pynvml.NVMLError(NOT_SUPPORTED)
        p = profiles[profile]
        return SimpleNamespace(
            id=p.id,
            name=f"MIG {p.name}",
            sliceCount=p.slice_count,
            instanceCount=p.instance_count,
            multiprocessorCount=p.multiprocessor_count,
            memorySizeMB=p.memory_size_mb,
            copyEngineCount=p.copy_engine_count,
            decoderCount=p.decoder_count,
            encoderCount=p.encoder_count,
            jpegCount=p.jpeg_count,
            ofaCount=p.ofa_count,
        )

    def nvmlDeviceGetGpuInstancePossiblePlacements(  # noqa: N802
        self, handle: int, profile_id: int, placements: Any, count: Any
    ) -> int:
        profile = next(p for p in self._gpu(handle).mig_profiles if p.id == profile_id)
        counter = ctypes.cast(count, ctypes.POINTER(ctypes.c_uint)).contents
        if placements is None:
            counter.value = len(profile.placements)
            return 0
        for slot, placement in enumerate(profile.placements[: counter.value]):
            placements[slot].start = placement.start
            placements[slot].size = placement.size
        return 0
