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

from google.protobuf.message import DecodeError

from ._errors import BatchDeserializeError, LocalProtocolError
from .proto import pulsar_api_pb2 as pb

_U32 = struct.Struct(">I")
_parse_smm = pb.SingleMessageMetadata.FromString


@dataclass(frozen=True, slots=True)
class SingleMessage:
    """One message of a batch: its index, its SingleMessageMetadata and its payload."""

    index: int
    metadata: pb.SingleMessageMetadata
    payload: bytes


def is_batch(metadata: pb.MessageMetadata) -> bool:
    """True when the entry is a batch (``num_messages_in_batch`` present, even if 1)."""
    return metadata.HasField("num_messages_in_batch")


def split_batch(payload: bytes, num_messages: int) -> list[tuple[pb.SingleMessageMetadata, bytes]]:
    """The (metadata, payload) of each of the ``num_messages`` members of an uncompressed batch
    payload. The consumer's hot path: no per-member record objects.

    Raises ``BatchDeserializeError`` (a ``RemoteProtocolError``) on any inconsistency:
    truncated sizes, unparsable metadata, a missing or out-of-range payload_size, or
    trailing bytes.
    """
    if num_messages < 0:
        raise BatchDeserializeError(f"negative message count {num_messages}")
    out: list[tuple[pb.SingleMessageMetadata, bytes]] = []
    append = out.append
    parse = _parse_smm
    unpack = _U32.unpack_from
    pos = 0
    end = len(payload)
    index = 0
    try:
        for index in range(num_messages):
            (size,) = unpack(payload, pos)
            pos += 4
            if pos + size > end:
                raise BatchDeserializeError(f"message {index}: metadata size {size} exceeds batch")
            smm = parse(payload[pos : pos + size])
            pos += size
            psize = smm.payload_size
            if psize < 0 or pos + psize > end or not smm.HasField("payload_size"):
                raise BatchDeserializeError(f"message {index}: payload size {psize} out of range")
            append((smm, payload[pos : pos + psize]))
            pos += psize
    except (struct.error, DecodeError) as exc:
        raise BatchDeserializeError(f"message {index}: bad batch: {exc}") from None
    if pos != end:
        raise BatchDeserializeError(f"{end - pos} stray bytes after {num_messages} messages")
    return out


def parse_batch(payload: bytes, num_messages: int) -> list[SingleMessage]:
    """``split_batch`` as records: each member with its index. Same errors."""
    members = split_batch(bytes(payload), num_messages)
    return [SingleMessage(i, smm, data) for i, (smm, data) in enumerate(members)]


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
