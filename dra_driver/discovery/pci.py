"""PCI facts from sysfs shared by the NVML and sysfs backends."""

from __future__ import annotations

from pathlib import Path

from dra_driver.inventory import PCI_BUS_ID_RE, PCIE_ROOT_RE


def normalize_bus_id(bus_id: str) -> str:
    """NVML's `00000000:3B:00.0` -> `0000:3b:00.0` (the form sysfs and pciBusID use)."""
    domain, rest = bus_id.strip().lower().split(":", 1)
    normalized = f"{int(domain, 16):04x}:{rest}"
    if not PCI_BUS_ID_RE.fullmatch(normalized):
        raise ValueError(f"unexpected PCI bus id {bus_id!r}")
    return normalized


def device_dir(sys_root: Path, bus_id: str) -> Path:
    if not PCI_BUS_ID_RE.fullmatch(bus_id):  # never build a path from an unvalidated name
        raise ValueError(f"invalid PCI bus id {bus_id!r}")
    return sys_root / "bus" / "pci" / "devices" / bus_id


def numa_node(sys_root: Path, bus_id: str) -> int | None:
    """The device's NUMA node, or None where the platform has none (sysfs says -1)."""
    try:
        value = int((device_dir(sys_root, bus_id) / "numa_node").read_text().strip())
    except (OSError, ValueError):
        return None
    return value if value >= 0 else None


def pcie_root(sys_root: Path, bus_id: str) -> str | None:
    """`pci0000:3a` from the device link `../../../devices/pci0000:3a/0000:3a:01.0/0000:3b:00.0`."""
    try:
        target = device_dir(sys_root, bus_id).readlink()
    except OSError:
        return None
    for part in target.parts:
        if PCIE_ROOT_RE.fullmatch(part):
            return part
    return None
