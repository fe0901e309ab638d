"""Stored entries: the one view of an entry's bytes, as a broker stores and replays them.

Wire layout of an entry (the tail of a SEND after its command; reference §1)::

    ([0x0e01 u16][crc32c u32])          optional; the crc32c covers everything after it
    [metadataSize u32][MessageMetadata][payload ...]

``MessageMetadata`` fields read here without a full parse (proto2 tags: field << 3 | wire type)::

    1 producer_name (0x0a)   2 sequence_id (0x10)   3 publish_time (0x18)
    19 deliver_at_time (0x98 0x01, varint)    20 marker_type (0xa0 0x01, varint)
    26 uuid (0xd2 0x01, length-delimited)

Owns: ``EntryView`` (one entry read lazily: it finds the metadata once, parses it only when a
property needs it, and answers slot key, deliver-at, chunk info, message count, publish time,
payload, marker type and the checksum check), and the per-entry functions a broker's hot paths
call on bytes (``entry_slot``, ``entry_deliver_at``, ``entry_chunk``, ``entry_marker_type``,
``entry_num_messages``, ``entry_publish_time``, ``entry_metadata``), which ``EntryView``'s
properties use too: the only place that knows an entry's magic numbers and metadata tags;
``entries_metadata``, the metadata of many entries of one buffer at once (a reader decoding
entries in bulk). Also the encoder of the simplest metadata (``encode_simple_metadata``, a
producer's hot path).

Cheap paths, each giving the answer of the full ``MessageMetadata`` parse:
- ``entry_deliver_at`` / ``entry_chunk`` / ``entry_marker_type``: the metadata bytes are
  scanned for the field's tag first; without it (nearly every entry) the field is absent and
  nothing is parsed.
- ``entries_metadata``: one Python step per entry (locate its metadata); the parsing is two
  protobuf parses of all the entries together, in C: ``MetadataList`` (each entry's metadata
  one element: every element checked as the full parse checks one entry, its wire format and
  its required fields, and each entry's ``MessageMetadata`` at hand) and
  ``PlainMetadataColumns`` (the metadata concatenated: every entry's publish time in one list,
  and whether any entry has a field beyond a plain message's). What the bulk parse cannot
  decide (bytes it refuses, an entry repeating a required field) goes through
  ``entry_metadata`` entry by entry, which raises the reference error or gives the reference
  answer.
- ``entry_slot``: the metadata is parsed as ``StickyKeyView`` (only the key fields, the rest
  skipped in C) and key -> slot is memoised; whatever is unusual (a base64-flagged or
  non-UTF-8 partition key, bytes the view cannot parse, a missing required top-level field) is
  decided by the full parse, so the result (or the exception) is the reference one. On
  malformed entries only: required fields inside nested messages (a property without its value)
  are not checked, so such an entry gets its key's slot where the full parse fails.

Errors: bytes that are not an entry raise ``RemoteProtocolError`` (callers decide whether an
unreadable entry is delivered as stored, counted as one message, or refused).
Must not know: positions, topics, consumers, I/O.
"""

from __future__ import annotations

import operator
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import repeat
from typing import NamedTuple

from crc32c import crc32c as _raw_crc32c
from google.protobuf.message import DecodeError, EncodeError
from google.protobuf.unknown_fields import UnknownFieldSet

from ._errors import RemoteProtocolError
from ._hashing import NONE_KEY, key_shared_slot, sticky_key
from ._primitives import U32, crc32c, encode_varint, missing_fields
from .proto import metadata_view_pb2 as views
from .proto import pulsar_api_pb2 as pb

MAGIC_CRC32C = 0x0E01
MAGIC_CRC32C_BYTES = b"\x0e\x01"
"""The two bytes that start a checksummed SEND tail / stored entry."""
CHECKSUM_HEADER_BYTES = 6
"""The magic and the crc32c before the metadata size of a checksummed entry (written as the
literal on the per-entry paths below: a global lookup per entry there is measurable)."""

TAG_PRODUCER_NAME = b"\x0a"
TAG_SEQUENCE_ID = b"\x10"
TAG_PUBLISH_TIME = b"\x18"
TAG_DELIVER_AT_TIME = b"\x98\x01"
TAG_MARKER_TYPE = b"\xa0\x01"
TAG_UUID = b"\xd2\x01"

