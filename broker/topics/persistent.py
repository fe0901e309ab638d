"""A persistent topic: one managed ledger, its producers and subscriptions (a ``Topic``).

Owns: the publish pipeline (SENDs collected during one loop iteration are appended as one
``add_entries`` call, submitted at once even while earlier batches are in flight; the managed
ledger completes adds in order and completions are handled in submission order, so
positions and receipts keep arrival order; duplicates found by deduplication ride in the
same queue so their receipts keep order too), its entries' message counts (``EntryCounts``),
subscriptions (durable ones reopened from the ledger's cursors on load; non-durable ones
dropped with their last consumer), last-message-id, finding a position by publish time,
close/unload. Compaction (``compaction/``): the service attaches a ``TopicCompaction``;
a read_compacted consumer (Exclusive / Failover only) reads through a ``CompactedCursor``;
the ``__compaction`` subscription name is reserved, and deleting it deletes the views.
Lifecycle (``TOPIC_TRANSITIONS``): ACTIVE -> CLOSING -> CLOSED on unload; ACTIVE -> FENCED
when the managed ledger refuses writes for good (another owner), after which the service
unloads the topic so clients look up the new owner.
Policies it applies itself (``apply_policies``): deduplication, unacked limits, delayed
delivery, retention.
Geo-replication, the parts a topic owns: the receiving side of other clusters' replication
links (``inbound_links``: their SENDs deduplicated whatever the policy, refused after one
failed and the producer closed; the recovery point stored by ``inbound_snapshots`` and read
back on load), markers (``markers``: stored through ``publish_marker`` or a link,
acknowledged on every subscription at once, filtered from every read, the last message
behind them answered to GetLastMessageId; ``marker_listener`` hears them), the replicated
flag of subscriptions (``pulsar.replicated.subscriptions``) and ``mark_delete_listener``,
moving a replicated subscription to another cluster's position, and the ``attachments``
(``replication/``'s replicators) detached first on close. Replicator cursors
(``pulsar.repl.*``) are not subscriptions.
Invariant: every SEND gets exactly one outcome, in arrival order per topic: a ``PublishSink``
(the connection) hears once per run of its consecutive SENDs in a completed append (so it
writes that run's receipts as one buffer). On
the managed ledger a batch completes through ``add_entries_then`` (a callback when its last
add is done, no task or future per batch).
Must not know: sockets or frames (callers pass callbacks and sinks).
"""

from __future__ import annotations

import asyncio
import collections
import enum
import json
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Protocol, runtime_checkable

from magnetar.broker.compaction import (
    COMPACTION_SUBSCRIPTION,
    CompactedCursor,
    TopicCompaction,
    entry_messages,
)
from magnetar.broker.dispatch.consumer import Consumer, SubType
from magnetar.broker.dispatch.dispatchers import DeliverAtOf
from magnetar.broker.errors import ServerError
from magnetar.broker.ledger.errors import LedgerFenced, ManagedLedgerClosed
from magnetar.broker.ledger.position import EARLIEST, LATEST, Position
from magnetar.broker.naming import TopicName
from magnetar.broker.storage.contract import TopicLedger
from magnetar.broker.topics.contract import (
    AppliedPolicies,
    LastMessageId,
    TopicCounters,
    TopicSubscription,
)
from magnetar.broker.topics.entries import (
    EntryCounts,
    never_delayed,
    publish_time_or_zero,
    slot_of,
)
from magnetar.broker.topics.inbound_links import (
    INBOUND_SNAPSHOTS,
    SNAPSHOT_PROPERTY,
    InboundLinks,
    Verdict,
    link_of_producer,
)
from magnetar.broker.topics.inbound_snapshots import NOTHING_YET, InboundSnapshots
from magnetar.broker.topics.markers import MarkerSkippingCursor, TopicMarkers
from magnetar.broker.topics.producer import (
    DEDUP_SNAPSHOT_EVERY_ENTRIES,
    DEDUP_SNAPSHOT_PROPERTY,
    DEDUP_SNAPSHOTS,
    AccessMode,
    Admission,
    Deduplication,
    Producer,
    ProducerRegistry,
)
from magnetar.broker.topics.publish import (
    PendingSend,
    PublishSink,
    runs_by_sink,
)
from magnetar.broker.topics.recovery_snapshots import RecoverySnapshots
from magnetar.broker.topics.replication_names import remote_of_cursor
from magnetar.broker.topics.sequence_snapshots import SequenceSnapshot
from magnetar.broker.topics.stats_buckets import StatsBuckets
from magnetar.broker.topics.subscription import Subscription, SubscriptionError
from magnetar.client.protocol import (
    RemoteProtocolError,
    entry_chunk,
    entry_deliver_at,
    entry_marker_type,
    markers,
    parse_entry_metadata,
    pb,
)

log = logging.getLogger(__name__)


class TopicState(enum.Enum):
    ACTIVE = "active"
    FENCED = "fenced"  # the storage refused us (another owner): close as soon as possible
    CLOSING = "closing"
    CLOSED = "closed"


class TopicEvent(enum.Enum):
    FENCE = "fence"
    CLOSE = "close"
    CLOSED = "closed"


TOPIC_TRANSITIONS: dict[tuple[TopicState, TopicEvent], TopicState] = {
    (TopicState.ACTIVE, TopicEvent.FENCE): TopicState.FENCED,
    (TopicState.ACTIVE, TopicEvent.CLOSE): TopicState.CLOSING,
    (TopicState.FENCED, TopicEvent.FENCE): TopicState.FENCED,
    (TopicState.FENCED, TopicEvent.CLOSE): TopicState.CLOSING,
    (TopicState.CLOSING, TopicEvent.FENCE): TopicState.CLOSING,
    (TopicState.CLOSING, TopicEvent.CLOSED): TopicState.CLOSED,
    (TopicState.CLOSED, TopicEvent.FENCE): TopicState.CLOSED,
}
"""Topic lifecycle; a pair missing here is a bug (``InvalidTopicTransition``)."""


