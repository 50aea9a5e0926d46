"""Work the kubelet must not wait for (Node events, claim status reports): queued without
blocking, dropped with a warning when the queue is full, done on a thread of its own."""

from __future__ import annotations

import contextlib
import logging
import math
import queue
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Generic, TypeVar

log = logging.getLogger(__name__)
T = TypeVar("T")
MAX_QUEUED = 256  # items waiting; more are dropped (and logged) rather than block prepare


@dataclass(frozen=True)
class Deferral:
    """How background work yields to the kubelet's calls: it goes once no call has run for
    `quiet_s`, or once it has waited `most_s` while calls keep coming, and then one item at most
    every `forced_every_s` until they pause. Each item is an API write beside the calls (on a node
    of two cores, beside the API server too): once items went at the rate of the calls, the last
    quarter of a burst of 400 prepares took 12-25 ms each instead of 8-9 (`python -m bench
    prepare`, last phase). The queues are bounded; what waits goes at the next pause."""

    quiet_s: float = 0.05
    most_s: float = 2.0
    forced_every_s: float = 0.05
    at_stop_s: float = 3.0  # of the pod's termination grace (30 s), before the process exits

    def wait_s(self, idle: float, waited: float, since_forced: float) -> float:
        """Seconds still to wait (<= 0: go), after `idle` seconds without a call, `waited` in line,
        and `since_forced` since the last item that went while calls kept coming."""
        if idle >= self.quiet_s:
            return 0.0
        return min(self.quiet_s - idle, max(self.most_s - waited, self.forced_every_s - since_forced))


DEFERRAL = Deferral()


class Turns:
    """One background worker's turns beside the kubelet's calls (`Deferral`); it remembers when it
    last went while calls kept coming."""

    def __init__(
        self, idle_for: Callable[[], float], deferral: Deferral = DEFERRAL, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.idle_for = idle_for
        self.deferral = deferral
        self.clock = clock
        self._forced_at = -math.inf

    def wait_s(self, waited: float) -> float:
        """Seconds until an item that has `waited` in line may go; <= 0: it goes now (the turn is taken)."""
        idle, now = self.idle_for(), self.clock()
        wait_s = self.deferral.wait_s(idle, waited, now - self._forced_at)
        if wait_s <= 0 and idle < self.deferral.quiet_s:
            self._forced_at = now
        return wait_s


class BackgroundQueue(Generic[T]):
    """`offer` never blocks; `drain` does `work` on everything queued; `run` drains every
    `period_s` until stopped, each item once the kubelet's calls leave room (`idle_for` and
    `deferral`). `work` handles its own failures: one item never
    stops the rest."""

    def __init__(
        self,
        work: Callable[[T], None],
        period_s: float,
        idle_for: Callable[[], float] = lambda: math.inf,
        deferral: Deferral = DEFERRAL,
    ) -> None:
        self.work = work
        self.period_s = period_s
        self.turns = Turns(idle_for, deferral)
        self._queue: queue.Queue[T] = queue.Queue(MAX_QUEUED)

    def offer(self, item: T, dropped: str) -> None:
        """Queue `item`; when full, log `dropped` (what is not done) instead."""
        try:
            self._queue.put_nowait(item)
        except queue.Full:
            log.warning("%s: queue full", dropped)

    def drain(self, stop: threading.Event | None = None) -> None:
        """Everything queued; with `stop`, each item after `_room` (at once without: shutting down)."""
        while True:
            if stop is not None and not self._queue.empty():
                self._room(stop)
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return
            self.work(item)

    def _room(self, stop: threading.Event) -> None:
        """Until the kubelet's calls leave room (`Deferral`), or `stop`."""
        started = time.monotonic()
        while (wait_s := self.turns.wait_s(time.monotonic() - started)) > 0:
            if stop.wait(wait_s):
                return

    def run(self, stop: threading.Event) -> None:
        while not stop.wait(self.period_s):
            self.drain(stop)


class Activity:
    """The kubelet's calls in flight, so that background work can yield to them: a pod waits for
    its prepare, nobody waits for a status report."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._running = 0
        self._ended = -math.inf
        self._guard = threading.Lock()

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        with self._guard:
            self._running += 1
        try:
            yield
        finally:
            with self._guard:
                self._running -= 1
                self._ended = self.clock()

    def idle_for(self) -> float:
        """Seconds since the last call ended; 0 while one runs."""
        with self._guard:
            return 0.0 if self._running else self.clock() - self._ended
