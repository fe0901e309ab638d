"""The Key_Shared dispatcher (``broker.key_shared`` wired in) over the in-memory storage.

A randomised model run drives a real ``Subscription``: keyed entries (some batches), consumers
joining, flowing, acking, nacking, closing; at every delivery it checks per-key order (every
earlier unacked entry of the key is outstanding on the same consumer, and no other consumer
holds the key), after every step the dispatcher's invariants, and at the end that every entry
is acked with nothing stuck. Plus: policy from SUBSCRIBE (out-of-order flag, mode), error
codes, statistics, delayed entries parked when due.
"""

from __future__ import annotations

import bisect
import random

import pytest
from support.dispatch import dispatched

from magnetar.broker.dispatch.consumer import Consumer, OutMessage, SubType
from magnetar.broker.dispatch.dispatchers import KeySharedDispatcher
from magnetar.broker.ledger.position import Position
from magnetar.broker.storage.memory import MemoryLedger
from magnetar.broker.topics.entries import slot_of
from magnetar.broker.topics.subscription import Subscription, SubscriptionError
from magnetar.client.protocol import ServerError, entry_deliver_at, entry_num_messages
from magnetar.client.protocol.proto import pulsar_api_pb2 as pb
from magnetar.clock import VirtualClock


def keyed(key: str | None, n: int = 1, deliver_at: int = 0) -> bytes:
    md = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1)
    if key is not None:
        md.partition_key = key
    if n > 1:
        md.num_messages_in_batch = n
    if deliver_at:
        md.deliver_at_time = deliver_at
    raw = md.SerializeToString()
    return len(raw).to_bytes(4, "big") + raw + b"x"


class Model:
    """What the consumers hold, and the per-key order check at each delivery."""

    def __init__(self, ledger_id: int) -> None:
        self.ledger_id = ledger_id
        self.keys: list[str | None] = []  # entry id -> key
        self.where: dict[int, Consumer] = {}  # outstanding entry -> consumer
        self.unacked_by_key: dict[str | None, list[int]] = {}
        self.acked: set[int] = set()
        self.ordered = True
        self.deliveries = 0

    def published(self, key: str | None) -> None:
        eid = len(self.keys)
        self.keys.append(key)
        self.unacked_by_key.setdefault(key, []).append(eid)

    def send_messages(self, consumer: Consumer, messages: list[OutMessage]) -> None:
        for m in messages:
            eid = m.position.entry_id
            key = self.keys[eid]
            assert eid not in self.acked, f"acked entry {eid} delivered"
            assert eid not in self.where, f"entry {eid} delivered twice at once"
            if self.ordered:
                for q in self.unacked_by_key[key]:
                    if q < eid:
                        assert self.where.get(q) is consumer, f"{eid} overtakes {q} ({key!r})"
                    elif q in self.where:
                        assert self.where[q] is consumer, f"key {key!r} on two consumers"
            self.where[eid] = consumer
            self.deliveries += 1

    def send_active_consumer_change(self, consumer: Consumer, is_active: bool) -> None:
        pass

    def send_close_consumer(self, consumer: Consumer) -> None:
        pass

    def held(self, c: Consumer) -> list[int]:
        return sorted(e for e, x in self.where.items() if x is c)

    def acked_now(self, eids: list[int]) -> None:
        for eid in eids:
            del self.where[eid]
            self.acked.add(eid)
            lst = self.unacked_by_key[self.keys[eid]]
            del lst[bisect.bisect_left(lst, eid)]

    def returned(self, eids: list[int]) -> None:
        for eid in eids:
            self.where.pop(eid, None)


async def make_sub(ledger: MemoryLedger, **kw: object) -> Subscription:
    cursor = await ledger.open_cursor("s", initial_earliest=True)
    return Subscription(
        "t",
        "s",
        cursor,
        lambda e: entry_num_messages(e.data),
        slot_of=slot_of,
        deliver_at_of=entry_deliver_at,
        **kw,  # type: ignore[arg-type]
    )


