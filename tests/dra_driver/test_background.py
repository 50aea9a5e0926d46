"""Background work never makes the kubelet wait: a full queue drops (and says what), a drain does
everything queued in order, and Activity tells how long the kubelet has been quiet."""

from __future__ import annotations

import itertools
import logging
import threading
import time

import pytest

from dra_driver.background import MAX_QUEUED, Activity, BackgroundQueue, Deferral, Turns


def test_a_full_queue_drops_without_blocking_and_names_what_was_dropped(caplog: pytest.LogCaptureFixture) -> None:
    done: list[int] = []
    work = BackgroundQueue(done.append, period_s=60)
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="dra_driver.background"):
        for item in range(MAX_QUEUED + 3):
            work.offer(item, dropped=f"status of claim {item}")
    assert time.monotonic() - started < 1, "offer must never wait for room"
    dropped = [r.getMessage() for r in caplog.records]
    assert dropped == [f"status of claim {item}: queue full" for item in range(MAX_QUEUED, MAX_QUEUED + 3)]
    work.drain()
    assert done == list(range(MAX_QUEUED)), "what was queued is done once, in order"
    work.drain()
    assert done == list(range(MAX_QUEUED))


def test_room_freed_by_a_drain_is_used_again() -> None:
    done: list[int] = []
    work = BackgroundQueue(done.append, period_s=60)
    for item in range(MAX_QUEUED + 1):
        work.offer(item, dropped="x")
    work.drain()
    work.offer(-1, dropped="x")
    work.drain()
    assert done[-1] == -1 and len(done) == MAX_QUEUED + 1


def test_run_drains_every_period_until_stopped() -> None:
    done: list[str] = []
    drained = threading.Event()

    def work(item: str) -> None:
        done.append(item)
        drained.set()

    queue = BackgroundQueue(work, period_s=0.01)
    stop = threading.Event()
    thread = threading.Thread(target=queue.run, args=(stop,))
    thread.start()
    try:
        queue.offer("report", dropped="report")
        assert drained.wait(5)
    finally:
        stop.set()
        thread.join(5)
    assert done == ["report"] and not thread.is_alive()


def test_activity_is_not_idle_while_a_call_runs_and_counts_from_the_last_end() -> None:
    now = [10.0]
    activity = Activity(clock=lambda: now[0])
    assert activity.idle_for() == float("inf"), "no call yet: idle since ever"
    with activity.running():
        with activity.running():
            now[0] = 12.0
        now[0] = 15.0
        assert activity.idle_for() == 0.0, "one call still runs"
    now[0] = 18.0
    assert activity.idle_for() == 3.0


def test_a_failed_call_still_ends() -> None:
    now = [0.0]
    activity = Activity(clock=lambda: now[0])
    with pytest.raises(RuntimeError), activity.running():
        raise RuntimeError("prepare failed")
    now[0] = 2.0
    assert activity.idle_for() == 2.0


def test_run_waits_while_the_kubelet_calls_and_goes_once_they_leave_room() -> None:
    """An item waits while a call runs, is done once calls have been quiet for quiet_s, and never
    waits past most_s while calls keep coming."""
    activity = Activity()
    done: list[tuple[str, float]] = []
    queue: BackgroundQueue[str] = BackgroundQueue(
        lambda item: done.append((item, time.monotonic())), 0.01, activity.idle_for, Deferral(quiet_s=0.05, most_s=0.6)
    )
    stop = threading.Event()
    thread = threading.Thread(target=queue.run, args=(stop,))
    thread.start()
    try:
        with activity.running():
            queue.offer("while a call runs", dropped="x")
            time.sleep(0.3)
            assert done == [], "nothing goes while a kubelet call runs"
        ended = time.monotonic()
        deadline = ended + 5
        while not done and time.monotonic() < deadline:
            time.sleep(0.01)
        assert done and done[0][1] - ended >= 0.04, "it went once the calls were quiet"
        with activity.running():
            offered = time.monotonic()
            queue.offer("calls keep coming", dropped="x")
            while len(done) < 2 and time.monotonic() < offered + 5:
                time.sleep(0.01)
        assert len(done) == 2 and 0.5 <= done[1][1] - offered < 1.5, "most_s bounds the wait"
    finally:
        stop.set()
        thread.join(5)


def test_while_calls_keep_coming_overdue_items_go_one_per_forced_every_s_and_all_at_once_when_quiet() -> None:
    """Items that have waited `most_s` beside a long burst of calls take turns `forced_every_s`
    apart; once the calls pause for `quiet_s`, every item goes at once."""
    now = [0.0]
    idle = [0.0]  # calls keep coming
    turns = Turns(lambda: idle[0], Deferral(quiet_s=0.05, most_s=2.0, forced_every_s=0.1), lambda: now[0])
    assert turns.wait_s(waited=1.0) == pytest.approx(0.05), "not overdue yet: it waits for a pause"
    went = []
    for step in range(100):  # 1 s of a burst, every item overdue, asked every 10 ms
        now[0] = step * 0.01
        if turns.wait_s(waited=3.0) <= 0:
            went.append(now[0])
    assert len(went) == 10 and all(b - a >= 0.1 - 1e-9 for a, b in itertools.pairwise(went))
    idle[0] = 0.05  # the burst has ended
    assert all(turns.wait_s(waited=3.0) <= 0 for _ in range(20)), "a pause lets them all go"
