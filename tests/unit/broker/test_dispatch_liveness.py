"""Liveness of the Shared and Key_Shared dispatchers under clients that behave like the
official one: every published message is eventually delivered while consumers keep
acknowledging.

A seeded random run drives a real ``Subscription`` (in-memory storage) with fake clients
that do what the official client does with permits (reference: pulsar-protocol.md 3.8): FLOW
``receiver_queue_size`` on subscribe; each message the application takes from the receiver
queue returns one permit locally, and FLOW(accumulated) goes out when that reaches half the
queue; a batch entry is acked (entry-level) when all its messages are; a nack asks for the
entry again a few steps later; a close drops the local queue. Streams mix batch sizes of 1,
small batches and batches larger than the receiver queues (negative permits), one key per
entry (key-based batching), consumers join and close.

Checked at every delivery: the consumer had permits > 0 before the entry (Pulsar's rule; a
batch may then take them negative), the entry is not acked, not outstanding elsewhere, and
(Key_Shared, ordered) every earlier unacked entry of its key is outstanding on the same
consumer. After the random phase (nacks and closes stop, someone is attached): every entry
is acked within a bounded number of steps, each consumer taking messages from its queue as
an application polling in turn would. Deterministic: asyncio and seeded ``random`` only.
"""

from __future__ import annotations

import bisect
import collections
import random
from dataclasses import dataclass, field

import pytest
from support.dispatch import dispatched

from magnetar.broker.dispatch.consumer import Consumer, OutMessage, SubType
from magnetar.broker.ledger.position import Position
from magnetar.broker.storage.memory import MemoryLedger
from magnetar.broker.topics.entries import slot_of
from magnetar.broker.topics.subscription import Subscription
from magnetar.client.protocol import entry_num_messages
from magnetar.client.protocol.proto import pulsar_api_pb2 as pb

LEDGER = 7
CALM_STEPS_MAX = 200


def entry_bytes(key: str | None, n: int) -> bytes:
    md = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1)
    if key is not None:
        md.partition_key = key
    if n > 1:
        md.num_messages_in_batch = n
    raw = md.SerializeToString()
    return len(raw).to_bytes(4, "big") + raw + b"x"


def pos(eid: int) -> Position:
    return Position(LEDGER, eid)


@dataclass(eq=False)
class FakeClient:
    """One official-client consumer: its receiver queue and permit accounting."""

    consumer: Consumer
    queue_size: int
    queue: collections.deque[tuple[int, int]] = field(default_factory=collections.deque)
    granted: int = 0  # permits sent in FLOWs
    received: int = 0  # messages received
    to_flow: int = 0  # permits returned locally, not yet flowed
    deliveries: dict[int, list[int]] = field(default_factory=dict)  # id -> [eid, remaining]
    current: dict[int, int] = field(default_factory=dict)  # eid -> its live delivery id
    nacked: set[int] = field(default_factory=set)  # delivery ids nacked
    closed: bool = False


