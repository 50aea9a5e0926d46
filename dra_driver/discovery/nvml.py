"""The NVML backend: NVIDIA GPUs through nvidia-ml-py (module `pynvml`). Read-only: it never
changes a GPU setting (no MIG mode change, no reset)."""

from __future__ import annotations

import ctypes
import importlib
import logging
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from dra_driver.discovery import DiscoveryError, pci
from dra_driver.faults import DOUBLE_BIT_ECC, xid_fault
from dra_driver.inventory import Fault, Gpu, Inventory, MigPlacement, MigProfile, Vendor

log = logging.getLogger(__name__)

ARCHITECTURES = {
    2: "Kepler",
    3: "Maxwell",
    4: "Pascal",
    5: "Volta",
    6: "Turing",
    7: "Ampere",
    8: "Ada Lovelace",
    9: "Hopper",
    10: "Blackwell",
    13: "Rubin",
}
BRAND_NAMES = {
    "NVIDIA": "NVIDIA",
    "TESLA": "Tesla",
    "QUADRO": "Quadro",
    "QUADRO_RTX": "Quadro RTX",
    "GEFORCE": "GeForce",
    "GEFORCE_RTX": "GeForce RTX",
    "TITAN": "Titan",
    "TITAN_RTX": "Titan RTX",
    "NVIDIA_RTX": "NVIDIA RTX",
    "GRID": "GRID",
    "NVS": "NVS",
}
MIG_ENABLED = 1
# Event types registered for health (dra_driver.faults says what each fault means for the pods).
CRITICAL_XID_EVENTS = 0x0000000000000008  # nvmlEventTypeXidCriticalError
DOUBLE_BIT_ECC_EVENT = 0x0000000000000002
NON_FATAL_FOR_S = 300.0
NVML_LIBRARY = "libnvidia-ml.so.1"
# Library directories under the driver root, in the order distributions and the GPU operator use.
# "" first: the shipped DaemonSet mounts only the host's library directory as the driver root.
LIBRARY_DIRS = ("", "usr/lib64", "usr/lib/x86_64-linux-gnu", "usr/lib/aarch64-linux-gnu", "lib64", "usr/lib", "lib")


def brand_name(nvml: Any, value: int) -> str:
    for attribute in dir(nvml):
        is_brand = attribute.startswith("NVML_BRAND_") and attribute != "NVML_BRAND_COUNT"
        if is_brand and getattr(nvml, attribute) == value:
            suffix = attribute.removeprefix("NVML_BRAND_")
            return BRAND_NAMES.get(suffix, suffix.replace("_", " ").title())
    return "Unknown"


def cuda_version(encoded: int) -> str:
    """NVML's 12040 -> `12.4`."""
    return f"{encoded // 1000}.{(encoded % 1000) // 10}"


def nvml_library_candidates(driver_root: Path) -> list[Path]:
    """Where the driver's NVML may lie under the host driver root, in search order."""
    return [driver_root / directory / NVML_LIBRARY for directory in LIBRARY_DIRS]


def find_nvml_library(driver_root: Path) -> Path | None:
    """The first candidate that exists: the plugin image has no driver, the host root does."""
    return next((path for path in nvml_library_candidates(driver_root) if path.is_file()), None)


def _preload(nvml: Any, driver_root: Path) -> None:
    """Hand pynvml the driver root's library (it then skips its own dlopen by soname); loaded
    RTLD_GLOBAL so libraries that ask for the soname later get the same one."""
    library = find_nvml_library(driver_root)
    if library is None:
        return
    try:
        nvml.nvmlLib = ctypes.CDLL(str(library), mode=ctypes.RTLD_GLOBAL)
    except OSError as error:
        log.warning("cannot load %s (%s); falling back to the normal library search", library, error)
        return
    log.info("NVML loaded from %s", library)


def load_nvml(driver_root: Path = Path("/")) -> Any:
    """Import and initialise NVML, or say clearly why not and what to use instead."""
    try:
        nvml = importlib.import_module("pynvml")
    except ImportError as error:
        raise DiscoveryError(
            "the nvml backend needs the nvidia-ml-py package (module pynvml); "
            "install it or use --backend sysfs / --backend simulated --profile NAME"
        ) from error
    _preload(nvml, driver_root)
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as error:
        tried = ", ".join(str(path) for path in nvml_library_candidates(driver_root))
        raise DiscoveryError(
            f"NVML is not available on this node ({error}): no NVIDIA driver or {NVML_LIBRARY} is "
            f"not visible to the plugin (tried {tried}, then the system library search; set --driver-root "
            "to the host driver root). Use --backend sysfs for other vendors, or "
            "--backend simulated --profile NAME to try nativedra without GPUs."
        ) from error
    return nvml


