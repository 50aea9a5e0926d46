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

from dra_driver.publishing.api_features import FieldsDroppedError, describe, safe_config
from dra_driver.publishing.handover import Instance
from dra_driver.publishing.node_devices import NodeDevices
from dra_driver.publishing.publisher import PublishResult, SlicePublisher
from dra_driver.publishing.slices import pack_slices
from nativedra.base.gcutil.collector import freeze_survivors

log = logging.getLogger(__name__)
WATCH_TIMEOUT_S = 30
YIELDED_RECHECK_S = 5.0  # while a newer instance publishes: how soon this one notices it is gone


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
        self._yielded_to: Instance | None = None

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
        self._say_handover(result.yielded_to)
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

    def _say_handover(self, newer: Instance | None) -> None:
        """Log when this instance starts or stops leaving the slices to a newer one."""
        if newer is not None and newer != self._yielded_to:
            log.info(
                "node %s: a newer plugin instance (pod %s) publishes the slices; this one leaves them alone",
                self.publisher.node_name,
                newer.pod_uid,
            )
        elif newer is None and self._yielded_to is not None:
            log.info(
                "node %s: the newer plugin instance (pod %s) is gone; publishing the slices again",
                self.publisher.node_name,
                self._yielded_to.pod_uid,
            )
        self._yielded_to = newer

    def run(self, stop: threading.Event) -> None:
        backoff = 1.0
        while not stop.is_set():
            try:
                result = self.sync_once()
                # What a sync leaves (the devices and slices published, and what else has lived
                # since the last one) lives on: frozen, so the collector's full collections do not
                # walk it. They did, in the middle of prepares: 20-85 ms each, five in one run of
                # `python -m bench prepare`.
                freeze_survivors()
                backoff = 1.0
                timeout = self.resync_s if result.yielded_to is None else min(self.resync_s, YIELDED_RECHECK_S)
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
