"""Per-claim locks serialise one claim, let others run, and leave nothing behind."""

from __future__ import annotations

import threading
import time
import uuid

from dra_driver.kubelet.claim_locks import ClaimLocks


def test_the_table_is_empty_after_50k_distinct_claims() -> None:
    locks = ClaimLocks()
    for _ in range(50_000):
        with locks.held(str(uuid.uuid4())):
            pass
    assert len(locks) == 0


def test_one_claim_is_serialised_and_another_is_not_blocked() -> None:
    locks = ClaimLocks()
    inside = threading.Event()
    release = threading.Event()
    order: list[str] = []

    def first() -> None:
        with locks.held("a"):
            inside.set()
            release.wait(5)
            order.append("first")

    def second_same_claim() -> None:
        with locks.held("a"):
            order.append("second")

    holder = threading.Thread(target=first)
    holder.start()
    assert inside.wait(5)
    waiter = threading.Thread(target=second_same_claim)
    waiter.start()
    started = time.monotonic()
    with locks.held("b"):  # a different claim does not wait for "a"
        assert time.monotonic() - started < 1
    assert len(locks) == 1, "one entry while claim a is held and waited for"
    release.set()
    holder.join(5)
    waiter.join(5)
    assert order == ["first", "second"]
    assert len(locks) == 0


def test_a_pause_waits_for_the_claims_in_flight_and_holds_back_new_ones() -> None:
    locks = ClaimLocks()
    inside, release = threading.Event(), threading.Event()
    order: list[str] = []

    def in_flight() -> None:
        with locks.held("a"):
            inside.set()
            release.wait(5)
            order.append("in flight ends")

    def arrives_during_the_pause() -> None:
        with locks.held("b"):
            order.append("new claim")

    def pause() -> None:
        with locks.paused():
            order.append("paused")
            time.sleep(0.2)  # the new claim has arrived meanwhile and must still wait
            order.append("pause ends")

    holder = threading.Thread(target=in_flight)
    holder.start()
    assert inside.wait(5)
    pauser = threading.Thread(target=pause)
    pauser.start()
    deadline = time.monotonic() + 5
    while not locks._paused:  # the pause is asked for, waiting for claim a
        assert time.monotonic() < deadline
        time.sleep(0.01)
    newcomer = threading.Thread(target=arrives_during_the_pause)
    newcomer.start()
    time.sleep(0.05)
    assert order == [], "the pause waits for claim a; claim b waits for the pause"
    release.set()
    for thread in (holder, pauser, newcomer):
        thread.join(5)
    assert order == ["in flight ends", "paused", "pause ends", "new claim"]
    assert len(locks) == 0
