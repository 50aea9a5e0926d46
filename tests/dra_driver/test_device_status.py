"""What a prepared claim reports in status.devices, and when: once per newly prepared claim (not on
the kubelet's retries), and its entries dropped once unprepared; never blocking the kubelet."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from kubernetes import client

from dra_driver import DRIVER_NAME
from dra_driver.device_status import DeviceStatusReports, device_entries
from dra_driver.prepare import ClaimRef
from tests.dra_driver.claims import NODE, Node, new_claim
from tests.dra_driver.test_cdi_edits import claim_device, mps

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def test_a_whole_gpu_reports_its_uuid_and_ready() -> None:
    (entry,) = device_entries([claim_device("gpu-3")], NODE, NOW)
    assert (entry["driver"], entry["pool"], entry["device"]) == (DRIVER_NAME, NODE, "gpu-3")
    (ready,) = entry["conditions"]
    assert (ready["type"], ready["status"], ready["lastTransitionTime"]) == ("Ready", "True", "2026-11-30T12:00:00Z")
    assert entry["data"] == {"uuid": claim_device("gpu-3").gpu.uuid, "index": 3, "type": "gpu", "sharing": "Exclusive"}
    assert "shareID" not in entry


def test_a_fraction_reports_its_limits_narrowed_by_mps_config() -> None:
    (plain,) = device_entries([claim_device("gpu-0-1of4-1")], NODE, NOW)
    assert plain["data"]["computePercent"] == 25 and plain["data"]["memoryLimitMiB"] == 20389
    (narrowed,) = device_entries([claim_device("gpu-0-1of4-1", mps(activeThreadPercentage=10))], NODE, NOW)
    assert narrowed["data"]["computePercent"] == 10 and narrowed["data"]["sharing"] == "MPS"


def test_a_mig_placement_reports_its_profile_and_placement() -> None:
    (entry,) = device_entries([claim_device("gpu-6-3g-40gb-4")], NODE, NOW)
    assert entry["data"]["migProfile"] == "3g.40gb" and entry["data"]["migPlacement"] == 4


def test_reports_are_applied_in_the_background_and_a_deleted_claim_is_no_error() -> None:
    applied: list[tuple[ClaimRef, list[dict[str, Any]]]] = []

    def apply(ref: ClaimRef, entries: list[dict[str, Any]]) -> None:
        if ref.name == "gone":
            raise client.ApiException(status=404, reason="Not Found")
        applied.append((ref, entries))

    reports = DeviceStatusReports(apply, NODE)
    kept, gone = ClaimRef("ns", "uid-1", "kept"), ClaimRef("ns", "uid-2", "gone")
    reports.prepared(kept, [claim_device("gpu-1")])
    reports.prepared(gone, [claim_device("gpu-2")])
    assert applied == [], "nothing is applied on the kubelet's call path"
    reports.unprepared(kept)
    reports.drain()
    devices = [(ref.name, [e["device"] for e in entries]) for ref, entries in applied]
    assert devices == [("kept", ["gpu-1"]), ("kept", [])]


def test_the_preparer_reports_new_claims_once_and_known_claims_when_unprepared(node: Node) -> None:
    ref = new_claim(node, devices=("gpu-0-1of2-0",))
    preparer = node.preparer()
    preparer.prepare(ref)
    preparer.prepare(ref)  # the kubelet's retry: nothing new to report
    preparer.unprepare(ref)
    preparer.unprepare(ref)  # unknown by now: nothing to drop
    assert node.reports == [(ref, ["gpu-0-1of2-0"]), (ref, None)]
