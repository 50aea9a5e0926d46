"""One lock per claim UID while someone holds or waits for it, and none after: the table holds
only claims in flight, so a node that prepares millions of claims over its life keeps it small."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager


class ClaimLocks:
    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._locks: dict[str, tuple[threading.Lock, int]] = {}  # uid -> (lock, holders and waiters)

    def __len__(self) -> int:
        with self._guard:
            return len(self._locks)

    @contextmanager
    def held(self, uid: str) -> Iterator[None]:
        """Serialise work on one claim; different claims run in parallel."""
        with self._guard:
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
                else:
                    self._locks[uid] = (lock, users - 1)
