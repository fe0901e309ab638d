"""Dispatcher state machines over the in-memory storage: consumer selection, permits,
round robin, failover election (partition i -> i mod N), unacked limits and resume at half,
redelivery counts. No sockets: consumers send into a recording sink."""

from __future__ import annotations

import pytest
from support.dispatch import dispatched

from magnetar.broker.dispatch.consumer import Consumer, OutMessage, SubType
from magnetar.broker.dispatch.dispatchers import next_shared_consumer, pick_active_consumer
from magnetar.broker.ledger.position import Position
from magnetar.broker.storage.memory import MemoryLedger
from magnetar.broker.topics.subscription import Subscription, SubscriptionError
from magnetar.client.protocol import ServerError
from magnetar.client.protocol.proto import pulsar_api_pb2 as pb
from magnetar.clock import VirtualClock


class Sink:
    def __init__(self) -> None:
        self.messages: dict[int, list[OutMessage]] = {}
        self.active: list[tuple[int, bool]] = []
        self.closed: list[int] = []

    def send_messages(self, consumer: Consumer, messages: list[OutMessage]) -> None:
        self.messages.setdefault(consumer.consumer_id, []).extend(messages)

    def send_active_consumer_change(self, consumer: Consumer, is_active: bool) -> None:
        self.active.append((consumer.consumer_id, is_active))

    def send_close_consumer(self, consumer: Consumer) -> None:
        self.closed.append(consumer.consumer_id)

    def got(self, cid: int) -> list[int]:
        return [m.position.entry_id for m in self.messages.get(cid, [])]


def entry(n: int = 1) -> bytes:
    md = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1)
    if n > 1:
        md.num_messages_in_batch = n
    raw = md.SerializeToString()
    return len(raw).to_bytes(4, "big") + raw + b"x"


def consumer(
    cid: int,
    sub_type: SubType,
    sink: Sink,
    *,
    name: str = "",
    priority: int = 0,
    max_unacked: int = 50_000,
) -> Consumer:
    return Consumer(
        cid, name or f"c{cid}", sub_type, priority=priority, sink=sink, max_unacked=max_unacked
    )


async def make_sub(
    ledger: MemoryLedger,
    *,
    partition: int = -1,
    sub_limit: int = 200_000,
    clock: VirtualClock | None = None,
) -> Subscription:
    cursor = await ledger.open_cursor("s", initial_earliest=True)
    from magnetar.client.protocol import entry_num_messages

    return Subscription(
        "t",
        "s",
        cursor,
        lambda e: entry_num_messages(e.data),
        partition_index=partition,
        max_unacked_per_subscription=sub_limit,
        clock=clock,
    )


# ------------------------------------------------------------------ pure selection


def test_failover_picks_by_priority_then_name_and_partition_mod_n() -> None:
    sink = Sink()
    cs = [
        consumer(1, SubType.FAILOVER, sink, name="c"),
        consumer(2, SubType.FAILOVER, sink, name="a"),
        consumer(3, SubType.FAILOVER, sink, name="b"),
        consumer(4, SubType.FAILOVER, sink, name="0", priority=1),
    ]
    assert pick_active_consumer(cs, -1).name == "a"
    assert [pick_active_consumer(cs, p).name for p in range(4)] == ["a", "b", "c", "a"]
    assert pick_active_consumer([], 0) is None


def test_shared_round_robin_by_priority_and_permits() -> None:
    # Pulsar's own example: C1(p0,2) C2(p0,1) C3(p0,1) C4(p1,2) C5(p1,1)
    sink = Sink()
    cs = []
    for cid, prio, permits in [(1, 0, 2), (2, 0, 1), (3, 0, 1), (4, 1, 2), (5, 1, 1)]:
        c = consumer(cid, SubType.SHARED, sink, priority=prio)
        c.flow(permits)
        cs.append(c)
    order, start = [], 0
    while (i := next_shared_consumer(cs, start)) is not None:
        cs[i].permits -= 1
        order.append(cs[i].consumer_id)
        start = i + 1
    assert order == [1, 2, 3, 1, 4, 5, 4]


# ------------------------------------------------------------------ dispatch


