"""One lock per claim UID while someone holds or waits for it, and none after: the table holds
only claims in flight, so a node that prepares millions of claims over its life keeps it small.
All claim work can be paused, for the repair that runs once another plugin process has gone."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager


class ClaimLocks:
    def __init__(self) -> None:
        self._guard = threading.Condition()
        self._locks: dict[str, tuple[threading.Lock, int]] = {}  # uid -> (lock, holders and waiters)
        self._paused = False

    def __len__(self) -> int:
        with self._guard:
            return len(self._locks)

    @contextmanager
    def held(self, uid: str) -> Iterator[None]:
        """Serialise work on one claim; different claims run in parallel."""
        with self._guard:
            self._guard.wait_for(lambda: not self._paused)
            lock, users = self._locks.get(uid, (threading.Lock(), 0))
            self._locks[uid] = (lock, users + 1)
        try:
            with lock:
                yield
        finally:
            with self._guard:
                lock, users = self._locks[uid]
                if users == 1:
                    del self._locks[uid]
                    self._guard.notify_all()  # a pause may wait for the table to empty
                else:
                    self._locks[uid] = (lock, users - 1)

    @contextmanager
    def paused(self) -> Iterator[None]:
        """No claim work while held: waits for the claims in flight and holds back new ones."""
        with self._guard:
            self._guard.wait_for(lambda: not self._paused)
            self._paused = True
            self._guard.wait_for(lambda: not self._locks)
        try:
            yield
        finally:
            with self._guard:
                self._paused = False
                self._guard.notify_all()