class InvalidTopicTransition(RuntimeError):
    pass


def next_topic_state(state: TopicState, event: TopicEvent) -> TopicState:
    try:
        return TOPIC_TRANSITIONS[(state, event)]
    except KeyError:
        raise InvalidTopicTransition(f"{event.value} in state {state.value}") from None


ACK_QUIET_S = 0.15
"""Closing: no ACK for this long means the consumers acknowledged what they will (longer
than the official client's 100 ms acknowledgement grouping)."""
ACK_SETTLE_MAX_S = 0.5
"""Closing: the longest wait for consumers' acknowledgements (before CLOSE_PRODUCER: producers
still publish during it; it delays the bundle's release)."""
ACK_BARRIER_MAX_S = 0.5
"""Closing: the longest wait for a client to answer the PING written after CLOSE_CONSUMER
(one round trip normally; only a client that stopped reading waits this long)."""


@runtime_checkable
class AckBarrierSink(Protocol):
    """A consumer's connection that can close it with an ack barrier (the broker's own
    connections; test sinks need not)."""

    def send_close_consumer(self, consumer: Consumer) -> None: ...

    async def close_consumer_with_ack_barrier(
        self, consumer: Consumer, timeout_s: float
    ) -> None: ...


class _Inflight:
    """One submitted batch of SENDs and, once its append is done, the outcome."""

    __slots__ = ("batch", "done", "error", "positions", "started", "topic")

    def __init__(self, topic: PersistentTopic, batch: list[PendingSend]) -> None:
        self.topic = topic
        self.batch = batch
        self.done = False
        self.positions: list[Position] = []
        self.error: BaseException | None = None
        self.started = time.monotonic()

    def finish(self, positions: list[Position] | None, error: BaseException | None) -> None:
        self.done = True
        if positions is not None:
            self.positions = positions
            self.topic.write_latency.add((time.monotonic() - self.started) * 1000)
        self.error = error
        self.topic.complete_ready()


TOPIC_EPOCH_PROPERTY = "pulsar.topic.epoch"
"""Pulsar's managed-ledger property holding the topic epoch of the exclusive producers."""


def _stored_topic_epoch(ledger: TopicLedger) -> int | None:
    raw = ledger.properties.get(TOPIC_EPOCH_PROPERTY)
    try:
        return int(raw) if raw is not None else None
    except ValueError:
        log.warning("%s: ignoring a bad %s property %r", ledger.name, TOPIC_EPOCH_PROPERTY, raw)
        return None


REPLICATED_SUBSCRIPTIONS_PROPERTY = "pulsar.replicated.subscriptions"
"""Managed-ledger property: the subscriptions whose state is replicated (a JSON list; Pulsar
keeps the flag in each cursor's properties)."""


class LinkRefused(Exception):
    """A replication link's SEND not stored (the sender retries it): an earlier copy is still
    being written, or the link failed and its producer has not reconnected yet."""


class TopicAttachment(Protocol):
    """Work attached to a loaded topic by a layer above (its replicators): detached, before
    anything else, when the topic closes."""

    async def detach(self) -> None: ...


MarkerListener = Callable[[Position, bytes, bool], None]
"""``(position, entry, over_a_link)``: a marker was stored (written here, or received from
another cluster's replicator)."""