def possible_placements(nvml: Any, handle: Any, profile_id: int) -> tuple[MigPlacement, ...]:
    count = ctypes.c_uint(0)
    nvml.nvmlDeviceGetGpuInstancePossiblePlacements(handle, profile_id, None, ctypes.byref(count))
    if count.value == 0:
        return ()
    array = (nvml.c_nvmlGpuInstancePlacement_t * count.value)()
    nvml.nvmlDeviceGetGpuInstancePossiblePlacements(handle, profile_id, array, ctypes.byref(count))
    return tuple(MigPlacement(start=int(p.start), size=int(p.size)) for p in array[: count.value])


def _mig_profiles(nvml: Any, handle: Any) -> tuple[MigProfile, ...]:
    profiles = []
    for profile in range(nvml.NVML_GPU_INSTANCE_PROFILE_COUNT):
        try:
            info = nvml.nvmlDeviceGetGpuInstanceProfileInfo(handle, profile)
            placements = possible_placements(nvml, handle, info.id)
        except nvml.NVMLError:
            continue  # profile not supported on this GPU
        if info.instanceCount == 0 or not placements:
            continue
        profiles.append(
            MigProfile(
                name=str(info.name).removeprefix("MIG "),
                id=int(info.id),
                slice_count=int(info.sliceCount),
                instance_count=int(info.instanceCount),
                multiprocessor_count=int(info.multiprocessorCount),
                memory_size_mb=int(info.memorySizeMB),
                copy_engine_count=int(info.copyEngineCount),
                decoder_count=int(info.decoderCount),
                encoder_count=int(info.encoderCount),
                jpeg_count=int(info.jpegCount),
                ofa_count=int(info.ofaCount),
                placements=placements,
            )
        )
    return tuple(profiles)


def _multiprocessors(nvml: Any, handle: Any) -> int | None:
    """NVML answers only for MIG device handles: a whole H200 (driver 580) says Not Supported, and a
    MIG profile's count is not the whole GPU's (A100: 98 in 7g.40gb of 108), so unknown is None."""
    try:
        return int(nvml.nvmlDeviceGetAttributes(handle).multiprocessorCount)
    except nvml.NVMLError:
        return None


def _gpu(nvml: Any, handle: Any, sys_root: Path, faults: Mapping[str, Fault]) -> Gpu:
    bus_id = pci.normalize_bus_id(str(nvml.nvmlDeviceGetPciInfo(handle).busId))
    numa: int | None
    try:
        reported = int(nvml.nvmlDeviceGetNumaNodeId(handle))
        numa = reported if reported >= 0 else None
    except nvml.NVMLError:
        numa = pci.numa_node(sys_root, bus_id)
    try:
        current_mig, _pending = nvml.nvmlDeviceGetMigMode(handle)
        profiles = _mig_profiles(nvml, handle)
    except nvml.NVMLError:
        current_mig, profiles = 0, ()
    major, minor = nvml.nvmlDeviceGetCudaComputeCapability(handle)
    uuid = str(nvml.nvmlDeviceGetUUID(handle))
    gpu = Gpu(
        vendor=Vendor.NVIDIA,
        index=int(nvml.nvmlDeviceGetIndex(handle)),
        minor=int(nvml.nvmlDeviceGetMinorNumber(handle)),
        uuid=uuid,
        product_name=str(nvml.nvmlDeviceGetName(handle)),
        brand=brand_name(nvml, int(nvml.nvmlDeviceGetBrand(handle))),
        architecture=ARCHITECTURES.get(int(nvml.nvmlDeviceGetArchitecture(handle)), "Unknown"),
        cuda_compute_capability=f"{major}.{minor}",
        memory_bytes=int(nvml.nvmlDeviceGetMemoryInfo(handle).total),
        multiprocessors=_multiprocessors(nvml, handle),
        pci_bus_id=bus_id,
        pcie_root=pci.pcie_root(sys_root, bus_id),
        numa_node=numa,
        mig_capable=bool(profiles),
        mig_enabled=bool(profiles) and current_mig == MIG_ENABLED,
        mig_memory_slices=max((p.start + p.size for pr in profiles for p in pr.placements), default=0),
        mig_profiles=profiles,
    )
    return gpu.with_fault(faults[uuid]) if uuid in faults else gpu