SLOT_MEMO_MAX = 16_384
"""Keys whose slot ``entry_slot`` remembers (process-wide; cleared when full)."""
_slot_memo: dict[bytes, int] = {}
_NONE_KEY_SLOT = key_shared_slot(NONE_KEY)
_StickyKeyView = views.StickyKeyView


class ChunkInfo(NamedTuple):
    """Chunking fields of an entry's metadata (a named tuple: made per chunk dispatched)."""

    uuid: str
    chunk_id: int
    num_chunks_from_msg: int
    total_chunk_msg_size: int

    @property
    def is_last(self) -> bool:
        return self.chunk_id == self.num_chunks_from_msg - 1


def chunk_info(metadata: pb.MessageMetadata) -> ChunkInfo | None:
    """The chunk fields when the entry is one chunk of a larger message, else ``None``
    (a consumer's rule: ``chunk_id`` and ``uuid`` present)."""
    if not metadata.HasField("chunk_id") or not metadata.HasField("uuid"):
        return None
    return ChunkInfo(
        metadata.uuid,
        metadata.chunk_id,
        metadata.num_chunks_from_msg,
        metadata.total_chunk_msg_size,
    )


_new_tuple = tuple.__new__  # ChunkInfo(...) without the NamedTuple's Python-level __new__


def _dispatch_chunk(metadata: pb.MessageMetadata) -> ChunkInfo | None:
    """A dispatcher's rule: a chunk has ``uuid`` and ``num_chunks_from_msg`` (SEND validation
    keeps ``chunk_id`` within them; absent, it is 0)."""
    if not metadata.HasField("uuid") or not metadata.HasField("num_chunks_from_msg"):
        return None
    return _new_tuple(  # type: ignore[no-any-return]
        ChunkInfo,
        (
            metadata.uuid,
            metadata.chunk_id,
            metadata.num_chunks_from_msg,
            metadata.total_chunk_msg_size,
        ),
    )


def num_messages_of(metadata: pb.MessageMetadata) -> int:
    """Messages in an entry: 1, or the batch's size (what it costs in permits)."""
    return metadata.num_messages_in_batch if metadata.HasField("num_messages_in_batch") else 1


# ----------------------------------------------------------------------------- locating


def split_entry(
    data: bytes, what: str = "entry", *, compute: bool = True
) -> tuple[int | None, int | None, int, int]:
    """(stored checksum, computed crc, metadata start, metadata end) of entry bytes; the crc is
    computed only with ``compute`` and a stored checksum. ``what`` names the bytes in errors."""
    checksum: int | None = None
    computed: int | None = None
    meta_size_at = 0
    if data[:2] == MAGIC_CRC32C_BYTES:
        if len(data) < CHECKSUM_HEADER_BYTES:
            raise RemoteProtocolError("truncated checksum")
        (checksum,) = U32.unpack_from(data, 2)
        meta_size_at = CHECKSUM_HEADER_BYTES
    if len(data) - meta_size_at < 4:
        raise RemoteProtocolError(f"{what} frame has no metadata size")
    (meta_size,) = U32.unpack_from(data, meta_size_at)
    meta_start = meta_size_at + 4
    meta_end = meta_start + meta_size
    if meta_end > len(data):
        raise RemoteProtocolError(f"metadata size {meta_size} exceeds frame")
    if checksum is not None and compute:
        computed = crc32c(memoryview(data)[meta_size_at:])
    return checksum, computed, meta_start, meta_end


def checksum_matches(data: bytes) -> bool:
    """True when entry bytes (a SEND's headers and payload) carry no checksum or one that
    matches what follows it (the broker answers a mismatch with SEND_ERROR before anything is
    stored); ``RemoteProtocolError`` when they are too short for their headers. The metadata
    itself is not looked at (``entry_metadata``). Per SEND: ``split_entry``'s checks written
    out, the CRC computed once."""
    if data[:2] != MAGIC_CRC32C_BYTES:
        if len(data) < 4:
            raise RemoteProtocolError("SEND frame has no metadata size")
        return True
    if len(data) < 10:  # CHECKSUM_HEADER_BYTES + the metadata size
        raise RemoteProtocolError(
            "truncated checksum" if len(data) < 6 else "SEND frame has no metadata size"
        )
    (checksum,) = U32.unpack_from(data, 2)
    return bool(_raw_crc32c(memoryview(data)[6:]) == checksum)