@pytest.mark.parametrize("seed", range(6))
async def test_random_joins_leaves_nacks_keep_key_order_and_nothing_sticks(seed: int) -> None:
    rng = random.Random(seed)
    ledger = MemoryLedger("t", 40 + seed)
    sub = await make_sub(ledger, max_unacked_per_subscription=rng.choice([0, 40, 200_000]))
    model = Model(40 + seed)
    keys: list[str | None] = [f"k{i}" for i in range(rng.randint(2, 15))] + [None]
    consumers: list[Consumer] = []
    names = 0

    def pos(eid: int) -> Position:
        return Position(40 + seed, eid)

    async def publish(n: int) -> None:
        datas = []
        for _ in range(n):
            key = rng.choice(keys)
            datas.append(keyed(key, rng.choice([1, 1, 1, 3])))
            model.published(key)
        await ledger.add_entries(datas)
        sub.notify_new_entries()

    def join() -> None:
        nonlocal names
        names += 1
        c = Consumer(
            names,
            f"c{names}",
            SubType.KEY_SHARED,
            sink=model,
            max_unacked=rng.choice([0, 10, 50_000]),
        )
        sub.add_consumer(c)
        consumers.append(c)
        sub.flow(c, rng.randint(0, 20))

    async def ack(c: Consumer, eids: list[int]) -> None:
        model.acked_now(eids)
        await sub.ack_individual(c, [(pos(e), None) for e in eids])

    for _ in range(250):
        op = rng.random()
        if op < 0.25:
            await publish(rng.randint(1, 12))
        elif op < 0.35 and len(consumers) < 4:
            join()
        elif op < 0.55 and consumers:
            sub.flow(rng.choice(consumers), rng.randint(1, 20))
        elif op < 0.8 and consumers:
            c = rng.choice(consumers)
            held = model.held(c)
            await ack(c, rng.sample(held, rng.randint(0, len(held))))
        elif op < 0.88 and consumers:
            c = rng.choice(consumers)
            held = model.held(c)
            if rng.random() < 0.3:
                model.returned(held)
                sub.redeliver(c, None)
            else:
                picked = rng.sample(held, rng.randint(0, len(held)))
                model.returned(picked)
                sub.redeliver(c, [pos(e) for e in picked])
        elif op < 0.96 and consumers:
            c = consumers.pop(rng.randrange(len(consumers)))
            if rng.random() < 0.5:  # graceful: acks some first
                held = model.held(c)
                await ack(c, rng.sample(held, rng.randint(0, len(held))))
            model.returned(model.held(c))
            sub.remove_consumer(c)
        await dispatched(sub)
        d = sub.dispatcher
        if isinstance(d, KeySharedDispatcher):
            d.check_invariants()
            for c in consumers:
                assert sorted(p.entry_id for p in c.pending) == model.held(c)

    # the end: someone is there, everyone acks and flows until every entry is acked
    if not consumers:
        join()
    total = len(model.keys)
    for _ in range(500):
        if len(model.acked) == total:
            break
        for c in consumers:
            await ack(c, model.held(c))
            sub.flow(c, 50)
        await dispatched(sub)
    assert len(model.acked) == total, f"stuck: {total - len(model.acked)} never acked"
    assert sub.cursor.backlog() == 0
    assert model.deliveries >= total


async def test_out_of_order_flag_and_mode_come_from_the_consumer() -> None:
    ledger = MemoryLedger("t", 60)
    sub = await make_sub(ledger)
    a = Consumer(1, "a", SubType.KEY_SHARED, allow_out_of_order=True)
    sub.add_consumer(a)
    d = sub.dispatcher
    assert isinstance(d, KeySharedDispatcher) and d.ks is not None
    assert d.ks.policy.allow_out_of_order
    with pytest.raises(SubscriptionError) as busy:  # ordered consumer on an out-of-order sub
        sub.add_consumer(Consumer(2, "b", SubType.KEY_SHARED))
    assert busy.value.code == ServerError.ConsumerBusy
    with pytest.raises(SubscriptionError) as mode:
        sub.add_consumer(
            Consumer(3, "c", SubType.KEY_SHARED, key_shared_mode=1, hash_ranges=[(0, 10)])
        )
    assert mode.value.code == ServerError.ConsumerBusy
    sub.remove_consumer(a)
    # the subscription is empty: the next consumer fixes a new policy
    s = Consumer(4, "s", SubType.KEY_SHARED, key_shared_mode=1, hash_ranges=[(0, 100)])
    sub.add_consumer(s)
    assert d.ks is not None and d.ks.policy.mode.name == "STICKY"
    with pytest.raises(SubscriptionError) as overlap:
        sub.add_consumer(
            Consumer(5, "t", SubType.KEY_SHARED, key_shared_mode=1, hash_ranges=[(50, 200)])
        )
    assert overlap.value.code == ServerError.ConsumerAssignError
    assert "overlaps" in overlap.value.message


