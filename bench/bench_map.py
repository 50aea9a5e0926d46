"""`nativedra map`'s own cost on a busy cluster of 500 and 5,000 nodes (`python -m bench.bench_map`).

The cluster is `testkit.builders.busy_cluster` (8 A100s a node, 70% of nodes running 1-GPU pods,
10% in bound gangs, 20 pending 16 x 8 gangs that require a rack), decoded into the extender's
ClusterState as its informers decode a LIST. Timed: the extender's plan from scratch, the map built
from the objects, and the 80-column report; the LIST itself is the API server's and the network's,
measured for the command end to end in e2e/test_map.py on a small cluster. Each size runs in a fresh
interpreter, so its RSS is that size's alone. Figures go to bench-results/map.json.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import UTC, datetime
from typing import Any

from bench.busy_cluster import _rss_mib, listed
from bench.timing import write_results
from extender.plan.config import RACK_LABEL, ExtenderConfig
from nativedra.map.read import reading_of
from nativedra.map.report import render_report

SIZES = (500, 5000)


def measure(count: int) -> dict[str, Any]:
    state, _, _ = listed(count)
    started = time.monotonic()
    reading = reading_of(state, ExtenderConfig())
    read_s = time.monotonic() - started
    started = time.monotonic()
    text = render_report(reading.cluster, reading.gangs, reading.reservations, level=RACK_LABEL, width=80)
    render_s = time.monotonic() - started
    return {
        "nodes": count,
        "plan_s": round(reading.seconds["plan"], 3),
        "map_s": round(reading.seconds["map"], 3),
        "report_s": round(render_s, 3),
        "total_s": round(read_s + render_s, 3),
        "lines": len(text.splitlines()),
        "widest": max(len(line) for line in text.splitlines()),
        "rss_mib": round(_rss_mib()),
    }


def main() -> int:
    if len(sys.argv) == 2:
        print(json.dumps(measure(int(sys.argv[1]))))
        return 0
    figures = []
    for count in SIZES:
        answer = subprocess.run(
            [sys.executable, "-m", "bench.bench_map", str(count)], capture_output=True, text=True, check=True
        )
        figure = json.loads(answer.stdout.splitlines()[-1])
        figures.append(figure)
        print(
            f"{count} nodes: plan {figure['plan_s']} s, map {figure['map_s']} s, report {figure['report_s']} s "
            f"(total {figure['total_s']} s), {figure['lines']} lines, widest {figure['widest']}, "
            f"RSS {figure['rss_mib']} MiB"
        )
    document = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": "python -m bench.bench_map",
        "cpus": os.cpu_count(),
        "sizes": figures,
    }
    print(f"figures written to {write_results('map', document)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
