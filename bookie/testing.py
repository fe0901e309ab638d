"""Test kit for the bookie: an in-memory ``BookieStorage`` (trio.testing style).

Owns: ``MemoryBookieStorage``, a dict-backed storage node with the same validation rules as
the real engine (fence, master key, entry size, checksum, read-only), used by the service's
fast tiers and by ``magnetar bookie --storage memory``, and ``submit_requests`` (add
``AddRequest``s to any storage, packed as the service hands them over). Nothing is
durable: a process using it loses everything on exit. Must not know: gRPC.

Invariants: an entry is stored with the crc32c it arrived with and only if that crc matches
its payload; the fenced bit never clears; LAC only moves forward.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass, field

import crc32c

from magnetar.bookie.api import NO_ENTRY_ID, AddRequest, BookieInfo, BookieStorage, Entry
from magnetar.bookie.errors import NoEntry, NoLedger, StatusCode, Unauthorized
from magnetar.bookie.wire import (
    ENTRY_HEADER,
    ENTRY_HEADER_LEN,
    PackedEntry,
    pack_entries,
    parse_packed,
)

DEFAULT_MAX_ENTRY_BYTES = 5 * 1024 * 1024 + 64 * 1024


@dataclass(slots=True)
class _Ledger:
    master_key: bytes
    fenced: bool = False
    lac: int = NO_ENTRY_ID
    entries: dict[int, Entry] = field(default_factory=dict)
    waiters: list[asyncio.Future[None]] = field(default_factory=list)

    def raise_lac(self, lac: int) -> None:
        if lac > self.lac:
            self.lac = lac
            waiters, self.waiters = self.waiters, []
            for w in waiters:
                if not w.done():
                    w.set_result(None)


class MemoryBookieStorage:
    """A ``BookieStorage`` in a dict. ``read_only`` may be flipped by tests."""

    def __init__(
        self,
        bookie_id: str = "memory-bookie",
        *,
        max_entry_bytes: int = DEFAULT_MAX_ENTRY_BYTES,
        capacity_bytes: int = 1 << 30,
    ) -> None:
        self.bookie_id = bookie_id
        self.max_entry_bytes = max_entry_bytes
        self.capacity_bytes = capacity_bytes
        self.read_only = False
        self.used_bytes = 0
        self._ledgers: dict[int, _Ledger] = {}

    # -- writes ---------------------------------------------------------------------------

    def _check(self, e: PackedEntry, master_key: bytes, recovery: bool) -> int:
        if e.ledger_id < 0 or e.entry_id < 0:
            return StatusCode.BAD_REQUEST
        if len(e.payload) > self.max_entry_bytes:
            return StatusCode.ENTRY_TOO_LARGE
        if self.read_only:
            return StatusCode.READ_ONLY
        if crc32c.crc32c(e.payload) != e.crc32c:
            return StatusCode.CORRUPT
        ledger = self._ledgers.get(e.ledger_id)
        if ledger is not None:
            if ledger.master_key != master_key:
                return StatusCode.UNAUTHORIZED
            if ledger.fenced and not recovery:
                return StatusCode.FENCED
        return StatusCode.OK

    def submit_packed(
        self,
        buf: bytes,
        master_key: bytes = b"",
        recovery: bool = False,
        first: int = 0,
        stop: int | None = None,
    ) -> tuple[Awaitable[list[int]], int, int]:
        entries = parse_packed(buf[first:stop])
        codes: list[int] = []
        nbytes = 0
        for e in entries:
            code = self._check(e, master_key, recovery)
            if code == StatusCode.OK:
                ledger = self._ledgers.get(e.ledger_id)
                if ledger is None:
                    ledger = self._ledgers[e.ledger_id] = _Ledger(master_key)
                if e.entry_id not in ledger.entries:
                    self.used_bytes += len(e.payload)
                ledger.entries[e.entry_id] = Entry(
                    e.ledger_id, e.entry_id, e.lac, e.crc32c, e.payload
                )
                ledger.raise_lac(e.lac)
                nbytes += ENTRY_HEADER_LEN + len(e.payload)
                if self.used_bytes > self.capacity_bytes:
                    self.read_only = True
            codes.append(int(code))
        fut: asyncio.Future[list[int]] = asyncio.get_running_loop().create_future()
        fut.set_result(codes)
        return fut, len(entries), nbytes

    # -- reads ----------------------------------------------------------------------------

    def _ledger(self, ledger_id: int) -> _Ledger:
        ledger = self._ledgers.get(ledger_id)
        if ledger is None:
            raise NoLedger(f"no ledger {ledger_id}")
        return ledger

    async def read_entry(self, ledger_id: int, entry_id: int) -> Entry:
        ledger = self._ledger(ledger_id)
        if entry_id == NO_ENTRY_ID:
            if not ledger.entries:
                raise NoEntry(f"ledger {ledger_id} has no entries")
            entry_id = max(ledger.entries)
        entry = ledger.entries.get(entry_id)
        if entry is None:
            raise NoEntry(f"no entry {ledger_id}:{entry_id}")
        return entry

    async def read_range(
        self, ledger_id: int, first_entry_id: int, last_entry_id: int, max_bytes: int
    ) -> list[Entry]:
        ledger = self._ledger(ledger_id)
        out: list[Entry] = []
        size = 0
        for eid in range(first_entry_id, last_entry_id + 1):
            entry = ledger.entries.get(eid)
            if entry is None:
                break
            if out and size + len(entry.payload) > max_bytes:
                break
            out.append(entry)
            size += len(entry.payload)
        if not out:
            raise NoEntry(f"no entry {ledger_id}:{first_entry_id}")
        return out

    async def read_packed(
        self, ledger_id: int, first_entry_id: int, last_entry_id: int, max_bytes: int
    ) -> tuple[list[bytes | memoryview], int]:
        entries = await self.read_range(ledger_id, first_entry_id, last_entry_id, max_bytes)
        parts, _ = pack_entries(ledger_id, entries)
        return list(parts), len(entries)

    async def wait_for_lac(self, ledger_id: int, previous_lac: int, timeout_ms: int) -> int:
        ledger = self._ledger(ledger_id)
        if ledger.lac > previous_lac:
            return ledger.lac
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        ledger.waiters.append(waiter)
        try:
            await asyncio.wait_for(waiter, timeout_ms / 1000.0)
        except TimeoutError:
            pass
        return ledger.lac

    def read_lac(self, ledger_id: int) -> int:
        return self._ledger(ledger_id).lac

    # -- ledger ops -----------------------------------------------------------------------

    async def fence(self, ledger_id: int, master_key: bytes) -> int:
        ledger = self._ledgers.get(ledger_id)
        if ledger is None:
            ledger = self._ledgers[ledger_id] = _Ledger(master_key)
        elif ledger.master_key != master_key:
            raise Unauthorized(f"master key mismatch on ledger {ledger_id}")
        ledger.fenced = True
        return max(ledger.entries) if ledger.entries else NO_ENTRY_ID

    async def write_lac(self, ledger_id: int, master_key: bytes, lac: int) -> None:
        ledger = self._ledgers.get(ledger_id)
        if ledger is None:
            ledger = self._ledgers[ledger_id] = _Ledger(master_key)
        elif ledger.master_key != master_key:
            raise Unauthorized(f"master key mismatch on ledger {ledger_id}")
        ledger.raise_lac(lac)

    async def force_ledger(self, ledger_id: int) -> None:
        self._ledger(ledger_id)

    def info(self) -> BookieInfo:
        return BookieInfo(
            bookie_id=self.bookie_id,
            read_only=self.read_only,
            total_disk_bytes=self.capacity_bytes,
            free_disk_bytes=max(0, self.capacity_bytes - self.used_bytes),
        )


def submit_requests(
    storage: BookieStorage, requests: Sequence[AddRequest]
) -> asyncio.Future[list[int]]:
    """Add ``requests`` to ``storage`` as the service hands it batches: each run of
    requests with one master key and recovery flag packed (``wire.py``) into one batch.
    The future resolves to one status per request, once every batch is durable."""
    runs: list[tuple[bytes, bool, list[bytes]]] = []
    for r in requests:
        if not runs or runs[-1][0] != r.master_key or runs[-1][1] != r.recovery:
            runs.append((r.master_key, r.recovery, []))
        runs[-1][2].append(
            ENTRY_HEADER.pack(r.ledger_id, r.entry_id, r.lac, r.crc32c, len(r.payload)) + r.payload
        )
    awaitables = [
        storage.submit_packed(b"".join(parts), key, recovery)[0] for key, recovery, parts in runs
    ]

    async def statuses() -> list[int]:
        return [code for codes in await asyncio.gather(*awaitables) for code in codes]

    return asyncio.ensure_future(statuses())


__all__ = ["DEFAULT_MAX_ENTRY_BYTES", "MemoryBookieStorage", "submit_requests"]