def entry_metadata(data: bytes) -> tuple[pb.MessageMetadata, int]:
    """The ``MessageMetadata`` of entry bytes and the offset where the payload starts
    (checksum not verified): the broker's per-SEND parse, and every other full parse of an
    entry. Raises ``RemoteProtocolError`` for bytes that are not an entry."""
    if type(data) is not bytes:
        data = bytes(data)
    n = len(data)
    at = 0
    if data[:2] == MAGIC_CRC32C_BYTES:
        if n < 6:  # CHECKSUM_HEADER_BYTES
            raise RemoteProtocolError("truncated checksum")
        at = 6
    if n - at < 4:
        raise RemoteProtocolError("entry frame has no metadata size")
    (meta_size,) = U32.unpack_from(data, at)
    start = at + 4
    end = start + meta_size
    if end > n:
        raise RemoteProtocolError(f"metadata size {meta_size} exceeds frame")
    metadata = pb.MessageMetadata()
    try:
        metadata.ParseFromString(data[start:end])
    except Exception as exc:  # protobuf raises DecodeError and, on odd input, others
        raise RemoteProtocolError(f"cannot parse MessageMetadata: {exc}") from None
    if not metadata.IsInitialized():
        missing = missing_fields(metadata)
        raise RemoteProtocolError(f"MessageMetadata misses required fields: {missing}")
    return metadata, end


def parse_entry_metadata(data: bytes) -> pb.MessageMetadata:
    """The ``MessageMetadata`` of entry bytes (checksum not verified: the broker checked it on
    publish). Raises ``RemoteProtocolError`` for bytes that are not an entry."""
    try:
        return entry_metadata(data)[0]
    except RemoteProtocolError:
        raise
    except Exception as exc:
        raise RemoteProtocolError(f"malformed entry: {exc}") from None


# ----------------------------------------------------------------------------- per-entry reads


def entry_num_messages(data: bytes) -> int:
    """Messages in entry bytes: 1, or the batch's size (what it costs in permits)."""
    md = parse_entry_metadata(data)
    return md.num_messages_in_batch if md.HasField("num_messages_in_batch") else 1


def entry_publish_time(data: bytes) -> int:
    """The entry's ``publish_time`` (ms)."""
    return int(parse_entry_metadata(data).publish_time)


def entry_deliver_at(data: bytes) -> int:
    """The entry's ``deliver_at_time`` (ms), 0 if it has none (a tag scan first: nothing is
    parsed when the tag is absent)."""
    off = 6 if data[:2] == MAGIC_CRC32C_BYTES else 0  # CHECKSUM_HEADER_BYTES
    size = int.from_bytes(data[off : off + 4], "big")
    if TAG_DELIVER_AT_TIME not in data[off + 4 : off + 4 + size]:
        return 0
    md = parse_entry_metadata(data)
    return md.deliver_at_time if md.HasField("deliver_at_time") else 0


def entry_chunk(data: bytes) -> ChunkInfo | None:
    """The chunk fields of a chunk entry (a dispatcher's rule: ``uuid`` and
    ``num_chunks_from_msg`` present), else None (a tag scan first)."""
    off = 6 if data[:2] == MAGIC_CRC32C_BYTES else 0  # CHECKSUM_HEADER_BYTES
    size = int.from_bytes(data[off : off + 4], "big")
    if TAG_UUID not in data[off + 4 : off + 4 + size]:
        return None
    return _dispatch_chunk(parse_entry_metadata(data))


def entry_marker_type(data: bytes) -> int:
    """The entry's ``marker_type`` (0: not a marker; a tag scan first: nothing is parsed when
    the tag is absent). Markers are entries brokers write for each other (replicated
    subscriptions, transactions): never delivered to consumers."""
    off = 6 if data[:2] == MAGIC_CRC32C_BYTES else 0  # CHECKSUM_HEADER_BYTES
    size = int.from_bytes(data[off : off + 4], "big")
    if TAG_MARKER_TYPE not in data[off + 4 : off + 4 + size]:
        return 0
    md = parse_entry_metadata(data)
    return md.marker_type if md.HasField("marker_type") else 0


