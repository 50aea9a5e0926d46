"""The extender's caches stay within their bound and keep what was used last."""

from __future__ import annotations

import pytest

from extender.lru import LruCache


def test_the_least_recently_used_entry_goes_first() -> None:
    cache: LruCache[str, int] = LruCache(2)
    cache.put("a", 1)
    cache.put("b", 2)
    assert cache.get("a") == 1  # "a" is now the most recent, so "b" is the one to go
    cache.put("c", 3)
    assert cache.get("b") is None
    assert (cache.get("a"), cache.get("c")) == (1, 3)


def test_putting_an_existing_key_refreshes_it_and_does_not_grow() -> None:
    cache: LruCache[str, int] = LruCache(2)
    cache.put("a", 1)
    cache.put("b", 2)
    cache.put("a", 10)
    assert len(cache) == 2
    cache.put("c", 3)
    assert (cache.get("a"), cache.get("b")) == (10, None)


def test_any_stream_of_distinct_keys_stays_within_the_bound() -> None:
    cache: LruCache[int, int] = LruCache(5)
    for key in range(1000):
        cache.put(key, key)
        assert len(cache) <= 5
    assert [cache.get(key) for key in range(995, 1000)] == list(range(995, 1000))


@pytest.mark.parametrize("capacity", [0, -1])
def test_a_cache_without_room_is_refused(capacity: int) -> None:
    with pytest.raises(ValueError, match=f"at least one entry, not {capacity}"):
        LruCache[str, int](capacity)
