"""The version matrix's reading of pytest's JUnit report and its per-row verdicts."""

from __future__ import annotations

from pathlib import Path

from tools.matrix import ROWS, Outcome, parse_junit, summary

JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest">
<testcase classname="e2e.test_smoke" name="test_real_scheduler_allocates_a_device_from_a_slice" time="1.0"/>
<testcase classname="e2e.test_plugin_slices" name="test_consumable_share_allocates_a_10gi_share" time="60">
<failure message="timed out">...</failure></testcase>
<testcase classname="e2e.test_kubelet_plugin"
 name="test_prepare_and_unprepare_a_claim_the_real_scheduler_allocated[v1]">
<error message="fixture">...</error></testcase>
<testcase classname="e2e.test_extender" name="test_two_gangs_deadlock_without_the_extender_and_not_with_it">
<skipped message="no"/></testcase>
</testsuite></testsuites>
"""


def test_failures_and_errors_count_as_failed_and_rows_say_how_many(tmp_path: Path) -> None:
    report = tmp_path / "v1.34.4.xml"
    report.write_text(JUNIT)
    outcome = Outcome("v1.34.4", 120.0, parse_junit(report))
    assert outcome.results == {
        "test_smoke.py::test_real_scheduler_allocates_a_device_from_a_slice": "passed",
        "test_plugin_slices.py::test_consumable_share_allocates_a_10gi_share": "failed",
        "test_kubelet_plugin.py::test_prepare_and_unprepare_a_claim_the_real_scheduler_allocated[v1]": "failed",
        "test_extender.py::test_two_gangs_deadlock_without_the_extender_and_not_with_it": "skipped",
    }
    assert outcome.row(ROWS["shares"]) == "1 of 1 failed"
    assert outcome.row(ROWS["whole GPUs"]) == "1 of 2 failed"
    assert outcome.row(ROWS["gangs"]) == "skipped"
    assert outcome.row(ROWS["MIG"]) == "not run"
    text = summary([outcome])
    assert "v1.34.4         1      2       1     2.0" in text
    assert "  test_plugin_slices.py::test_consumable_share_allocates_a_10gi_share" in text
