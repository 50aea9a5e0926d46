"""Keeping the cyclic collector off a process's long-lived objects without leaking.

The extender's listed objects, node models and plans, and the plugin's published devices, live
until replaced and are acyclic (refcounting frees them); a full collection walking them stalls a
call (hundreds of ms at 5,000 nodes in the extender, 50-85 ms in a plugin publishing 64 GPUs'
fractions, in the middle of a prepare), so they are frozen out of the collector's sight.
Freezing moves *every* tracked object, garbage awaiting collection included, where no collection
ever looks again: cycles not yet collected (requests', responses' and exceptions' frames) leaked
a few MiB a minute under churn. So the young objects are collected first: that walks only what is
not frozen yet, never the frozen heap.

While such objects are built in bulk (a LIST, node models after it, a plan from scratch), each
automatic full collection walks all of them again: at 5,000 nodes that was 3.9 s of collections
while loading the LIST and 1.1 s in the first plan. The collector is paused for those bursts, and
what they built is frozen at their end without being walked (`built_in_bulk`).
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator

_paused = 0
_paused_lock = threading.Lock()
# Tracked objects allocated (net) between two young collections; CPython's default is 700.
YOUNG_THRESHOLD = 50_000


def space_out_collections() -> None:
    """Fewer, larger young collections for the extender's process. A call at 10,000 nodes makes
    containers of 10,000 entries (the node names it was sent, its scores, the view's mappings), and
    every young collection while they live walks them: at the default threshold that was about 40
    collections a call, 600 of them over 3 ms in one benchmark run, and each prioritize paid a few.
    At this threshold that run had 73, and its prioritize p99 after status events went from 16.5 to
    6.5 ms. Cyclic garbage waits a little longer for its collection; refcounting frees the rest."""
    gc.set_threshold(YOUNG_THRESHOLD, 20, 20)


def freeze_survivors() -> None:
    """Collect the objects not yet frozen, then freeze what survives."""
    gc.collect()
    gc.freeze()


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """No automatic collection while the block builds long-lived objects in bulk; the collector
    runs again once every thread's block has ended (and finds their garbage then)."""
    global _paused  # noqa: PLW0603 - one process-wide collector, one count of who paused it
    with _paused_lock:
        _paused += 1
        gc.disable()
    try:
        yield
    finally:
        with _paused_lock:
            _paused -= 1
            if _paused == 0:
                gc.enable()


@contextlib.contextmanager
def built_in_bulk() -> Iterator[None]:
    """Around a block that builds long-lived, acyclic objects in bulk: the young garbage is
    collected before it, the collector is paused during it, and what it leaves is frozen at its
    end unwalked. Collecting after the block walked all it built: 2.0 s after the last LIST of
    10,000 nodes. Only cycles that other threads make during the block are frozen with it: a
    bounded amount once per block, where a freeze without any collection leaked on every call."""
    freeze_survivors()
    try:
        with collector_paused():
            yield
    finally:
        gc.freeze()
