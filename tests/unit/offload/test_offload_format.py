"""The object layout of offloaded ledgers: blocks, index, keys (pure, no I/O).

Byte fixtures pin Pulsar's jcloud layout (magic words, the 128-byte block header, the
``[size][entryId][bytes]`` record, the index header); Hypothesis round-trips blocks and indexes
of any shape and shows that a flipped byte anywhere that matters is detected, never decoded
into other entries.
"""

from __future__ import annotations

import struct
import uuid

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from magnetar.broker.bookkeeper.entry import LedgerEntry, frame
from magnetar.broker.offload import OffloadCorrupt, data_key, index_key, parse_key
from magnetar.broker.offload.blocks import (
    HEADER_BYTES,
    BlockBuilder,
    parse_block,
    record_bytes,
)
from magnetar.broker.offload.index import INDEX_MAGIC, LedgerSummary, OffloadIndex, build_index


def _entries(ledger_id: int, payloads: list[bytes], first: int = 0) -> list[LedgerEntry]:
    out, cumulative = [], 0
    for i, payload in enumerate(payloads):
        cumulative += len(payload)
        out.append(LedgerEntry(ledger_id, first + i, payload, cumulative))
    return out


def _pack(entries: list[LedgerEntry], target: int) -> tuple[list[bytes], list[tuple[int, int]]]:
    """Blocks as the uploader cuts them, and (first entry, offset) of each."""
    blocks: list[bytes] = []
    starts: list[tuple[int, int]] = []
    offset = 0
    builder: BlockBuilder | None = None
    for entry in entries:
        if builder is None or not builder.add(entry):
            if builder is not None:
                blocks.append(builder.build())
                offset += len(blocks[-1])
            builder = BlockBuilder(entry.entry_id, target)
            starts.append((entry.entry_id, offset))
            assert builder.add(entry)
    if builder is not None:
        blocks.append(builder.build())
    return blocks, starts


def test_block_bytes_are_pulsars_layout_with_our_checksum() -> None:
    entry = LedgerEntry(9, 4, b"hello", 105)
    builder = BlockBuilder(4, 4096)
    assert builder.add(entry)
    block = builder.build()
    stored = frame(105, b"hello")
    assert len(block) == HEADER_BYTES + record_bytes(5)
    assert block[:28] == struct.pack(">Iqqq", 0xFBDBABCB, 128, len(block), 4)
    assert block[28:128] == bytes(100)
    assert block[128:140] == struct.pack(">iq", 4 + len(stored), 4)
    assert block[140:144] == struct.pack(">I", crc32c.crc32c(stored))
    assert block[144:] == stored == struct.pack(">q", 105) + b"hello"
    parsed = parse_block(block, 9, 4)
    assert parsed.entries == [entry] and parsed.checksums == [crc32c.crc32c(stored)]


def test_an_entry_bigger_than_the_block_gets_a_block_of_its_own() -> None:
    big = _entries(1, [b"x" * 10_000, b"y"])
    builder = BlockBuilder(0, 1024)
    assert builder.add(big[0])
    assert not builder.add(big[1])
    assert builder.entry_count == 1 and len(builder.build()) == HEADER_BYTES + record_bytes(10_000)


def test_builder_refuses_out_of_order_and_tiny_blocks() -> None:
    with pytest.raises(ValueError):
        BlockBuilder(0, HEADER_BYTES)
    builder = BlockBuilder(0, 4096)
    with pytest.raises(ValueError):
        builder.add(LedgerEntry(1, 1, b"", 0))
    with pytest.raises(ValueError):
        builder.build()


payload_lists = st.lists(st.binary(max_size=700), min_size=1, max_size=60)


@settings(max_examples=150, deadline=None)
@given(payloads=payload_lists, target=st.integers(HEADER_BYTES + 1, 3000))
def test_blocks_round_trip(payloads: list[bytes], target: int) -> None:
    entries = _entries(7, payloads)
    blocks, starts = _pack(entries, target)
    decoded: list[LedgerEntry] = []
    for block, (first, _) in zip(blocks, starts, strict=True):
        parsed = parse_block(block, 7, first)
        assert len(block) <= target or len(parsed.entries) == 1
        decoded += parsed.entries
    assert decoded == entries


@settings(max_examples=200, deadline=None)
@given(payloads=payload_lists, data=st.data())
def test_a_flipped_byte_in_a_block_is_detected(payloads: list[bytes], data: st.DataObject) -> None:
    entries = _entries(3, payloads)
    builder = BlockBuilder(0, 1 << 20)
    for entry in entries:
        assert builder.add(entry)
    block = bytearray(builder.build())
    # the header's padding (28..128) is reserved and ignored, as Pulsar's; every other byte counts
    pos = data.draw(st.one_of(st.integers(0, 27), st.integers(HEADER_BYTES, len(block) - 1)))
    block[pos] ^= data.draw(st.integers(1, 255))
    with pytest.raises(OffloadCorrupt):
        parse_block(bytes(block), 3, 0)


