"""Keeps this node's ResourceSlices equal to what discovery reports.

Re-publishes when the backend reports a change (`trigger`), when someone edits or deletes our
slices (watch), and on a periodic resync; API errors (e.g. an apiserver restart) are retried
with backoff. The device state itself lives in `NodeDevices`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from kubernetes import watch

from dra_driver.node_devices import NodeDevices
from dra_driver.publishing.api_features import FieldsDroppedError, describe, safe_config
from dra_driver.publishing.publisher import PublishResult, SlicePublisher
from dra_driver.publishing.slices import pack_slices

log = logging.getLogger(__name__)
WATCH_TIMEOUT_S = 30


class SliceController:
    def __init__(
        self,
        devices: NodeDevices,
        publisher: SlicePublisher,
        resync_s: float = 60.0,
        max_backoff_s: float = 30.0,
        on_degraded: Callable[[str], None] | None = None,
    ) -> None:
        self.devices = devices
        self.on_degraded = on_degraded  # told once what is left out, e.g. to post a Node event
        self.publisher = publisher
        self.resync_s = resync_s
        self.max_backoff_s = max_backoff_s
        self._wake = threading.Event()

    def trigger(self) -> None:
        """Publish now instead of at the next resync."""
        self._wake.set()

    def sync_once(self) -> PublishResult:
        try:
            return self._publish()
        except FieldsDroppedError as error:
            self._degrade(error.dropped)
            return self._publish()

    def _degrade(self, dropped: frozenset[str]) -> None:
        """Publish only what the API server can keep safe, and say so once (log and Node event)."""
        self.devices.restrict(safe_config(self.devices.config, dropped))
        message = f"node {self.publisher.node_name}: {describe(dropped)}"
        log.warning("%s", message)
        if self.on_degraded is not None:
            self.on_degraded(message)

    def _publish(self) -> PublishResult:
        snapshot = self.devices.discover()
        specs = pack_slices(snapshot.devices.values(), snapshot.counter_sets, self.publisher.node_name)
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
                for event in self.publisher.watch_ours(watcher, WATCH_TIMEOUT_S):
                    if event["type"] in ("MODIFIED", "DELETED"):
                        self.trigger()
                    if stop.is_set():
                        watcher.stop()
                        break
            except Exception as error:  # noqa: BLE001 - API unavailable: retry after a pause
                log.debug("slice watch interrupted: %s", error)
                stop.wait(2)
