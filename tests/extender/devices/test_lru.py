"""The extender's caches stay within their bound and keep what was used last."""

from __future__ import annotations

import pytest

from extender.devices.lru import GenerationalCache, LruCache, Numbering


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


def test_a_generational_cache_never_holds_more_than_its_capacity() -> None:
    cache: GenerationalCache[int, int] = GenerationalCache(100)
    for key in range(10_000):
        cache.put(key, key)
        assert len(cache) <= 100
    assert cache.get(9_999) == 9_999 and cache.get(0) is None


def test_a_generational_cache_keeps_what_is_read_and_drops_what_is_not() -> None:
    cache: GenerationalCache[str, int] = GenerationalCache(4)
    cache.put("used", 1)
    cache.put("unused", 2)
    cache.put("x", 3)  # the young half was full: "used" and "unused" are now old
    assert cache.get("used") == 1  # read back into the young half
    cache.put("y", 4)  # another turnover drops the old half, "unused" with it
    assert cache.get("unused") is None
    assert cache.get("used") == 1


def test_a_generational_cache_refuses_a_capacity_without_two_halves() -> None:
    with pytest.raises(ValueError, match="at least two"):
        GenerationalCache(1)


def test_numbering_gives_equal_values_one_number_and_never_reuses_one_past_its_capacity() -> None:
    numbering: Numbering[str] = Numbering(2)
    first = [numbering.number(value) for value in ("a", "b", "a")]
    assert first[0] == first[2] != first[1]
    later = [numbering.number(value) for value in ("c", "a")]  # "c" found it full: all forgotten
    assert not set(later) & set(first), "a number once given is never given to another value"
