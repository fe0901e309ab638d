"""Dispatch reads sized in entries from permits in messages, and dispatch keeping up with a
publish flood. In-memory storage behind a cursor that counts reads and seeks; no sockets."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from support.autojump import AutojumpClock
from support.dispatch import dispatched
from support.waiting import wait_for

from magnetar.broker.dispatch.consumer import Consumer, OutMessage, SubType
from magnetar.broker.dispatch.dispatchers import DISPATCH_ROUNDS_PER_TURN, READ_ENTRIES_MAX
from magnetar.broker.ledger.position import Position
from magnetar.broker.storage.contract import Entry
from magnetar.broker.storage.memory import MemoryLedger
from magnetar.broker.topics.subscription import Subscription
from magnetar.client.protocol import entry_num_messages
from magnetar.client.protocol.proto import pulsar_api_pb2 as pb


def batch(n: int) -> bytes:
    md = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1)
    if n > 1:
        md.num_messages_in_batch = n
    raw = md.SerializeToString()
    return len(raw).to_bytes(4, "big") + raw + b"x"


class CountingCursor:
    """Delegates to a real (in-memory) cursor; counts what the dispatcher reads and seeks."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.entries_read = 0
        self.positions_read = 0
        self.reads = 0
        self.seeks = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def read_entries(self, max_entries: int) -> list[Entry]:
        out: list[Entry] = await self._inner.read_entries(max_entries)
        self.reads += 1
        self.entries_read += len(out)
        return out

    async def read_positions(self, positions: list[Position]) -> list[Entry]:
        out: list[Entry] = await self._inner.read_positions(positions)
        self.positions_read += len(out)
        return out

    def seek(self, position: Position) -> None:
        self.seeks += 1
        self._inner.seek(position)


class Sink:
    def __init__(self) -> None:
        self.messages: dict[int, list[OutMessage]] = {}

    def send_messages(self, consumer: Consumer, messages: list[OutMessage]) -> None:
        self.messages.setdefault(consumer.consumer_id, []).extend(messages)

    def send_active_consumer_change(self, consumer: Consumer, is_active: bool) -> None:
        pass

    def send_close_consumer(self, consumer: Consumer) -> None:
        pass

    def count(self) -> int:
        return sum(len(v) for v in self.messages.values())


def record_asked(cursor: CountingCursor, failures: int = 0) -> list[int]:
    """The ``max_entries`` of every read the dispatcher asks for, in order; the first
    ``failures`` reads fail (no bookie answered)."""
    asked: list[int] = []
    inner_read = cursor.read_entries

    async def read_entries(max_entries: int) -> list[Entry]:
        asked.append(max_entries)
        if len(asked) <= failures:
            raise ConnectionError("no bookie answered")
        return await inner_read(max_entries)

    cursor.read_entries = read_entries  # type: ignore[method-assign]
    return asked


async def make_sub(ledger: MemoryLedger, **kw: Any) -> tuple[Subscription, CountingCursor]:
    cursor = CountingCursor(await ledger.open_cursor("s", initial_earliest=True))
    sub = Subscription("t", "s", cursor, lambda e: entry_num_messages(e.data), **kw)
    return sub, cursor


@pytest.mark.parametrize("sub_type", [SubType.EXCLUSIVE, SubType.FAILOVER, SubType.SHARED])
async def test_batches_of_1000_with_1000_permits_read_what_they_send(sub_type: SubType) -> None:
    """A consumer with 1000 permits and 1000-message batches takes one entry per FLOW: the
    dispatcher must read about one entry per round, not 100 and put 99 back each time."""
    ledger = MemoryLedger("t", 21)
    await ledger.add_entries([batch(1000) for _ in range(60)])
    sub, cursor = await make_sub(ledger)
    sink = Sink()
    c = Consumer(1, "c", sub_type, sink=sink, max_unacked=0)
    sub.add_consumer(c)
    for i in range(60):
        sub.flow(c, 1000)
        await dispatched(sub)
        assert sink.count() == i + 1
    got = [m.position.entry_id for m in sink.messages[1]]
    assert got == list(range(60))
    # only the very first round (average unknown yet) may over-read
    overread = cursor.entries_read + cursor.positions_read - 60
    assert overread <= READ_ENTRIES_MAX, overread
    assert cursor.seeks <= 1
    # after the first round, each read brought back exactly what was sent
    assert cursor.entries_read + cursor.positions_read <= 60 + READ_ENTRIES_MAX - 1
    assert sub.dispatcher is not None
    assert sub.dispatcher.avg_msgs_per_entry == pytest.approx(1000)
    assert sub.dispatcher.entries_to_read(1000) == 1
    assert sub.dispatcher.entries_to_read(2500) == 3


