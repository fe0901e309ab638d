"""Producers on a topic: access modes and broker-side deduplication.

Owns: ``ProducerAccessMode`` admission as Pulsar's ``incrementTopicEpochIfNeeded`` (Shared
fails with ProducerBusy while an exclusive producer holds the topic or one is waiting;
Exclusive fails with ProducerFenced when any other producer is attached or waiting;
WaitForExclusive queues until the topic is free and is then admitted, in arrival order;
ExclusiveWithFencing evicts everyone else), the topic epoch (None until the first exclusive
producer, then 0, 1, ...; a reconnecting exclusive producer carrying an older epoch gets
ProducerFenced, one carrying its epoch keeps it), producer-name uniqueness per topic, and
``Deduplication``: per producer name, the highest sequence id persisted; a SEND whose
sequence id is not above it is a duplicate (answered with a receipt but not stored). Chunks
share a sequence id, so only the last chunk of a chunked message is checked and recorded.
Its recovery point (a ``SequenceSnapshot`` encoded by ``DEDUP_SNAPSHOTS``): every producer's
highest persisted sequence id at a position, due every ``brokerDeduplicationEntriesInterval``
entries stored (default ``DEDUP_SNAPSHOT_EVERY_ENTRIES``, Pulsar's) and when the topic closes,
so a load reads only the entries after it again, not the whole topic.
Pure: no I/O.
"""

from __future__ import annotations

import enum
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from magnetar.broker.errors import CodedError, ServerError
from magnetar.broker.ledger.position import Position
from magnetar.broker.topics.sequence_snapshots import SequenceSnapshot, SnapshotCodec

DEDUP_SNAPSHOT_PROPERTY = "pulsar.dedup.snapshot"
DEDUP_SNAPSHOT_EVERY_ENTRIES = 1000
"""Entries stored (with deduplication on) between two snapshots: a bound on what a load
after a crash reads again (Pulsar's ``brokerDeduplicationEntriesInterval`` default)."""
DEDUP_SNAPSHOT_MAX_BYTES = 256 << 10
"""A larger snapshot (thousands of producer names) is not stored: the managed ledger's
metadata must stay small. The older one stays valid (a load reads more); see ``encode``."""

DEDUP_SNAPSHOTS = SnapshotCodec("producers", DEDUP_SNAPSHOT_MAX_BYTES)
"""Deduplication's recovery point: every producer's highest persisted sequence id."""


class AccessMode(enum.IntEnum):
    SHARED = 0
    EXCLUSIVE = 1
    WAIT_FOR_EXCLUSIVE = 2
    EXCLUSIVE_WITH_FENCING = 3

    @property
    def pulsar_name(self) -> str:
        """Pulsar's spelling (``ProducerAccessMode``): ``ExclusiveWithFencing``."""
        return "".join(part.title() for part in self.name.split("_"))


class ProducerError(CodedError):
    """Refusal of a producer (access mode, name in use, quota), answered with ``code``."""


@dataclass(slots=True)
class Producer:
    producer_id: int
    name: str
    access_mode: AccessMode
    cnx: Any = None  # the connection (sends receipts / close)
    user_provided_name: bool = True
    msg_in: int = 0
    bytes_in: int = 0
    closed: bool = False
    topic_epoch: int | None = None
    """The epoch the client sent (a reconnecting exclusive producer), else None."""
    address: str = ""
    """The client's address (``inboundConnection`` of a replicator's producer)."""
    connected_since_ms: int = 0
    link: str | None = None
    """Another cluster's replicator (Pulsar's ``isRemote``): the link it sends for, set by
    the topic on admission; its SENDs are deduplicated by ``InboundLinks``."""

    def __repr__(self) -> str:
        return f"<Producer {self.producer_id} {self.name!r} {self.access_mode.name}>"


class Admission(enum.Enum):
    ADMITTED = "admitted"
    QUEUED = "queued"


