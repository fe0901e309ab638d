"""Dispatchers: which consumer gets which entry, under permits and unacked limits.

Owns: the pure selection rules (``pick_active_consumer`` for Exclusive/Failover: sort by
(priority, name, arrival), partition ``i`` -> index ``i mod N`` among the best priority;
``next_shared_consumer``: round robin within the highest priority level that has permits)
and the two dispatchers that drive a cursor with them:

- ``SingleActiveConsumerDispatcher`` (Exclusive, Failover): only the active consumer gets
  entries, in cursor order; an active change or a redeliver-all rewinds the cursor to the
  first unacked entry; redelivery counts stay 0 (Pulsar's disabled tracker). A Failover
  switch while the previous active consumer is still attached (a better-sorted consumer
  joined) and holding unacked messages waits ``ACTIVE_CONSUMER_FAILOVER_DELAY_MS`` before
  dispatching to the new one, so the old one's acks land first (Pulsar waits too; unlike
  Pulsar, the switch is immediate when the old one left or held nothing: no duplicates).
- ``MultipleConsumersDispatcher`` (Shared): replays first (redelivered / orphaned entries, in
  position order), then new entries; one entry to one consumer; a consumer blocks at its
  unacked limit and resumes at half; the subscription blocks at its own limit likewise;
  all chunks of a chunked message go to the consumer that got its first chunk.
- ``KeySharedDispatcher`` (Key_Shared): as Shared, but every decision (which consumer owns a
  slot, when a slot may move, what waits) is ``magnetar.broker.dispatch.key_shared``'s
  ``KeySharedScheduler``; its parked set is the replay set. Per-key order survives consumers
  joining, leaving and nacking, and a stuck key never stops the others (bounded look-ahead).

Reads are sized in entries, permits in messages: ``entries_to_read`` divides the permits by
a moving average of messages per dispatched entry (Pulsar's ``avgMessagesPerEntry``), so
batches are not read ~100 at a time and then put back; and at most ``max_read_bytes``
(``dispatcherMaxReadSizeBytes``) by a moving average of dispatched entry sizes, as Pulsar's
managed ledger estimates a read's entry count from the average entry size. A dispatcher runs up to
``DISPATCH_ROUNDS_PER_TURN`` rounds per event-loop turn, so it keeps up with publishing.

Delayed delivery (Shared and Key_Shared, as Pulsar): an entry whose ``deliver_at_time`` is
in the future is held in the subscription's ``DelayedDeliveryIndex``
(``magnetar.broker.delayed``: persisted for durable subscriptions, bounded memory)
and enters the replay set when due: each round starts with ``pop_due`` + ``add_replay`` in one
synchronous step; the index's ``on_due`` schedules the dispatcher (no polling). The index is
the subscription's (one per subscription, opened before the first read, lazily here if the
caller did not); Exclusive and Failover never use one.

A dispatch round decides synchronously, awaits one cursor read (Key_Shared: replays, then
new entries), then re-checks an epoch (bumped by rewinds, seeks and consumer changes)
before sending, so a stale read is never delivered. One round runs at a time;
``schedule()`` coalesces triggers.
Must not know: sockets, frames, the managed-ledger implementation.
"""

from __future__ import annotations

import asyncio
import bisect
import logging
import math
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from magnetar.broker.delayed import DelayedDeliveryIndex, DelayedIndexError
from magnetar.broker.dispatch.consumer import Consumer, OutMessage, SubType
from magnetar.broker.dispatch.key_shared import (
    KeySharedMode,
    KeySharedPolicy,
    KeySharedScheduler,
    KeySharedStats,
    PlanEntry,
)
from magnetar.broker.dispatch.key_shared import KeySharedSelector as KsSelector
from magnetar.broker.ledger.position import Position
from magnetar.broker.storage.contract import Entry, TopicCursor
from magnetar.client.protocol import ChunkInfo
from magnetar.clock import Clock, SystemClock, TimerHandle

log = logging.getLogger(__name__)

READ_ENTRIES_MAX = 100
READ_BYTES_MAX = 5 << 20
#: Entries a read asks for right after a failed one (Pulsar's dispatcherMinReadBatchSize);
#: each successful round doubles it back towards ``max_read_entries``.
MIN_READ_ENTRIES = 1
#: A failed round (a read the storage could not serve: no bookie answered) is retried after
#: this back-off, doubling per failure in a row up to the maximum. Pulsar waits 15 s, then up
#: to 60 s; we start sooner, so a subscription is back within a fraction of a second of its
#: bookies, and never stalls waiting for a flow, an ack or a publish to wake it.
READ_RETRY_FIRST_S = 0.1
READ_RETRY_MAX_S = 60.0
#: Rounds a dispatcher may run back to back before it yields to the event loop. One socket
#: read can bring ~1,500 SENDs; with one round (<= 100 entries) per loop turn, dispatch fell
#: behind a publish flood without bound. 16 rounds (<= 1,600 entries) keep up, and the turn
#: stays bounded.
DISPATCH_ROUNDS_PER_TURN = 16
#: Failover: how long a switch of the active consumer waits while the previous active
#: consumer is still attached (Pulsar's activeConsumerFailoverDelayTimeMillis).
ACTIVE_CONSUMER_FAILOVER_DELAY_MS = 1000
#: Weight of the past in the moving average of messages per entry (Pulsar's Consumer uses 0.9).
AVG_MSGS_PER_ENTRY_WEIGHT = 0.9


_COUNTS_REDELIVERIES = frozenset((SubType.SHARED, SubType.KEY_SHARED))
_new_tuple = tuple.__new__  # OutMessage(...) without the NamedTuple's Python-level __new__


