"""Journal: record round trip, group commit ordering, torn/corrupt tails, rollover, trimming.

Uses a tmp dir through the injectable file layer (``FaultyFileSystem`` holds fsyncs)."""

from __future__ import annotations

import asyncio
import logging
import os
import pathlib
import tracemalloc

import pytest
from crc32c import crc32c

from magnetar.bookie.files import FaultyFileSystem, ReadFile
from magnetar.bookie.journal import ENTRY_HEADER as H
from magnetar.bookie.journal import (
    FILE_HEADER,
    FILE_HEADER_LEN,
    JOURNAL_MAGIC,
    JOURNAL_VERSION,
    RECORD_HEADER_LEN,
    ZERO_MARK,
    Journal,
    JournalFailed,
    ReplayedEntry,
    ReplayedMeta,
    ReplayStats,
    decode_body,
    encode_entries,
    encode_fence,
    encode_master_key,
    frame,
    list_journal_ids,
    replay,
)


def entries_body(ledger: int, first: int, count: int, size: int = 100) -> bytes:
    parts = []
    for e in range(first, first + count):
        payload = bytes([e % 251]) * size
        parts += [H.pack(ledger, e, e - 1, crc32c(payload), len(payload)), payload]
    return encode_entries(count, parts)


async def wait_event(event: object, timeout_s: float = 5.0) -> bool:
    return await asyncio.to_thread(event.wait, timeout_s)  # type: ignore[attr-defined]


async def test_round_trip_and_group_future_after_fsync(tmp_path: pathlib.Path) -> None:
    fs = FaultyFileSystem()
    j = Journal(fs, str(tmp_path), max_group_wait_ms=1.0)
    j.start()
    fs.hold_fsync()
    f1 = j.append(*frame(entries_body(1, 0, 3)))
    f2 = j.append(*frame(encode_fence(1)))
    assert f1 is f2, "records of one loop iteration share a group"
    assert await wait_event(fs.fsync_waiting), "the group's fdatasync started"
    await asyncio.sleep(0)
    assert not f1.done(), "an add is not acknowledged before its group's fdatasync returns"
    # Double buffering: the next group accumulates while the sync is held.
    f3 = j.append(*frame(encode_master_key(2, b"key")))
    assert f3 is not f1
    fs.release_fsync()
    await asyncio.wait_for(asyncio.gather(f1, f3), 5)
    await j.close()

    stats = ReplayStats()
    records = [
        rec for _, body in replay(fs, str(tmp_path), ZERO_MARK, stats) for rec in decode_body(body)
    ]
    entries = [r for r in records if isinstance(r, ReplayedEntry)]
    metas = [r for r in records if isinstance(r, ReplayedMeta)]
    assert [e.entry_id for e in entries] == [0, 1, 2]
    assert entries[1].payload == bytes([1]) * 100
    assert [(m.kind, m.ledger_id) for m in metas] == [(3, 1), (2, 2)]
    assert metas[1].master_key == b"key"
    assert stats.corrupt_tails == []


async def test_size_threshold_hands_off_group_without_waiting(tmp_path: pathlib.Path) -> None:
    fs = FaultyFileSystem()
    j = Journal(fs, str(tmp_path), max_group_wait_ms=10_000, group_bytes_max=4096)
    j.start()
    fut = j.append(*frame(entries_body(1, 0, 50)))  # > 4 KB: handed off at once
    await asyncio.wait_for(fut, 5)
    assert j.statistics().groups_synced == 1
    await j.close()


def _write_journal(tmp_path: pathlib.Path, batches: int) -> str:
    async def go() -> None:
        j = Journal(FaultyFileSystem(), str(tmp_path))
        j.start()
        for b in range(batches):
            await j.append(*frame(entries_body(7, b * 10, 10)))
        await j.close()

    asyncio.run(go())
    (jid,) = list_journal_ids(FaultyFileSystem(), str(tmp_path))
    return str(tmp_path / f"{jid:016x}.txn")


