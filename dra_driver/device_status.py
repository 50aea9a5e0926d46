"""What a prepared claim's devices are, reported in the claim's `status.devices` (KEP-4817), so
`kubectl get resourceclaim -o yaml` shows each device's GPU, type and limits without a shell in the
container. Written by server-side apply with a field manager per node: this node's entries are ours
alone, another driver's or node's are left as they are, and applying an empty list drops ours. Posted
off the kubelet's call path; the claim's RBAC is the fine-grained one (`resourceclaims/driver`,
`associated-node:patch`), so a node's plugin can report only on claims allocated to its node."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from kubernetes import client
from urllib3.exceptions import HTTPError

from dra_driver import DRIVER_NAME
from dra_driver.background import BackgroundQueue
from dra_driver.cdi_edits import ClaimDevice, limits
from dra_driver.prepare import ClaimRef
from dra_driver.published import DeviceKind
from kube.resources import RESOURCE_CLAIMS

log = logging.getLogger(__name__)
READY = "Ready"

StatusApplier = Callable[[ClaimRef, list[dict[str, Any]]], None]  # (claim, this node's device entries)


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
    """`prepared` / `unprepared` never block (the kubelet is waiting); `run` applies the queued
    reports in the background. A claim deleted meanwhile needs no report; other failures are
    logged (the status is for humans: prepare has already answered)."""

    def __init__(self, apply: StatusApplier, node_name: str) -> None:
        self.apply = apply
        self.node_name = node_name
        self._queue: BackgroundQueue[tuple[ClaimRef, list[dict[str, Any]]]] = BackgroundQueue(self._report, 0.2)

    def prepared(self, ref: ClaimRef, devices: list[ClaimDevice]) -> None:
        self._queue.offer((ref, device_entries(devices, self.node_name)), f"device status of claim {ref} not reported")

    def unprepared(self, ref: ClaimRef) -> None:
        self._queue.offer((ref, []), f"device status of claim {ref} not cleared")

    def drain(self) -> None:
        self._queue.drain()

    def run(self, stop: threading.Event) -> None:
        self._queue.run(stop)

    def _report(self, item: tuple[ClaimRef, list[dict[str, Any]]]) -> None:
        ref, entries = item
        try:
            self.apply(ref, entries)
        except client.ApiException as error:
            if error.status not in (404, 409):  # deleted, or re-created with another UID
                log.warning("reporting device status on claim %s failed: %s %s", ref, error.status, error.reason)
        except HTTPError as error:
            log.warning("reporting device status on claim %s failed: %s", ref, error)