class PersistentTopic:
    def __init__(
        self,
        name: TopicName,
        ledger: TopicLedger,
        *,
        dedup_enabled: bool = False,
        dedup_snapshot_every: int = DEDUP_SNAPSHOT_EVERY_ENTRIES,
        max_unacked_per_consumer: int = 50_000,
        max_unacked_per_subscription: int = 200_000,
        dispatcher_max_read_batch_size: int = 100,
        dispatcher_max_read_size_bytes: int = 5 << 20,
        dispatcher_min_read_batch_size: int = 1,
        redelivery_tracker_enabled: bool = True,
        local_cluster: str = "",
    ) -> None:
        self.name = name
        self.dispatcher_max_read_batch_size = dispatcher_max_read_batch_size
        self.dispatcher_max_read_size_bytes = dispatcher_max_read_size_bytes
        self.dispatcher_min_read_batch_size = dispatcher_min_read_batch_size
        self.redelivery_tracker_enabled = redelivery_tracker_enabled
        self.full_name = name.full  # read per SEND (policies): not a property
        self.ledger = ledger
        self._stored_epoch = _stored_topic_epoch(ledger)
        self.producers = ProducerRegistry(topic_epoch=self._stored_epoch)
        self._epoch_lock = asyncio.Lock()
        self.dedup = Deduplication(dedup_enabled, snapshot_every=dedup_snapshot_every)
        self.subscriptions: dict[str, Subscription] = {}
        self.max_unacked_per_consumer = max_unacked_per_consumer
        self.max_unacked_per_subscription = max_unacked_per_subscription
        # delivery times are read while delayed delivery is on (a policy)
        self._deliver_at_of: DeliverAtOf = entry_deliver_at
        self.counters = TopicCounters()
        self.write_latency = StatsBuckets()
        """Milliseconds from handing a batch to storage until it is durable
        (``pulsar_storage_write_latency_le_*``)."""
        self.counts = EntryCounts()
        """Message counts of the entries (permits), without parsing what was published here."""
        self.count_of = self.counts.count_of  # what an entry costs in permits
        self._pending: list[PendingSend] = []
        self._submit_scheduled = False
        self._inflight: collections.deque[_Inflight] = collections.deque()
        self._drain_waiters: list[asyncio.Future[None]] = []
        self.state = TopicState.ACTIVE
        self.on_fenced: Callable[[PersistentTopic], None] | None = None
        # the compacted view and its compactions; set by the service when it loads the
        # topic (None: read_compacted reads the topic as is)
        self.compaction: TopicCompaction | None = None
        # geo-replication: the receiving side of other clusters' links, markers, the work a
        # layer above attaches (replicators), replicated subscriptions
        self.inbound = InboundLinks(local_cluster)
        self._reported: Position | None = ledger.last_confirmed
        """Every add up to here is reported (the inbound links' recovery point)."""
        self.inbound_snapshots = InboundSnapshots(ledger, self.inbound, lambda: self._reported)
        self.dedup_snapshots: RecoverySnapshots[SequenceSnapshot] = RecoverySnapshots(
            ledger,
            DEDUP_SNAPSHOT_PROPERTY,
            take=lambda: self.dedup.snapshot(self._reported or NOTHING_YET),
            encode=DEDUP_SNAPSHOTS.encode,
            what="deduplication snapshot",
        )
        self.markers = TopicMarkers(ledger)
        self.marker_listener: MarkerListener | None = None
        self.mark_delete_listener: Callable[[Subscription], None] | None = None
        self.attachments: list[TopicAttachment] = []
        self._marker_producer = Producer(-1, markers.MARKER_PRODUCER_NAME, AccessMode.SHARED)
        self._tasks: set[asyncio.Task[Any]] = set()
        ledger.add_tail_listener(self._on_new_entries)

    def __repr__(self) -> str:
        return f"<PersistentTopic {self.name} subs={len(self.subscriptions)}>"

    async def load(self) -> None:
        """Reopen the durable subscriptions stored with the ledger (not the replicators'
        cursors: ``replication/`` opens those), recover what the inbound replication links
        stored (from their snapshot on) and, with deduplication on, every producer's highest
        sequence id (from the deduplication snapshot on: ``restore_dedup``)."""
        replicated = self._replicated_names()
        for cursor_name in self.ledger.cursor_names():
            if cursor_name not in self.subscriptions and remote_of_cursor(cursor_name) is None:
                cursor = await self.ledger.open_cursor(cursor_name, initial_earliest=True)
                sub = self._new_subscription(cursor_name, cursor)
                sub.replicated = cursor_name in replicated
                self.subscriptions[cursor_name] = sub
        await self.markers.load()
        snap = INBOUND_SNAPSHOTS.decode(self.ledger.properties.get(SNAPSHOT_PROPERTY))
        if snap is not None:
            self.inbound.restore(snap)
        if self.dedup.enabled:
            await self.restore_dedup(snap.position if snap is not None else None)
        elif snap is not None:
            await self._replay(snap.position, self._recover_inbound)

    async def restore_dedup(self, inbound_from: Position | None = None) -> None:
        """Every producer's highest stored sequence id: the deduplication snapshot's, then
        the entries after it read again (all of them without one), which recovers the inbound
        links too from ``inbound_from`` (their snapshot's position) on."""
        dedup = DEDUP_SNAPSHOTS.decode(self.ledger.properties.get(DEDUP_SNAPSHOT_PROPERTY))
        after: Position | None = None
        if dedup is not None:
            self.dedup.restore_snapshot(dedup)
            after = dedup.position
            if inbound_from is not None:
                after = min(after, inbound_from)
        await self._replay(after, self._recover_producers)

    def _recover_producers(self, md: pb.MessageMetadata) -> None:
        highest = md.highest_sequence_id if md.highest_sequence_id else md.sequence_id
        if md.HasField("num_messages_in_batch") and not md.highest_sequence_id:
            highest = md.sequence_id + md.num_messages_in_batch - 1
        self.dedup.restore(md.producer_name, highest)
        self.inbound.recover(md)

    def _recover_inbound(self, md: pb.MessageMetadata) -> None:
        self.inbound.recover(md)

    async def _replay(
        self, after: Position | None, visit: Callable[[pb.MessageMetadata], None]
    ) -> None:
        """Read every stored entry after ``after`` (None: all) and ``visit`` its metadata."""
        first = self.ledger.first_position
        last = self.ledger.last_confirmed
        if first is None or last is None:
            return
        start = first
        if after is not None and after >= first:
            start = Position(after.ledger_id, after.entry_id + 1)
        while start <= last:
            entries = await self.ledger.read_entries(start, 1000)
            for entry in entries:
                try:
                    md = parse_entry_metadata(entry.data)
                except RemoteProtocolError:
                    continue
                visit(md)
            if not entries or entries[-1].position >= last:
                break
            start = Position(entries[-1].position.ledger_id, entries[-1].position.entry_id + 1)

    # -- producers
    def add_producer(self, producer: Producer) -> Admission:
        admission = self.producers.admit(producer)
        producer.link = link_of_producer(producer.name)
        return admission

    async def prepare_producer(self, producer: Producer) -> None:
        """Before an admitted producer is ready: a replication link's producer sends again
        from its cursor (the link is usable again), and a link this topic never heard of gets
        its recovery point stored first (so one missing from the snapshot stored nothing)."""
        link = producer.link
        if link is None:
            return
        self.inbound.producer_admitted(link)
        if link not in self.inbound.snapshotted:
            await self.inbound_snapshots.now()

    def remove_producer(self, producer: Producer) -> list[Producer]:
        return self.producers.remove(producer)

    async def persist_topic_epoch(self) -> None:
        """Store the topic epoch an exclusive admission moved (Pulsar's ``setTopicEpoch``:
        the managed ledger's ``pulsar.topic.epoch`` property), so a producer fenced before an
        unload or restart stays fenced after it. Only ever stores a higher epoch."""
        async with self._epoch_lock:
            epoch = self.producers.topic_epoch
            if epoch is None or (self._stored_epoch is not None and epoch <= self._stored_epoch):
                return
            await self.ledger.set_property(TOPIC_EPOCH_PROPERTY, str(epoch))
            self._stored_epoch = epoch

    def epoch_not_stored(self) -> None:
        """Storing the epoch failed and the producer it was for is gone."""
        self.producers.revert_epoch(self._stored_epoch)

    def last_sequence_id(self, producer_name: str) -> int:
        link = link_of_producer(producer_name)
        if link is not None:
            return self.inbound.last_sequence_id(link)
        return self.dedup.last_sequence_id(producer_name)

    # -- termination (Pulsar's ``terminate``: no more messages, ever; reads continue)
    @property
    def terminated(self) -> bool:
        return self.ledger.terminated

    async def terminate(self) -> Position:
        """Store what was sent so far, then close the topic to writes for good (durably:
        the storage keeps the flag); returns the last position. Connected producers are
        closed: their reconnect is refused with TopicTerminatedError."""
        await self._drain_publishes()
        last = await self.ledger.terminate()
        for producer in list(self.producers.producers.values()):
            if producer.cnx is not None:
                producer.cnx.send_close_producer(producer)
            self.producers.remove(producer)
        for sub in self.subscriptions.values():
            sub.check_end_of_topic()  # consumers that already have everything hear it now
        return last

    # -- publish
    def publish_message(  # noqa: PLR0917 - hot path, positional on purpose
        self,
        sink: PublishSink,
        producer: Producer,
        sequence_id: int,
        highest_sequence_id: int,
        num_msgs: int,
        data: bytes,
        check_dedup: bool = True,
    ) -> None:
        """Append ``data``; its outcome goes to ``sink`` (see ``PublishSink``), with the
        SENDs completed in the same append and the same sink."""
        item = PendingSend(producer, data, num_msgs, sink, sequence_id, highest_sequence_id)
        link = producer.link
        if link is not None:  # another cluster's replicator: deduplicated whatever the policy
            self._admit_link_send(item, link)
        elif producer is self._marker_producer:
            item.marker = 1
        elif check_dedup and self.dedup.enabled:
            highest = max(highest_sequence_id, sequence_id + num_msgs - 1)
            if self.dedup.is_duplicate(producer.name, sequence_id, highest):
                item.duplicate = True
            else:
                item.dedup_name, item.highest = producer.name, highest
        self._pending.append(item)
        if not self._submit_scheduled:
            self._submit_scheduled = True
            asyncio.get_running_loop().call_soon(self._submit)

    def _admit_link_send(self, item: PendingSend, link: str) -> None:
        item.link = link
        verdict = self.inbound.admit(link, item.sequence_id)
        if verdict is Verdict.DUPLICATE:
            item.duplicate = True
        elif verdict is Verdict.STORE:
            try:
                item.marker = entry_marker_type(item.data)
            except RemoteProtocolError:
                item.marker = 0  # checked by the connection; stored as any entry
        else:
            item.error = LinkRefused(
                f"{link}: an earlier copy of {item.sequence_id} is still being stored"
                if verdict is Verdict.UNKNOWN
                else f"{link}: an earlier send failed; reconnect and send again"
            )

    def publish_marker(self, data: bytes) -> asyncio.Future[Position]:
        """Store a marker entry (``client.protocol.markers``) in publish order; the future
        gives its position. Markers are acknowledged on every subscription once stored."""
        if self.closed:
            raise ManagedLedgerClosed(f"{self.name} is closing")
        sink = _MarkerSink(asyncio.get_running_loop().create_future())
        self.publish_message(sink, self._marker_producer, 0, 0, 1, data, False)
        return sink.stored

    def _submit(self) -> None:
        """End of a loop iteration: append what arrived as one batch, without waiting for
        earlier batches (the managed ledger completes adds in order); completions are then
        handled strictly in submission order by ``_complete_ready``, called back when an
        append completes (no task, no future per batch on the managed ledger)."""
        self._submit_scheduled = False
        batch, self._pending = self._pending, []
        if not batch:
            return
        if not self.inbound:
            datas = [p.data for p in batch if not p.duplicate]
        else:
            datas = []
            for p in batch:
                if p.duplicate or p.error is not None:
                    continue
                if p.link is not None and self.inbound.is_broken(p.link):
                    p.error = LinkRefused(f"{p.link}: an earlier send failed")
                    continue
                datas.append(p.data)
        item = _Inflight(self, batch)
        self._inflight.append(item)
        if not datas:  # duplicates only: reported once everything before them is
            item.done = True
            if len(self._inflight) == 1:
                self.complete_ready()
            return
        try:
            self.ledger.add_entries_then(datas, item.finish)
        except Exception as exc:  # refused at once (state, too many pending adds)
            self._links_failed(batch)  # before any later batch: nothing of a link after it
            item.finish(None, exc)

    def _links_failed(self, batch: list[PendingSend]) -> None:
        """SENDs of replication links in ``batch`` cannot be stored: each link is broken and
        its producer closed (it reconnects and sends again from its cursor), so nothing it
        sent later is stored before them."""
        for p in batch:
            if p.link is None or self.inbound.is_broken(p.link):
                continue
            self.inbound.failed(p.link)
            producer = p.producer
            if self.producers.producers.get(producer.name) is producer:
                if producer.cnx is not None:
                    producer.cnx.send_close_producer(producer)
                self.producers.remove(producer)

    def complete_ready(self) -> None:
        """Report the appends done at the head of the in-flight queue, in order."""
        inflight = self._inflight
        while inflight:
            item = inflight[0]
            if not item.done:
                break
            inflight.popleft()
            try:
                if item.error is not None:
                    exc = item.error
                    if not isinstance(exc, Exception):  # cancelled
                        exc = ManagedLedgerClosed(f"append to {self.name} cancelled")
                    self._failed(item.batch, exc)
                else:
                    self._completed(item.batch, item.positions)
            except Exception:  # a sink's failure must not stall the later receipts
                log.exception("reporting publishes on %s failed", self.name)
        if not inflight and self._drain_waiters:
            waiters, self._drain_waiters = self._drain_waiters, []
            for w in waiters:
                if not w.done():
                    w.set_result(None)

    def _failed(self, batch: list[PendingSend], exc: Exception) -> None:
        log.warning("append to %s failed: %s", self.name, exc)
        if isinstance(exc, (LedgerFenced, ManagedLedgerClosed)):
            self.fence(str(exc))
        for p in batch:
            if p.dedup_name is not None:
                self.dedup.failed(p.dedup_name)
        self._links_failed(batch)
        for sink, items, _ in runs_by_sink(batch, None):
            sink.on_publish_failed(items, exc)

    def _completed(self, batch: list[PendingSend], stored: list[Position]) -> None:
        self.counters.publish_batches += 1
        positions: list[Position | None]
        if len(stored) == len(batch):
            positions = stored  # type: ignore[assignment]  # read-only from here
        else:  # duplicates and refusals ride along without a position
            it = iter(stored)
            positions = [None if p.duplicate or p.error is not None else next(it) for p in batch]
        counts = self.counts
        if stored:
            counts.reporting(stored[0])
        msgs = nbytes = entries = 0
        dedup = self.dedup
        inbound = self.inbound
        stored_markers: list[tuple[Position, PendingSend]] = []
        refused = False
        for p, pos in zip(batch, positions, strict=True):
            if pos is None:
                refused = refused or p.error is not None
                continue
            if p.link is not None:
                inbound.stored(p.link, p.sequence_id)
            if p.marker:
                stored_markers.append((pos, p))
                continue
            n = p.num_messages
            if n != 1:
                counts.remember(pos, n)
            msgs += n
            nbytes += len(p.data)
            entries += 1
            if p.dedup_name is not None:
                dedup.persisted(p.dedup_name, p.highest)
        if stored:
            counts.reported(stored[-1])  # counts of this batch recorded: single if absent
            self._reported = stored[-1]
            if entries:
                self.markers.message_stored(
                    stored[-1] if not stored_markers else _last_message(batch, positions)
                )
        counters = self.counters
        counters.msg_in += msgs
        counters.bytes_in += nbytes
        counters.entries_in += entries
        if not refused:
            for sink, items, poss in runs_by_sink(batch, positions):
                sink.on_published(items, poss)  # type: ignore[arg-type]  # not None here
        else:
            _report_with_refusals(batch, positions)
        if stored_markers:
            self._markers_stored(stored_markers)
        if stored and inbound.count_stored(len(stored)):
            self.inbound_snapshots.soon()
        if stored and dedup.count_stored(len(stored)):
            self.dedup_snapshots.soon()

    def _markers_stored(self, stored: list[tuple[Position, PendingSend]]) -> None:
        """Markers are never a backlog: acknowledged on every subscription at once (the
        replicators' cursors are not subscriptions: they send what is for their remote)."""
        if self.markers.received():
            self._spawn(self.markers.expect())
        positions = [pos for pos, _ in stored]
        for sub in self.subscriptions.values():
            sub.ack_markers(positions)
        listener = self.marker_listener
        if listener is not None:
            for pos, p in stored:
                listener(pos, p.data, p.link is not None)

    def _spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        task.add_done_callback(_retrieve)

    async def _drain_publishes(self) -> None:
        """Wait until every SEND received so far has been reported."""
        if self._pending:
            self._submit()
        if self._inflight:
            waiter = asyncio.get_running_loop().create_future()
            self._drain_waiters.append(waiter)
            await waiter

    def _on_new_entries(self) -> None:
        for sub in self.subscriptions.values():
            sub.notify_new_entries()

    # -- subscriptions
    def _new_subscription(self, name: str, cursor: Any) -> Subscription:
        sub = Subscription(
            self.full_name,
            name,
            MarkerSkippingCursor(cursor, self.markers.active),
            self.count_of,
            partition_index=self.name.partition_index,
            max_unacked_per_subscription=self.max_unacked_per_subscription,
            slot_of=slot_of,
            deliver_at_of=self._deliver_at_of,
            chunk_of=entry_chunk,
            batch_size_hint=self.counts.known,
            delayed_ledger=self.ledger.index_home,
            max_read_entries=self.dispatcher_max_read_batch_size,
            max_read_bytes=self.dispatcher_max_read_size_bytes,
            min_read_entries=self.dispatcher_min_read_batch_size,
            redelivery_tracker=self.redelivery_tracker_enabled,
            terminated=lambda: self.ledger.terminated,
        )
        sub.on_mark_delete_moved = self._mark_delete_moved
        return sub

    def _mark_delete_moved(self, sub: Subscription) -> None:
        listener = self.mark_delete_listener
        if listener is not None and sub.replicated:
            listener(sub)

    # -- replicated subscriptions (PIP-33): the flag, and positions other clusters send
    def _replicated_names(self) -> set[str]:
        raw = self.ledger.properties.get(REPLICATED_SUBSCRIPTIONS_PROPERTY)
        try:
            names = json.loads(raw) if raw else []
        except ValueError:
            names = []
        return {n for n in names if isinstance(n, str)} if isinstance(names, list) else set()

    async def _store_replicated_names(self) -> None:
        names = sorted(n for n, sub in self.subscriptions.items() if sub.replicated)
        if set(names) != self._replicated_names():
            await self.ledger.set_property(REPLICATED_SUBSCRIPTIONS_PROPERTY, json.dumps(names))

    async def replicate_subscription(self, sub: Subscription) -> None:
        """The subscription's state is replicated from now on (``replicateSubscriptionState``
        on subscribe; as Pulsar, it is never turned off by a subscribe without it)."""
        if not sub.replicated:
            sub.replicated = True
            await self._store_replicated_names()

    async def move_replicated_subscription(self, sub_name: str, position: Position) -> bool:
        """Another cluster's replicated subscription moved: this one's mark-delete position
        goes to ``position`` (never back, never past the end); made there when it does not
        exist (replicated). True when it moved."""
        last = self.ledger.last_confirmed
        if last is None or self.closed:
            return False
        position = min(position, last)
        sub = self.subscriptions.get(sub_name)
        if sub is None:
            await self.create_subscription(sub_name, earliest=True)
            sub = self.subscriptions.get(sub_name)
            if sub is None:
                return False
            await self.replicate_subscription(sub)
        if position <= sub.cursor.mark_delete_position:
            return False
        await sub.skip_to(position)
        return True

    async def subscribe(
        self,
        consumer: Consumer,
        sub_name: str,
        *,
        durable: bool = True,
        initial_earliest: bool = False,
        start: Position | None = None,
        read_compacted: bool = False,
        replicated: bool = False,
    ) -> Subscription:
        if sub_name == COMPACTION_SUBSCRIPTION:
            raise SubscriptionError(
                ServerError.NotAllowedError,
                f"Subscription name {sub_name} is reserved for compaction",
            )
        if read_compacted and consumer.sub_type not in (SubType.EXCLUSIVE, SubType.FAILOVER):
            raise SubscriptionError(
                ServerError.NotAllowedError,
                "readCompacted only allowed on failover or exclusive subscriptions",
            )
        sub = self.subscriptions.get(sub_name)
        fresh = sub is None
        if sub is None:
            if durable:
                cursor: Any = await self.ledger.open_cursor(
                    sub_name, initial_earliest=initial_earliest
                )
            else:
                if start is None:
                    start = EARLIEST if initial_earliest else LATEST
                cursor = self.ledger.new_non_durable_cursor(sub_name, start)
            sub = self.subscriptions.get(sub_name)
            if sub is None:
                sub = self._new_subscription(sub_name, cursor)
                self.subscriptions[sub_name] = sub
                if durable:
                    log.info("[%s][%s] subscription opened", self.name, sub_name)
        elif not durable and sub.durable:
            raise SubscriptionError(
                ServerError.NotAllowedError,
                f"Durable subscription with the same name {sub_name} exists",
            )
        if read_compacted or isinstance(sub.cursor, CompactedCursor):
            earliest = (start == EARLIEST) if start is not None else initial_earliest
            self._apply_read_compacted(sub, read_compacted, from_earliest=fresh and earliest)
        await sub.prepare(consumer.sub_type)  # Shared / Key_Shared: the delayed index is open
        if replicated and sub.durable:
            await self.replicate_subscription(sub)
        sub.add_consumer(consumer)
        return sub

    def _apply_read_compacted(self, sub: Subscription, on: bool, *, from_earliest: bool) -> None:
        """The first consumer of a subscription decides whether it reads the compacted
        view (its cursor wrapped in a ``CompactedCursor``) or the topic as is."""
        if sub.consumers:
            return
        cursor = sub.cursor
        if on == isinstance(cursor, CompactedCursor):
            return
        if isinstance(cursor, CompactedCursor):
            sub.cursor = cursor.unwrap()
        elif self.compaction is not None:
            sub.cursor = CompactedCursor(cursor, self.compaction, from_earliest=from_earliest)
        else:
            return
        if sub.dispatcher is not None:  # the next consumer builds one over the new cursor
            sub.dispatcher.close()
            sub.dispatcher = None

    async def create_subscription(self, sub_name: str, *, earliest: bool = True) -> None:
        if sub_name in self.subscriptions:
            return
        cursor = await self.ledger.open_cursor(sub_name, initial_earliest=earliest)
        self.subscriptions.setdefault(sub_name, self._new_subscription(sub_name, cursor))
        log.info("[%s][%s] subscription opened", self.name, sub_name)

    def remove_consumer(self, sub: TopicSubscription, consumer: Consumer) -> None:
        sub.remove_consumer(consumer)
        if not sub.durable and not sub.consumers and self.subscriptions.get(sub.name) is sub:
            sub.close()
            del self.subscriptions[sub.name]

    async def unsubscribe(self, sub: TopicSubscription, consumer: Consumer | None) -> None:
        others = [c for c in sub.consumers if c is not consumer]
        if others:
            raise SubscriptionError(
                ServerError.ConsumerBusy, "Subscription has other connected consumers"
            )
        if consumer is not None:
            sub.remove_consumer(consumer)
        await self.delete_subscription(sub.name, force=False)

    async def delete_subscription(self, sub_name: str, *, force: bool) -> list[Consumer]:
        sub = self.subscriptions.get(sub_name)
        if sub is None:
            raise SubscriptionError(ServerError.SubscriptionNotFound, "Subscription not found")
        dropped = sub.consumers
        if dropped and not force:
            raise SubscriptionError(ServerError.ConsumerBusy, "Subscription has active consumers")
        for c in dropped:
            if c.sink is not None:
                c.sink.send_close_consumer(c)
            sub.remove_consumer(c)
        sub.close()
        self.subscriptions.pop(sub_name, None)
        log.info("[%s][%s] subscription deleted", self.name, sub_name)
        await sub.settle_acks()
        await sub.delete_delayed_index()  # its ledger sits under the cursor node
        if sub_name == COMPACTION_SUBSCRIPTION and self.compaction is not None:
            await self.compaction.delete()  # so do the compacted views
        if sub.durable:
            await self.ledger.delete_cursor(sub_name)
        if sub.replicated:
            await self._store_replicated_names()
        return dropped

    # -- positions
    def last_message_id(self, sub: Subscription | None) -> LastMessageId:
        # the last message, not a marker after it (a reader would wait for it forever)
        last = self.markers.last_data if self.markers.possible else self.ledger.last_confirmed
        mark = sub.cursor.mark_delete_position if sub is not None else None
        if last is None:
            ledger_id = mark.ledger_id if mark is not None and mark.ledger_id >= 0 else 0
            return LastMessageId(ledger_id, -1, -1, mark)
        n = self.counts.known(last)
        if n is None or n == 1:
            # caller resolves: one message is a single one (-1) or a batch of one (batch index
            # 0, as Pulsar answers), which only its metadata tells
            return LastMessageId(last.ledger_id, last.entry_id, -2, mark)
        return LastMessageId(last.ledger_id, last.entry_id, n - 1, mark)

    async def resolve_last_message_id(self, sub: TopicSubscription | None) -> LastMessageId:
        assert sub is None or isinstance(sub, Subscription)  # a persistent topic's own
        compacted = await self._last_compacted_message_id(sub)
        if compacted is not None:
            return compacted
        got = self.last_message_id(sub)
        if got.batch_index != -2:
            return got
        entries = await self.ledger.read_entries(Position(got.ledger_id, got.entry_id), 1)
        batch_index = -1
        if entries:
            try:
                md = parse_entry_metadata(entries[0].data)
                if md.HasField("num_messages_in_batch"):
                    batch_index = md.num_messages_in_batch - 1
            except Exception:
                pass
        return LastMessageId(got.ledger_id, got.entry_id, batch_index, got.mark_delete)

    async def _last_compacted_message_id(self, sub: Subscription | None) -> LastMessageId | None:
        """For a read_compacted subscription with nothing after the horizon: the last
        message of the view (the topic's last message may have been compacted out, and
        ``hasMessageAvailable`` must then say no once the view is read)."""
        comp = self.compaction
        if sub is None or comp is None or not isinstance(sub.cursor, CompactedCursor):
            return None
        view = comp.view
        last = self.ledger.last_confirmed
        if view is None or not len(view) or last is None or last > view.horizon:
            return None
        rec = await view.read_at(view.originals[len(view) - 1])
        if rec is None:
            return None
        batch_index = -1
        try:
            n, _ = entry_messages(rec.data)
            md = parse_entry_metadata(rec.data)
            if md.HasField("num_messages_in_batch"):
                batch_index = (rec.mask.bit_length() - 1) if rec.mask else n - 1
        except Exception:
            pass
        pos = rec.position
        return LastMessageId(
            pos.ledger_id, pos.entry_id, batch_index, sub.cursor.mark_delete_position
        )

    async def find_position_by_time(self, publish_time_ms: int) -> Position:
        """The first entry published at or after ``publish_time_ms`` (LATEST if none)."""
        found = await self.ledger.find_by_publish_time(publish_time_ms, publish_time_or_zero)
        return LATEST if found is None else found

    # -- lifecycle
    @property
    def closed(self) -> bool:
        return self.state in (TopicState.CLOSING, TopicState.CLOSED)

    @property
    def storage_size(self) -> int:
        return self.ledger.total_size

    def is_idle(self) -> bool:
        """No producers, no consumers, no stored entries."""
        if self.producers.producers:
            return False
        if any(sub.consumers for sub in self.subscriptions.values()):
            return False
        return self.ledger.num_entries == 0

    # -- policies
    def apply_policies(self, policies: AppliedPolicies) -> Coroutine[Any, Any, None] | None:
        """Deduplication, unacked limits (topic, subscriptions, dispatchers, consumers),
        delayed delivery, the managed ledger's retention (then a trim) and offload policies
        as ``policies`` say. Deduplication switched on live must first learn the stored
        sequence ids, as on load (max-merged with what producers send meanwhile): returned for
        the caller to run."""
        restore: Coroutine[Any, Any, None] | None = None
        if policies.deduplication and not self.dedup.enabled:
            self.dedup.enabled = True
            restore = self.restore_dedup()
        self.dedup.enabled = policies.deduplication
        self.max_unacked_per_consumer = policies.max_unacked_per_consumer
        self.max_unacked_per_subscription = policies.max_unacked_per_subscription
        self._deliver_at_of = entry_deliver_at if policies.delayed_delivery else never_delayed
        for sub in self.subscriptions.values():
            sub.apply_limits(
                policies.max_unacked_per_subscription,
                policies.max_unacked_per_consumer,
                self._deliver_at_of,
            )
        self.ledger.set_retention(policies.retention_time_ms, policies.retention_size_bytes)
        self.ledger.set_offload_policies(policies.offload)
        return restore

    async def delete_side_storage(self) -> None:
        """Before the ledger is deleted: the subscriptions' delayed-delivery indexes and the
        compacted views (stored under the ledger's nodes)."""
        for sub in list(self.subscriptions.values()):
            await sub.delete_delayed_index()
        if self.compaction is not None:
            await self.compaction.delete()  # the views sit under the __compaction cursor

    def fence(self, reason: str) -> None:
        """The storage refused a write for good: stop serving; the owner closes us."""
        if self.state is not TopicState.ACTIVE:
            self.state = next_topic_state(self.state, TopicEvent.FENCE)
            return
        self.state = next_topic_state(self.state, TopicEvent.FENCE)
        log.warning("topic %s fenced: %s", self.name, reason)
        if self.on_fenced is not None:
            self.on_fenced(self)

    async def close(self) -> None:
        """Unload: disconnect clients (they look up again), stop dispatch, close the ledger."""
        if self.closed:
            return
        self.state = next_topic_state(self.state, TopicEvent.CLOSE)
        for attachment in self.attachments:  # replicators first: they read the cursors
            try:
                await attachment.detach()
            except Exception:
                log.exception("%s: detaching %r", self.name, attachment)
        self.attachments.clear()
        self.marker_listener = None
        self.mark_delete_listener = None
        # consumers acknowledge what they hold before they hear CLOSE_CONSUMER (bounded;
        # dispatch has stopped); producers keep publishing meanwhile (what they store is
        # delivered by the next owner), so this wait is not part of their publish gap
        await asyncio.gather(
            *(
                s.let_consumers_ack(ACK_QUIET_S, ACK_SETTLE_MAX_S)
                for s in self.subscriptions.values()
            )
        )
        # SENDs keep arriving until the producers hear CLOSE_PRODUCER: drain until none is
        # left, then tell every producer with nothing awaited in between. A SEND read after
        # that finds its producer gone and is resent by the client to the next owner; one
        # stored here without its receipt reaching the client would be stored twice.
        while self._pending or self._inflight:
            await self._drain_publishes()
        for producer in list(self.producers.producers.values()) + list(self.producers.waiting):
            if producer.cnx is not None:
                producer.cnx.send_close_producer(producer)
            self.producers.remove(producer)
        # CLOSE_CONSUMER, then each connection takes its consumers' ACKs until the client
        # proves it read CLOSE_CONSUMER (a PING after it answered): ACKs the client wrote
        # before that were in flight, and are kept rather than redelivered by the next owner
        barriers: list[Awaitable[None]] = []
        for sub in list(self.subscriptions.values()):
            for consumer in sub.consumers:
                sink = consumer.sink
                if isinstance(sink, AckBarrierSink):
                    barriers.append(
                        sink.close_consumer_with_ack_barrier(consumer, ACK_BARRIER_MAX_S)
                    )
                elif sink is not None:
                    sink.send_close_consumer(consumer)
                sub.remove_consumer(consumer)
            sub.close()
        await asyncio.gather(*barriers, return_exceptions=True)
        for sub in list(self.subscriptions.values()):
            await sub.settle_acks()  # acks in flight reach the cursor ledger before it closes
            await sub.close_delayed_index()  # seal the tail, store a snapshot
        if self.compaction is not None:
            await self.compaction.close()
        if self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
        if self.inbound:
            try:  # the next owner reads nothing again
                await self.inbound_snapshots.now()
            except Exception as exc:
                log.warning("%s: replication links' snapshot not stored: %s", self.name, exc)
        if self.dedup.enabled and self.dedup.entries_since_snapshot:
            try:  # the next owner reads nothing again
                await self.dedup_snapshots.now()
            except Exception as exc:
                log.warning("%s: deduplication snapshot not stored: %s", self.name, exc)
        self.ledger.remove_tail_listener(self._on_new_entries)
        try:
            await self.ledger.close()
        finally:
            self.state = next_topic_state(self.state, TopicEvent.CLOSED)

    def stats(self) -> dict[str, Any]:
        subs: dict[str, Any] = {}
        for name, sub in self.subscriptions.items():
            s = sub.statistics()
            subs[name] = {
                "type": s.type,
                "msgBacklog": s.backlog,
                "msgDelayed": sub.delayed_index.size() if sub.delayed_index is not None else 0,
                "unackedMessages": s.unacked,
                "isDurable": s.durable,
                "markDeletePosition": s.mark_delete,
                "readPosition": s.read_position,
                **(
                    {
                        "drainingHashesCount": s.draining_hashes_count,
                        "drainingHashesPendingMessages": s.draining_hashes_pending_messages,
                        "drainingHashesClearedTotal": s.draining_hashes_cleared_total,
                    }
                    if s.type == "Key_Shared"
                    else {}
                ),
                "consumers": [
                    {
                        "consumerName": c.name,
                        "availablePermits": c.permits,
                        "unackedMessages": c.unacked,
                        "blockedConsumerOnUnackedMsgs": c.blocked,
                        "msgOutCounter": c.msg_out,
                        "address": c.address,
                        "connectedSince": c.connected_since,
                    }
                    for c in sub.consumers
                ],
            }
        return {
            "msgInCounter": self.counters.msg_in,
            "bytesInCounter": self.counters.bytes_in,
            "entriesInCounter": self.counters.entries_in,
            "storageSize": self.ledger.total_size,
            "numberOfEntries": self.ledger.num_entries,
            "publishers": [
                {
                    "producerName": p.name,
                    "producerId": p.producer_id,
                    "accessMode": p.access_mode.pulsar_name,
                    "msgInCounter": p.msg_in,
                }
                for p in self.producers.producers.values()
            ],
            "subscriptions": subs,
            "deduplicationStatus": "Enabled" if self.dedup.enabled else "Disabled",
            **({"compaction": self.compaction.stats_json()} if self.compaction else {}),
            "topicEpoch": self.producers.topic_epoch,
        }


