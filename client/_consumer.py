"""Consumers: per-partition subscriptions and the public ``Consumer`` over one or many topics.

Owns: ``PartitionConsumer`` (one topic or partition: SUBSCRIBE, FLOW permits, decoding of
MESSAGE frames (decompression, batches, chunk reassembly), the acknowledgement trackers, the
negative-ack and ack-timeout redelivery paths, dead-letter routing, seek, reconnection) and
``Consumer`` (the application's handle: one bounded receive queue fed by all its partition
consumers; ``receive``, async iteration, an optional listener; topic lists and regex patterns
with periodic discovery; ``acknowledge``/``acknowledge_cumulative``/``negative_acknowledge``;
``reconsume_later``; ``seek``; ``unsubscribe``).

Permits (reference §3.8): after SUBSCRIBE the partition grants ``receiver_queue_size``; every
message the application takes returns one permit, sent as FLOW once half the queue is
returned. Messages dropped locally (duplicates, filtered, dead-lettered) return their permit
at once. Invariant: messages queued for the application <= permits granted (+ one batch).

Must not know: the broker's dispatch policy.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import re
import secrets
import struct
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from magnetar.client._config import (
    ConsumerBatchReceivePolicy,
    ConsumerDeadLetterPolicy,
    ConsumerKeySharedPolicy,
    ConsumerType,
    InitialPosition,
    KeySharedMode,
    RedeliveryBackoff,
)
from magnetar.client._connection import ClientConnection
from magnetar.client._entry_decode import (
    VALIDATION_BATCH_DESERIALIZE_ERROR,
    EntryDecodeError,
    decode_entry,
)
from magnetar.client._errors import (
    AlreadyClosed,
    CumulativeAcknowledgementNotAllowedError,
    InvalidConfiguration,
    PulsarException,
    Timeout,
    for_code,
)
from magnetar.client._handler import ClientContext, Handler, HandlerState
from magnetar.client._message import Message, MessageId
from magnetar.client._message_batch import EntryMembers, MessageBatch
from magnetar.client._trackers import (
    AckFlush,
    AckGroupingTracker,
    BatchAckTracker,
    Entry,
    NegativeAckTracker,
    UnackedMessageTracker,
    ack_set_words,
    unacked_from_ack_set,
)
from magnetar.client.protocol import (
    BatchDeserializeError,
    PayloadCommand,
    TopicName,
    chunk_info,
    commands,
    is_batch,
    pb,
    scan_batch,
    to_int64,
    to_uint64,
)
from magnetar.client.protocol import MessageId as _Id

log = logging.getLogger(__name__)

RETRY_PROPS = ("REAL_TOPIC", "ORIGIN_MESSAGE_ID", "RECONSUMETIMES", "DELAY_TIME")


@dataclass(frozen=True, slots=True)
class ConsumerConfig:
    subscription_name: str
    consumer_type: ConsumerType = ConsumerType.Exclusive
    receiver_queue_size: int = 1000
    max_total_receiver_queue_size_across_partitions: int = 50_000
    consumer_name: str | None = None
    unacked_messages_timeout_ms: int | None = None
    ack_timeout_tick_ms: int = 1000
    negative_ack_redelivery_delay_ms: int = 60_000
    negative_ack_redelivery_backoff: RedeliveryBackoff | None = None
    ack_group_time_ms: int = 100
    is_read_compacted: bool = False
    properties: Mapping[str, str] = field(default_factory=dict)
    subscription_properties: Mapping[str, str] = field(default_factory=dict)
    pattern_auto_discovery_period: int = 60
    initial_position: InitialPosition = InitialPosition.Latest
    priority_level: int = 0
    max_pending_chunked_message: int = 10
    expire_time_of_incomplete_chunked_message_ms: int = 60_000
    start_message_id_inclusive: bool = False
    key_shared_policy: ConsumerKeySharedPolicy | None = None
    batch_index_ack_enabled: bool = False
    dead_letter_policy: ConsumerDeadLetterPolicy | None = None
    schema: Any = None
    """A ``magnetar.client.schema.Schema``: sent on SUBSCRIBE, decodes ``Message.value()``."""
    retry_enable: bool = False
    durable: bool = True
    start_message_id: MessageId | None = None
    ack_receipt_enabled: bool = False
    batch_receive_policy: ConsumerBatchReceivePolicy = field(
        default_factory=ConsumerBatchReceivePolicy
    )

    def __post_init__(self) -> None:
        if not self.subscription_name:
            raise InvalidConfiguration("subscription name cannot be empty")
        if self.receiver_queue_size < 0:
            raise InvalidConfiguration("receiver_queue_size must be >= 0")
        t = self.unacked_messages_timeout_ms
        if t is not None and 0 < t < 1000:
            raise InvalidConfiguration("unacked_messages_timeout_ms must be 0 or >= 1000")


@dataclass(slots=True)
class _Chunks:
    parts: list[bytes]
    ids: list[_Id]
    created_ms: float


@dataclass(frozen=True, slots=True)
class ConsumerStatistics:
    queued_messages: int
    available_permits: int
    received: int
    acked_entries_pending: int
    negative_acks_pending: int
    unacked_tracked: int
    reconnects: int
    state: str


class PartitionConsumer(Handler):
    kind = "consumer"

    def __init__(
        self,
        ctx: ClientContext,
        topic: TopicName,
        config: ConsumerConfig,
        parent: Consumer,
        *,
        partition: int,
        queue_size: int,
    ) -> None:
        super().__init__(ctx, topic)
        self.config = config
        self.parent = parent
        self.partition = partition
        self.consumer_id = ctx.next_consumer_id()
        self.topic_name = topic.full_name
        self.consumer_name = config.consumer_name or secrets.token_hex(5)
        self.queue_size = queue_size
        self._permits_to_return = 0
        self._zq_requested = False
        self._received = 0
        self.acks = AckGroupingTracker()
        self.batches = BatchAckTracker()
        self.nacks = NegativeAckTracker()
        timeout = config.unacked_messages_timeout_ms or 0
        self.unacked = UnackedMessageTracker(timeout) if timeout > 0 else None
        self._chunks: collections.OrderedDict[str, _Chunks] = collections.OrderedDict()
        self._start_filter: tuple[MessageId, bool] | None = None
        if config.start_message_id is not None and not config.durable:
            self._start_filter = (config.start_message_id, config.start_message_id_inclusive)
        self.start_message_id = config.start_message_id
        self.last_dequeued: MessageId | None = None
        self.is_active: bool | None = None
        # the broker said REACHED_END_OF_TOPIC: the topic is terminated and everything in
        # it is acknowledged on this subscription
        self.reached_end_of_topic = False
        self._dlq_candidates: dict[Entry, list[Message]] = {}
        self._seek_waiter: asyncio.Future[None] | None = None

    def __repr__(self) -> str:
        return f"<PartitionConsumer {self.topic} id={self.consumer_id} {self.state.value}>"

    # ------------------------------------------------------------------ connection

    async def _establish(self, cnx: ClientConnection) -> None:
        cnx.consumers[self.consumer_id] = self
        cfg = self.config
        rid = self.ctx.next_request_id()
        start = None
        if not cfg.durable:
            sid = self.last_dequeued or self.start_message_id
            if sid is not None:
                start = sid._id
            if self.last_dequeued is not None:  # resume after the last message handed out
                self._start_filter = (self.last_dequeued, False)
        ks = None
        if cfg.consumer_type == ConsumerType.KeyShared:
            policy = cfg.key_shared_policy or ConsumerKeySharedPolicy()
            ks = pb.KeySharedMeta(
                keySharedMode=int(policy.key_shared_mode),  # type: ignore[arg-type]
                allowOutOfOrderDelivery=policy.allow_out_of_order_delivery,
            )
            if policy.key_shared_mode == KeySharedMode.Sticky:
                for lo, hi in policy.sticky_ranges:
                    ks.hashRanges.add(start=lo, end=hi)
        cmd = commands.subscribe(
            self.topic.full_name,
            cfg.subscription_name,
            self.consumer_id,
            rid,
            sub_type=int(cfg.consumer_type),
            consumer_name=self.consumer_name,
            priority_level=cfg.priority_level,
            durable=cfg.durable,
            initial_position=int(cfg.initial_position),
            start_message_id=start,
            read_compacted=cfg.is_read_compacted,
            key_shared_meta=ks,
            properties=cfg.properties,
        )
        for k, v in cfg.subscription_properties.items():
            cmd.subscribe.subscription_properties.add(key=k, value=v)
        info = cfg.schema.schema_info() if cfg.schema is not None else None
        if info is not None:
            cmd.subscribe.schema.CopyFrom(info)
        try:
            await cnx.request(cmd, rid)
        except BaseException:
            cnx.consumers.pop(self.consumer_id, None)
            raise
        self.cnx = cnx

    def _on_ready(self) -> None:
        cnx = self.cnx
        assert cnx is not None
        self.parent._drop_queued(self)
        self._permits_to_return = 0
        self._zq_requested = False
        self.flush_acks()
        if self.queue_size <= 0 and self.parent._receivers:
            self.request_one()
        if self.queue_size > 0:
            cnx.send_command(commands.flow(self.consumer_id, self.queue_size))
        if self._seek_waiter is not None and not self._seek_waiter.done():
            self._seek_waiter.set_result(None)

    def _detach(self) -> None:
        if self.cnx is not None:
            self.cnx.consumers.pop(self.consumer_id, None)
        self.cnx = None

    def _on_disconnected(self) -> None:
        # The broker re-sends every unacked message after re-subscription: drop the copies
        # still queued now rather than hand them out during the outage and again after it.
        self.parent._drop_queued(self)

    def connection_closed(self, cnx: ClientConnection) -> None:
        if cnx is self.cnx:
            self.connection_lost()

    def on_closed_by_broker(self) -> None:
        self.connection_lost()

    def on_active_consumer_change(self, is_active: bool) -> None:
        self.is_active = is_active

    def on_reached_end_of_topic(self) -> None:
        self.reached_end_of_topic = True

    def _on_fatal(self, exc: PulsarException) -> None:
        self.parent._partition_failed(self, exc)

    # ------------------------------------------------------------------ permits

    def message_processed(self, n: int = 1) -> None:
        """The application took ``n`` messages (or they were dropped): return permits."""
        if self.queue_size <= 0:
            return
        self._permits_to_return += n
        if self._permits_to_return >= max(1, self.queue_size // 2):
            self._send_flow()

    def _dropped(self, n: int) -> None:
        """``n`` messages were consumed locally (filtered, duplicate, dead-lettered...)."""
        if self.queue_size <= 0:
            self._zq_requested = False
            if self.parent._receivers:
                self.request_one()
            return
        self.message_processed(n)

    def request_one(self) -> None:
        """Zero receiver queue: ask the broker for one message (FLOW(1)) if not asked yet."""
        cnx = self.cnx
        if self._zq_requested or cnx is None or self.state is not HandlerState.READY:
            return
        self._zq_requested = True
        with contextlib.suppress(PulsarException):
            cnx.send_command(commands.flow(self.consumer_id, 1))

    def _send_flow(self) -> None:
        cnx = self.cnx
        if cnx is None or self.state is not HandlerState.READY or not self._permits_to_return:
            return
        n, self._permits_to_return = self._permits_to_return, 0
        with contextlib.suppress(PulsarException):
            cnx.send_command(commands.flow(self.consumer_id, n))

    # ------------------------------------------------------------------ receiving

    def on_corrupt_message(self, event: PayloadCommand) -> None:
        mid = event.base.message.message_id
        self._ack_with_validation_error((to_int64(mid.ledgerId), to_int64(mid.entryId)), 2)
        self._dropped(1)

    def _ack_with_validation_error(self, entry: Entry, code: int) -> None:
        cnx = self.cnx
        if cnx is None:
            return
        cmd = commands.ack(self.consumer_id, [entry])
        cmd.ack.validation_error = code  # type: ignore[assignment]
        with contextlib.suppress(PulsarException):
            cnx.send_command(cmd)

    def on_message(self, event: PayloadCommand) -> None:
        body = event.base.message
        md = event.metadata
        assert md is not None
        ledger, entry_id = to_int64(body.message_id.ledgerId), to_int64(body.message_id.entryId)
        entry = (ledger, entry_id)
        redelivery = body.redelivery_count
        now = self.ctx.clock.monotonic_ms()
        if self.acks.is_duplicate(entry):
            n = md.num_messages_in_batch if is_batch(md) else 1
            self._reack(entry)
            self._dropped(n)
            return
        payload = event.payload
        if (
            self._lazy_batches
            and md.HasField("num_messages_in_batch")
            and not body.ack_set
            and not md.HasField("chunk_id")
            and not (md.HasField("compression") and md.compression != 0)
            and not self.batches.known(entry)
        ):
            self._on_plain_batch(md, payload, entry, redelivery)
            return
        chunk = chunk_info(md)
        chunk_ids: tuple[_Id, ...] = ()
        if chunk is not None:
            assembled = self._add_chunk(chunk, _Id(ledger, entry_id, self.partition), payload, now)
            if assembled is None:
                self._dropped(1)  # a partial chunk is not a message for the app
                return
            payload, chunk_ids = assembled
        still: set[int] | None = None
        if is_batch(md):
            n = md.num_messages_in_batch
            if body.ack_set:
                still = unacked_from_ack_set(list(body.ack_set), n)
            if self.batches.known(entry):  # redelivered: skip members already acked here
                local = self.batches.remaining(entry)
                still = local if still is None else still & local
        try:
            decoded = decode_entry(
                md,
                payload,
                partition=self.partition,
                ledger=ledger,
                entry_id=entry_id,
                topic=self.topic_name,
                redelivery=redelivery,
                chunk_ids=chunk_ids,
                still=still,
                drop=None if self._start_filter is None else self._filtered,
                consumer_ref=self,
            )
        except EntryDecodeError as exc:
            log.error("%s: dropping %s: %s", self.topic, entry, exc)
            self._ack_with_validation_error(entry, exc.validation_error)
            self._dropped(exc.count)
            return
        out = decoded.messages
        if decoded.batch_size:
            if decoded.delivered and self.config.durable:  # readers never ack: nothing to track
                self.batches.received(entry, decoded.batch_size, decoded.delivered)
            elif decoded.skipped == decoded.batch_size:
                self._reack(entry)
        if decoded.skipped:
            self._dropped(decoded.skipped)
        if not out:
            return
        self._received += len(out)
        policy = self.config.dead_letter_policy
        if policy is not None and redelivery >= policy.max_redeliver_count and self._shared:
            self._dlq_candidates[entry] = out
            if redelivery > policy.max_redeliver_count:
                self.parent._spawn(self._dead_letter([entry]))
                self._dropped(len(out))
                return
        if self.unacked is not None:
            self.unacked.add(entry, self.ctx.clock.monotonic_ms())
        self.parent._enqueue(self, out)

    @property
    def _lazy_batches(self) -> bool:
        """Batches can be queued undecoded (``EntryMembers``): nothing filters members here
        (a reader's start filter at earliest or latest drops nothing)."""
        cfg = self.config
        start = self._start_filter
        return (
            (start is None or start[0] in (MessageId.earliest, MessageId.latest))
            and cfg.dead_letter_policy is None
            and not cfg.is_read_compacted
        )

    def _on_plain_batch(
        self, md: pb.MessageMetadata, payload: bytes, entry: Entry, redelivery: int
    ) -> None:
        """A whole, uncompressed batch: queued as one ``EntryMembers``, decoded on demand."""
        n = md.num_messages_in_batch
        try:
            spans = scan_batch(payload, n)
        except BatchDeserializeError as exc:
            log.error("%s: dropping %s: %s", self.topic, entry, exc)
            self._ack_with_validation_error(entry, VALIDATION_BATCH_DESERIALIZE_ERROR)
            self._dropped(n)
            return
        if n == 0:
            self._reack(entry)
            return
        members = EntryMembers(
            payload,
            spans,
            partition=self.partition,
            ledger=entry[0],
            entry_id=entry[1],
            topic=self.topic_name,
            redelivery=redelivery,
            publish_time=md.publish_time,
            event_time=md.event_time,
            schema_version=md.schema_version,
            consumer_ref=self,
        )
        if self.config.durable:  # readers never ack: nothing to track
            self.batches.received(entry, n, set(range(n)))
        self._received += n
        if self.unacked is not None:
            self.unacked.add(entry, self.ctx.clock.monotonic_ms())
        self.parent._enqueue_members(self, members)

    def _filtered(self, mid: MessageId) -> bool:
        """Reader/seek start filter: drop messages before (or at, unless inclusive) the start."""
        if self._start_filter is None:
            return False
        start, inclusive = self._start_filter
        if start in (MessageId.earliest, MessageId.latest):
            return False
        if mid < start or (mid == start and not inclusive):
            return True
        if (
            start.batch_index() < 0
            and mid.ledger_id() == start.ledger_id()
            and (mid.entry_id() == start.entry_id())
        ):
            return not inclusive
        return False

    def _add_chunk(
        self, chunk: Any, cid: _Id, payload: bytes, now: float
    ) -> tuple[bytes, tuple[_Id, ...]] | None:
        ctx = self._chunks.get(chunk.uuid)
        if chunk.chunk_id == 0:
            ctx = _Chunks([], [], now)
            self._chunks[chunk.uuid] = ctx
            while len(self._chunks) > self.config.max_pending_chunked_message:
                _uuid, old = self._chunks.popitem(last=False)
                for oid in old.ids:  # give up on the oldest incomplete message: ack its chunks
                    self.acks.add_individual(oid.entry)
        if ctx is None or len(ctx.parts) != chunk.chunk_id:
            self.acks.add_individual(cid.entry)  # a chunk we cannot place: drop it
            return None
        ctx.parts.append(payload)
        ctx.ids.append(cid)
        if not chunk.is_last:
            return None
        del self._chunks[chunk.uuid]
        return b"".join(ctx.parts), tuple(ctx.ids)

    @property
    def _shared(self) -> bool:
        return self.config.consumer_type in (ConsumerType.Shared, ConsumerType.KeyShared)

    # ------------------------------------------------------------------ acknowledgement

    def _reack(self, entry: Entry) -> None:
        cnx = self.cnx
        if cnx is not None:
            with contextlib.suppress(PulsarException):
                cnx.send_command(commands.ack(self.consumer_id, [entry]))

    def acknowledge(self, mid: MessageId) -> None:
        if mid._chunk_ids:
            for cid in mid._chunk_ids:
                self._ack_entry(cid.entry)
            return
        entry = (mid.ledger_id(), mid.entry_id())
        if mid.batch_index() >= 0:
            done = self.batches.ack(entry, mid.batch_index())
            if not done:
                if self.config.batch_index_ack_enabled:
                    size = self.batches.size_of(entry) or mid._batch_size
                    remaining = self.batches.remaining(entry)
                    if self.acks.add_batch_index(entry, ack_set_words(remaining, size)):
                        self.flush_acks()
                return
        self._ack_entry(entry)

    def acknowledge_members(self, members: EntryMembers, lo: int, hi: int) -> None:
        """Acknowledge members ``lo..hi-1`` of one batch entry (``acknowledge(batch)``)."""
        entry = members.entry
        done = True
        for i in range(lo, hi):
            done = self.batches.ack(entry, i)
        if done:
            self._ack_entry(entry)
        elif self.config.batch_index_ack_enabled:
            remaining = self.batches.remaining(entry)
            if self.acks.add_batch_index(entry, ack_set_words(remaining, members.batch_size)):
                self.flush_acks()

    def _ack_entry(self, entry: Entry) -> None:
        self.nacks.remove(entry)
        if self.unacked is not None:
            self.unacked.remove(entry)
        self._dlq_candidates.pop(entry, None)
        if self.acks.add_individual(entry):
            self.flush_acks()

    def acknowledge_cumulative(self, mid: MessageId) -> None:
        if self._shared:
            raise CumulativeAcknowledgementNotAllowedError(
                "cumulative ack is not allowed on Shared/Key_Shared subscriptions"
            )
        entry = (mid.ledger_id(), mid.entry_id())
        if mid._chunk_ids:
            entry = mid._chunk_ids[-1].entry
        target = entry
        if mid.batch_index() >= 0:
            remaining = self.batches.remaining(entry)
            if any(i > mid.batch_index() for i in remaining):
                target = (entry[0], entry[1] - 1)  # the batch is not wholly acked yet
                for i in remaining:
                    if i <= mid.batch_index():
                        self.batches.ack(entry, i)
            else:
                self.batches.forget(entry)
        self.batches.forget_upto((entry[0], entry[1] - 1))
        if self.unacked is not None:
            self.unacked.remove_upto(target)
        for e in [e for e in list(self._dlq_candidates) if e <= target]:
            self._dlq_candidates.pop(e, None)
        self.acks.add_cumulative(target)

    def _ack_commands(self, pending: AckFlush) -> list[pb.BaseCommand]:
        out: list[pb.BaseCommand] = []
        if pending.individual:
            out.append(commands.ack(self.consumer_id, pending.individual))
        if pending.batch_index:
            cmd = commands.ack(self.consumer_id, [])
            for (ledger, entry_id), words in pending.batch_index.items():
                cmd.ack.message_id.add(
                    ledgerId=to_uint64(ledger), entryId=to_uint64(entry_id), ack_set=words
                )
            out.append(cmd)
        if pending.cumulative is not None:
            out.append(commands.ack(self.consumer_id, [pending.cumulative], cumulative=True))
        return out

    def _requeue(self, pending: AckFlush) -> None:
        for e in pending.individual:
            self.acks.add_individual(e)
        for e, words in pending.batch_index.items():
            self.acks.add_batch_index(e, words)
        if pending.cumulative is not None:
            self.acks.add_cumulative(pending.cumulative)

    def flush_acks(self) -> None:
        """Send grouped acks (fire and forget); kept for after reconnection if not connected."""
        if not self.topic.is_persistent:  # nothing to acknowledge (as the C++ client)
            self.acks.flush()
            return
        if self.config.ack_receipt_enabled:
            if len(self.acks) and self.state is HandlerState.READY:
                self.parent._spawn(self._flush_with_receipt())
            return
        cnx = self.cnx
        if cnx is None or self.state is not HandlerState.READY or not len(self.acks):
            return
        pending = self.acks.flush()
        try:
            for cmd in self._ack_commands(pending):
                cnx.send_command(cmd)
        except PulsarException:
            self._requeue(pending)  # lost with the connection: resent after reconnection

    async def _flush_with_receipt(self) -> None:
        with contextlib.suppress(PulsarException):
            await self.flush_acks_with_receipt()

    async def flush_acks_with_receipt(self) -> None:
        """Send grouped acks with request ids and wait until the broker confirmed them
        (``ack_receipt_enabled``); waits for a reconnection up to the operation timeout."""
        if not len(self.acks) or not self.topic.is_persistent:
            self.acks.flush()
            return
        ready = self.state is HandlerState.READY
        if not ready and not await self.wait_ready(self.ctx.operation_timeout_ms / 1000):
            raise Timeout("acknowledgement: consumer not connected")
        cnx = self.cnx
        assert cnx is not None
        pending = self.acks.flush()
        waits = []
        try:
            for cmd in self._ack_commands(pending):
                rid = self.ctx.next_request_id()
                cmd.ack.request_id = rid
                waits.append(cnx.request(cmd, rid))
            responses = await asyncio.gather(*waits)
        except PulsarException:
            self._requeue(pending)
            raise
        for event in responses:
            resp = event.base.ackResponse
            if resp.HasField("error"):
                raise for_code(resp.error, resp.message)

    # ------------------------------------------------------------------ redelivery

    def negative_acknowledge(self, msg_id: MessageId, redelivery_count: int) -> None:
        backoff = self.config.negative_ack_redelivery_backoff
        delay = (
            backoff.next_delay_ms(redelivery_count)
            if backoff is not None
            else self.config.negative_ack_redelivery_delay_ms
        )
        entries = [c.entry for c in msg_id._chunk_ids] or [(msg_id.ledger_id(), msg_id.entry_id())]
        for entry in entries:
            if self.unacked is not None:
                self.unacked.remove(entry)
            self.nacks.add(entry, self.ctx.clock.monotonic_ms(), delay)

    def tick(self) -> None:
        """Timers: flush grouped acks, redeliver due nacks and ack-timed-out messages."""
        self.flush_acks()
        now = self.ctx.clock.monotonic_ms()
        due = self.nacks.due(now)
        if self.unacked is not None:
            due += self.unacked.expired(now)
        if due:
            self.redeliver(sorted(set(due)))
        if self._chunks:
            limit = self.config.expire_time_of_incomplete_chunked_message_ms
            for uuid in [u for u, c in self._chunks.items() if c.created_ms + limit <= now]:
                old = self._chunks.pop(uuid)
                for oid in old.ids:
                    self.acks.add_individual(oid.entry)

    def redeliver(self, entries: list[Entry]) -> None:
        if self.config.dead_letter_policy is not None and self._shared:
            dead = [e for e in entries if e in self._dlq_candidates]
            if dead:
                self.parent._spawn(self._dead_letter(dead))
                entries = [e for e in entries if e not in self._dlq_candidates]
        if not entries:
            return
        cnx = self.cnx
        if cnx is None or self.state is not HandlerState.READY:
            return  # the broker redelivers everything unacked after reconnection anyway
        with contextlib.suppress(PulsarException):
            if self._shared:
                cnx.send_command(
                    commands.redeliver_unacknowledged_messages(self.consumer_id, entries)
                )
            else:
                cleared = self.parent._drop_queued(self)
                cnx.send_command(commands.redeliver_unacknowledged_messages(self.consumer_id))
                if cleared:
                    self.message_processed(cleared)

    async def _dead_letter(self, entries: list[Entry]) -> None:
        policy = self.config.dead_letter_policy
        assert policy is not None
        for entry in entries:
            msgs = self._dlq_candidates.pop(entry, None)
            if not msgs:
                continue
            try:
                producer = await self.parent._dlq_producer()
                for m in msgs:
                    props = m.properties()
                    props.setdefault("REAL_TOPIC", self.topic.full_name)
                    mid = m.message_id()
                    props.setdefault(
                        "ORIGIN_MESSAGE_ID",
                        f"({mid.ledger_id()},{mid.entry_id()},{mid.partition()},"
                        f"{mid.batch_index()})",
                    )
                    await producer.send(
                        m.data(),
                        properties=props,
                        partition_key=m.partition_key() if m.has_key() else None,
                        ordering_key=m.ordering_key() or None,
                        event_timestamp=m.event_timestamp() or None,
                    )
            except PulsarException as exc:
                log.warning(
                    "%s: dead-lettering %s failed (%s); redelivering", self.topic, entry, exc
                )
                self.redeliver([entry])
                continue
            self._ack_entry(entry)
            self.batches.forget(entry)

    # ------------------------------------------------------------------ requests

    async def seek(self, *, message_id: MessageId | None, publish_time_ms: int | None) -> None:
        cnx = self.cnx
        if cnx is None or self.state is not HandlerState.READY:
            raise AlreadyClosed("consumer not connected")
        rid = self.ctx.next_request_id()
        self._seek_waiter = asyncio.get_running_loop().create_future()
        if message_id is not None:
            mid = message_id._id
            if message_id._chunk_ids:
                mid = message_id._chunk_ids[0]
            cmd = commands.seek(self.consumer_id, rid, message_id=mid)
        else:
            cmd = commands.seek(self.consumer_id, rid, publish_time_ms=publish_time_ms)
        self.acks.flush()
        self.nacks.clear()
        if self.unacked is not None:
            self.unacked.clear()
        await cnx.request(cmd, rid)
        self.acks = AckGroupingTracker()  # after a seek, re-delivered ids are not duplicates
        self.last_dequeued = None
        if message_id is not None and message_id not in (MessageId.earliest, MessageId.latest):
            self._start_filter = (message_id, self.config.start_message_id_inclusive)
            self.start_message_id = message_id
        else:
            self._start_filter = None
            self.start_message_id = message_id
        self.parent._drop_queued(self)
        if self.state is HandlerState.READY and self.cnx is cnx and not cnx.closed.is_set():
            # The broker did not disconnect us: nothing to wait for.
            self._seek_waiter.set_result(None)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(
                asyncio.shield(self._seek_waiter), self.ctx.operation_timeout_ms / 1000
            )

    async def get_last_message_id(self) -> tuple[MessageId, MessageId | None]:
        cnx = self.cnx
        if cnx is None:
            raise AlreadyClosed("consumer not connected")
        rid = self.ctx.next_request_id()
        event = await cnx.request(commands.get_last_message_id(self.consumer_id, rid), rid)
        resp = event.base.getLastMessageIdResponse
        last = MessageId._from(_Id.from_proto(resp.last_message_id), topic=self.topic.full_name)
        mark = None
        if resp.HasField("consumer_mark_delete_position"):
            mark = MessageId._from(_Id.from_proto(resp.consumer_mark_delete_position))
        return last, mark

    async def unsubscribe(self) -> None:
        cnx = self.cnx
        if cnx is None:
            raise AlreadyClosed("consumer not connected")
        rid = self.ctx.next_request_id()
        await cnx.request(commands.unsubscribe(self.consumer_id, rid), rid)
        self._stop_reconnecting()
        self._set_state(HandlerState.CLOSING)
        self._detach()
        self._set_state(HandlerState.CLOSED)

    async def close(self) -> None:
        if self.state in (HandlerState.CLOSED, HandlerState.CLOSING):
            return
        was_ready = self.state is HandlerState.READY
        if was_ready and self.config.ack_receipt_enabled:
            with contextlib.suppress(PulsarException):
                await self.flush_acks_with_receipt()
        else:
            self.flush_acks()
        self._set_state(HandlerState.CLOSING)
        self._stop_reconnecting()
        cnx = self.cnx
        if was_ready and cnx is not None and not cnx.closed.is_set():
            rid = self.ctx.next_request_id()
            with contextlib.suppress(PulsarException):
                await cnx.request(commands.close_consumer(self.consumer_id, rid), rid)
        self._detach()
        self._set_state(HandlerState.CLOSED)

    def check_invariants(self) -> None:
        """Permits owed stay below the refill threshold; trackers are consistent."""
        if self.queue_size > 0 and self.state is HandlerState.READY:
            assert self._permits_to_return < max(1, self.queue_size // 2)
        self.acks.check_invariants()
        self.batches.check_invariants()
        self.nacks.check_invariants()
        if self.unacked is not None:
            self.unacked.check_invariants()

    def statistics(self) -> ConsumerStatistics:
        return ConsumerStatistics(
            self.parent._queued_for(self),
            self._permits_to_return,
            self._received,
            len(self.acks),
            len(self.nacks),
            len(self.unacked) if self.unacked is not None else 0,
            self.reconnects,
            self.state.value,
        )


MessageListener = Callable[["Consumer", Message], Any]


class Consumer:
    """The application's consumer (``await client.subscribe(topic, subscription, ...)``)."""

    def __init__(
        self,
        ctx: ClientContext,
        config: ConsumerConfig,
        *,
        topic_label: str,
        resolve_partitions: Callable[[TopicName], Awaitable[int]],
        list_topics: Callable[[str], Awaitable[list[str]]] | None,
        pattern: re.Pattern[str] | None,
        producer_factory: Callable[..., Awaitable[Any]],
        on_close: Callable[[Consumer], None],
        listener: MessageListener | None = None,
        partitions_update_interval_s: float = 0,
    ) -> None:
        self._ctx = ctx
        self._partitions_update_s = partitions_update_interval_s
        self._partitions_task: asyncio.Task[None] | None = None
        self.config = config
        self._topic_label = topic_label
        self._resolve_partitions = resolve_partitions
        self._list_topics = list_topics
        self._pattern = pattern
        self._producer_factory = producer_factory
        self._on_close = on_close
        self._listener = listener
        self._parts: dict[str, PartitionConsumer] = {}
        # Items: a decoded Message, or a batch entry queued undecoded with the index of its
        # next member to hand out ([EntryMembers, next_index]).
        self._queue: collections.deque[tuple[PartitionConsumer, Message | list[Any]]] = (
            collections.deque()
        )
        self._available = asyncio.Event()
        self._closed = False
        self._failure: PulsarException | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._timer_task: asyncio.Task[None] | None = None
        self._discovery_task: asyncio.Task[None] | None = None
        self._listener_task: asyncio.Task[None] | None = None
        self._listener_paused = False
        self._receivers = 0
        self._dlq: Any = None
        self._retry: Any = None
        self._dlq_lock = asyncio.Lock()
        self._topics: list[TopicName] = []

    def __repr__(self) -> str:
        return (
            f"<Consumer {self._topic_label} sub={self.config.subscription_name} "
            f"partitions={len(self._parts)} queued={len(self._queue)}>"
        )

    # ------------------------------------------------------------------ setup

    async def _add_topics(self, topics: list[TopicName], *, record: bool = True) -> None:
        new: list[PartitionConsumer] = []
        plan: list[tuple[TopicName, int]] = []
        for t in topics:
            n = await self._resolve_partitions(t)
            plan.append((t, n))
        total = sum(max(n, 1) for _, n in plan) + len(self._parts)
        qsize = self.config.receiver_queue_size
        if total > 1:
            qsize = min(
                qsize, max(1, self.config.max_total_receiver_queue_size_across_partitions // total)
            )
        for t, n in plan:
            names = [(t.partition(i), i) for i in range(n)] if n > 0 else [(t, t.partition_index)]
            for name, index in names:
                if name.full_name in self._parts:
                    continue
                part = PartitionConsumer(
                    self._ctx, name, self.config, self, partition=index, queue_size=qsize
                )
                self._parts[name.full_name] = part
                new.append(part)
            if record:
                self._topics.append(t)
        results = await asyncio.gather(*(p.start() for p in new), return_exceptions=True)
        errors = [r for r in results if isinstance(r, BaseException)]
        if errors:
            await asyncio.gather(*(p.close() for p in new), return_exceptions=True)
            for p in new:
                self._parts.pop(p.topic.full_name, None)
            raise errors[0]

    async def _start(self, topics: list[TopicName]) -> None:
        await self._add_topics(topics)
        self._timer_task = asyncio.get_running_loop().create_task(self._timers())
        if self._pattern is not None and self.config.pattern_auto_discovery_period > 0:
            self._discovery_task = asyncio.get_running_loop().create_task(self._discover())
        if self._listener is not None:
            self._listener_task = asyncio.get_running_loop().create_task(self._run_listener())
        if self._partitions_update_s > 0:
            self._partitions_task = asyncio.get_running_loop().create_task(self._watch_partitions())

    async def _watch_partitions(self) -> None:
        """Every ``partitions_update_interval``: subscribe to partitions added meanwhile."""
        try:
            while not self._closed:
                await self._ctx.clock.sleep(self._partitions_update_s)
                partitioned = [t for t in self._topics if not t.is_partition]
                if partitioned and not self._closed:
                    with contextlib.suppress(PulsarException):
                        await self._add_topics(partitioned, record=False)
        except asyncio.CancelledError:
            return

    async def _timers(self) -> None:
        cfg = self.config
        candidates = [cfg.ack_group_time_ms or 100, cfg.ack_timeout_tick_ms]
        nack = cfg.negative_ack_redelivery_delay_ms
        if cfg.negative_ack_redelivery_backoff is None:
            candidates.append(max(nack // 3, 10))
        else:
            candidates.append(100)
        interval = max(10, min(candidates)) / 1000
        try:
            while not self._closed:
                await self._ctx.clock.sleep(interval)
                for p in list(self._parts.values()):
                    p.tick()
        except asyncio.CancelledError:
            return

    async def _discover(self) -> None:
        assert self._pattern is not None and self._list_topics is not None
        try:
            while not self._closed:
                await self._ctx.clock.sleep(self.config.pattern_auto_discovery_period)
                try:
                    names = await self._list_topics(self._topic_label)
                except PulsarException:
                    continue
                known = {t.full_name for t in self._topics}
                fresh = [TopicName.parse(n) for n in names if n not in known]
                if fresh:
                    with contextlib.suppress(PulsarException):
                        await self._add_topics(fresh)
        except asyncio.CancelledError:
            return

    # ------------------------------------------------------------------ queue

    def _enqueue(self, part: PartitionConsumer, msgs: list[Message]) -> None:
        part._zq_requested = False
        for m in msgs:
            self._queue.append((part, m))
        self._available.set()

    def _enqueue_members(self, part: PartitionConsumer, members: EntryMembers) -> None:
        part._zq_requested = False
        self._queue.append((part, [members, 0]))
        self._available.set()

    @staticmethod
    def _count(item: Message | list[Any]) -> int:
        if type(item) is list:
            return int(item[0].batch_size - item[1])
        return 1

    def _drop_queued(self, part: PartitionConsumer) -> int:
        dropped = sum(self._count(m) for p, m in self._queue if p is part)
        if dropped:
            self._queue = collections.deque((p, m) for p, m in self._queue if p is not part)
        return dropped

    def _queued_for(self, part: PartitionConsumer) -> int:
        return sum(self._count(m) for p, m in self._queue if p is part)

    def _take(self) -> Message | None:
        queue = self._queue
        if not queue:
            self._available.clear()
            return None
        part, item = queue[0]
        if type(item) is list:
            members, index = item
            msg = members.message(index)
            item[1] = index + 1
            if index + 1 >= members.batch_size:
                queue.popleft()
        else:
            queue.popleft()
            msg = item
        if not queue:
            self._available.clear()
        part.last_dequeued = msg.message_id()
        part.message_processed(1)
        return msg

    def _take_batch(self, max_messages: int) -> MessageBatch | None:
        """Up to ``max_messages`` from the head of the queue, all of one partition: the rest
        of one batch entry (undecoded), or a run of decoded messages."""
        queue = self._queue
        if not queue:
            self._available.clear()
            return None
        part, item = queue[0]
        if type(item) is list:
            members, lo = item
            hi = min(members.batch_size, lo + max_messages)
            if hi >= members.batch_size:
                queue.popleft()
            else:
                item[1] = hi
            batch = MessageBatch(members=members, lo=lo, hi=hi)
            last_id = members.message_id(hi - 1)
            n = hi - lo
        else:
            msgs: list[Message] = []
            while queue and len(msgs) < max_messages:
                p, m = queue[0]
                if p is not part or type(m) is list:
                    break
                queue.popleft()
                msgs.append(m)  # type: ignore[arg-type]
            batch = MessageBatch(msgs)
            last_id = msgs[-1].message_id()
            n = len(msgs)
        if not queue:
            self._available.clear()
        part.last_dequeued = last_id
        part.message_processed(n)
        return batch

    def _spawn(self, coro: Awaitable[Any]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _partition_failed(self, part: PartitionConsumer, exc: PulsarException) -> None:
        self._failure = exc
        self._available.set()

    def _check_open(self) -> None:
        if self._closed:
            raise AlreadyClosed("consumer closed")

    # ------------------------------------------------------------------ receiving

    async def receive(self, timeout_millis: int | None = None) -> Message:
        """The next message; raises ``Timeout`` after ``timeout_millis`` (None = wait)."""
        self._check_open()
        if self._listener is not None:
            raise InvalidConfiguration("receive() cannot be used with a message listener")
        if self._queue:  # fast path: a message is already here
            msg = self._take()
            if msg is not None:
                return await self._with_writer(msg) if self._writer_schemas else msg
        self._receivers += 1
        try:
            msg = await self._receive(timeout_millis)
        finally:
            self._receivers -= 1
        return await self._with_writer(msg) if self._writer_schemas else msg

    @property
    def _writer_schemas(self) -> bool:
        schema = self.config.schema
        return schema is not None and bool(schema.wants_writer)

    async def _with_writer(self, msg: Message) -> Message:
        """Fetch (once per topic and version) the schema that wrote ``msg`` when the
        consumer's schema decodes with it (AvroSchema, AutoConsumeSchema); on failure the
        value is decoded with the consumer's own schema, as the official client does."""
        schema = self.config.schema
        version = msg.schema_version()
        if not version or schema.knows_writer(msg.topic_name(), version):
            return msg
        try:
            (number,) = struct.unpack(">q", version)
            topic = TopicName.parse(msg.topic_name())
            answer = await self._ctx.lookup.get_schema(topic, number)
        except Exception as exc:  # the broker is unreachable, the version is malformed...
            log.warning("schema version of %s not fetched: %s", msg.message_id(), exc)
            return msg
        if answer is not None:
            schema.remember_writer(msg.topic_name(), version, answer.schema)
        return msg

    def _ask_zero_queue(self) -> None:
        if self.config.receiver_queue_size <= 0:
            for p in self._parts.values():
                p.request_one()

    async def _receive(self, timeout_millis: int | None) -> Message:
        if timeout_millis is None:
            while True:
                msg = self._take()
                if msg is not None:
                    return msg
                self._raise_failure()
                self._ask_zero_queue()
                await self._available.wait()
                self._check_open()
        deadline = self._ctx.clock.monotonic_ms() + timeout_millis
        while True:
            msg = self._take()
            if msg is not None:
                return msg
            self._raise_failure()
            left = deadline - self._ctx.clock.monotonic_ms()
            if left <= 0:
                raise Timeout("receive timed out")
            self._ask_zero_queue()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._available.wait(), left / 1000)
            self._check_open()

    async def receive_batch(
        self, max_messages: int = 1000, timeout_millis: int | None = None
    ) -> MessageBatch:
        """The messages already received, up to ``max_messages`` (waits for the first one;
        raises ``Timeout`` after ``timeout_millis``, None = wait).

        For throughput: a batch entry from a batching producer comes back whole and
        undecoded (``MessageBatch.payloads()`` slices the payloads without making
        ``Message`` objects). All messages of one call come from one partition."""
        self._check_open()
        if self._listener is not None:
            raise InvalidConfiguration("receive_batch() cannot be used with a message listener")
        if max_messages <= 0:
            raise InvalidConfiguration("max_messages must be > 0")
        batch = self._take_batch(max_messages)
        if batch is not None:
            return batch
        deadline = (
            None if timeout_millis is None else self._ctx.clock.monotonic_ms() + timeout_millis
        )
        self._receivers += 1
        try:
            while True:
                self._raise_failure()
                self._ask_zero_queue()
                if deadline is None:
                    await self._available.wait()
                else:
                    left = deadline - self._ctx.clock.monotonic_ms()
                    if left <= 0:
                        raise Timeout("receive timed out")
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._available.wait(), left / 1000)
                self._check_open()
                batch = self._take_batch(max_messages)
                if batch is not None:
                    return batch
        finally:
            self._receivers -= 1

    async def batch_receive(self) -> list[Message]:
        """Messages up to the ``batch_receive_policy`` limits: returns as soon as the count or
        byte limit is reached, else when its timeout expires (possibly with none)."""
        self._check_open()
        if self._listener is not None:
            raise InvalidConfiguration("batch_receive() cannot be used with a message listener")
        policy = self.config.batch_receive_policy
        max_n = policy.max_num_message if policy.max_num_message > 0 else 1 << 62
        max_bytes = policy.max_num_bytes if policy.max_num_bytes > 0 else 1 << 62
        out: list[Message] = []
        size = 0
        deadline = self._ctx.clock.monotonic_ms() + max(policy.timeout_ms, 0)
        self._receivers += 1
        try:
            while len(out) < max_n and size < max_bytes:
                msg = self._take()
                if msg is not None:
                    out.append(await self._with_writer(msg) if self._writer_schemas else msg)
                    size += len(msg.data())
                    continue
                self._raise_failure()
                left = deadline - self._ctx.clock.monotonic_ms()
                if policy.timeout_ms <= 0 and out:
                    break
                if policy.timeout_ms > 0 and left <= 0:
                    break
                self._ask_zero_queue()
                try:
                    await asyncio.wait_for(
                        self._available.wait(), left / 1000 if policy.timeout_ms > 0 else None
                    )
                except TimeoutError:
                    break
                self._check_open()
        finally:
            self._receivers -= 1
        return out

    def _raise_failure(self) -> None:
        if self._failure is not None and all(
            p.state in (HandlerState.FAILED, HandlerState.CLOSED) for p in self._parts.values()
        ):
            raise self._failure

    def __aiter__(self) -> AsyncIterator[Message]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[Message]:
        while not self._closed:
            try:
                yield await self.receive()
            except AlreadyClosed:
                return

    async def _run_listener(self) -> None:
        assert self._listener is not None
        try:
            while not self._closed:
                if self._listener_paused:
                    await self._ctx.clock.sleep(0.01)
                    continue
                msg = self._take()
                if msg is None:
                    await self._available.wait()
                    continue
                if self._writer_schemas:
                    msg = await self._with_writer(msg)
                try:
                    result = self._listener(self, msg)
                    if asyncio.iscoroutine(result):
                        await result
                except Exception:
                    log.exception("message listener failed")
        except asyncio.CancelledError:
            return

    def pause_message_listener(self) -> None:
        self._listener_paused = True

    def resume_message_listener(self) -> None:
        self._listener_paused = False

    # ------------------------------------------------------------------ acks

    def _part_for(self, target: Message | MessageId) -> tuple[PartitionConsumer, MessageId, int]:
        if isinstance(target, Message):
            part = target._consumer_ref
            mid = target.message_id()
            if isinstance(part, PartitionConsumer) and part.parent is self:
                return part, mid, target.redelivery_count()
            target = mid
        topic = target.topic_name()
        if topic is not None and topic in self._parts:
            return self._parts[topic], target, 0
        if len(self._parts) == 1:
            return next(iter(self._parts.values())), target, 0
        for p in self._parts.values():  # by partition index
            if p.partition == target.partition() and p.partition >= 0:
                return p, target, 0
        raise InvalidConfiguration(f"cannot tell which topic {target} belongs to")

    async def acknowledge(self, message: Message | MessageId | MessageBatch) -> None:
        """Acknowledge one message, or every message of a ``MessageBatch``. Grouped and sent
        within ``ack_group_time_ms``; with ``ack_receipt_enabled`` this waits until the
        broker confirmed the ack."""
        if self._closed:
            raise AlreadyClosed("consumer closed")
        if type(message) is MessageBatch:
            await self._acknowledge_batch(message)
            return
        assert not isinstance(message, MessageBatch)
        if type(message) is Message and isinstance(message._consumer_ref, PartitionConsumer):
            part = message._consumer_ref  # fast path: the message knows its partition
            if part.parent is not self:
                part, mid, _ = self._part_for(message)
            else:
                mid = message._id
        else:
            part, mid, _ = self._part_for(message)
        part.acknowledge(mid)
        if self.config.ack_receipt_enabled:
            await part.flush_acks_with_receipt()

    async def _acknowledge_batch(self, batch: MessageBatch) -> None:
        members = batch._members
        if members is not None:
            part = members.consumer_ref
            if not isinstance(part, PartitionConsumer) or part.parent is not self:
                raise InvalidConfiguration("the batch was not received by this consumer")
            part.acknowledge_members(members, batch._lo, batch._hi)
            if self.config.ack_receipt_enabled:
                await part.flush_acks_with_receipt()
            return
        for m in batch:
            await self.acknowledge(m)

    async def acknowledge_cumulative(self, message: Message | MessageId) -> None:
        self._check_open()
        part, mid, _ = self._part_for(message)
        part.acknowledge_cumulative(mid)
        if self.config.ack_receipt_enabled:
            await part.flush_acks_with_receipt()

    async def negative_acknowledge(self, message: Message | MessageId) -> None:
        self._check_open()
        part, mid, count = self._part_for(message)
        part.negative_acknowledge(mid, count)

    async def redeliver_unacknowledged_messages(self) -> None:
        for p in self._parts.values():
            cnx = p.cnx
            if cnx is not None:
                cleared = self._drop_queued(p)
                with contextlib.suppress(PulsarException):
                    cnx.send_command(commands.redeliver_unacknowledged_messages(p.consumer_id))
                if cleared:
                    p.message_processed(cleared)

    async def flush_acknowledgements(self) -> None:
        """Send every grouped ack now (and wait for receipts when they are enabled)."""
        for p in self._parts.values():
            if self.config.ack_receipt_enabled:
                await p.flush_acks_with_receipt()
            else:
                p.flush_acks()

    # ------------------------------------------------------------------ DLQ / retry

    def _dlq_topic(self) -> str:
        policy = self.config.dead_letter_policy
        assert policy is not None
        base = self._topics[0].full_name if self._topics else self._topic_label
        return policy.dead_letter_topic or f"{base}-{self.config.subscription_name}-DLQ"

    def _retry_topic(self) -> str:
        policy = self.config.dead_letter_policy
        base = self._topics[0].full_name if self._topics else self._topic_label
        if policy is not None and policy.retry_letter_topic:
            return policy.retry_letter_topic
        return f"{base}-{self.config.subscription_name}-RETRY"

    async def _dlq_producer(self) -> Any:
        async with self._dlq_lock:
            if self._dlq is None:
                policy = self.config.dead_letter_policy
                assert policy is not None
                self._dlq = await self._producer_factory(
                    self._dlq_topic(),
                    batching_enabled=False,
                    initial_subscription_name=policy.initial_subscription_name,
                )
            return self._dlq

    async def reconsume_later(
        self,
        message: Message,
        delay_ms: int,
        properties: Mapping[str, str] | None = None,
    ) -> None:
        """Retry letter: publish a copy to the retry topic, delivered after ``delay_ms``, and
        ack the original; after ``max_redeliver_count`` retries it goes to the DLQ instead."""
        self._check_open()
        if not self.config.retry_enable:
            raise InvalidConfiguration("reconsume_later needs retry_enable=True")
        policy = self.config.dead_letter_policy
        max_retries = policy.max_redeliver_count if policy is not None else 16
        props = message.properties()
        props.update(properties or {})
        times = int(props.get("RECONSUMETIMES", "0")) + 1
        mid = message.message_id()
        props.setdefault("REAL_TOPIC", message.topic_name())
        props.setdefault(
            "ORIGIN_MESSAGE_ID",
            f"({mid.ledger_id()},{mid.entry_id()},{mid.partition()},{mid.batch_index()})",
        )
        props["RECONSUMETIMES"] = str(times)
        props["DELAY_TIME"] = str(int(delay_ms))
        key = message.partition_key() if message.has_key() else None
        if times > max_retries:
            if policy is None:
                raise InvalidConfiguration("retries exhausted and no dead letter policy")
            producer = await self._dlq_producer()
            await producer.send(message.data(), properties=props, partition_key=key)
        else:
            async with self._dlq_lock:
                if self._retry is None:
                    self._retry = await self._producer_factory(
                        self._retry_topic(), batching_enabled=False
                    )
            await self._retry.send(
                message.data(), properties=props, partition_key=key, deliver_after=int(delay_ms)
            )
        await self.acknowledge(message)

    # ------------------------------------------------------------------ seek & co

    async def seek(self, target: MessageId | int) -> None:
        """Seek to a message id, or (an int) to a publish time in ms since the epoch."""
        self._check_open()
        parts = list(self._parts.values())
        if isinstance(target, MessageId):
            if target in (MessageId.earliest, MessageId.latest) or len(parts) == 1:
                await asyncio.gather(
                    *(p.seek(message_id=target, publish_time_ms=None) for p in parts)
                )
            else:
                part, mid, _ = self._part_for(target)
                await part.seek(message_id=mid, publish_time_ms=None)
        else:
            await asyncio.gather(
                *(p.seek(message_id=None, publish_time_ms=int(target)) for p in parts)
            )

    async def get_last_message_id(self) -> MessageId:
        parts = list(self._parts.values())
        if len(parts) != 1:
            raise InvalidConfiguration("get_last_message_id needs a single-topic consumer")
        last, _ = await parts[0].get_last_message_id()
        return last

    async def unsubscribe(self) -> None:
        self._check_open()
        await asyncio.gather(*(p.unsubscribe() for p in self._parts.values()))
        await self.close()

    def topic(self) -> str:
        return self._topic_label

    def subscription_name(self) -> str:
        return self.config.subscription_name

    def consumer_name(self) -> str:
        return next(iter(self._parts.values())).consumer_name if self._parts else ""

    def is_connected(self) -> bool:
        return bool(self._parts) and all(p.is_connected for p in self._parts.values())

    def has_reached_end_of_topic(self) -> bool:
        """Java's ``hasReachedEndOfTopic``: every partition is terminated and everything in
        it acknowledged on this subscription (the broker's REACHED_END_OF_TOPIC)."""
        return bool(self._parts) and all(p.reached_end_of_topic for p in self._parts.values())

    @property
    def partitions(self) -> list[PartitionConsumer]:
        return list(self._parts.values())

    def statistics(self) -> list[ConsumerStatistics]:
        return [p.statistics() for p in self._parts.values()]

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._available.set()
        for t in (
            self._timer_task,
            self._discovery_task,
            self._listener_task,
            self._partitions_task,
        ):
            if t is not None:
                t.cancel()
        await asyncio.gather(*(p.close() for p in self._parts.values()), return_exceptions=True)
        for t in list(self._tasks):
            t.cancel()
        for prod in (self._dlq, self._retry):
            if prod is not None:
                with contextlib.suppress(Exception):
                    await prod.close()
        self._queue.clear()
        self._on_close(self)


__all__ = ["Consumer", "ConsumerConfig", "MessageListener", "PartitionConsumer"]
