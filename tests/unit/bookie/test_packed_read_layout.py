"""``wire.run_spans``: a packed read's buffer checked in one pass (layout, ledger, consecutive
entry ids, every checksum) on byte fixtures, and ``unframe_run`` / ``LedgerEntries`` of
BookKeeper's entry framing over it."""

from __future__ import annotations

import struct

import crc32c
import pytest

from magnetar.bookie.api import EntryRun
from magnetar.bookie.wire import MalformedBatch, run_spans
from magnetar.broker.bookkeeper.entry import (
    HEADER_BYTES,
    LedgerEntries,
    LedgerEntry,
    frame,
    unframe_run,
)
from magnetar.broker.bookkeeper.errors import EntryCorrupt

HEADER = struct.Struct(">qqqII")


def record(ledger: int, entry: int, payload: bytes, crc: int | None = None) -> bytes:
    checksum = crc32c.crc32c(payload) if crc is None else crc
    return HEADER.pack(ledger, entry, entry - 1, checksum, len(payload)) + payload


def test_spans_of_a_good_run() -> None:
    data = record(7, 4, b"abc") + record(7, 5, b"") + record(7, 6, b"xy")
    starts, ends = run_spans(data, 7, 4)
    assert starts == [32, 67, 99] and ends == [35, 67, 101]
    assert [data[a:b] for a, b in zip(starts, ends, strict=True)] == [b"abc", b"", b"xy"]


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (b"", "empty"),
        (record(7, 4, b"abc")[:20], "truncated"),
        (record(7, 4, b"abc") + b"\x00" * 10, "truncated"),
        (record(7, 4, b"abcd")[:-1], "runs past the end"),
        (record(7, 4, b"abc", crc=1), "checksum"),
        (record(8, 4, b"abc"), "8:4 where 7:4"),
        (record(7, 4, b"a") + record(7, 6, b"b"), "7:6 where 7:5"),
        (record(7, 3, b"a"), "7:3 where 7:4"),
    ],
)
def test_what_does_not_verify_is_refused(data: bytes, match: str) -> None:
    with pytest.raises(MalformedBatch, match=match):
        run_spans(data, 7, 4)


def test_a_run_unframed_gives_the_entries_unframe_gives() -> None:
    stored = [frame(10, b"hello"), frame(12, b"yo"), frame(12, b"")]
    data = b"".join(record(3, i, s) for i, s in enumerate(stored))
    starts, ends = run_spans(data, 3, 0)
    entries = unframe_run(EntryRun(3, 0, data, starts, ends))
    assert len(entries) == 3 and entries.last_entry_id == 2
    assert entries.payloads() == [b"hello", b"yo", b""]
    assert entries.entries() == [
        LedgerEntry(3, 0, b"hello", 10),
        LedgerEntry(3, 1, b"yo", 12),
        LedgerEntry(3, 2, b"", 12),
    ]
    again = LedgerEntries.of(entries.entries())
    assert again.entries() == entries.entries() and again.first_entry_id == 0


def test_an_entry_without_its_framing_header_is_corrupt() -> None:
    data = record(3, 0, b"short")
    starts, ends = run_spans(data, 3, 0)
    assert ends[0] - starts[0] < HEADER_BYTES
    with pytest.raises(EntryCorrupt):
        unframe_run(EntryRun(3, 0, data, starts, ends))
