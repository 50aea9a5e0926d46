"""NodePrepareResources / NodeUnprepareResources for our claims, crash-safe and idempotent.

Prepare: GET the claim, check it (UID, allocated, results for this driver and node), build its
CDI spec and its device metadata files (KEP-5304, mounted by the spec), then record PrepareStarted
-> write the files -> record PrepareCompleted. A crash at any step is repaired at start
(`reconcile`): completed claims get their files back, half-prepared ones are rolled back, a spec
whose record was lost (corrupted checkpoint) gets its record rebuilt from the files and the API
while its claim is allocated here, and only files of claims not allocated here are deleted.
Claims are serialised per UID; different claims run in parallel.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import os
import signal
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client
from urllib3.exceptions import HTTPError

from cdi.spec import Spec
from cdi.store import SpecStore, is_kubernetes_uid, spec_text
from dra_driver import DRIVER_NAME, metrics
from dra_driver.background import Activity
from dra_driver.cdi_edits import (
    CDI_CLASS,
    CDI_VENDOR,
    ClaimDevice,
    HostDevices,
    MetadataMount,
    cdi_device_name,
    claim_spec,
    metadata_device_name,
)
from dra_driver.checkpoint import Checkpoint, ClaimRecord, ClaimState
from dra_driver.claim_locks import ClaimLocks
from dra_driver.device_metadata import (
    AllocatedDevice,
    ClaimIdentity,
    RequestMetadata,
    base_request,
    claim_metadata,
    render,
)
from dra_driver.errors import PrepareError
from dra_driver.kubelet_paths import CDI_SEARCH_DIRS
from dra_driver.metadata_store import MetadataStore
from dra_driver.opaque_config import ConfigError, config_for_request
from dra_driver.published import DeviceKind, PublishedDevice
from dra_driver.vendor_cdi import vendor_device_id
from kube.resources import RESOURCE_CLAIMS
from kube.units import quantity

log = logging.getLogger(__name__)
# Every API call made while the kubelet waits ends well before the kubelet's DRA call timeout (45 s).
API_TIMEOUT_S = 10.0
CRASH_POINT_ENV = "NATIVEDRA_TEST_CRASH_POINT"  # crash-safety tests only: SIGKILL ourselves at a step

PublishedDevices = Callable[[], Mapping[str, PublishedDevice]]


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


@dataclass(frozen=True)
class _Plan:
    """What prepare writes and answers for a claim, derived from the claim and the published devices."""

    devices: list[ClaimDevice]
    metadata: list[RequestMetadata]
    spec: Spec


ClaimReader = Callable[[ClaimRef], dict[str, Any]]  # raises PrepareError when it cannot
ClaimLister = Callable[[], list[dict[str, Any]]]  # every ResourceClaim; raises PrepareError when it cannot
FailureReport = Callable[[ClaimRef, PrepareError], None]
PreparedReport = Callable[[ClaimRef, list[ClaimDevice]], None]  # a claim newly prepared, with its devices
UnpreparedReport = Callable[[ClaimRef], None]
MAX_LIST_PAGES = 1000  # x LIST_PAGE claims: far beyond any cluster, but a bound
LIST_PAGE = 500


def check_uid(ref: ClaimRef) -> None:
    """Refuse a UID that is not a Kubernetes UID before it reaches a lock, a file name or a log line;
    it is shown with repr() because it may hold a newline or a path."""
    if not is_kubernetes_uid(ref.uid):
        raise PrepareError(
            "bad_uid",
            f"claim {ref.namespace}/{ref.name}: field uid {ref.uid!r} is not a Kubernetes UID (a lowercase RFC 4122 "
            "UUID)",
        )


def _crash_point(step: str) -> None:
    """Crash-safety tests stop the plugin exactly between two steps of the prepare protocol."""
    if os.environ.get(CRASH_POINT_ENV) == step:
        log.warning("crash point %s reached: killing the plugin (test hook)", step)
        os.kill(os.getpid(), signal.SIGKILL)


def _consumed(result: dict[str, Any]) -> dict[str, int] | None:
    consumed = result.get("consumedCapacity")
    if not consumed:
        return None
    return {name: int(quantity(value)) for name, value in consumed.items()}


def bounded_client(api: client.ApiClient) -> client.ApiClient:
    """A client for calls made while the kubelet waits: no urllib3 retries, so a request's
    `_request_timeout` is its whole duration (the default retries a timed-out GET three times)."""
    configuration = copy.deepcopy(api.configuration)
    configuration.retries = 0
    return client.ApiClient(configuration)


def api_claim_reader(api: client.ApiClient, timeout_s: float = API_TIMEOUT_S) -> ClaimReader:
    """Reads claims from the API server within `timeout_s`; a missing claim, a failed read or an
    API server that does not answer is an error naming the claim."""
    bounded = bounded_client(api)

    def read(ref: ClaimRef) -> dict[str, Any]:
        try:
            return RESOURCE_CLAIMS.get(bounded, ref.name, ref.namespace, _request_timeout=timeout_s)
        except client.ApiException as error:
            if error.status == 404:
                raise PrepareError("not_found", f"claim {ref}: not found in the API") from error
            raise PrepareError("api_error", f"claim {ref}: reading it failed: {error.status} {error.reason}") from error
        except HTTPError as error:  # no answer in time, connection refused or reset
            cause = getattr(error, "reason", None) or error
            raise PrepareError(
                "api_error",
                f"claim {ref}: reading it from the API server failed within {timeout_s:g} s "
                f"({type(cause).__name__}: {cause})",
            ) from error

    return read


def api_claim_lister(api: client.ApiClient, timeout_s: float = API_TIMEOUT_S) -> ClaimLister:
    """Lists every ResourceClaim page by page, each page within `timeout_s` (start-up repair)."""
    bounded = bounded_client(api)

    def list_claims() -> list[dict[str, Any]]:
        claims: list[dict[str, Any]] = []
        token: str | None = None
        try:
            for _ in range(MAX_LIST_PAGES):
                page = RESOURCE_CLAIMS.list(bounded, limit=LIST_PAGE, _continue=token, _request_timeout=timeout_s)
                claims += page.get("items", [])
                token = page.get("metadata", {}).get("continue")
                if not token:
                    return claims
        except (client.ApiException, HTTPError) as error:
            raise PrepareError("api_error", f"listing ResourceClaims failed: {error}") from error
        raise PrepareError("api_error", f"listing ResourceClaims: more than {MAX_LIST_PAGES} pages")

    return list_claims


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
    """Prepares and unprepares claims on this node. The claim reader and the published devices
    are plain functions, so the whole protocol runs against plain data in tests."""

    def __init__(
        self,
        read_claim: ClaimReader,
        node_name: str,
        published: PublishedDevices,
        *,
        list_claims: ClaimLister,
        on_failure: FailureReport,
        checkpoint: Checkpoint,
        specs: SpecStore,
        metadata: MetadataStore,
        dev_root: Path,
        cdi_roots: tuple[Path, ...] = CDI_SEARCH_DIRS,
        mig_supported: bool = True,
        on_prepared: PreparedReport = lambda _ref, _devices: None,
        on_unprepared: UnpreparedReport = lambda _ref: None,
        activity: Activity | None = None,
    ) -> None:
        self.activity = activity or Activity()  # the kubelet's calls, which background work yields to
        self.read_claim = read_claim
        self.on_prepared = on_prepared
        self.on_unprepared = on_unprepared
        self.list_claims = list_claims
        self.on_failure = on_failure
        self.node_name = node_name
        self.published = published
        self.checkpoint = checkpoint
        self.specs = specs
        self.metadata = metadata
        self.host = HostDevices(dev_root)
        self.cdi_roots = cdi_roots
        self.mig_supported = mig_supported
        self._locks = ClaimLocks()

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
            self.on_failure(ref, error)
            raise
        finally:
            metrics.PREPARE_SECONDS.labels("prepare").observe(time.perf_counter() - started)

    def _prepare(self, ref: ClaimRef) -> list[PreparedDevice]:
        previous = self._previous_answer(ref)
        if previous is not None:
            return previous
        claim = self.read_claim(ref)
        try:
            plan = self._plan(claim, ref)
        except PrepareError as error:
            error.reserved_for = list(claim.get("status", {}).get("reservedFor", []))
            raise
        answer = self._answer(ref.uid, plan)
        self._commit(ref, answer, spec_text(plan.spec), {m.request: m.document for m in plan.metadata})
        self.on_prepared(ref, plan.devices)
        return answer

    def _previous_answer(self, ref: ClaimRef) -> list[PreparedDevice] | None:
        """The kubelet retries: a completed claim gets the same answer (and its files back if
        they were lost) without reading the claim again."""
        record = self.checkpoint.read().get(ref.uid)
        if record is None or record.state is not ClaimState.PREPARE_COMPLETED:
            return None
        self._restore(record)
        return [PreparedDevice(**device) for device in record.devices]

    def _plan(self, claim: dict[str, Any], ref: ClaimRef) -> _Plan:
        """The claim's devices, their metadata files (attributes as the slice publishes them) and
        the spec that gives a container both."""
        claim_devices = self._claim_devices(claim, ref)
        allocated = [
            AllocatedDevice(d.request, self.node_name, d.device.name, d.device.api.get("attributes", {}))
            for d in claim_devices
        ]
        metadata = claim_metadata(ClaimIdentity.of(claim), allocated, DRIVER_NAME)
        mounts = tuple(
            MetadataMount(m.request, str(self.metadata.path_for(ref.uid, m.request)), m.container_path)
            for m in metadata
        )
        return _Plan(claim_devices, metadata, claim_spec(ref.uid, claim_devices, self.host, mounts))

    def _claim_devices(self, claim: dict[str, Any], ref: ClaimRef) -> list[ClaimDevice]:
        results = our_results(claim, ref, self.node_name)  # validates UID and allocation first
        allocation_config = claim["status"]["allocation"]["devices"].get("config", [])
        published = self.published()
        devices = [self._claim_device(result, published, allocation_config, ref) for result in results]
        self._switch_modes(ref, devices, published)
        return devices

    def _switch_modes(
        self, ref: ClaimRef, devices: list[ClaimDevice], published: Mapping[str, PublishedDevice]
    ) -> None:
        """A GPU out of MIG mode that offers MIG placements and fractions at once (compatibility
        groups) takes the mode of the first claim prepared on it: MIG for a placement, whole-GPU
        for anything else. A claim that needs the other mode while another claim holds the GPU is
        refused: the scheduler's groups never allocate that, so its slice had no groups."""
        held: dict[int, tuple[str, str]] = {}
        for record in self.checkpoint.read().values():
            for prepared in record.devices if record.uid != ref.uid else ():
                device = published.get(prepared["device_name"])
                if device is not None:
                    held.setdefault(device.gpu_index, (_mode(device), f"{record.namespace}/{record.name}"))
        for claim_device in devices:
            device = claim_device.device
            mode, holder = _mode(device), held.get(device.gpu_index)
            if holder is not None and holder[0] != mode:
                raise PrepareError(
                    "mode_conflict",
                    f"claim {ref}: device {device.name} needs GPU {device.gpu_index} in {mode} mode, but claim "
                    f"{holder[1]} holds it in {holder[0]} mode",
                )
            if holder is None and mode == MIG_MODE and not device.gpu.mig_enabled:
                log.info("GPU %d switches to MIG mode for claim %s", device.gpu_index, ref)
            held.setdefault(device.gpu_index, (mode, f"{ref.namespace}/{ref.name}"))

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
                "unknown_device", f"claim {ref}: device {result['device']} is not published by node {self.node_name}"
            )
        if device.kind is DeviceKind.MIG and not self.mig_supported:
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

    def _answer(self, uid: str, plan: _Plan) -> list[PreparedDevice]:
        """Per device: our CDI device, plus the vendor's own CDI device when the host has one
        (it carries the driver libraries and hooks). The first device of each request also
        carries that request's metadata device, where the helper puts it too (draplugin.go
        NodePrepareResources): a container naming the request gets the device and its file."""
        unmounted = {m.request for m in plan.metadata}
        answer = []
        for claim_device in plan.devices:
            request = base_request(claim_device.request)
            ids = [plan.spec.qualified_name(cdi_device_name(uid, claim_device.device.name))]
            if vendor := vendor_device_id(claim_device.gpu, self.cdi_roots):
                ids.append(vendor)
            if request in unmounted:
                ids.append(plan.spec.qualified_name(metadata_device_name(uid, request)))
                unmounted.discard(request)
            device_name = claim_device.device.name
            answer.append(PreparedDevice([request], self.node_name, device_name, ids, claim_device.share_id))
        return answer

    def _commit(
        self, ref: ClaimRef, answer: list[PreparedDevice], text: str, metadata: dict[str, dict[str, Any]]
    ) -> None:
        """Record PrepareStarted, write the metadata files and the spec, record PrepareCompleted:
        a crash between any two steps leaves a state that `reconcile` repairs at start. The fsyncs
        that the order allows to overlap do: the files' content with PrepareStarted (they appear
        only once that is durable), their directory entries with PrepareCompleted (a completed
        claim whose files were lost gets them back from the record). The answer goes out only
        when both are durable."""
        started = ClaimRecord(
            ref.uid, ref.namespace, ref.name, ClaimState.PREPARE_STARTED, [a.__dict__ for a in answer], text, metadata
        )
        recorded = self.checkpoint.submit(lambda records: records.__setitem__(ref.uid, started))
        files = {request: render(document) for request, document in metadata.items()}
        with self.specs.staged(ref.uid, text) as publish, self.metadata.staged(ref.uid, files) as publish_metadata:
            recorded.result()
            _crash_point("after-prepare-started")
            publish_metadata()  # before the spec that mounts them
            publish()
        _crash_point("after-spec-written")

        def complete(records: dict[str, ClaimRecord]) -> int:
            records[ref.uid] = dataclasses.replace(records[ref.uid], state=ClaimState.PREPARE_COMPLETED)
            return _completed(records)

        completed = self.checkpoint.submit(complete)
        self.specs.sync()
        self.metadata.sync(ref.uid)
        metrics.PREPARED_CLAIMS.set(completed.result())
        _crash_point("after-prepare-completed")

    # -- unprepare -----------------------------------------------------------------------------

    def unprepare(self, ref: ClaimRef) -> None:
        """Remove the spec, the metadata files and the record; an unknown claim is already unprepared."""
        started = time.perf_counter()

        known: list[bool] = []

        def forget(records: dict[str, ClaimRecord]) -> int:
            known.append(records.pop(ref.uid, None) is not None)
            return _completed(records)

        try:
            check_uid(ref)
            with self.activity.running(), self._locks.held(ref.uid):
                self.specs.remove(ref.uid)
                self.metadata.remove(ref.uid)
                metrics.PREPARED_CLAIMS.set(self.checkpoint.update(forget))
                if any(known):  # under the claim's lock: a prepare of it again reports after this
                    self.on_unprepared(ref)
        except PrepareError as error:
            metrics.CLAIM_ERRORS.labels("unprepare", error.reason).inc()
            raise
        except OSError as error:
            metrics.CLAIM_ERRORS.labels("unprepare", "internal").inc()
            raise PrepareError("internal", f"claim {ref}: {error}") from error
        finally:
            metrics.PREPARE_SECONDS.labels("unprepare").observe(time.perf_counter() - started)

    # -- start-up repair -------------------------------------------------------------------------

    def _restore(self, record: ClaimRecord) -> bool:
        """Put back the files of a prepared claim that are lost (or not as recorded); True if any was."""
        restored = False
        if record.cdi_spec and not self.specs.exists(record.uid):
            log.info("restoring the CDI spec of prepared claim %s/%s", record.namespace, record.name)
            self.specs.write_text(record.uid, record.cdi_spec)
            restored = True
        files = {request: render(document) for request, document in record.metadata.items()}
        if files and self.metadata.restore(record.uid, files):
            log.info("restoring the device metadata of prepared claim %s/%s", record.namespace, record.name)
            restored = True
        return restored

    def _allocated_here(self, uids: set[str]) -> dict[str, dict[str, Any]] | None:
        """Those of `uids` whose claim is allocated to this node by this driver (from the API);
        None when the API cannot say, so that nothing is deleted on a guess."""
        if not uids:
            return {}
        try:
            claims = self.list_claims()
        except PrepareError as error:
            log.warning("start-up repair: %s; keeping every CDI spec without a record", error)
            return None
        found = {}
        for claim in claims:
            metadata = claim.get("metadata", {})
            ref = ClaimRef(metadata.get("namespace", ""), metadata.get("uid", ""), metadata.get("name", ""))
            if ref.uid not in uids:
                continue
            try:
                our_results(claim, ref, self.node_name)
            except PrepareError:
                continue  # not (or no longer) allocated here: its spec is an orphan
            found[ref.uid] = claim
        return found

    def _rebuilt(self, claim: dict[str, Any]) -> ClaimRecord | None:
        """The record of a claim whose spec is on disk but not in the checkpoint (it was lost or
        corrupted): the answer and the metadata files are derived again from the claim (as
        prepare writes them), the spec text is the file's. A spec written before device metadata
        existed mounts none, so the answer then names none."""
        identity = claim["metadata"]
        ref = ClaimRef(identity["namespace"], identity["uid"], identity["name"])
        try:
            plan = self._plan(claim, ref)
            text = self.specs.read_text(ref.uid)
            mounted = [m for m in plan.metadata if metadata_device_name(ref.uid, m.request) in text]
            plan = dataclasses.replace(plan, metadata=mounted)
        except (PrepareError, OSError) as error:
            log.warning("start-up repair: cannot rebuild the record of %s (%s); its CDI spec is kept", ref, error)
            return None
        answer = [a.__dict__ for a in self._answer(ref.uid, plan)]
        documents = {m.request: m.document for m in plan.metadata}
        return ClaimRecord(ref.uid, ref.namespace, ref.name, ClaimState.PREPARE_COMPLETED, answer, text, documents)

    def reconcile(self) -> dict[str, list[str]]:
        """Repair after a crash or reboot; returns what was done, for logs and tests. A spec without
        a record is deleted only if the API says its claim is not allocated to this node."""
        done: dict[str, list[str]] = {"restored": [], "rolled_back": [], "rebuilt": [], "orphans_removed": []}
        if stale := self.specs.remove_stale_temporaries():
            log.info("start-up repair: removed temporary CDI spec files left by a crash: %s", stale)
        unrecorded = self.specs.claim_uids() - set(self.checkpoint.read())
        allocated = self._allocated_here(unrecorded)  # the API is asked outside the checkpoint lock

        def repair(records: dict[str, ClaimRecord]) -> int:
            for uid, record in list(records.items()):
                if record.state is ClaimState.PREPARE_COMPLETED:
                    if self._restore(record):
                        done["restored"].append(uid)
                else:
                    self.specs.remove(uid)
                    self.metadata.remove(uid)
                    del records[uid]
                    done["rolled_back"].append(uid)
            for uid, claim in (allocated or {}).items():
                if uid not in records and (rebuilt := self._rebuilt(claim)) is not None:
                    records[uid] = rebuilt
                    self._restore(rebuilt)
                    done["rebuilt"].append(uid)
            keep = set(records) | (unrecorded if allocated is None else set(allocated))  # no record rebuilt: files stay
            # Metadata without a spec and a record was never answered (or its spec went with a
            # reboot, and then the kubelet prepares the claim again).
            orphans = set(self.specs.remove_orphans(keep)) | set(self.metadata.remove_orphans(keep))
            done["orphans_removed"] = sorted(orphans)
            return _completed(records)

        metrics.PREPARED_CLAIMS.set(self.checkpoint.update(repair))
        if any(done.values()):
            log.info("start-up repair: %s", done)
        return done


MIG_MODE = "MIG"


def _mode(device: PublishedDevice) -> str:
    """The mode a device needs its GPU in: MIG for a placement, whole-GPU for a GPU, fraction or share."""
    return MIG_MODE if device.kind is DeviceKind.MIG else "whole-GPU"


def _completed(records: dict[str, ClaimRecord]) -> int:
    """Prepared claims, for the gauge; counted inside the update that changed them."""
    return sum(1 for record in records.values() if record.state is ClaimState.PREPARE_COMPLETED)


def spec_store(cdi_dir: Path) -> SpecStore:
    return SpecStore(cdi_dir, CDI_VENDOR, CDI_CLASS)