class _MarkerSink:
    """The ``PublishSink`` of one marker the topic writes: its position, or the error."""

    __slots__ = ("stored",)

    def __init__(self, stored: asyncio.Future[Position]) -> None:
        self.stored = stored

    def on_published(self, items: list[PendingSend], positions: list[Position | None]) -> None:
        if not self.stored.done() and positions and positions[0] is not None:
            self.stored.set_result(positions[0])

    def on_publish_failed(self, items: list[PendingSend], exc: Exception) -> None:
        if not self.stored.done():
            self.stored.set_exception(exc)


def _retrieve(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()


def _last_message(batch: list[PendingSend], positions: list[Position | None]) -> Position:
    """The position of the last stored message (not marker) of a batch that has one."""
    for p, pos in zip(reversed(batch), reversed(positions), strict=True):
        if pos is not None and not p.marker:
            return pos
    raise AssertionError("a batch with a stored message")


def _report_with_refusals(batch: list[PendingSend], positions: list[Position | None]) -> None:
    """Outcomes of a batch holding refused SENDs, in order: runs of one sink and one kind
    (stored or duplicate / refused)."""
    start = 0
    for i in range(1, len(batch) + 1):
        first = batch[start]
        if (
            i < len(batch)
            and batch[i].sink is first.sink
            and (batch[i].error is None) == (first.error is None)
        ):
            continue
        items = batch[start:i]
        if first.error is not None:
            first.sink.on_publish_failed(items, first.error)
        else:
            first.sink.on_published(items, positions[start:i])
        start = i


__all__ = [
    "REPLICATED_SUBSCRIPTIONS_PROPERTY",
    "TOPIC_EPOCH_PROPERTY",
    "TOPIC_TRANSITIONS",
    "AckBarrierSink",
    "InvalidTopicTransition",
    "LinkRefused",
    "MarkerListener",
    "PersistentTopic",
    "TopicAttachment",
    "TopicEvent",
    "TopicState",
    "next_topic_state",
]
