"""The bookie's file layer: every byte the storage engine writes goes through here.

Owns: the ``FileSystem`` interface (append files with ``fdatasync``, optionally preallocated
in chunks so that a sync does not also commit a new file size; positional reads,
directory listing, atomic small-file replacement, free-space query), the real
``OsFileSystem`` and the ``FaultyFileSystem`` wrapper that tests use to inject ENOSPC, EIO on
``fdatasync``, or to hold an ``fdatasync`` until released.
Invariants: ``AppendFile.write`` either writes every byte or raises ``OSError``;
``write_atomic`` leaves either the old or the new content (temp file + fsync + rename + dir fsync).
Must not know: record formats, asyncio. Methods may be called from worker threads.
"""

from __future__ import annotations

import ctypes
import errno
import os
import shutil
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, cast


class AppendFile(Protocol):
    """An open file that is only appended to (journal, entry log)."""

    @property
    def path(self) -> str: ...

    @property
    def size(self) -> int: ...

    def write(self, data: bytes | bytearray | memoryview) -> None: ...

    def writev(self, chunks: Sequence[bytes | memoryview]) -> None: ...

    def fdatasync(self) -> None: ...

    def start_writeback(self) -> None:
        """Ask the kernel to start writing what was appended since the last call (no wait,
        no durability: ``fdatasync`` still decides that). Spreads a large flush's disk
        writes over time, so one ``fdatasync`` of many megabytes does not hold up the
        journal's syncs behind it."""
        ...

    def close(self) -> None: ...


class ReadFile(Protocol):
    def pread(self, length: int, offset: int) -> bytes: ...

    @property
    def size(self) -> int: ...

    def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class DiskUsage:
    total_bytes: int
    free_bytes: int


class FileSystem(Protocol):
    def open_append(self, path: str, preallocate_bytes: int = 0) -> AppendFile:
        """Open (create if missing) for appending; ``size`` starts at the current length.

        ``preallocate_bytes`` > 0 (a new, empty file only): the file is extended ahead of
        the appends, that many bytes at a time (``posix_fallocate``), and appends overwrite
        the reserved space at ``size``. An ``fdatasync`` then has no file-size change to
        commit (BookKeeper's ``journalPreAllocSizeMB``); the bytes past ``size`` read as
        zeros. Best effort: if the reservation fails (full disk, unsupported), appends
        extend the file as without it and the write decides."""
        ...

    def open_read(self, path: str) -> ReadFile: ...

    def read_all(self, path: str) -> bytes: ...

    def write_atomic(self, path: str, data: bytes) -> None: ...

    def listdir(self, path: str) -> list[str]: ...

    def exists(self, path: str) -> bool: ...

    def remove(self, path: str) -> None: ...

    def makedirs(self, path: str) -> None: ...

    def fsync_dir(self, path: str) -> None: ...

    def file_size(self, path: str) -> int: ...

    def disk_usage(self, path: str) -> DiskUsage: ...


_IOV_MAX = 1024


