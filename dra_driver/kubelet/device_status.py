"""What a prepared claim's devices are, reported in the claim's `status.devices` (KEP-4817), so
`kubectl get resourceclaim -o yaml` shows each device's GPU, type and limits without a shell in the
container. Written by server-side apply with a field manager per node: this node's entries are ours
alone, another driver's or node's are left as they are, and applying an empty list drops ours. Posted
off the kubelet's call path; the claim's RBAC is the fine-grained one (`resourceclaims/driver`,
`associated-node:patch`), so a node's plugin can report only on claims allocated to its node.

Each apply costs the API server a server-side apply and an etcd write, and the plugin a round trip:
applied in bursts beside the kubelet's calls, they doubled the slowest prepares (p99 31 -> 15 ms
without them, `python -m bench prepare`). So reports yield: a claim's latest report waits until no
kubelet call has run for `Deferral.quiet_s`, or, while calls keep coming, until it has waited
`Deferral.most_s` (then they go out as their claims came, one every `Deferral.forced_every_s` at
most)."""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from kubernetes import client
from urllib3.exceptions import HTTPError

from dra_driver.background import DEFERRAL, Deferral, Turns
from dra_driver.kubelet.cdi_edits import ClaimDevice, limits
from dra_driver.kubelet.claim import ClaimRef
from dra_driver.publishing.published import DeviceKind
from nativedra.base.kube.names import DRIVER_NAME
from nativedra.base.kube.resources import RESOURCE_CLAIMS

log = logging.getLogger(__name__)
READY = "Ready"

StatusApplier = Callable[[ClaimRef, list[dict[str, Any]]], None]  # (claim, this node's device entries)
Report = tuple[ClaimRef, list[dict[str, Any]]]
MAX_WAITING = 1024  # claims whose report waits; reports of more are dropped (and logged), not queued


def device_data(claim_device: ClaimDevice) -> dict[str, Any]:
    """The facts a user asks about a prepared device: which GPU, what kind of device, its limits."""
    device = claim_device.device
    data: dict[str, Any] = {"uuid": claim_device.gpu.uuid, "index": claim_device.gpu.index, "type": device.kind.value}
    if device.kind is DeviceKind.MIG:
        data["migProfile"] = device.mig_profile
        data["migPlacement"] = device.mig_start
    allowed = limits(claim_device)
    if allowed.compute_percent is not None:
        data["computePercent"] = allowed.compute_percent
    if allowed.memory_mib is not None:
        data["memoryLimitMiB"] = allowed.memory_mib
    data["sharing"] = claim_device.config.sharing.strategy.value
    return data


def device_entries(devices: list[ClaimDevice], node_name: str, now: datetime | None = None) -> list[dict[str, Any]]:
    """`status.devices` entries for the claim's devices on this node: Ready, with their data."""
    stamp = (now or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")
    entries = []
    for claim_device in devices:
        entry: dict[str, Any] = {
            "driver": DRIVER_NAME,
            "pool": node_name,
            "device": claim_device.device.name,
            "conditions": [
                {
                    "type": READY,
                    "status": "True",
                    "reason": "Prepared",
                    "message": f"prepared by the {DRIVER_NAME} plugin on {node_name}",
                    "lastTransitionTime": stamp,
                }
            ],
            "data": device_data(claim_device),
        }
        if claim_device.share_id:
            entry["shareID"] = claim_device.share_id
        entries.append(entry)
    return entries


def api_status_applier(api: client.ApiClient, node_name: str, timeout_s: float) -> StatusApplier:
    manager = f"{DRIVER_NAME}/{node_name}"

    def apply(ref: ClaimRef, entries: list[dict[str, Any]]) -> None:
        body = {
            "apiVersion": RESOURCE_CLAIMS.api_version,
            "kind": RESOURCE_CLAIMS.kind,
            "metadata": {"name": ref.name, "namespace": ref.namespace, "uid": ref.uid},
            "status": {"devices": entries},
        }
        RESOURCE_CLAIMS.apply_status(api, ref.name, body, ref.namespace, field_manager=manager, timeout_s=timeout_s)

    return apply


class DeviceStatusReports:
    """`prepared` / `unprepared` never block (the kubelet is waiting); `run` applies the waiting
    reports in the background, a claim's latest only (prepared then unprepared before its report
    went out: the clearing one), once the kubelet's calls leave room (see the module). A claim
    deleted meanwhile needs no report; other failures are logged (the status is for humans: prepare
    has already answered)."""

    def __init__(
        self,
        apply: StatusApplier,
        node_name: str,
        idle_for: Callable[[], float] = lambda: math.inf,
        deferral: Deferral = DEFERRAL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.apply = apply
        self.node_name = node_name
        self.turns = Turns(idle_for, deferral, clock)
        self.clock = clock
        self._waiting: OrderedDict[str, tuple[Report, float]] = OrderedDict()  # claim UID -> (report, since)
        self._guard = threading.Lock()
        self._offered = threading.Event()

    def prepared(self, ref: ClaimRef, devices: list[ClaimDevice]) -> None:
        self._offer((ref, device_entries(devices, self.node_name)), "not reported")

    def unprepared(self, ref: ClaimRef) -> None:
        self._offer((ref, []), "not cleared")

    def _offer(self, report: Report, undone: str) -> None:
        uid = report[0].uid
        with self._guard:
            earlier = self._waiting.get(uid)
            if earlier is None and len(self._waiting) >= MAX_WAITING:
                log.warning("device status of claim %s %s: %d reports are waiting", report[0], undone, MAX_WAITING)
                return
            self._waiting[uid] = (report, earlier[1] if earlier else self.clock())  # keeps its place in line
        self._offered.set()

    def drain(self, within_s: float = math.inf) -> None:
        """Apply every waiting report now, for at most `within_s` seconds."""
        deadline = self.clock() + within_s
        while self.clock() < deadline and (report := self._take(force=True)[0]) is not None:
            self._report(report)

    def _take(self, force: bool = False) -> tuple[Report | None, float]:
        """The oldest waiting report if it may go now; else how long until it may."""
        with self._guard:
            if not self._waiting:
                return None, math.inf
            uid, (report, since) = next(iter(self._waiting.items()))
            wait_s = self.turns.wait_s(self.clock() - since)
            if not force and wait_s > 0:
                return None, wait_s
            del self._waiting[uid]
            return report, 0.0

    def run(self, stop: threading.Event) -> None:
        """Until `stop`; then what still waits is applied, within `Deferral.at_stop_s`, so that a
        claim unprepared just before does not keep showing Ready devices."""
        while not stop.is_set():
            report, wait_s = self._take()
            if report is not None:
                self._report(report)
                continue
            self._offered.wait(min(wait_s, 1.0))
            self._offered.clear()
        self.drain(self.turns.deferral.at_stop_s)

    def _report(self, report: Report) -> None:
        ref, entries = report
        try:
            self.apply(ref, entries)
        except client.ApiException as error:
            if error.status not in (404, 409):  # deleted, or re-created with another UID
                log.warning("reporting device status on claim %s failed: %s %s", ref, error.status, error.reason)
        except HTTPError as error:
            log.warning("reporting device status on claim %s failed: %s", ref, error)
        except Exception:  # one bad report must not end the reporting thread
            log.exception("reporting device status on claim %s failed", ref)
