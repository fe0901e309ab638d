"""Producers: per-partition senders and the public ``Producer`` with routing.

Owns: ``PartitionProducer`` (one topic or partition: sequence ids, the bounded pending queue of
SEND frames awaiting receipts, the batching delay timer, chunking, compression, send timeout,
re-sending everything pending after a reconnection) and ``Producer`` (the application's
handle: routes each message to a partition, by key hash (Murmur3_32, as the official client's
``Murmur3_32Hash`` scheme), round robin, a single partition, or a custom router).

Invariants: receipts complete pending sends strictly in order (a receipt for a sequence id
below the head is stale and ignored; above the head means the broker lost something and the
connection is dropped, as the C++ client does); the pending count (accumulated + in flight)
never exceeds ``max_pending_messages``: ``send_async`` then waits (``block_if_queue_full``) or
raises ``ProducerQueueIsFull``; every send future completes exactly once.

Must not know: how the broker stores entries.
"""

from __future__ import annotations

import asyncio
import collections
import datetime
import logging
import struct
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from magnetar.client._accumulator import Batch, BatchAccumulator
from magnetar.client._compression import compress
from magnetar.client._config import (
    BatchingType,
    CompressionType,
    PartitionsRoutingMode,
    ProducerAccessMode,
)
from magnetar.client._connection import ClientConnection
from magnetar.client._errors import (
    AlreadyClosed,
    ConnectError,
    InvalidConfiguration,
    MessageTooBig,
    ProducerQueueIsFull,
    PulsarException,
    Timeout,
    for_code,
)
from magnetar.client._handler import ClientContext, Handler, HandlerState
from magnetar.client._message import Message, MessageId
from magnetar.client._routing import HashingScheme, hash_key
from magnetar.client._wire import SimpleSendEncoder
from magnetar.client.protocol import (
    CommandType,
    TopicName,
    batch_metadata,
    commands,
    encode_headers_and_payload,
    encode_payload_command,
    encode_plain_batch,
    pb,
)
from magnetar.client.protocol import MessageId as _Id

log = logging.getLogger(__name__)


_FAIL_ONE_ERRORS = frozenset({9, 22})
"""SEND_ERROR codes that fail only the message they name (ChecksumError, NotAllowedError)."""


@dataclass(frozen=True, slots=True)
class ProducerConfig:
    producer_name: str | None = None
    initial_sequence_id: int | None = None
    send_timeout_ms: int = 30_000
    compression_type: CompressionType = CompressionType.NONE
    max_pending_messages: int = 1000
    max_pending_messages_across_partitions: int = 50_000
    block_if_queue_full: bool = False
    batching_enabled: bool = False
    batching_max_messages: int = 1000
    batching_max_allowed_size_in_bytes: int = 128 * 1024
    batching_max_publish_delay_ms: int = 10
    batching_type: BatchingType = BatchingType.Default
    chunking_enabled: bool = False
    chunk_max_message_size: int | None = None
    message_routing_mode: PartitionsRoutingMode = PartitionsRoutingMode.RoundRobinDistribution
    message_router: Callable[[Message, int], int] | None = None
    properties: Mapping[str, str] = field(default_factory=dict)
    access_mode: ProducerAccessMode = ProducerAccessMode.Shared
    initial_subscription_name: str | None = None
    hashing_scheme: HashingScheme = HashingScheme.BoostHash
    schema: Any = None
    """A ``magnetar.client.schema.Schema``: sent on PRODUCER, encodes each value sent."""

    def __post_init__(self) -> None:
        if self.chunking_enabled and self.batching_enabled:
            raise InvalidConfiguration("chunking cannot be combined with batching")
        if self.max_pending_messages <= 0:
            raise InvalidConfiguration("max_pending_messages must be > 0")


@dataclass(slots=True)
class OutgoingMessage:
    """One message from ``send``: its metadata (as a batch member) and payload."""

    smm: pb.SingleMessageMetadata
    payload: bytes
    future: asyncio.Future[MessageId]
    deliver_at_ms: int | None = None
    replicate_to: tuple[str, ...] = ()
    explicit_sequence_id: bool = False
    plain: bool = False  # no properties, keys, event time or replication list

    @property
    def key(self) -> str | bytes | None:
        if self.smm.HasField("ordering_key"):
            return self.smm.ordering_key
        if self.smm.HasField("partition_key"):
            return self.smm.partition_key
        return None


Segment = tuple[str, int, int, int, int]
"""One batch entry of a ``send_batch`` call: (topic, partition, ledger, entry, messages)."""


class SentMessageIds(Sequence[MessageId]):
    """The ids of the messages of one ``send_batch`` call, in order (made on access)."""

    __slots__ = ("_segments", "_size")

    def __init__(self, segments: list[Segment]) -> None:
        self._segments = segments
        self._size = sum(s[4] for s in segments)

    def __len__(self) -> int:
        return self._size

    def __getitem__(self, index: int) -> MessageId:  # type: ignore[override]
        if index < 0:
            index += self._size
        if not 0 <= index < self._size:
            raise IndexError("SentMessageIds index out of range")
        for topic, partition, ledger, entry, n in self._segments:
            if index < n:
                return MessageId(partition, ledger, entry, index, topic=topic, batch_size=n)
            index -= n
        raise IndexError(index)  # pragma: no cover - sizes add up

    def __iter__(self) -> Iterator[MessageId]:
        for topic, partition, ledger, entry, n in self._segments:
            for i in range(n):
                yield MessageId(partition, ledger, entry, i, topic=topic, batch_size=n)

    def entries(self) -> list[Segment]:
        """``(topic, partition, ledger_id, entry_id, messages)`` of each batch entry."""
        return list(self._segments)

    def __repr__(self) -> str:
        return f"<SentMessageIds {self._size} in {len(self._segments)} entries>"