def _slot_of_key(key: bytes) -> int:
    slot = _slot_memo.get(key)
    if slot is None:
        if len(_slot_memo) >= SLOT_MEMO_MAX:
            _slot_memo.clear()
        slot = _slot_memo[key] = key_shared_slot(key)
    return slot


def _slot_parsed(data: bytes) -> int:
    """The reference slot: a full ``MessageMetadata`` parse."""
    return key_shared_slot(sticky_key(parse_entry_metadata(data)))


def entry_slot(data: bytes) -> int:
    """The Key_Shared slot of an entry: Murmur3 of its outer metadata's sticky key (ordering
    key, else partition key, else ``NONE_KEY``; for a batch, its first message's), about 5x
    cheaper than the full parse (``StickyKeyView``, key -> slot memoised)."""
    off = 6 if data[:2] == MAGIC_CRC32C_BYTES else 0  # CHECKSUM_HEADER_BYTES
    start = off + 4
    end = start + int.from_bytes(data[off:start], "big")
    if end > len(data):
        return _slot_parsed(data)
    try:
        view = _StickyKeyView.FromString(data[start:end])
    except Exception:
        return _slot_parsed(data)
    if not view.IsInitialized():
        return _slot_parsed(data)
    if view.HasField("ordering_key"):
        return _slot_of_key(view.ordering_key)
    if view.HasField("partition_key"):
        key = view.partition_key
        if view.partition_key_b64_encoded:
            return _slot_parsed(data)
        if not key.isascii():
            try:
                key.decode("utf-8")
            except UnicodeDecodeError:
                return _slot_parsed(data)  # the reference fails on it
        return _slot_of_key(key)
    return _NONE_KEY_SLOT


# ----------------------------------------------------------------------------- in bulk

_LIST_TAG = b"\x0a"
"""``MetadataList.entries`` (field 1, length-delimited): one element per entry's metadata."""
_FRAMES_USUAL = 1 << 11
_FRAMES = [_LIST_TAG + encode_varint(n) for n in range(_FRAMES_USUAL)]
"""The element prefix (tag and length) of a metadata of ``n`` bytes, for the usual sizes."""
_parse_list = views.MetadataList.FromString
_parse_columns = views.PlainMetadataColumns.FromString
_u32_at = U32.unpack_from


@dataclass(frozen=True, slots=True)
class EntriesMetadata:
    """The metadata of consecutive entries of one buffer (``entries_metadata``)."""

    payload_starts: list[int]
    """Where each entry's payload starts in the buffer (it ends where the entry ends)."""
    publish_times: list[int]
    """Each entry's ``publish_time``."""
    plain: bool
    """Every entry is a plain message: one message (no batch), uncompressed, without key,
    ordering key, properties, event time, schema version, chunking, encryption, delivery time,
    marker or transaction; its payload, position and publish time are all there is to it."""
    metadata: Sequence[pb.MessageMetadata]
    """Each entry's whole ``MessageMetadata`` (parsed already; what a reader of entries that
    are not plain reads)."""

    def __len__(self) -> int:
        return len(self.payload_starts)


class _Irregular(Exception):
    """The bulk parse cannot decide: the entries go one by one."""


