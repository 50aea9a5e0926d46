"""The sysfs backend: PCI display/accelerator devices of NVIDIA, AMD and Intel from sysfs.

Works for any vendor without its management library. The sysfs root is a parameter so tests
build a fake tree; hot-plug comes from udev (pyudev) on a real system.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable
from pathlib import Path

from dra_driver.discovery import pci
from dra_driver.inventory import PCI_BUS_ID_RE, Gpu, Inventory, Vendor

log = logging.getLogger(__name__)

VENDORS = {"0x10de": Vendor.NVIDIA, "0x1002": Vendor.AMD, "0x8086": Vendor.INTEL}
BRANDS = {Vendor.NVIDIA: "NVIDIA", Vendor.AMD: "AMD", Vendor.INTEL: "Intel"}
DISPLAY_CLASS = 0x03
ACCELERATOR_CLASS = 0x12
_RENDER_NODE = re.compile(r"renderD(\d+)")
_PREFETCHABLE = 0x2000  # IORESOURCE_PREFETCH in a sysfs `resource` line's flags


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _is_accelerator(device: Path) -> bool:
    pci_class = _read(device / "class")
    if pci_class is None:
        return False
    base_class = int(pci_class, 16) >> 16
    return base_class in (DISPLAY_CLASS, ACCELERATOR_CLASS)


def render_minor(device: Path) -> int | None:
    """The DRM render node minor (`renderD128` -> 128), if the driver created one."""
    drm = device / "drm"
    if not drm.is_dir():
        return None
    for entry in sorted(drm.iterdir()):
        match = _RENDER_NODE.fullmatch(entry.name)
        if match:
            return int(match.group(1))
    return None


def _largest_prefetchable_bar(device: Path) -> int | None:
    """Size of the VRAM aperture, the best memory figure sysfs has when the driver says nothing."""
    text = _read(device / "resource")
    if not text:
        return None
    sizes = []
    for line in text.splitlines():
        start, end, flags = (int(field, 16) for field in line.split()[:3])
        if flags & _PREFETCHABLE and end > start:
            sizes.append(end - start + 1)
    return max(sizes, default=None)


def _memory_bytes(device: Path) -> int | None:
    for name in ("mem_info_vram_total", "lmem_total_bytes"):  # amdgpu, Intel xe/i915
        value = _read(device / name)
        if value and value.isdigit() and int(value) > 0:
            return int(value)
    return _largest_prefetchable_bar(device)


def _product_name(device: Path, vendor: Vendor, device_id: str) -> str:
    name = _read(device / "product_name")  # amdgpu exposes the marketing name
    return name[:64] if name else f"{BRANDS[vendor]} PCI device {device_id}"


def read_inventory(sys_root: Path) -> Inventory:
    """All NVIDIA/AMD/Intel display or accelerator functions under `sys_root`/bus/pci/devices."""
    devices_dir = sys_root / "bus" / "pci" / "devices"
    found: list[tuple[str, Path, Vendor]] = []
    for entry in sorted(devices_dir.iterdir()) if devices_dir.is_dir() else []:
        if not PCI_BUS_ID_RE.fullmatch(entry.name):
            continue
        vendor = VENDORS.get(_read(entry / "vendor") or "")
        if vendor is None or not _is_accelerator(entry):
            continue
        found.append((entry.name, entry, vendor))
    gpus = []
    for index, (bus_id, device, vendor) in enumerate(found):
        memory = _memory_bytes(device)
        if memory is None:
            log.warning("%s: no memory size in sysfs; skipped", bus_id)
            continue
        device_id = _read(device / "device") or "unknown"
        minor = render_minor(device)
        gpus.append(
            Gpu(
                vendor=vendor,
                index=index,
                minor=minor if minor is not None else index,
                uuid=_read(device / "unique_id") or f"PCI-{bus_id}",
                product_name=_product_name(device, vendor, device_id),
                brand=BRANDS[vendor],
                architecture="Unknown",
                memory_bytes=memory,
                pci_bus_id=bus_id,
                pcie_root=pci.pcie_root(sys_root, bus_id),
                numa_node=pci.numa_node(sys_root, bus_id),
            )
        )
    return Inventory(gpus=tuple(gpus))


class SysfsBackend:
    name = "sysfs"
    can_prepare_mig = False  # sysfs knows no MIG

    def __init__(self, sys_root: Path = Path("/sys")) -> None:
        self.sys_root = sys_root

    def discover(self) -> Inventory:
        return read_inventory(self.sys_root)

    def watch(self, stop: threading.Event, changed: Callable[[], None]) -> None:
        """PCI and DRM add/remove events from udev re-trigger discovery."""
        try:
            import pyudev  # noqa: PLC0415 - libudev is only needed on a real node

            monitor = pyudev.Monitor.from_netlink(pyudev.Context())
            monitor.filter_by("pci")
            monitor.filter_by("drm")
            monitor.start()
        except Exception as error:  # noqa: BLE001 - no udev (e.g. no netlink in the container): poll instead
            log.warning("udev monitoring unavailable (%s); polling sysfs every 30s", error)
            while not stop.wait(30):
                changed()
            return
        while not stop.is_set():
            device = monitor.poll(timeout=1)
            if device is not None and device.action in ("add", "remove", "change"):
                changed()
