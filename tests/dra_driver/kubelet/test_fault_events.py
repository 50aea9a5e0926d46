"""A GPU's new fault is told, once, on the claims prepared with its devices and on their pods, with
the effect the pods get; other GPUs' claims hear nothing."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import yaml
from prometheus_client import REGISTRY

from dra_driver.discovery.simulated import SimulatedBackend
from dra_driver.errors import PrepareError
from dra_driver.kubelet.checkpoint import ClaimRecord, ClaimState
from dra_driver.kubelet.claim import ClaimRef
from dra_driver.kubelet.fault_events import FaultEvents
from dra_driver.publishing.node_devices import NodeDevices
from dra_driver.publishing.publish_config import PublishConfig


def _record(name: str, *devices: str) -> ClaimRecord:
    answer = [
        {"request_names": ["gpu"], "pool_name": "node-a", "device_name": device, "cdi_device_ids": []}
        for device in devices
    ]
    return ClaimRecord(str(uuid.uuid4()), "team-a", name, ClaimState.PREPARE_COMPLETED, answer)


def _pods(ref: ClaimRef) -> dict[str, Any]:
    if ref.name == "gone":
        raise PrepareError("not_found", f"claim {ref}: not found in the API")
    return {"status": {"reservedFor": [{"resource": "pods", "name": f"{ref.name}-pod", "uid": "u"}]}}


def _told(tmp_path: Path, effect: str, faults: list[dict[str, Any]]) -> list[dict[str, Any]]:
    fault_file = tmp_path / "faults.yaml"
    devices = NodeDevices(SimulatedBackend("h100-8x", fault_file), PublishConfig(fatal_fault_effect=effect))
    records = {r.uid: r for r in (_record("on-3", "gpu-3-1of2-1"), _record("on-4", "gpu-4"), _record("gone", "gpu-3"))}
    posted: list[dict[str, Any]] = []
    events = FaultEvents(devices, lambda: records, _pods, lambda _ns, body: posted.append(body), "node-a")
    events.check(devices.discover())  # the healthy start: nothing to tell
    fault_file.write_text(yaml.safe_dump({"faults": faults}))
    events.check(devices.discover())
    events.check(devices.discover())  # the same fault again: told once
    return posted


def _pods_told() -> float:
    return sum(
        REGISTRY.get_sample_value("nativedra_gpu_fault_pods_total", {"effect": e}) or 0
        for e in ("NoExecute", "NoSchedule")
    )


def test_a_fatal_fault_is_told_on_the_claims_and_pods_using_the_gpu(tmp_path: Path) -> None:
    before = REGISTRY.get_sample_value("nativedra_gpu_faults_total", {"reason": "xid-79", "fatal": "true"}) or 0
    posted = _told(tmp_path, "NoExecute", [{"gpu": 3, "xid": 79}])
    told = sorted((e["involvedObject"]["kind"], e["involvedObject"]["name"]) for e in posted)
    # the claim whose API read failed is still told; a claim on another GPU is not
    assert told == [("Pod", "on-3-pod"), ("ResourceClaim", "gone"), ("ResourceClaim", "on-3")]
    message = posted[0]["message"]
    assert "GPU 3 (" in message and "XID 79 (GPU has fallen off the bus) (fatal)" in message
    assert "gpu.nativedra.dev/unhealthy=xid-79:NoExecute" in message and "evicts the pods" in message
    assert {e["reason"] for e in posted} == {"GPUFault"} and {e["type"] for e in posted} == {"Warning"}
    after = REGISTRY.get_sample_value("nativedra_gpu_faults_total", {"reason": "xid-79", "fatal": "true"})
    assert after == before + 1


def test_a_non_fatal_xid_says_the_pods_keep_running(tmp_path: Path) -> None:
    before = _pods_told()
    posted = _told(tmp_path, "NoExecute", [{"gpu": 3, "xid": 13}])
    assert posted and all("xid-13:NoSchedule" in e["message"] and "keep running" in e["message"] for e in posted)
    assert _pods_told() == before + 1
