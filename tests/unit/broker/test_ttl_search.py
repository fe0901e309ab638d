"""TTL expiry finds its boundary by binary search on a managed ledger.

``find_expired`` on a topic whose ledger is a managed ledger uses the ledger's own
``find_by_publish_time`` (bound here to a small in-memory stand-in with the same
``ledger_sizes`` / ``read_range`` surface): it must give what the linear scan gives on
publish-ordered entries (any cutoff, any start, start one past a ledger's end, nothing or
everything expired), read O(log n) entries however large the backlog (the scan was capped
at ``EXPIRY_SCAN_MAX_ENTRIES`` per check), and fall back to the scan when the search fails.
"""

from __future__ import annotations

import random
import struct
from typing import Any

import pytest

from magnetar.broker.ledger.position import Position
from magnetar.broker.ledger.reads import find_by_publish_time
from magnetar.broker.policies import ttl
from magnetar.broker.storage.contract import Entry
from magnetar.client.protocol.proto import pulsar_api_pb2 as pb


def entry_bytes(publish_time: int) -> bytes:
    md = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=publish_time)
    raw = md.SerializeToString()
    return struct.pack(">I", len(raw)) + raw + b"x"


class _Stored:
    def __init__(self, payload: bytes) -> None:
        self.payload = payload


class FakeManagedLedger:
    """Ledgers of entries in memory, with the managed ledger's search bound to them."""

    def __init__(self, ledgers: list[list[int]], first_ledger_id: int = 3) -> None:
        self.ledgers = {
            first_ledger_id + i: [entry_bytes(t) for t in ts] for i, ts in enumerate(ledgers)
        }
        self.reads = 0
        self.fail = False

    def ledger_sizes(self) -> list[tuple[int, int, int]]:
        return [(lid, len(es), sum(map(len, es))) for lid, es in self.ledgers.items()]

    async def read_range(self, ledger_id: int, first: int, last: int) -> list[_Stored]:
        if self.fail:
            raise RuntimeError("ledger gone")
        self.reads += 1
        return [_Stored(d) for d in self.ledgers[ledger_id][first : last + 1]]

    async def find_by_publish_time(self, publish_time_ms: int, extract: Any) -> Position | None:
        return await find_by_publish_time(
            self.ledger_sizes(), self.read_range, publish_time_ms, extract
        )


class TopicLedger:
    """The topic's view of the same entries (what the linear scan reads)."""

    def __init__(self, ml: FakeManagedLedger) -> None:
        self.ml = ml
        self.scan_reads = 0

    @property
    def last_confirmed(self) -> Position | None:
        lid = max(lid for lid, es in self.ml.ledgers.items() if es)
        return Position(lid, len(self.ml.ledgers[lid]) - 1)

    def ledger_sizes(self) -> list[tuple[int, int, int]]:
        return self.ml.ledger_sizes()

    async def find_by_publish_time(self, publish_time_ms: int, extract: Any) -> Position | None:
        return await self.ml.find_by_publish_time(publish_time_ms, extract)  # type: ignore[arg-type]

    async def read_entries(self, start: Position, max_entries: int) -> list[Entry]:
        self.scan_reads += 1
        out: list[Entry] = []
        for lid in sorted(self.ml.ledgers):
            for eid, data in enumerate(self.ml.ledgers[lid]):
                if Position(lid, eid) >= start and len(out) < max_entries:
                    out.append(Entry(Position(lid, eid), data))
        return out


class Topic:
    def __init__(self, ledger: Any) -> None:
        self.ledger = ledger


class ScanOnly:
    """The same entries without the managed ledger behind them (in-memory storage)."""

    def __init__(self, inner: TopicLedger) -> None:
        self._inner = inner

    @property
    def last_confirmed(self) -> Position | None:
        return self._inner.last_confirmed

    async def read_entries(self, start: Position, max_entries: int) -> list[Entry]:
        return await self._inner.read_entries(start, max_entries)


def layout(rng: random.Random) -> list[list[int]]:
    t = 1_000
    ledgers = []
    for _ in range(rng.randint(1, 5)):
        ts = []
        for _ in range(rng.randint(1, 30)):
            t += rng.choice([0, 1, 1, 5])
            ts.append(t)
        ledgers.append(ts)
    return ledgers