class ProducerRegistry:
    """Who produces on one topic; decides admission synchronously.

    Invariants: ``exclusive`` is None or in ``producers``; while ``exclusive`` is set it is
    the only producer; a producer is in at most one of ``producers`` and ``waiting``; the
    topic epoch only moves when an exclusive producer is admitted.
    """

    def __init__(self, topic_epoch: int | None = None) -> None:
        self.producers: dict[str, Producer] = {}
        self.waiting: list[Producer] = []
        self.topic_epoch: int | None = topic_epoch
        """Pulsar's topic epoch: None until a first exclusive producer, then 0, 1, ..."""
        self.exclusive: Producer | None = None
        self._fenced: list[Producer] = []

    def __repr__(self) -> str:
        return (
            f"<ProducerRegistry n={len(self.producers)} waiting={len(self.waiting)} "
            f"epoch={self.topic_epoch}>"
        )

    def admit(self, producer: Producer) -> Admission:
        """Admit ``producer`` now, queue it (WaitForExclusive) or raise ``ProducerError``.

        Pulsar's ``AbstractTopic.incrementTopicEpochIfNeeded``: the access mode is checked
        before the name, so a second Exclusive producer is fenced (``ProducerFenced``) where
        a Shared one is busy (``ProducerBusy``).
        """
        mode = producer.access_mode
        holder = self.exclusive.name if self.exclusive is not None else None
        if mode is AccessMode.SHARED:
            if self.exclusive is not None or self.waiting:
                raise ProducerError(
                    ServerError.ProducerBusy, f"Topic has an existing exclusive producer: {holder}"
                )
            self._check_name(producer)
            self.producers[producer.name] = producer
            return Admission.ADMITTED
        if mode is AccessMode.EXCLUSIVE:
            if self.exclusive is not None or self.waiting:
                raise ProducerError(
                    ServerError.ProducerFenced,
                    f"Topic has an existing exclusive producer: {holder}",
                )
            if self.producers:
                raise ProducerError(
                    ServerError.ProducerFenced, "Topic has existing shared producers"
                )
            self._check_epoch(producer)
            self._make_exclusive(producer)
            return Admission.ADMITTED
        if mode is AccessMode.EXCLUSIVE_WITH_FENCING:
            self._check_epoch(producer)
            # everyone else is disconnected; a reconnect carrying an older epoch is fenced
            fenced = [*self.producers.values(), *self.waiting]
            self.producers.clear()
            self.waiting.clear()
            self.exclusive = None
            for old in fenced:
                old.closed = True
            self._fenced.extend(fenced)
            self._make_exclusive(producer)
            return Admission.ADMITTED
        # WAIT_FOR_EXCLUSIVE
        if self.exclusive is not None or self.producers:
            self.waiting.append(producer)
            return Admission.QUEUED
        self._check_epoch(producer)
        self._make_exclusive(producer)
        return Admission.ADMITTED

    def take_fenced(self) -> list[Producer]:
        """Producers evicted by the last ExclusiveWithFencing admission (to disconnect)."""
        fenced, self._fenced = self._fenced, []
        return fenced

    def _check_name(self, producer: Producer) -> None:
        if producer.name in self.producers:
            raise ProducerError(
                ServerError.ProducerBusy,
                f"Producer with name '{producer.name}' is already connected",
            )

    def _check_epoch(self, producer: Producer) -> None:
        """A reconnecting exclusive producer whose epoch is older was fenced meanwhile."""
        epoch = producer.topic_epoch
        if epoch is not None and self.topic_epoch is not None and epoch < self.topic_epoch:
            raise ProducerError(
                ServerError.ProducerFenced,
                f"Topic epoch has already moved. Current epoch: {self.topic_epoch}, "
                f"Producer epoch: {epoch}",
            )

    def _make_exclusive(self, producer: Producer) -> None:
        """The topic epoch: the reconnecting producer's own, else the next one."""
        if producer.topic_epoch is not None:
            self.topic_epoch = producer.topic_epoch
        else:
            self.topic_epoch = 0 if self.topic_epoch is None else self.topic_epoch + 1
        self.exclusive = producer
        self.producers[producer.name] = producer

    def remove(self, producer: Producer) -> list[Producer]:
        """Detach ``producer``; returns waiting producers admitted as a result."""
        producer.closed = True
        if producer in self.waiting:
            self.waiting.remove(producer)
            return []
        if self.producers.get(producer.name) is not producer:
            return []
        del self.producers[producer.name]
        if self.exclusive is producer:
            self.exclusive = None
        if not self.producers and self.waiting:
            nxt = self.waiting.pop(0)
            self._make_exclusive(nxt)
            return [nxt]
        return []

    def revert_epoch(self, durable: int | None) -> None:
        """The epoch an admission moved could not be stored and its producer was removed:
        back to the last durable epoch (Pulsar keeps the epoch until the store succeeds),
        unless another exclusive producer holds the topic meanwhile."""
        if self.exclusive is None:
            self.topic_epoch = durable

    def check_invariants(self) -> None:
        assert self.exclusive is None or self.producers.get(self.exclusive.name) is self.exclusive
        assert self.exclusive is None or len(self.producers) == 1
        assert not (set(map(id, self.producers.values())) & set(map(id, self.waiting)))