async def test_no_dispatch_before_flow_and_batch_costs_its_size() -> None:
    ledger = MemoryLedger("t", 7)
    await ledger.add_entries([entry(5), entry(5), entry(1)])
    sub = await make_sub(ledger)
    sink = Sink()
    c = consumer(1, SubType.EXCLUSIVE, sink)
    sub.add_consumer(c)
    await dispatched(sub)
    assert sink.got(1) == []
    sub.flow(c, 6)  # first batch takes 5, second drives permits negative, third waits
    await dispatched(sub)
    assert sink.got(1) == [0, 1]
    assert c.permits == -4
    sub.flow(c, 5)
    await dispatched(sub)
    assert sink.got(1) == [0, 1, 2]


async def test_shared_round_robin_and_redelivery_counts() -> None:
    ledger = MemoryLedger("t", 8)
    await ledger.add_entries([entry() for _ in range(4)])
    sub = await make_sub(ledger)
    sink = Sink()
    a, b = consumer(1, SubType.SHARED, sink), consumer(2, SubType.SHARED, sink)
    sub.add_consumer(a)
    sub.add_consumer(b)
    sub.flow(a, 10)
    sub.flow(b, 10)
    await dispatched(sub)
    assert sink.got(1) == [0, 2] and sink.got(2) == [1, 3]
    sub.redeliver(a, [Position(8, 0)])
    await dispatched(sub)
    again = [m for msgs in sink.messages.values() for m in msgs if m.position.entry_id == 0]
    assert [m.redelivery_count for m in again] == [0, 1]
    await sub.ack_individual(b, [(Position(8, 1), None)])
    assert sub.cursor.is_acked(Position(8, 1))


async def test_consumer_unacked_limit_blocks_and_resumes_at_half() -> None:
    ledger = MemoryLedger("t", 9)
    await ledger.add_entries([entry() for _ in range(10)])
    sub = await make_sub(ledger)
    sink = Sink()
    c = consumer(1, SubType.SHARED, sink, max_unacked=4)
    sub.add_consumer(c)
    sub.flow(c, 100)
    await dispatched(sub)
    assert sink.got(1) == [0, 1, 2, 3] and c.blocked
    await sub.ack_individual(c, [(Position(9, 0), None)])
    await dispatched(sub)
    assert sink.got(1) == [0, 1, 2, 3]  # 3 unacked > half of 4
    await sub.ack_individual(c, [(Position(9, 1), None)])
    await dispatched(sub)
    assert sink.got(1) == [0, 1, 2, 3, 4, 5]
    c.check_invariants()


async def test_subscription_unacked_limit_blocks_and_resumes_at_half() -> None:
    ledger = MemoryLedger("t", 10)
    await ledger.add_entries([entry() for _ in range(10)])
    sub = await make_sub(ledger, sub_limit=4)
    sink = Sink()
    a, b = consumer(1, SubType.SHARED, sink), consumer(2, SubType.SHARED, sink)
    for c in (a, b):
        sub.add_consumer(c)
        sub.flow(c, 1)
    await dispatched(sub)
    sub.flow(a, 100)
    sub.flow(b, 100)
    await dispatched(sub)
    assert len(sink.got(1)) + len(sink.got(2)) == 4
    first = [Position(10, e) for e in sink.got(1)][:1] + [Position(10, e) for e in sink.got(2)][:1]
    await sub.ack_individual(a, [(first[0], None)])
    await dispatched(sub)
    assert len(sink.got(1)) + len(sink.got(2)) == 4  # 3 unacked > 2
    await sub.ack_individual(b, [(first[1], None)])
    await dispatched(sub)
    assert len(sink.got(1)) + len(sink.got(2)) > 4


async def test_failover_switch_rewinds_to_unacked_and_notifies_everyone() -> None:
    ledger = MemoryLedger("t", 11)
    await ledger.add_entries([entry() for _ in range(4)])
    sub = await make_sub(ledger)
    sink = Sink()
    b = consumer(2, SubType.FAILOVER, sink, name="b")
    a = consumer(1, SubType.FAILOVER, sink, name="a")
    sub.add_consumer(b)
    assert sink.active == [(2, True)]
    sub.add_consumer(a)  # "a" sorts first: it becomes active, everyone is told
    assert sink.active[1:] == [(2, False), (1, True)]
    sub.flow(a, 10)
    sub.flow(b, 10)
    await dispatched(sub)
    assert sink.got(1) == [0, 1, 2, 3] and sink.got(2) == []
    await sub.ack_individual(a, [(Position(11, 0), None), (Position(11, 1), None)])
    sub.remove_consumer(a)
    await dispatched(sub)
    assert sink.got(2) == [2, 3]
    assert all(m.redelivery_count == 0 for m in sink.messages[2])


