"""The broker-wide entry cache budget (``EntryCacheManager``): one budget over every managed
ledger's cache, never exceeded; eviction of what no active reader needs first, then oldest
first, down to the watermark; age eviction on an injected clock; the settings reach it."""

from __future__ import annotations

import asyncio
import random

import pytest

from magnetar.broker.bookkeeper.testing import FakeBookieCluster
from magnetar.broker.config import BrokerConfig
from magnetar.broker.ledger import LATEST, ManagedLedgerConfig, ManagedLedgerFactory, Position
from magnetar.broker.ledger.cache import EntryCache, EntryCacheManager
from magnetar.broker.runtime import managed_ledger_config
from magnetar.clock import VirtualClock
from magnetar.zk.memory import MemoryMetadataServer


def manager(max_bytes: int, **kw: object) -> tuple[EntryCacheManager, VirtualClock]:
    clock = VirtualClock()
    return EntryCacheManager(max_bytes, clock=clock, **kw), clock  # type: ignore[arg-type]


@pytest.mark.parametrize("seed", range(20))
def test_budget_is_never_exceeded_over_many_caches(seed: int) -> None:
    rng = random.Random(seed)
    budget = rng.choice([100, 1_000, 10_000])
    mgr, clock = manager(budget, eviction_watermark=rng.choice([0.5, 0.9, 1.0]))
    readers: dict[int, Position | None] = {}
    caches = []
    for i in range(rng.randint(1, 8)):
        readers[i] = None
        caches.append(mgr.new_cache(f"c{i}", lambda i=i: readers[i]))  # type: ignore[misc]
    next_entry = [0] * len(caches)
    for _ in range(400):
        i = rng.randrange(len(caches))
        op = rng.random()
        if op < 0.7:
            n = rng.randint(1, 10)
            payloads = [rng.randbytes(rng.choice([0, 5, 50, 200])) for _ in range(n)]
            caches[i].put_entries(1, next_entry[i], payloads)
            next_entry[i] += n
        elif op < 0.8:
            readers[i] = Position(1, rng.randint(0, next_entry[i] + 1))
        elif op < 0.9:
            caches[i].evict_before(Position(1, rng.randint(0, next_entry[i])))
        else:
            clock.advance(rng.random() * 0.5)
        assert mgr.size_bytes <= budget
        mgr.check_invariants()
    assert mgr.statistics().size_bytes == sum(c.size_bytes for c in caches)


def test_over_budget_evicts_down_to_the_watermark() -> None:
    mgr, _ = manager(1_000, eviction_watermark=0.5, eviction_time_threshold_ms=0)
    cache = mgr.new_cache("a")
    for e in range(10):
        cache.put_entries(1, e, [b"x" * 100])
    assert mgr.size_bytes == 1_000  # at the budget, not over: nothing evicted
    cache.put_entries(1, 10, [b"x" * 100])
    assert mgr.size_bytes == 500  # over: down to 50% at once, the oldest first
    assert cache.get(Position(1, 5)) is None and cache.get(Position(1, 6)) == b"x" * 100
    assert mgr.statistics().budget_evictions == 1
    mgr.check_invariants()


def test_entries_no_active_reader_needs_go_first_then_the_oldest() -> None:
    mgr, clock = manager(1_000, eviction_watermark=0.7, eviction_time_threshold_ms=0)
    needed: dict[str, Position | None] = {
        "tailing": Position(1, 0),  # an active reader at its first entry: all needed
        "no-reader": None,  # no active reader: nothing needed
        "half-read": Position(1, 2),  # the slowest active reader passed entries 0 and 1
    }
    caches = {n: mgr.new_cache(n, lambda n=n: needed[n]) for n in needed}  # type: ignore[misc]
    for name in ["tailing", "no-reader", "half-read"]:  # tailing is the oldest
        caches[name].put_entries(1, 0, [b"y" * 100] * 3)
        clock.advance(0.01)
    assert mgr.size_bytes == 900
    caches["tailing"].put_entries(1, 3, [b"z" * 200])  # 1,100 > 1,000: evict to 700
    # first what nobody needs: no-reader's 300 and half-read's first 200 = 500 freed (600)
    assert len(caches["no-reader"]) == 0
    assert caches["half-read"].get_range(1, 0, 2) == []
    assert caches["half-read"].get(Position(1, 2)) == b"y" * 100
    assert len(caches["tailing"]) == 4  # the oldest, but needed: kept
    assert mgr.size_bytes == 600
    caches["half-read"].put_entries(1, 3, [b"w" * 300])  # 900: no eviction
    caches["no-reader"].put_entries(1, 3, [b"v" * 200])  # 1,100: nothing unneeded is held
    # ... so the oldest entries of the broker go: tailing's entries 0..3 (400 bytes)
    assert mgr.size_bytes <= 700
    assert caches["tailing"].get(Position(1, 0)) is None
    assert caches["half-read"].get(Position(1, 3)) == b"w" * 300
    assert caches["no-reader"].get(Position(1, 3)) is None  # nothing needs it: evicted first
    mgr.check_invariants()


