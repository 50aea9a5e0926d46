"""Fixtures for the real-GPU checks: NVML of this machine, what the plugin discovers through it,
and what `nvidia-smi` (the driver's own tool, not our code) says of the same GPUs."""

from __future__ import annotations

import csv
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from dra_driver.discovery.nvml import NvmlBackend, load_nvml
from dra_driver.inventory import Inventory

SMI_FIELDS = (
    "index",
    "uuid",
    "name",
    "pci.bus_id",
    "memory.total",
    "compute_cap",
    "driver_version",
    "mig.mode.current",
)


def driver_root() -> Path:
    return Path(os.environ.get("NATIVEDRA_DRIVER_ROOT", "/"))


@pytest.fixture(scope="session")
def nvml() -> Any:
    return load_nvml(driver_root())


@pytest.fixture(scope="session")
def backend(nvml: Any) -> NvmlBackend:
    return NvmlBackend(nvml=nvml)


@pytest.fixture(scope="session")
def inventory(backend: NvmlBackend) -> Inventory:
    return backend.discover()


@pytest.fixture(scope="session")
def smi() -> dict[int, dict[str, str]]:
    """nvidia-smi's view, one row per GPU index (units off: memory in MiB)."""
    output = subprocess.run(
        ["nvidia-smi", f"--query-gpu={','.join(SMI_FIELDS)}", "--format=csv,noheader,nounits"],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout
    rows = [
        dict(zip(SMI_FIELDS, (cell.strip() for cell in row), strict=True)) for row in csv.reader(output.splitlines())
    ]
    return {int(row["index"]): row for row in rows}