class SendGroup:
    """One ``send_batch`` call: its future completes when every entry of it is receipted
    (``ops`` counts entries not yet receipted, plus one while entries are being submitted)."""

    __slots__ = ("future", "ops", "segments")

    def __init__(self, future: asyncio.Future[SentMessageIds]) -> None:
        self.future = future
        self.ops = 0
        self.segments: list[Segment] = []  # in submission order; receipts fill them in

    def add_entry(self) -> int:
        """An entry is submitted: its index among the segments."""
        self.ops += 1
        self.segments.append(("", -1, -1, -1, 0))
        return len(self.segments) - 1

    def receipted(self, index: int, segment: Segment) -> None:
        self.segments[index] = segment
        self.ops -= 1
        if self.ops == 0 and not self.future.done():
            self.future.set_result(SentMessageIds(self.segments))

    def fail(self, exc: BaseException) -> None:
        _fail(self.future, exc)


@dataclass(slots=True)
class OpSend:
    """A SEND frame in flight (one message, one batch, or one chunk)."""

    sequence_id: int
    frame: bytes
    futures: list[asyncio.Future[MessageId]]
    num_messages: int
    created_ms: float
    is_batch: bool = False
    chunk_id: int = -1
    num_chunks: int = 0
    chunk_ids: list[_Id] | None = None
    group: SendGroup | None = None
    group_index: int = 0

    def fail(self, exc: BaseException) -> int:
        """Fail its sends; returns how many messages leave the pending count."""
        for fut in self.futures:
            _fail(fut, exc)
        if self.group is not None:
            self.group.fail(exc)
        return self.num_messages


@dataclass(frozen=True, slots=True)
class ProducerStatistics:
    pending_messages: int
    in_flight_sends: int
    accumulated_messages: int
    messages_sent: int
    receipts: int
    reconnects: int
    state: str


