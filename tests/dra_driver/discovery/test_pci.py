"""PCI bus IDs as NVML spells them become the sysfs form."""

from __future__ import annotations

from dra_driver.discovery.pci import normalize_bus_id


def test_bus_id_format() -> None:
    assert normalize_bus_id("00000000:3B:00.0") == "0000:3b:00.0"
