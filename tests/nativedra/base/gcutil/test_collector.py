"""The collector pause: off while any thread builds in bulk, back on when the last one is done."""

from __future__ import annotations

import gc
import threading
import weakref

import pytest

from nativedra.base.gcutil.collector import built_in_bulk, collector_paused, freeze_survivors


def test_the_collector_is_paused_until_every_block_has_ended() -> None:
    assert gc.isenabled()
    inside, release = threading.Event(), threading.Event()

    def other_thread() -> None:
        with collector_paused():
            inside.set()
            release.wait(10)

    worker = threading.Thread(target=other_thread)
    worker.start()
    assert inside.wait(10)
    with collector_paused():
        assert not gc.isenabled()
    assert not gc.isenabled(), "re-enabled while another thread still builds"
    release.set()
    worker.join(10)
    assert gc.isenabled()


def test_an_error_in_the_block_still_resumes_the_collector() -> None:
    with pytest.raises(RuntimeError), collector_paused():
        raise RuntimeError("planning failed")
    assert gc.isenabled()


class Cycle:
    def __init__(self) -> None:
        self.me = self


def garbage_cycle() -> weakref.ref[Cycle]:
    """Garbage that only the cyclic collector can free: a reference that dies with it."""
    return weakref.ref(Cycle())


def test_garbage_cycles_are_collected_before_a_freeze() -> None:
    alive = garbage_cycle()
    try:
        freeze_survivors()
        assert alive() is None, "a garbage cycle was frozen for good"
    finally:
        gc.unfreeze()


def test_a_bulk_build_collects_the_garbage_before_it_and_freezes_what_it_built() -> None:
    alive = garbage_cycle()
    gc.unfreeze()
    try:
        with built_in_bulk():
            assert alive() is None, "garbage from before the block was frozen with it"
            frozen_before = gc.get_freeze_count()
            assert not gc.isenabled()
            built = [[n] for n in range(10_000)]  # lists are tracked (dicts of plain values are not)
        assert gc.isenabled()
        # (less a few frozen objects freed meanwhile, such as frames)
        assert gc.get_freeze_count() - frozen_before > len(built) - 50, "what the block built is frozen"
    finally:
        gc.unfreeze()