def event_fault(event_type: int, event_data: int) -> Fault | None:
    """The fault of one NVML event, None for a type not registered for health."""
    if event_type == CRITICAL_XID_EVENTS:
        return xid_fault(event_data)
    if event_type == DOUBLE_BIT_ECC_EVENT:
        return DOUBLE_BIT_ECC
    return None


def read_inventory(nvml: Any, sys_root: Path, faults: Mapping[str, Fault] | None = None) -> Inventory:
    """Everything NVML says about this node's GPUs, as an `Inventory` (NVML already initialised);
    `faults` by GPU UUID."""
    gpus = [
        _gpu(nvml, nvml.nvmlDeviceGetHandleByIndex(i), sys_root, faults or {}) for i in range(nvml.nvmlDeviceGetCount())
    ]
    return Inventory(
        driver_version=str(nvml.nvmlSystemGetDriverVersion()),
        cuda_driver_version=cuda_version(int(nvml.nvmlSystemGetCudaDriverVersion())),
        gpus=tuple(sorted(gpus, key=lambda g: g.index)),
    )


class NvmlBackend:
    """NVML discovery; critical XID and double-bit ECC events are the GPUs' faults."""

    name = "nvml"
    can_prepare_mig = False  # MIG instances are not created on demand on real GPUs yet

    def __init__(self, sys_root: Path = Path("/sys"), nvml: Any = None, driver_root: Path = Path("/")) -> None:
        self.nvml = nvml if nvml is not None else load_nvml(driver_root)
        self.sys_root = sys_root
        # By UUID, with when it was seen: a fatal fault lasts until the plugin restarts; a non-fatal
        # one (an application's own XID, which a killed CUDA process also raises) for
        # NON_FATAL_FOR_S after the last one, so GPUs do not drift out of use one XID at a time.
        self.faults: dict[str, tuple[Fault, float]] = {}

    def discover(self) -> Inventory:
        return read_inventory(self.nvml, self.sys_root, self.standing())

    def standing(self, now: float | None = None) -> dict[str, Fault]:
        """The faults that stand now."""
        now = time.monotonic() if now is None else now
        return {
            uuid: fault for uuid, (fault, seen) in self.faults.items() if fault.fatal or now - seen < NON_FATAL_FOR_S
        }

    def watch(self, stop: threading.Event, changed: Callable[[], None]) -> None:
        nvml = self.nvml
        try:
            events = nvml.nvmlEventSetCreate()
            for i in range(nvml.nvmlDeviceGetCount()):
                handle = nvml.nvmlDeviceGetHandleByIndex(i)
                try:
                    nvml.nvmlDeviceRegisterEvents(handle, CRITICAL_XID_EVENTS | DOUBLE_BIT_ECC_EVENT, events)
                except nvml.NVMLError as error:
                    log.warning("GPU %d: health events not supported (%s); it stays Healthy", i, error)
        except nvml.NVMLError as error:
            log.warning("NVML events unavailable (%s); health is not monitored", error)
            stop.wait()
            return
        while not stop.is_set():
            try:
                event = nvml.nvmlEventSetWait_v2(events, 1000)
            except nvml.NVMLError_Timeout:
                if len(self.standing()) < len(self.faults):  # a non-fatal fault has passed
                    self.faults = {uuid: self.faults[uuid] for uuid in self.standing()}
                    changed()
                continue
            except nvml.NVMLError as error:
                log.warning("NVML event wait failed: %s", error)
                stop.wait(5)
                continue
            try:
                fault = event_fault(int(event.eventType), int(event.eventData))
                if fault is None:
                    continue
                uuid = str(nvml.nvmlDeviceGetUUID(event.device))
            except (ValueError, nvml.NVMLError) as error:  # one bad event must not end health monitoring
                log.warning("NVML event %#x (%s) not understood: %s", event.eventType, event.eventData, error)
                continue
            log.error("GPU %s: NVML event %#x (%s): %s", uuid, event.eventType, event.eventData, fault.description)
            earlier = self.standing().get(uuid)
            self.faults[uuid] = (fault.over(earlier), time.monotonic())
            changed()