def entries_metadata(data: bytes, starts: Sequence[int], ends: Sequence[int]) -> EntriesMetadata:
    """The metadata of the entries ``data[starts[i]:ends[i]]`` (checksums not verified: the
    storage's), each as ``entry_metadata`` gives it, in bulk (the module docstring says how).
    Raises ``RemoteProtocolError`` for the first entry ``entry_metadata`` refuses."""
    if type(data) is not bytes:
        data = bytes(data)
    try:
        metas, payload_starts = _locate(data, starts, ends)
        framed: list[bytes] = [b""] * (2 * len(metas))
        framed[1::2] = metas
        frames = _FRAMES
        framed[0::2] = [
            frames[len(m)] if len(m) < _FRAMES_USUAL else _LIST_TAG + encode_varint(len(m))
            for m in metas
        ]
        holder = _parse_list(b"".join(framed))
        # serialising checks every element's required fields (in C; IsInitialized walks
        # them several times slower)
        holder.SerializeToString()
        columns = _parse_columns(b"".join(metas))
    except (_Irregular, struct.error, DecodeError, EncodeError, ValueError):
        return _one_by_one(data, starts, ends)
    n = len(payload_starts)
    publish = columns.publish_time
    if len(publish) != n or len(columns.producer_name) != n or len(columns.sequence_id) != n:
        return _one_by_one(data, starts, ends)  # an entry repeats a required field
    return EntriesMetadata(
        payload_starts, list(publish), not len(UnknownFieldSet(columns)), holder.entries
    )


def _locate(
    data: bytes, starts: Sequence[int], ends: Sequence[int]
) -> tuple[list[bytes], list[int]]:
    """(metadata bytes, payload start) of each entry; ``_Irregular`` when one does not fit
    in its entry."""
    metas: list[bytes] = []
    payload_starts: list[int] = []
    keep = metas.append
    begin = payload_starts.append
    unpack = _u32_at
    if all(map(data.startswith, repeat(MAGIC_CRC32C_BYTES), starts)):
        for s in starts:  # every entry has a checksum header (as clients write them)
            a = s + 10  # CHECKSUM_HEADER_BYTES and the metadata size
            b = a + unpack(data, s + 6)[0]
            keep(data[a:b])
            begin(b)
    else:
        for s in starts:
            at = s + 6 if data.startswith(MAGIC_CRC32C_BYTES, s) else s
            a = at + 4
            b = a + unpack(data, at)[0]
            keep(data[a:b])
            begin(b)
    if len(payload_starts) != len(ends) or any(map(operator.gt, payload_starts, ends)):
        raise _Irregular
    return metas, payload_starts


def _one_by_one(data: bytes, starts: Sequence[int], ends: Sequence[int]) -> EntriesMetadata:
    """``entries_metadata`` entry by entry (the reference parse, its errors)."""
    mds: list[pb.MessageMetadata] = []
    payload_starts: list[int] = []
    for s, e in zip(starts, ends, strict=True):
        md, at = entry_metadata(data[s:e])
        mds.append(md)
        payload_starts.append(s + at)
    return EntriesMetadata(
        payload_starts, [md.publish_time for md in mds], all(map(_is_plain, mds)), mds
    )


_PLAIN_FIELDS = frozenset(f.name for f in views.PlainMetadataColumns.DESCRIPTOR.fields)


def _is_plain(md: pb.MessageMetadata) -> bool:
    return all(f.name in _PLAIN_FIELDS for f, _ in md.ListFields())


# ----------------------------------------------------------------------------- the view