def _replayed_ids(tmp_path: pathlib.Path, stats: ReplayStats) -> list[int]:
    fs = FaultyFileSystem()
    return [
        r.entry_id
        for _, body in replay(fs, str(tmp_path), ZERO_MARK, stats)
        for r in decode_body(body)
        if isinstance(r, ReplayedEntry)
    ]


@pytest.mark.parametrize("damage", ["truncate", "flip"])
def test_torn_or_corrupt_tail_is_detected_logged_and_skipped(
    tmp_path: pathlib.Path, damage: str, caplog: pytest.LogCaptureFixture
) -> None:
    path = _write_journal(tmp_path, 3)
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        if damage == "truncate":
            f.truncate(size - 17)
        else:
            f.seek(size - 40)
            byte = f.read(1)
            f.seek(size - 40)
            f.write(bytes([byte[0] ^ 0xFF]))
    stats = ReplayStats()
    with caplog.at_level(logging.WARNING, logger="magnetar.bookie.journal"):
        ids = _replayed_ids(tmp_path, stats)
    assert ids == list(range(20)), "earlier records intact, the damaged last one skipped"
    assert len(stats.corrupt_tails) == 1
    bad_path, offset, _reason = stats.corrupt_tails[0]
    assert bad_path == path and 0 < offset < size
    assert any(path in r.getMessage() and str(offset) in r.getMessage() for r in caplog.records)


async def test_rollover_replay_from_mark_and_trim(tmp_path: pathlib.Path) -> None:
    fs = FaultyFileSystem()
    j = Journal(fs, str(tmp_path), file_size_max=8 * 1024)
    j.start()
    marks = []
    for b in range(10):
        await j.append(*frame(entries_body(1, b * 20, 20)))  # ~2.7 KB each
        marks.append(j.current_mark())
    ids = list_journal_ids(fs, str(tmp_path))
    assert len(ids) >= 3, ids
    # Replay from the mark after batch 5 yields only batches 6..9.
    from_mark = [
        r.entry_id
        for _, body in replay(fs, str(tmp_path), marks[5])
        for r in decode_body(body)
        if isinstance(r, ReplayedEntry)
    ]
    assert from_mark == list(range(120, 200))
    removed = j.trim(marks[5])
    assert removed and all(i < marks[5].file_id for i in removed)
    assert min(list_journal_ids(fs, str(tmp_path))) == marks[5].file_id
    await j.close()


async def test_write_failure_fails_group_and_journal(tmp_path: pathlib.Path) -> None:
    fs = FaultyFileSystem()
    failures: list[OSError] = []
    j = Journal(fs, str(tmp_path), on_failure=failures.append)
    j.start()
    await j.append(*frame(encode_fence(1)))
    fs.fail_writes()
    fut = j.append(*frame(encode_fence(2)))
    with pytest.raises(JournalFailed):
        await asyncio.wait_for(fut, 5)
    assert j.failed and len(failures) == 1
    with pytest.raises(JournalFailed):
        j.append(*frame(encode_fence(3)))
    await j.close()


async def test_append_parts_writes_the_same_record_as_frame(tmp_path: pathlib.Path) -> None:
    """The add path journals a batch as parts (no join); the bytes equal ``frame(body)``."""
    body = entries_body(3, 0, 4, size=300)
    header, _ = frame(body)
    prefix_len = 5
    parts = [body[:prefix_len]]
    pos = prefix_len
    for _ in range(4):
        parts += [body[pos : pos + 32], body[pos + 32 : pos + 332]]
        pos += 332
    fs = FaultyFileSystem()
    j = Journal(fs, str(tmp_path))
    j.start()
    await j.append_parts(header, parts, len(body))
    await j.close()
    (jid,) = list_journal_ids(fs, str(tmp_path))
    data = (tmp_path / f"{jid:016x}.txn").read_bytes()
    assert data.endswith(header + body)
    assert [b for _, b in replay(fs, str(tmp_path), ZERO_MARK)] == [body]