def test_truncated_and_mislabelled_blocks_are_refused() -> None:
    builder = BlockBuilder(5, 4096)
    for entry in _entries(2, [b"a" * 50, b"b" * 50], first=5):
        assert builder.add(entry)
    block = builder.build()
    with pytest.raises(OffloadCorrupt):
        parse_block(block[:-1], 2, 5)
    with pytest.raises(OffloadCorrupt):
        parse_block(block, 2, 6)  # the index expected another first entry


@settings(max_examples=100, deadline=None)
@given(
    payloads=st.lists(st.binary(max_size=300), max_size=80),
    target=st.integers(HEADER_BYTES + 1, 2000),
    part=st.integers(1, 5000),
    extra=st.dictionaries(st.text(max_size=8), st.text(max_size=8), max_size=3),
)
def test_index_round_trip(
    payloads: list[bytes], target: int, part: int, extra: dict[str, str]
) -> None:
    entries = _entries(11, payloads)
    blocks, starts = _pack(entries, target)
    length = entries[-1].cumulative_length if entries else 0
    summary = LedgerSummary(11, len(entries) - 1, length, extra)
    index = build_index(summary, starts, sum(map(len, blocks)), part)
    decoded = OffloadIndex.decode(index.encode())
    assert decoded == index
    for entry in entries:
        b = decoded.block_of(entry.entry_id)
        assert decoded.blocks[b].first_entry_id <= entry.entry_id <= decoded.last_entry_of(b)
        assert decoded.blocks[b].part_number == decoded.blocks[b].offset // part + 1


def test_index_bytes_are_pulsars_layout_plus_a_checksum() -> None:
    summary = LedgerSummary(4, 9, 1000, {"ManagedLedgerName": "t"})
    index = build_index(summary, [(0, 0), (5, 600)], 1100, 1 << 20)
    raw = index.encode()
    meta = summary.to_json()
    magic, length, data_len, header_len, count, meta_len = struct.unpack_from(">Iiqqii", raw)
    assert (magic, length, data_len, header_len, count, meta_len) == (
        INDEX_MAGIC,
        len(raw),
        1100,
        128,
        2,
        len(meta),
    )
    assert raw[32 : 32 + meta_len] == meta
    assert struct.unpack_from(">qiqqiq", raw, 32 + meta_len) == (0, 1, 0, 5, 1, 600)
    assert struct.unpack_from(">I", raw, len(raw) - 4)[0] == crc32c.crc32c(raw[:-4])


@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_a_flipped_byte_in_an_index_is_detected(data: st.DataObject) -> None:
    index = build_index(LedgerSummary(4, 9, 1000), [(0, 0), (5, 600)], 1100, 1 << 20)
    raw = bytearray(index.encode())
    raw[data.draw(st.integers(0, len(raw) - 1))] ^= data.draw(st.integers(1, 255))
    with pytest.raises(OffloadCorrupt):
        OffloadIndex.decode(bytes(raw))


def test_index_refuses_gaps_and_blocks_past_the_end() -> None:
    with pytest.raises(OffloadCorrupt):
        build_index(LedgerSummary(1, 4, 10), [(0, 0), (2, 500)], 400, 1 << 20)
    with pytest.raises(OffloadCorrupt):
        build_index(LedgerSummary(1, 4, 10), [(1, 0)], 400, 1 << 20)
    with pytest.raises(OffloadCorrupt):
        build_index(LedgerSummary(1, 1, 10), [(0, 0), (5, 200)], 400, 1 << 20)
    empty = build_index(LedgerSummary(1, -1, 0), [], 0, 1 << 20)
    assert OffloadIndex.decode(empty.encode()).blocks == ()


def test_keys_are_pulsars_names_and_parse_back() -> None:
    attempt = uuid.UUID("6f0c3b8e-0d7e-4a43-9a57-3e7c9d9f6a11")
    assert data_key(42, attempt) == "6f0c3b8e-0d7e-4a43-9a57-3e7c9d9f6a11-ledger-42"
    assert index_key(42, attempt) == data_key(42, attempt) + "-index"
    parsed = parse_key(index_key(42, attempt))
    assert parsed is not None and (parsed.ledger_id, parsed.attempt, parsed.is_index) == (
        42,
        attempt,
        True,
    )
    for name in ("x-ledger-1", f"{attempt}-ledger-", f"{attempt}-ledger-1x", "ledger-1", ""):
        assert parse_key(name) is None