class EntryView:
    """One entry's bytes, read lazily: the metadata is located once and parsed only when a
    property needs the whole of it; each property gives the full parse's answer.

    ``EntryView(data)`` locates the metadata (``RemoteProtocolError`` if it cannot);
    ``EntryView.parse(data)`` also verifies the checksum and parses the metadata at once.
    """

    __slots__ = ("_metadata", "checksum", "data", "metadata_offset", "payload_offset")

    def __init__(self, data: bytes) -> None:
        data = bytes(data)
        checksum, _, start, end = split_entry(data, compute=False)
        self.data = data
        self.checksum = checksum
        self.metadata_offset = start
        self.payload_offset = end
        self._metadata: pb.MessageMetadata | None = None

    @classmethod
    def known(
        cls,
        data: bytes,
        metadata_offset: int,
        payload_offset: int,
        checksum: int | None,
        metadata: pb.MessageMetadata | None = None,
    ) -> EntryView:
        """A view of bytes already split (and maybe parsed) by the frame decoder."""
        view = cls.__new__(cls)
        view.data = data
        view.checksum = checksum
        view.metadata_offset = metadata_offset
        view.payload_offset = payload_offset
        view._metadata = metadata
        return view

    @classmethod
    def parse(cls, data: bytes, *, verify_checksum: bool = True) -> EntryView:
        """A view whose metadata is parsed (and, with ``verify_checksum``, whose CRC32C was
        checked): ``RemoteProtocolError`` when the bytes are malformed or do not match."""
        data = bytes(data)
        checksum, computed, start, end = split_entry(data, compute=verify_checksum)
        if verify_checksum and checksum is not None and computed != checksum:
            raise RemoteProtocolError(
                f"entry checksum mismatch: stored {checksum:#010x}, computed {computed or 0:#010x}"
            )
        return cls.known(data, start, end, checksum, entry_metadata(data)[0])

    def __repr__(self) -> str:
        span = f"{self.metadata_offset}:{self.payload_offset}"
        return f"<EntryView {len(self.data)} bytes metadata={span}>"

    @property
    def metadata(self) -> pb.MessageMetadata:
        """The whole ``MessageMetadata`` (parsed on first use)."""
        md = self._metadata
        if md is None:
            md = self._metadata = entry_metadata(self.data)[0]
        return md

    @property
    def metadata_bytes(self) -> bytes:
        return self.data[self.metadata_offset : self.payload_offset]

    @property
    def payload(self) -> bytes:
        """The raw payload: one message or a whole batch, possibly compressed."""
        return self.data[self.payload_offset :]

    @property
    def num_messages(self) -> int:
        """Messages in the entry: what it costs in permits (1 unless it is a batch)."""
        return num_messages_of(self.metadata)

    @property
    def publish_time(self) -> int:
        return int(self.metadata.publish_time)

    @property
    def deliver_at(self) -> int:
        """``deliver_at_time`` (ms), 0 if none."""
        if self._metadata is None and TAG_DELIVER_AT_TIME not in self.metadata_bytes:
            return 0
        md = self.metadata
        return md.deliver_at_time if md.HasField("deliver_at_time") else 0

    @property
    def chunk(self) -> ChunkInfo | None:
        """The chunk fields of a chunk entry (a dispatcher's rule), else None."""
        if self._metadata is None and TAG_UUID not in self.metadata_bytes:
            return None
        return _dispatch_chunk(self.metadata)

    @property
    def marker_type(self) -> int:
        """``marker_type`` (0: not a marker)."""
        if self._metadata is None and TAG_MARKER_TYPE not in self.metadata_bytes:
            return 0
        md = self.metadata
        return md.marker_type if md.HasField("marker_type") else 0

    @property
    def slot(self) -> int:
        """The Key_Shared slot of the entry."""
        if self._metadata is None:
            return entry_slot(self.data)
        return key_shared_slot(sticky_key(self._metadata))

    @property
    def checksum_ok(self) -> bool:
        """The stored CRC32C matches the bytes after it (True when there is none)."""
        return checksum_matches(self.data)


def encode_simple_metadata(producer_name: bytes, sequence_id: int, publish_time: int) -> bytes:
    """``MessageMetadata{producer_name, sequence_id, publish_time}`` serialised (UTF-8 name),
    the bytes protobuf writes, without building it (a producer's hot path)."""
    return b"".join(
        (
            TAG_PRODUCER_NAME,
            encode_varint(len(producer_name)),
            producer_name,
            TAG_SEQUENCE_ID,
            encode_varint(sequence_id),
            TAG_PUBLISH_TIME,
            encode_varint(publish_time),
        )
    )


__all__ = [
    "CHECKSUM_HEADER_BYTES",
    "MAGIC_CRC32C",
    "MAGIC_CRC32C_BYTES",
    "SLOT_MEMO_MAX",
    "TAG_DELIVER_AT_TIME",
    "TAG_PRODUCER_NAME",
    "TAG_PUBLISH_TIME",
    "TAG_SEQUENCE_ID",
    "TAG_UUID",
    "ChunkInfo",
    "EntriesMetadata",
    "EntryView",
    "checksum_matches",
    "chunk_info",
    "encode_simple_metadata",
    "entries_metadata",
    "entry_chunk",
    "entry_deliver_at",
    "entry_metadata",
    "entry_num_messages",
    "entry_publish_time",
    "entry_slot",
    "num_messages_of",
    "parse_entry_metadata",
    "split_entry",
]
