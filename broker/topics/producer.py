"""Producers on a topic: access modes and broker-side deduplication.

Owns: ``ProducerAccessMode`` admission (Shared; Exclusive fails with ProducerBusy when any
other producer is attached; WaitForExclusive queues until the topic is free and is then
admitted, in arrival order; ExclusiveWithFencing evicts everyone else and bumps the topic
epoch, so an evicted exclusive producer reconnecting with its old epoch gets ProducerFenced),
producer-name uniqueness per topic, the topic epoch for the exclusive modes, and
``Deduplication``: per producer name, the highest sequence id persisted; a SEND whose
sequence id is not above it is a duplicate (answered with a receipt but not stored). Chunks
share a sequence id, so only the last chunk of a chunked message is checked and recorded.
Pure: no I/O.
"""

from __future__ import annotations

import enum
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from magnetar.broker.errors import CodedError, ServerError


class AccessMode(enum.IntEnum):
    SHARED = 0
    EXCLUSIVE = 1
    WAIT_FOR_EXCLUSIVE = 2
    EXCLUSIVE_WITH_FENCING = 3


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

    def __repr__(self) -> str:
        return f"<Producer {self.producer_id} {self.name!r} {self.access_mode.name}>"


class Admission(enum.Enum):
    ADMITTED = "admitted"
    QUEUED = "queued"


class ProducerRegistry:
    """Who produces on one topic; decides admission synchronously."""

    def __init__(self) -> None:
        self.producers: dict[str, Producer] = {}
        self.waiting: list[Producer] = []
        self.topic_epoch = 0
        self.exclusive: Producer | None = None
        self._fenced: list[Producer] = []

    def __repr__(self) -> str:
        return f"<ProducerRegistry n={len(self.producers)} waiting={len(self.waiting)}>"

    def admit(self, producer: Producer) -> Admission:
        if producer.name in self.producers:
            raise ProducerError(
                ServerError.ProducerBusy,
                f"Producer with name '{producer.name}' is already connected",
            )
        mode = producer.access_mode
        if mode is AccessMode.SHARED:
            if self.exclusive is not None:
                raise ProducerError(
                    ServerError.ProducerBusy, "Topic has an existing exclusive producer"
                )
            self.producers[producer.name] = producer
            return Admission.ADMITTED
        if mode is AccessMode.EXCLUSIVE_WITH_FENCING:
            # fence everyone else out: they are disconnected, and a reconnect carrying an
            # older topic epoch is refused with ProducerFenced
            fenced = [*self.producers.values(), *self.waiting]
            self.producers.clear()
            self.waiting.clear()
            self.exclusive = None
            for old in fenced:
                old.closed = True
            self._fenced.extend(fenced)
            self._make_exclusive(producer)
            return Admission.ADMITTED
        if not self.producers and (mode is AccessMode.EXCLUSIVE or not self.waiting):
            self._make_exclusive(producer)
            return Admission.ADMITTED
        if mode is AccessMode.EXCLUSIVE:
            raise ProducerError(
                ServerError.ProducerBusy,
                "Topic has existing shared producers"
                if self.exclusive is None
                else "Topic has an existing exclusive producer",
            )
        self.waiting.append(producer)
        return Admission.QUEUED

    def take_fenced(self) -> list[Producer]:
        """Producers evicted by the last ExclusiveWithFencing admission (to disconnect)."""
        fenced, self._fenced = self._fenced, []
        return fenced

    def check_epoch(self, topic_epoch: int | None) -> None:
        """A reconnecting exclusive producer with an older epoch was fenced meanwhile."""
        if topic_epoch is not None and topic_epoch < self.topic_epoch:
            raise ProducerError(
                ServerError.ProducerFenced,
                f"Producer with topic epoch {topic_epoch} was fenced (topic epoch "
                f"{self.topic_epoch})",
            )

    def _make_exclusive(self, producer: Producer) -> None:
        self.topic_epoch += 1
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


class Deduplication:
    """Highest persisted sequence id per producer name (bounded, least recent dropped)."""

    def __init__(self, enabled: bool, max_producers: int = 10_000) -> None:
        self.enabled = enabled
        self.max_producers = max_producers
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


__all__ = [
    "AccessMode",
    "Admission",
    "Deduplication",
    "Producer",
    "ProducerError",
    "ProducerRegistry",
]
