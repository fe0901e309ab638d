"""EntryCache against a plain ordered-dict model: same hits, same bytes, oldest evicted first."""

from __future__ import annotations

import collections
import random

import pytest

from magnetar.broker.ledger.cache import EntryCache
from magnetar.broker.ledger.position import Position


class ModelCache:
    """The obvious implementation: an ordered map (ledger, entry) -> payload."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.entries: collections.OrderedDict[tuple[int, int], bytes] = collections.OrderedDict()

    @property
    def size_bytes(self) -> int:
        return sum(map(len, self.entries.values()))

    def put_entries(self, ledger_id: int, first: int, payloads: list[bytes]) -> None:
        for i, p in enumerate(payloads):
            if len(p) <= self.max_bytes:
                self.entries[(ledger_id, first + i)] = p
        while self.size_bytes > self.max_bytes:
            self.entries.popitem(last=False)

    def evict_before(self, pos: Position) -> None:
        for key in [k for k in self.entries if k < (pos.ledger_id, pos.entry_id)]:
            del self.entries[key]

    def evict_ledger(self, ledger_id: int) -> None:
        for key in [k for k in self.entries if k[0] == ledger_id]:
            del self.entries[key]


@pytest.mark.parametrize("seed", range(30))
def test_cache_matches_the_model(seed: int) -> None:
    rng = random.Random(seed)
    max_bytes = rng.choice([50, 300, 2_000])
    cache, model = EntryCache(max_bytes), ModelCache(max_bytes)
    next_entry = {1: 0}
    for _ in range(300):
        op = rng.random()
        ledger = rng.choice(list(next_entry))
        if op < 0.55:
            n = rng.randint(1, 12)
            ledger = max(next_entry)  # confirmed entries arrive in log order
            first = next_entry[ledger]
            sizes = [0, 3, 20, 60, max_bytes + 1]  # the last is bigger than the whole cache
            payloads = [rng.randbytes(rng.choice(sizes)) for _ in range(n)]
            cache.put_entries(ledger, first, payloads)
            model.put_entries(ledger, first, payloads)
            next_entry[ledger] = max(next_entry[ledger], first + n)
        elif op < 0.62:
            new = max(next_entry) + 1  # rollover: a new ledger, in log order
            next_entry[new] = 0
        elif op < 0.72:
            pos = Position(ledger, rng.randint(-1, next_entry[ledger] + 2))
            cache.evict_before(pos)
            model.evict_before(pos)
        elif op < 0.75:
            cache.evict_ledger(ledger)
            model.evict_ledger(ledger)
        else:
            first = rng.randint(0, next_entry[ledger] + 1)
            last = first + rng.randint(0, 8)
            want = []
            for e in range(first, last + 1):
                p = model.entries.get((ledger, e))
                if p is None:
                    break
                want.append(p)
            assert cache.get_range(ledger, first, last) == want
            assert cache.get(Position(ledger, first)) == model.entries.get((ledger, first))
        cache.check_invariants()
        assert cache.size_bytes == model.size_bytes
        assert len(cache) == len(model.entries)


def test_overlapping_put_keeps_held_entries_and_a_hole_restarts_the_run() -> None:
    cache = EntryCache(max_bytes=1_000)
    cache.put_entries(1, 0, [b"a", b"b"])
    cache.put_entries(1, 1, [b"B", b"c"])  # entry 1 is held: kept; entry 2 is new
    assert cache.get_range(1, 0, 5) == [b"a", b"b", b"c"]
    cache.put_entries(1, 5, [b"f"])  # a hole (3, 4): the run starts again at 5
    assert cache.get(Position(1, 0)) is None
    assert cache.get_range(1, 5, 5) == [b"f"]
    assert (len(cache), cache.size_bytes) == (1, 1)
    cache.check_invariants()


def test_oldest_entries_are_evicted_first_across_ledgers() -> None:
    cache = EntryCache(max_bytes=10)
    cache.put_entries(1, 0, [b"aaaa", b"bbbb"])
    cache.put_entries(2, 0, [b"cccc"])
    assert cache.get(Position(1, 0)) is None  # 12 bytes > 10: the oldest went
    assert cache.get(Position(1, 1)) == b"bbbb"
    assert cache.get(Position(2, 0)) == b"cccc"
    assert cache.statistics().evictions == 1
    assert (cache.statistics().hits, cache.statistics().misses) == (2, 1)
    cache.check_invariants()


def test_long_runs_compact_their_evicted_head() -> None:
    cache = EntryCache(max_bytes=100)
    for first in range(0, 10_000, 100):
        cache.put_entries(7, first, [b"x"] * 100)
    run = cache._runs[7]
    assert len(run.payloads) < 3_000  # the evicted head was cut off, not kept as Nones
    assert cache.get_range(7, 9_900, 9_999) == [b"x"] * 100
    assert cache.get(Position(7, 9_899)) is None
    cache.check_invariants()