async def test_read_size_follows_the_average_batch_size() -> None:
    ledger = MemoryLedger("t", 22)
    await ledger.add_entries([batch(10) for _ in range(500)])
    sub, cursor = await make_sub(ledger)
    sink = Sink()
    c = Consumer(1, "c", SubType.EXCLUSIVE, sink=sink)
    sub.add_consumer(c)
    for _ in range(40):
        sub.flow(c, 100)
        await dispatched(sub)
    assert sink.count() == 400
    assert cursor.seeks <= 1  # 100 permits / 10 per entry = 10 entries per read
    assert sub.dispatcher is not None and sub.dispatcher.entries_to_read(100) == 10


@pytest.mark.parametrize("sub_type", [SubType.EXCLUSIVE, SubType.SHARED])
async def test_dispatch_keeps_up_with_a_publish_flood(sub_type: SubType) -> None:
    """A producer appends 1,500 entries per loop turn (one socket read's worth of SENDs);
    the dispatcher must get enough rounds between those turns that the backlog stays
    bounded (it grew without bound with one 100-entry round per turn)."""
    ledger = MemoryLedger("t", 23)
    sub, _ = await make_sub(ledger, max_unacked_per_subscription=0)
    sink = Sink()
    c = Consumer(1, "c", sub_type, sink=sink, max_unacked=0)
    sub.add_consumer(c)
    sub.flow(c, 10**9)
    per_turn, turns = 1500, 12
    assert per_turn <= DISPATCH_ROUNDS_PER_TURN * READ_ENTRIES_MAX
    backlog_max = 0
    for i in range(turns):
        await ledger.add_entries([batch(1)] * per_turn)
        sub.notify_new_entries()
        await asyncio.sleep(0)  # models the producer's turn: one socket read, then a yield
        backlog_max = max(backlog_max, (i + 1) * per_turn - sink.count())
    assert backlog_max <= 2 * per_turn, backlog_max
    await dispatched(sub)
    assert sink.count() == turns * per_turn


class ClosedThrottle:
    """A dispatch throttle with no tokens: allows nothing, remembers who to wake."""

    def __init__(self) -> None:
        self.wake: Any = None

    def allowed(self, permits: int, wake: Any) -> int:
        self.wake = wake
        return 0

    def charge(self, messages: int, size: int) -> None:
        pass


@pytest.mark.parametrize("sub_type", [SubType.EXCLUSIVE, SubType.SHARED, SubType.KEY_SHARED])
async def test_a_throttled_dispatcher_waits_instead_of_spinning(sub_type: SubType) -> None:
    ledger = MemoryLedger("t", 24)
    await ledger.add_entries([batch(1) for _ in range(10)])
    sub, _ = await make_sub(ledger)
    sink = Sink()
    a = Consumer(1, "a", sub_type, sink=sink)
    sub.add_consumer(a)
    sub.flow(a, 5)
    await dispatched(sub)
    assert sink.count() == 5
    if sub_type is SubType.SHARED:
        sub.redeliver(a, None)  # a non-empty replay set: the round used to report progress
    d = sub.dispatcher
    assert d is not None
    throttle = d.throttle = ClosedThrottle()
    sub.flow(a, 100)
    rounds = d.rounds
    await dispatched(sub)
    assert d.rounds - rounds <= 2  # one round found no tokens and stopped
    assert throttle.wake is not None
    d.throttle = None
    throttle.wake()
    await dispatched(sub)
    assert sink.count() == (15 if sub_type is SubType.SHARED else 10)


async def test_key_shared_replays_parked_entries_from_memory_not_storage() -> None:
    """One hot key, three consumers: the owner of the key runs out of permits while the
    others have plenty, so each read parks most entries. Replaying them must not read each
    one back from storage (a bookie round trip per entry with the real ledger)."""
    from magnetar.broker.dispatch.dispatchers import KeySharedDispatcher
    from magnetar.broker.topics.entries import slot_of

    ledger = MemoryLedger("t", 25)
    md = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1, partition_key="hot")
    raw = md.SerializeToString()
    data = len(raw).to_bytes(4, "big") + raw + b"x"
    await ledger.add_entries([data] * 300)
    sub, cursor = await make_sub(ledger, slot_of=slot_of)
    sink = Sink()
    cs = [Consumer(i, f"c{i}", SubType.KEY_SHARED, sink=sink) for i in (1, 2, 3)]
    for c in cs:
        sub.add_consumer(c)
        sub.flow(c, 1000)
    await dispatched(sub)
    d = sub.dispatcher
    assert isinstance(d, KeySharedDispatcher)
    owner = next(c for c in cs if sink.messages.get(c.consumer_id))
    assert len(sink.messages[owner.consumer_id]) == 300  # the hot key's owner got all
    for c in cs:  # now the owner is short of permits, the others are not
        c.permits = 0
    await ledger.add_entries([data] * 300)
    for c in cs:
        sub.flow(c, 1000 if c is not owner else 10)
    await dispatched(sub)
    assert d.ks is not None and d.ks.parked_count > 0
    d.check_invariants()
    for _ in range(40):
        sub.flow(owner, 10)
        await dispatched(sub)
    assert len(sink.messages[owner.consumer_id]) == 600
    assert [m.position.entry_id for m in sink.messages[owner.consumer_id]] == list(range(600))
    assert cursor.positions_read == 0  # every replay came from the kept entries
    d.check_invariants()