async def test_exclusive_admits_one_consumer_and_types_do_not_mix() -> None:
    ledger = MemoryLedger("t", 12)
    sub = await make_sub(ledger)
    sink = Sink()
    sub.add_consumer(consumer(1, SubType.EXCLUSIVE, sink))
    with pytest.raises(SubscriptionError) as busy:
        sub.add_consumer(consumer(2, SubType.EXCLUSIVE, sink))
    assert busy.value.code == ServerError.ConsumerBusy
    with pytest.raises(SubscriptionError):
        sub.add_consumer(consumer(3, SubType.SHARED, sink))
    assert sink.active == []  # ACTIVE_CONSUMER_CHANGE is for Failover only, as Pulsar


async def test_closed_shared_consumer_returns_pending_to_others_without_count() -> None:
    ledger = MemoryLedger("t", 13)
    await ledger.add_entries([entry() for _ in range(2)])
    sub = await make_sub(ledger)
    sink = Sink()
    a, b = consumer(1, SubType.SHARED, sink), consumer(2, SubType.SHARED, sink)
    sub.add_consumer(a)
    sub.flow(a, 10)
    await dispatched(sub)
    sub.add_consumer(b)
    sub.flow(b, 10)
    sub.remove_consumer(a)
    await dispatched(sub)
    assert sink.got(2) == [0, 1]
    assert [m.redelivery_count for m in sink.messages[2]] == [0, 0]


# ------------------------------------------------------------------ Key_Shared


def keyed(key: str) -> bytes:
    md = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1, partition_key=key)
    raw = md.SerializeToString()
    return len(raw).to_bytes(4, "big") + raw + b"x"


async def make_key_shared_sub(ledger: MemoryLedger) -> Subscription:
    from magnetar.broker.topics.entries import slot_of
    from magnetar.client.protocol import entry_num_messages

    cursor = await ledger.open_cursor("s", initial_earliest=True)
    return Subscription("t", "s", cursor, lambda e: entry_num_messages(e.data), slot_of=slot_of)


def test_sticky_ranges_must_not_overlap() -> None:
    from magnetar.broker.dispatch.key_shared import KeySharedMode, KeySharedSelector

    sink = Sink()
    sel: KeySharedSelector[Consumer] = KeySharedSelector(KeySharedMode.STICKY)
    a = Consumer(1, "a", SubType.KEY_SHARED, sink=sink, key_shared_mode=1, hash_ranges=[(0, 32767)])
    b = Consumer(
        2, "b", SubType.KEY_SHARED, sink=sink, key_shared_mode=1, hash_ranges=[(32000, 65535)]
    )
    sel.add_consumer(a, a.name, a.hash_ranges)
    with pytest.raises(ValueError):
        sel.add_consumer(b, b.name, b.hash_ranges)
    b.hash_ranges = [(32768, 65535)]
    sel.add_consumer(b, b.name, b.hash_ranges)
    assert sel.select(10) is a and sel.select(40000) is b


