"""A fault-injecting ``BlobStore`` wrapper, for tests of everything built on object stores.

Owns: ``FaultInjectingBlobStore(inner)``, which forwards every call to ``inner`` except when a
scheduled fault matches the operation and key (prefix or regex): fail the next op(s) with an
error (before the inner call, or after it took effect: a reply lost on the way back), delay
them, or flip one byte of what a read returns (at an absolute object offset, or the last byte
returned); and ``take_down()`` / ``bring_back()``: while down, every operation fails with
``StoreUnavailable`` as a store that cannot be reached does. A failure injected into a
streamed upload fails it after the stream was consumed (the upload never completes).
Must not know: the inner implementation, block or index formats.

Invariant: a fault fires at most ``count`` times; faults are checked in the order added.
"""

from __future__ import annotations

import enum
import re
from collections.abc import AsyncIterable, AsyncIterator, Callable, Mapping
from dataclasses import dataclass

from magnetar.broker.offload.errors import StoreUnavailable
from magnetar.broker.offload.store import BlobStore, ObjectInfo
from magnetar.clock import Clock, SystemClock

OPERATIONS = frozenset({"put", "get", "get_range", "stream", "delete", "list"})
READS = frozenset({"get", "get_range", "stream"})


class _Kind(enum.Enum):
    FAIL = "fail"
    DELAY = "delay"
    CORRUPT = "corrupt"


@dataclass(slots=True)
class Fault:
    kind: _Kind
    matcher: Callable[[str], bool]
    operations: frozenset[str]
    remaining: int
    error: Callable[[str], BaseException] | None = None
    after: bool = False
    delay_s: float = 0.0
    at: int | None = None

    def matches(self, operation: str, key: str) -> bool:
        return self.remaining > 0 and operation in self.operations and self.matcher(key)


@dataclass(frozen=True, slots=True)
class FaultStatistics:
    operations: int
    injected_failures: int
    injected_delays: int
    corrupted_reads: int
    pending_faults: int
    down: bool


def _matcher(key: str | re.Pattern[str]) -> Callable[[str], bool]:
    if isinstance(key, re.Pattern):
        pattern = key
        return lambda k: pattern.search(k) is not None
    prefix = key
    return lambda k: k.startswith(prefix)


def _error_factory(
    error: type[BaseException] | BaseException | Callable[[str], BaseException],
) -> Callable[[str], BaseException]:
    if isinstance(error, BaseException):
        instance = error
        return lambda _key: instance
    if isinstance(error, type):
        cls = error
        return lambda key: cls(f"injected fault on {key}")
    return error


def _operations(
    operations: str | frozenset[str] | set[str] | None, default: frozenset[str]
) -> frozenset[str]:
    ops = (
        default
        if operations is None
        else frozenset({operations} if isinstance(operations, str) else operations)
    )
    unknown = ops - OPERATIONS
    if unknown:
        raise ValueError(f"unknown operations {sorted(unknown)}")
    return ops


