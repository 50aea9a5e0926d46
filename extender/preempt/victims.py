"""Which lower-priority units to evict so a preemptor fits: the cheapest set in kube-scheduler's
DefaultPreemption order. Pure: it knows units, budgets and a fit test, not pods or nodes.

The order (`pkg/scheduler/framework/preemption`): fewest PodDisruptionBudget violations, then the
lowest highest-priority victim, then the smallest sum of priorities (each shifted by 2^31 so all
are positive), then the fewest pods, then the latest start among the highest-priority victims.

A unit is evicted whole: one pod, or every running member of a gang, since half a gang is useless.
Small searches are exact: sets are tried cheapest first, and as adding a unit always raises the
priority sum, the first set that fits is the cheapest. Past a budget of fit tests, the scheduler's
own method takes over: evict every unit up to the lowest priority that makes room, then reprieve
units, most important first, while the preemptor still fits. What is left loses no unit and fits.
"""

from __future__ import annotations

import heapq
import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Generic, TypeVar

PRIORITY_OFFSET = 2**31  # MaxInt32 + 1, as the scheduler adds before summing
EXACT_FIT_TESTS = 2_000  # fit tests one exact search may spend before the reprieve method takes over
EXACT_UNITS = 24  # more candidate units than this: the reprieve method at once (the queue grows with them)

Placement = TypeVar("Placement")


@dataclass(frozen=True)
class Unit:
    """Pods evicted together: one pod, or a running gang's placed members."""

    key: str
    pods: tuple[str, ...]  # namespace/name
    priorities: tuple[int, ...]  # one per pod
    started: float  # the earliest start among its pods, unix seconds
    budgets: tuple[tuple[str, int], ...] = ()  # (PodDisruptionBudget, pods of this unit it covers)

    @cached_property
    def highest(self) -> int:
        return max(self.priorities)

    @cached_property
    def total(self) -> int:
        """Its share of a set's priority sum."""
        return sum(p + PRIORITY_OFFSET for p in self.priorities)


@dataclass(frozen=True, order=True)
class Cost:
    """Lower is better, field by field."""

    violations: int
    highest: int
    total: int
    pods: int
    latest_start: float  # minus the earliest start of the highest-priority units: later is cheaper


NOTHING = Cost(0, -PRIORITY_OFFSET, 0, 0, -math.inf)


def cost_of(units: Sequence[Unit], chosen: frozenset[int], allowed: Mapping[str, int]) -> Cost:
    """The cost of evicting `chosen` (indices into `units`); `allowed` is each budget's
    disruptionsAllowed."""
    if not chosen:
        return NOTHING
    covered: Counter[str] = Counter()
    for index in chosen:
        for budget, pods in units[index].budgets:
            covered[budget] += pods
    violations = sum(max(0, pods - allowed.get(budget, 0)) for budget, pods in covered.items())
    highest = max(units[i].highest for i in chosen)
    total = sum(units[i].total for i in chosen)
    pods = sum(len(units[i].pods) for i in chosen)
    earliest = min(units[i].started for i in chosen if units[i].highest == highest)
    return Cost(violations, highest, total, pods, -earliest)


@dataclass(frozen=True)
class Choice(Generic[Placement]):
    chosen: frozenset[int]
    cost: Cost
    placement: Placement
    exact: bool


class _OutOfTestsError(Exception):
    pass


class _Tests(Generic[Placement]):
    """Counts fit tests and remembers their answers, so no set is tested twice."""

    def __init__(self, fits: Callable[[frozenset[int]], Placement | None], limit: int) -> None:
        self.fits = fits
        self.limit = limit
        self.spent = 0
        self.known: dict[frozenset[int], Placement | None] = {}

    def __call__(self, chosen: frozenset[int], *, counted: bool = True) -> Placement | None:
        if chosen not in self.known:
            if counted and self.spent >= self.limit:
                raise _OutOfTestsError
            self.spent += 1
            self.known[chosen] = self.fits(chosen)
        return self.known[chosen]


def cheapest(
    units: Sequence[Unit],
    allowed: Mapping[str, int],
    fits: Callable[[frozenset[int]], Placement | None],
    *,
    exact_tests: int = EXACT_FIT_TESTS,
    exact_units: int = EXACT_UNITS,
    bound: Cost | None = None,
) -> Choice[Placement] | None:
    """The cheapest set of units whose eviction lets the preemptor fit, with where it then goes;
    None when even evicting every unit leaves no room (or the preemptor fits without evicting).
    With `bound` (the cost of a set found elsewhere), the exact search also answers None once it
    knows no set here costs less."""
    tests = _Tests(fits, exact_tests)
    everything = frozenset(range(len(units)))
    if not units or tests(everything, counted=False) is None or tests(frozenset(), counted=False) is not None:
        return None
    if len(units) > exact_units:
        return _reprieved(units, allowed, tests)
    try:
        return _best_first(units, allowed, tests, bound)
    except _OutOfTestsError:
        return _reprieved(units, allowed, tests)


def _best_first(
    units: Sequence[Unit], allowed: Mapping[str, int], tests: _Tests[Placement], bound: Cost | None
) -> Choice[Placement] | None:
    """Sets in order of cost; each set is reached once, from the set without its last index. A set
    whose every extension (all later indices added) does not fit has no descendant that fits."""
    queue: list[tuple[Cost, tuple[int, ...]]] = [(NOTHING, ())]
    while queue:
        cost, indices = heapq.heappop(queue)
        if bound is not None and cost >= bound:
            return None  # every set left costs as much or more: nothing here beats the bound
        chosen = frozenset(indices)
        placement = tests(chosen)
        if placement is not None:
            return Choice(chosen, cost, placement, exact=True)
        start = indices[-1] + 1 if indices else 0
        if indices and tests(chosen | frozenset(range(start, len(units)))) is None:
            continue
        for index in range(start, len(units)):
            grown = chosen | {index}
            heapq.heappush(queue, (cost_of(units, grown, allowed), (*indices, index)))
    return None  # not reached without a bound: the full set fits, and no set on the way to it is cut


def _reprieved(units: Sequence[Unit], allowed: Mapping[str, int], tests: _Tests[Placement]) -> Choice[Placement]:
    """Every unit up to the lowest priority level that makes room, then each reprieved, the most
    important first (those a budget covers first, then higher priority, then earlier start),
    while the preemptor still fits."""
    chosen = frozenset(range(len(units)))
    placement = tests(chosen, counted=False)
    for level in sorted({unit.highest for unit in units}):
        below = frozenset(i for i, unit in enumerate(units) if unit.highest <= level)
        found = tests(below, counted=False)
        if found is not None:
            chosen, placement = below, found
            break
    order = sorted(chosen, key=lambda i: (not units[i].budgets, -units[i].highest, units[i].started, i))
    for index in order:
        trial = chosen - {index}
        found = tests(trial, counted=False)
        if found is not None:
            chosen, placement = trial, found
    if placement is None:  # not reached: `cheapest` tried the full set first
        raise ValueError("no set of units makes room")
    return Choice(chosen, cost_of(units, chosen, allowed), placement, exact=False)
