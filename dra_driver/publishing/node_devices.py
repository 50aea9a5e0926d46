"""This node's device state: the last inventory discovery reported and the devices published
from it, shared by the publisher (slices), prepare (which device is which) and the kubelet's
health stream (which devices are unhealthy, woken on every change)."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass

from dra_driver.discovery import Backend
from dra_driver.inventory import Inventory
from dra_driver.publishing.publish_config import PublishConfig
from dra_driver.publishing.published import PublishedDevice
from dra_driver.publishing.slices import Spec, devices_and_counters


@dataclass(frozen=True)
class DeviceSnapshot:
    """One inventory and what it publishes; replaced whole, so readers never see a mix."""

    inventory: Inventory
    devices: Mapping[str, PublishedDevice]  # by device name
    counter_sets: list[Spec]


class NodeDevices:
    """Runs discovery and keeps its result; devices are built once per changed inventory."""

    def __init__(self, backend: Backend, config: PublishConfig) -> None:
        self.backend = backend
        self.config = config
        self.changed = threading.Condition()  # health watchers wait on it
        self._snapshot: DeviceSnapshot | None = None

    def discover(self) -> DeviceSnapshot:
        """Discovery alone (no API): the kubelet side can serve before the first publish."""
        inventory = self.backend.discover()
        snapshot = self._snapshot
        if snapshot is None or snapshot.inventory != inventory:
            devices, counter_sets = devices_and_counters(inventory, self.config)
            snapshot = DeviceSnapshot(inventory, {device.name: device for device in devices}, counter_sets)
            with self.changed:
                self._snapshot = snapshot
                self.changed.notify_all()
        return snapshot

    def restrict(self, config: PublishConfig) -> None:
        """Publish (and prepare) with `config` from now on, e.g. whole GPUs only when the API
        server cannot keep partitions apart from their GPU."""
        self.config = config
        self._snapshot = None
        self.discover()

    def current(self) -> DeviceSnapshot:
        return self._snapshot or self.discover()

    def published(self) -> Mapping[str, PublishedDevice]:
        """Every device this node publishes, by name (what prepare looks allocations up in)."""
        return self.current().devices

    def health(self) -> dict[str, str]:
        """Device name -> health of its GPU, for the kubelet's health stream."""
        return {name: device.gpu.health.value for name, device in self.published().items()}