class PartitionProducer(Handler):
    kind = "producer"

    def __init__(
        self,
        ctx: ClientContext,
        topic: TopicName,
        config: ProducerConfig,
        partition: int,
        *,
        pending_limit: int,
    ) -> None:
        super().__init__(ctx, topic)
        self.config = config
        self.partition = partition
        self.producer_id = ctx.next_producer_id()
        self.producer_name = config.producer_name
        self._user_named = config.producer_name is not None
        self._epoch = 0
        self.last_sequence_id = (
            -1 if config.initial_sequence_id is None else (config.initial_sequence_id)
        )
        self._next_sequence_id = self.last_sequence_id + 1
        self._sequence_known = config.initial_sequence_id is not None
        self.schema_version = b""
        self.topic_epoch: int | None = None
        self._pending: collections.deque[OpSend] = collections.deque()
        self._pending_limit = pending_limit
        self._pending_count = 0  # messages accumulated or in flight
        # (future, slots): each waiter is granted its slots all at once, in FIFO order
        self._waiters: collections.deque[tuple[asyncio.Future[None], int]] = collections.deque()
        self._accumulator: BatchAccumulator[OutgoingMessage] | None = None
        if config.batching_enabled:
            self._accumulator = BatchAccumulator(
                config.batching_max_messages,
                config.batching_max_allowed_size_in_bytes,
                key_based=config.batching_type == BatchingType.KeyBased,
            )
        self._batch_timer: Any = None
        self._timeout_task: asyncio.Task[None] | None = None
        self._sent = 0
        self._receipts = 0
        self._encoder: SimpleSendEncoder | None = None
        self._encoder_name = ""
        self._topic_name = topic.full_name  # a property that formats a string on each call

    def __repr__(self) -> str:
        return (
            f"<PartitionProducer {self.topic} id={self.producer_id} {self.state.value} "
            f"pending={self._pending_count}>"
        )

    # ------------------------------------------------------------------ connection

    async def _establish(self, cnx: ClientConnection) -> None:
        cnx.producers[self.producer_id] = self
        rid = self.ctx.next_request_id()
        cmd = commands.producer(
            self.topic.full_name,
            self.producer_id,
            rid,
            producer_name=self.producer_name,
            epoch=self._epoch,
            access_mode=int(self.config.access_mode),
            properties=self.config.properties,
            initial_subscription_name=self.config.initial_subscription_name,
        )
        cmd.producer.user_provided_producer_name = self._user_named
        info = self.config.schema.schema_info() if self.config.schema is not None else None
        if info is not None:
            cmd.producer.schema.CopyFrom(info)
        if self.topic_epoch is not None:
            cmd.producer.topic_epoch = self.topic_epoch
        self._epoch += 1
        try:
            event = await cnx.request(cmd, rid)
            while True:
                ok = event.base.producer_success
                if not ok.HasField("producer_ready") or ok.producer_ready:
                    break
                # WaitForExclusive: a second PRODUCER_SUCCESS (same request id) follows.
                event = await cnx.expect(rid)
        except BaseException as exc:
            cnx.producers.pop(self.producer_id, None)
            if isinstance(exc, Timeout) and not cnx.closed.is_set():
                try:  # in case the broker created it after our timeout (C++ does the same)
                    cnx.send_command(commands.close_producer(self.producer_id, rid))
                except PulsarException:
                    pass
            raise
        ok = event.base.producer_success
        self.producer_name = ok.producer_name
        if ok.schema_version:
            self.schema_version = ok.schema_version
        if ok.HasField("topic_epoch"):
            self.topic_epoch = ok.topic_epoch
        if not self._sequence_known:
            self.last_sequence_id = ok.last_sequence_id if ok.HasField("last_sequence_id") else -1
            self._next_sequence_id = self.last_sequence_id + 1
            self._sequence_known = True
        self.cnx = cnx

    def _on_ready(self) -> None:
        cnx = self.cnx
        assert cnx is not None
        for op in self._pending:  # resend everything awaiting a receipt, in order
            cnx.send_raw(op.frame)  # producer id and sequence ids are unchanged
        if self._timeout_task is None and self.config.send_timeout_ms > 0:
            self._timeout_task = asyncio.get_running_loop().create_task(self._timeout_loop())

    def _detach(self) -> None:
        if self.cnx is not None:
            self.cnx.producers.pop(self.producer_id, None)
        self.cnx = None

    def connection_closed(self, cnx: ClientConnection) -> None:
        if cnx is self.cnx:
            self.connection_lost()

    def on_closed_by_broker(self) -> None:
        self.connection_lost()

    def _on_fatal(self, exc: PulsarException) -> None:
        self._fail_all(exc)
        self._fail_waiters(exc)

    # ------------------------------------------------------------------ sending

    def _check_open(self) -> None:
        state = self.state
        if state is HandlerState.READY or state is HandlerState.CONNECTING:
            return
        if state is HandlerState.FAILED:
            raise self.failure or AlreadyClosed("producer failed")
        if state is not HandlerState.INITIAL:
            raise AlreadyClosed("producer closed")

    def try_acquire_slot(self) -> bool:
        """Reserve room without waiting when there is some (the common case)."""
        if (
            self._pending_count < self._pending_limit
            and not self._waiters
            and self.state is HandlerState.READY
        ):
            self._pending_count += 1
            return True
        return False

    async def acquire_slot(self, *, block: bool, n: int = 1) -> None:
        """Reserve room for ``n`` messages in the pending queue (FIFO among waiters);
        ``n`` is at most the pending limit."""
        self._check_open()
        assert 0 < n <= self._pending_limit
        if self._pending_count + n <= self._pending_limit and not self._waiters:
            self._pending_count += n
            return
        if not block:
            raise ProducerQueueIsFull(f"{self._pending_count} messages pending")
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append((fut, n))
        try:
            await fut  # resolved by _release once the slots were reserved for us
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled() and fut.exception() is None:
                self._release(n)  # granted but abandoned: give the slots back
            raise

    def _release(self, n: int) -> None:
        self._pending_count -= n
        assert self._pending_count >= 0
        waiters = self._waiters
        while waiters:
            waiter, want = waiters[0]
            if waiter.done():
                waiters.popleft()
                continue
            if self._pending_count + want > self._pending_limit:
                break
            waiters.popleft()
            self._pending_count += want
            waiter.set_result(None)

    def _fail_waiters(self, exc: BaseException) -> None:
        while self._waiters:
            waiter, _ = self._waiters.popleft()
            if not waiter.done():
                waiter.set_exception(exc)

    def submit(self, msg: OutgoingMessage) -> None:
        """Take a message whose slot was acquired: batch it or send it now (synchronous)."""
        self._check_open()
        if not msg.explicit_sequence_id:
            msg.smm.sequence_id = self._next_sequence_id
            self._next_sequence_id += 1
        else:
            self._next_sequence_id = max(self._next_sequence_id, msg.smm.sequence_id + 1)
        acc = self._accumulator
        if acc is None or msg.deliver_at_ms is not None:
            if acc is not None and len(acc):
                self._send_batches(acc.drain())
            self._send_single(msg)
            return
        key = msg.key
        was_empty = len(acc) == 0
        self._send_batches(acc.add(msg, len(msg.payload), key))
        if len(acc) and (was_empty or self._batch_timer is None):
            self._arm_batch_timer()

    def _arm_batch_timer(self) -> None:
        if self._batch_timer is not None:
            return
        delay = self.config.batching_max_publish_delay_ms / 1000
        self._batch_timer = self.ctx.clock.call_later(delay, self._on_batch_timer)

    def _on_batch_timer(self) -> None:
        self._batch_timer = None
        if (
            self._accumulator is not None
            and len(self._accumulator)
            and self.state
            not in (
                HandlerState.CLOSED,
                HandlerState.FAILED,
            )
        ):
            self._send_batches(self._accumulator.drain())

    def flush_batches(self) -> None:
        if self._batch_timer is not None:
            self._batch_timer.cancel()
            self._batch_timer = None
        if self._accumulator is not None and len(self._accumulator):
            self._send_batches(self._accumulator.drain())

    def submit_plain_batch(self, payloads: Sequence[bytes], group: SendGroup) -> None:
        """Send ``payloads`` (slots acquired for all of them) as batch entries of plain
        messages, after anything accumulated before them (synchronous). On an exception the
        slots of the payloads not sent are released."""
        cfg = self.config
        max_n = cfg.batching_max_messages
        max_bytes = cfg.batching_max_allowed_size_in_bytes
        i = 0
        total = len(payloads)
        try:
            self._check_open()
            acc = self._accumulator
            if acc is not None and len(acc):
                self.flush_batches()
            while i < total:
                j = i
                size = 0
                while j < total and j - i < max_n:
                    size += len(payloads[j])
                    if size > max_bytes and j > i:
                        break
                    j += 1
                self._send_plain_batch(payloads[i:j], group)
                i = j
        except BaseException:
            self._release(total - i)
            raise

    def _send_plain_batch(self, payloads: Sequence[bytes], group: SendGroup) -> None:
        n = len(payloads)
        first = self._next_sequence_id
        self._next_sequence_id += n
        now = self.ctx.clock.now_ms()
        md = pb.MessageMetadata(
            producer_name=self.producer_name or "",
            sequence_id=first,
            publish_time=now,
            num_messages_in_batch=n,
        )
        cmd = commands.send(self.producer_id, first, num_messages=n)
        if n > 1:
            md.highest_sequence_id = first + n - 1
            cmd.send.highest_sequence_id = first + n - 1
        payload = self._finish_metadata(md, encode_plain_batch(payloads, first))
        frame = encode_payload_command(cmd, encode_headers_and_payload(md, payload))
        if len(frame) > self._max_frame():
            group.fail(MessageTooBig(f"batch of {len(frame)} bytes exceeds the maximum"))
            self._release(n)
            return
        index = group.add_entry()
        self._enqueue(
            OpSend(
                first,
                frame,
                [],
                n,
                self.ctx.clock.monotonic_ms(),
                is_batch=True,
                group=group,
                group_index=index,
            )
        )

    def _simple_encoder(self) -> SimpleSendEncoder:
        name = self.producer_name or ""
        if name != self._encoder_name or self._encoder is None:
            self._encoder_name = name
            self._encoder = SimpleSendEncoder(self.producer_id, name.encode())
        return self._encoder

    def _base_metadata(self, sequence_id: int) -> pb.MessageMetadata:
        return pb.MessageMetadata(
            producer_name=self.producer_name or "",
            sequence_id=sequence_id,
            publish_time=self.ctx.clock.now_ms(),
        )

    def _finish_metadata(self, md: pb.MessageMetadata, payload: bytes) -> bytes:
        if self.schema_version:
            md.schema_version = self.schema_version
        kind = self.config.compression_type
        if kind != CompressionType.NONE:
            md.compression = int(kind)  # type: ignore[assignment]
            md.uncompressed_size = len(payload)
            return compress(kind, payload)
        return payload

    def _send_batches(self, batches: list[Batch[OutgoingMessage]]) -> None:
        for batch in batches:
            msgs = batch.items
            first = msgs[0].smm.sequence_id
            md = batch_metadata(
                self.producer_name or "", first, self.ctx.clock.now_ms(), [m.smm for m in msgs]
            )
            if msgs[-1].smm.sequence_id != first:
                md.highest_sequence_id = msgs[-1].smm.sequence_id
            raw = _build_batch(msgs)
            payload = self._finish_metadata(md, raw)
            if msgs[0].replicate_to:
                md.replicate_to.extend(msgs[0].replicate_to)
            cmd = commands.send(self.producer_id, first, num_messages=len(msgs))
            if md.HasField("highest_sequence_id"):
                cmd.send.highest_sequence_id = md.highest_sequence_id
            frame = encode_payload_command(cmd, encode_headers_and_payload(md, payload))
            if len(frame) > self._max_frame():
                exc = MessageTooBig(f"batch of {len(frame)} bytes exceeds the maximum")
                for m in msgs:
                    _fail(m.future, exc)
                self._release(len(msgs))
                continue
            self._enqueue(
                OpSend(
                    first,
                    frame,
                    [m.future for m in msgs],
                    len(msgs),
                    self.ctx.clock.monotonic_ms(),
                    is_batch=True,
                )
            )

    def _max_message_size(self) -> int:
        if self.cnx is not None:
            return self.cnx.max_message_size
        return 5 * 1024 * 1024

    def _max_frame(self) -> int:
        return self._max_message_size() + 10 * 1024

    def _send_single(self, msg: OutgoingMessage) -> None:
        smm = msg.smm
        seq = smm.sequence_id
        if (
            msg.plain
            and msg.deliver_at_ms is None
            and not self.schema_version
            and self.config.compression_type == CompressionType.NONE
        ):
            # Hot path: no protobuf objects for a plain message (same bytes, see _wire).
            encoder = self._simple_encoder()
            md_bytes = encoder.metadata(seq, self.ctx.clock.now_ms())
            size = len(md_bytes) + len(msg.payload)
            max_size = self._max_message_size()
            if size <= min(self.config.chunk_max_message_size or max_size, max_size):
                frame = encoder.frame(seq, md_bytes, msg.payload)
                self._enqueue(OpSend(seq, frame, [msg.future], 1, self.ctx.clock.monotonic_ms()))
                return
        md = self._base_metadata(seq)
        md.properties.extend(smm.properties)
        if smm.HasField("partition_key"):
            md.partition_key = smm.partition_key
        if smm.HasField("ordering_key"):
            md.ordering_key = smm.ordering_key
        if smm.event_time:
            md.event_time = smm.event_time
        if msg.deliver_at_ms is not None:
            md.deliver_at_time = msg.deliver_at_ms
        if msg.replicate_to:
            md.replicate_to.extend(msg.replicate_to)
        payload = self._finish_metadata(md, msg.payload)
        max_size = self.config.chunk_max_message_size or self._max_message_size()
        md_size = md.ByteSize()
        if md_size + len(payload) <= min(max_size, self._max_message_size()):
            cmd = commands.send(self.producer_id, seq)
            frame = encode_payload_command(cmd, encode_headers_and_payload(md, payload))
            self._enqueue(OpSend(seq, frame, [msg.future], 1, self.ctx.clock.monotonic_ms()))
            return
        if not self.config.chunking_enabled:
            _fail(msg.future, MessageTooBig(f"message of {len(payload)} bytes is too big"))
            self._release(1)
            return
        # Chunking: same sequence id for every chunk, one receipt each (reference §3.6).
        chunk_payload = max(1, min(max_size, self._max_message_size()) - md_size - 64)
        total = len(payload)
        num_chunks = (total + chunk_payload - 1) // chunk_payload
        uuid = f"{self.producer_name}-{seq}"
        chunk_ids: list[_Id] = []
        now = self.ctx.clock.monotonic_ms()
        for i in range(num_chunks):
            cmd_md = pb.MessageMetadata()
            cmd_md.CopyFrom(md)
            cmd_md.uuid = uuid
            cmd_md.chunk_id = i
            cmd_md.num_chunks_from_msg = num_chunks
            cmd_md.total_chunk_msg_size = total
            part = payload[i * chunk_payload : (i + 1) * chunk_payload]
            cmd = commands.send(self.producer_id, seq, is_chunk=True)
            frame = encode_payload_command(cmd, encode_headers_and_payload(cmd_md, part))
            last = i == num_chunks - 1
            self._enqueue(
                OpSend(
                    seq,
                    frame,
                    [msg.future] if last else [],
                    1 if last else 0,
                    now,
                    chunk_id=i,
                    num_chunks=num_chunks,
                    chunk_ids=chunk_ids,
                )
            )

    def submit_entry(
        self,
        headers_and_payload: bytes,
        sequence_id: int,
        num_messages: int,
        is_chunk: bool,
        future: asyncio.Future[MessageId],
    ) -> None:
        """Send an encoded entry (its slot acquired) under ``sequence_id``, after anything
        accumulated before it (synchronous). Sequence ids increase over what is in flight
        (receipts are matched in order); below the broker's last one is allowed: a resend
        the broker recognises as a duplicate."""
        self._check_open()
        self.flush_batches()
        if self._pending and sequence_id <= self._pending[-1].sequence_id:
            raise ValueError(
                f"sequence id {sequence_id} is not above the last one in flight, "
                f"{self._pending[-1].sequence_id}"
            )
        self._next_sequence_id = max(self._next_sequence_id, sequence_id + 1)
        cmd = commands.send(
            self.producer_id, sequence_id, num_messages=num_messages, is_chunk=is_chunk
        )
        frame = encode_payload_command(cmd, headers_and_payload)
        if len(frame) > self._max_frame():
            _fail(future, MessageTooBig(f"entry of {len(frame)} bytes exceeds the maximum"))
            self._release(1)
            return
        self._enqueue(OpSend(sequence_id, frame, [future], 1, self.ctx.clock.monotonic_ms()))

    def _enqueue(self, op: OpSend) -> None:
        self._pending.append(op)
        self._sent += op.num_messages
        cnx = self.cnx
        if cnx is not None and self.state is HandlerState.READY:
            try:
                cnx.send_raw(op.frame)
            except PulsarException:
                pass  # the connection is going away; the op is resent after reconnection

    def socket_backlogged(self) -> bool:
        cnx = self.cnx
        return cnx is not None and cnx.write_buffer_size() > 1024 * 1024

    async def drain_socket(self) -> None:
        if self.cnx is not None:
            await self.cnx.drain()

    # ------------------------------------------------------------------ receipts

    def on_send_receipt(self, cmd: pb.CommandSendReceipt) -> None:
        seq = cmd.sequence_id
        if not self._pending:
            log.debug("receipt for %d with nothing pending", seq)
            return
        head = self._pending[0]
        if seq < head.sequence_id:
            return  # a message that already timed out
        if seq > head.sequence_id:
            log.warning("receipt %d ahead of pending %d: reconnecting", seq, head.sequence_id)
            if self.cnx is not None:
                asyncio.get_running_loop().create_task(self.cnx.close("out-of-order receipt"))
            return
        self._pending.popleft()
        self._receipts += 1
        msg_id = cmd.message_id
        ledger = _signed(msg_id.ledgerId)
        entry = _signed(msg_id.entryId)
        if head.group is not None:
            head.group.receipted(
                head.group_index,
                (self._topic_name, self.partition, ledger, entry, head.num_messages),
            )
            self.last_sequence_id = max(self.last_sequence_id, seq + head.num_messages - 1)
            self._release(head.num_messages)
            return
        if not head.is_batch and head.chunk_ids is None and len(head.futures) == 1:
            # Hot path (one unbatched message): same outcome as the general loop below.
            fut = head.futures[0]
            if not fut.done():
                fut.set_result(MessageId(self.partition, ledger, entry, -1, topic=self._topic_name))
            if seq > self.last_sequence_id:  # noqa: PLR1730 - max() costs a call per receipt
                self.last_sequence_id = seq
            self._pending_count -= 1
            assert self._pending_count >= 0
            if self._waiters:
                self._release(0)
            return
        if head.chunk_ids is not None:
            head.chunk_ids.append(_Id(ledger, entry, self.partition))
            if head.futures:
                mid = MessageId(
                    self.partition,
                    ledger,
                    entry,
                    -1,
                    topic=self._topic_name,
                    chunk_ids=tuple(head.chunk_ids),
                )
                _resolve(head.futures[0], mid)
                self._release(1)
            self.last_sequence_id = max(self.last_sequence_id, seq)
            return
        n = len(head.futures)
        for i, fut in enumerate(head.futures):
            batch_index = i if head.is_batch else -1
            _resolve(
                fut,
                MessageId(
                    self.partition,
                    ledger,
                    entry,
                    batch_index,
                    topic=self._topic_name,
                    batch_size=n if head.is_batch else 0,
                ),
            )
        self.last_sequence_id = max(self.last_sequence_id, seq + max(n, 1) - 1)
        self._release(n)

    def on_send_error(self, cmd: pb.CommandSendError) -> None:
        head = self._pending[0] if self._pending else None
        if (
            cmd.error in _FAIL_ONE_ERRORS
            and head is not None
            and head.sequence_id == cmd.sequence_id
        ):
            # ChecksumError, NotAllowedError (e.g. beyond the maximum delivery delay): fail
            # just that message, as the Java client does
            op = self._pending.popleft()
            self._release(op.fail(for_code(cmd.error, cmd.message)))
            return
        if self.cnx is not None:  # anything else: reconnect and resend
            asyncio.get_running_loop().create_task(self.cnx.close(f"SEND_ERROR {cmd.message}"))

    async def _timeout_loop(self) -> None:
        timeout = self.config.send_timeout_ms
        clock = self.ctx.clock
        try:
            while self.state not in (HandlerState.CLOSED, HandlerState.FAILED):
                if not self._pending:
                    await clock.sleep(timeout / 1000)
                    continue
                head = self._pending[0]
                wait = head.created_ms + timeout - clock.monotonic_ms()
                if wait > 0:
                    await clock.sleep(wait / 1000)
                    continue
                now = clock.monotonic_ms()
                failed = 0
                while self._pending and self._pending[0].created_ms + timeout <= now:
                    op = self._pending.popleft()
                    failed += op.fail(Timeout("send timeout"))
                if failed:
                    self._release(failed)
        except asyncio.CancelledError:
            return

    # ------------------------------------------------------------------ flush / close

    async def flush(self) -> None:
        self.flush_batches()
        futures: list[asyncio.Future[Any]] = [f for op in list(self._pending) for f in op.futures]
        futures.extend({id(op.group): op.group.future for op in self._pending if op.group}.values())
        if futures:
            await asyncio.gather(*futures, return_exceptions=True)

    def _fail_all(self, exc: PulsarException) -> None:
        n = 0
        if self._accumulator is not None:
            for batch in self._accumulator.drain():
                for m in batch.items:
                    _fail(m.future, exc)
                    n += 1
        while self._pending:
            n += self._pending.popleft().fail(exc)
        if n:
            self._release(n)

    async def close(self) -> None:
        if self.state in (HandlerState.CLOSED, HandlerState.CLOSING):
            return
        if self.state is HandlerState.READY:
            try:
                await asyncio.wait_for(self.flush(), self.config.send_timeout_ms / 1000 or None)
            except (TimeoutError, PulsarException):
                pass
        was_ready = self.state is HandlerState.READY
        self._set_state(HandlerState.CLOSING)
        self._stop_reconnecting()
        if self._batch_timer is not None:
            self._batch_timer.cancel()
        if self._timeout_task is not None:
            self._timeout_task.cancel()
        cnx = self.cnx
        if was_ready and cnx is not None and not cnx.closed.is_set():
            rid = self.ctx.next_request_id()
            try:
                await cnx.request(commands.close_producer(self.producer_id, rid), rid)
            except PulsarException:
                pass
        self._detach()
        self._set_state(HandlerState.CLOSED)
        self._fail_all(AlreadyClosed("producer closed"))
        self._fail_waiters(AlreadyClosed("producer closed"))

    def check_invariants(self) -> None:
        """Pending count = accumulated + in-flight messages; sequence ids never go back."""
        accumulated = len(self._accumulator) if self._accumulator is not None else 0
        in_flight = sum(op.num_messages for op in self._pending)
        assert self._pending_count == accumulated + in_flight, (
            self._pending_count,
            accumulated,
            in_flight,
        )
        assert self._pending_count <= self._pending_limit
        seqs = [op.sequence_id for op in self._pending]
        assert seqs == sorted(seqs), seqs
        if self._accumulator is not None:
            self._accumulator.check_invariants()

    def statistics(self) -> ProducerStatistics:
        return ProducerStatistics(
            self._pending_count,
            len(self._pending),
            len(self._accumulator) if self._accumulator is not None else 0,
            self._sent,
            self._receipts,
            self.reconnects,
            self.state.value,
        )


