"""The collector pause: off while any thread builds in bulk, back on when the last one is done."""

from __future__ import annotations

import gc
import threading
import weakref

import pytest

from extender.gc_control import collector_paused, freeze_survivors


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


def test_garbage_cycles_are_collected_before_a_freeze() -> None:
    class Cycle:
        def __init__(self) -> None:
            self.me = self

    cycle = Cycle()
    alive = weakref.ref(cycle)
    del cycle  # garbage that only the cyclic collector can free
    try:
        freeze_survivors()
        assert alive() is None, "a garbage cycle was frozen for good"
    finally:
        gc.unfreeze()