@pytest.mark.parametrize("seed", range(40))
async def test_search_finds_what_the_scan_finds(seed: int) -> None:
    rng = random.Random(seed)
    ml = FakeManagedLedger(layout(rng))
    topic = Topic(TopicLedger(ml))
    scan = Topic(ScanOnly(topic.ledger))
    positions = [Position(lid, e) for lid, es in ml.ledgers.items() for e in range(len(es) + 1)]
    for _ in range(15):
        start = rng.choice(positions)
        cutoff = rng.randint(900, 1_300)
        want = await ttl._find_expired_by_scan(scan, start, cutoff)
        got = await ttl.find_expired(topic, start, cutoff)
        assert got == want, (start, cutoff)


async def test_a_huge_backlog_expires_in_one_check_with_few_reads() -> None:
    n = 300_000  # six times what one linear check could scan
    ml = FakeManagedLedger([list(range(i, i + 50_000)) for i in range(0, n, 50_000)])
    topic = Topic(TopicLedger(ml))
    found, count = await ttl.find_expired(topic, Position(3, 0), cutoff_ms=n - 1_000)
    assert found == Position(8, 50_000 - 1_000) and count == n - 999
    assert ml.reads <= 40 and topic.ledger.scan_reads == 0
    assert count > ttl.EXPIRY_SCAN_MAX_ENTRIES


async def test_nothing_and_everything_expired() -> None:
    ml = FakeManagedLedger([[10, 20], [30]])
    topic = Topic(TopicLedger(ml))
    assert await ttl.find_expired(topic, Position(3, 0), 5) == (None, 0)
    assert await ttl.find_expired(topic, Position(3, 0), 99) == (Position(4, 0), 3)
    assert await ttl.find_expired(topic, Position(3, 2), 99) == (Position(4, 0), 1)
    assert await ttl.find_expired(topic, Position(4, 1), 99) == (None, 0)  # all acked


async def test_a_failing_search_falls_back_to_the_scan() -> None:
    ml = FakeManagedLedger([[10, 20], [30]])
    ml.fail = True
    topic = Topic(TopicLedger(ml))
    assert await ttl.find_expired(topic, Position(3, 0), 25) == (Position(3, 1), 2)
    assert topic.ledger.scan_reads > 0


async def _position_after_reading(topic: Any, sub: Any, n: int) -> Position | None:
    """The oracle: the ``n``-th entry after the mark-delete position, found by reading."""
    pos = Position(
        sub.cursor.mark_delete_position.ledger_id, sub.cursor.mark_delete_position.entry_id + 1
    )
    found: Position | None = None
    while n > 0:
        entries = [e for e in await topic.ledger.read_entries(pos, n) if e.position >= pos]
        if not entries:
            break
        found = entries[-1].position
        n -= len(entries)
        pos = Position(found.ledger_id, found.entry_id + 1)
    return found


class _Cursor:
    def __init__(self, mark_delete: Position) -> None:
        self.mark_delete_position = mark_delete


class _Sub:
    def __init__(self, mark_delete: Position) -> None:
        self.cursor = _Cursor(mark_delete)


@pytest.mark.parametrize("seed", range(20))
async def test_backlog_eviction_target_counted_without_reading(seed: int) -> None:
    from magnetar.broker.policies import backlog_quota

    rng = random.Random(seed)
    ml = FakeManagedLedger(layout(rng))
    topic = Topic(TopicLedger(ml))
    scan = Topic(ScanOnly(topic.ledger))
    positions = [Position(lid, e) for lid, es in ml.ledgers.items() for e in range(-1, len(es))]
    for _ in range(15):
        sub = _Sub(rng.choice(positions))
        n = rng.randint(0, 60)
        want = await _position_after_reading(scan, sub, n)
        reads = topic.ledger.scan_reads
        got = await backlog_quota._position_after_skipping(topic, sub, n)
        assert got == want, (sub.cursor.mark_delete_position, n)
        assert topic.ledger.scan_reads == reads and ml.reads == 0  # counted, not read
