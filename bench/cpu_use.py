"""What each process of the benchmark plane spent during one workload: CPU seconds from /proc,
and counters from Prometheus text (scheduling attempts, extender answers). On two shared cores a
ratio of throughputs says that something costs; these figures say what does."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float | None:
    """User plus system CPU seconds of `pid`, all its threads; None once it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    # The command name (field 2) may hold spaces; the fields after its closing parenthesis do not.
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS  # utime, stime (fields 14 and 15)


@contextlib.contextmanager
def cpu_use(pids: Mapping[str, int]) -> Iterator[dict[str, float]]:
    """A dictionary filled, when the block ends, with each named process's CPU seconds during it
    (processes gone by then are left out)."""
    before = {name: cpu_seconds(pid) for name, pid in pids.items()}
    spent: dict[str, float] = {}
    yield spent
    for name, pid in pids.items():
        start, end = before[name], cpu_seconds(pid)
        if start is not None and end is not None:
            spent[name] = round(end - start, 2)


def counters(text: str, name: str, labels: tuple[str, ...]) -> dict[str, float]:
    """Counter `name` of Prometheus `text`, summed by the values of `labels` (joined by "/")."""
    totals: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name:
                key = "/".join(sample.labels.get(label, "") for label in labels)
                totals[key] = totals.get(key, 0.0) + sample.value
    return totals


def growth(after: Mapping[str, float], before: Mapping[str, float]) -> dict[str, float]:
    """How much each counter of `after` grew since `before` (those that did not are left out)."""
    return {key: value - before.get(key, 0.0) for key, value in after.items() if value != before.get(key, 0.0)}


@contextlib.contextmanager
def counted(read: Callable[[], dict[str, float]]) -> Iterator[dict[str, float]]:
    """A dictionary filled, when the block ends, with how much each of `read`'s counters grew."""
    before = read()
    grown: dict[str, float] = {}
    yield grown
    grown.update(growth(read(), before))