def test_payload_damage_is_caught_although_the_record_checksum_skips_payloads(
    tmp_path: pathlib.Path,
) -> None:
    path = _write_journal(tmp_path, 3)
    size = os.path.getsize(path)
    with open(path, "r+b") as f:  # the middle of the last entry's 100-byte payload
        f.seek(size - 50)
        byte = f.read(1)
        f.seek(size - 50)
        f.write(bytes([byte[0] ^ 0x01]))
    stats = ReplayStats()
    assert _replayed_ids(tmp_path, stats) == list(range(20))
    assert [reason for _, _, reason in stats.corrupt_tails] == ["checksum mismatch"]


def test_version_1_files_still_replay(tmp_path: pathlib.Path) -> None:
    """Version 1 records carry crc32c of the whole body."""
    import struct

    body = entries_body(9, 0, 2)
    file_id = 5
    data = struct.pack(">4sIQ", b"MGJN", 1, file_id) + struct.pack(">II", len(body), crc32c(body))
    (tmp_path / f"{file_id:016x}.txn").write_bytes(data + body)
    stats = ReplayStats()
    assert _replayed_ids(tmp_path, stats) == [0, 1]
    assert stats.corrupt_tails == []


# -- streamed replay: same records whatever the read size, bounded memory -------------------


def _write_raw_journal(directory: pathlib.Path, bodies: list[bytes], file_id: int = 1) -> str:
    """A journal file written directly (header + framed records), no writer thread."""
    path = directory / f"{file_id:016x}.txn"
    with open(path, "wb") as f:
        f.write(FILE_HEADER.pack(JOURNAL_MAGIC, JOURNAL_VERSION, file_id))
        for body in bodies:
            f.write(b"".join(frame(body)))
    return str(path)


