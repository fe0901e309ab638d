"""Batched payloads: one entry holding N messages.

Wire layout of a batch payload (after decompression; reference §2.6)::

    N x ( [u32 big-endian size][SingleMessageMetadata][payload_size bytes] )

The entry's outer MessageMetadata has ``num_messages_in_batch = N``; its *presence* (not its
value) marks the entry as a batch. Compression, if any, covers the whole concatenation and is
undone by the caller before ``parse_batch``.

Chunking (a large message as K entries sharing ``uuid``) is an entry's metadata: ``_entry``.

Must not know: compression codecs, consumers, receive queues.
"""

from __future__ import annotations

import functools
import itertools
import re
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from google.protobuf.message import DecodeError

from ._errors import BatchDeserializeError, LocalProtocolError
from ._primitives import encode_varint
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


_HIGH_BITS = 0x80
_LOW_BYTE = re.compile(rb"[\x00-\x7f]")
"""A byte that ends a varint: none may appear inside one."""
_LOW_BYTES = tuple(bytes((i | 0x80,)) for i in range(128))
"""``_LOW_BYTES[v & 0x7F]``: the first byte of the varint of any ``v >= 128``."""


def encode_plain_batch(payloads: Sequence[bytes], first_sequence_id: int) -> bytes:
    """A batch payload of plain messages: member ``i`` carries
    ``SingleMessageMetadata{payload_size, sequence_id = first_sequence_id + i}`` and nothing
    else. The bytes are exactly those of
    ``build_batch((SingleMessageMetadata(sequence_id=first + i), p) for i, p in ...)``
    (a unit test checks it); the producer's batch path and ``Producer.send_batch`` use it.

    Per member: the size prefix, ``0x18 varint(payload_size) 0x40 varint(sequence_id)`` and
    the payload; the varint of consecutive sequence ids shares every byte but the first,
    so only that byte is looked up per member (the rest is re-encoded every 128 ids)."""
    if first_sequence_id < 0:
        raise LocalProtocolError(f"negative sequence id {first_sequence_id}")
    parts: list[bytes] = []
    append = parts.append
    pack = _U32.pack
    low = _LOW_BYTES
    seq = first_sequence_id
    tail = b""  # varint(seq >> 7) while seq >= 128
    tail_of = -1
    size_cache: dict[int, bytes] = {}
    for payload in payloads:
        n = len(payload)
        ps = size_cache.get(n)
        if ps is None:
            ps = size_cache[n] = b"\x18" + encode_varint(n) + b"\x40"
        if seq < 0x80:
            smm = ps + encode_varint(seq)
        else:
            hi = seq >> 7
            if hi != tail_of:
                tail_of = hi
                tail = encode_varint(hi)
            smm = ps + low[seq & 0x7F] + tail
        append(pack(len(smm)))
        append(smm)
        append(payload)
        seq += 1
    return b"".join(parts)


def scan_batch(payload: bytes, num_messages: int) -> list[int]:
    """Where each member of an uncompressed batch payload lies, without building metadata
    objects: ``[metadata_start, payload_start, payload_end]`` per member, flattened (member
    ``i`` at ``3 * i``); the metadata ends where the payload starts. The lazy decoding of
    received batches reads payloads from it and parses a member's ``SingleMessageMetadata``
    only when asked.

    A member whose metadata holds only ``payload_size`` (field 3) and optionally
    ``sequence_id`` (field 8), in that order (as our producer and the official clients
    write plain messages), is read by hand and its ``metadata_start`` is given as ``-1``:
    there is nothing in it for a ``Message``. Any other member is parsed with protobuf.
    Same errors as ``split_batch``."""
    if num_messages < 0:
        raise BatchDeserializeError(f"negative message count {num_messages}")
    runs = plain_runs(payload, num_messages)
    if runs is not None:  # members alike, found in C: their spans made of ranges
        out = [-1] * (3 * num_messages)
        chain = itertools.chain.from_iterable
        out[1::3] = chain(range(at, at + k * stride, stride) for at, stride, _, k in runs)
        out[2::3] = chain(range(at + n, at + n + k * stride, stride) for at, stride, n, k in runs)
        return out
    out = []
    append = out.append
    unpack = _U32.unpack_from
    parse = _parse_smm
    low_byte = _LOW_BYTE.search
    pos = 0
    end = len(payload)
    index = 0
    try:
        for index in range(num_messages):
            (size,) = unpack(payload, pos)
            start = pos + 4
            md_end = start + size
            if md_end > end:
                raise BatchDeserializeError(f"message {index}: metadata size {size} exceeds batch")
            psize = -1
            if size >= 2 and payload[start] == 0x18:  # payload_size first
                b1 = payload[start + 1]
                if b1 < _HIGH_BITS:
                    at = start + 2
                    value = b1
                elif size >= 3 and payload[start + 2] < _HIGH_BITS:
                    at = start + 3
                    value = (b1 & 0x7F) | (payload[start + 2] << 7)
                else:
                    at = md_end + 1
                    value = -1
                if at == md_end or (
                    at < md_end - 1
                    and payload[at] == 0x40  # sequence_id: one varint up to the end
                    and payload[md_end - 1] < _HIGH_BITS
                    and md_end - at <= 11
                    and low_byte(payload, at + 1, md_end - 1) is None
                ):
                    psize = value
            md_start = -1
            if psize < 0:
                md_start = start
                smm = parse(payload[start:md_end])
                if not smm.HasField("payload_size"):
                    raise BatchDeserializeError(f"message {index}: no payload size")
                psize = smm.payload_size
            pos = md_end + psize
            if psize < 0 or pos > end:
                raise BatchDeserializeError(f"message {index}: payload size {psize} out of range")
            append(md_start)
            append(md_end)
            append(pos)
    except (struct.error, DecodeError) as exc:
        raise BatchDeserializeError(f"message {index}: bad batch: {exc}") from None
    if pos != end:
        raise BatchDeserializeError(f"{end - pos} stray bytes after {num_messages} messages")
    return out


