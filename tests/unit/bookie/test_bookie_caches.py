"""Write cache (double buffering, unswap on failed flush) and read cache (byte bound, LRU)."""

from __future__ import annotations

from magnetar.bookie.journal import ENTRY_HEADER
from magnetar.bookie.read_cache import ReadCache
from magnetar.bookie.write_cache import WriteCache


def hdr(ledger: int, entry: int, payload: bytes) -> bytes:
    return ENTRY_HEADER.pack(ledger, entry, -1, 0, len(payload))


def test_write_cache_swap_reads_both_halves_and_unswap_keeps_newer() -> None:
    wc = WriteCache(half_bytes_max=1000)
    wc.put(1, 0, hdr(1, 0, b"a" * 100), b"a" * 100)
    wc.put(1, 1, hdr(1, 1, b"b" * 100), b"b" * 100)
    assert not wc.is_full
    half = wc.swap()
    assert wc.flushing and wc.active_bytes == 0
    assert set(half[1]) == {0, 1}
    wc.put(1, 1, hdr(1, 1, b"B" * 100), b"B" * 100)  # newer copy in the active half
    wc.put(1, 2, hdr(1, 2, b"c" * 100), b"c" * 100)
    assert wc.get(1, 0) is not None and wc.get(1, 0)[1] == b"a" * 100  # type: ignore[index]
    assert wc.get(1, 1)[1] == b"B" * 100  # type: ignore[index]
    assert wc.last_entry_id(1) == 2
    assert wc.get(2, 0) is None and wc.last_entry_id(2) == -1
    wc.unswap()
    assert not wc.flushing
    assert wc.get(1, 1)[1] == b"B" * 100  # type: ignore[index]
    assert set(wc.active[1]) == {0, 1, 2}
    wc.check_invariants()
    for e in range(3, 9):
        wc.put(1, e, hdr(1, e, b"x" * 100), b"x" * 100)
    assert wc.is_full


def test_read_cache_is_bounded_and_lru() -> None:
    rc = ReadCache(bytes_max=3 * (100 + 64))
    for e in range(3):
        rc.put(1, e, e - 1, 0, b"p" * 100)
    assert rc.get(1, 0) is not None  # 0 becomes most recent
    rc.put(1, 3, 2, 0, b"p" * 100)  # evicts 1 (least recent)
    assert rc.get(1, 1) is None
    assert rc.get(1, 0) is not None and rc.get(1, 3) is not None
    rc.check_invariants()
    rc.put(1, 4, 3, 0, b"p" * 10_000)  # larger than the cache: not cached
    assert rc.get(1, 4) is None
    rc.drop_ledger(1)
    assert rc.statistics().entries == 0
    rc.check_invariants()
