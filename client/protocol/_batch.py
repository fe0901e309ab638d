"""Batched payloads: one entry holding N messages, and chunked-message metadata.

Wire layout of a batch payload (after decompression; reference §2.6)::

    N x ( [u32 big-endian size][SingleMessageMetadata][payload_size bytes] )

The entry's outer MessageMetadata has ``num_messages_in_batch = N``; its *presence* (not its
value) marks the entry as a batch. Compression, if any, covers the whole concatenation and is
undone by the caller before ``parse_batch``.

Chunking: a large message becomes K entries sharing ``uuid``, each with ``chunk_id`` 0..K-1,
``num_chunks_from_msg`` = K and ``total_chunk_msg_size``; see ``ChunkInfo``.

Must not know: compression codecs, consumers, receive queues.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ._errors import BatchDeserializeError, LocalProtocolError
from .proto import pulsar_api_pb2 as pb

_U32 = struct.Struct(">I")


@dataclass(frozen=True, slots=True)
class SingleMessage:
    """One message of a batch: its index, its SingleMessageMetadata and its payload."""

    index: int
    metadata: pb.SingleMessageMetadata
    payload: bytes


def is_batch(metadata: pb.MessageMetadata) -> bool:
    """True when the entry is a batch (``num_messages_in_batch`` present, even if 1)."""
    return metadata.HasField("num_messages_in_batch")


def parse_batch(payload: bytes, num_messages: int) -> list[SingleMessage]:
    """Split an uncompressed batch payload into its ``num_messages`` messages.

    Raises ``BatchDeserializeError`` (a ``RemoteProtocolError``) on any inconsistency:
    truncated sizes, unparsable metadata, payload_size beyond the end, or trailing bytes.
    """
    if num_messages < 0:
        raise BatchDeserializeError(f"negative message count {num_messages}")
    view = bytes(payload)
    pos = 0
    out: list[SingleMessage] = []
    for index in range(num_messages):
        if len(view) - pos < 4:
            raise BatchDeserializeError(f"batch truncated before message {index}")
        (size,) = _U32.unpack_from(view, pos)
        pos += 4
        if size > len(view) - pos:
            raise BatchDeserializeError(f"message {index}: metadata size {size} exceeds batch")
        smm = pb.SingleMessageMetadata()
        try:
            smm.ParseFromString(view[pos : pos + size])
        except Exception as exc:
            raise BatchDeserializeError(f"message {index}: bad metadata: {exc}") from None
        if not smm.IsInitialized():
            raise BatchDeserializeError(f"message {index}: metadata misses payload_size")
        pos += size
        if smm.payload_size < 0 or smm.payload_size > len(view) - pos:
            raise BatchDeserializeError(
                f"message {index}: payload size {smm.payload_size} exceeds batch"
            )
        out.append(SingleMessage(index, smm, bytes(view[pos : pos + smm.payload_size])))
        pos += smm.payload_size
    if pos != len(view):
        raise BatchDeserializeError(f"{len(view) - pos} stray bytes after {num_messages} messages")
    return out


def serialize_single_message(metadata: pb.SingleMessageMetadata, payload: bytes) -> bytes:
    """One batch member; sets ``payload_size`` from ``payload``."""
    smm = pb.SingleMessageMetadata()
    smm.CopyFrom(metadata)
    smm.payload_size = len(payload)
    raw = smm.SerializeToString()
    return _U32.pack(len(raw)) + raw + payload


def build_batch(messages: Iterable[tuple[pb.SingleMessageMetadata, bytes]]) -> bytes:
    """Concatenate messages into a batch payload (uncompressed)."""
    return b"".join(serialize_single_message(md, payload) for md, payload in messages)


def batch_metadata(
    producer_name: str,
    sequence_id: int,
    publish_time: int,
    messages: Sequence[pb.SingleMessageMetadata],
) -> pb.MessageMetadata:
    """Outer metadata of a batch the way the C++ producer builds it.

    Keys (partition/ordering) come from the first message; ``num_messages_in_batch`` is set.
    """
    if not messages:
        raise LocalProtocolError("a batch needs at least one message")
    md = pb.MessageMetadata(
        producer_name=producer_name, sequence_id=sequence_id, publish_time=publish_time
    )
    first = messages[0]
    if first.HasField("partition_key"):
        md.partition_key = first.partition_key
        md.partition_key_b64_encoded = first.partition_key_b64_encoded
    if first.HasField("ordering_key"):
        md.ordering_key = first.ordering_key
    md.num_messages_in_batch = len(messages)
    return md


@dataclass(frozen=True, slots=True)
class ChunkInfo:
    """Chunking fields of an entry's metadata."""

    uuid: str
    chunk_id: int
    num_chunks_from_msg: int
    total_chunk_msg_size: int

    @property
    def is_last(self) -> bool:
        return self.chunk_id == self.num_chunks_from_msg - 1


def chunk_info(metadata: pb.MessageMetadata) -> ChunkInfo | None:
    """The chunk fields when the entry is one chunk of a larger message, else ``None``."""
    if not metadata.HasField("chunk_id") or not metadata.HasField("uuid"):
        return None
    return ChunkInfo(
        metadata.uuid,
        metadata.chunk_id,
        metadata.num_chunks_from_msg,
        metadata.total_chunk_msg_size,
    )
