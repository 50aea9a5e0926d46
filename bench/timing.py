"""Timing helpers shared by the benchmarks."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass


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


def measure(action: Callable[[], object], repeat: int) -> Timing:
    samples = []
    for _ in range(repeat):
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
