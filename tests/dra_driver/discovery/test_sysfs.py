"""The sysfs backend finds NVIDIA/AMD/Intel accelerators in a sysfs tree, and nothing else."""

from __future__ import annotations

from pathlib import Path

from dra_driver.discovery.sysfs import read_inventory
from dra_driver.inventory import Vendor
from tests.dra_driver.discovery.fakesys import FakePciDevice, build_sysfs

BAR_LINES = (
    "0x00000000fb000000 0x00000000fbffffff 0x0000000000040200\n"  # 16 MiB, not prefetchable
    "0x0000380000000000 0x00003807ffffffff 0x000000000014220c\n"  # 32 GiB prefetchable aperture
)


def test_finds_accelerators_of_three_vendors(tmp_path: Path) -> None:
    root = build_sysfs(
        tmp_path,
        [
            FakePciDevice(
                "0000:0c:00.0",
                "pci0000:00",
                vendor="0x1002",
                pci_class="0x120000",
                numa_node=0,
                files={
                    "mem_info_vram_total": "206141652992\n",
                    "product_name": "AMD Instinct MI300X\n",
                    "unique_id": "5a8c1e2f00000000\n",
                },
                render_minor=128,
            ),
            FakePciDevice("0000:3b:00.0", "pci0000:3a", vendor="0x10de", numa_node=1, files={"resource": BAR_LINES}),
            FakePciDevice(
                "0000:4d:00.0",
                "pci0000:4c",
                vendor="0x8086",
                pci_class="0x038000",
                files={"lmem_total_bytes": "17179869184"},
            ),
            FakePciDevice("0000:00:1f.3", "pci0000:00", vendor="0x8086", pci_class="0x040300"),  # audio: ignored
            FakePciDevice("0000:5e:00.0", "pci0000:5d", vendor="0x15b3", pci_class="0x020000"),  # NIC: ignored
        ],
    )
    gpus = read_inventory(root).gpus
    assert [(g.index, g.vendor, g.pci_bus_id) for g in gpus] == [
        (0, Vendor.AMD, "0000:0c:00.0"),
        (1, Vendor.NVIDIA, "0000:3b:00.0"),
        (2, Vendor.INTEL, "0000:4d:00.0"),
    ]
    amd, nvidia, intel = gpus
    assert amd.product_name == "AMD Instinct MI300X" and amd.uuid == "5a8c1e2f00000000"
    assert amd.minor == 128 and amd.memory_bytes == 206141652992 and amd.numa_node == 0
    assert amd.pcie_root == "pci0000:00"
    assert nvidia.memory_bytes == 32 * 1024**3, "largest prefetchable BAR when the driver says nothing"
    assert nvidia.numa_node == 1 and nvidia.pcie_root == "pci0000:3a" and nvidia.uuid == "PCI-0000:3b:00.0"
    assert intel.memory_bytes == 16 * 1024**3 and intel.numa_node is None


def test_empty_or_missing_tree_gives_no_gpus(tmp_path: Path) -> None:
    assert read_inventory(tmp_path / "nothing").gpus == ()
