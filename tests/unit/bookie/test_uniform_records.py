"""``bookie.records``: stretches of equal-length records found and checked in bulk, and the
packed read paths built on them (``wire.run_spans``, ``EntryLogger.read_run``).

The reference is the record-by-record walk: every buffer, however its record lengths change,
gives the spans the walk gives, and every single corrupted byte (payload, checksum, ids) is
refused as the walk refuses it. Runs of equal-length records come back as ``range``s (what
readers' own fast paths take), and ``unframe_run`` keeps them so."""

from __future__ import annotations

import struct

import crc32c
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from magnetar.bookie import records
from magnetar.bookie.api import EntryRun
from magnetar.bookie.wire import MalformedBatch, run_spans
from magnetar.broker.bookkeeper.entry import HEADER_BYTES, frame, unframe_run

HEADER = struct.Struct(">qqqII")


def record(ledger: int, entry: int, payload: bytes) -> bytes:
    return HEADER.pack(ledger, entry, entry - 1, crc32c.crc32c(payload), len(payload)) + payload


def packed(ledger: int, first: int, payloads: list[bytes]) -> bytes:
    return b"".join(record(ledger, first + i, p) for i, p in enumerate(payloads))


def walked(data: bytes) -> tuple[list[int], list[int]]:
    starts, ends, pos = [], [], 0
    while pos < len(data):
        length = HEADER.unpack_from(data, pos)[4]
        starts.append(pos + 32)
        ends.append(pos + 32 + length)
        pos += 32 + length
    return starts, ends


# stretches of payloads of one length each: the shapes real topics have, and worse
stretches = st.lists(st.tuples(st.integers(0, 40), st.integers(1, 70)), min_size=1, max_size=6).map(
    lambda parts: [
        bytes([(i * 7 + j) % 251 for j in range(length)])
        for length, count in parts
        for i in range(count)
    ]
)


@settings(max_examples=150, deadline=None)
@given(stretches)
def test_spans_are_the_walks_however_lengths_change(payloads: list[bytes]) -> None:
    data = packed(9, 100, payloads)
    starts, ends = run_spans(data, 9, 100)
    assert (list(starts), list(ends)) == walked(data)


@settings(max_examples=150, deadline=None)
@given(stretches, st.data())
def test_any_flipped_payload_or_checksum_byte_is_refused(payloads: list[bytes], data) -> None:
    buf = bytearray(packed(9, 100, payloads))
    starts, ends = walked(bytes(buf))
    i = data.draw(st.integers(0, len(payloads) - 1))
    field = data.draw(st.sampled_from(["payload", "checksum"]))
    if field == "payload" and ends[i] == starts[i]:
        field = "checksum"
    if field == "payload":
        at = data.draw(st.integers(starts[i], ends[i] - 1))
    else:
        at = starts[i] - 8 + data.draw(st.integers(0, 3))
    buf[at] ^= 1 << data.draw(st.integers(0, 7))
    with pytest.raises(MalformedBatch, match=rf"9:{100 + i}\b.*checksum"):
        run_spans(bytes(buf), 9, 100)


@pytest.mark.parametrize("bad", ["ledger", "entry"])
def test_a_foreign_record_inside_a_run_of_one_length_is_refused(bad: str) -> None:
    payloads = [b"x" * 20] * 50
    parts = [record(9, i, p) for i, p in enumerate(payloads)]
    parts[37] = record(8, 37, payloads[37]) if bad == "ledger" else record(9, 99, payloads[37])
    with pytest.raises(MalformedBatch, match="where 9:37 was expected"):
        run_spans(b"".join(parts), 9, 0)


def test_a_run_of_one_length_is_ranges_and_unframed_stays_ranges() -> None:
    stored = [frame(10 * (i + 1), b"%09d" % i) for i in range(300)]
    data = packed(3, 0, stored)
    starts, ends = run_spans(data, 3, 0)
    assert type(starts) is range and type(ends) is range
    entries = unframe_run(EntryRun(3, 0, data, starts, ends))
    assert type(entries.starts) is range
    assert entries.payloads() == [b"%09d" % i for i in range(300)]
    assert entries.starts[0] == starts[0] + HEADER_BYTES


def test_unframing_a_run_of_entries_too_short_for_the_header_is_refused() -> None:
    data = packed(3, 0, [b"abc"] * 10)
    starts, ends = run_spans(data, 3, 0)
    with pytest.raises(Exception, match="has no header"):
        unframe_run(EntryRun(3, 0, data, starts, ends))


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 3000), st.integers(0, 300))
def test_the_bulk_checksum_agrees_with_each_rows(k: int, length: int) -> None:
    rng = np.random.default_rng(k * 1000 + length)
    rows = rng.integers(0, 256, size=(k, length), dtype=np.uint8)
    sums = np.array([crc32c.crc32c(r.tobytes()) for r in rows], dtype=np.uint32)
    assert records.crc32c_rows_match(rows, sums)
    wrong = sums.copy()
    wrong[rng.integers(0, k)] ^= np.uint32(1 << int(rng.integers(0, 32)))
    assert not records.crc32c_rows_match(rows, wrong)


def test_uniform_records_stops_at_a_length_an_id_or_the_limit() -> None:
    data = packed(1, 0, [b"a" * 10] * 6 + [b"b" * 11] * 5)
    assert records.uniform_records(data, 0, 1, 0, 100)[:2] == (6, 10)
    assert records.uniform_records(data, 6 * 42, 1, 6, 100)[:2] == (5, 11)
    assert records.uniform_records(data, 0, 1, 0, 5)[:2] == (5, 10)
    assert records.uniform_records(data, 0, 2, 0, 100)[0] == 0  # another ledger's
    assert records.uniform_records(data, 0, 1, 0, 3)[0] == 0  # too few for bulk


def _log_of(tmp_path, parts: list[bytes]):  # type: ignore[no-untyped-def]
    from magnetar.bookie.entry_log import LOG_HEADER_LEN, EntryLogger
    from magnetar.bookie.files import OsFileSystem

    logger = EntryLogger(OsFileSystem(), str(tmp_path))
    logger.open()
    logger.write(parts, sum(map(len, parts)))
    logger.sync()
    return logger, logger.current_log_id, LOG_HEADER_LEN


@pytest.mark.parametrize(
    ("first_stretch", "last", "max_bytes", "count"),
    [
        (120, 199, 1 << 20, 160),  # the length changes after 120 records: the walk goes on
        (120, 99, 1 << 20, 100),  # the last entry asked
        (120, 199, 50 * 20, 50),  # the byte budget, within the run of one length
        (10, 199, 300, 14),  # past the change: the walk's own budget check (200 + 4 * 21)
    ],
)
def test_read_run_takes_a_run_of_one_length_in_bulk_then_walks_on(
    tmp_path, first_stretch: int, last: int, max_bytes: int, count: int
) -> None:  # type: ignore[no-untyped-def]
    payloads = [b"%020d" % i for i in range(first_stretch)]
    payloads += [b"%021d" % i for i in range(first_stretch, first_stretch + 40)]
    parts = [record(5, i, p) for i, p in enumerate(payloads)] + [record(6, 0, b"other")]
    logger, log_id, offset = _log_of(tmp_path, parts)
    try:
        block, got, size = logger.read_run(log_id, offset, 5, 0, last, max_bytes)
        assert got == count
        assert bytes(block) == b"".join(parts[:count])
        assert size == sum(map(len, payloads[:count]))
    finally:
        logger.close()
