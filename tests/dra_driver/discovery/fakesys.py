"""Build a fake sysfs tree (PCI devices with NUMA node, class, vendor, links to their root)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class FakePciDevice:
    bus_id: str
    pcie_root: str
    vendor: str = "0x10de"
    pci_class: str = "0x030200"
    device: str = "0x2330"
    numa_node: int = -1
    files: dict[str, str] = field(default_factory=dict)
    render_minor: int | None = None


def build_sysfs(root: Path, devices: list[FakePciDevice]) -> Path:
    links = root / "bus" / "pci" / "devices"
    links.mkdir(parents=True, exist_ok=True)
    for dev in devices:
        real = root / "devices" / dev.pcie_root / dev.bus_id
        real.mkdir(parents=True, exist_ok=True)
        (real / "vendor").write_text(dev.vendor + "\n")
        (real / "class").write_text(dev.pci_class + "\n")
        (real / "device").write_text(dev.device + "\n")
        (real / "numa_node").write_text(f"{dev.numa_node}\n")
        for name, content in dev.files.items():
            (real / name).write_text(content)
        if dev.render_minor is not None:
            (real / "drm" / f"renderD{dev.render_minor}").mkdir(parents=True)
            (real / "drm" / "card0").mkdir()
        (links / dev.bus_id).symlink_to(Path("..") / ".." / ".." / "devices" / dev.pcie_root / dev.bus_id)
    return root
