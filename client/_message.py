"""What the application sees: ``MessageId`` and ``Message`` (names as the official client).

Owns: the public ``MessageId`` (wraps the codec's ordered id; ``earliest``/``latest``;
``serialize``/``deserialize`` to a ``MessageIdData``, as Pulsar's ``toByteArray``) and the
immutable ``Message`` handed out by consumers and readers.

A ``MessageId`` received from a consumer also remembers which topic it came from and, for a
chunked message, the ids of all its chunks; neither takes part in equality or order.

Must not know: connections, acknowledgement trackers.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from magnetar.client.protocol import INT64_MAX
from magnetar.client.protocol import MessageId as _Id


class MessageId:
    """Position of a message (ledger, entry, partition, batch index)."""

    __slots__ = ("_batch", "_batch_size", "_chunk_ids", "_entry", "_ledger", "_partition", "_topic")

    earliest: ClassVar[MessageId]
    latest: ClassVar[MessageId]

    def __init__(
        self,
        partition: int = -1,
        ledger_id: int = -1,
        entry_id: int = -1,
        batch_index: int = -1,
        *,
        topic: str | None = None,
        batch_size: int = 0,
        chunk_ids: tuple[_Id, ...] = (),
    ) -> None:
        self._ledger = ledger_id
        self._entry = entry_id
        self._partition = partition
        self._batch = batch_index
        self._topic = topic
        self._batch_size = batch_size
        self._chunk_ids = chunk_ids

    @property
    def _id(self) -> _Id:
        """The codec's id (built on demand: most received ids are only compared or acked)."""
        return _Id(self._ledger, self._entry, self._partition, self._batch)

    @classmethod
    def _from(cls, mid: _Id, **kwargs: Any) -> MessageId:
        return cls(mid.partition, mid.ledger_id, mid.entry_id, mid.batch_index, **kwargs)

    # ------------------------------------------------------------------ official accessors

    def ledger_id(self) -> int:
        return self._ledger

    def entry_id(self) -> int:
        return self._entry

    def batch_index(self) -> int:
        return self._batch

    def partition(self) -> int:
        return self._partition

    def topic_name(self) -> str | None:
        return self._topic

    def serialize(self) -> bytes:
        return self._id.serialize()

    @staticmethod
    def deserialize(data: bytes) -> MessageId:
        return MessageId._from(_Id.deserialize(data))

    # ------------------------------------------------------------------ order and identity

    def _key(self) -> tuple[int, int, int]:
        """Order ignoring the partition (ids of one topic, as the C++ client compares)."""
        return (self._ledger, self._entry, self._batch)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, MessageId):
            return NotImplemented
        return (
            self._ledger == other._ledger
            and self._entry == other._entry
            and self._batch == other._batch
            and self._partition == other._partition
        )

    def __hash__(self) -> int:
        return hash((self._ledger, self._entry, self._partition, self._batch))

    def __lt__(self, other: MessageId) -> bool:
        return self._key() < other._key()

    def __le__(self, other: MessageId) -> bool:
        return self._key() <= other._key()

    def __gt__(self, other: MessageId) -> bool:
        return self._key() > other._key()

    def __ge__(self, other: MessageId) -> bool:
        return self._key() >= other._key()

    def __repr__(self) -> str:
        return f"MessageId{self}"

    def __str__(self) -> str:
        return f"({self._ledger},{self._entry},{self._partition},{self._batch})"


MessageId.earliest = MessageId(-1, -1, -1)
MessageId.latest = MessageId(-1, INT64_MAX, INT64_MAX)


class Message:
    """A received message. Accessors mirror the official ``pulsar.Message``."""

    __slots__ = (
        "_consumer_ref",
        "_data",
        "_event_time",
        "_id",
        "_key",
        "_ordering_key",
        "_properties",
        "_publish_time",
        "_redelivery_count",
        "_schema_version",
        "_topic",
    )

    def __init__(
        self,
        data: bytes,
        message_id: MessageId,
        *,
        topic: str,
        properties: Mapping[str, str],
        partition_key: str | None,
        ordering_key: bytes | None,
        publish_time_ms: int,
        event_time_ms: int,
        redelivery_count: int,
        schema_version: bytes = b"",
        consumer_ref: object = None,
    ) -> None:
        self._data = data
        self._id = message_id
        self._topic = topic
        self._properties = properties
        self._key = partition_key
        self._ordering_key = ordering_key
        self._publish_time = publish_time_ms
        self._event_time = event_time_ms
        self._redelivery_count = redelivery_count
        self._schema_version = schema_version
        self._consumer_ref = consumer_ref

    def data(self) -> bytes:
        return self._data

    def value(self) -> Any:
        """The payload decoded with the consumer's schema (the bytes when it has none)."""
        schema = getattr(getattr(self._consumer_ref, "config", None), "schema", None)
        if schema is None:
            return self._data
        return schema.decode_message(self._topic, self._schema_version, self._data)

    def properties(self) -> dict[str, str]:
        return dict(self._properties)

    def partition_key(self) -> str:
        return self._key or ""

    def has_key(self) -> bool:
        return self._key is not None

    def ordering_key(self) -> bytes:
        return self._ordering_key or b""

    def publish_timestamp(self) -> int:
        return self._publish_time

    def event_timestamp(self) -> int:
        return self._event_time

    def message_id(self) -> MessageId:
        return self._id

    def topic_name(self) -> str:
        return self._topic

    def redelivery_count(self) -> int:
        return self._redelivery_count

    def schema_version(self) -> bytes:
        return self._schema_version

    def __repr__(self) -> str:
        return f"<Message {self._id} topic={self._topic} len={len(self._data)}>"


__all__ = ["Message", "MessageId"]
