"""Received batches decoded lazily, and ``MessageBatch``, what ``Consumer.receive_batch`` returns.

Owns: ``EntryMembers`` (one received batch entry kept as its payload plus the member spans
found by the codec's ``scan_batch``: a member's payload is a slice, its ``Message`` and
``MessageId`` are made, and its ``SingleMessageMetadata`` parsed, only when asked) and
``MessageBatch`` (a read-only sequence of messages: a run of members of one entry, or a list
of already decoded messages; ``payloads()`` gives the bytes without making messages).

Invariants: an ``EntryMembers`` is immutable once built and may be shared by several views;
a member's ``Message`` equals the one ``decode_entry`` makes for it (a unit test checks).
Must not know: permits, acknowledgement trackers, the receive queue, connections, I/O.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, overload

from magnetar.client._message import Message, MessageId
from magnetar.client.protocol import pb

_NO_PROPERTIES: dict[str, str] = {}
_parse_smm = pb.SingleMessageMetadata.FromString


class EntryMembers:
    """The members of one batch entry, decoded on demand (see the module docstring)."""

    __slots__ = (
        "batch_size",
        "consumer_ref",
        "entry_id",
        "event_time",
        "ledger",
        "partition",
        "payload",
        "publish_time",
        "redelivery",
        "schema_version",
        "spans",
        "topic",
    )

    def __init__(
        self,
        payload: bytes,
        spans: list[int],
        *,
        partition: int,
        ledger: int,
        entry_id: int,
        topic: str,
        redelivery: int,
        publish_time: int,
        event_time: int,
        schema_version: bytes,
        consumer_ref: Any,
    ) -> None:
        self.payload = payload
        self.spans = spans
        self.batch_size = len(spans) // 3
        self.partition = partition
        self.ledger = ledger
        self.entry_id = entry_id
        self.topic = topic
        self.redelivery = redelivery
        self.publish_time = publish_time
        self.event_time = event_time
        self.schema_version = schema_version
        self.consumer_ref = consumer_ref

    @property
    def entry(self) -> tuple[int, int]:
        return (self.ledger, self.entry_id)

    def data(self, index: int) -> bytes:
        s = self.spans
        return self.payload[s[3 * index + 1] : s[3 * index + 2]]

    def payloads(self, lo: int, hi: int) -> list[bytes]:
        s = self.spans
        p = self.payload
        return [p[s[k + 1] : s[k + 2]] for k in range(3 * lo, 3 * hi, 3)]

    def message_id(self, index: int) -> MessageId:
        return MessageId(
            self.partition,
            self.ledger,
            self.entry_id,
            index,
            topic=self.topic,
            batch_size=self.batch_size,
        )

    def message(self, index: int) -> Message:
        s = self.spans
        k = 3 * index
        if s[k] < 0:  # plain member: payload_size and sequence_id only
            return Message(
                self.payload[s[k + 1] : s[k + 2]],
                self.message_id(index),
                topic=self.topic,
                properties=_NO_PROPERTIES,
                partition_key=None,
                ordering_key=None,
                publish_time_ms=self.publish_time,
                event_time_ms=self.event_time,
                redelivery_count=self.redelivery,
                schema_version=self.schema_version,
                consumer_ref=self.consumer_ref,
            )
        smm = _parse_smm(self.payload[s[k] : s[k + 1]])
        return Message(
            self.payload[s[k + 1] : s[k + 2]],
            self.message_id(index),
            topic=self.topic,
            properties=(
                {kv.key: kv.value for kv in smm.properties} if smm.properties else _NO_PROPERTIES
            ),
            partition_key=smm.partition_key if smm.HasField("partition_key") else None,
            ordering_key=smm.ordering_key if smm.HasField("ordering_key") else None,
            publish_time_ms=self.publish_time,
            event_time_ms=smm.event_time or self.event_time,
            redelivery_count=self.redelivery,
            schema_version=self.schema_version,
            consumer_ref=self.consumer_ref,
        )


class MessageBatch(Sequence[Message]):
    """Messages handed out together by ``Consumer.receive_batch``, in order.

    Indexing or iterating makes ``Message`` objects (one per access; keep them if you need
    them twice); ``payloads()`` and ``data(i)`` return the bytes only, which is what a
    throughput loop wants. Acknowledge the lot with ``consumer.acknowledge(batch)`` or, on
    Exclusive/Failover subscriptions, ``consumer.acknowledge_cumulative(batch.last())``.
    """

    __slots__ = ("_hi", "_lo", "_members", "_messages")

    def __init__(
        self,
        messages: list[Message] | None = None,
        *,
        members: EntryMembers | None = None,
        lo: int = 0,
        hi: int = 0,
    ) -> None:
        self._messages = messages
        self._members = members
        self._lo = lo
        self._hi = hi
        if messages is None and members is None:
            self._messages = []

    def __len__(self) -> int:
        if self._messages is not None:
            return len(self._messages)
        return self._hi - self._lo

    @overload
    def __getitem__(self, index: int) -> Message: ...

    @overload
    def __getitem__(self, index: slice) -> list[Message]: ...

    def __getitem__(self, index: int | slice) -> Message | list[Message]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if self._messages is not None:
            return self._messages[index]
        n = self._hi - self._lo
        if index < 0:
            index += n
        if not 0 <= index < n:
            raise IndexError("MessageBatch index out of range")
        assert self._members is not None
        return self._members.message(self._lo + index)

    def __iter__(self) -> Iterator[Message]:
        if self._messages is not None:
            return iter(self._messages)
        members = self._members
        assert members is not None
        return (members.message(i) for i in range(self._lo, self._hi))

    def __bool__(self) -> bool:
        return len(self) > 0

    def data(self, index: int) -> bytes:
        """The payload of message ``index`` (no ``Message`` made)."""
        if self._messages is not None:
            return self._messages[index].data()
        n = self._hi - self._lo
        if index < 0:
            index += n
        if not 0 <= index < n:
            raise IndexError("MessageBatch index out of range")
        assert self._members is not None
        return self._members.data(self._lo + index)

    def payloads(self) -> list[bytes]:
        """Every payload, in order (no ``Message`` made)."""
        if self._messages is not None:
            return [m.data() for m in self._messages]
        assert self._members is not None
        return self._members.payloads(self._lo, self._hi)

    def message_ids(self) -> list[MessageId]:
        if self._messages is not None:
            return [m.message_id() for m in self._messages]
        assert self._members is not None
        return [self._members.message_id(i) for i in range(self._lo, self._hi)]

    def last(self) -> Message:
        """The last message (for a cumulative acknowledgement of the whole batch)."""
        if not len(self):
            raise IndexError("empty MessageBatch")
        return self[-1]

    def __repr__(self) -> str:
        return f"<MessageBatch of {len(self)}>"


__all__ = ["EntryMembers", "MessageBatch"]
