"""The bookie's write-ahead journal: checksummed records, group commit, replay, trimming.

Owns: the journal file format, the group-commit writer (one worker thread that writes and
``fdatasync``s), the journal mark (``JournalMark``) and replay.

File ``<journal dir>/<016x file id>.txn``::

    header   : magic b"MGJN" | u32 version (2) | u64 file id            (16 bytes, big-endian)
    record*  : u32 body length | u32 record checksum | body
    body     : u8 type | ...
      ENTRIES    (1): u32 count | count x (entry header (32 B, see ENTRY_HEADER) | payload)
      MASTER_KEY (2): u64 ledger | key bytes
      FENCE      (3): u64 ledger
      LAC        (4): u64 ledger | i64 explicit lac

Record checksum (version 2): crc32c of the body, except that an ENTRIES body's payloads are
left out: the checksum covers the type, the count and every entry header, and each payload is
covered by the crc32c in its own entry header (verified on receipt and again on replay). So a
batch is journaled without joining or re-checksumming its payloads: the writer ``writev``s the
received payload objects as they are. Version 1 files (crc32c of the whole body) still replay.

Group commit: records appended in one loop iteration (and, under load, everything appended while
the previous ``fdatasync`` ran: double buffering) form a group; a group is handed to the writer
thread when ``max_group_wait_ms`` has passed since its first record or when it holds
``group_bytes_max`` bytes, and (``flush_when_idle``, BookKeeper's
``journalFlushWhenQueueEmpty``) at once when no sync is running: at the end of the loop
iteration if the journal is idle, or as soon as the running sync completes. The thread coalesces
every group queued meanwhile into one ``writev`` + one ``fdatasync`` and then resolves the
groups' futures on the loop. Invariant: a group's future resolves only after its bytes are
synced; it fails if the write or the sync failed, and after the first failure the journal
refuses new records (``JournalFailed``).

Preallocation (``preallocate_bytes``, BookKeeper's ``journalPreAllocSizeMB``): a journal file
is extended that many bytes at a time ahead of its records, which overwrite the reserved
zeros, so a record's ``fdatasync`` has no file-size change to commit (measured ~40 µs less per
lone sync at p50, up to ~100 µs at p99, on ext4). Replay ends a file quietly at a record
header of zeros: the unwritten rest of the reservation.

Replay: files are read in id order from a mark, streamed through a bounded window
(``REPLAY_READ_BYTES`` at a time, more only for one bigger record): nothing before the mark
is read but the file header, and memory does not grow with the journal. A short record, an
impossible length or a bad checksum ends that file (logged with file and offset); nothing
after it in that file is used.
Must not know: ledgers' state, the write cache, asyncio users beyond returning futures.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import struct
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import crc32c as _crc32c

from magnetar.bookie.files import AppendFile, FileSystem, ReadFile

log = logging.getLogger(__name__)

JOURNAL_MAGIC = b"MGJN"
JOURNAL_VERSION = 2
READABLE_VERSIONS = (1, 2)
FILE_HEADER = struct.Struct(">4sIQ")
FILE_HEADER_LEN = FILE_HEADER.size
RECORD_HEADER = struct.Struct(">II")
RECORD_HEADER_LEN = RECORD_HEADER.size
ENTRY_HEADER = struct.Struct(">QQqII")
"""ledger id, entry id, lac, crc32c(payload), payload length: 32 bytes, shared with entry logs."""
ENTRY_HEADER_LEN = ENTRY_HEADER.size
RECORD_BODY_MAX = 1 << 30

TYPE_ENTRIES = 1
TYPE_MASTER_KEY = 2
TYPE_FENCE = 3
TYPE_LAC = 4

_U32 = struct.Struct(">I")
ENTRIES_PREFIX = struct.Struct(">BI")
"""type byte + count: the first bytes of an ENTRIES body."""
_LEDGER = struct.Struct(">Q")
_LEDGER_LAC = struct.Struct(">Qq")
_MARK = struct.Struct(">QQ")
_crc = _crc32c.crc32c


@dataclass(frozen=True, slots=True, order=True)
class JournalMark:
    """A position in the journal: records at or after it may not be in ledger storage yet."""

    file_id: int
    offset: int

    def pack(self) -> bytes:
        return _MARK.pack(self.file_id, self.offset)

    @classmethod
    def unpack(cls, data: bytes) -> JournalMark:
        file_id, offset = _MARK.unpack(data)
        return cls(file_id, offset)


ZERO_MARK = JournalMark(0, 0)


class JournalFailed(Exception):
    """The journal hit an I/O error (disk full, fsync failure); it accepts no more records."""

    def __init__(self, cause: OSError) -> None:
        super().__init__(f"journal failed: {cause}")
        self.cause = cause


def file_name(file_id: int) -> str:
    return f"{file_id:016x}.txn"


def list_journal_ids(fs: FileSystem, directory: str) -> list[int]:
    ids = []
    for name in fs.listdir(directory):
        if name.endswith(".txn") and len(name) == 20:
            try:
                ids.append(int(name[:16], 16))
            except ValueError:
                continue
    return sorted(ids)


# -- record encoding ---------------------------------------------------------------------------


def _entries_checksum(body: bytes, verify_payloads: bool) -> int | None:
    """Checksum of an ENTRIES body (type, count, entry headers; not the payloads), or None
    if the body is malformed or (``verify_payloads``) a payload does not match its crc32c."""
    n = len(body)
    if n < ENTRIES_PREFIX.size:
        return None
    view = memoryview(body)
    (count,) = _U32.unpack_from(body, 1)
    c = _crc(view[: ENTRIES_PREFIX.size])
    pos = ENTRIES_PREFIX.size
    unpack = ENTRY_HEADER.unpack_from
    for _ in range(count):
        end = pos + ENTRY_HEADER_LEN
        if end > n:
            return None
        c = _crc(view[pos:end], c)
        payload_crc, length = unpack(body, pos)[3:]
        pos = end + length
        if pos > n or (verify_payloads and _crc(view[end:pos]) != payload_crc):
            return None
    return c if pos == n else None


def record_checksum(body: bytes) -> int:
    """The record checksum of ``body`` (see the module docstring, version 2)."""
    if body and body[0] == TYPE_ENTRIES:
        c = _entries_checksum(body, False)
        if c is None:
            raise ValueError("malformed ENTRIES body")
        return c
    return _crc(body)


def _record_ok(body: bytes, checksum: int, version: int) -> bool:
    if version == 1 or body[0] != TYPE_ENTRIES:
        return _crc(body) == checksum
    return _entries_checksum(body, True) == checksum


def frame(body: bytes) -> tuple[bytes, bytes]:
    """(record header, body) for ``body``: what ``Journal.append`` takes."""
    return RECORD_HEADER.pack(len(body), record_checksum(body)), body


def encode_entries(count: int, parts: list[bytes]) -> bytes:
    """Body of an ENTRIES record; ``parts`` alternates entry headers and payloads."""
    return ENTRIES_PREFIX.pack(TYPE_ENTRIES, count) + b"".join(parts)


def encode_master_key(ledger_id: int, master_key: bytes) -> bytes:
    return bytes((TYPE_MASTER_KEY,)) + _LEDGER.pack(ledger_id) + master_key


def encode_fence(ledger_id: int) -> bytes:
    return bytes((TYPE_FENCE,)) + _LEDGER.pack(ledger_id)


def encode_lac(ledger_id: int, lac: int) -> bytes:
    return bytes((TYPE_LAC,)) + _LEDGER_LAC.pack(ledger_id, lac)


@dataclass(frozen=True, slots=True)
class ReplayedEntry:
    ledger_id: int
    entry_id: int
    lac: int
    crc32c: int
    header: bytes
    payload: bytes


@dataclass(frozen=True, slots=True)
class ReplayedMeta:
    kind: int
    ledger_id: int
    master_key: bytes = b""
    lac: int = -1


def decode_body(body: bytes) -> Iterator[ReplayedEntry | ReplayedMeta]:
    kind = body[0]
    if kind == TYPE_ENTRIES:
        (count,) = _U32.unpack_from(body, 1)
        pos = 5
        for _ in range(count):
            header = body[pos : pos + ENTRY_HEADER_LEN]
            ledger_id, entry_id, lac, crc, length = ENTRY_HEADER.unpack(header)
            pos += ENTRY_HEADER_LEN
            payload = body[pos : pos + length]
            pos += length
            yield ReplayedEntry(ledger_id, entry_id, lac, crc, header, payload)
    elif kind == TYPE_MASTER_KEY:
        (ledger_id,) = _LEDGER.unpack_from(body, 1)
        yield ReplayedMeta(kind, ledger_id, master_key=bytes(body[9:]))
    elif kind == TYPE_FENCE:
        (ledger_id,) = _LEDGER.unpack_from(body, 1)
        yield ReplayedMeta(kind, ledger_id)
    elif kind == TYPE_LAC:
        ledger_id, lac = _LEDGER_LAC.unpack_from(body, 1)
        yield ReplayedMeta(kind, ledger_id, lac=lac)
    else:
        raise ValueError(f"unknown journal record type {kind}")


@dataclass(slots=True)
class ReplayStats:
    files: int = 0
    records: int = 0
    bytes: int = 0
    corrupt_tails: list[tuple[str, int, str]] = field(default_factory=list)


REPLAY_READ_BYTES = 1 << 20
"""Replay reads a journal file this many bytes at a time (more only for a bigger record)."""


class _WindowReader:
    """Sequential reads of one file through one bounded window: a read returns bytes at
    increasing offsets; the window holds what was read past the last record and grows
    beyond ``read_bytes`` only to hold one record bigger than that."""

    __slots__ = ("_buf", "_buf_offset", "_file", "_read_bytes", "size")

    def __init__(self, file: ReadFile, start: int, read_bytes: int) -> None:
        self._file = file
        self._read_bytes = read_bytes
        self._buf = b""
        self._buf_offset = start
        self.size = file.size

    def read(self, offset: int, length: int) -> bytes:
        """``length`` bytes at ``offset`` (>= every earlier offset), fewer at the file end."""
        rel = offset - self._buf_offset
        buf = self._buf
        if rel >= 0 and rel + length <= len(buf):
            return buf[rel : rel + length]
        kept = buf[rel:] if 0 <= rel < len(buf) else b""
        want = max(length - len(kept), self._read_bytes)
        want = min(want, max(0, self.size - offset - len(kept)))
        more = self._file.pread(want, offset + len(kept)) if want > 0 else b""
        self._buf = buf = kept + more if kept else more
        self._buf_offset = offset
        return buf[:length]


def replay(
    fs: FileSystem,
    directory: str,
    mark: JournalMark,
    stats: ReplayStats | None = None,
    *,
    read_bytes: int = REPLAY_READ_BYTES,
) -> Iterator[tuple[JournalMark, bytes]]:
    """Yield (position after the record, body) for every valid record at or after ``mark``.

    Streams: each file is read from the mark on, ``read_bytes`` at a time (a record bigger
    than that is read whole), so memory is bounded by the read size plus one record however
    big the journal; nothing before the mark is read but the file header."""
    stats = stats if stats is not None else ReplayStats()
    for file_id in list_journal_ids(fs, directory):
        if file_id < mark.file_id:
            continue
        path = f"{directory}/{file_name(file_id)}"
        file = fs.open_read(path)
        try:
            stats.files += 1
            start = mark.offset if file_id == mark.file_id else 0
            yield from _replay_file(file, path, file_id, start, stats, read_bytes=read_bytes)
        finally:
            file.close()


def _replay_file(
    file: ReadFile,
    path: str,
    file_id: int,
    start: int,
    stats: ReplayStats,
    *,
    read_bytes: int,
) -> Iterator[tuple[JournalMark, bytes]]:
    end = file.size
    header = file.pread(FILE_HEADER_LEN, 0) if end else b""
    if len(header) < FILE_HEADER_LEN:
        if end:
            _report(stats, path, 0, "short file header")
        return
    magic, version, header_id = FILE_HEADER.unpack(header)
    if magic != JOURNAL_MAGIC or version not in READABLE_VERSIONS or header_id != file_id:
        _report(stats, path, 0, "bad file header")
        return
    pos = max(FILE_HEADER_LEN, start)
    reader = _WindowReader(file, pos, read_bytes)
    while pos < end:
        head = reader.read(pos, RECORD_HEADER_LEN)
        if len(head) < RECORD_HEADER_LEN:
            _report(stats, path, pos, "torn record header")
            return
        length, crc = RECORD_HEADER.unpack(head)
        if length == 0 and crc == 0:  # the preallocated, never written rest of the file
            return
        if length == 0 or length > RECORD_BODY_MAX:
            _report(stats, path, pos, f"impossible record length {length}")
            return
        body_start = pos + RECORD_HEADER_LEN
        if end - body_start < length:
            _report(stats, path, pos, f"torn record ({end - body_start} of {length} bytes)")
            return
        body = reader.read(body_start, length)
        if len(body) < length:  # the file shrank under us: as torn
            _report(stats, path, pos, f"torn record ({len(body)} of {length} bytes)")
            return
        if not _record_ok(body, crc, version):
            _report(stats, path, pos, "checksum mismatch")
            return
        pos = body_start + length
        stats.records += 1
        stats.bytes += length
        yield JournalMark(file_id, pos), body


def _report(stats: ReplayStats, path: str, offset: int, reason: str) -> None:
    log.warning(
        "journal %s: %s at offset %d; the rest of this file is skipped", path, reason, offset
    )
    stats.corrupt_tails.append((path, offset, reason))


# -- the writer --------------------------------------------------------------------------------


class _Group:
    __slots__ = ("chunks", "end", "file_id", "future", "nbytes", "scheduled")

    def __init__(self, file_id: int, future: asyncio.Future[None]) -> None:
        self.file_id = file_id
        self.future = future
        self.chunks: list[bytes | memoryview] = []
        self.nbytes = 0
        self.end = JournalMark(file_id, 0)
        self.scheduled = False


@dataclass(frozen=True, slots=True)
class JournalStatistics:
    file_id: int
    appended_bytes: int
    synced_bytes: int
    groups_synced: int
    syncs: int
    pending_groups: int
    synced_mark: JournalMark
    failed: bool


_STOP = object()


class Journal:
    """Append records, group-commit them, and resolve one future per group when synced."""

    def __init__(
        self,
        fs: FileSystem,
        directory: str,
        *,
        max_group_wait_ms: float = 1.0,
        group_bytes_max: int = 512 * 1024,
        file_size_max: int = 256 * 1024 * 1024,
        on_failure: Callable[[OSError], None] | None = None,
        flush_when_idle: bool = True,
        preallocate_bytes: int = 0,
    ) -> None:
        self._fs = fs
        self._preallocate_bytes = preallocate_bytes
        self._dir = directory
        self._wait_s = max(0.0, max_group_wait_ms) / 1000.0
        self._group_bytes_max = group_bytes_max
        self._file_size_max = file_size_max
        self._on_failure = on_failure
        self._flush_when_idle = flush_when_idle
        self._loop: asyncio.AbstractEventLoop | None = None
        self._file_id = 0
        self._offset = 0
        self._pending: _Group | None = None
        self._inflight: list[_Group] = []
        self._queue: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._failed: JournalFailed | None = None
        self._synced_mark = ZERO_MARK
        self._appended_bytes = 0
        self._synced_bytes = 0
        self._groups_synced = 0
        self._syncs = 0
        self._file: AppendFile | None = None
        self._writing_file_id = 0

    def __repr__(self) -> str:
        return f"<Journal {self._dir} file={self._file_id:x} offset={self._offset}>"

    # -- lifecycle (loop thread) --

    def start(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        """Open a new journal file after every existing one and start the writer thread."""
        self._loop = loop or asyncio.get_running_loop()
        self._fs.makedirs(self._dir)
        ids = list_journal_ids(self._fs, self._dir)
        self._file_id = (ids[-1] + 1) if ids else 1
        self._open_file(self._file_id)  # synchronously: start-up fails loudly on a bad disk
        self._offset = FILE_HEADER_LEN
        self._synced_mark = JournalMark(self._file_id, FILE_HEADER_LEN)
        self._thread = threading.Thread(target=self._run, name="bookie-journal", daemon=True)
        self._thread.start()

    async def close(self) -> None:
        """Sync what is pending, then stop the writer thread."""
        if self._thread is None:
            return
        if self._pending is not None:
            self._handoff(self._pending)
        self._queue.put(_STOP)
        await asyncio.to_thread(self._thread.join)
        self._thread = None
        if self._file is not None:
            self._file.close()
            self._file = None

    # -- appending (loop thread) --

    @property
    def failed(self) -> bool:
        return self._failed is not None

    def append(self, header: bytes, body: bytes) -> asyncio.Future[None]:
        """Queue one framed record; returns its group's future (shared by the group)."""
        return self.append_parts(header, (body,), len(body))

    def append_parts(
        self, header: bytes, parts: Sequence[bytes | memoryview], body_bytes: int
    ) -> asyncio.Future[None]:
        """``append`` of a body given as consecutive ``parts`` (``body_bytes`` in all), written
        with ``writev`` as they are (no join). The parts must not change until synced."""
        if self._failed is not None:
            raise self._failed
        size = len(header) + body_bytes
        if self._offset + size > self._file_size_max and self._offset > FILE_HEADER_LEN:
            if self._pending is not None:
                self._handoff(self._pending)
            self._file_id += 1
            self._offset = FILE_HEADER_LEN
        group = self._pending
        if group is None:
            assert self._loop is not None
            group = self._pending = _Group(self._file_id, self._loop.create_future())
        group.chunks.append(header)
        group.chunks.extend(parts)
        group.nbytes += size
        self._offset += size
        self._appended_bytes += size
        if group.nbytes >= self._group_bytes_max:
            self._handoff(group)
        elif not group.scheduled:
            group.scheduled = True
            assert self._loop is not None
            if self._wait_s <= 0 or (self._flush_when_idle and not self._inflight):
                # Nothing is being synced: flush at the end of this loop iteration, so every
                # record appended in it shares the group (no idle wait at low load).
                self._loop.call_soon(self._on_timer, group)
            else:
                self._loop.call_later(self._wait_s, self._on_timer, group)
        return group.future

    def barrier(self) -> asyncio.Future[None]:
        """A future that resolves when everything appended so far is synced."""
        if self._pending is not None:
            fut = self._pending.future
            self._handoff(self._pending)
            return fut
        if self._inflight:
            return self._inflight[-1].future
        assert self._loop is not None
        fut = self._loop.create_future()
        if self._failed is not None:
            fut.set_exception(self._failed)
        else:
            fut.set_result(None)
        return fut

    def current_mark(self) -> JournalMark:
        """End of everything appended so far (synced or not)."""
        return JournalMark(self._file_id, self._offset)

    @property
    def synced_mark(self) -> JournalMark:
        return self._synced_mark

    @property
    def lag_bytes(self) -> int:
        return self._appended_bytes - self._synced_bytes

    def _on_timer(self, group: _Group) -> None:
        if self._pending is group:
            self._handoff(group)

    def _handoff(self, group: _Group) -> None:
        self._pending = None
        group.end = JournalMark(group.file_id, self._offset)
        self._inflight.append(group)
        self._queue.put(group)

    # -- writer thread --

    def _open_file(self, file_id: int) -> None:
        path = f"{self._dir}/{file_name(file_id)}"
        f = self._fs.open_append(path, self._preallocate_bytes)
        if f.size == 0:
            f.write(FILE_HEADER.pack(JOURNAL_MAGIC, JOURNAL_VERSION, file_id))
            f.fdatasync()
            self._fs.fsync_dir(self._dir)
        if self._file is not None:
            self._file.close()
        self._file = f
        self._writing_file_id = file_id

    def _run(self) -> None:
        stop = False
        while not stop:
            items = [self._queue.get()]
            while True:
                try:
                    items.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            groups: list[_Group] = []
            for item in items:
                if item is _STOP:
                    stop = True
                else:
                    assert isinstance(item, _Group)
                    groups.append(item)
            if not groups:
                continue
            error: OSError | None = None
            try:
                self._write_groups(groups)
            except OSError as exc:
                error = exc
            loop = self._loop
            assert loop is not None
            try:
                loop.call_soon_threadsafe(self._on_synced, groups, error)
            except RuntimeError:  # loop closed: nobody is waiting any more
                return

    def _write_groups(self, groups: list[_Group]) -> None:
        if self._failed is not None:
            raise self._failed.cause
        chunks: list[bytes | memoryview] = []
        for group in groups:
            if group.file_id != self._writing_file_id:
                if chunks:
                    assert self._file is not None
                    self._file.writev(chunks)
                    chunks = []
                assert self._file is not None
                self._file.fdatasync()
                self._open_file(group.file_id)
            chunks.extend(group.chunks)
        assert self._file is not None
        if chunks:
            self._file.writev(chunks)
        self._file.fdatasync()

    def _on_synced(self, groups: list[_Group], error: OSError | None) -> None:
        for group in groups:
            self._inflight.remove(group)
            if error is None:
                self._synced_bytes += group.nbytes
                self._groups_synced += 1
                self._synced_mark = max(self._synced_mark, group.end)
                if not group.future.done():
                    group.future.set_result(None)
        if error is None:
            self._syncs += 1
            pending = self._pending
            if self._flush_when_idle and pending is not None and not self._inflight:
                self._handoff(pending)  # it grew while the sync ran (double buffering)
            return
        first = self._failed is None
        if first:
            self._failed = JournalFailed(error)
            log.error("journal %s: write or fdatasync failed: %s", self._dir, error)
        for group in groups:
            if not group.future.done():
                group.future.set_exception(self._failed or JournalFailed(error))
        # Whatever is still pending can never be synced now.
        if self._pending is not None:
            pending, self._pending = self._pending, None
            if not pending.future.done():
                pending.future.set_exception(self._failed or JournalFailed(error))
        if first and self._on_failure is not None:
            self._on_failure(error)

    # -- trimming --

    def trim(self, mark: JournalMark) -> list[int]:
        """Delete journal files wholly before ``mark`` (never the one being written)."""
        removed = []
        for file_id in list_journal_ids(self._fs, self._dir):
            if file_id < mark.file_id and file_id < self._file_id:
                self._fs.remove(f"{self._dir}/{file_name(file_id)}")
                removed.append(file_id)
        return removed

    def statistics(self) -> JournalStatistics:
        return JournalStatistics(
            file_id=self._file_id,
            appended_bytes=self._appended_bytes,
            synced_bytes=self._synced_bytes,
            groups_synced=self._groups_synced,
            syncs=self._syncs,
            pending_groups=len(self._inflight) + (1 if self._pending else 0),
            synced_mark=self._synced_mark,
            failed=self.failed,
        )


__all__ = [
    "ENTRIES_PREFIX",
    "ENTRY_HEADER",
    "ENTRY_HEADER_LEN",
    "READABLE_VERSIONS",
    "TYPE_ENTRIES",
    "TYPE_FENCE",
    "TYPE_LAC",
    "TYPE_MASTER_KEY",
    "ZERO_MARK",
    "Journal",
    "JournalFailed",
    "JournalMark",
    "JournalStatistics",
    "ReplayStats",
    "ReplayedEntry",
    "ReplayedMeta",
    "decode_body",
    "encode_entries",
    "encode_fence",
    "encode_lac",
    "encode_master_key",
    "frame",
    "record_checksum",
    "replay",
]