_U32 = struct.Struct(">I")


def _build_batch(msgs: list[OutgoingMessage]) -> bytes:
    """Batch payload (layout in ``protocol._batch``); ``payload_size`` is already set."""
    first = msgs[0].smm.sequence_id
    if msgs[-1].smm.sequence_id == first + len(msgs) - 1 and all(
        m.plain and not m.explicit_sequence_id for m in msgs
    ):  # consecutive plain messages: the codec's encoder, no protobuf objects
        return encode_plain_batch([m.payload for m in msgs], first)
    parts: list[bytes] = []
    pack = _U32.pack
    for m in msgs:
        raw = m.smm.SerializeToString()
        parts.append(pack(len(raw)))
        parts.append(raw)
        parts.append(m.payload)
    return b"".join(parts)


def _signed(v: int) -> int:
    return v - (1 << 64) if v >= 1 << 63 else v


def _resolve(fut: asyncio.Future[MessageId], mid: MessageId) -> None:
    if not fut.done():
        fut.set_result(mid)


def _fail(fut: asyncio.Future[Any], exc: BaseException) -> None:
    if not fut.done():
        fut.set_exception(exc)
        # A fire-and-forget send must not log "exception was never retrieved".
        fut.add_done_callback(lambda f: f.exception())


def _to_ms(value: datetime.timedelta | int | float) -> int:
    if isinstance(value, datetime.timedelta):
        return int(value.total_seconds() * 1000)
    return int(value)