async def test_draining_statistics_and_a_join_waits_for_the_old_consumer() -> None:
    ledger = MemoryLedger("t", 61)
    keys = [f"k{i}" for i in range(40)]
    await ledger.add_entries([keyed(k) for k in keys])
    sub = await make_sub(ledger)
    model = Model(61)
    for k in keys:
        model.published(k)
    a = Consumer(1, "a", SubType.KEY_SHARED, sink=model)
    sub.add_consumer(a)
    sub.flow(a, 100)
    await dispatched(sub)
    assert len(model.held(a)) == 40
    b = Consumer(2, "b", SubType.KEY_SHARED, sink=model)
    sub.add_consumer(b)
    sub.flow(b, 100)
    await ledger.add_entries([keyed(k) for k in keys])
    for k in keys:
        model.published(k)
    sub.notify_new_entries()
    await dispatched(sub)
    assert model.held(b) == []  # every key of b is still held by a
    stats = sub.statistics()
    assert stats.draining_hashes_count > 0 and stats.draining_hashes_pending_messages > 0
    first = model.held(a)[:40]
    model.acked_now(first)
    await sub.ack_individual(a, [(Position(61, e), None) for e in first])
    await dispatched(sub)
    assert model.held(b)  # drained keys moved to b
    assert sub.statistics().draining_hashes_count == 0
    assert sub.statistics().draining_hashes_cleared_total > 0
    d = sub.dispatcher
    assert isinstance(d, KeySharedDispatcher)
    d.check_invariants()


async def test_delayed_entries_are_parked_when_due_and_keep_their_key_order() -> None:
    clock = VirtualClock()
    t0 = clock.now_ms()
    ledger = MemoryLedger("t", 62)
    sub = await make_sub(ledger, clock=clock)
    model = Model(62)
    await ledger.add_entries([keyed("k", deliver_at=t0 + 500), keyed("k"), keyed("j")])
    for k in ("k", "k", "j"):
        model.published(k)
    model.ordered = False  # a delayed entry is overtaken by design (as in Pulsar)
    a = Consumer(1, "a", SubType.KEY_SHARED, sink=model)
    sub.add_consumer(a)
    d = sub.dispatcher
    assert isinstance(d, KeySharedDispatcher)
    sub.flow(a, 10)
    await dispatched(sub)
    assert model.held(a) == [1, 2] and d.delayed_count == 1
    clock.advance(0.4)
    await dispatched(sub)
    assert model.held(a) == [1, 2]  # not early
    clock.advance(0.2)  # the index's due timer schedules the dispatcher
    await dispatched(sub)
    assert model.held(a) == [0, 1, 2]
    d.check_invariants()


async def test_delayed_entry_due_after_restart_is_read_to_learn_its_slot() -> None:
    """The index hands out a position whose slot this dispatcher never saw (held in an
    earlier life): it is read, parked with its slot and delivered, not stuck."""
    clock = VirtualClock()
    t0 = clock.now_ms()
    ledger = MemoryLedger("t", 63)
    sub = await make_sub(ledger, clock=clock)
    model = Model(63)
    await ledger.add_entries([keyed("k", deliver_at=t0 + 500), keyed("k")])
    for k in ("k", "k"):
        model.published(k)
    model.ordered = False
    a = Consumer(1, "a", SubType.KEY_SHARED, sink=model)
    sub.add_consumer(a)
    d = sub.dispatcher
    assert isinstance(d, KeySharedDispatcher)
    sub.flow(a, 10)
    await dispatched(sub)
    assert model.held(a) == [1] and d.delayed_count == 1
    d._delayed_slots.clear()  # as if held before a restart
    clock.advance(0.6)
    await dispatched(sub)
    assert model.held(a) == [0, 1]
    d.check_invariants()
