"""What this node publishes, as typed values: one `PublishedDevice` per device of the pool.

The slice builder makes each device once; everything on the node (prepare, CDI edits, the
inventory command, the health map) reads the typed fields, and only publishing uses the API
form. Readers of the API objects from the server (the cluster map) use `DeviceView`, so the
attribute spelling is known in this module alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from dra_driver.inventory import Gpu
from nativedra.base.kube.units import quantity

MEMORY_SLICE_PREFIX = "memory-slice-"  # MIG memory-slice counters: memory-slice-0 .. memory-slice-<n-1>


class DeviceKind(StrEnum):
    """The `type` attribute: DeviceClasses select on it, prepare and CDI branch on it."""

    GPU = "gpu"
    MIG = "mig"
    FRACTION = "fraction"
    SHARE = "share"


@dataclass(frozen=True)
class Fraction:
    """A fixed fraction of a GPU's memory and compute, published as the string `n/d`."""

    numerator: int
    denominator: int

    def __str__(self) -> str:
        return f"{self.numerator}/{self.denominator}"

    @classmethod
    def parse(cls, text: str) -> Fraction:
        numerator, denominator = text.split("/")
        return cls(int(numerator), int(denominator))

    def of(self, amount: int) -> int:
        """This fraction of `amount`, rounded down (never more than the GPU has)."""
        return amount * self.numerator // self.denominator


def memory_slice_counter(position: int) -> str:
    return f"{MEMORY_SLICE_PREFIX}{position}"


def memory_slices_of(counters: Mapping[str, Any]) -> int:
    """How many MIG memory slices a counter set offers (or a MIG device consumes)."""
    return sum(1 for name in counters if name.startswith(MEMORY_SLICE_PREFIX))


@dataclass(frozen=True)
class PublishedDevice:
    """One device of this node's pool. `api` is its ResourceSlice form, for publishing only;
    it is shared, never modified (the publisher copies specs before adding a generation)."""

    name: str
    kind: DeviceKind
    gpu: Gpu
    api: dict[str, Any] = field(compare=False, repr=False)
    fraction: Fraction | None = None  # kind FRACTION only
    mig_profile: str | None = None  # kind MIG only
    mig_start: int | None = None  # kind MIG only: first memory slice of the placement

    @property
    def gpu_index(self) -> int:
        return self.gpu.index


@dataclass(frozen=True)
class DeviceView:
    """The typed reading of a published device's API dict, as read back from the server."""

    name: str
    kind: DeviceKind
    gpu_index: int
    product_name: str
    numa_node: int | None
    memory_bytes: int | None  # the `memory` capacity, None when not published
    fraction: Fraction | None
    mig_profile: str | None
    counter_set: str | None  # the counter set it consumes from, if any
    memory_slices: int  # MIG memory slices it consumes

    @classmethod
    def from_api(cls, device: Mapping[str, Any]) -> DeviceView:
        attributes = device["attributes"]
        kind = DeviceKind(attributes["type"]["string"])
        consumption = (device.get("consumesCounters") or [{}])[0]
        memory = device.get("capacity", {}).get("memory")
        return cls(
            name=device["name"],
            kind=kind,
            gpu_index=attributes["index"]["int"],
            product_name=attributes["productName"]["string"],
            numa_node=attributes.get("numaNode", {}).get("int"),
            memory_bytes=int(quantity(memory["value"])) if memory else None,
            fraction=Fraction.parse(attributes["fraction"]["string"]) if kind is DeviceKind.FRACTION else None,
            mig_profile=attributes["profile"]["string"] if kind is DeviceKind.MIG else None,
            counter_set=consumption.get("counterSet"),
            memory_slices=memory_slices_of(consumption.get("counters", {})),
        )
