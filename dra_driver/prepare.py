"""NodePrepareResources / NodeUnprepareResources for our claims, crash-safe and idempotent.

Prepare: GET the claim, check it (UID, allocated, results for this driver and node), build its
CDI spec, then record PrepareStarted -> write spec -> record PrepareCompleted. A crash at any
step is repaired at start (`reconcile`): completed claims get their spec back, half-prepared ones
are rolled back, spec files nobody owns are deleted. Claims are serialised per UID; different
claims run in parallel.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client

from cdi.spec import to_document
from cdi.store import SpecStore
from dra_driver import DRIVER_NAME, metrics
from dra_driver.cdi_edits import CDI_CLASS, CDI_VENDOR, ClaimDevice, HostDevices, PrepareError, claim_spec
from dra_driver.checkpoint import Checkpoint, ClaimRecord, ClaimState
from dra_driver.inventory import Gpu
from dra_driver.kubelet_paths import CDI_SEARCH_DIRS
from dra_driver.opaque_config import ConfigError, config_for_request
from dra_driver.vendor_cdi import vendor_device_id
from kube.resources import RESOURCE_CLAIMS
from kube.units import quantity

log = logging.getLogger(__name__)
CRASH_POINT_ENV = "NATIVEDRA_TEST_CRASH_POINT"  # crash-safety tests only: SIGKILL ourselves at a step

PublishedDevices = Callable[[], dict[str, tuple[dict[str, Any], Gpu]]]


@dataclass(frozen=True)
class ClaimRef:
    namespace: str
    uid: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name} ({self.uid})"


@dataclass(frozen=True)
class PreparedDevice:
    request_names: list[str]
    pool_name: str
    device_name: str
    cdi_device_ids: list[str]
    share_id: str | None = None


def _crash_point(step: str) -> None:
    if os.environ.get(CRASH_POINT_ENV) == step:
        log.warning("crash point %s reached: killing the plugin (test hook)", step)
        os.kill(os.getpid(), signal.SIGKILL)


def _consumed(result: dict[str, Any]) -> dict[str, int] | None:
    consumed = result.get("consumedCapacity")
    if not consumed:
        return None
    return {name: int(quantity(value)) for name, value in consumed.items()}


def our_results(claim: dict[str, Any], ref: ClaimRef, node_name: str) -> list[dict[str, Any]]:
    """The allocation results this plugin must prepare, or an error saying why there are none."""
    if claim["metadata"]["uid"] != ref.uid:
        raise PrepareError(
            "uid_mismatch",
            f"claim {ref.namespace}/{ref.name}: metadata.uid is {claim['metadata']['uid']}, the kubelet asked for "
            f"{ref.uid} (the claim was deleted and re-created)",
        )
    allocation = claim.get("status", {}).get("allocation")
    if not allocation:
        raise PrepareError("not_allocated", f"claim {ref}: status.allocation is empty (the claim is not allocated)")
    results = allocation.get("devices", {}).get("results", [])
    mine = [r for r in results if r.get("driver") == DRIVER_NAME and r.get("pool") == node_name]
    if not mine:
        elsewhere = ", ".join(sorted({f"{r.get('driver')}/{r.get('pool')}" for r in results})) or "nothing"
        raise PrepareError(
            "not_ours",
            f"claim {ref}: status.allocation.devices.results has no device of driver {DRIVER_NAME} in pool "
            f"{node_name} (allocated: {elsewhere})",
        )
    return mine


class ClaimPreparer:
    def __init__(
        self,
        api: client.ApiClient,
        node_name: str,
        published: PublishedDevices,
        *,
        checkpoint: Checkpoint,
        specs: SpecStore,
        dev_root: Path,
        cdi_roots: tuple[Path, ...] = CDI_SEARCH_DIRS,
        mig_supported: bool = True,
    ) -> None:
        self.api = api
        self.node_name = node_name
        self.published = published
        self.checkpoint = checkpoint
        self.specs = specs
        self.host = HostDevices(dev_root)
        self.cdi_roots = cdi_roots
        self.mig_supported = mig_supported
        self._locks: dict[str, threading.Lock] = {}
        self._locks_guard = threading.Lock()

    def _lock(self, uid: str) -> threading.Lock:
        with self._locks_guard:
            return self._locks.setdefault(uid, threading.Lock())

    # -- prepare ------------------------------------------------------------------------------

    def prepare(self, ref: ClaimRef) -> list[PreparedDevice]:
        started = time.perf_counter()
        try:
            with self._lock(ref.uid):
                return self._prepare(ref)
        except PrepareError as error:
            metrics.CLAIM_ERRORS.labels("prepare", error.reason).inc()
            log.warning("prepare %s failed: %s", ref, error)
            raise
        finally:
            metrics.PREPARE_SECONDS.labels("prepare").observe(time.perf_counter() - started)

    def _prepare(self, ref: ClaimRef) -> list[PreparedDevice]:
        self.specs.path_for(ref.uid)  # rejects a UID that is not a Kubernetes UID before any I/O
        record = self.checkpoint.read().get(ref.uid)
        if record and record.state is ClaimState.PREPARE_COMPLETED:
            self._restore_spec(record)  # idempotent: same answer; the spec is back if it was lost
            return [PreparedDevice(**d) for d in record.devices]
        claim = self._get(ref)
        claim_devices = self._claim_devices(claim, ref)
        spec = claim_spec(ref.uid, claim_devices, self.host)
        spec_text = yaml.safe_dump(to_document(spec), sort_keys=False)
        answer = [
            PreparedDevice(
                request_names=[d.request.split("/", 1)[0]],
                pool_name=self.node_name,
                device_name=d.device["name"],
                cdi_device_ids=[spec.qualified_name(device.name)]
                + ([vendor] if (vendor := vendor_device_id(d.gpu, self.cdi_roots)) else []),
                share_id=d.share_id,
            )
            for d, device in zip(claim_devices, spec.devices, strict=True)
        ]
        started = ClaimRecord(
            ref.uid, ref.namespace, ref.name, ClaimState.PREPARE_STARTED, [a.__dict__ for a in answer], spec_text
        )
        self.checkpoint.update(lambda records: records.__setitem__(ref.uid, started))
        _crash_point("after-prepare-started")
        self.specs.write_text(ref.uid, spec_text)
        _crash_point("after-spec-written")

        def complete(records: dict[str, ClaimRecord]) -> int:
            records[ref.uid].state = ClaimState.PREPARE_COMPLETED
            return _completed(records)

        metrics.PREPARED_CLAIMS.set(self.checkpoint.update(complete))
        _crash_point("after-prepare-completed")
        return answer

    def _get(self, ref: ClaimRef) -> dict[str, Any]:
        try:
            claim = RESOURCE_CLAIMS.get(self.api, ref.name, ref.namespace)
        except client.ApiException as error:
            if error.status == 404:
                raise PrepareError("not_found", f"claim {ref}: not found in the API") from error
            raise PrepareError("api_error", f"claim {ref}: reading it failed: {error.status} {error.reason}") from error
        return claim

    def _claim_devices(self, claim: dict[str, Any], ref: ClaimRef) -> list[ClaimDevice]:
        results = our_results(claim, ref, self.node_name)  # validates UID and allocation first
        allocation_config = claim["status"]["allocation"]["devices"].get("config", [])
        published = self.published()
        devices = []
        for result in results:
            known = published.get(result["device"])
            if known is None:
                raise PrepareError(
                    "unknown_device",
                    f"claim {ref}: device {result['device']} is not published by node {self.node_name}",
                )
            device, gpu = known
            if device["attributes"]["type"]["string"] == "mig" and not self.mig_supported:
                raise PrepareError(
                    "unsupported",
                    f"claim {ref}: device {result['device']} is a MIG placement; creating MIG instances on demand is "
                    "not supported by this backend",
                )
            try:
                config = config_for_request(allocation_config, result["request"], f"{ref.namespace}/{ref.name}")
            except ConfigError as error:
                raise PrepareError("bad_config", str(error)) from error
            devices.append(
                ClaimDevice(result["request"], device, gpu, config, result.get("shareID"), _consumed(result))
            )
        return devices

    # -- unprepare -----------------------------------------------------------------------------

    def unprepare(self, ref: ClaimRef) -> None:
        """Remove the spec and the record; an unknown claim is already unprepared."""
        started = time.perf_counter()

        def forget(records: dict[str, ClaimRecord]) -> int:
            records.pop(ref.uid, None)
            return _completed(records)

        try:
            with self._lock(ref.uid):
                self.specs.path_for(ref.uid)
                self.specs.remove(ref.uid)
                metrics.PREPARED_CLAIMS.set(self.checkpoint.update(forget))
        except (ValueError, OSError) as error:
            metrics.CLAIM_ERRORS.labels("unprepare", "internal").inc()
            raise PrepareError("internal", f"claim {ref}: {error}") from error
        finally:
            metrics.PREPARE_SECONDS.labels("unprepare").observe(time.perf_counter() - started)

    # -- start-up repair -------------------------------------------------------------------------

    def _restore_spec(self, record: ClaimRecord) -> None:
        if record.cdi_spec and not self.specs.exists(record.uid):
            log.info("restoring the CDI spec of prepared claim %s/%s", record.namespace, record.name)
            self.specs.write_text(record.uid, record.cdi_spec)

    def reconcile(self) -> dict[str, list[str]]:
        """Repair after a crash or reboot; returns what was done, for logs and tests."""
        done: dict[str, list[str]] = {"restored": [], "rolled_back": [], "orphans_removed": []}

        def repair(records: dict[str, ClaimRecord]) -> int:
            for uid, record in list(records.items()):
                if record.state is ClaimState.PREPARE_COMPLETED:
                    if not self.specs.exists(uid):
                        self._restore_spec(record)
                        done["restored"].append(uid)
                else:
                    self.specs.remove(uid)
                    del records[uid]
                    done["rolled_back"].append(uid)
            done["orphans_removed"] = self.specs.remove_orphans(set(records))
            return _completed(records)

        metrics.PREPARED_CLAIMS.set(self.checkpoint.update(repair))
        if any(done.values()):
            log.info("start-up repair: %s", done)
        return done


def _completed(records: dict[str, ClaimRecord]) -> int:
    """Prepared claims, for the gauge; counted inside the update that changed them."""
    return sum(1 for record in records.values() if record.state is ClaimState.PREPARE_COMPLETED)


def spec_store(cdi_dir: Path) -> SpecStore:
    return SpecStore(cdi_dir, CDI_VENDOR, CDI_CLASS)