def _load_sync_file_range() -> Callable[[int, int, int, int], int] | None:
    """libc's ``sync_file_range`` (Linux; Python's ``os`` lacks it), or None. Called through
    ctypes, which releases the GIL for the call."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.sync_file_range
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return cast(Callable[[int, int, int, int], int], fn)


_sync_file_range = _load_sync_file_range()
_SYNC_FILE_RANGE_WRITE = 2


class _OsAppendFile:
    __slots__ = ("_chunk", "_fd", "_path", "_positional", "_reserved", "_size", "_writeback_offset")

    def __init__(self, path: str, preallocate_bytes: int = 0) -> None:
        self._path = path
        fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
        self._size = os.fstat(fd).st_size
        self._chunk = preallocate_bytes if preallocate_bytes > 0 and self._size == 0 else 0
        if not self._chunk:  # plain appends: the kernel places every write at the end
            os.close(fd)
            fd = os.open(path, os.O_WRONLY | os.O_APPEND)
        self._fd = fd
        self._positional = bool(self._chunk)  # writes at ``size`` (pwrite), not O_APPEND
        self._reserved = 0
        self._writeback_offset = self._size

    def _reserve(self, end: int) -> None:
        """Preallocated files: extend the file past ``end`` before writing up to it."""
        if end <= self._reserved:
            return
        want = max(self._chunk, end - self._reserved)
        try:
            os.posix_fallocate(self._fd, self._reserved, want)
        except OSError:  # full disk or no support: write without (the write decides)
            self._chunk = 0
            return
        self._reserved += want

    @property
    def path(self) -> str:
        return self._path

    @property
    def size(self) -> int:
        return self._size

    def write(self, data: bytes | bytearray | memoryview) -> None:
        view = memoryview(data)
        total = len(view)
        if self._chunk:
            self._reserve(self._size + total)
        done = 0
        while done < total:
            if self._positional:
                done += os.pwrite(self._fd, view[done:], self._size + done)
            else:
                done += os.write(self._fd, view[done:])
        self._size += total

    def writev(self, chunks: Sequence[bytes | memoryview]) -> None:
        # One syscall per up to IOV_MAX chunks; short writes fall back to write().
        for start in range(0, len(chunks), _IOV_MAX):
            part = chunks[start : start + _IOV_MAX]
            want = sum(map(len, part))
            if self._chunk:
                self._reserve(self._size + want)
            if self._positional:
                got = os.pwritev(self._fd, part, self._size)
            else:
                got = os.writev(self._fd, part)
            self._size += got
            if got < want:
                rest = b"".join(part)[got:]
                self.write(rest)

    def fdatasync(self) -> None:
        os.fdatasync(self._fd)

    def start_writeback(self) -> None:
        start = self._writeback_offset
        if _sync_file_range is None or self._size <= start:
            return
        self._writeback_offset = self._size
        # A hint only: a failure here changes nothing (the next fdatasync reports errors).
        _sync_file_range(self._fd, start, self._size - start, _SYNC_FILE_RANGE_WRITE)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class _OsReadFile:
    __slots__ = ("_fd",)

    def __init__(self, path: str) -> None:
        self._fd = os.open(path, os.O_RDONLY)

    def pread(self, length: int, offset: int) -> bytes:
        return os.pread(self._fd, length, offset)

    @property
    def size(self) -> int:
        return os.fstat(self._fd).st_size

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class OsFileSystem:
    """The real disk."""

    def open_append(self, path: str, preallocate_bytes: int = 0) -> AppendFile:
        return _OsAppendFile(path, preallocate_bytes)

    def open_read(self, path: str) -> ReadFile:
        return _OsReadFile(path)

    def read_all(self, path: str) -> bytes:
        with open(path, "rb") as f:
            return f.read()

    def write_atomic(self, path: str, data: bytes) -> None:
        tmp = path + ".tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
        self.fsync_dir(os.path.dirname(path) or ".")

    def listdir(self, path: str) -> list[str]:
        return sorted(os.listdir(path))

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def remove(self, path: str) -> None:
        os.remove(path)

    def makedirs(self, path: str) -> None:
        os.makedirs(path, exist_ok=True)

    def fsync_dir(self, path: str) -> None:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def file_size(self, path: str) -> int:
        return os.stat(path).st_size

    def disk_usage(self, path: str) -> DiskUsage:
        usage = shutil.disk_usage(path)
        return DiskUsage(total_bytes=usage.total, free_bytes=usage.free)


class FaultyFileSystem:
    """Wraps a ``FileSystem`` and injects faults; thread-safe switches for tests.

    - ``fail_writes(errno.ENOSPC)``: every later write/writev/write_atomic raises that error.
    - ``fail_fsync(errno.EIO)``: every later ``fdatasync`` raises.
    - ``hold_fsync()`` / ``release_fsync()``: ``fdatasync`` blocks until released;
      ``fsync_waiting`` is set while a sync is blocked (assert on durability ordering).
    - ``free_bytes_override``: what ``disk_usage`` reports as free.
    - ``writeback_paths``: every file whose ``start_writeback`` was called (counted per path).
    """

    def __init__(self, inner: FileSystem | None = None) -> None:
        self.inner: FileSystem = inner if inner is not None else OsFileSystem()
        self.write_errno: int | None = None
        self.fsync_errno: int | None = None
        self.free_bytes_override: int | None = None
        self.fsync_gate = threading.Event()
        self.fsync_gate.set()
        self.fsync_waiting = threading.Event()
        self.fsync_count = 0
        self.write_count = 0
        self.writeback_paths: dict[str, int] = {}

    def fail_writes(self, err: int | None = errno.ENOSPC) -> None:
        self.write_errno = err

    def fail_fsync(self, err: int | None = errno.EIO) -> None:
        self.fsync_errno = err

    def hold_fsync(self) -> None:
        self.fsync_gate.clear()

    def release_fsync(self) -> None:
        self.fsync_gate.set()

    def check_write(self) -> None:
        self.write_count += 1
        if self.write_errno is not None:
            raise OSError(self.write_errno, os.strerror(self.write_errno))

    def check_fsync(self) -> None:
        if not self.fsync_gate.is_set():
            self.fsync_waiting.set()
            self.fsync_gate.wait()
            self.fsync_waiting.clear()
        self.fsync_count += 1
        if self.fsync_errno is not None:
            raise OSError(self.fsync_errno, os.strerror(self.fsync_errno))

    def open_append(self, path: str, preallocate_bytes: int = 0) -> AppendFile:
        self.check_write()
        return _FaultyAppendFile(self, self.inner.open_append(path, preallocate_bytes))

    def open_read(self, path: str) -> ReadFile:
        return self.inner.open_read(path)

    def read_all(self, path: str) -> bytes:
        return self.inner.read_all(path)

    def write_atomic(self, path: str, data: bytes) -> None:
        self.check_write()
        self.inner.write_atomic(path, data)

    def listdir(self, path: str) -> list[str]:
        return self.inner.listdir(path)

    def exists(self, path: str) -> bool:
        return self.inner.exists(path)

    def remove(self, path: str) -> None:
        self.inner.remove(path)

    def makedirs(self, path: str) -> None:
        self.inner.makedirs(path)

    def fsync_dir(self, path: str) -> None:
        self.inner.fsync_dir(path)

    def file_size(self, path: str) -> int:
        return self.inner.file_size(path)

    def disk_usage(self, path: str) -> DiskUsage:
        real = self.inner.disk_usage(path)
        if self.free_bytes_override is None:
            return real
        return DiskUsage(total_bytes=real.total_bytes, free_bytes=self.free_bytes_override)


class _FaultyAppendFile:
    __slots__ = ("_fs", "_inner")

    def __init__(self, fs: FaultyFileSystem, inner: AppendFile) -> None:
        self._fs = fs
        self._inner = inner

    @property
    def path(self) -> str:
        return self._inner.path

    @property
    def size(self) -> int:
        return self._inner.size

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self._fs.check_write()
        self._inner.write(data)

    def writev(self, chunks: Sequence[bytes | memoryview]) -> None:
        self._fs.check_write()
        self._inner.writev(chunks)

    def fdatasync(self) -> None:
        self._fs.check_fsync()
        self._inner.fdatasync()

    def start_writeback(self) -> None:
        counts = self._fs.writeback_paths
        counts[self.path] = counts.get(self.path, 0) + 1
        self._inner.start_writeback()

    def close(self) -> None:
        self._inner.close()


__all__ = [
    "AppendFile",
    "DiskUsage",
    "FaultyFileSystem",
    "FileSystem",
    "OsFileSystem",
    "ReadFile",
]
