"""Keeps this node's ResourceSlices equal to what discovery reports.

Re-publishes when the backend reports a change, when someone edits or deletes our slices
(watch), and on a periodic resync; API errors (e.g. an apiserver restart) are retried with backoff.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from kubernetes import watch

from dra_driver.discovery import Backend
from dra_driver.inventory import Gpu, Inventory
from dra_driver.publish_config import PublishConfig
from dra_driver.publisher import PublishResult, SlicePublisher
from dra_driver.slices import build_slices, devices_and_counters
from kube.resources import RESOURCE_SLICES

log = logging.getLogger(__name__)


class SliceController:
    def __init__(
        self,
        backend: Backend,
        publisher: SlicePublisher,
        config: PublishConfig,
        resync_s: float = 60.0,
        max_backoff_s: float = 30.0,
    ) -> None:
        self.backend = backend
        self.publisher = publisher
        self.config = config
        self.resync_s = resync_s
        self.max_backoff_s = max_backoff_s
        self._wake = threading.Event()
        self.inventory: Inventory | None = None
        self.inventory_changed = threading.Condition()  # health watchers wait on it
        self._published: tuple[Inventory, dict[str, tuple[dict[str, Any], Gpu]]] | None = None

    def trigger(self) -> None:
        self._wake.set()

    def discover(self) -> Inventory:
        """Discovery alone (no API): the kubelet side can serve before the first publish."""
        inventory = self.backend.discover()
        if inventory != self.inventory:
            with self.inventory_changed:
                self.inventory = inventory
                self.inventory_changed.notify_all()
        return inventory

    def published_devices(self) -> dict[str, tuple[dict[str, Any], Gpu]]:
        """Every device this node publishes, by name, with its GPU (built once per inventory)."""
        inventory = self.inventory or self.discover()
        cached = self._published
        if cached is None or cached[0] is not inventory:
            devices, _ = devices_and_counters(inventory, self.config)
            gpus = inventory.by_index()
            cached = (inventory, {d["name"]: (d, gpus[d["attributes"]["index"]["int"]]) for d in devices})
            self._published = cached
        return cached[1]

    def device_health(self) -> dict[str, str]:
        return {name: gpu.health.value for name, (_, gpu) in self.published_devices().items()}

    def sync_once(self) -> PublishResult:
        inventory = self.discover()
        specs = build_slices(inventory, self.config, self.publisher.node_name)
        result = self.publisher.reconcile(specs)
        if result.writes:
            log.info(
                "published %d slice(s), generation %d (%d created, %d updated, %d deleted)",
                len(specs),
                result.generation,
                result.created,
                result.updated,
                result.deleted,
            )
        return result

    def run(self, stop: threading.Event) -> None:
        backoff = 1.0
        while not stop.is_set():
            try:
                self.sync_once()
                backoff = 1.0
                timeout = self.resync_s
            except Exception as error:  # noqa: BLE001 - any failure is retried; the plugin keeps serving
                log.warning("publishing ResourceSlices failed (retry in %.0fs): %s", backoff, error)
                timeout = backoff
                backoff = min(backoff * 2, self.max_backoff_s)
            self._wake.wait(timeout)
            self._wake.clear()

    def watch_slices(self, stop: threading.Event) -> None:
        """Any change to our slices by someone else triggers a reconcile (our own writes are no-ops)."""
        while not stop.is_set():
            watcher = watch.Watch()
            try:
                stream: Any = watcher.stream(
                    RESOURCE_SLICES.lister(self.publisher.api),
                    field_selector=self.publisher.field_selector,
                    timeout_seconds=30,
                )
                for event in stream:
                    if event["type"] in ("MODIFIED", "DELETED"):
                        self.trigger()
                    if stop.is_set():
                        watcher.stop()
                        break
            except Exception as error:  # noqa: BLE001 - API unavailable: retry after a pause
                log.debug("slice watch interrupted: %s", error)
                stop.wait(2)

    def watch_backend(self, stop: threading.Event) -> None:
        self.backend.watch(stop, self.trigger)
