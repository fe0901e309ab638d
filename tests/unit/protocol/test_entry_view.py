"""The one view of a stored entry: ``EntryView`` and the per-entry functions agree with the
full ``MessageMetadata`` parse.

- ``entry_slot`` (metadata parsed as the small ``StickyKeyView``, key -> slot memoised) equals
  the slot of the full parse, for generated metadata (any key kind, checksum or not,
  properties, batches, delays) and on garbage it either equals it or the reference fails too.
- ``entry_deliver_at`` / ``entry_chunk`` (a tag scan before any parse), ``entry_num_messages``,
  ``entry_publish_time`` and every ``EntryView`` property give the full parse's answers; the
  tag scans parse nothing when the tag is absent.
- The checksum check (``EntryView.parse``, ``checksum_ok``) catches a flipped payload bit.
"""

from __future__ import annotations

import base64
import struct

import crc32c
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from magnetar.client.protocol import (
    SLOT_MEMO_MAX,
    ChunkInfo,
    EntryView,
    RemoteProtocolError,
    entry_chunk,
    entry_deliver_at,
    entry_num_messages,
    entry_publish_time,
    entry_slot,
    key_shared_slot,
    parse_entry_metadata,
    sticky_key,
)
from magnetar.client.protocol import _entry as entry_module
from magnetar.client.protocol.proto import pulsar_api_pb2 as pb


def stored(md: pb.MessageMetadata, payload: bytes = b"payload", *, checksum: bool) -> bytes:
    raw = md.SerializeToString()
    body = struct.pack(">I", len(raw)) + raw + payload
    if checksum:
        return b"\x0e\x01" + struct.pack(">I", crc32c.crc32c(body)) + body
    return body


def reference(data: bytes) -> int:
    return key_shared_slot(sticky_key(EntryView.parse(data, verify_checksum=False).metadata))


keys = st.one_of(st.text(max_size=20), st.text(alphabet="abc-0123", max_size=8))


@st.composite
def metadatas(draw: st.DrawFn) -> pb.MessageMetadata:
    md = pb.MessageMetadata(
        producer_name=draw(st.text(max_size=12)),
        sequence_id=draw(st.integers(0, 2**64 - 1)),
        publish_time=draw(st.integers(0, 2**64 - 1)),
    )
    for k, v in draw(st.lists(st.tuples(keys, keys), max_size=3)):
        md.properties.add(key=k, value=v)
    kind = draw(st.sampled_from(["none", "partition", "b64", "ordering", "both"]))
    if kind in ("partition", "both"):
        md.partition_key = draw(keys)
    if kind == "b64":
        md.partition_key = base64.b64encode(draw(st.binary(max_size=12))).decode()
        md.partition_key_b64_encoded = True
    if kind in ("ordering", "both"):
        md.ordering_key = draw(st.binary(max_size=12))
    if draw(st.booleans()):
        md.num_messages_in_batch = draw(st.integers(1, 1000))
    if draw(st.booleans()):
        md.deliver_at_time = draw(st.integers(0, 2**62))
    if draw(st.booleans()):
        md.uncompressed_size = draw(st.integers(0, 2**31))
    if draw(st.booleans()):
        md.event_time = draw(st.integers(0, 2**63))
    chunk = draw(st.sampled_from(["none", "whole", "uuid-only", "no-id"]))
    if chunk != "none":
        md.uuid = draw(st.text(max_size=8))
    if chunk in ("whole", "no-id"):
        md.num_chunks_from_msg = draw(st.integers(1, 10))
        md.total_chunk_msg_size = draw(st.integers(0, 10_000))
    if chunk == "whole":
        md.chunk_id = draw(st.integers(0, md.num_chunks_from_msg - 1))
    return md


def full_parse_chunk(md: pb.MessageMetadata) -> ChunkInfo | None:
    """A dispatcher's chunk rule on the full parse: ``uuid`` and ``num_chunks_from_msg``."""
    if not md.HasField("uuid") or not md.HasField("num_chunks_from_msg"):
        return None
    return ChunkInfo(md.uuid, md.chunk_id, md.num_chunks_from_msg, md.total_chunk_msg_size)


# ---------------------------------------------------------------- the slot


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(metadatas(), st.booleans())
def test_slot_from_bytes_equals_the_full_parse(md: pb.MessageMetadata, checksum: bool) -> None:
    data = stored(md, checksum=checksum)
    assert entry_slot(data) == reference(data)
    assert 0 <= entry_slot(data) < 65536


def test_slot_from_bytes_on_the_usual_key_kinds() -> None:
    base = {"producer_name": "p", "sequence_id": 1, "publish_time": 2}
    cases = [
        pb.MessageMetadata(**base),
        pb.MessageMetadata(**base, partition_key="key-1"),
        pb.MessageMetadata(**base, partition_key="ключ"),  # non-ASCII UTF-8
        pb.MessageMetadata(**base, partition_key="", ordering_key=b""),  # present, empty
        pb.MessageMetadata(
            **base,
            partition_key=base64.b64encode(b"\x00\xff").decode(),
            partition_key_b64_encoded=True,
        ),
        pb.MessageMetadata(**base, partition_key="pk", ordering_key=b"ok"),
    ]
    slots = [entry_slot(stored(md, checksum=False)) for md in cases]
    assert slots == [reference(stored(md, checksum=False)) for md in cases]
    assert len(set(slots)) == len(slots)  # the key kinds really differ


