"""Pick a discovery backend by name."""

from __future__ import annotations

from pathlib import Path

from dra_driver.discovery import Backend, DiscoveryError
from dra_driver.discovery.nvml import NvmlBackend
from dra_driver.discovery.simulated import SimulatedBackend
from dra_driver.discovery.sysfs import SysfsBackend

BACKENDS = ("nvml", "sysfs", "simulated")


def make_backend(
    name: str,
    profile: str | None = None,
    sys_root: Path = Path("/sys"),
    fault_file: Path | None = None,
    driver_root: Path = Path("/"),
) -> Backend:
    if name == "simulated":
        if not profile:
            raise DiscoveryError("--backend simulated needs --profile (a file or a shipped profile name)")
        return SimulatedBackend(profile, fault_file)
    if name == "nvml":
        return NvmlBackend(sys_root=sys_root, driver_root=driver_root)
    if name == "sysfs":
        return SysfsBackend(sys_root=sys_root)
    raise DiscoveryError(f"--backend {name!r}: choose one of {', '.join(BACKENDS)}")
