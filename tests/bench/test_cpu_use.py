"""The benchmarks' accounting: CPU seconds from /proc and counters from Prometheus text."""

from __future__ import annotations

import os
import time

from bench.cpu_use import counted, counters, cpu_seconds, cpu_use

TEXT = """# HELP requests_total Requests.
# TYPE requests_total counter
requests_total{verb="filter",path="pass"} 3
requests_total{verb="filter",path="gang"} 2
requests_total{verb="prioritize",path="scored"} 5
# HELP seconds Time.
# TYPE seconds histogram
seconds_sum{verb="filter"} 0.25
seconds_count{verb="filter"} 5
"""


def test_counters_sum_by_the_labels_asked_for() -> None:
    assert counters(TEXT, "requests_total", ("verb", "path")) == {
        "filter/pass": 3.0,
        "filter/gang": 2.0,
        "prioritize/scored": 5.0,
    }
    assert counters(TEXT, "requests_total", ("verb",)) == {"filter": 5.0, "prioritize": 5.0}
    assert counters(TEXT, "seconds_sum", ()) == {"": 0.25}


def test_counted_reports_only_what_grew() -> None:
    values = {"a": 1.0, "b": 2.0}
    with counted(lambda: dict(values)) as grown:
        values["a"] = 4.0
        values["c"] = 1.0
    assert grown == {"a": 3.0, "c": 1.0}


def test_cpu_use_counts_this_process_busy_and_leaves_out_one_gone() -> None:
    with cpu_use({"me": os.getpid(), "gone": 2**22 + 1}) as spent:
        deadline = time.process_time() + 0.2
        while time.process_time() < deadline:
            pass
    assert 0.1 <= spent["me"] <= 5.0
    assert "gone" not in spent
    assert cpu_seconds(2**22 + 1) is None
