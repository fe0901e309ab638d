"""A subscription: one cursor, its consumers and dispatcher, acks and redelivery counts.

Owns: the subscription type rules (the first consumer fixes the type; a different type is
refused while consumers are attached; Exclusive admits one consumer), routing of acks
(individual, batch-index, cumulative where allowed) to the cursor and the dispatcher,
redelivery requests, seek (disconnect consumers, then reset the cursor), unsubscribe.
Redelivery counts are in memory per subscription (Pulsar's InMemoryRedeliveryTracker).
Markers (``markers``) are acknowledged as soon as the topic stores them (``ack_markers``).
Replicated subscriptions: ``replicated`` (set by the topic) and ``on_mark_delete_moved``,
called whenever its mark-delete position moved (acks, expiry, another cluster's position).
Delayed delivery: a Shared / Key_Shared subscription owns one ``DelayedDeliveryIndex`` for
as long as this broker owns the topic (persisted next to the cursor when durable and on
managed-ledger storage, memory-backed otherwise), shared by its successive dispatchers;
``open_delayed_index`` (awaited before the first read), ``delete_delayed_index`` (before the
cursor is deleted), ``close_delayed_index`` (unload); seek clears it.
Must not know: sockets, frames, other subscriptions.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from magnetar.broker.delayed import (
    DelayedDeliveryIndex,
    MemorySegmentStore,
    delayed_index_ledger_name,
    open_delayed_index,
)
from magnetar.broker.dispatch.consumer import Consumer, SubType
from magnetar.broker.dispatch.dispatchers import (
    MIN_READ_ENTRIES,
    READ_BYTES_MAX,
    READ_ENTRIES_MAX,
    ChunkOf,
    DeliverAtOf,
    Dispatcher,
    KeySharedDispatcher,
    MultipleConsumersDispatcher,
    Throttle,
    new_dispatcher,
)
from magnetar.broker.errors import BrokerError, CodedError, ServerError
from magnetar.broker.ledger.position import Position
from magnetar.broker.storage.contract import TopicCursor
from magnetar.broker.topics.contract import SubscriptionStats
from magnetar.clock import Clock, SystemClock
from magnetar.zk import paths

log = logging.getLogger(__name__)


class SubscriptionError(CodedError):
    """Refusal of a subscription operation, answered with ``code``."""


class Subscription:
    def __init__(
        self,
        topic_name: str,
        name: str,
        cursor: TopicCursor,
        count_of: Any,
        *,
        partition_index: int = -1,
        max_unacked_per_subscription: int = 200_000,
        slot_of: Any = None,
        deliver_at_of: DeliverAtOf | None = None,
        chunk_of: ChunkOf | None = None,
        batch_size_hint: Any = None,
        delayed_ledger: Any = None,
        clock: Clock | None = None,
        max_read_entries: int = READ_ENTRIES_MAX,
        max_read_bytes: int = READ_BYTES_MAX,
        min_read_entries: int = MIN_READ_ENTRIES,
        redelivery_tracker: bool = True,
        terminated: Callable[[], bool] | None = None,
    ) -> None:
        self.max_read_entries = max_read_entries
        self.max_read_bytes = max_read_bytes
        self.min_read_entries = min_read_entries
        # whether the topic is terminated (no entry will ever be added): its end is
        # announced to consumers once everything is acknowledged
        self.terminated = terminated
        self.redelivery_tracker = redelivery_tracker
        self.topic_name = topic_name
        self.batch_size_hint = batch_size_hint
        self.chunk_of = chunk_of
        self.slot_of = slot_of
        self.deliver_at_of = deliver_at_of
        self.name = name
        self.cursor = cursor
        self.count_of = count_of
        self.partition_index = partition_index
        self.max_unacked_per_subscription = max_unacked_per_subscription
        self.redelivery: dict[Position, int] = {}
        self.redelivery_requests = 0
        """Messages consumers asked to have redelivered (for
        ``pulsar_subscription_msg_rate_redeliver``)."""
        self.sub_type: SubType | None = None
        self.dispatcher: Dispatcher | None = None
        self._ack_ops: set[asyncio.Future[Any]] = set()
        self.acks_received = 0  # ACK commands handled (closing waits until they stop)
        # delayed delivery: the managed ledger of the topic (its factory stores the index),
        # None for memory storage
        self.delayed_ledger = delayed_ledger
        self.clock = clock
        self.delayed_index: DelayedDeliveryIndex | None = None
        self._index_opening: asyncio.Future[DelayedDeliveryIndex] | None = None
        # the dispatch rate limit (the policy manager's), handed to each dispatcher
        self._throttle: Throttle | None = None
        # replicated subscriptions (PIP-33): the flag, and who hears the mark-delete moving
        self.replicated = False
        self.on_mark_delete_moved: Callable[[Subscription], None] | None = None
        self._mark_delete_seen = cursor.mark_delete_position

    def __repr__(self) -> str:
        return f"<Subscription {self.topic_name} {self.name!r} {self.sub_type}>"

    @property
    def durable(self) -> bool:
        return self.cursor.durable

    @property
    def consumers(self) -> list[Consumer]:
        return list(self.dispatcher.consumers) if self.dispatcher else []

    # -- consumers
    def add_consumer(self, consumer: Consumer) -> None:
        stype = consumer.sub_type
        if self.dispatcher is not None and self.dispatcher.consumers:
            if stype is not self.sub_type:
                raise SubscriptionError(
                    ServerError.ConsumerBusy, "Subscription is of different type"
                )
            if stype is SubType.EXCLUSIVE:
                raise SubscriptionError(
                    ServerError.ConsumerBusy, "Exclusive consumer is already connected"
                )
        if self.dispatcher is None or stype is not self.sub_type:
            if self.dispatcher is not None:
                self.dispatcher.close()
            self.sub_type = stype
            self.dispatcher = new_dispatcher(
                stype,
                self.cursor,
                self.count_of,
                self.redelivery,
                partition_index=self.partition_index,
                max_unacked_per_subscription=self.max_unacked_per_subscription,
                slot_of=self.slot_of,
                deliver_at_of=self.deliver_at_of,
                chunk_of=self.chunk_of,
                delayed_index=self.open_delayed_index,
                clock=self.clock,
            )
            self.dispatcher.max_read_entries = self.max_read_entries
            self.dispatcher.max_read_bytes = self.max_read_bytes
            self.dispatcher.min_read_entries = self.min_read_entries
            self.dispatcher.redelivery_tracker = self.redelivery_tracker
            self.dispatcher.on_read_nothing = self.check_end_of_topic
            self.dispatcher.throttle = self._throttle
            if self.delayed_index is not None and stype in (SubType.SHARED, SubType.KEY_SHARED):
                d = self.dispatcher
                assert isinstance(d, MultipleConsumersDispatcher)
                d.index = self.delayed_index
        try:
            self.dispatcher.add_consumer(consumer)
        except BrokerError as exc:  # Key_Shared: bad or overlapping ranges, another policy
            raise SubscriptionError(exc.code, exc.message) from None
        except ValueError as exc:
            raise SubscriptionError(ServerError.ConsumerAssignError, str(exc)) from None

    # -- policies
    def apply_limits(
        self,
        max_unacked_per_subscription: int,
        max_unacked_per_consumer: int,
        deliver_at_of: DeliverAtOf,
    ) -> None:
        """Policies changed: unacked limits and delayed delivery, here and in the dispatcher
        (scheduled, so a limit raised lets it go on at once)."""
        self.max_unacked_per_subscription = max_unacked_per_subscription
        self.deliver_at_of = deliver_at_of
        d = self.dispatcher
        if d is not None:
            d.apply_limits(max_unacked_per_subscription, max_unacked_per_consumer, deliver_at_of)
            d.schedule()

    @property
    def dispatch_throttle(self) -> Throttle | None:
        return self._throttle

    def set_dispatch_throttle(self, throttle: Throttle | None) -> None:
        """The dispatch rate limit, for the dispatcher now and those made later."""
        self._throttle = throttle
        if self.dispatcher is not None:
            self.dispatcher.throttle = throttle

    def backlog(self) -> int:
        return self.cursor.backlog()

    # -- delayed delivery
    async def prepare(self, sub_type: SubType) -> None:
        """Before a consumer of ``sub_type`` is added: Shared / Key_Shared open the index."""
        if sub_type in (SubType.SHARED, SubType.KEY_SHARED) and self.deliver_at_of is not None:
            await self.open_delayed_index()

    async def open_delayed_index(self) -> DelayedDeliveryIndex:
        """The subscription's index, opened (and recovered) once; concurrent callers share it."""
        if self.delayed_index is not None:
            return self.delayed_index
        if self._index_opening is None:
            fut = asyncio.ensure_future(self._open_index())
            self._index_opening = fut
            fut.add_done_callback(self._index_opened)
        return await asyncio.shield(self._index_opening)

    def _index_opened(self, fut: asyncio.Future[DelayedDeliveryIndex]) -> None:
        if fut is not self._index_opening:
            return
        if fut.cancelled() or fut.exception() is not None:
            self._index_opening = None  # try again on the next subscribe / round
        else:
            self.delayed_index = fut.result()

    async def _open_index(self) -> DelayedDeliveryIndex:
        ml = self.delayed_ledger
        if self.durable and ml is not None:
            return await open_delayed_index(
                ml.factory, ml.name, self.name, clock=self.clock, on_due=self._on_delayed_due
            )
        index = DelayedDeliveryIndex(
            MemorySegmentStore(),
            self.clock or SystemClock(),
            on_due=self._on_delayed_due,
            name=f"{self.topic_name}/{self.name}/delayed",
        )
        await index.recover()
        return index

    def _on_delayed_due(self) -> None:
        d = self.dispatcher
        if isinstance(d, MultipleConsumersDispatcher) and d.consumers:
            d.schedule()

    async def _index_settled(self) -> DelayedDeliveryIndex | None:
        if self._index_opening is not None and self.delayed_index is None:
            try:
                await asyncio.shield(self._index_opening)
            except Exception:
                return None
        return self.delayed_index

    async def delete_delayed_index(self) -> None:
        """Unsubscribe / topic deletion: drop the index and its storage (before the cursor)."""
        index = await self._index_settled()
        self.delayed_index = self._index_opening = None
        if index is not None:
            await index.delete()
        elif self.durable and self.delayed_ledger is not None:
            # never opened in this life: its ledger may still exist from an earlier one
            ml = self.delayed_ledger
            name = delayed_index_ledger_name(ml.name, self.name)
            if await ml.factory.store.exists(paths.managed_ledger(name)) is not None:
                index = await self._open_index()
                await index.delete()

    async def close_delayed_index(self) -> None:
        """Unload: seal the tail and store a snapshot."""
        index = await self._index_settled()
        self.delayed_index = self._index_opening = None
        if index is not None:
            try:
                await index.close()
            except Exception:  # never stops the topic's close; recovery reads the snapshot
                log.warning("closing the delayed index of %s failed", self, exc_info=True)

    def remove_consumer(self, consumer: Consumer) -> None:
        consumer.closed = True
        if self.dispatcher is not None:
            self.dispatcher.remove_consumer(consumer)

    def flow(self, consumer: Consumer, permits: int) -> None:
        consumer.flow(permits)
        if self.dispatcher is not None:
            self.dispatcher.schedule()

    def notify_new_entries(self) -> None:
        if self.dispatcher is not None and self.dispatcher.consumers:
            self.dispatcher.schedule()

    # -- acks
    async def ack_individual(
        self, consumer: Consumer, acks: list[tuple[Position, list[int] | None]]
    ) -> None:
        whole: list[Position] = []
        partial: list[tuple[Position, list[int]]] = []
        for pos, ack_set in acks:
            if ack_set:
                partial.append((pos, ack_set))
            else:
                whole.append(pos)
        await self.ack_positions(consumer, whole, partial)

    async def ack_positions(
        self,
        consumer: Consumer,
        whole: list[Position],
        partial: list[tuple[Position, list[int]]] | None = None,
    ) -> None:
        """Individual acks: ``whole`` entries, and batch indexes of ``partial`` ones (an ack
        set's words, 1 = still unacknowledged)."""
        self.acks_received += 1
        unblocked = False
        d = self.dispatcher
        if d is not None:
            forget = d.forget
            for pos in whole:
                if forget(pos):
                    unblocked = True
        else:
            pop = self.redelivery.pop
            for pos in whole:
                pop(pos, None)
        if not partial:
            # the cursor operation starts now: it changes the ack state before it waits
            # for persistence, so commands handled after this ACK already see it
            if whole:
                await self._track(asyncio.ensure_future(self.cursor.ack(whole)))
            self._after_ack(unblocked)
            return
        sized = [(pos, ack_set, await self._batch_size(pos)) for pos, ack_set in partial]
        sized = [x for x in sized if x[2] > 0]
        # the cursor operations start together: each changes the ack state before it waits
        # for persistence, so commands handled after this ACK already see all of it
        ops: list[Awaitable[Any]] = [self.cursor.ack(whole)] if whole else []
        ops += [self.cursor.ack_batch_index(pos, ack_set, n) for pos, ack_set, n in sized]
        results = await self._track(asyncio.gather(*ops))
        for (pos, _, _), done in zip(sized, results[1 if whole else 0 :], strict=True):
            if done and self.dispatcher is not None:
                unblocked |= self.dispatcher.forget(pos)
        self._after_ack(unblocked)

    async def _batch_size(self, pos: Position) -> int:
        if self.batch_size_hint is not None:
            known = self.batch_size_hint(pos)
            if known is not None:
                return int(known)
        entries = await self.cursor.read_positions([pos])
        return self.count_of(entries[0]) if entries else 0

    async def ack_cumulative(self, consumer: Consumer, position: Position) -> None:
        if self.sub_type not in (SubType.EXCLUSIVE, SubType.FAILOVER):
            log.warning("cumulative ack on %s subscription %s ignored", self.sub_type, self.name)
            return
        self.acks_received += 1
        unblocked = False
        if self.dispatcher is not None:
            unblocked = self.dispatcher.forget_up_to(position)
        await self._track(asyncio.ensure_future(self.cursor.ack_cumulative(position)))
        self._after_ack(unblocked)

    async def skip_to(self, position: Position) -> None:
        """Expiry, backlog eviction: move the mark-delete position to ``position`` (a
        cumulative ack whatever the subscription type) and forget what the dispatcher handed
        out up to there."""
        d = self.dispatcher
        unblocked = False
        if d is not None:
            unblocked = d.forget_up_to(position)
        else:
            for pos in [p for p in self.redelivery if p <= position]:
                self.redelivery.pop(pos, None)
        await self.cursor.ack_cumulative(position)
        self._after_ack(unblocked)

    async def _track(self, fut: asyncio.Future[Any]) -> Any:
        self._ack_ops.add(fut)
        fut.add_done_callback(self._ack_ops.discard)
        return await fut

    async def settle_acks(self) -> None:
        """Wait until every acknowledgement handed to the cursor is persisted (or failed):
        before a consumer's close is confirmed and before the cursor is closed."""
        if self._ack_ops:
            await asyncio.gather(*list(self._ack_ops), return_exceptions=True)

    async def let_consumers_ack(self, quiet_s: float, max_s: float) -> None:
        """Closing: dispatch stops, then wait until the consumers hold nothing unacknowledged,
        or no ACK came for ``quiet_s``, or ``max_s`` passed. Then the topic sends
        CLOSE_CONSUMER with an ack barrier (``PersistentTopic.close``): ACKs the client wrote
        before it read CLOSE_CONSUMER still count. What the client acknowledges after it read
        CLOSE_CONSUMER never reaches this broker: the official client drops acks it still
        groups (100 ms) or takes while reconnecting (its tracker has no connection to send
        them on), and the next owner delivers those messages again."""
        if self.dispatcher is None or not self.consumers:
            return
        self.dispatcher.close()
        clock = self.clock or SystemClock()
        start = last_change = clock.monotonic_ms()
        seen = self.acks_received
        while any(c.unacked for c in self.consumers):
            now = clock.monotonic_ms()
            if self.acks_received != seen:
                seen, last_change = self.acks_received, now
            if now - last_change >= quiet_s * 1000 or now - start >= max_s * 1000:
                log.info(
                    "%s: closing with %d messages unacknowledged after %d ms",
                    self,
                    sum(c.unacked for c in self.consumers),
                    now - start,
                )
                return
            await clock.sleep(0.02)  # polling interval of a bounded wait for acks

    def check_end_of_topic(self) -> None:
        """Pulsar's REACHED_END_OF_TOPIC: on a terminated topic, once nothing is left to
        acknowledge (after a read found nothing, or an ack), each consumer is told, once."""
        if self.terminated is None or not self.terminated() or self.dispatcher is None:
            return
        if self.cursor.backlog() > 0:
            return
        for c in self.dispatcher.consumers:
            if not c.told_end_of_topic and c.sink is not None and not c.closed:
                c.told_end_of_topic = True
                c.sink.send_reached_end_of_topic(c)

    def ack_markers(self, positions: list[Position]) -> None:
        """Markers stored in the topic: acknowledged at once (never delivered, never a
        backlog); tracked like acks, so a close waits for them."""
        fut = asyncio.ensure_future(self.cursor.ack(positions))
        self._ack_ops.add(fut)
        fut.add_done_callback(self._ack_ops.discard)
        fut.add_done_callback(self._markers_acked)

    def _markers_acked(self, fut: asyncio.Future[Any]) -> None:
        if fut.cancelled() or fut.exception() is not None:
            return  # the dispatcher's cursor skips them when it reads them
        self._notify_mark_delete()

    def _notify_mark_delete(self) -> None:
        md = self.cursor.mark_delete_position
        if md != self._mark_delete_seen:
            self._mark_delete_seen = md
            if self.on_mark_delete_moved is not None:
                self.on_mark_delete_moved(self)

    def _after_ack(self, unblocked: bool) -> None:
        self._notify_mark_delete()
        self.check_end_of_topic()
        d = self.dispatcher
        if isinstance(d, MultipleConsumersDispatcher):
            d.on_acked(unblocked)
        elif unblocked and d is not None:
            d.schedule()

    def redeliver(self, consumer: Consumer, positions: list[Position] | None) -> None:
        if self.dispatcher is not None:
            self.redelivery_requests += consumer.unacked if positions is None else len(positions)
            self.dispatcher.redeliver(consumer, positions)

    # -- seek / reset
    async def reset_cursor(self, position: Position) -> list[Consumer]:
        """Seek: disconnect every consumer (the caller sends CLOSE_CONSUMER), reset the
        cursor so the next read is ``position``. Returns the disconnected consumers."""
        dropped = self.consumers
        if self.dispatcher is not None:
            self.dispatcher.reset()
            for c in dropped:
                self.remove_consumer(c)
        if self.delayed_index is not None:
            await self.delayed_index.clear()  # the re-read holds what is still in the future
        await self.cursor.reset(position)
        return dropped

    def statistics(self) -> SubscriptionStats:
        ks = (
            self.dispatcher.key_shared_statistics()
            if isinstance(self.dispatcher, KeySharedDispatcher)
            else None
        )
        return SubscriptionStats(
            self.name,
            self.sub_type.name.title() if self.sub_type else "None",
            self.durable,
            len(self.consumers),
            self.cursor.backlog(),
            self.dispatcher.total_unacked if self.dispatcher else 0,
            str(self.cursor.mark_delete_position),
            str(self.cursor.read_position),
            ks.draining_hashes_count if ks else 0,
            ks.draining_hashes_pending_messages if ks else 0,
            ks.draining_hashes_cleared_total if ks else 0,
        )

    def close(self) -> None:
        if self.dispatcher is not None:
            self.dispatcher.close()
        if self.delayed_index is not None and not (self.durable and self.delayed_ledger):
            self.delayed_index.abandon()  # memory only: nothing to keep, stop its timers


__all__ = ["Subscription", "SubscriptionError"]