def test_age_eviction_with_an_injected_clock() -> None:
    mgr, clock = manager(1 << 20, eviction_time_threshold_ms=1_000, eviction_interval_ms=10)
    old, young = mgr.new_cache("old"), mgr.new_cache("young")
    old.put_entries(1, 0, [b"a"] * 5)
    clock.advance(0.6)
    young.put_entries(7, 0, [b"b"] * 5)
    old.put_entries(1, 5, [b"c"])
    clock.advance(0.5)  # 1.1 s: old's first batch expired, the rest not
    assert old.get_range(1, 0, 5) == [] and old.get(Position(1, 5)) == b"c"
    assert len(young) == 5
    clock.advance(0.6)  # 1.7 s: everything expired
    assert (len(old), len(young), mgr.size_bytes) == (0, 0, 0)
    assert mgr.statistics().evictions_by_age == 11
    mgr.check_invariants()


def test_age_eviction_timer_runs_only_while_something_is_cached() -> None:
    mgr, clock = manager(1 << 20, eviction_time_threshold_ms=1_000)
    cache = mgr.new_cache("a")
    assert clock.advance(10) == 0  # nothing cached: no timer
    cache.put_entries(1, 0, [b"a"])
    assert clock.advance(10) == 1  # one timer tick evicts it, and none follows
    assert clock.advance(10) == 0
    mgr.close()


def test_zero_budget_caches_nothing() -> None:
    mgr, _ = manager(0)
    cache = mgr.new_cache("a")
    cache.put_entries(1, 0, [b"a", b"b"])
    assert (len(cache), mgr.size_bytes, cache.get(Position(1, 0))) == (0, 0, None)


def test_a_closed_cache_releases_its_bytes_and_holds_nothing_more() -> None:
    mgr, _ = manager(1_000)
    cache = mgr.new_cache("a")
    cache.put_entries(1, 0, [b"x" * 100])
    cache.close()
    cache.put_entries(1, 1, [b"x" * 100])  # a late confirmation after close
    assert mgr.size_bytes == 0 and mgr.statistics().caches == 0
    mgr.check_invariants()


def test_a_cache_with_its_own_budget_still_works_alone() -> None:
    cache = EntryCache(max_bytes=10)
    cache.put_entries(1, 0, [b"aaaa", b"bbbb", b"cccc"])
    assert cache.get(Position(1, 0)) is None and cache.size_bytes == 8
    cache.check_invariants()


# -- the managed ledgers of a factory share the budget ----------------------------------------


async def test_managed_ledgers_of_a_factory_share_one_budget(
    meta_server: MemoryMetadataServer, fake_bookies: FakeBookieCluster
) -> None:
    cfg = ManagedLedgerConfig(
        ensemble_size=2,
        write_quorum=2,
        ack_quorum=2,
        min_ledger_rollover_time_ms=0,
        entry_cache_bytes=50_000,
        entry_cache_eviction_time_threshold_ms=0,
    )
    f = ManagedLedgerFactory(meta_server.connect(), fake_bookies.factory, cfg)
    mls = [await f.open(f"t/ns/persistent/budget-{i}") for i in range(6)]
    for _ in range(3):
        for ml in mls:  # 6 x 3 x 20 x 1,000 bytes = 360 KB through a 50 KB budget
            await asyncio.gather(*(ml.add(b"p" * 1_000) for _ in range(20)))
            assert f.entry_cache.size_bytes <= 50_000
    stats = f.entry_cache.statistics()
    assert stats.caches == 6 and stats.budget_evictions > 0
    assert sum(ml.statistics().cache.size_bytes for ml in mls) == stats.size_bytes
    f.entry_cache.check_invariants()
    await f.close()
    assert f.entry_cache.size_bytes == 0


