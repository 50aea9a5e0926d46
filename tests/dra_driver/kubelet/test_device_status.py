"""What a prepared claim reports in status.devices, and when: once per newly prepared claim (not on
the kubelet's retries), and its entries dropped once unprepared; never blocking the kubelet."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

from kubernetes import client

from dra_driver.background import Activity, Deferral
from dra_driver.kubelet.claim import ClaimRef
from dra_driver.kubelet.device_status import DeviceStatusReports, device_entries
from nativedra.base.kube.names import DRIVER_NAME
from tests.dra_driver.claims import NODE, Node, new_claim
from tests.dra_driver.kubelet.test_cdi_edits import claim_device, mps

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


Applied = list[tuple[str, list[str]]]


def _recorder(applied: Applied) -> Callable[[ClaimRef, list[dict[str, Any]]], None]:
    def apply(ref: ClaimRef, entries: list[dict[str, Any]]) -> None:
        if ref.name == "gone":
            raise client.ApiException(status=404, reason="Not Found")
        applied.append((ref.name, [e["device"] for e in entries]))

    return apply


def test_reports_are_applied_in_the_background_a_claims_latest_only() -> None:
    """Prepared then unprepared before its report went out: one apply, the clearing one; a claim
    deleted meanwhile is no error."""
    applied: Applied = []
    reports = DeviceStatusReports(_recorder(applied), NODE)
    kept, gone, cleared = (ClaimRef("ns", f"uid-{n}", name) for n, name in enumerate(("kept", "gone", "cleared")))
    reports.prepared(kept, [claim_device("gpu-1")])
    reports.prepared(gone, [claim_device("gpu-2")])
    reports.prepared(cleared, [claim_device("gpu-3")])
    assert applied == [], "nothing is applied on the kubelet's call path"
    reports.unprepared(cleared)
    reports.drain()
    assert applied == [("kept", ["gpu-1"]), ("cleared", [])]


@contextlib.contextmanager
def _running(reports: DeviceStatusReports) -> Iterator[None]:
    """The reporting thread, as the plugin runs it."""
    stop = threading.Event()
    thread = threading.Thread(target=reports.run, args=(stop,))
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(5)


def test_reports_wait_while_the_kubelet_calls_and_go_once_it_is_quiet() -> None:
    applied: Applied = []
    activity = Activity()
    reports = DeviceStatusReports(_recorder(applied), NODE, activity.idle_for, Deferral(quiet_s=0.1, most_s=30.0))
    with _running(reports):
        with activity.running():
            reports.prepared(ClaimRef("ns", "uid-1", "kept"), [claim_device("gpu-1")])
            time.sleep(0.3)
            assert applied == [], "a report went out while a kubelet call ran"
        ended = time.monotonic()
        while not applied and time.monotonic() < ended + 5:
            time.sleep(0.01)
        assert applied == [("kept", ["gpu-1"])]
        assert time.monotonic() - ended >= 0.1, "it went before the kubelet had been quiet for quiet_s"


def test_a_report_waits_at_most_most_s_while_calls_keep_coming() -> None:
    applied: Applied = []
    activity = Activity()
    reports = DeviceStatusReports(_recorder(applied), NODE, activity.idle_for, Deferral(quiet_s=0.1, most_s=0.3))
    with activity.running():
        offered = time.monotonic()
        reports.prepared(ClaimRef("ns", "uid-1", "kept"), [claim_device("gpu-1")])
        with _running(reports):
            while not applied and time.monotonic() < offered + 5:
                time.sleep(0.01)
            waited = time.monotonic() - offered
    assert applied == [("kept", ["gpu-1"])] and 0.3 <= waited < 2


def test_the_preparer_reports_new_claims_once_and_known_claims_when_unprepared(node: Node) -> None:
    ref = new_claim(node, devices=("gpu-0-1of2-0",))
    preparer = node.preparer()
    preparer.prepare(ref)
    preparer.prepare(ref)  # the kubelet's retry: nothing new to report
    preparer.unprepare(ref)
    preparer.unprepare(ref)  # unknown by now: nothing to drop
    assert node.reports == [(ref, ["gpu-0-1of2-0"]), (ref, None)]


def test_reports_still_waiting_when_the_plugin_stops_are_applied_before_it_exits() -> None:
    """A claim unprepared just before the plugin stops must not keep showing Ready devices."""
    applied: Applied = []
    activity = Activity()
    reports = DeviceStatusReports(_recorder(applied), NODE, activity.idle_for, Deferral(quiet_s=0.1, most_s=30.0))
    with activity.running():
        reports.unprepared(ClaimRef("ns", "uid-1", "kept"))
        with _running(reports):
            time.sleep(0.2)
            assert applied == []
    assert applied == [("kept", [])]
