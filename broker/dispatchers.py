"""Dispatchers: which consumer gets which entry, under permits and unacked limits.

Owns: the pure selection rules (``pick_active_consumer`` for Exclusive/Failover: sort by
(priority, name, arrival), partition ``i`` -> index ``i mod N`` among the best priority;
``next_shared_consumer``: round robin within the highest priority level that has permits)
and the two dispatchers that drive a cursor with them:

- ``SingleActiveConsumerDispatcher`` (Exclusive, Failover): only the active consumer gets
  entries, in cursor order; an active change or a redeliver-all rewinds the cursor to the
  first unacked entry; redelivery counts stay 0 (Pulsar's disabled tracker).
- ``MultipleConsumersDispatcher`` (Shared): replays first (redelivered / orphaned entries, in
  position order), then new entries; one entry to one consumer; a consumer blocks at its
  unacked limit and resumes at half; the subscription blocks at its own limit likewise.

A dispatch round decides synchronously, awaits exactly one cursor read, then re-checks an
epoch (bumped by rewinds, seeks and consumer changes) before sending, so a stale read is
never delivered. One round runs at a time; ``schedule()`` coalesces triggers.
Must not know: sockets, frames, the managed-ledger implementation.
"""

from __future__ import annotations

import asyncio
import bisect
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from magnetar.broker.consumer import Consumer, OutMessage, SubType
from magnetar.broker.ledger.position import Position
from magnetar.broker.storage import Entry, TopicCursor

log = logging.getLogger(__name__)

MAX_READ_ENTRIES = 100


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
        self._bg: set[asyncio.Task[None]] = set()

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
        try:
            while not self.closed:
                self._again = False
                try:
                    progressed = await self._round()
                except Exception:
                    log.exception("dispatch round failed on %r", self)
                    progressed = False
                self.rounds += 1
                if not progressed and not self._again:
                    break
                await asyncio.sleep(0)
        finally:
            self._running = False

    async def _round(self) -> bool:
        raise NotImplementedError

    # -- bookkeeping shared by both kinds
    def _assign(self, consumer: Consumer, entry: Entry, out: list[OutMessage]) -> None:
        pos = entry.position
        consumer.on_dispatched(pos, self.count_of(entry))
        self.owner[pos] = consumer
        count = 0
        if self.sub_type is SubType.SHARED:
            count = self.redelivery.get(pos) or self.cursor.redelivery_count(pos)
        out.append(OutMessage(pos, entry.data, count, self.cursor.batch_ack_set(pos)))

    def _flush(self, consumer: Consumer, out: list[OutMessage]) -> None:
        self.dispatched_entries += len(out)
        if consumer.sink is not None and out:
            consumer.sink.send_messages(consumer, out)

    def forget(self, position: Position) -> bool:
        """The entry is acked: drop it from its consumer; True if that unblocked someone."""
        consumer = self.owner.pop(position, None)
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
    ) -> None:
        super().__init__(cursor, count_of, redelivery)
        self.sub_type = sub_type
        self.partition_index = partition_index
        self.active: Consumer | None = None

    def __repr__(self) -> str:
        active = self.active.name if self.active else None
        return f"<SingleActiveDispatcher {self.sub_type.name} active={active!r}>"

    def _elect(self) -> None:
        new = pick_active_consumer(self.consumers, self.partition_index)
        if new is self.active:
            return
        old = self.active
        self.active = new
        if old is not None:
            for pos in old.take_all_pending():
                self.owner.pop(pos, None)
        self.epoch += 1
        self.cursor.rewind()
        for c in self.consumers:
            if c.sink is not None:
                c.sink.send_active_consumer_change(c, c is new)

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
        if consumer is None or not consumer.available:
            return False
        epoch = self.epoch
        entries = await self.cursor.read_entries(min(consumer.permits, MAX_READ_ENTRIES))
        if epoch != self.epoch or consumer is not self.active or consumer.closed:
            self.cursor.rewind()
            return True
        if not entries:
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
    ) -> None:
        super().__init__(cursor, count_of, redelivery)
        self.replay: list[Position] = []  # sorted, unique
        self._replay_set: set[Position] = set()
        self.max_unacked = max_unacked_per_subscription
        self.blocked = False
        self._rr = 0

    def __repr__(self) -> str:
        return (
            f"<SharedDispatcher consumers={len(self.consumers)} replay={len(self.replay)}"
            f"{' blocked' if self.blocked else ''}>"
        )

    def add_replay(self, positions: list[Position]) -> None:
        for pos in positions:
            if pos not in self._replay_set:
                self._replay_set.add(pos)
                bisect.insort(self.replay, pos)

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
        want = min(permits, MAX_READ_ENTRIES)
        epoch = self.epoch
        if self.replay:
            positions = self._take_replay(want)
            entries = await self.cursor.read_positions(positions)
            if epoch != self.epoch:
                return True
            progressed = True
        else:
            entries = await self.cursor.read_entries(want)
            if epoch != self.epoch:
                return True
            progressed = bool(entries)
        per_consumer: dict[int, list[OutMessage]] = {}
        leftovers: list[Position] = []
        limit = self.max_unacked
        for i, entry in enumerate(entries):
            idx = next_shared_consumer(self.consumers, self._rr)
            if idx is None or (limit > 0 and self.total_unacked >= limit):
                leftovers = [e.position for e in entries[i:]]
                break
            self._rr = idx + 1
            self._assign(self.consumers[idx], entry, per_consumer.setdefault(idx, []))
        for idx, out in per_consumer.items():
            self._flush(self.consumers[idx], out)
        if leftovers:
            self.add_replay(leftovers)
        if limit > 0 and self.total_unacked >= limit:
            self.blocked = True
        return progressed


def new_dispatcher(
    sub_type: SubType,
    cursor: TopicCursor,
    count_of: CountOf,
    redelivery: dict[Position, int],
    *,
    partition_index: int = -1,
    max_unacked_per_subscription: int = 200_000,
) -> Dispatcher:
    if sub_type in (SubType.EXCLUSIVE, SubType.FAILOVER):
        return SingleActiveConsumerDispatcher(
            cursor, count_of, redelivery, sub_type, partition_index
        )
    return MultipleConsumersDispatcher(
        cursor, count_of, redelivery, max_unacked_per_subscription=max_unacked_per_subscription
    )


__all__ = [
    "Dispatcher",
    "DispatcherStats",
    "MultipleConsumersDispatcher",
    "SingleActiveConsumerDispatcher",
    "new_dispatcher",
    "next_shared_consumer",
    "pick_active_consumer",
    "sort_for_failover",
]