class FaultInjectingBlobStore:
    """Wraps a ``BlobStore``; see the module docstring."""

    def __init__(self, inner: BlobStore, *, clock: Clock | None = None) -> None:
        self._inner = inner
        self._clock = clock or SystemClock()
        self._faults: list[Fault] = []
        self._down = False
        self._operations = 0
        self._failures = 0
        self._delays = 0
        self._corrupted = 0

    def __repr__(self) -> str:
        return f"<FaultInjectingBlobStore {self._inner.describe()} faults={len(self._faults)}>"

    @property
    def inner(self) -> BlobStore:
        return self._inner

    def describe(self) -> str:
        return f"faults({self._inner.describe()})"

    # -- fault control ----------------------------------------------------------------------
    def fail_next(
        self,
        key: str | re.Pattern[str],
        error: type[BaseException] | BaseException | Callable[[str], BaseException] = (
            StoreUnavailable
        ),
        *,
        operations: str | frozenset[str] | set[str] | None = None,
        count: int = 1,
        after: bool = False,
    ) -> Fault:
        """Fail the next ``count`` ops on keys starting with ``key`` (or matching a regex)."""
        fault = Fault(
            _Kind.FAIL,
            _matcher(key),
            _operations(operations, OPERATIONS),
            count,
            error=_error_factory(error),
            after=after,
        )
        self._faults.append(fault)
        return fault

    def delay_next(
        self,
        key: str | re.Pattern[str],
        seconds: float,
        *,
        operations: str | frozenset[str] | set[str] | None = None,
        count: int = 1,
    ) -> Fault:
        if seconds < 0:
            raise ValueError("a delay is >= 0")
        fault = Fault(
            _Kind.DELAY, _matcher(key), _operations(operations, OPERATIONS), count, delay_s=seconds
        )
        self._faults.append(fault)
        return fault

    def corrupt_next(
        self,
        key: str | re.Pattern[str],
        *,
        at: int | None = None,
        operations: str | frozenset[str] | set[str] | None = None,
        count: int = 1,
    ) -> Fault:
        """Flip one byte of what the next ``count`` reads of ``key`` return: the byte at object
        offset ``at`` when the read covers it (reads that do not cover it are left alone and
        do not use up the fault), else the last byte returned."""
        ops = _operations(operations, READS)
        if ops - READS:
            raise ValueError("only reads can be corrupted")
        fault = Fault(_Kind.CORRUPT, _matcher(key), ops, count, at=at)
        self._faults.append(fault)
        return fault

    def take_down(self) -> None:
        """Every operation fails with ``StoreUnavailable`` until ``bring_back``."""
        self._down = True

    def bring_back(self) -> None:
        self._down = False

    def statistics(self) -> FaultStatistics:
        return FaultStatistics(
            operations=self._operations,
            injected_failures=self._failures,
            injected_delays=self._delays,
            corrupted_reads=self._corrupted,
            pending_faults=sum(1 for f in self._faults if f.remaining > 0),
            down=self._down,
        )

    # -- the gate every operation passes ----------------------------------------------------
    async def _before(self, operation: str, key: str) -> list[Fault]:
        """Apply delays and before-failures; return the after-failures to raise later."""
        self._operations += 1
        if self._down:
            self._failures += 1
            raise StoreUnavailable(f"{key}: the store is down (injected)")
        later: list[Fault] = []
        for fault in self._faults:
            if fault.kind is _Kind.CORRUPT or not fault.matches(operation, key):
                continue
            fault.remaining -= 1
            if fault.kind is _Kind.DELAY:
                self._delays += 1
                await self._clock.sleep(fault.delay_s)
            elif fault.after:
                later.append(fault)
            else:
                self._failures += 1
                assert fault.error is not None
                raise fault.error(key)
        return later

    def _after(self, key: str, later: list[Fault]) -> None:
        for fault in later:
            self._failures += 1
            assert fault.error is not None
            raise fault.error(key)

    def _corrupt(self, operation: str, key: str, start: int, data: bytes) -> bytes:
        for fault in self._faults:
            if fault.kind is not _Kind.CORRUPT or not fault.matches(operation, key) or not data:
                continue
            if fault.at is None:
                pos = len(data) - 1
            elif start <= fault.at < start + len(data):
                pos = fault.at - start
            else:
                continue
            fault.remaining -= 1
            self._corrupted += 1
            flipped = bytearray(data)
            flipped[pos] ^= 0xFF
            return bytes(flipped)
        return data

    # -- BlobStore --------------------------------------------------------------------------
    async def put_stream(
        self,
        key: str,
        chunks: AsyncIterable[bytes],
        *,
        part_bytes: int,
        concurrency: int,
        attributes: Mapping[str, str] | None = None,
    ) -> None:
        later = await self._before("put", key)
        await self._inner.put_stream(
            key,
            self._gated(key, chunks),
            part_bytes=part_bytes,
            concurrency=concurrency,
            attributes=attributes,
        )
        self._after(key, later)

    async def _gated(self, key: str, chunks: AsyncIterable[bytes]) -> AsyncIterator[bytes]:
        """A stream that fails mid-upload when the store goes down meanwhile."""
        async for chunk in chunks:
            if self._down:
                self._failures += 1
                raise StoreUnavailable(f"{key}: the store went down during the upload (injected)")
            yield chunk

    async def put(self, key: str, data: bytes, attributes: Mapping[str, str] | None = None) -> None:
        later = await self._before("put", key)
        await self._inner.put(key, data, attributes)
        self._after(key, later)

    async def get(self, key: str) -> bytes:
        later = await self._before("get", key)
        data = await self._inner.get(key)
        self._after(key, later)
        return self._corrupt("get", key, 0, data)

    async def get_range(self, key: str, start: int, length: int) -> bytes:
        later = await self._before("get_range", key)
        data = await self._inner.get_range(key, start, length)
        self._after(key, later)
        return self._corrupt("get_range", key, start, data)

    async def stream(self, key: str) -> AsyncIterator[bytes]:
        later = await self._before("stream", key)
        offset = 0
        async for chunk in self._inner.stream(key):
            if self._down:
                self._failures += 1
                raise StoreUnavailable(f"{key}: the store went down during the read (injected)")
            out = self._corrupt("stream", key, offset, chunk)
            offset += len(chunk)
            yield out
        self._after(key, later)

    async def delete(self, key: str) -> None:
        later = await self._before("delete", key)
        await self._inner.delete(key)
        self._after(key, later)

    async def list(self, prefix: str | None = None) -> AsyncIterator[ObjectInfo]:
        later = await self._before("list", prefix or "")
        async for info in self._inner.list(prefix):
            yield info
        self._after(prefix or "", later)

    async def close(self) -> None:
        await self._inner.close()


__all__ = ["FaultInjectingBlobStore", "FaultStatistics"]
