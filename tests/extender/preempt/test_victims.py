"""Victim choice against brute force: on small random cases the exact search finds a set of the
least cost in DefaultPreemption's order, and the reprieve method (past the search's budget) a set
that fits and loses no unit."""

from __future__ import annotations

import itertools
import random

import pytest

from extender.preempt.victims import NOTHING, PRIORITY_OFFSET, Cost, Unit, cheapest, cost_of


def _case(seed: int) -> tuple[list[Unit], dict[str, int], dict[str, int], int]:
    """Units, each freeing some devices; budgets; the devices the preemptor needs."""
    rng = random.Random(seed)  # noqa: S311 - reproducible cases, not secrets
    units = []
    frees = {}
    for index in range(rng.randint(1, 8)):
        pods = rng.randint(1, 3)
        key = f"u{index}"
        budgets = ((f"pdb{rng.randint(0, 1)}", rng.randint(1, pods)),) if rng.random() < 0.3 else ()
        priorities = tuple(rng.choice((-5, 0, 10, 100)) for _ in range(pods))
        units.append(
            Unit(key, tuple(f"ns/{key}-{p}" for p in range(pods)), priorities, rng.choice((1.0, 2.0, 3.0)), budgets)
        )
        frees[key] = rng.randint(1, 4)
    allowed = {"pdb0": rng.randint(0, 2), "pdb1": rng.randint(0, 1)}
    need = rng.randint(1, sum(frees.values()) + 1)
    return units, frees, allowed, need


def _fits(units: list[Unit], frees: dict[str, int], need: int):  # type: ignore[no-untyped-def]
    def fits(chosen: frozenset[int]) -> frozenset[int] | None:
        return chosen if sum(frees[units[i].key] for i in chosen) >= need else None

    return fits


def _brute_force(units: list[Unit], frees: dict[str, int], allowed: dict[str, int], need: int) -> Cost | None:
    fits = _fits(units, frees, need)
    costs = [
        cost_of(units, frozenset(chosen), allowed)
        for size in range(1, len(units) + 1)
        for chosen in itertools.combinations(range(len(units)), size)
        if fits(frozenset(chosen)) is not None
    ]
    return min(costs) if costs else None


@pytest.mark.parametrize("seed", range(300))
def test_the_exact_search_finds_a_set_of_least_cost(seed: int) -> None:
    units, frees, allowed, need = _case(seed)
    choice = cheapest(units, allowed, _fits(units, frees, need))
    best = _brute_force(units, frees, allowed, need)
    if best is None:
        assert choice is None
        return
    assert choice is not None and choice.exact
    assert choice.cost == best == cost_of(units, choice.chosen, allowed)
    assert choice.placement == choice.chosen


@pytest.mark.parametrize("seed", range(300))
def test_past_its_budget_the_reprieve_method_leaves_a_set_that_fits_and_loses_no_unit(seed: int) -> None:
    units, frees, allowed, need = _case(seed)
    fits = _fits(units, frees, need)
    choice = cheapest(units, allowed, fits, exact_tests=0)
    if _brute_force(units, frees, allowed, need) is None:
        assert choice is None
        return
    assert choice is not None
    assert fits(choice.chosen) is not None
    assert all(fits(choice.chosen - {i}) is None for i in choice.chosen)


def test_nothing_is_chosen_when_the_preemptor_fits_already_or_never_would() -> None:
    units = [Unit("a", ("ns/a",), (0,), 1.0)]
    assert cheapest(units, {}, lambda chosen: chosen) is None  # fits with no eviction
    assert cheapest(units, {}, lambda chosen: None) is None  # fits with none
    assert cheapest([], {}, lambda chosen: chosen) is None


def test_the_order_is_violations_then_highest_then_sum_then_count_then_latest_start() -> None:
    low_old = Unit("low-old", ("ns/a",), (1,), started=1.0)
    low_new = Unit("low-new", ("ns/b",), (1,), started=5.0)
    mid = Unit("mid", ("ns/c",), (2,), started=1.0)
    two_low = Unit("two", ("ns/d", "ns/e"), (0, 0), started=1.0)
    covered = Unit("covered", ("ns/f",), (0,), started=1.0, budgets=(("ns/pdb", 1),))
    units = [low_old, low_new, mid, two_low, covered]

    def cost(*keys: str) -> Cost:
        return cost_of(units, frozenset(i for i, u in enumerate(units) if u.key in keys), {"ns/pdb": 0})

    assert cost("covered") > cost("mid")  # a budget violated outweighs a higher priority
    assert cost("mid") > cost("low-old")  # the lower highest priority wins
    assert cost("low-old") < cost("low-old", "two")
    assert cost("two") < cost("low-old")  # two pods at 0 beat one at 1: highest priority first
    assert cost("low-new") < cost("low-old")  # same priority and count: the later start is cheaper
    assert cost("low-old").total == 1 + PRIORITY_OFFSET
    assert cost() == NOTHING


def test_a_single_fitting_unit_beats_several_cheaper_ones_only_by_the_order() -> None:
    """Two pods at priority 0 against one at priority 5: the lower highest priority wins although
    it evicts more pods, as DefaultPreemption picks."""
    units = [Unit("high", ("ns/h",), (5,), 1.0), Unit("a", ("ns/a",), (0,), 1.0), Unit("b", ("ns/b",), (0,), 1.0)]
    frees = {"high": 2, "a": 1, "b": 1}
    choice = cheapest(units, {}, _fits(units, frees, 2))
    assert choice is not None
    assert {units[i].key for i in choice.chosen} == {"a", "b"}


def test_with_a_bound_the_exact_search_answers_none_when_nothing_here_is_cheaper() -> None:
    units = [Unit("a", ("ns/a",), (0,), 1.0), Unit("b", ("ns/b",), (5,), 1.0)]
    frees = {"a": 1, "b": 1}
    found = cheapest(units, {}, _fits(units, frees, 1))
    assert found is not None and found.chosen == frozenset({0})
    assert cheapest(units, {}, _fits(units, frees, 1), bound=found.cost) is None
    cheaper_elsewhere = cost_of(units, frozenset({0}), {})
    assert cheapest(units, {}, _fits(units, frees, 2), bound=cheaper_elsewhere) is None
    assert cheapest(units, {}, _fits(units, frees, 2), bound=cost_of(units, frozenset({0, 1}), {})) is None
    pricier = Cost(1, 0, 0, 0, 0.0)  # a budget violated: anything without one is cheaper
    assert cheapest(units, {}, _fits(units, frees, 2), bound=pricier) is not None