class Deduplication:
    """Highest persisted sequence id per producer name (bounded, least recent dropped)."""

    def __init__(
        self,
        enabled: bool,
        max_producers: int = 10_000,
        snapshot_every: int = DEDUP_SNAPSHOT_EVERY_ENTRIES,
    ) -> None:
        self.enabled = enabled
        self.max_producers = max_producers
        self.snapshot_every = snapshot_every
        self.entries_since_snapshot = 0
        self._pushed: OrderedDict[str, int] = OrderedDict()  # accepted, maybe not persisted
        self._persisted: OrderedDict[str, int] = OrderedDict()

    def last_sequence_id(self, producer_name: str) -> int:
        if not self.enabled:
            return -1
        return self._persisted.get(producer_name, -1)

    def is_duplicate(self, producer_name: str, sequence_id: int, highest: int) -> bool:
        """Check and record a SEND about to be stored (call only for non-chunks and last
        chunks). ``highest`` is the batch's highest sequence id (or ``sequence_id``)."""
        if not self.enabled:
            return False
        last = self._pushed.get(producer_name, -1)
        if sequence_id <= last:
            return True
        self._pushed[producer_name] = max(highest, sequence_id)
        self._pushed.move_to_end(producer_name)
        if len(self._pushed) > self.max_producers:
            self._pushed.popitem(last=False)
        return False

    def persisted(self, producer_name: str, highest: int) -> None:
        if not self.enabled:
            return
        if highest > self._persisted.get(producer_name, -1):
            self._persisted[producer_name] = highest
            self._persisted.move_to_end(producer_name)
            if len(self._persisted) > self.max_producers:
                self._persisted.popitem(last=False)

    def failed(self, producer_name: str) -> None:
        """A write failed: fall back to what is persisted so a resend is accepted."""
        if producer_name in self._persisted:
            self._pushed[producer_name] = self._persisted[producer_name]
        else:
            self._pushed.pop(producer_name, None)

    def restore(self, producer_name: str, highest: int) -> None:
        self.persisted(producer_name, highest)
        self._pushed[producer_name] = max(self._pushed.get(producer_name, -1), highest)

    def count_stored(self, entries: int) -> bool:
        """``entries`` more were stored: True when a snapshot is due."""
        if not self.enabled:
            return False
        self.entries_since_snapshot += entries
        return self.entries_since_snapshot >= self.snapshot_every

    def snapshot(self, position: Position) -> SequenceSnapshot:
        """The recovery point at ``position`` (every completed add up to it recorded)."""
        self.entries_since_snapshot = 0
        return SequenceSnapshot(position, dict(self._persisted))

    def restore_snapshot(self, snap: SequenceSnapshot) -> None:
        for name, highest in snap.ids.items():
            self.restore(name, highest)


__all__ = [
    "DEDUP_SNAPSHOTS",
    "DEDUP_SNAPSHOT_EVERY_ENTRIES",
    "DEDUP_SNAPSHOT_PROPERTY",
    "AccessMode",
    "Admission",
    "Deduplication",
    "Producer",
    "ProducerError",
    "ProducerRegistry",
]
