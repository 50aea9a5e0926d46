"""A watchdog over requests in flight, so /healthz fails when request handling is stuck and the
kubelet restarts the extender instead of the scheduler timing out on every pod forever."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager


class Watchdog:
    """Start times of the requests in flight. At most the server's concurrency limit of entries:
    each request removes its own on the way out, whatever happened to it."""

    def __init__(self, stuck_after_seconds: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.stuck_after_seconds = stuck_after_seconds
        self._clock = clock
        self._started: dict[int, float] = {}
        self._ids = itertools.count()
        self._lock = threading.Lock()

    @contextmanager
    def tracking(self) -> Iterator[None]:
        token = next(self._ids)
        with self._lock:
            self._started[token] = self._clock()
        try:
            yield
        finally:
            with self._lock:
                del self._started[token]

    def in_flight(self) -> int:
        with self._lock:
            return len(self._started)

    def stuck_for(self) -> float | None:
        """Age of the oldest request in flight when it exceeds the limit, else None."""
        with self._lock:
            oldest = min(self._started.values(), default=None)
        if oldest is None:
            return None
        age = self._clock() - oldest
        return age if age > self.stuck_after_seconds else None
