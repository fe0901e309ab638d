"""Decoding one received entry into application messages: a pure step over bytes.

Owns: decompressing an entry's payload, splitting a batch into its members (the codec's
``split_batch``; its size is the codec's ``num_messages_of``), and making the ``Message`` of
each member still to deliver: not acked
according to ``still`` (the broker's ack set and the consumer's own batch tracker), not
compacted out, not dropped by a start filter.
Must not know: permits, acknowledgement trackers, the receive queue, connections, I/O. The
consumer (``_consumer.py``) feeds it and acts on the result; tests feed it bytes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from magnetar.client._compression import DecompressionError, decompress
from magnetar.client._message import Message, MessageId
from magnetar.client.protocol import (
    BatchDeserializeError,
    is_batch,
    num_messages_of,
    pb,
    split_batch,
)

# CommandAck.ValidationError values a consumer reports when it drops an entry it cannot read.
VALIDATION_DECOMPRESSION_ERROR = 1
VALIDATION_BATCH_DESERIALIZE_ERROR = 3

NO_PROPERTIES: dict[str, str] = {}  # shared: Message.properties() returns a copy


class EntryDecodeError(Exception):
    """The entry cannot be turned into messages; ``count`` messages are lost with it and the
    consumer reports ``validation_error`` to the broker."""

    def __init__(self, reason: str, validation_error: int, count: int) -> None:
        super().__init__(reason)
        self.validation_error = validation_error
        self.count = count


@dataclass(frozen=True, slots=True)
class DecodedEntry:
    messages: list[Message]
    batch_size: int
    """Members of the batch; 0 for an entry that is a single message."""
    delivered: set[int]
    """Batch indexes made into messages."""
    skipped: int
    """Messages of the entry not made into messages (acked, compacted out, filtered)."""


def decode_entry(
    md: pb.MessageMetadata,
    payload: bytes,
    *,
    partition: int,
    ledger: int,
    entry_id: int,
    topic: str,
    redelivery: int = 0,
    chunk_ids: tuple[Any, ...] = (),
    still: set[int] | None = None,
    drop: Callable[[MessageId], bool] | None = None,
    consumer_ref: Any = None,
) -> DecodedEntry:
    """The messages of one entry (``payload`` whole: chunks already assembled).

    ``still``: batch indexes left to deliver (None: all); ``drop``: a start filter;
    ``consumer_ref`` is stored in each message for its acknowledgement. Raises
    ``EntryDecodeError`` for a payload that does not decompress or a malformed batch."""
    batched = is_batch(md)
    n = num_messages_of(md)
    if md.HasField("compression") and md.compression != 0:
        try:
            payload = decompress(md.compression, payload, md.uncompressed_size)
        except DecompressionError as exc:
            raise EntryDecodeError(str(exc), VALIDATION_DECOMPRESSION_ERROR, n) from None
    if not batched:
        mid = MessageId(partition, ledger, entry_id, -1, topic=topic, chunk_ids=chunk_ids)
        if drop is not None and drop(mid):
            return DecodedEntry([], 0, set(), 1)
        props = md.properties
        message = Message(
            payload,
            mid,
            topic=topic,
            properties={kv.key: kv.value for kv in props} if props else NO_PROPERTIES,
            partition_key=md.partition_key if md.HasField("partition_key") else None,
            ordering_key=md.ordering_key if md.HasField("ordering_key") else None,
            publish_time_ms=md.publish_time,
            event_time_ms=md.event_time,
            redelivery_count=redelivery,
            schema_version=md.schema_version,
            consumer_ref=consumer_ref,
        )
        return DecodedEntry([message], 0, set(), 0)
    try:
        members = split_batch(payload, n)
    except BatchDeserializeError as exc:
        raise EntryDecodeError(str(exc), VALIDATION_BATCH_DESERIALIZE_ERROR, n) from None
    out: list[Message] = []
    delivered: set[int] = set()
    skipped = 0
    publish_time = md.publish_time
    outer_event_time = md.event_time
    schema_version = md.schema_version
    for index, (smm, data) in enumerate(members):
        if (still is not None and index not in still) or smm.compacted_out:
            skipped += 1
            continue
        mid = MessageId(partition, ledger, entry_id, index, topic=topic, batch_size=n)
        if drop is not None and drop(mid):
            skipped += 1
            continue
        delivered.add(index)
        out.append(
            Message(
                data,
                mid,
                topic=topic,
                properties=(
                    {kv.key: kv.value for kv in smm.properties} if smm.properties else NO_PROPERTIES
                ),
                partition_key=smm.partition_key if smm.HasField("partition_key") else None,
                ordering_key=smm.ordering_key if smm.HasField("ordering_key") else None,
                publish_time_ms=publish_time,
                event_time_ms=smm.event_time or outer_event_time,
                redelivery_count=redelivery,
                schema_version=schema_version,
                consumer_ref=consumer_ref,
            )
        )
    return DecodedEntry(out, n, delivered, skipped)


__all__ = [
    "NO_PROPERTIES",
    "VALIDATION_BATCH_DESERIALIZE_ERROR",
    "VALIDATION_DECOMPRESSION_ERROR",
    "DecodedEntry",
    "EntryDecodeError",
    "decode_entry",
]