PlainRun = tuple[int, int, int, int]
"""Consecutive plain members alike: (first payload start, stride, payload size, count)."""

PLAIN_RUNS_MAX = 16
"""Runs ``plain_runs`` finds in one batch before it leaves the batch to ``scan_batch``."""
PLAIN_SINGLES_MAX = 2
"""Runs of one member it finds before it does (members of varying sizes: each its own run;
a batch of one size has one at most each side of a sequence id's varint growing a byte)."""


def plain_runs(payload: bytes, num_messages: int) -> list[PlainRun] | None:
    """The members of an uncompressed batch payload as runs of plain members alike, found in
    C: ``[(start, stride, size, count), ...]``, member ``j`` of a run has its payload at
    ``start + j * stride`` for ``size`` bytes. None when a member is not plain (its metadata
    holds more than ``payload_size`` and ``sequence_id``, as ``scan_batch`` says), the batch
    is irregular (payload sizes that vary: more than ``PLAIN_SINGLES_MAX`` runs of one member,
    or ``PLAIN_RUNS_MAX`` runs in all) or malformed:
    the caller then uses ``scan_batch``, which says what is wrong.

    Members alike share their size prefix, ``0x18 varint(payload_size)``, the length of
    their ``0x40 varint(sequence_id)`` and their payload size, so a run is one regular
    expression matched over the buffer (``_plain_member``); a batch of messages of one size
    has one run, or two where its sequence ids pass a power of 128."""
    runs: list[PlainRun] = []
    pos, end, left = 0, len(payload), num_messages
    singles = 0
    while left > 0:
        if len(runs) == PLAIN_RUNS_MAX:
            return None
        head = _plain_head(payload, pos, end)
        if head is None:
            return None
        prefix, seq_bytes, size = head
        stride = len(prefix) + (seq_bytes + 1 if seq_bytes else 0) + size
        if left == 1 or not payload.startswith(prefix, pos + stride):
            # a run of one (its metadata read by _plain_head): at a sequence id's varint
            # growing a byte, or members of varying sizes, left to scan_batch after a few
            singles += 1
            if singles > PLAIN_SINGLES_MAX or pos + stride > end:
                return None
            count = 1
        else:
            m = _plain_member(prefix, seq_bytes, size).match(payload, pos)
            count = 0 if m is None else min(left, (m.end() - pos) // stride)
            if count == 0:
                return None
        runs.append((pos + stride - size, stride, size, count))
        pos += count * stride
        left -= count
    return runs if pos == end else None


def _plain_head(payload: bytes, pos: int, end: int) -> tuple[bytes, int, int] | None:
    """The member at ``pos`` when it is plain: (its bytes up to and with its payload size's
    varint, its sequence id's varint length (0: none), its payload size)."""
    if pos + 6 > end:
        return None
    (md_size,) = _U32.unpack_from(payload, pos)
    start = pos + 4
    md_end = start + md_size
    if md_size < 2 or md_end > end or payload[start] != 0x18:
        return None
    at, size, shift = start + 1, 0, 0
    while True:
        if at >= md_end or shift > 63:
            return None
        byte = payload[at]
        size |= (byte & 0x7F) << shift
        at += 1
        if byte < _HIGH_BITS:
            break
        shift += 7
    if at == md_end:
        return payload[pos:at], 0, size
    seq_bytes = md_end - at - 1
    if payload[at] != 0x40 or not 1 <= seq_bytes <= 10 or payload[md_end - 1] >= _HIGH_BITS:
        return None
    if _LOW_BYTE.search(payload, at + 1, md_end - 1) is not None:
        return None
    return payload[pos:at], seq_bytes, size


@functools.lru_cache(maxsize=64)
def _plain_member(prefix: bytes, seq_bytes: int, size: int) -> re.Pattern[bytes]:
    """Members alike, as many as follow each other: the prefix, a sequence id's varint of
    ``seq_bytes`` bytes (continuation bytes, then a last byte), the payload."""
    seq = b"\\x40[\\x80-\\xff]{%d}[\\x00-\\x7f]" % (seq_bytes - 1) if seq_bytes else b""
    return re.compile(b"(?:%s%s.{%d})*" % (re.escape(prefix), seq, size), re.DOTALL)


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
