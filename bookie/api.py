"""The contracts between the bookie's parts and its users.

Owns: the value types that cross the bookie boundary (``Entry``, ``EntryRun``, ``AddResult``,
``BookieInfo``) and two protocols:
- ``BookieStorage``: what the gRPC service (``server.py``) calls on the storage node
  (``core.py``); implemented by the real storage engine and by test fakes.
- ``BookieClientAPI``: what brokers (``broker/bookkeeper``) call on one remote bookie; implemented
  by ``client.BookieClient`` over gRPC and by in-memory fakes in unit tiers.
Must not know: gRPC, files, RocksDB.

Entry integrity: every entry carries ``crc32c`` of its payload, computed by the writer. The
bookie verifies it on receipt and stores it; readers verify it again (pair assertions).
``lac`` is the writer's last-add-confirmed when it sent the entry (it rides on every add).
"""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from typing import Protocol

NO_ENTRY_ID = -1
"""LAC / last-entry value meaning 'nothing yet'."""


@dataclass(frozen=True, slots=True)
class Entry:
    ledger_id: int
    entry_id: int
    lac: int
    crc32c: int
    payload: bytes


@dataclass(frozen=True, slots=True)
class AddRequest:
    """One entry to add. ``recovery`` adds are accepted on fenced ledgers (ledger recovery)."""

    ledger_id: int
    entry_id: int
    lac: int
    crc32c: int
    payload: bytes
    master_key: bytes
    recovery: bool = False


def _add_request_init(  # noqa: PLR0917 (AddRequest's positional constructor)
    self: AddRequest,
    ledger_id: int,
    entry_id: int,
    lac: int,
    crc32c: int,
    payload: bytes,
    master_key: bytes,
    recovery: bool = False,
) -> None:
    """``AddRequest.__init__`` through the slot descriptors: a frozen dataclass's generated
    ``__init__`` calls ``object.__setattr__`` per field, which made building one request
    (once per entry, by every writer) cost ~2.5 us instead of ~1 us. Same fields, same
    defaults, still frozen (``__setattr__`` is untouched); a unit test compares the two."""
    _set_ledger_id(self, ledger_id)
    _set_entry_id(self, entry_id)
    _set_lac(self, lac)
    _set_crc32c(self, crc32c)
    _set_payload(self, payload)
    _set_master_key(self, master_key)
    _set_recovery(self, recovery)


(
    _set_ledger_id,
    _set_entry_id,
    _set_lac,
    _set_crc32c,
    _set_payload,
    _set_master_key,
    _set_recovery,
) = (AddRequest.__dict__[name].__set__ for name in AddRequest.__slots__)
_dataclass_add_request_init = AddRequest.__init__
AddRequest.__init__ = _add_request_init  # type: ignore[method-assign]


@dataclass(frozen=True, slots=True)
class EntryRun:
    """Consecutive entries of one ledger in one buffer, as a packed read returns them: entry
    ``first_entry_id + i`` is ``data[starts[i]:ends[i]]``, its checksum verified (no object
    per entry: a reader slices what it needs)."""

    ledger_id: int
    first_entry_id: int
    data: bytes
    starts: Sequence[int]
    ends: Sequence[int]

    def __len__(self) -> int:
        return len(self.starts)

    @property
    def last_entry_id(self) -> int:
        return self.first_entry_id + len(self.starts) - 1


@dataclass(frozen=True, slots=True)
class BookieInfo:
    bookie_id: str
    read_only: bool
    total_disk_bytes: int
    free_disk_bytes: int
    journal_lag_bytes: int = 0


class BookieStorage(Protocol):
    """The storage node as seen by its service layer."""

    def submit_packed(
        self,
        buf: bytes,
        master_key: bytes = b"",
        recovery: bool = False,
        first: int = 0,
        stop: int | None = None,
    ) -> tuple[Awaitable[list[int]], int, int]:
        """Add every entry of the packed batch ``buf[first:stop]`` (layout: ``wire.py``;
        ``stop`` None: the end) with the batch's master key and recovery flag. Validates
        every entry synchronously (ids, size, master key, fence, checksum) and journals the
        valid ones; returns (an awaitable resolving, once the journal group holding them is
        fsync'd, to one status per entry: 0 = OK, else a ``StatusCode``; the entry count;
        the bytes stored). Refused entries get their code without waiting. Raises
        ``wire.MalformedBatch`` before changing anything when ``buf`` does not hold whole
        entries. ``buf`` must not change afterwards (a storage may keep views of it)."""
        ...

    async def read_entry(self, ledger_id: int, entry_id: int) -> Entry:
        """``entry_id == -1`` reads the last entry. Raises ``NoLedger`` / ``NoEntry``."""
        ...

    async def read_range(
        self, ledger_id: int, first_entry_id: int, last_entry_id: int, max_bytes: int
    ) -> list[Entry]:
        """Entries first..last (inclusive) that exist, in order, stopping at a gap or max_bytes
        (at least one entry is returned if the first exists)."""
        ...

    async def read_packed(
        self, ledger_id: int, first_entry_id: int, last_entry_id: int, max_bytes: int
    ) -> tuple[list[bytes | memoryview], int]:
        """``read_range``'s entries in the packed layout (``wire.py``: header, payload, per
        entry), as parts to join, and how many entries: the bookie answers a packed read
        without an object per entry. Checksums are left to the reader. Raises as
        ``read_range``."""
        ...

    async def wait_for_lac(self, ledger_id: int, previous_lac: int, timeout_ms: int) -> int:
        """Long poll: return the ledger's LAC as soon as it is > previous_lac, or at the timeout."""
        ...

    def read_lac(self, ledger_id: int) -> int:
        """Highest LAC this bookie knows (from adds and explicit LAC); -1 if none.
        Raises ``NoLedger`` if the bookie has never seen the ledger (BookKeeper's ENOLEDGER)."""
        ...

    async def fence(self, ledger_id: int, master_key: bytes) -> int:
        """Fence durably (journaled before returning); returns the bookie's last entry id or -1."""
        ...

    async def write_lac(self, ledger_id: int, master_key: bytes, lac: int) -> None: ...

    async def force_ledger(self, ledger_id: int) -> None: ...

    def info(self) -> BookieInfo: ...