def _unreadable(entry: Entry, exc: Exception) -> None:
    """An entry whose metadata cannot be read is delivered as stored (not delayed, not a
    chunk): a consumer discards a corrupt message and acknowledges it, so one bad entry never
    stalls a subscription. Entries stored since SEND validation always parse."""
    log.warning("entry %s has unparseable metadata (%s): delivered as stored", entry.position, exc)


# ---------------------------------------------------------------------- pure selection


def sort_for_failover(consumers: Sequence[Consumer]) -> list[Consumer]:
    order = {id(c): i for i, c in enumerate(consumers)}
    return sorted(consumers, key=lambda c: (c.priority, c.name, order[id(c)]))


def pick_active_consumer(consumers: Sequence[Consumer], partition_index: int) -> Consumer | None:
    """Pulsar's rule: best priority group sorted by name; partition i -> i mod N."""
    if not consumers:
        return None
    ordered = sort_for_failover(consumers)
    best = ordered[0].priority
    group = [c for c in ordered if c.priority == best]
    return group[max(partition_index, 0) % len(group)]


def next_shared_consumer(consumers: Sequence[Consumer], start: int) -> int | None:
    """Index of the next consumer with permits, round robin from ``start`` within the
    highest priority level (lowest number) that has an available consumer."""
    best: int | None = None
    for c in consumers:
        if c.available and (best is None or c.priority < best):
            best = c.priority
    if best is None:
        return None
    n = len(consumers)
    for k in range(n):
        i = (start + k) % n
        c = consumers[i]
        if c.priority == best and c.available:
            return i
    return None  # pragma: no cover - unreachable: best came from an available consumer


@dataclass(frozen=True, slots=True)
class DispatcherStats:
    consumers: int
    replay: int
    blocked: bool
    rounds: int
    dispatched_entries: int


CountOf = Callable[[Entry], int]
DeliverAtOf = Callable[[bytes], int]
"""An entry's ``deliver_at_time`` from its bytes, 0 if none (the codec's ``entry_deliver_at``)."""
ChunkOf = Callable[[bytes], ChunkInfo | None]
"""An entry's chunk fields from its bytes, None if not a chunk (the codec's ``entry_chunk``)."""


class Throttle(Protocol):
    """A dispatch rate limit (the policy manager's ``DispatchThrottle``): caps the permits a
    round may use, arming ``wake`` for when a message may go again, and is charged with
    what was sent."""

    def allowed(self, permits: int, wake: Callable[[], None]) -> int: ...

    def charge(self, messages: int, size: int) -> None: ...

    def cancel(self) -> None: ...


