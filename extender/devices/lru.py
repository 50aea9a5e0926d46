"""A thread-safe, size-bounded cache: the extender's caches are keyed by what callers send
(selector text, node x selectors), so without a bound a stream of distinct keys grows memory
until the pod is killed."""

from __future__ import annotations

import itertools
import threading
from collections import OrderedDict
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class LruCache(Generic[K, V]):
    """Least-recently-used eviction. The lock covers only the dictionary operations, never the
    computation of a value, so a slow computation does not make other keys wait."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"an LRU cache needs room for at least one entry, not {capacity}")
        self.capacity = capacity
        self._entries: OrderedDict[K, V] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: K) -> V | None:
        with self._lock:
            value = self._entries.get(key)
            if value is not None:
                self._entries.move_to_end(key)
            return value

    def put(self, key: K, value: V) -> None:
        with self._lock:
            self._entries[key] = value
            self._entries.move_to_end(key)
            while len(self._entries) > self.capacity:
                self._entries.popitem(last=False)

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)


class GenerationalCache(Generic[K, V]):
    """A bounded cache for the planner's hottest reads (a node's fit, asked for every node of every
    domain of every gang): no lock and no reordering per read, which in `LruCache` cost more than
    the dictionary lookup itself. Entries live in two generations of `capacity / 2` each: writes go
    to the young one; once it is full the old one is dropped and the young one becomes old. A read
    found only in the old generation is written to the young one, so what is used keeps living.
    Safe under the GIL: each step is one dictionary operation, and a reader racing a turnover at
    worst misses and recomputes."""

    def __init__(self, capacity: int) -> None:
        if capacity < 2:
            raise ValueError(f"a generational cache needs room for at least two entries, not {capacity}")
        self.capacity = capacity
        self._young: dict[K, V] = {}
        self._old: dict[K, V] = {}

    def get(self, key: K) -> V | None:
        value = self._young.get(key)
        if value is None:
            value = self._old.get(key)
            if value is not None:
                self.put(key, value)
        return value

    def put(self, key: K, value: V) -> None:
        if len(self._young) >= self.capacity // 2:
            self._old, self._young = self._young, {}
        self._young[key] = value

    def __len__(self) -> int:
        return len(self._young) + len(self._old)


class Numbering(Generic[K]):
    """A number for each distinct value, equal values getting equal numbers, so that later work can
    compare and key by a small int instead of the value. At most `capacity` values are held; past it
    all are forgotten and numbering goes on from where it was: a number is never given to two
    values, only sharing restarts."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._numbers: dict[K, int] = {}
        self._next = itertools.count()

    def number(self, value: K) -> int:
        found = self._numbers.get(value)
        if found is None:
            if len(self._numbers) >= self.capacity:
                self._numbers.clear()
            found = self._numbers[value] = next(self._next)
        return found