class EntryToAdd(Protocol):
    """What ``add_batch`` reads of each entry: ``AddRequest`` has it, and so may a writer's own
    per-entry record (no request object per entry)."""

    @property
    def entry_id(self) -> int: ...

    @property
    def lac(self) -> int: ...

    @property
    def crc32c(self) -> int: ...

    @property
    def payload(self) -> bytes: ...


class BookieClientAPI(Protocol):
    """One remote bookie, as the broker's ledger layer uses it.

    ``add`` is not a coroutine: it queues the entry (adds issued in the same loop iteration
    travel in one message) and returns a future resolving when the bookie has it durably,
    or failing with a ``BookieError``. Futures of one ledger resolve in entry order.
    """

    @property
    def address(self) -> str: ...

    def add(self, request: AddRequest) -> Awaitable[None]: ...

    def add_batch(
        self,
        ledger_id: int,
        master_key: bytes,
        entries: Sequence[EntryToAdd],
        *,
        recovery: bool = False,
    ) -> Awaitable[None]:
        """Queue entries of one ledger; ONE awaitable resolves once the bookie has them all
        durably, or fails with a ``BookieError`` (then none counts as stored). Not a
        coroutine; awaitables resolve in call order. ``entries`` must not change afterwards
        (the same sequence sent to several bookies is encoded once)."""
        ...

    async def read_entry(self, ledger_id: int, entry_id: int) -> Entry: ...

    async def read_range(
        self, ledger_id: int, first_entry_id: int, last_entry_id: int, max_bytes: int = 4 << 20
    ) -> list[Entry]: ...

    async def read_packed(
        self, ledger_id: int, first_entry_id: int, last_entry_id: int, max_bytes: int = 4 << 20
    ) -> EntryRun:
        """Entries first..last (at most ``max_bytes``, at least one) as one ``EntryRun``,
        each entry's checksum verified (``CorruptEntry`` when one does not match)."""
        ...

    async def read_lac(self, ledger_id: int) -> int: ...

    async def wait_for_lac(self, ledger_id: int, previous_lac: int, timeout_ms: int) -> int: ...

    async def fence(self, ledger_id: int, master_key: bytes) -> int: ...

    async def write_lac(self, ledger_id: int, master_key: bytes, lac: int) -> None: ...

    async def force_ledger(self, ledger_id: int) -> None: ...

    async def info(self) -> BookieInfo: ...

    async def close(self) -> None: ...


def _entry_init(  # noqa: PLR0917 (Entry's positional constructor)
    self: Entry, ledger_id: int, entry_id: int, lac: int, crc32c: int, payload: bytes
) -> None:
    """``Entry.__init__`` through the slot descriptors, as ``AddRequest``'s: an entry is
    built once per entry read, by the bookie and by every reader (a range read of 100
    entries built 100 with the dataclass's ``object.__setattr__`` per field)."""
    _set_e_ledger_id(self, ledger_id)
    _set_e_entry_id(self, entry_id)
    _set_e_lac(self, lac)
    _set_e_crc32c(self, crc32c)
    _set_e_payload(self, payload)


(_set_e_ledger_id, _set_e_entry_id, _set_e_lac, _set_e_crc32c, _set_e_payload) = (
    Entry.__dict__[name].__set__ for name in Entry.__slots__
)
_dataclass_entry_init = Entry.__init__
Entry.__init__ = _entry_init  # type: ignore[method-assign]


__all__ = [
    "NO_ENTRY_ID",
    "AddRequest",
    "BookieClientAPI",
    "BookieInfo",
    "BookieStorage",
    "Entry",
    "EntryRun",
    "EntryToAdd",
]