class Dispatcher:
    """Common machinery: the round loop, epochs, owners of pending entries."""

    sub_type: SubType

    def __init__(self, cursor: TopicCursor, count_of: CountOf, redelivery: dict[Position, int]):
        self.cursor = cursor
        self.count_of = count_of
        self.redelivery = redelivery
        self.consumers: list[Consumer] = []
        self.owner: dict[Position, Consumer] = {}
        self.epoch = 0
        self._running = False
        self._again = False
        self._task: asyncio.Task[None] | None = None
        self.closed = False
        self.rounds = 0
        self.dispatched_entries = 0
        self.dispatched_bytes = 0
        self.dispatched_messages = 0
        self.turns = 0
        # moving average of messages per dispatched entry (None until the first dispatch):
        # reads are sized in entries, permits in messages (Pulsar's avgMessagesPerEntry)
        self.avg_msgs_per_entry: float | None = None
        self._round_messages = 0
        self._round_entries = 0
        self._bg: set[asyncio.Task[None]] = set()
        # dispatch rate limit, set by the subscription (the policy manager's): caps the
        # permits a round may use and is charged with what was sent; None = unthrottled
        self.throttle: Throttle | None = None
        # broker settings, set by the subscription: entries read at most per read
        # (dispatcherMaxReadBatchSize) and whether redelivery counts are tracked and sent
        # (subscriptionRedeliveryTrackerEnabled; off: every message says 0, as Pulsar)
        self.max_read_entries = READ_ENTRIES_MAX
        # ... and bytes at most per read, estimated from the average dispatched entry
        # (dispatcherMaxReadSizeBytes; 0 or less: no byte limit)
        self.max_read_bytes = READ_BYTES_MAX
        self.avg_entry_bytes: float | None = None
        # after a failed round: reads start again at min_read_entries (None: not reduced),
        # the round is retried on ``clock`` after a doubling back-off
        self.min_read_entries = MIN_READ_ENTRIES
        self.read_failures = 0
        self._read_cap: int | None = None
        self._retry_s = 0.0
        self._retry_timer: TimerHandle | None = None
        self.clock: Clock = SystemClock()
        self.redelivery_tracker = True
        # set by the subscription: called when a read found nothing (the end of a terminated
        # topic is announced from there)
        self.on_read_nothing: Callable[[], None] | None = None

    # -- scheduling
    def schedule(self) -> None:
        if self.closed:
            return
        if self._running:
            self._again = True
            return
        self._running = True
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        """Run rounds while they progress (or were asked for again), yielding to the loop
        every ``DISPATCH_ROUNDS_PER_TURN`` rounds: a fair share against publishing, and
        never an unbounded turn."""
        try:
            in_turn = 0
            self.turns += 1
            while not self.closed:
                self._again = False
                try:
                    progressed = await self._round()
                except Exception as exc:
                    self._round_failed(exc)
                    progressed = False
                else:
                    if self._retry_s or self._read_cap is not None:
                        self._round_succeeded()
                self.rounds += 1
                self._note_dispatched(self._round_messages, self._round_entries)
                self._round_messages = self._round_entries = 0
                if not progressed and not self._again:
                    break
                in_turn += 1
                if in_turn >= DISPATCH_ROUNDS_PER_TURN:
                    in_turn = 0
                    await asyncio.sleep(0)
                    self.turns += 1
        finally:
            self._running = False

    def _round_failed(self, exc: Exception) -> None:
        """Retry on the clock (nothing else may wake this dispatcher: its consumers wait
        with their permits), reading ``min_read_entries`` at first, as Pulsar does."""
        self.read_failures += 1
        first = not self._retry_s
        self._retry_s = min(READ_RETRY_MAX_S, max(READ_RETRY_FIRST_S, self._retry_s * 2))
        self._read_cap = max(1, self.min_read_entries)
        log.warning(
            "%r: dispatch read failed (%s: %s); retrying in %.1f s",
            self,
            type(exc).__name__,
            exc,
            self._retry_s,
            exc_info=first,  # the traceback once per streak of failures
        )
        if self._retry_timer is None and not self.closed:
            self._retry_timer = self.clock.call_later(self._retry_s, self._retry)

    def _retry(self) -> None:
        self._retry_timer = None
        self.schedule()

    def _round_succeeded(self) -> None:
        self._retry_s = 0.0
        if self._read_cap is not None:
            doubled = self._read_cap * 2
            self._read_cap = None if doubled >= self.max_read_entries else doubled

    @property
    def running(self) -> bool:
        """A round is under way or scheduled (tests wait for this to turn False)."""
        return self._running

    async def _round(self) -> bool:
        raise NotImplementedError

    # -- read sizing
    def entries_to_read(self, permits: int) -> int:
        """Entries to read for ``permits`` messages: ``ceil(permits / average messages per
        entry)``, in 1..``max_read_entries``. Reading ``permits`` *entries* of 1000-message
        batches read ~100x too many; the unsent ones were read again later, by then evicted
        from the entry cache (a bookie read each time)."""
        if self.throttle is not None:
            permits = self.throttle.allowed(permits, self.schedule)
        if permits <= 0:
            return 0
        avg = self.avg_msgs_per_entry or 1.0
        n = max(1, min(self.max_read_entries, math.ceil(permits / max(avg, 1.0))))
        if self._read_cap is not None:
            n = min(n, self._read_cap)
        size = self.avg_entry_bytes
        if size and self.max_read_bytes > 0:
            n = min(n, max(1, int(self.max_read_bytes // size)))
        return n

    def _read_nothing(self) -> None:
        if self.on_read_nothing is not None:
            self.on_read_nothing()

    def _note_dispatched(self, messages: int, entries: int) -> None:
        if entries <= 0:
            return
        if self.throttle is not None:
            self.throttle.charge(messages, 0)
        self.dispatched_messages += messages
        current = messages / entries
        avg = self.avg_msgs_per_entry
        if avg is None:
            self.avg_msgs_per_entry = current
        else:
            w = AVG_MSGS_PER_ENTRY_WEIGHT
            self.avg_msgs_per_entry = w * avg + (1.0 - w) * current

    # -- bookkeeping shared by both kinds
    def _assign(
        self, consumer: Consumer, entry: Entry, out: list[OutMessage], n: int | None = None
    ) -> None:
        """Hand ``entry`` (``n`` messages; counted here if None) to ``consumer``: permits,
        pending, owner, and the message to send appended to ``out``."""
        pos = entry.position
        if n is None:
            n = self.count_of(entry)
        self._round_messages += n
        self._round_entries += 1
        consumer.on_dispatched(pos, n)
        self.owner[pos] = consumer
        count = 0
        if self.redelivery_tracker and self.sub_type in _COUNTS_REDELIVERIES:
            count = self.redelivery.get(pos) or self.cursor.redelivery_count(pos)
        out.append(_new_tuple(OutMessage, (pos, entry.data, count, self.cursor.batch_ack_set(pos))))

    def _flush(self, consumer: Consumer, out: list[OutMessage]) -> None:
        self.dispatched_entries += len(out)
        size = sum(len(m.data) for m in out)
        self.dispatched_bytes += size
        if out:
            current = size / len(out)
            avg = self.avg_entry_bytes
            w = AVG_MSGS_PER_ENTRY_WEIGHT
            self.avg_entry_bytes = current if avg is None else w * avg + (1.0 - w) * current
        if self.throttle is not None:
            self.throttle.charge(0, size)
        if consumer.sink is not None and out:
            consumer.sink.send_messages(consumer, out)

    def forget(self, position: Position) -> bool:
        """The entry is acked: drop it from its consumer; True if that unblocked someone."""
        consumer = self.owner.pop(position, None)
        if self.redelivery:
            self.redelivery.pop(position, None)
        if consumer is None:
            return False
        return consumer.on_removed(position)

    def forget_up_to(self, position: Position) -> bool:
        unblocked = False
        for pos in [p for p in self.owner if p <= position]:
            unblocked |= self.forget(pos)
        return unblocked

    @property
    def total_unacked(self) -> int:
        return sum(c.unacked for c in self.consumers)

    def statistics(self) -> DispatcherStats:
        return DispatcherStats(len(self.consumers), 0, False, self.rounds, self.dispatched_entries)

    def close(self) -> None:
        self.closed = True
        if self._task is not None and not self._task.done():
            self._task.cancel()
        if self._retry_timer is not None:
            self._retry_timer.cancel()
            self._retry_timer = None

    def apply_limits(
        self,
        max_unacked_per_subscription: int,
        max_unacked_per_consumer: int,
        deliver_at_of: DeliverAtOf | None,
    ) -> None:
        """Policies changed: the consumers' unacked limit (the subscription's limit and
        delayed delivery concern Shared and Key_Shared only)."""
        for c in self.consumers:
            c.max_unacked = max_unacked_per_consumer

    # overridden
    def add_consumer(self, consumer: Consumer) -> None:
        raise NotImplementedError

    def remove_consumer(self, consumer: Consumer) -> None:
        raise NotImplementedError

    def redeliver(self, consumer: Consumer, positions: list[Position] | None) -> None:
        raise NotImplementedError

    def reset(self) -> None:
        """After a cursor reset (seek): forget everything in flight."""
        self.epoch += 1
        for c in self.consumers:
            c.take_all_pending()
        self.owner.clear()
        self.redelivery.clear()


class SingleActiveConsumerDispatcher(Dispatcher):
    def __init__(
        self,
        cursor: TopicCursor,
        count_of: CountOf,
        redelivery: dict[Position, int],
        sub_type: SubType,
        partition_index: int = -1,
        *,
        failover_delay_ms: int = ACTIVE_CONSUMER_FAILOVER_DELAY_MS,
        clock: Clock | None = None,
    ) -> None:
        super().__init__(cursor, count_of, redelivery)
        self.sub_type = sub_type
        self.partition_index = partition_index
        self.active: Consumer | None = None
        self.failover_delay_ms = failover_delay_ms
        self.clock: Clock = clock or SystemClock()  # the failover delay's timer
        self.switching = False  # a Failover switch waits for the old active consumer
        self._switch_from: Consumer | None = None
        self._switch_timer: TimerHandle | None = None

    def __repr__(self) -> str:
        active = self.active.name if self.active else None
        return f"<SingleActiveDispatcher {self.sub_type.name} active={active!r}>"

    def _elect(self) -> None:
        new = pick_active_consumer(self.consumers, self.partition_index)
        if new is self.active:
            return
        old = self.active
        self.active = new
        in_flight = False  # had the old active consumer messages it might still ack?
        if old is not None:
            for pos in old.take_all_pending():
                self.owner.pop(pos, None)
                in_flight = True
        self.epoch += 1
        self.cursor.rewind()
        self._cancel_switch()
        if (
            self.sub_type is SubType.FAILOVER
            and old is not None
            and new is not None
            and old in self.consumers
            and in_flight
            and self.failover_delay_ms > 0
        ):
            # the old active consumer is still attached and may still ack what it has:
            # wait before re-sending the unacked entries to the new one (fewer duplicates)
            self.switching = True
            self._switch_from = old
            self._switch_timer = self.clock.call_later(
                self.failover_delay_ms / 1000.0, self._switch_done
            )
        if self.sub_type is SubType.FAILOVER:  # Pulsar tells Failover consumers only
            for c in self.consumers:
                if c.sink is not None:
                    c.sink.send_active_consumer_change(c, c is new)

    def _switch_done(self) -> None:
        self._switch_timer = None
        self.switching = False
        self._switch_from = None
        self.cursor.rewind()  # skip what the old consumer acked meanwhile
        self.schedule()

    def _cancel_switch(self) -> None:
        self.switching = False
        self._switch_from = None
        if self._switch_timer is not None:
            self._switch_timer.cancel()
            self._switch_timer = None

    def close(self) -> None:
        super().close()
        self._cancel_switch()

    def add_consumer(self, consumer: Consumer) -> None:
        self.consumers.append(consumer)
        before = self.active
        self._elect()
        if (
            self.active is before
            and consumer.sink is not None
            and self.sub_type is SubType.FAILOVER
        ):
            consumer.sink.send_active_consumer_change(consumer, False)
        self.schedule()

    def remove_consumer(self, consumer: Consumer) -> None:
        if consumer in self.consumers:
            self.consumers.remove(consumer)
        for pos in consumer.take_all_pending():
            self.owner.pop(pos, None)
        if consumer is self._switch_from:  # the old active consumer left: switch now
            self._cancel_switch()
            self.epoch += 1
            self.cursor.rewind()
        if consumer is self.active:
            self.active = None
            self.epoch += 1
            self.cursor.rewind()
        self._elect()
        self.schedule()

    def redeliver(self, consumer: Consumer, positions: list[Position] | None) -> None:
        # Exclusive/Failover cannot redeliver single messages: rewind to the first unacked.
        if consumer is not self.active:
            return
        for pos in consumer.take_all_pending():
            self.owner.pop(pos, None)
        self.epoch += 1
        self.cursor.rewind()
        self.schedule()

    def reset(self) -> None:
        super().reset()

    async def _round(self) -> bool:
        consumer = self.active
        if consumer is None or not consumer.available or self.switching:
            return False
        want = self.entries_to_read(consumer.permits)
        if want <= 0:  # throttled
            return False
        epoch = self.epoch
        entries = await self.cursor.read_entries(want)
        if epoch != self.epoch or consumer is not self.active or consumer.closed:
            self.cursor.rewind()
            return True
        if not entries:
            self._read_nothing()
            return False
        out: list[OutMessage] = []
        for entry in entries:
            if consumer.permits <= 0:
                self.cursor.seek(entry.position)  # unsent: read again with new permits
                break
            self._assign(consumer, entry, out)
        self._flush(consumer, out)
        return True


class MultipleConsumersDispatcher(Dispatcher):
    sub_type = SubType.SHARED

    def __init__(
        self,
        cursor: TopicCursor,
        count_of: CountOf,
        redelivery: dict[Position, int],
        *,
        max_unacked_per_subscription: int = 200_000,
        deliver_at_of: DeliverAtOf | None = None,
        delayed_index: Callable[[], Awaitable[DelayedDeliveryIndex]] | None = None,
        chunk_of: ChunkOf | None = None,
    ) -> None:
        super().__init__(cursor, count_of, redelivery)
        # chunked messages: every chunk of one message goes to the consumer of its chunk 0
        self.chunk_of = chunk_of
        self._chunk_owner: dict[str, Consumer] = {}
        self.replay: list[Position] = []  # sorted, unique
        self._replay_set: set[Position] = set()
        self.max_unacked = max_unacked_per_subscription
        self.blocked = False
        self._rr = 0
        # delayed delivery: entries whose deliver_at_time is in the future wait in the
        # subscription's index (``index``, opened through ``_open_index`` before the first read)
        self.deliver_at_of = deliver_at_of
        self._open_index = delayed_index
        self.index: DelayedDeliveryIndex | None = None

    def __repr__(self) -> str:
        return (
            f"<SharedDispatcher consumers={len(self.consumers)} replay={len(self.replay)}"
            f"{' blocked' if self.blocked else ''}>"
        )

    def apply_limits(
        self,
        max_unacked_per_subscription: int,
        max_unacked_per_consumer: int,
        deliver_at_of: DeliverAtOf | None,
    ) -> None:
        self.max_unacked = max_unacked_per_subscription
        self.deliver_at_of = deliver_at_of
        super().apply_limits(max_unacked_per_subscription, max_unacked_per_consumer, deliver_at_of)

    def add_replay(self, positions: list[Position]) -> None:
        for pos in positions:
            if pos not in self._replay_set:
                self._replay_set.add(pos)
                bisect.insort(self.replay, pos)

    async def _ensure_index(self) -> None:
        """Open the subscription's delayed-delivery index before the first read."""
        if self.index is None and self._open_index is not None and self.deliver_at_of:
            self.index = await self._open_index()

    def _take_due(self, want: int) -> None:
        """Held entries now due enter the replay set (same synchronous step as the pop)."""
        index = self.index
        if index is None or not index.size():
            return
        due = index.pop_due(index.clock.now_ms(), max(want, 1))
        if due:
            self.add_replay(due)

    def _reading_paused(self) -> bool:
        """The index has too much unsealed (storage slow): read no new entries this round."""
        return self.index is not None and self.index.should_pause

    def _hold_delayed(self, entries: list[Entry]) -> list[Entry]:
        """Keep back entries whose deliver_at_time has not come yet (the index hands them
        out when due); returns the entries to dispatch now. Safe for replays too."""
        index = self.index
        deliver_at_of = self.deliver_at_of
        if deliver_at_of is None or index is None or not entries:
            return entries
        out = []
        for entry in entries:
            try:
                at = deliver_at_of(entry.data)
            except Exception as exc:
                _unreadable(entry, exc)
                at = 0
            held = False
            if at > 0:
                try:
                    held = index.add(entry.position, at)
                except DelayedIndexError:  # closed under us: deliver (at least once)
                    held = False
            if held:
                self._held_back(entry)
            else:
                out.append(entry)
        return out

    def _held_back(self, entry: Entry) -> None:
        """Hook: ``entry`` is held until its delivery time (Key_Shared notes its slot)."""

    @property
    def delayed_count(self) -> int:
        return self.index.size() if self.index is not None else 0

    def _take_replay(self, n: int) -> list[Position]:
        taken = self.replay[:n]
        del self.replay[:n]
        self._replay_set.difference_update(taken)
        return taken

    def add_consumer(self, consumer: Consumer) -> None:
        self.consumers.append(consumer)
        self.schedule()

    def remove_consumer(self, consumer: Consumer) -> None:
        if consumer in self.consumers:
            self.consumers.remove(consumer)
        for uuid in [u for u, c in self._chunk_owner.items() if c is consumer]:
            del self._chunk_owner[uuid]
        orphans = consumer.take_all_pending()
        for pos in orphans:
            self.owner.pop(pos, None)
        self.add_replay(orphans)  # back to the others, without counting a redelivery
        if not self.consumers:
            self.redelivery.clear()
        self._check_unblock()
        self.schedule()

    def redeliver(self, consumer: Consumer, positions: list[Position] | None) -> None:
        if positions is None:
            chosen = consumer.take_all_pending()
        else:
            chosen = [p for p in positions if self.owner.get(p) is consumer]
            for pos in chosen:
                consumer.on_removed(pos)
        for pos in chosen:
            self.owner.pop(pos, None)
            self.redelivery[pos] = (
                self.redelivery.get(pos) or self.cursor.redelivery_count(pos)
            ) + 1
        if chosen:
            self._persist_redeliveries(chosen)
        self.add_replay(chosen)
        self._check_unblock()
        self.schedule()

    def _persist_redeliveries(self, positions: list[Position]) -> None:
        if not self.redelivery_tracker:
            return

        async def persist() -> None:
            for pos in positions:
                try:
                    await self.cursor.increment_redelivery(pos)
                except Exception as exc:  # the in-memory count still holds
                    log.warning("cannot persist redelivery count of %s: %s", pos, exc)

        task = asyncio.get_running_loop().create_task(persist())
        self._bg.add(task)
        task.add_done_callback(self._bg.discard)

    def _check_unblock(self) -> bool:
        if self.blocked and self.total_unacked <= self.max_unacked // 2:
            self.blocked = False
            return True
        return False

    def on_acked(self, unblocked_consumer: bool) -> None:
        if self._check_unblock() or unblocked_consumer:
            self.schedule()

    def reset(self) -> None:
        super().reset()
        self.replay.clear()
        self._replay_set.clear()
        self.blocked = False

    def statistics(self) -> DispatcherStats:
        return DispatcherStats(
            len(self.consumers),
            len(self.replay),
            self.blocked,
            self.rounds,
            self.dispatched_entries,
        )

    async def _round(self) -> bool:
        if self.blocked:
            return False
        permits = sum(c.permits for c in self.consumers if c.available)
        if permits <= 0:
            return False
        want = self.entries_to_read(permits)
        if want <= 0:  # throttled: the throttle schedules a round when tokens return
            return False
        epoch = self.epoch
        if self.index is None and self._open_index is not None and self.deliver_at_of:
            await self._ensure_index()
            if epoch != self.epoch:
                return True
        self._take_due(want)
        if self.replay:
            positions = self._take_replay(want)
            entries = await self.cursor.read_positions(positions)
            if epoch != self.epoch:
                return True
            progressed = True
        elif self._reading_paused():
            return False  # resumes on the next flow, ack or due time
        else:
            entries = await self.cursor.read_entries(want)
            if epoch != self.epoch:
                return True
            progressed = bool(entries)
            if not entries:
                self._read_nothing()
        entries = self._hold_delayed(entries)
        per_consumer: dict[int, list[OutMessage]] = {}
        leftovers: list[Position] = []
        limit = self.max_unacked
        waiting_chunks: list[Position] = []
        for i, entry in enumerate(entries):
            if limit > 0 and self.total_unacked >= limit:
                leftovers = [e.position for e in entries[i:]]
                break
            chunk = None
            if self.chunk_of is not None:
                try:
                    chunk = self.chunk_of(entry.data)
                except Exception as exc:
                    _unreadable(entry, exc)
            if chunk is not None and chunk.chunk_id > 0:  # a later chunk: chunk 0's consumer
                owner = self._chunk_owner.get(chunk.uuid)
                if owner is not None and owner in self.consumers:
                    if not owner.available:
                        waiting_chunks.append(entry.position)
                        continue
                    if chunk.is_last:
                        del self._chunk_owner[chunk.uuid]
                    owner_idx = self.consumers.index(owner)
                    self._assign(owner, entry, per_consumer.setdefault(owner_idx, []))
                    continue
            idx = next_shared_consumer(self.consumers, self._rr)
            if idx is None:
                leftovers = [e.position for e in entries[i:]]
                break
            self._rr = idx + 1
            if chunk is not None and chunk.num_chunks_from_msg > 1:
                self._chunk_owner[chunk.uuid] = self.consumers[idx]
            self._assign(self.consumers[idx], entry, per_consumer.setdefault(idx, []))
        leftovers = waiting_chunks + leftovers
        for idx, out in per_consumer.items():
            self._flush(self.consumers[idx], out)
        if leftovers:
            self.add_replay(leftovers)
        if limit > 0 and self.total_unacked >= limit:
            self.blocked = True
        return progressed


# ---------------------------------------------------------------------- Key_Shared

#: Key_Shared: bytes of parked entries kept in memory per dispatcher, so a replay does not
#: read them one by one from storage again (skewed keys park most of each read).
PARKED_DATA_BYTES_MAX = 16 * 1024 * 1024
#: Key_Shared: slots of held delayed entries remembered (beyond, a due entry is read once
#: more to learn its slot), so the index's bounded memory is not undone here.
DELAYED_SLOTS_MAX = 100_000


class KeySharedDispatcher(MultipleConsumersDispatcher):
    """Shared, but a key goes to one consumer at a time and keeps its order.

    The decisions are ``magnetar.broker.dispatch.key_shared``'s (``KeySharedScheduler``: selector,
    per-slot ordering guard, planner); this class only reads entries and sends what the plan
    says. A slot with entries outstanding on a consumer stays with that consumer until they
    are acked or returned (Pulsar 4's draining hashes); an entry that cannot go now is
    *parked* in the guard, and the guard's parked set is this dispatcher's replay set (the
    inherited ``replay`` list stays empty). Other keys keep flowing: new entries are read
    while fewer than ``ks.lookahead_limit()`` entries are parked.

    A round: permits of the available consumers; replay candidates (parked entries whose
    slot can go now); one read of them, then (if room) one read of new entries; the plan;
    the sends, with no ``await`` between plan and send. An epoch change during a read drops
    the round (nothing was planned, so nothing changes). Delayed entries are held out before
    planning (``_hold_delayed``) and parked when due. An entry is hashed once: a parked one
    replays with the slot it was parked with.
    """

    sub_type = SubType.KEY_SHARED

    def __init__(
        self,
        cursor: TopicCursor,
        count_of: CountOf,
        redelivery: dict[Position, int],
        *,
        max_unacked_per_subscription: int = 200_000,
        slot_of: Callable[[Entry], int] | None = None,
        deliver_at_of: DeliverAtOf | None = None,
        delayed_index: Callable[[], Awaitable[DelayedDeliveryIndex]] | None = None,
    ) -> None:
        super().__init__(
            cursor,
            count_of,
            redelivery,
            max_unacked_per_subscription=max_unacked_per_subscription,
            deliver_at_of=deliver_at_of,
            delayed_index=delayed_index,
        )
        self.ks: KeySharedScheduler[Consumer, Position] | None = None
        self.slot_of_entry = slot_of or (lambda e: 0)
        # held delayed entry -> its slot (bounded); a due entry whose slot is not known here
        # (held in an earlier life of the broker, or past the bound) is read to learn it
        self._delayed_slots: dict[Position, int] = {}
        self._due_unslotted: list[Position] = []
        self._resets = 0
        # entries a plan parked, kept (up to PARKED_DATA_BYTES_MAX) so replaying them does
        # not read each one again from storage; a subset of the parked set
        self._parked_data: dict[Position, Entry] = {}
        self._parked_data_bytes = 0

    def __repr__(self) -> str:
        parked = self.ks.parked_count if self.ks is not None else 0
        return (
            f"<KeySharedDispatcher consumers={len(self.consumers)} parked={parked}"
            f"{' blocked' if self.blocked else ''}>"
        )

    @property
    def selector(self) -> KsSelector[Consumer] | None:
        return self.ks.selector if self.ks is not None else None

    def _slot(self, entry: Entry) -> int:
        try:
            return self.slot_of_entry(entry)
        except Exception:  # unparsable metadata: one fixed slot, as a keyless message
            return 0

    # -- consumers
    def add_consumer(self, consumer: Consumer) -> None:
        """Raises KeySharedError (``.code``: ConsumerAssignError for bad STICKY ranges,
        ConsumerBusy for another mode / out-of-order flag); nothing changes then."""
        policy = KeySharedPolicy(
            KeySharedMode(consumer.key_shared_mode), consumer.allow_out_of_order
        )
        if self.ks is None:
            self.ks = KeySharedScheduler(policy)
        elif not self.consumers and self.ks.policy != policy:
            # the first consumer fixes the policy: a fresh scheduler; what was parked in the
            # old one is found again by re-reading from the first unacked entry
            self.ks = KeySharedScheduler(policy)
            self._forget_in_flight()
            self.epoch += 1
            self.cursor.rewind()
        self.ks.add_consumer(
            consumer, consumer.name, policy=policy, hash_ranges=consumer.hash_ranges
        )
        super().add_consumer(consumer)

    def remove_consumer(self, consumer: Consumer) -> None:
        if consumer in self.consumers:
            self.consumers.remove(consumer)
        if self.ks is not None and consumer in self.ks.selector:
            # returned entries are parked already: the replay set, without a redelivery count
            self.ks.remove_consumer(consumer)
        for pos in consumer.take_all_pending():
            if self.owner.get(pos) is consumer:
                del self.owner[pos]
        if not self.consumers:
            self.redelivery.clear()
        self._check_unblock()
        self.schedule()

    def redeliver(self, consumer: Consumer, positions: list[Position] | None) -> None:
        if self.ks is None:
            return
        moved = self.ks.on_redelivered(consumer, positions)  # parked now
        for pos in moved:
            consumer.on_removed(pos)
            self.owner.pop(pos, None)
            self.redelivery[pos] = (
                self.redelivery.get(pos) or self.cursor.redelivery_count(pos)
            ) + 1
        if moved:
            self._persist_redeliveries(moved)
        self._check_unblock()
        self.schedule()

    # -- acks
    def forget(self, position: Position) -> bool:
        unblocked = super().forget(position)
        if self._parked_data:
            self._drop_parked_data(position)
        if self.ks is not None and self.ks.on_acked_one(position):
            self.schedule()  # a slot or a parked entry was freed
        return unblocked

    def _keep_parked_data(self, entries: list[Entry]) -> None:
        for e in entries:
            size = len(e.data)
            if self._parked_data_bytes + size > PARKED_DATA_BYTES_MAX:
                return
            if e.position not in self._parked_data:
                self._parked_data[e.position] = e
                self._parked_data_bytes += size

    def _drop_parked_data(self, position: Position) -> Entry | None:
        e = self._parked_data.pop(position, None)
        if e is not None:
            self._parked_data_bytes -= len(e.data)
        return e

    def _clear_parked_data(self) -> None:
        self._parked_data.clear()
        self._parked_data_bytes = 0

    # -- replay set == the guard's parked set
    def add_replay(self, positions: list[Position]) -> None:
        """Entries entering the replay set by another path than a plan: delayed entries now
        due. They are parked with the slot remembered when they were held."""
        for pos in positions:
            slot = self._delayed_slots.pop(pos, None)
            if slot is None or self.ks is None:
                self._due_unslotted.append(pos)  # read in the next round to learn its slot
            elif not self.ks.guard.is_outstanding(pos):
                self.ks.park(pos, slot)

    def _held_back(self, entry: Entry) -> None:
        if len(self._delayed_slots) < DELAYED_SLOTS_MAX:
            self._delayed_slots[entry.position] = self._slot(entry)

    async def _park_unslotted(self, ks: KeySharedScheduler[Consumer, Position]) -> None:
        """Due delayed entries whose slot is unknown: read them, park them with their slot."""
        take = self._due_unslotted[: self.max_read_entries]
        del self._due_unslotted[: self.max_read_entries]
        resets = self._resets
        try:
            entries = await self.cursor.read_positions(take)
        except Exception:
            self._due_unslotted[:0] = take  # storage trouble: try again next round
            raise
        if resets != self._resets or ks is not self.ks:
            if resets == self._resets:
                self._due_unslotted[:0] = take  # a new scheduler: park them there
            return
        for e in entries:  # acked ones are not returned
            pos = e.position
            if not ks.guard.is_outstanding(pos) and not ks.guard.is_parked(pos):
                ks.park(pos, self._slot(e))
                self._keep_parked_data([e])

    def _forget_in_flight(self) -> None:
        self._clear_parked_data()

    def reset(self) -> None:
        super().reset()
        self._resets += 1
        self._delayed_slots.clear()
        self._due_unslotted.clear()
        self._clear_parked_data()
        if self.ks is not None:
            self.ks.reset()

    # -- observability
    def key_shared_statistics(self) -> KeySharedStats | None:
        return self.ks.statistics() if self.ks is not None else None

    @property
    def draining_hashes_count(self) -> int:
        s = self.key_shared_statistics()
        return s.draining_hashes_count if s is not None else 0

    @property
    def draining_hashes_pending_messages(self) -> int:
        s = self.key_shared_statistics()
        return s.draining_hashes_pending_messages if s is not None else 0

    @property
    def draining_hashes_cleared_total(self) -> int:
        s = self.key_shared_statistics()
        return s.draining_hashes_cleared_total if s is not None else 0

    def statistics(self) -> DispatcherStats:
        return DispatcherStats(
            len(self.consumers),
            self.ks.parked_count if self.ks is not None else 0,
            self.blocked,
            self.rounds,
            self.dispatched_entries,
        )

    def check_invariants(self) -> None:
        if self.ks is None:
            return
        self.ks.check_invariants()
        outstanding = self.ks.statistics().pending_per_consumer
        for c in self.consumers:
            c.check_invariants()
            assert outstanding.get(c, 0) == len(c.pending), (c, outstanding.get(c, 0))
        assert not self.replay
        for pos in self._parked_data:
            assert self.ks.guard.is_parked(pos), pos
        assert self._parked_data_bytes == sum(len(e.data) for e in self._parked_data.values())
        assert self._parked_data_bytes <= PARKED_DATA_BYTES_MAX

    # -- the round
    def _available_permits(self) -> dict[Consumer, int]:
        return {c: c.permits for c in self.consumers if c.available}

    async def _round(self) -> bool:
        ks = self.ks
        if self.blocked or ks is None:
            return False
        permits = self._available_permits()
        if not permits:
            return False
        want = self.entries_to_read(sum(permits.values()))
        if want <= 0:  # throttled
            return False
        epoch = self.epoch
        if self.index is None and self._open_index is not None and self.deliver_at_of:
            await self._ensure_index()
            if epoch != self.epoch or ks is not self.ks:
                return True
        self._take_due(want)
        if self._due_unslotted:
            await self._park_unslotted(ks)
            if epoch != self.epoch or ks is not self.ks:
                return True
        positions = ks.replay_candidates(permits, want)
        replays: list[Entry] = []
        to_read: list[Position] = []
        for p in positions:
            kept = self._drop_parked_data(p)
            if kept is not None:
                replays.append(kept)
            else:
                to_read.append(p)
        if to_read:
            replays += await self.cursor.read_positions(to_read)
            if epoch != self.epoch or ks is not self.ks:
                return True
            got = {e.position for e in replays}
            missing = [p for p in to_read if p not in got]
            if missing:  # acked or trimmed meanwhile
                ks.forget(missing)
        new: list[Entry] = []
        if (
            len(positions) < want
            and ks.parked_count < ks.lookahead_limit()
            and not self._reading_paused()
        ):
            new = await self.cursor.read_entries(want - len(positions))
            if epoch != self.epoch or ks is not self.ks:
                return True
            if not new:
                self._read_nothing()
            new = self._hold_delayed(new)
        # from here to the sends: no await
        count_of = self.count_of
        offered: list[Entry] = []  # replays (position order), then new entries
        plan_entries: list[PlanEntry[Position]] = []
        if replays:
            replays.sort(key=_position_of)
            parked_slot = ks.guard.parked_slot
            for e in replays:
                slot = parked_slot(e.position)  # the slot it was parked with: no re-hash
                if slot is not None:  # else acked meanwhile
                    offered.append(e)
                    plan_entries.append(PlanEntry(e.position, slot, count_of(e)))
        if new:
            slot_of = self._slot
            for e in new:
                offered.append(e)
                plan_entries.append(PlanEntry(e.position, slot_of(e), count_of(e)))
        permits = self._available_permits()
        limit = self.max_unacked
        max_entries = max(limit - self.total_unacked, 0) if limit > 0 else None
        plan = ks.plan(plan_entries, permits, max_entries=max_entries)
        assign = self._assign
        for consumer, indices in plan.indices.items():
            out: list[OutMessage] = []
            for i in indices:
                entry = offered[i]
                assign(consumer, entry, out, plan_entries[i].cost)
                if self._parked_data:
                    self._drop_parked_data(entry.position)  # offered as new after a rewind
            self._flush(consumer, out)
        if plan.waiting:
            by_position = {e.position: e for e in offered}
            self._keep_parked_data([by_position[p] for p in plan.waiting])
        if limit > 0 and self.total_unacked >= limit:
            self.blocked = True
        return plan.assigned_count > 0 or bool(new) or bool(self._due_unslotted)


def _position_of(entry: Entry) -> Position:
    return entry.position


def new_dispatcher(
    sub_type: SubType,
    cursor: TopicCursor,
    count_of: CountOf,
    redelivery: dict[Position, int],
    *,
    partition_index: int = -1,
    max_unacked_per_subscription: int = 200_000,
    slot_of: Callable[[Entry], int] | None = None,
    deliver_at_of: DeliverAtOf | None = None,
    chunk_of: ChunkOf | None = None,
    delayed_index: Callable[[], Awaitable[DelayedDeliveryIndex]] | None = None,
    clock: Clock | None = None,
) -> Dispatcher:
    if sub_type in (SubType.EXCLUSIVE, SubType.FAILOVER):
        return SingleActiveConsumerDispatcher(
            cursor, count_of, redelivery, sub_type, partition_index, clock=clock
        )
    shared: dict[str, Any] = {
        "max_unacked_per_subscription": max_unacked_per_subscription,
        "deliver_at_of": deliver_at_of,
        "delayed_index": delayed_index,
    }
    dispatcher: Dispatcher
    if sub_type is SubType.KEY_SHARED:
        dispatcher = KeySharedDispatcher(cursor, count_of, redelivery, slot_of=slot_of, **shared)
    else:
        dispatcher = MultipleConsumersDispatcher(
            cursor, count_of, redelivery, chunk_of=chunk_of, **shared
        )
    if clock is not None:
        dispatcher.clock = clock  # read retries
    return dispatcher


__all__ = [
    "MIN_READ_ENTRIES",
    "READ_BYTES_MAX",
    "READ_ENTRIES_MAX",
    "ChunkOf",
    "CountOf",
    "DeliverAtOf",
    "Dispatcher",
    "DispatcherStats",
    "KeySharedDispatcher",
    "MultipleConsumersDispatcher",
    "SingleActiveConsumerDispatcher",
    "Throttle",
    "new_dispatcher",
    "next_shared_consumer",
    "pick_active_consumer",
    "sort_for_failover",
]
