"""Tells the pods on a GPU that has just failed. A Warning event goes on each claim prepared with one
of the GPU's devices and on the pods it is reserved for (`kubectl describe pod` shows it), naming
the GPU, the fault and what its taint does to them: with NoExecute the kube-controller-manager
evicts them, with NoSchedule they keep running on it. Faults seen and pods told are counted."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

from kubernetes import client
from urllib3.exceptions import HTTPError

from dra_driver.errors import PrepareError
from dra_driver.faults import taint_effect
from dra_driver.inventory import Fault, Gpu, Inventory
from dra_driver.kubelet.checkpoint import ClaimRecord
from dra_driver.kubelet.claim import ClaimReader, ClaimRef, PreparedDevice
from dra_driver.kubelet.events import EventPoster, involved_objects, warning_event
from dra_driver.metrics import FAULT_POD_EVENTS, GPU_FAULTS
from dra_driver.publishing.node_devices import DeviceSnapshot, NodeDevices
from dra_driver.publishing.published import PublishedDevice
from dra_driver.publishing.slices import UNHEALTHY_TAINT_KEY

log = logging.getLogger(__name__)
REASON = "GPUFault"
CHECK_EVERY_S = 1.0


def new_faults(before: Inventory | None, after: Inventory) -> list[tuple[Gpu, Fault]]:
    """GPUs of `after` whose fault is new since `before` (every faulty one when there was none)."""
    earlier = before.by_index() if before is not None else {}
    found = []
    for gpu in after.gpus:
        fault = gpu.tainting_fault
        if fault is not None and (gpu.index not in earlier or earlier[gpu.index].tainting_fault != fault):
            found.append((gpu, fault))
    return found


def claims_on(records: Mapping[str, ClaimRecord], devices: Mapping[str, PublishedDevice], index: int) -> list[ClaimRef]:
    """The prepared claims that hold a device of GPU `index`."""
    refs = []
    for record in records.values():
        names = {PreparedDevice(**device).device_name for device in record.devices}
        if any(name in devices and devices[name].gpu_index == index for name in names):
            refs.append(ClaimRef(record.namespace, record.uid, record.name))
    return sorted(refs, key=str)


def fault_message(gpu: Gpu, fault: Fault, node_name: str, effect: str) -> str:
    """What the pods are told: which GPU, what fault, and what its taint does to them."""
    what = "fatal" if fault.fatal else "not fatal"
    then = (
        "the kube-controller-manager evicts the pods using it"
        if effect == "NoExecute"
        else "no new claim is given it; pods already using it keep running"
    )
    return (
        f"GPU {gpu.index} ({gpu.uuid}) on node {node_name}: {fault.description or fault.reason} ({what}); "
        f"its devices are tainted {UNHEALTHY_TAINT_KEY}={fault.reason}:{effect}: {then}"
    )


class FaultEvents:
    """Watches this node's device snapshots and reports each GPU's new fault once."""

    def __init__(
        self,
        devices: NodeDevices,
        records: Callable[[], Mapping[str, ClaimRecord]],
        read_claim: ClaimReader,
        post: EventPoster,
        node_name: str,
    ) -> None:
        self.devices = devices
        self.records = records
        self.read_claim = read_claim
        self.post = post
        self.node_name = node_name
        self._seen: Inventory | None = None

    def run(self, stop: threading.Event) -> None:
        self._seen = self.devices.current().inventory  # faults present at start were told before a restart
        while not stop.is_set():
            with self.devices.changed:
                self.devices.changed.wait(CHECK_EVERY_S)
            try:
                self.check(self.devices.current())
            except Exception:
                log.exception("reporting GPU faults failed; trying again")

    def check(self, snapshot: DeviceSnapshot) -> None:
        if snapshot.inventory is self._seen:
            return
        faulty = new_faults(self._seen, snapshot.inventory)
        self._seen = snapshot.inventory
        for gpu, fault in faulty:
            self._report(gpu, fault, snapshot.devices)

    def _report(self, gpu: Gpu, fault: Fault, devices: Mapping[str, PublishedDevice]) -> None:
        GPU_FAULTS.labels(fault.reason, str(fault.fatal).lower()).inc()
        effect = taint_effect(fault, self.devices.config.fatal_fault_effect)
        message = fault_message(gpu, fault, self.node_name, effect)
        log.error("%s", message)
        for ref in claims_on(self.records(), devices, gpu.index):
            try:
                reserved_for = (self.read_claim(ref).get("status") or {}).get("reservedFor") or []
            except PrepareError as error:
                log.warning("GPU %d fault: %s", gpu.index, error)
                reserved_for = []
            for involved in involved_objects(ref.namespace, ref.name, ref.uid, reserved_for):
                self._post(ref.namespace, warning_event(involved, REASON, message, self.node_name))
                if involved["kind"] == "Pod":
                    FAULT_POD_EVENTS.labels(effect).inc()

    def _post(self, namespace: str, body: dict[str, Any]) -> None:
        try:
            self.post(namespace, body)
        except (client.ApiException, HTTPError) as error:
            log.warning("posting %s on %s failed: %s", REASON, body["involvedObject"]["name"], error)