@settings(max_examples=400, deadline=None)
@given(metadatas(), st.data())
def test_slot_from_bytes_on_damaged_bytes_equals_or_the_reference_fails(
    md: pb.MessageMetadata, data: st.DataObject
) -> None:
    raw = bytearray(stored(md, checksum=False))
    for _ in range(data.draw(st.integers(1, 3))):
        at = data.draw(st.integers(0, len(raw) - 1))
        raw[at] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(raw)))
    damaged = bytes(raw[:cut])
    try:
        want = reference(damaged)
    except Exception:
        return  # the dispatcher maps an unparsable entry to its fixed slot either way
    assert entry_slot(damaged) == want


@pytest.mark.parametrize(
    "meta",
    [
        pytest.param(
            pb.MessageMetadata(partition_key="k").SerializePartialToString(), id="no-required"
        ),
        pytest.param(b"\x00\x01", id="garbage"),
        pytest.param(
            b"\x0a\x01p\x10\x01\x18\x01\x32\x02\xff\xfe",  # partition_key not UTF-8
            id="key-not-utf8",
        ),
    ],
)
def test_slot_from_bytes_refuses_what_the_parse_refuses(meta: bytes) -> None:
    data = struct.pack(">I", len(meta)) + meta
    with pytest.raises(RemoteProtocolError):
        reference(data)
    with pytest.raises(RemoteProtocolError):
        entry_slot(data)


def test_slot_memo_is_bounded() -> None:
    entry_module._slot_memo.clear()
    base = {"producer_name": "p", "sequence_id": 1, "publish_time": 2}
    for i in range(SLOT_MEMO_MAX + 10):
        md = pb.MessageMetadata(**base, partition_key=f"k{i}")
        entry_slot(stored(md, checksum=False))
    assert len(entry_module._slot_memo) <= SLOT_MEMO_MAX


# ---------------------------------------------------------------- every other field


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(metadatas(), st.booleans(), st.binary(max_size=40))
def test_view_and_functions_equal_the_full_parse(
    md: pb.MessageMetadata, checksum: bool, payload: bytes
) -> None:
    data = stored(md, payload, checksum=checksum)
    full = parse_entry_metadata(data)
    n = full.num_messages_in_batch if full.HasField("num_messages_in_batch") else 1
    deliver_at = full.deliver_at_time if full.HasField("deliver_at_time") else 0
    chunk = full_parse_chunk(full)
    assert entry_num_messages(data) == n
    assert entry_publish_time(data) == full.publish_time
    assert entry_deliver_at(data) == deliver_at
    assert entry_chunk(data) == chunk
    lazy, eager = EntryView(data), EntryView.parse(data)
    for view in (lazy, eager):
        assert view.payload == payload
        assert view.num_messages == n
        assert view.publish_time == full.publish_time
        assert view.deliver_at == deliver_at
        assert view.chunk == chunk
        assert view.slot == reference(data)
        assert view.metadata == full
        assert view.checksum_ok
        assert (view.checksum is not None) == checksum


def test_tag_scans_parse_nothing_when_the_tag_is_absent() -> None:
    """Metadata that would not parse, but holds neither tag: no delay, not a chunk (a full
    parse would have raised)."""
    garbage = b"\x0a\xff\x00"  # a length running past the metadata
    data = struct.pack(">I", len(garbage)) + garbage + b"payload"
    with pytest.raises(RemoteProtocolError):
        parse_entry_metadata(data)
    assert entry_deliver_at(data) == 0 and entry_chunk(data) is None
    view = EntryView(data)
    assert view.deliver_at == 0 and view.chunk is None and view.payload == b"payload"
    with pytest.raises(RemoteProtocolError):
        view.metadata  # noqa: B018 - the property parses


def test_a_flipped_payload_bit_fails_the_checksum() -> None:
    md = pb.MessageMetadata(producer_name="p", sequence_id=1, publish_time=2)
    data = bytearray(stored(md, b"payload", checksum=True))
    data[-1] ^= 1
    assert not EntryView(bytes(data)).checksum_ok
    with pytest.raises(RemoteProtocolError, match="checksum"):
        EntryView.parse(bytes(data))
    assert EntryView.parse(bytes(data), verify_checksum=False).payload == b"payloae"


def test_an_entry_without_metadata_size_is_refused_at_once() -> None:
    with pytest.raises(RemoteProtocolError):
        EntryView(b"\x00\x00")


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=64), st.booleans())
def test_garbage_only_ever_raises_the_codec_error(raw: bytes, magic: bool) -> None:
    """Whatever the bytes, every reader answers or raises ``RemoteProtocolError``."""
    data = (b"\x0e\x01" + raw) if magic else raw
    readers = [
        entry_slot,
        entry_deliver_at,
        entry_chunk,
        entry_num_messages,
        entry_publish_time,
        lambda d: EntryView.parse(d),
        lambda d: EntryView(d).metadata,
        lambda d: EntryView(d).slot,
        lambda d: EntryView(d).deliver_at,
        lambda d: EntryView(d).chunk,
        lambda d: EntryView(d).checksum_ok,
    ]
    for read in readers:
        try:
            read(data)
        except RemoteProtocolError:
            pass
