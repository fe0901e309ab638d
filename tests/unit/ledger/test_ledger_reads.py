"""One forward read loop (``LedgerReads.read_from``) for every reader: the topic storage
adapter's reads from a position and a cursor's reads agree with the log, from any start
(before, inside and past every ledger, across rollovers, at the tail), acknowledged entries
left out for a cursor; the ledger never moves a cursor: the cursor moves itself."""

from __future__ import annotations

import random

from magnetar.broker.bookkeeper.testing import FakeBookieCluster
from magnetar.broker.ledger import EARLIEST, ManagedLedgerConfig, ManagedLedgerFactory, Position
from magnetar.broker.storage.managed_adapter import ManagedLedgerAdapter
from magnetar.zk.memory import MemoryMetadataServer

CONFIG = ManagedLedgerConfig(
    ensemble_size=2,
    write_quorum=2,
    ack_quorum=2,
    min_ledger_rollover_time_ms=0,
    max_entries_per_ledger=5,
    retention_time_ms=-1,
    retention_size_bytes=-1,
    read_ahead_entries=0,  # the direct path; the read-ahead path has test_ledger_read_ahead
)


def _starts(log: list[Position]) -> list[Position]:
    """Every interesting start: each entry, -1 and one past the end of each ledger, the
    tail, and the sentinels' concrete forms."""
    out: set[Position] = set(log)
    for lid in {p.ledger_id for p in log}:
        n = sum(1 for p in log if p.ledger_id == lid)
        out |= {Position(lid, -1), Position(lid, n), Position(lid, n + 3)}
    out.add(Position(log[-1].ledger_id + 1, 0))
    return sorted(out)


async def test_adapter_and_cursor_reads_follow_the_log_from_any_start() -> None:
    server = MemoryMetadataServer()
    bookies = FakeBookieCluster(server, count=2)
    factory = ManagedLedgerFactory(server.connect(), bookies.factory, CONFIG, rng=random.Random(4))
    ml = await factory.open("t/ns/persistent/reads")
    log = [await ml.add(b"e%d" % i) for i in range(23)]  # 5 ledgers, the last one open
    assert len({p.ledger_id for p in log}) == 5
    cursor = await ml.open_cursor("sub", EARLIEST)
    acked = set(log[3:9:2]) | {log[14]}
    await cursor.delete(acked)
    adapter = ManagedLedgerAdapter(ml)
    rng = random.Random(9)
    for start in _starts(log):
        first = ml.ledgers.next_valid_position(start)
        after = [p for p in log if p >= first]
        for want in (1, 4, 7, 30):
            got = await adapter.read_entries(start, want)
            assert [e.position for e in got] == after[:want], (start, want)
            assert [e.data for e in got] == [b"e%d" % log.index(e.position) for e in got]
            cursor.seek(start)
            read = await cursor.read_entries(want)
            unacked = [p for p in after if p not in acked]
            assert [e.position for e in read] == unacked[:want], (start, want)
            if read:
                expect = ml.ledgers.next_valid_position(
                    Position(read[-1].position.ledger_id, read[-1].position.entry_id + 1)
                )
            else:
                expect = first
            assert cursor.read_position == expect, (start, want)
        # the ledger's loop returns where to go on, and leaves the cursor where it was
        cursor.seek(start)
        before = cursor.read_position
        got_direct, next_pos = await ml.reads.read_from(before, rng.randrange(1, 9), cursor)
        assert cursor.read_position == before
        if got_direct:
            assert next_pos > got_direct[-1].position
    await factory.close()


async def test_reads_stop_at_the_last_confirmed_entry_and_resume_there() -> None:
    server = MemoryMetadataServer()
    bookies = FakeBookieCluster(server, count=2)
    factory = ManagedLedgerFactory(server.connect(), bookies.factory, CONFIG, rng=random.Random(5))
    ml = await factory.open("t/ns/persistent/tail")
    reader = ml.new_non_durable_cursor(EARLIEST)
    assert await reader.read_entries(10) == []
    assert not reader.has_more_entries()
    first = [await ml.add(b"a%d" % i) for i in range(7)]
    assert [e.position for e in await reader.read_entries(100)] == first
    assert await reader.read_entries(100) == []
    more = [await ml.add(b"b%d" % i) for i in range(4)]
    assert [e.position for e in await reader.read_entries(100)] == more
    await factory.close()