async def test_dispatcher_max_read_batch_size_bounds_every_read() -> None:
    """``dispatcher_max_read_batch_size`` reaches the dispatcher: no read asks for more."""
    ledger = MemoryLedger("t", 24)
    await ledger.add_entries([batch(1) for _ in range(50)])
    sub, cursor = await make_sub(ledger, max_read_entries=7)
    asked = record_asked(cursor)
    sink = Sink()
    c = Consumer(1, "c", SubType.SHARED, sink=sink, max_unacked=0)
    sub.add_consumer(c)
    sub.flow(c, 1000)
    assert sub.dispatcher is not None
    await wait_for(lambda: sink.count() >= 50, timeout_s=10)
    assert asked and max(asked) <= 7


async def test_dispatcher_max_read_size_bytes_bounds_reads_by_the_average_entry() -> None:
    """``dispatcher_max_read_size_bytes``: once the average entry size is known, a read asks
    for at most max bytes / average entry entries (at least one); 0 lifts the limit."""
    ledger = MemoryLedger("t", 26)
    big = batch(1) + b"y" * 1000  # ~1 KB entries, one message each
    await ledger.add_entries([big for _ in range(200)])
    sub, cursor = await make_sub(ledger, max_read_bytes=4 * len(big))
    asked = record_asked(cursor)
    sink = Sink()
    c = Consumer(1, "c", SubType.SHARED, sink=sink, max_unacked=0)
    sub.add_consumer(c)
    sub.flow(c, 1000)
    await wait_for(lambda: sink.count() >= 200, timeout_s=10)
    assert asked[0] == READ_ENTRIES_MAX  # the first read: no average yet
    assert asked[1:] and max(asked[1:]) == 4
    d = sub.dispatcher
    assert d is not None and d.avg_entry_bytes == pytest.approx(len(big))
    d.max_read_bytes = len(big) // 2
    assert d.entries_to_read(50) == 1  # never less than one entry
    d.max_read_bytes = 0
    assert d.entries_to_read(50) == 50


@pytest.mark.parametrize("sub_type", [SubType.EXCLUSIVE, SubType.SHARED, SubType.KEY_SHARED])
async def test_a_failed_read_is_retried_on_the_clock_from_the_min_read_batch_size(
    sub_type: SubType,
) -> None:
    """Reads that fail (no bookie answers) do not stall the subscription: with nothing else
    to wake it (the consumer waits with its permits), the round is retried after a doubling
    back-off (0.1, 0.2, 0.4 s), asking for ``dispatcher_min_read_batch_size`` entries first
    and doubling back on each success, as Pulsar's dispatcher does."""
    ledger = MemoryLedger("t", 27)
    await ledger.add_entries([batch(1) for _ in range(200)])
    async with AutojumpClock() as clock:
        sub, cursor = await make_sub(ledger, clock=clock, min_read_entries=3)
        asked = record_asked(cursor, failures=3)
        sink = Sink()
        c = Consumer(1, "c", sub_type, sink=sink, max_unacked=0)
        t0 = clock.monotonic_ms()
        sub.add_consumer(c)
        sub.flow(c, 1000)
        await wait_for(lambda: sink.count() >= 200, 30, "every entry dispatched")
        assert clock.monotonic_ms() - t0 >= 700  # 0.1 + 0.2 + 0.4 s of back-off
    got = [m.position.entry_id for m in sink.messages[1]]
    assert got == list(range(200))
    assert asked[:6] == [READ_ENTRIES_MAX, 3, 3, 3, 6, 12]
    assert sub.dispatcher is not None and sub.dispatcher.read_failures == 3


@pytest.mark.parametrize("tracker", [True, False])
async def test_redelivery_tracker_setting_decides_the_count_sent(tracker: bool) -> None:
    """``subscription_redelivery_tracker_enabled=false``: a redelivered message says 0, as
    Pulsar's disabled tracker; enabled it says 1."""
    ledger = MemoryLedger("t", 25)
    await ledger.add_entries([batch(1)])
    sub, _ = await make_sub(ledger, redelivery_tracker=tracker)
    sink = Sink()
    c = Consumer(1, "c", SubType.SHARED, sink=sink, max_unacked=0)
    sub.add_consumer(c)
    sub.flow(c, 10)
    await wait_for(lambda: sink.count() >= 1, timeout_s=10)
    sub.redeliver(c, [sink.messages[1][0].position])
    await wait_for(lambda: sink.count() >= 2, timeout_s=10)
    assert sink.messages[1][1].redelivery_count == (1 if tracker else 0)