class Producer:
    """The application's producer (``await client.create_producer(topic, ...)``)."""

    def __init__(
        self,
        ctx: ClientContext,
        topic: TopicName,
        config: ProducerConfig,
        partitions: int,
        on_close: Callable[[Producer], None],
        *,
        resolve_partitions: Callable[[TopicName], Awaitable[int]] | None = None,
        partitions_update_interval_s: float = 0,
    ) -> None:
        self._ctx = ctx
        self._topic = topic
        self._resolve_partitions = resolve_partitions
        self._partitions_update_s = partitions_update_interval_s
        self._partitions_task: asyncio.Task[None] | None = None
        self.config = config
        self._num_partitions = partitions
        self._on_close = on_close
        limit = config.max_pending_messages
        if partitions > 0:
            limit = min(limit, max(1, config.max_pending_messages_across_partitions // partitions))
            self._pending_limit = limit
            self._parts = [
                PartitionProducer(ctx, topic.partition(i), config, i, pending_limit=limit)
                for i in range(partitions)
            ]
        else:
            self._pending_limit = limit
            self._parts = [PartitionProducer(ctx, topic, config, -1, pending_limit=limit)]
        self._rr = ctx.rng.randrange(len(self._parts))
        self._single = ctx.rng.randrange(len(self._parts))
        self._closed = False

    async def _start(self) -> None:
        results = await asyncio.gather(*(p.start() for p in self._parts), return_exceptions=True)
        errors = [r for r in results if isinstance(r, BaseException)]
        if errors:
            await asyncio.gather(*(p.close() for p in self._parts), return_exceptions=True)
            raise errors[0]
        if self._num_partitions > 0 and self._partitions_update_s > 0 and self._resolve_partitions:
            self._partitions_task = asyncio.get_running_loop().create_task(self._watch_partitions())

    async def _watch_partitions(self) -> None:
        """Every ``partitions_update_interval``: start producers on partitions added meanwhile."""
        assert self._resolve_partitions is not None
        try:
            while not self._closed:
                await self._ctx.clock.sleep(self._partitions_update_s)
                try:
                    n = await self._resolve_partitions(self._topic)
                except PulsarException:
                    continue
                for i in range(len(self._parts), n):
                    part = PartitionProducer(
                        self._ctx,
                        self._topic.partition(i),
                        self.config,
                        i,
                        pending_limit=self._pending_limit,
                    )
                    try:
                        await part.start()
                    except PulsarException:
                        break  # try again at the next interval
                    if self._closed:
                        await part.close()
                        return
                    self._parts.append(part)
                    self._num_partitions = len(self._parts)
        except asyncio.CancelledError:
            return

    def __repr__(self) -> str:
        return f"<Producer {self._topic} partitions={self._num_partitions}>"

    # ------------------------------------------------------------------ accessors

    def topic(self) -> str:
        return self._topic.full_name

    def producer_name(self) -> str:
        return self._parts[0].producer_name or ""

    def last_sequence_id(self) -> int:
        return max(p.last_sequence_id for p in self._parts)

    def is_connected(self) -> bool:
        return all(p.is_connected for p in self._parts)

    @property
    def partitions(self) -> list[PartitionProducer]:
        return list(self._parts)

    # ------------------------------------------------------------------ routing

    def _route(self, msg: OutgoingMessage, data: bytes) -> PartitionProducer:
        n = len(self._parts)
        if n == 1:
            return self._parts[0]
        mode = self.config.message_routing_mode
        if mode == PartitionsRoutingMode.CustomPartition and self.config.message_router:
            view = Message(
                data,
                MessageId(),
                topic=self._topic.full_name,
                properties={kv.key: kv.value for kv in msg.smm.properties},
                partition_key=msg.smm.partition_key if msg.smm.HasField("partition_key") else None,
                ordering_key=None,
                publish_time_ms=0,
                event_time_ms=msg.smm.event_time,
                redelivery_count=0,
            )
            return self._parts[self.config.message_router(view, n) % n]
        if msg.smm.HasField("partition_key") and msg.smm.partition_key:
            return self._parts[hash_key(msg.smm.partition_key, self.config.hashing_scheme) % n]
        if mode == PartitionsRoutingMode.UseSinglePartition:
            return self._parts[self._single]
        part = self._parts[self._rr % n]
        self._rr += 1
        return part

    # ------------------------------------------------------------------ sending

    def _build(  # noqa: PLR0917 - the official client's positional order
        self,
        content: bytes,
        properties: Mapping[str, str] | None,
        partition_key: str | None,
        ordering_key: bytes | str | None,
        sequence_id: int | None,
        event_timestamp: int | None,
        deliver_at: int | None,
        deliver_after: datetime.timedelta | int | None,
        replication_clusters: list[str] | None,
        disable_replication: bool,
    ) -> OutgoingMessage:
        if type(content) is not bytes:
            if not isinstance(content, (bytearray, memoryview)):
                raise TypeError("content must be bytes")
            content = bytes(content)
        smm = pb.SingleMessageMetadata(payload_size=len(content))
        for k, v in (properties or {}).items():
            smm.properties.add(key=str(k), value=str(v))
        if partition_key is not None:
            smm.partition_key = partition_key
        if ordering_key is not None:
            smm.ordering_key = (
                ordering_key.encode() if isinstance(ordering_key, str) else bytes(ordering_key)
            )
        if event_timestamp:
            smm.event_time = int(event_timestamp)
        if sequence_id is not None:
            smm.sequence_id = int(sequence_id)
        at: int | None = None
        if deliver_at is not None:
            at = int(deliver_at)
        elif deliver_after is not None:
            at = self._ctx.clock.now_ms() + _to_ms(deliver_after)
        replicate: tuple[str, ...] = ()
        if disable_replication:
            replicate = ("__local__",)
        elif replication_clusters:
            replicate = tuple(replication_clusters)
        fut: asyncio.Future[MessageId] = asyncio.get_running_loop().create_future()
        plain = (
            not properties
            and partition_key is None
            and ordering_key is None
            and not event_timestamp
            and not replicate
        )
        return OutgoingMessage(
            smm,
            content,
            fut,
            at,
            replicate,
            explicit_sequence_id=sequence_id is not None,
            plain=plain,
        )

    async def send_async(
        self,
        content: Any,
        callback: Callable[[PulsarException | None, MessageId | None], Any] | None = None,
        *,
        properties: Mapping[str, str] | None = None,
        partition_key: str | None = None,
        ordering_key: bytes | str | None = None,
        sequence_id: int | None = None,
        event_timestamp: int | None = None,
        deliver_at: int | None = None,
        deliver_after: datetime.timedelta | int | None = None,
        replication_clusters: list[str] | None = None,
        disable_replication: bool = False,
    ) -> asyncio.Future[MessageId]:
        """Queue a message; returns the future of its ``MessageId`` without waiting for it.

        Waits only for room in the pending queue (``block_if_queue_full``) or raises
        ``ProducerQueueIsFull``. ``callback(exc, message_id)`` runs on completion.
        """
        if self._closed:
            raise AlreadyClosed("producer closed")
        if self.config.schema is not None:
            content = self.config.schema.encode(content)
        msg = self._build(
            content,
            properties,
            partition_key,
            ordering_key,
            sequence_id,
            event_timestamp,
            deliver_at,
            deliver_after,
            replication_clusters,
            disable_replication,
        )
        part = self._route(msg, msg.payload)
        if not part.try_acquire_slot():
            await part.acquire_slot(block=self.config.block_if_queue_full)
        try:
            part.submit(msg)
        except BaseException:
            part._release(1)
            raise
        if callback is not None:

            def done(f: asyncio.Future[MessageId]) -> None:
                exc = f.exception()
                if exc is not None:
                    callback(exc if isinstance(exc, PulsarException) else None, None)
                else:
                    callback(None, f.result())

            msg.future.add_done_callback(done)
        if part.socket_backlogged():
            await part.drain_socket()
        return msg.future

    async def send_batch(self, contents: Sequence[bytes]) -> asyncio.Future[SentMessageIds]:
        """Queue many plain messages (no properties or keys) at once, for throughput; returns
        one future of all their ids, in order (``SentMessageIds``).

        They go out as batch entries of at most ``batching_max_messages`` messages and
        ``batching_max_allowed_size_in_bytes`` bytes (whether or not ``batching_enabled``),
        after anything sent before, each to one partition (round robin over partitions).
        Waits for room in the pending queue one entry at a time (``block_if_queue_full``) or
        raises ``ProducerQueueIsFull``. The future fails if any of the entries fails; the
        entries before it may be stored (as when a ``send_async`` of a batch fails)."""
        if self._closed:
            raise AlreadyClosed("producer closed")
        payloads = list(contents)
        for i, p in enumerate(payloads):
            if type(p) is not bytes:
                if not isinstance(p, (bytearray, memoryview)):
                    raise TypeError("content must be bytes")
                payloads[i] = bytes(p)
        loop = asyncio.get_running_loop()
        group = SendGroup(loop.create_future())
        if not payloads:
            group.future.set_result(SentMessageIds([]))
            return group.future
        step = max(1, min(self.config.batching_max_messages, self._pending_limit))
        block = self.config.block_if_queue_full
        group.ops += 1  # held until every entry is submitted
        try:
            for i in range(0, len(payloads), step):
                chunk = payloads[i : i + step]
                part = self._parts[0] if len(self._parts) == 1 else self._next_round_robin()
                await part.acquire_slot(block=block, n=len(chunk))
                part.submit_plain_batch(chunk, group)  # releases what it did not send
                if part.socket_backlogged():
                    await part.drain_socket()
        except BaseException as exc:
            group.fail(exc)
            raise
        finally:
            group.ops -= 1
        if group.ops == 0 and not group.future.done():
            group.future.set_result(SentMessageIds(group.segments))
        return group.future

    async def send_entry_async(
        self,
        headers_and_payload: bytes,
        *,
        sequence_id: int,
        num_messages: int = 1,
        is_chunk: bool = False,
    ) -> asyncio.Future[MessageId]:
        """Queue an entry already encoded as a broker stores it (checksum, ``MessageMetadata``
        and payload: ``protocol.encode_headers_and_payload``) to be sent unchanged under
        ``sequence_id``: how a geo-replicator re-publishes what another cluster stored (a
        batch entry stays one entry of ``num_messages`` messages). Sequence ids must
        increase; the producer's own numbering is not used. Returns the receipt's future.
        Only for a producer on one topic or partition (never routed)."""
        if self._closed:
            raise AlreadyClosed("producer closed")
        if len(self._parts) != 1 or self._num_partitions > 0:
            raise InvalidConfiguration("send_entry_async needs a producer on one partition")
        part = self._parts[0]
        if not part.try_acquire_slot():
            await part.acquire_slot(block=self.config.block_if_queue_full)
        future: asyncio.Future[MessageId] = asyncio.get_running_loop().create_future()
        try:
            part.submit_entry(headers_and_payload, sequence_id, num_messages, is_chunk, future)
        except BaseException:
            part._release(1)
            raise
        if part.socket_backlogged():
            await part.drain_socket()
        return future

    async def get_or_create_schema(self, schema: pb.Schema) -> bytes:
        """The topic's version of ``schema``, registered by the broker if it has none
        (``GET_OR_CREATE_SCHEMA`` on this producer's connection, as Pulsar's replicator asks
        the remote cluster): what ``send_entry_async`` puts in the metadata of an entry of
        that schema. Raises the broker's error (``IncompatibleSchema``, ...) or
        ``ConnectError`` while the producer has no connection."""
        if self._closed:
            raise AlreadyClosed("producer closed")
        if len(self._parts) != 1 or self._num_partitions > 0:
            raise InvalidConfiguration("get_or_create_schema needs a producer on one partition")
        part = self._parts[0]
        cnx = part.cnx
        if cnx is None:
            raise ConnectError(f"producer on {part.topic} is not connected")
        rid = part.ctx.next_request_id()
        body = pb.CommandGetOrCreateSchema(
            request_id=rid, topic=part.topic.full_name, schema=schema
        )
        event = await cnx.request(
            commands.make_command(CommandType.GET_OR_CREATE_SCHEMA, body), rid
        )
        resp = event.base.getOrCreateSchemaResponse
        if resp.HasField("error_code"):
            raise for_code(resp.error_code, resp.error_message or "schema refused")
        return bytes(resp.schema_version)

    def _next_round_robin(self) -> PartitionProducer:
        part = self._parts[self._rr % len(self._parts)]
        self._rr += 1
        return part

    async def send(self, content: Any, **kwargs: Any) -> MessageId:
        """Send and wait for the broker's receipt; returns the message id."""
        fut = await self.send_async(content, **kwargs)
        return await fut  # a batch goes out when full or after batching_max_publish_delay_ms

    async def flush(self) -> None:
        """Send every batched message now and wait for all pending receipts."""
        await asyncio.gather(*(p.flush() for p in self._parts))

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._partitions_task is not None:
            self._partitions_task.cancel()
        await asyncio.gather(*(p.close() for p in self._parts), return_exceptions=True)
        self._on_close(self)

    def statistics(self) -> list[ProducerStatistics]:
        return [p.statistics() for p in self._parts]


__all__ = [
    "OpSend",
    "OutgoingMessage",
    "PartitionProducer",
    "Producer",
    "ProducerConfig",
    "SendGroup",
    "SentMessageIds",
]
