"""The node's device state: built once per changed inventory, replaced whole, and every change
wakes the health watchers."""

from __future__ import annotations

import threading
from pathlib import Path

from dra_driver.discovery.simulated import SimulatedBackend
from dra_driver.publishing.node_devices import NodeDevices
from dra_driver.publishing.publish_config import PublishConfig


def _devices(tmp_path: Path, config: PublishConfig | None = None) -> tuple[NodeDevices, Path]:
    faults = tmp_path / "faults.yaml"
    return NodeDevices(SimulatedBackend("l4-4x", faults), config or PublishConfig()), faults


def test_an_unchanged_inventory_keeps_its_snapshot(tmp_path: Path) -> None:
    devices, _ = _devices(tmp_path)
    first = devices.discover()
    assert devices.discover() is first
    assert devices.current() is first and devices.published() is first.devices


def test_a_changed_inventory_replaces_the_snapshot_and_wakes_watchers(tmp_path: Path) -> None:
    devices, faults = _devices(tmp_path)
    before = devices.discover()
    assert set(devices.health().values()) == {"Healthy"}
    woken = threading.Event()

    def watch() -> None:
        with devices.changed:
            devices.changed.wait(5)
            woken.set()

    watcher = threading.Thread(target=watch)
    with devices.changed:  # the watcher waits before the change is made
        watcher.start()
    faults.write_text("unhealthy: [1]\n")
    after = devices.discover()
    watcher.join(5)
    assert woken.is_set() and after is not before
    unhealthy = {name for name, health in devices.health().items() if health == "Unhealthy"}
    assert unhealthy == {name for name, device in after.devices.items() if device.gpu_index == 1}
    assert unhealthy and len(unhealthy) < len(after.devices)


def test_restrict_rebuilds_the_devices_with_the_new_config(tmp_path: Path) -> None:
    devices, _ = _devices(tmp_path)
    with_fractions = set(devices.published())
    devices.restrict(PublishConfig(fractions=(), mig=False))
    whole_only = set(devices.published())
    assert whole_only < with_fractions
    assert {device.gpu_index for device in devices.published().values()} == {0, 1, 2, 3}
    assert all(device.fraction is None for device in devices.published().values())


def test_current_discovers_when_nothing_was_discovered_yet(tmp_path: Path) -> None:
    devices, _ = _devices(tmp_path)
    assert len(devices.current().inventory.gpus) == 4
