"""In-memory fakes of both sides of a replicator, for the unit tiers on virtual time.

Owns: ``FakeSource`` (a topic partition's stored entries and its durable replicator
cursor: read position, mark-delete position, rewind, tail listeners, schemas),
``FakeRemote`` / ``FakeRemoteProducer`` (the remote cluster: it stores what it receives
and recognises a resent entry by (producer name, sequence id), as phase 2's remote side
will whatever its namespace's deduplication policy; it can be down, refuse sends, or hold
receipts back), and ``entry_bytes`` / ``batch_entry_bytes`` (entries as a broker stores
them). Must not know: the replicator's internals.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field

from magnetar.broker.ledger.position import Position
from magnetar.broker.replication.contracts import ReplicationError
from magnetar.broker.replication.republish import Republished
from magnetar.broker.storage.contract import Entry
from magnetar.client.protocol import encode_headers_and_payload, encode_plain_batch, pb


def entry_bytes(payload: bytes, *, publish_time_ms: int = 1, **fields: object) -> bytes:
    """A one-message entry (``fields``: more ``MessageMetadata`` fields)."""
    md = pb.MessageMetadata(producer_name="app", sequence_id=0, publish_time=publish_time_ms)
    for name, value in fields.items():
        if name == "properties":
            assert isinstance(value, dict)
            for k, v in value.items():
                md.properties.add(key=k, value=v)
        elif name == "replicate_to":
            assert isinstance(value, list)
            md.replicate_to.extend(value)
        else:
            setattr(md, name, value)
    return encode_headers_and_payload(md, payload)


def batch_entry_bytes(payloads: list[bytes], *, publish_time_ms: int = 1) -> bytes:
    md = pb.MessageMetadata(
        producer_name="app",
        sequence_id=0,
        publish_time=publish_time_ms,
        num_messages_in_batch=len(payloads),
    )
    return encode_headers_and_payload(md, encode_plain_batch(payloads, 0))


class FakeSource:
    """One topic partition and its replicator cursor (ledger 7, entries 0, 1, ...)."""

    def __init__(self, topic: str = "persistent://t/ns/orders", ledger_id: int = 7) -> None:
        self.topic = topic
        self.ledger_id = ledger_id
        self.entries: list[Entry] = []
        self._mark_delete = Position(ledger_id, -1)
        self._read = 0
        self.listeners: list[Callable[[], None]] = []
        self.schemas: dict[bytes, pb.Schema] = {}
        self.mark_deletes: list[Position] = []
        self.reads = 0

    @property
    def mark_delete_position(self) -> Position:
        return self._mark_delete

    def add(self, data: bytes) -> Position:
        pos = Position(self.ledger_id, len(self.entries))
        self.entries.append(Entry(pos, data))
        for listener in list(self.listeners):
            listener()
        return pos

    def backlog(self) -> int:
        return sum(1 for e in self.entries if e.position > self._mark_delete)

    async def read_entries(self, max_entries: int) -> list[Entry]:
        self.reads += 1
        await asyncio.sleep(0)
        out = self.entries[self._read : self._read + max_entries]
        self._read += len(out)
        return out

    async def mark_delete(self, position: Position) -> None:
        await asyncio.sleep(0)
        assert position >= self._mark_delete, (position, self._mark_delete)
        self._mark_delete = position
        self.mark_deletes.append(position)

    def rewind(self) -> None:
        self._read = self._mark_delete.entry_id + 1

    def add_tail_listener(self, listener: Callable[[], None]) -> None:
        self.listeners.append(listener)

    def remove_tail_listener(self, listener: Callable[[], None]) -> None:
        self.listeners.remove(listener)

    async def schema_for_version(self, version: bytes) -> pb.Schema | None:
        return self.schemas.get(version)


@dataclass
class FakeRemote:
    """The remote cluster: its stored entries and its recognition of resent ones."""

    name: str = "west"
    down_reasons: list[str] = field(default_factory=list)
    """Each ``create_producer`` pops one and fails with it while any is left."""
    stored: list[Republished] = field(default_factory=list)
    sends: int = 0
    duplicates: int = 0
    highest: dict[str, int] = field(default_factory=dict)
    producers: list[FakeRemoteProducer] = field(default_factory=list)
    hold: bool = False
    """Keep receipts back until ``release()``."""
    fail_next_sends: int = 0
    schema_versions: dict[bytes, bytes] = field(default_factory=dict)
    schema_calls: int = 0
    connect_delay_s: float = 0.0
    clock_sleep: Callable[[float], object] | None = None

    async def create_producer(self, topic: str, producer_name: str) -> FakeRemoteProducer:
        if self.connect_delay_s and self.clock_sleep is not None:
            await self.clock_sleep(self.connect_delay_s)  # type: ignore[misc]
        if self.down_reasons:
            raise ReplicationError(self.down_reasons.pop(0))
        producer = FakeRemoteProducer(self, topic, producer_name)
        self.producers.append(producer)
        return producer

    def receive(self, producer_name: str, entry: Republished) -> None:
        """Store unless it is a resend of what this link already stored."""
        self.sends += 1
        if entry.sequence_id <= self.highest.get(producer_name, -1):
            self.duplicates += 1
            return
        self.highest[producer_name] = entry.sequence_id
        self.stored.append(entry)

    def release(self) -> None:
        self.hold = False
        for p in self.producers:
            p.flush()

    @property
    def in_flight(self) -> int:
        return sum(len(p.pending) for p in self.producers if not p.closed)


class FakeRemoteProducer:
    def __init__(self, remote: FakeRemote, topic: str, name: str) -> None:
        self.remote = remote
        self.topic = topic
        self.name = name
        self.pending: list[tuple[Republished, asyncio.Future[None]]] = []
        self.closed = False
        self.max_in_flight = 0

    @property
    def connected(self) -> bool:
        return not self.closed

    @property
    def address(self) -> str:
        return "pulsar://west-broker:6650"

    @property
    def last_error(self) -> str:
        return ""

    def send(self, entry: Republished) -> asyncio.Future[None]:
        assert not self.closed
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.pending.append((entry, done))
        self.max_in_flight = max(self.max_in_flight, len(self.pending))
        if not self.remote.hold:
            asyncio.get_running_loop().call_soon(self.flush)
        return done

    def flush(self) -> None:
        while self.pending and not self.closed:
            entry, done = self.pending.pop(0)
            if self.remote.fail_next_sends:
                # the remote refuses it and closes the producer: nothing queued behind it is
                # stored (what phase 2's producer path does for replicator producers)
                self.remote.fail_next_sends -= 1
                done.set_exception(ReplicationError("remote refused: backlog quota exceeded"))
                for _, later in self.pending:
                    later.set_exception(ReplicationError("producer closed by the remote"))
                    later.add_done_callback(lambda f: f.exception())
                self.pending.clear()
                self.closed = True
                return
            self.remote.receive(self.name, entry)
            if not done.done():
                done.set_result(None)

    async def schema_version_for(self, schema: pb.Schema) -> bytes:
        self.remote.schema_calls += 1
        return self.remote.schema_versions[schema.schema_data]

    async def close(self) -> None:
        self.closed = True
        for _, done in self.pending:
            if not done.done():
                done.set_exception(ReplicationError("closed"))
                done.add_done_callback(lambda f: f.exception())
        self.pending.clear()


__all__ = ["FakeRemote", "FakeRemoteProducer", "FakeSource", "batch_entry_bytes", "entry_bytes"]
