"""Timing helpers shared by the benchmarks."""

from __future__ import annotations

import json
import math
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

# Where benchmarks leave their figures as JSON (gitignored): beside the code, wherever it is run from.
RESULTS = Path(__file__).resolve().parent.parent / "bench-results"


@dataclass(frozen=True)
class Timing:
    samples_s: tuple[float, ...]

    @property
    def p50_ms(self) -> float:
        return statistics.median(self.samples_s) * 1000

    @property
    def p99_ms(self) -> float:
        ordered = sorted(self.samples_s)
        return ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))] * 1000

    @property
    def max_ms(self) -> float:
        """The slowest sample: with a handful of samples (e.g. 4 gangs) a p99 says nothing more."""
        return max(self.samples_s) * 1000

    def figures(self, baseline: Timing) -> dict[str, Any]:
        """The timing for a results file, with the ratio `report` prints (p50 over the baseline's p50)."""
        ratio = self.p50_ms / baseline.p50_ms if baseline.p50_ms else None
        return {
            "p50_ms": self.p50_ms,
            "p99_ms": self.p99_ms,
            "max_ms": self.max_ms,
            "samples": len(self.samples_s),
            "ratio": ratio,
        }


def measure(
    action: Callable[[], object],
    repeat: int,
    *,
    before: Callable[[], object] | None = None,
    budget_s: float = math.inf,
    at_least: int = 5,
) -> Timing:
    """`repeat` timed calls of `action`, each after an untimed `before` (e.g. a watch event); calls
    that take seconds stop once `budget_s` is spent and `at_least` samples are in, so a slow
    figure bounds the run instead of the repeat count."""
    samples: list[float] = []
    started = time.perf_counter()
    for _ in range(repeat):
        if len(samples) >= at_least and time.perf_counter() - started > budget_s:
            break
        if before is not None:
            before()
        start = time.perf_counter()
        action()
        samples.append(time.perf_counter() - start)
    return Timing(tuple(samples))


def report(name: str, subject: Timing, baseline: Timing, baseline_name: str, extra: str = "") -> str:
    ratio = subject.p50_ms / baseline.p50_ms if baseline.p50_ms else float("inf")
    line = (
        f"{name:<44} p50 {subject.p50_ms:9.2f} ms  p99 {subject.p99_ms:9.2f} ms  "
        f"= {ratio:7.2f} x {baseline_name} ({baseline.p50_ms:.2f} ms)"
    )
    return f"{line}  {extra}".rstrip()


def write_results(name: str, document: dict[str, Any]) -> Path:
    """`document` as bench-results/<name>.json, for comparing runs without parsing the printed lines,
    with when, how and on how many CPUs it ran unless it says so itself (the docs pages show them)."""
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{name}.json"
    stamp = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": f"python -m bench {name}",
        "cpus": os.cpu_count(),
    }
    path.write_text(json.dumps({**stamp, **document}, indent=2) + "\n")
    return path