class _CountingFs(FaultyFileSystem):
    """Records the length of every positional read and refuses whole-file reads."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: list[int] = []

    def open_read(self, path: str) -> ReadFile:
        inner = super().open_read(path)
        reads = self.reads

        class Counting:
            size = inner.size

            def pread(self, length: int, offset: int) -> bytes:
                reads.append(length)
                return inner.pread(length, offset)

            def close(self) -> None:
                inner.close()

        return Counting()

    def read_all(self, path: str) -> bytes:
        raise AssertionError("replay must not read a whole journal file")


@pytest.mark.parametrize("read_bytes", [1, 7, 100, 4096, 1 << 20])
@pytest.mark.parametrize("cut", [None, 1, 5, 40, 300])
def test_streamed_replay_yields_the_same_records_whatever_the_read_size(
    tmp_path: pathlib.Path, read_bytes: int, cut: int | None
) -> None:
    bodies = [entries_body(3, i * 5, 5, size=i * 37 % 500) for i in range(30)]
    bodies += [encode_fence(3), encode_master_key(4, b"k" * 400)]
    path = _write_raw_journal(tmp_path, bodies)
    if cut is not None:  # a torn tail: the last record loses its last ``cut`` bytes
        size = os.path.getsize(path)
        with open(path, "r+b") as f:
            f.truncate(size - cut)
        bodies = bodies[:-1]
    stats = ReplayStats()
    got = list(replay(_CountingFs(), str(tmp_path), ZERO_MARK, stats, read_bytes=read_bytes))
    assert [body for _, body in got] == bodies
    offsets = [m.offset for m, _ in got]
    assert offsets == sorted(offsets) and got[-1][0].offset == FILE_HEADER_LEN + sum(
        RECORD_HEADER_LEN + len(b) for b in bodies
    )
    assert len(stats.corrupt_tails) == (0 if cut is None else 1)
    # from every record's mark on, the rest and only the rest
    mid = got[len(got) // 2][0]
    rest = list(replay(_CountingFs(), str(tmp_path), mid, read_bytes=read_bytes))
    assert [b for _, b in rest] == bodies[len(got) // 2 + 1 :]


def test_replay_reads_in_bounded_windows_and_nothing_before_the_mark(
    tmp_path: pathlib.Path,
) -> None:
    bodies = [entries_body(9, i * 100, 100, size=1000) for i in range(80)]  # ~8 MB
    _write_raw_journal(tmp_path, bodies)
    fs = _CountingFs()
    marks = [m for m, _ in replay(fs, str(tmp_path), ZERO_MARK, read_bytes=64 * 1024)]
    assert len(marks) == 80
    record = RECORD_HEADER_LEN + len(bodies[0])  # ~103 KB: bigger than a window
    assert max(fs.reads) <= record, "a read is one window, or one record bigger than it"
    assert sum(fs.reads) <= FILE_HEADER_LEN + 80 * record + 64 * 1024
    fs.reads.clear()
    assert list(replay(fs, str(tmp_path), marks[-1])) == []  # nothing to replay
    assert sum(fs.reads) == FILE_HEADER_LEN, "only the file header was read"


def test_replay_memory_does_not_grow_with_the_journal(tmp_path: pathlib.Path) -> None:
    bodies = [entries_body(5, i * 50, 50, size=1000) for i in range(320)]  # ~16 MB
    _write_raw_journal(tmp_path, bodies)
    del bodies
    tracemalloc.start()
    try:
        count = sum(1 for _ in replay(FaultyFileSystem(), str(tmp_path), ZERO_MARK))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert count == 320
    assert peak < 4 << 20, f"replaying a 16 MB journal peaked at {peak} bytes"


# -- preallocation (journal_preallocate_bytes / journalPreAllocSizeMB) -------------------------


def _journal_with(tmp_path: pathlib.Path, preallocate: int, batches: int, size: int = 100) -> str:
    async def go() -> None:
        j = Journal(FaultyFileSystem(), str(tmp_path), preallocate_bytes=preallocate)
        j.start()
        for b in range(batches):
            await j.append(*frame(entries_body(7, b * 10, 10, size=size)))
        await j.close()

    asyncio.run(go())
    (jid,) = list_journal_ids(FaultyFileSystem(), str(tmp_path))
    return str(tmp_path / f"{jid:016x}.txn")


def test_a_preallocated_journal_is_extended_in_chunks_and_replays_without_a_corrupt_tail(
    tmp_path: pathlib.Path,
) -> None:
    chunk = 64 * 1024
    # 30 records of ~1.3 KB: ~40 KB, then ~10 x 1.3 KB more per round, crossing chunk ends
    path = _journal_with(tmp_path, chunk, 60, size=120)
    size = os.path.getsize(path)
    data = pathlib.Path(path).read_bytes()
    written = len(data.rstrip(b"\0"))
    assert size % chunk == 0 and size >= written > chunk, (size, written)
    assert data[written:] == b"\0" * (size - written), "the reserved rest reads as zeros"
    stats = ReplayStats()
    assert _replayed_ids(tmp_path, stats) == list(range(600))
    assert stats.corrupt_tails == [], "the preallocated zeros are the end, not damage"


def test_without_preallocation_the_file_ends_at_its_last_record(tmp_path: pathlib.Path) -> None:
    path = _journal_with(tmp_path, 0, 3)
    data = pathlib.Path(path).read_bytes()
    assert len(data) == FILE_HEADER_LEN + 3 * (RECORD_HEADER_LEN + len(entries_body(7, 0, 10)))


def test_a_torn_record_before_the_preallocated_zeros_is_reported(tmp_path: pathlib.Path) -> None:
    path = _journal_with(tmp_path, 1 << 20, 3)
    data = bytearray(pathlib.Path(path).read_bytes())
    end = len(data.rstrip(b"\0"))
    data[end - 60 : end] = b"\0" * 60  # the last record's tail never reached the disk
    pathlib.Path(path).write_bytes(bytes(data))
    stats = ReplayStats()
    assert _replayed_ids(tmp_path, stats) == list(range(20))
    assert [reason for _, _, reason in stats.corrupt_tails] == ["checksum mismatch"]


def test_a_full_disk_at_preallocation_falls_back_to_plain_appends(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import errno

    def no_space(fd: int, offset: int, length: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "posix_fallocate", no_space)
    path = _journal_with(tmp_path, 1 << 20, 3)
    assert os.path.getsize(path) == FILE_HEADER_LEN + 3 * (
        RECORD_HEADER_LEN + len(entries_body(7, 0, 10))
    )
    stats = ReplayStats()
    assert _replayed_ids(tmp_path, stats) == list(range(30)) and stats.corrupt_tails == []
