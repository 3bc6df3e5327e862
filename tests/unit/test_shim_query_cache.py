"""The shim's query cache (``shim/querycache.py``) is bounded in entries and in bytes."""

from __future__ import annotations

from sparkrun_operator.shim.querycache import QueryCache

MIB = 1024 * 1024


def test_bounded_in_bytes_and_entries() -> None:
    cache = QueryCache(ttl=60, size=100, max_bytes=8 * MIB)
    result = b"x" * (3 * MIB // 2)  # 1.5 MiB answers
    for i in range(20):
        cache.put((str(i),), result)
        assert cache.bytes <= 8 * MIB
    assert cache.bytes == sum(len(v) for _, v in cache.values.values())
    assert len(cache.values) == 5  # 5 x 1.5 MiB fit in 8 MiB; the oldest went first
    assert cache.get(("19",)) == result
    assert cache.get(("0",)) is None
    cache.put(("huge",), b"x" * (3 * MIB))  # above a quarter of the budget: not cached
    assert cache.get(("huge",)) is None
    small = QueryCache(ttl=60, size=3, max_bytes=8 * MIB)
    for i in range(10):
        small.put((str(i),), b"{}")
    assert len(small.values) == 3
    cache.clear()
    assert cache.bytes == 0