async def test_key_shared_keeps_keys_on_one_consumer_and_order_when_one_joins() -> None:
    ledger = MemoryLedger("t", 14)
    keys = [f"k{i}" for i in range(20)]
    await ledger.add_entries([keyed(k) for k in keys])
    sub = await make_key_shared_sub(ledger)
    sink = Sink()
    a = consumer(1, SubType.KEY_SHARED, sink, name="a")
    sub.add_consumer(a)
    sub.flow(a, 100)
    await dispatched(sub)
    assert len(sink.got(1)) == 20
    b = consumer(2, SubType.KEY_SHARED, sink, name="b")
    sub.add_consumer(b)  # some slots now map to b, but they are draining on a
    sub.flow(b, 100)
    await ledger.add_entries([keyed(k) for k in keys])  # second round, same keys
    sub.notify_new_entries()
    await dispatched(sub)
    assert sink.got(2) == []  # every key still has unacked messages on a
    await sub.ack_individual(a, [(Position(14, e), None) for e in range(40)])
    await ledger.add_entries([keyed(k) for k in keys])
    sub.notify_new_entries()
    await dispatched(sub)
    from magnetar.broker.dispatch.dispatchers import KeySharedDispatcher
    from magnetar.client.protocol import key_shared_slot

    dispatcher = sub.dispatcher
    assert isinstance(dispatcher, KeySharedDispatcher) and dispatcher.selector is not None
    third = {
        m.position.entry_id: cid
        for cid in (1, 2)
        for m in sink.messages.get(cid, [])
        if m.position.entry_id >= 40
    }
    assert sorted(third) == list(range(40, 60))
    expected = {
        40 + i: dispatcher.selector.select(key_shared_slot(k)).consumer_id
        for i, k in enumerate(keys)
    }
    assert third == expected  # drained keys follow the selector again
    assert set(third.values()) == {1, 2}
    for msgs in sink.messages.values():  # per consumer, each key's entries arrive in order
        per_key: dict[int, list[int]] = {}
        for m in msgs:
            per_key.setdefault(m.position.entry_id % 20, []).append(m.position.entry_id)
        assert all(v == sorted(v) for v in per_key.values())


async def test_failover_switch_waits_for_the_old_active_consumer() -> None:
    """A better-sorted consumer joins: the switch waits (Pulsar's failover delay) so what
    the old active consumer acks meanwhile is not sent again to the new one."""
    from magnetar.broker.dispatch.dispatchers import SingleActiveConsumerDispatcher

    ledger = MemoryLedger("t", 15)
    await ledger.add_entries([entry() for _ in range(4)])
    clock = VirtualClock()
    sub = await make_sub(ledger, clock=clock)
    sink = Sink()
    b = consumer(2, SubType.FAILOVER, sink, name="b")
    sub.add_consumer(b)
    d = sub.dispatcher
    assert isinstance(d, SingleActiveConsumerDispatcher)
    d.failover_delay_ms = 200
    sub.flow(b, 10)
    await dispatched(sub)
    assert sink.got(2) == [0, 1, 2, 3]
    a = consumer(1, SubType.FAILOVER, sink, name="a")
    sub.add_consumer(a)  # "a" sorts first: active, but only after the delay
    sub.flow(a, 10)
    await dispatched(sub)
    assert d.active is a and d.switching and sink.got(1) == []
    await sub.ack_individual(b, [(Position(15, 0), None), (Position(15, 1), None)])
    clock.advance(0.199)  # just before the delay: still waiting for b
    await dispatched(sub)
    assert d.switching and sink.got(1) == []
    clock.advance(0.001)
    await dispatched(sub)
    assert sink.got(1) == [2, 3]  # not 0 and 1: acked by b during the delay
    assert not d.switching


async def test_failover_switch_is_immediate_when_the_old_active_leaves() -> None:
    from magnetar.broker.dispatch.dispatchers import SingleActiveConsumerDispatcher

    ledger = MemoryLedger("t", 16)
    await ledger.add_entries([entry() for _ in range(3)])
    sub = await make_sub(ledger, clock=VirtualClock())  # the delay never fires: time stands
    sink = Sink()
    b = consumer(2, SubType.FAILOVER, sink, name="b")
    c = consumer(3, SubType.FAILOVER, sink, name="c")
    sub.add_consumer(b)
    sub.add_consumer(c)
    d = sub.dispatcher
    assert isinstance(d, SingleActiveConsumerDispatcher)
    d.failover_delay_ms = 60_000
    sub.flow(b, 10)
    sub.flow(c, 10)
    await dispatched(sub)
    assert sink.got(2) == [0, 1, 2]
    a = consumer(1, SubType.FAILOVER, sink, name="a")
    sub.add_consumer(a)
    sub.flow(a, 10)
    await dispatched(sub)
    assert d.switching and sink.got(1) == []
    sub.remove_consumer(b)  # the previous active left: nobody can ack, switch now
    await dispatched(sub)
    assert sink.got(1) == [0, 1, 2] and not d.switching
    sub.remove_consumer(a)  # the active leaves: immediate too
    await dispatched(sub)
    assert sink.got(3) == [0, 1, 2]