async def test_a_backlogged_cursor_does_not_pin_the_cache(
    meta_server: MemoryMetadataServer, fake_bookies: FakeBookieCluster
) -> None:
    cfg = ManagedLedgerConfig(
        ensemble_size=2,
        write_quorum=2,
        ack_quorum=2,
        min_ledger_rollover_time_ms=0,
        cursor_backlogged_threshold=10,
        entry_cache_eviction_time_threshold_ms=0,
    )
    f = ManagedLedgerFactory(meta_server.connect(), fake_bookies.factory, cfg)
    ml = await f.open("t/ns/persistent/backlogged")
    slow = await ml.open_cursor("slow", LATEST)
    tail = ml.new_non_durable_cursor(LATEST)
    await asyncio.gather(*(ml.add(b"e%d" % i) for i in range(30)))
    assert ml.statistics().cache.entries == 30
    got = await tail.read_entries(25)  # tail is 5 behind: active; slow is 30 behind: not
    assert len(got) == 25
    assert ml.statistics().cache.entries == 5  # kept only what the active reader needs
    got = await slow.read_entries(30)  # the slow one reads from the bookies
    assert [e.payload for e in got] == [b"e%d" % i for i in range(30)]
    ml.check_invariants()
    await f.close()


async def test_a_lone_backlogged_reader_reads_from_the_cache(
    meta_server: MemoryMetadataServer, fake_bookies: FakeBookieCluster
) -> None:
    """With no active reader, what the backlogged cursor has not read yet stays cached (age
    and budget still evict it): a consumer that fell behind must not go to the bookies for
    entries that are still in memory."""
    cfg = ManagedLedgerConfig(
        ensemble_size=2,
        write_quorum=2,
        ack_quorum=2,
        min_ledger_rollover_time_ms=0,
        cursor_backlogged_threshold=10,
        entry_cache_eviction_time_threshold_ms=0,
    )
    f = ManagedLedgerFactory(meta_server.connect(), fake_bookies.factory, cfg)
    ml = await f.open("t/ns/persistent/lone-backlogged")
    slow = await ml.open_cursor("slow", LATEST)
    await asyncio.gather(*(ml.add(b"e%d" % i) for i in range(30)))
    got = await slow.read_entries(5)  # 30 behind: backlogged
    assert [e.payload for e in got] == [b"e%d" % i for i in range(5)]
    assert ml.statistics().cache.entries == 25  # what it read went; the rest stayed
    misses = ml.statistics().cache.misses
    got = await slow.read_entries(25)
    assert [e.payload for e in got] == [b"e%d" % i for i in range(5, 30)]
    assert ml.statistics().cache.misses == misses  # all from the cache
    assert ml.statistics().cache.entries == 0
    ml.check_invariants()
    await f.close()


def test_broker_settings_reach_the_entry_cache() -> None:
    cfg = managed_ledger_config(
        BrokerConfig.load(
            managed_ledger_cache_size_mb=3,
            managed_ledger_cache_eviction_watermark="0.5",
            managed_ledger_cache_eviction_time_threshold_millis=250,
            managed_ledger_cache_eviction_interval_ms=20,
            managed_ledger_cursor_backlogged_threshold=77,
        )
    )
    assert (cfg.entry_cache_bytes, cfg.entry_cache_eviction_watermark) == (3 << 20, 0.5)
    assert cfg.entry_cache_eviction_time_threshold_ms == 250
    assert cfg.entry_cache_eviction_interval_ms == 20
    assert cfg.cursor_backlogged_threshold == 77
    mgr = EntryCacheManager(
        cfg.entry_cache_bytes,
        eviction_watermark=cfg.entry_cache_eviction_watermark,
        eviction_time_threshold_ms=cfg.entry_cache_eviction_time_threshold_ms,
    )
    assert (mgr.max_bytes, mgr.watermark_bytes) == (3 << 20, 3 << 19)


def test_bad_cache_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="watermark"):
        EntryCacheManager(100, eviction_watermark=1.5)
    with pytest.raises(ValueError, match=">= 0"):
        EntryCacheManager(-1)


def test_the_eviction_interval_spaces_the_age_checks() -> None:
    mgr, clock = manager(1 << 20, eviction_time_threshold_ms=100, eviction_interval_ms=1_000)
    cache = mgr.new_cache("a")
    cache.put_entries(1, 0, [b"a"])
    clock.advance(0.5)  # past the age threshold, but the next check is 1 s away
    assert len(cache) == 1
    clock.advance(0.6)
    assert len(cache) == 0