class World:
    """The sink of every consumer, the broker-side view, and the checks at delivery."""

    def __init__(self, sub: Subscription, *, ordered: bool) -> None:
        self.sub = sub
        self.ordered = ordered
        self.clients: dict[Consumer, FakeClient] = {}
        self.keys: list[str | None] = []
        self.sizes: list[int] = []
        self.where: dict[int, Consumer] = {}  # outstanding entry -> consumer
        self.unacked_by_key: dict[str | None, list[int]] = {}
        self.acked: set[int] = set()
        self.delivery_ids = 0
        self.nack_due: list[tuple[int, Consumer, int, int]] = []  # (step, consumer, eid, id)
        self.step = 0

    # -- ConsumerSink
    def send_messages(self, consumer: Consumer, messages: list[OutMessage]) -> None:
        client = self.clients[consumer]
        assert not client.closed, "delivery to a closed consumer"
        for m in messages:
            eid = m.position.entry_id
            assert client.granted - client.received > 0, (
                f"entry {eid} sent to {consumer.name} without permits "
                f"({client.granted - client.received})"
            )
            assert eid not in self.acked, f"acked entry {eid} delivered"
            assert eid not in self.where, f"entry {eid} outstanding on two consumers"
            if self.ordered:
                key = self.keys[eid]
                for q in self.unacked_by_key[key]:
                    if q < eid:
                        assert self.where.get(q) is consumer, f"{eid} overtakes {q} ({key!r})"
                    elif q in self.where:
                        assert self.where[q] is consumer, f"key {key!r} on two consumers"
            self.where[eid] = consumer
            n = self.sizes[eid]
            client.received += n
            self.delivery_ids += 1
            did = self.delivery_ids
            client.deliveries[did] = [eid, n]
            client.current[eid] = did
            for i in range(n):
                client.queue.append((did, i))

    def send_active_consumer_change(self, consumer: Consumer, is_active: bool) -> None:
        pass

    def send_close_consumer(self, consumer: Consumer) -> None:
        pass

    # -- the stream
    def published(self, key: str | None, n: int) -> None:
        eid = len(self.keys)
        self.keys.append(key)
        self.sizes.append(n)
        self.unacked_by_key.setdefault(key, []).append(eid)

    def forget_outstanding(self, eid: int, consumer: Consumer) -> None:
        if self.where.get(eid) is consumer:
            del self.where[eid]

    # -- client actions
    def join(self, consumer: Consumer, queue_size: int) -> None:
        client = FakeClient(consumer, queue_size)
        self.clients[consumer] = client
        self.sub.add_consumer(consumer)
        self.flow(client, queue_size)

    def flow(self, client: FakeClient, n: int) -> None:
        client.granted += n
        self.sub.flow(client.consumer, n)

    async def take(self, client: FakeClient, n: int, nack_p: float, rng: random.Random) -> None:
        """The application takes up to ``n`` messages, acking (or nacking) each."""
        to_ack: list[int] = []
        for _ in range(min(n, len(client.queue))):
            did, _ = client.queue.popleft()
            client.to_flow += 1
            if client.to_flow >= max(client.queue_size // 2, 1):
                self.flow(client, client.to_flow)
                client.to_flow = 0
            rec = client.deliveries.get(did)
            if rec is None or did in client.nacked:  # nacked (and maybe asked for again)
                continue
            eid = rec[0]
            if nack_p and rng.random() < nack_p:
                client.nacked.add(did)
                self.nack_due.append((self.step + rng.randint(0, 5), client.consumer, eid, did))
                continue
            rec[1] -= 1
            if rec[1] == 0:
                del client.deliveries[did]
                if client.current.get(eid) == did and self.where.get(eid) is client.consumer:
                    del client.current[eid]
                    to_ack.append(eid)
        if to_ack:
            for eid in to_ack:
                del self.where[eid]
                self.acked.add(eid)
                lst = self.unacked_by_key[self.keys[eid]]
                del lst[bisect.bisect_left(lst, eid)]
            await self.sub.ack_individual(client.consumer, [(pos(e), None) for e in to_ack])

    def fire_nacks(self, *, all_now: bool = False) -> None:
        due = [x for x in self.nack_due if all_now or x[0] <= self.step]
        self.nack_due = [x for x in self.nack_due if not (all_now or x[0] <= self.step)]
        per: dict[Consumer, list[int]] = {}
        for _, consumer, eid, did in due:
            client = self.clients[consumer]
            client.nacked.discard(did)
            client.deliveries.pop(did, None)
            if client.closed or client.current.get(eid) != did:
                continue
            del client.current[eid]
            self.forget_outstanding(eid, consumer)
            per.setdefault(consumer, []).append(eid)
        for consumer, eids in per.items():
            self.sub.redeliver(consumer, [pos(e) for e in eids])

    def close(self, client: FakeClient) -> None:
        client.closed = True
        client.queue.clear()
        for eid in list(client.current):
            self.forget_outstanding(eid, client.consumer)
        client.current.clear()
        self.sub.remove_consumer(client.consumer)

    def live(self) -> list[FakeClient]:
        return [c for c in self.clients.values() if not c.closed]


@dataclass(frozen=True)
class Scenario:
    sub_type: SubType
    batch: str  # "one", "small", "large" (larger than the receiver queues), "mixed"
    queue_sizes: tuple[int, ...]
    keys: int
    nack_p: float
    churn: bool  # consumers join and close during the run
    out_of_order: bool = False


def scenario(seed: int, sub_type: SubType) -> Scenario:
    rng = random.Random(seed * 7919 + int(sub_type))
    return Scenario(
        sub_type,
        rng.choice(["one", "small", "large", "mixed"]),
        rng.choice([(1,), (2, 10), (10,), (5, 50), (1000,), (1, 10, 1000)]),
        rng.choice([1, 3, 30, 50]),
        rng.choice([0.0, 0.0, 0.05, 0.2]),
        rng.random() < 0.7,
        sub_type is SubType.KEY_SHARED and rng.random() < 0.15,
    )


def batch_size(rng: random.Random, sc: Scenario) -> int:
    if sc.batch == "one":
        return 1
    if sc.batch == "small":
        return rng.randint(1, 5)
    big = max(sc.queue_sizes) if max(sc.queue_sizes) < 1000 else 20
    if sc.batch == "large":
        return rng.choice([big + 1, 2 * big + 3, 3 * big])
    return rng.choice([1, 1, 2, big, 2 * big + 1])


async def run(seed: int, sc: Scenario, *, steps: int = 150, poll_one: bool = True) -> World:
    rng = random.Random(seed)
    ledger = MemoryLedger("t", LEDGER)
    cursor = await ledger.open_cursor("s", initial_earliest=True)
    sub = Subscription(
        "t",
        "s",
        cursor,
        lambda e: entry_num_messages(e.data),
        slot_of=slot_of,
        max_unacked_per_subscription=rng.choice([0, 200, 200_000]),
    )
    world = World(sub, ordered=sc.sub_type is SubType.KEY_SHARED and not sc.out_of_order)
    keys: list[str | None] = [f"key-{i}" for i in range(sc.keys)]
    if rng.random() < 0.3:
        keys.append(None)
    names = 0

    def join() -> None:
        nonlocal names
        names += 1
        c = Consumer(
            names,
            f"c{names}",
            sc.sub_type,
            sink=world,
            max_unacked=rng.choice([0, 50_000, 50_000, 10]),
            allow_out_of_order=sc.out_of_order,
        )
        world.join(c, rng.choice(sc.queue_sizes))

    async def publish(n: int) -> None:
        datas = []
        for _ in range(n):
            key = rng.choice(keys)
            size = batch_size(rng, sc)
            datas.append(entry_bytes(key, size))
            world.published(key, size)
        await ledger.add_entries(datas)
        sub.notify_new_entries()

    for _ in range(rng.randint(1, 3)):
        join()
    # the random phase
    for step in range(steps):
        world.step = step
        op = rng.random()
        live = world.live()
        if op < 0.3:
            await publish(rng.randint(1, 15))
        elif op < 0.36 and sc.churn and len(live) < 4:
            join()
        elif op < 0.4 and sc.churn and live:
            world.close(rng.choice(live))
        elif live:
            client = rng.choice(live)
            await world.take(client, rng.randint(1, 2 * client.queue_size), sc.nack_p, rng)
        world.fire_nacks()
        await dispatched(sub)
        d = sub.dispatcher
        if d is not None and hasattr(d, "check_invariants"):
            d.check_invariants()
    # the calm phase: nacks answered, someone attached, every application polls in turn
    world.fire_nacks(all_now=True)
    if not world.live():
        join()
    await dispatched(sub)
    total = len(world.keys)
    # each step takes at least one message from each non-empty queue, and every message
    # taken returns a permit: a live dispatcher needs fewer steps than there are messages
    bound = sum(world.sizes) + CALM_STEPS_MAX
    for step in range(bound):
        if len(world.acked) == total:
            break
        # quiescent with entries unacked: every queue empty means every delivered entry was
        # taken and acked, so the dispatcher holds the rest while consumers have permits
        assert any(c.queue for c in world.live()), (
            f"{sc}: stalled with {total - len(world.acked)} entries unacked, "
            f"dispatcher {sub.dispatcher!r}, consumers {[c.consumer for c in world.live()]}"
        )
        world.step = steps + step
        for client in world.live():
            await world.take(client, 1 if poll_one else client.queue_size, 0.0, rng)
        await dispatched(sub)
    missing = sorted(set(range(total)) - world.acked)
    assert not missing, (
        f"{sc}: {len(missing)} of {total} entries never acked (first {missing[:10]}); "
        f"dispatcher {sub.dispatcher!r}, consumers "
        f"{[(c.consumer, len(c.queue)) for c in world.live()]}"
    )
    assert sub.cursor.backlog() == 0
    return world


@pytest.mark.parametrize("seed", range(40))
async def test_shared_delivers_everything_under_official_client_flow(seed: int) -> None:
    await run(seed, scenario(seed, SubType.SHARED))


@pytest.mark.parametrize("seed", range(60))
async def test_key_shared_delivers_everything_in_key_order(seed: int) -> None:
    await run(seed, scenario(seed, SubType.KEY_SHARED))


@pytest.mark.parametrize("sub_type", [SubType.SHARED, SubType.KEY_SHARED])
async def test_batches_larger_than_every_receiver_queue(sub_type: SubType) -> None:
    """Issue 12 §2 in the model: three consumers with receiver queue 10 and batches of
    100: each batch takes a consumer's permits far negative; the others get the next
    batches, and each consumer gets more once it has consumed and flowed again."""
    sc = Scenario(sub_type, "large", (10,), 50, 0.0, False)
    await run(3, sc, steps=60)


async def test_key_shared_join_then_close_with_small_queues() -> None:
    """Issue 12 §3(b) in the model: receiver queue 50, 30 keys, consumers join and close."""
    sc = Scenario(SubType.KEY_SHARED, "one", (50,), 30, 0.0, True)
    for seed in range(5):
        await run(seed, sc, steps=200)


async def calm(world: World, rng: random.Random, bound: int) -> None:
    """Every live application takes one message per step, acking it; the dispatcher must
    never sit idle with entries unacked while every queue is empty."""
    sub = world.sub
    await dispatched(sub)
    total = len(world.keys)
    for _ in range(bound):
        if len(world.acked) == total:
            return
        assert any(c.queue for c in world.live()), (
            f"stalled with {total - len(world.acked)} entries unacked, "
            f"dispatcher {sub.dispatcher!r}, consumers {[c.consumer for c in world.live()]}"
        )
        for client in world.live():
            await world.take(client, 1, 0.0, rng)
        await dispatched(sub)
    raise AssertionError(f"{total - len(world.acked)} entries unacked after {bound} steps")


@pytest.mark.parametrize("close_first", [False, True])
async def test_key_shared_keys_moved_by_a_join_flow_once_the_old_consumer_acks(
    close_first: bool,
) -> None:
    """A joins with a default receiver queue and takes a stream of 30 keys; B joins, so
    some keys move to B while A holds their entries: B gets them once A has acked them
    (or closed), without any further publish or FLOW (A's acks are too few to flow)."""
    rng = random.Random(1)
    ledger = MemoryLedger("t", LEDGER)
    cursor = await ledger.open_cursor("s", initial_earliest=True)
    sub = Subscription("t", "s", cursor, lambda e: entry_num_messages(e.data), slot_of=slot_of)
    world = World(sub, ordered=True)
    a = Consumer(1, "a", SubType.KEY_SHARED, sink=world)
    world.join(a, 1000)

    async def publish(n: int) -> None:
        datas = []
        for i in range(n):
            key = f"key-{i % 30}"
            datas.append(entry_bytes(key, 1))
            world.published(key, 1)
        await ledger.add_entries(datas)
        sub.notify_new_entries()
        await dispatched(sub)

    await publish(150)
    assert len(world.clients[a].queue) == 150
    b = Consumer(2, "b", SubType.KEY_SHARED, sink=world)
    world.join(b, 1000)
    c = Consumer(3, "c", SubType.KEY_SHARED, sink=world)
    world.join(c, 1000)
    await publish(150)  # the keys that moved wait for a's acks
    assert not world.clients[b].queue and not world.clients[c].queue
    assert sub.statistics().draining_hashes_count > 0
    if close_first:
        await world.take(world.clients[a], 20, 0.0, rng)
        world.close(world.clients[a])
    await calm(world, rng, 400)
    assert world.clients[b].received and world.clients[c].received
