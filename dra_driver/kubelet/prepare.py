"""NodePrepareResources / NodeUnprepareResources for our claims, crash-safe and idempotent.

Prepare: GET the claim, check it (UID, allocated, results for this driver and node), build its
CDI spec and its device metadata files (KEP-5304, mounted by the spec), then record PrepareStarted
-> write the files -> record PrepareCompleted. A crash between any two steps leaves a state that
the start-up repair (`dra_driver.kubelet.repair`) puts right. Claims are serialised per UID; different
claims run in parallel.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cdi.spec import Spec
from cdi.store import spec_text
from dra_driver import metrics
from dra_driver.background import Activity
from dra_driver.errors import PrepareError
from dra_driver.kubelet.cdi_edits import (
    ClaimDevice,
    HostDevices,
    MetadataMount,
    cdi_device_name,
    claim_spec,
    metadata_device_name,
)
from dra_driver.kubelet.checkpoint import ClaimRecord, ClaimState
from dra_driver.kubelet.claim import ClaimRef, ClaimSources, PreparedDevice, check_uid, our_results
from dra_driver.kubelet.claim_locks import ClaimLocks
from dra_driver.kubelet.device_metadata import (
    AllocatedDevice,
    ClaimIdentity,
    RequestMetadata,
    base_request,
    claim_metadata,
    render,
)
from dra_driver.kubelet.gpu_mode import check_modes
from dra_driver.kubelet.opaque_config import ConfigError, config_for_request
from dra_driver.kubelet.stores import Stores, prepared_count
from dra_driver.kubelet.vendor_cdi import vendor_device_id
from dra_driver.kubelet_paths import CDI_SEARCH_DIRS
from dra_driver.publishing.published import DeviceKind, PublishedDevice
from nativedra.base.kube.names import DRIVER_NAME
from nativedra.base.kube.units import quantity

log = logging.getLogger(__name__)

PublishedDevices = Callable[[], Mapping[str, PublishedDevice]]
FailureReport = Callable[[ClaimRef, PrepareError], None]
PreparedReport = Callable[[ClaimRef, list[ClaimDevice]], None]  # a claim newly prepared, with its devices
UnpreparedReport = Callable[[ClaimRef], None]


@dataclass(frozen=True)
class LocalNode:
    """This node as prepare sees it: its name (also its pool's), the devices it publishes (a plain
    function, so tests hand over plain data), where its device nodes and the vendor's CDI specs are,
    and whether its backend can prepare MIG placements."""

    name: str
    published: PublishedDevices
    dev_root: Path
    cdi_roots: tuple[Path, ...] = CDI_SEARCH_DIRS
    mig_supported: bool = True


@dataclass(frozen=True)
class Reporters:
    """Who hears about outcomes (events, device status); each returns at once, as the kubelet waits."""

    on_failure: FailureReport
    on_prepared: PreparedReport = lambda _ref, _devices: None
    on_unprepared: UnpreparedReport = lambda _ref: None


@dataclass(frozen=True)
class Plan:
    """What prepare writes and answers for a claim, derived from the claim and the published devices."""

    devices: list[ClaimDevice]
    metadata: list[RequestMetadata]
    spec: Spec


def _consumed(result: dict[str, Any]) -> dict[str, int] | None:
    consumed = result.get("consumedCapacity")
    if not consumed:
        return None
    return {name: int(quantity(value)) for name, value in consumed.items()}


class ClaimPreparer:
    """Prepares and unprepares claims on this node."""

    def __init__(
        self,
        node: LocalNode,
        sources: ClaimSources,
        stores: Stores,
        reporters: Reporters,
        activity: Activity | None = None,
    ) -> None:
        self.node = node
        self.sources = sources
        self.stores = stores
        self.reporters = reporters
        self.activity = activity or Activity()  # the kubelet's calls, which background work yields to
        self.host = HostDevices(node.dev_root)
        self._locks = ClaimLocks()

    def paused(self) -> contextlib.AbstractContextManager[None]:
        """No prepare or unprepare runs while held (the kubelet's calls wait)."""
        return self._locks.paused()

    # -- prepare ------------------------------------------------------------------------------

    def prepare(self, ref: ClaimRef) -> list[PreparedDevice]:
        """One claim at a time per UID; every outcome is counted and timed."""
        started = time.perf_counter()
        try:
            check_uid(ref)
            with self.activity.running(), self._locks.held(ref.uid):
                return self._prepare(ref)
        except PrepareError as error:
            metrics.CLAIM_ERRORS.labels("prepare", error.reason).inc()
            log.warning("prepare failed: %s", error)  # the error names the claim
            self.reporters.on_failure(ref, error)
            raise
        finally:
            metrics.PREPARE_SECONDS.labels("prepare").observe(time.perf_counter() - started)

    def _prepare(self, ref: ClaimRef) -> list[PreparedDevice]:
        previous = self._previous_answer(ref)
        if previous is not None:
            return previous
        claim = self.sources.read(ref)
        try:
            plan = self.plan(claim, ref)
        except PrepareError as error:
            error.reserved_for = list(claim.get("status", {}).get("reservedFor", []))
            raise
        answer = self.answer(ref.uid, plan)
        self._commit(ref, answer, spec_text(plan.spec), {m.request: m.document for m in plan.metadata})
        self.reporters.on_prepared(ref, plan.devices)
        return answer

    def _previous_answer(self, ref: ClaimRef) -> list[PreparedDevice] | None:
        """The kubelet retries: a completed claim gets the same answer (and its files back if
        they were lost) without reading the claim again."""
        record = self.stores.checkpoint.read().get(ref.uid)
        if record is None or record.state is not ClaimState.PREPARE_COMPLETED:
            return None
        self.stores.restore(record)
        return [PreparedDevice(**device) for device in record.devices]

    def plan(self, claim: dict[str, Any], ref: ClaimRef) -> Plan:
        """The claim's devices, their metadata files (attributes as the slice publishes them) and
        the spec that gives a container both."""
        claim_devices = self._claim_devices(claim, ref)
        allocated = [
            AllocatedDevice(d.request, self.node.name, d.device.name, d.device.api.get("attributes", {}))
            for d in claim_devices
        ]
        metadata = claim_metadata(ClaimIdentity.of(claim), allocated, DRIVER_NAME)
        mounts = tuple(
            MetadataMount(m.request, str(self.stores.metadata.path_for(ref.uid, m.request)), m.container_path)
            for m in metadata
        )
        return Plan(claim_devices, metadata, claim_spec(ref.uid, claim_devices, self.host, mounts))

    def _claim_devices(self, claim: dict[str, Any], ref: ClaimRef) -> list[ClaimDevice]:
        results = our_results(claim, ref, self.node.name)  # validates UID and allocation first
        allocation_config = claim["status"]["allocation"]["devices"].get("config", [])
        published = self.node.published()
        devices = [self._claim_device(result, published, allocation_config, ref) for result in results]
        check_modes(ref, devices, self.stores.checkpoint.read().values(), published)
        return devices

    def _claim_device(
        self,
        result: dict[str, Any],
        published: Mapping[str, PublishedDevice],
        allocation_config: list[dict[str, Any]],
        ref: ClaimRef,
    ) -> ClaimDevice:
        """One allocation result checked against what this node publishes, with its config."""
        device = published.get(result["device"])
        if device is None:
            raise PrepareError(
                "unknown_device", f"claim {ref}: device {result['device']} is not published by node {self.node.name}"
            )
        if device.kind is DeviceKind.MIG and not self.node.mig_supported:
            raise PrepareError(
                "unsupported",
                f"claim {ref}: device {result['device']} is a MIG placement; creating MIG instances on demand is "
                "not supported by this backend",
            )
        try:
            config = config_for_request(allocation_config, result["request"], f"{ref.namespace}/{ref.name}")
        except ConfigError as error:
            raise PrepareError("bad_config", str(error)) from error
        return ClaimDevice(result["request"], device, config, result.get("shareID"), _consumed(result))

    def answer(self, uid: str, plan: Plan) -> list[PreparedDevice]:
        """Per device: our CDI device, plus the vendor's own CDI device when the host has one
        (it carries the driver libraries and hooks). The first device of each request also
        carries that request's metadata device, where the helper puts it too (draplugin.go
        NodePrepareResources): a container naming the request gets the device and its file."""
        unmounted = {m.request for m in plan.metadata}
        answer = []
        for claim_device in plan.devices:
            request = base_request(claim_device.request)
            ids = [plan.spec.qualified_name(cdi_device_name(uid, claim_device.device.name))]
            if vendor := vendor_device_id(claim_device.gpu, self.node.cdi_roots):
                ids.append(vendor)
            if request in unmounted:
                ids.append(plan.spec.qualified_name(metadata_device_name(uid, request)))
                unmounted.discard(request)
            device_name = claim_device.device.name
            answer.append(PreparedDevice([request], self.node.name, device_name, ids, claim_device.share_id))
        return answer

    def _commit(
        self, ref: ClaimRef, answer: list[PreparedDevice], text: str, metadata: dict[str, dict[str, Any]]
    ) -> None:
        """Record PrepareStarted, write the metadata files and the spec, record PrepareCompleted:
        a crash between any two steps leaves a state that the start-up repair puts right. The fsyncs
        that the order allows to overlap do: the files' content with PrepareStarted (they appear
        only once it is recorded), their directory entries with PrepareCompleted (a completed
        claim whose files were lost gets them back from the record). The answer goes out only
        when both are durable.

        PrepareStarted must be seen before the files appear, not survive a power loss on its own,
        so its directory fsync is left to PrepareCompleted's: after this process is killed, the
        checkpoint it renamed is the one read. A power loss before PrepareCompleted is durable
        takes the specs with /var/run (tmpfs); the repair removes metadata files left without a
        spec and a record, and keeps or removes a spec on a disk as the API says its claim is
        allocated here or not."""
        started = ClaimRecord(
            ref.uid, ref.namespace, ref.name, ClaimState.PREPARE_STARTED, [a.__dict__ for a in answer], text, metadata
        )
        checkpoint, specs, metadata_files = self.stores.checkpoint, self.stores.specs, self.stores.metadata
        recorded = checkpoint.submit(lambda records: records.__setitem__(ref.uid, started), durable=False)
        files = {request: render(document) for request, document in metadata.items()}
        with specs.staged(ref.uid, text) as publish, metadata_files.staged(ref.uid, files) as publish_metadata:
            recorded.result()
            publish_metadata()  # before the spec that mounts them
            publish()

        def complete(records: dict[str, ClaimRecord]) -> int:
            records[ref.uid] = dataclasses.replace(records[ref.uid], state=ClaimState.PREPARE_COMPLETED)
            return prepared_count(records)

        completed = checkpoint.submit(complete)
        specs.sync()
        metadata_files.sync(ref.uid)
        metrics.PREPARED_CLAIMS.set(completed.result())

    # -- unprepare -----------------------------------------------------------------------------

    def unprepare(self, ref: ClaimRef) -> None:
        """Remove the spec, the metadata files and the record; an unknown claim is already unprepared."""
        started = time.perf_counter()

        known: list[bool] = []

        def forget(records: dict[str, ClaimRecord]) -> int:
            known.append(records.pop(ref.uid, None) is not None)
            return prepared_count(records)

        try:
            check_uid(ref)
            with self.activity.running(), self._locks.held(ref.uid):
                self.stores.specs.remove(ref.uid)
                self.stores.metadata.remove(ref.uid)
                metrics.PREPARED_CLAIMS.set(self.stores.checkpoint.update(forget))
                if any(known):  # under the claim's lock: a prepare of it again reports after this
                    self.reporters.on_unprepared(ref)
        except PrepareError as error:
            metrics.CLAIM_ERRORS.labels("unprepare", error.reason).inc()
            raise
        except OSError as error:
            metrics.CLAIM_ERRORS.labels("unprepare", "internal").inc()
            raise PrepareError("internal", f"claim {ref}: {error}") from error
        finally:
            metrics.PREPARE_SECONDS.labels("unprepare").observe(time.perf_counter() - started)
