"""/healthz's watchdog: stuck only when a request has been in flight longer than the limit, and a
request that fails still leaves the watch."""

from __future__ import annotations

import pytest

from extender.serve.health import Watchdog


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_request_is_stuck_only_once_it_is_older_than_the_limit() -> None:
    clock = Clock()
    watchdog = Watchdog(stuck_after_seconds=10, clock=clock)
    assert watchdog.stuck_for() is None
    with watchdog.tracking():
        clock.now += 10
        assert watchdog.stuck_for() is None, "exactly the limit is not yet stuck"
        clock.now += 5
        assert watchdog.stuck_for() == 15
    assert watchdog.stuck_for() is None


def test_the_oldest_request_decides() -> None:
    clock = Clock()
    watchdog = Watchdog(stuck_after_seconds=10, clock=clock)
    with watchdog.tracking():
        clock.now += 8
        with watchdog.tracking():
            clock.now += 4
            assert watchdog.in_flight() == 2
            assert watchdog.stuck_for() == 12
        assert watchdog.stuck_for() == 12
    assert watchdog.in_flight() == 0


def test_a_failed_request_leaves_no_entry_behind() -> None:
    clock = Clock()
    watchdog = Watchdog(stuck_after_seconds=1, clock=clock)
    with pytest.raises(RuntimeError), watchdog.tracking():
        raise RuntimeError("handler failed")
    clock.now += 60
    assert watchdog.in_flight() == 0 and watchdog.stuck_for() is None
