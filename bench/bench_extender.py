"""Extender latency on a busy cluster at 500, 5,000 and 10,000 nodes x 8 GPUs, through the real HTTP app
and the real watch-fed state (`bench.busy_cluster`, one fresh process per size); `run_mixed`: the
same at 5,000 and 10,000 nodes of five GPU products publishing the shipped defaults
(`testkit.mixed_cluster`, bench-results/extender_mixed.json). Real kube-scheduler throughput with
the extender against without it is `bench.bench_scheduler`.

Latency baseline (same run, same process): a JSON encode and decode of the request body the
scheduler sends, the least work any extender must do per call. Every figure also goes to
bench-results/extender.json.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Generator, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kubernetes import client

from bench.busy_cluster import Bounds
from bench.timing import write_results
from nativedra.cluster import ControlPlane

# Calls per figure, and seconds per figure after which a slow one stops at `measure`'s minimum (a
# guard: every figure takes milliseconds a call). 200 calls, so that a p99 is not the slowest
# call alone; each size takes about a minute on 2 cores.
LATENCY_BOUNDS = {
    500: Bounds(calls=200, budget_s=30.0),
    5000: Bounds(calls=200, budget_s=45.0),
    10000: Bounds(calls=200, budget_s=60.0),
}


MIXED_BOUNDS = {5000: Bounds(calls=200, budget_s=60.0), 10000: Bounds(calls=200, budget_s=60.0)}


def latency(count: int, bounds: Bounds, *, mixed: bool = False) -> Generator[str, None, dict[str, Any]]:
    """One size's lines as `bench.busy_cluster` measures them, in an interpreter of its own so its
    RSS is that size's alone; returns its figures."""
    with tempfile.TemporaryDirectory(prefix="nativedra-bench-") as scratch:
        figures = Path(scratch) / "figures.json"
        command = [sys.executable, "-m", "bench.busy_cluster", str(count), "--json", str(figures)]
        command += ["--calls", str(bounds.calls), "--budget", str(bounds.budget_s)] + (["--mixed"] if mixed else [])
        with subprocess.Popen(command, stdout=subprocess.PIPE, text=True) as process:
            assert process.stdout is not None  # stdout=PIPE
            yield from (line.rstrip("\n") for line in process.stdout)
        if process.returncode != 0:
            raise RuntimeError(f"{' '.join(command)} exited with {process.returncode}")
        result: dict[str, Any] = json.loads(figures.read_text())
        return result


def run(_api: client.ApiClient, _plane: ControlPlane) -> Iterator[str]:
    return _sizes("extender", LATENCY_BOUNDS, mixed=False)


def run_mixed(_api: client.ApiClient, _plane: ControlPlane) -> Iterator[str]:
    return _sizes("extender_mixed", MIXED_BOUNDS, mixed=True)


def _sizes(name: str, sizes: dict[int, Bounds], *, mixed: bool) -> Iterator[str]:
    document: dict[str, Any] = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": f"python -m bench {name}",
        "cpus": os.cpu_count(),
        "latency": {},
    }
    for count, bounds in sizes.items():
        document["latency"][str(count)] = yield from latency(count, bounds, mixed=mixed)
    yield f"figures written to {write_results(name, document)}"
