"""What a node has: accelerators and their facts, independent of how they were discovered.

Every discovery backend (NVML, sysfs, simulated profile) produces this model, so everything
downstream (slices, CDI, health) is backend-agnostic and testable with plain data.
"""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic.alias_generators import to_camel

PCI_BUS_ID_RE = re.compile(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-9a-f]")
PCIE_ROOT_RE = re.compile(r"pci[0-9a-f]{4}:[0-9a-f]{2}")


class Vendor(StrEnum):
    NVIDIA = "nvidia"
    AMD = "amd"
    INTEL = "intel"


class Health(StrEnum):
    HEALTHY = "Healthy"
    UNHEALTHY = "Unhealthy"


class _Model(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True, strict=True)


class Fault(_Model):
    """Why a GPU is tainted. A fatal fault (most XIDs, a double-bit ECC error, a GPU gone from the
    bus) breaks what runs on the GPU; a non-fatal one (an XID the application itself caused) only
    keeps new work off it. `reason` is the taint's value, so it is a label value."""

    reason: str = Field(pattern=r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
    fatal: bool
    description: str = Field(default="", max_length=256)

    def over(self, earlier: Fault | None) -> Fault:
        """The fault that stands once this one follows `earlier`: the first, unless this one is the
        first fatal one. A GPU's taint changes at most twice (non-fatal, then fatal), not with
        every XID that follows."""
        return self if earlier is None or (self.fatal and not earlier.fatal) else earlier


# A GPU marked Unhealthy without saying why (a fault file's `unhealthy:` list, an older backend).
UNSPECIFIED_FAULT = Fault(reason="unhealthy", fatal=True, description="marked unhealthy")


class MigPlacement(_Model):
    """A GPU-instance placement in memory-slice units, as NVML reports it."""

    start: Annotated[int, Field(ge=0)]
    size: Annotated[int, Field(ge=1)]


class MigProfile(_Model):
    """One GPU-instance profile (NVML GetGpuInstanceProfileInfo) with its possible placements."""

    name: str = Field(pattern=r"^\d+g\.\d+gb(\+[a-z]+)?$")
    id: Annotated[int, Field(ge=0)]
    slice_count: Annotated[int, Field(ge=1)]
    instance_count: Annotated[int, Field(ge=1)]
    multiprocessor_count: Annotated[int, Field(ge=1)]
    memory_size_mb: Annotated[int, Field(ge=1, alias="memorySizeMB")]
    copy_engine_count: Annotated[int, Field(ge=0)] = 0
    decoder_count: Annotated[int, Field(ge=0)] = 0
    encoder_count: Annotated[int, Field(ge=0)] = 0
    jpeg_count: Annotated[int, Field(ge=0)] = 0
    ofa_count: Annotated[int, Field(ge=0)] = 0
    placements: tuple[MigPlacement, ...]


class Gpu(_Model):
    vendor: Vendor
    index: Annotated[int, Field(ge=0, le=1023)]
    minor: Annotated[int, Field(ge=0)]
    uuid: str = Field(min_length=1, max_length=64)
    product_name: str = Field(min_length=1, max_length=64)
    brand: str = Field(min_length=1, max_length=64)
    architecture: str = Field(min_length=1, max_length=64)
    cuda_compute_capability: str | None = Field(default=None, pattern=r"^\d+\.\d+$")
    memory_bytes: Annotated[int, Field(gt=0)]
    multiprocessors: Annotated[int, Field(gt=0)] | None = None  # None: not knowable from sysfs
    pci_bus_id: str = Field(alias="pciBusID")
    pcie_root: str | None = None
    numa_node: Annotated[int, Field(ge=0)] | None = None
    health: Health = Health.HEALTHY
    fault: Fault | None = None
    mig_capable: bool = False
    mig_enabled: bool = False
    mig_memory_slices: Annotated[int, Field(ge=0, le=16)] = 0
    mig_profiles: tuple[MigProfile, ...] = ()

    @property
    def tainting_fault(self) -> Fault | None:
        """The fault its devices are tainted for, if any: an Unhealthy GPU always has one."""
        if self.fault is not None:
            return self.fault
        return UNSPECIFIED_FAULT if self.health is Health.UNHEALTHY else None

    def with_fault(self, fault: Fault) -> Gpu:
        """The GPU after `fault`; a fatal fault makes it Unhealthy (the kubelet's health stream says
        so), and a fatal fault already seen is never replaced by a non-fatal one."""
        fault = fault.over(self.fault)
        health = Health.UNHEALTHY if fault.fatal else self.health
        return self.model_copy(update={"fault": fault, "health": health})

    @field_validator("pci_bus_id")
    @classmethod
    def _bus_id(cls, value: str) -> str:
        if not PCI_BUS_ID_RE.fullmatch(value):
            raise ValueError("must look like 0000:3b:00.0 (lowercase, 4-digit domain)")
        return value

    @field_validator("pcie_root")
    @classmethod
    def _pcie_root(cls, value: str | None) -> str | None:
        if value is not None and not PCIE_ROOT_RE.fullmatch(value):
            raise ValueError("must look like pci0000:3a")
        return value

    @model_validator(mode="after")
    def _mig_consistent(self) -> Gpu:
        if self.mig_enabled and not self.mig_capable:
            raise ValueError("migEnabled is true but migCapable is false")
        if self.mig_capable and (not self.mig_profiles or self.mig_memory_slices == 0):
            raise ValueError("a MIG-capable GPU needs migMemorySlices and migProfiles")
        for profile in self.mig_profiles:
            for placement in profile.placements:
                if placement.start + placement.size > self.mig_memory_slices:
                    raise ValueError(
                        f"migProfiles {profile.name}: placement {placement.start}+{placement.size} "
                        f"exceeds migMemorySlices={self.mig_memory_slices}"
                    )
        return self


class Inventory(_Model):
    """All accelerators of one node, sorted by index, plus node-wide driver facts."""

    driver_version: str | None = Field(default=None, pattern=r"^\d+(\.\d+){0,2}$")
    cuda_driver_version: str | None = Field(default=None, pattern=r"^\d+(\.\d+){0,2}$")
    gpus: tuple[Gpu, ...] = ()

    @model_validator(mode="after")
    def _unique_indexes(self) -> Inventory:
        seen: set[int] = set()
        for gpu in self.gpus:
            if gpu.index in seen:
                raise ValueError(f"duplicate GPU index {gpu.index}")
            seen.add(gpu.index)
        return self

    def by_index(self) -> dict[int, Gpu]:
        return {gpu.index: gpu for gpu in self.gpus}
