"""In-memory bookies for the fast unit tiers, with fault injection.

Owns: ``FakeBookie`` (one storage node: entries, fence bits, master keys, LAC, long polls),
``FakeBookieClient`` (a ``BookieClientAPI`` view of it, one per broker) and
``FakeBookieCluster`` (registers bookies in a metadata store as ephemeral nodes, like real
bookies, and is the client factory). Faults: ``fail_adds`` (every add fails with an error),
``hang`` (requests never answer until ``resume``), ``crash`` (unreachable; registration
optionally kept, as after a SIGKILL before session expiry), ``restart``.
Real bookie processes are used in the integration and chaos tiers; this is never the only proof.
Must not know: ledger metadata, managed ledgers.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from dataclasses import dataclass, field

import crc32c

from magnetar.bookie.api import AddRequest, BookieInfo, Entry, EntryRun
from magnetar.bookie.client import AddEntryLike
from magnetar.bookie.errors import (
    BookieError,
    BookieUnavailable,
    CorruptEntry,
    Fenced,
    NoEntry,
    NoLedger,
    Unauthorized,
)
from magnetar.zk import paths
from magnetar.zk.memory import MemoryMetadataServer, MemoryMetadataStore


@dataclass
class FakeBookie:
    bookie_id: str
    entries: dict[int, dict[int, Entry]] = field(default_factory=dict)
    fenced: set[int] = field(default_factory=set)
    master_keys: dict[int, bytes] = field(default_factory=dict)
    lacs: dict[int, int] = field(default_factory=dict)
    up: bool = True
    hung: bool = False
    dropping: bool = False
    add_error: BookieError | None = None
    adds_received: int = 0
    adds_dropped: int = 0
    _held: list[tuple[asyncio.Future[None], BaseException | None]] = field(default_factory=list)
    _lac_waiters: list[tuple[int, int, asyncio.Future[int]]] = field(default_factory=list)

    # -- faults -----------------------------------------------------------------------------------
    def fail_adds(self, error: BookieError | None) -> None:
        self.add_error = error

    def hang(self) -> None:
        self.hung = True

    def drop_adds(self, dropping: bool = True) -> None:
        """Swallow adds: not stored, never answered (a partition on the request path)."""
        self.dropping = dropping

    def resume(self) -> None:
        self.hung = False
        held, self._held = self._held, []
        for fut, exc in held:
            if not fut.done():
                if exc is None:
                    fut.set_result(None)
                else:
                    fut.set_exception(exc)

    def crash(self) -> None:
        self.up = False
        held, self._held = self._held, []
        for fut, _ in held:
            if not fut.done():
                fut.set_exception(BookieUnavailable(f"{self.bookie_id} is down"))

    def restart(self) -> None:
        self.up = True

    def corrupt(self, ledger_id: int, entry_id: int) -> None:
        e = self.entries[ledger_id][entry_id]
        self.entries[ledger_id][entry_id] = Entry(
            e.ledger_id, e.entry_id, e.lac, e.crc32c, b"X" + e.payload[1:]
        )

    # -- operations ---------------------------------------------------------------------------
    def _check_up(self) -> None:
        if not self.up:
            raise BookieUnavailable(f"{self.bookie_id} is down")

    def add(self, request: AddRequest) -> asyncio.Future[None]:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        exc: BaseException | None = None
        if self.dropping:
            self.adds_dropped += 1
            return fut
        try:
            self._check_up()
            self._store(request)
        except BookieError as e:
            exc = e
        if self.hung:
            self._held.append((fut, exc))
        elif exc is None:
            loop.call_soon(_resolve, fut, None)
        else:
            loop.call_soon(_resolve, fut, exc)
        return fut

    def _store(self, r: AddRequest) -> None:
        if self.add_error is not None:
            raise self.add_error
        known = self.master_keys.setdefault(r.ledger_id, r.master_key)
        if known != r.master_key:
            raise Unauthorized("master key mismatch")
        if r.ledger_id in self.fenced and not r.recovery:
            raise Fenced(f"ledger {r.ledger_id} fenced on {self.bookie_id}")
        if crc32c.crc32c(r.payload) != r.crc32c:
            raise CorruptEntry("checksum mismatch on receipt")
        self.adds_received += 1
        self.entries.setdefault(r.ledger_id, {})[r.entry_id] = Entry(
            r.ledger_id, r.entry_id, r.lac, r.crc32c, r.payload
        )
        if r.lac > self.lacs.get(r.ledger_id, -1):
            self.lacs[r.ledger_id] = r.lac
            waiters, self._lac_waiters = self._lac_waiters, []
            for ledger, prev, fut in waiters:
                if ledger == r.ledger_id and r.lac > prev:
                    if not fut.done():
                        fut.set_result(r.lac)
                else:
                    self._lac_waiters.append((ledger, prev, fut))

    def read_entry(self, ledger_id: int, entry_id: int) -> Entry:
        self._check_up()
        ledger = self.entries.get(ledger_id)
        if ledger is None:
            raise NoLedger(f"no ledger {ledger_id} on {self.bookie_id}")
        if entry_id == -1:
            if not ledger:
                raise NoEntry("empty ledger")
            entry_id = max(ledger)
        try:
            return ledger[entry_id]
        except KeyError:
            raise NoEntry(f"no entry {ledger_id}:{entry_id} on {self.bookie_id}") from None

    def fence(self, ledger_id: int, master_key: bytes) -> int:
        self._check_up()
        known = self.master_keys.setdefault(ledger_id, master_key)
        if known != master_key:
            raise Unauthorized("master key mismatch")
        self.fenced.add(ledger_id)
        ledger = self.entries.get(ledger_id) or {}
        return max(ledger) if ledger else -1

    def delete_ledger(self, ledger_id: int) -> None:
        """What bookie GC does once the ledger's metadata is gone."""
        self.entries.pop(ledger_id, None)
        self.lacs.pop(ledger_id, None)


def _resolve(fut: asyncio.Future[None], exc: BaseException | None) -> None:
    if fut.done():
        return
    if exc is None:
        fut.set_result(None)
    else:
        fut.set_exception(exc)


class FakeBookieClient:
    """``BookieClientAPI`` over a ``FakeBookie`` (each broker gets its own client)."""

    def __init__(self, bookie: FakeBookie, address: str) -> None:
        self._bookie = bookie
        self._address = address
        self.closed = False
        self._inflight: set[asyncio.Future[None]] = set()
        self.add_address: str | None = None
        """The fast add address the registry last told this client (a fake has no transport)."""

    @property
    def address(self) -> str:
        return self._address

    def set_add_address(self, add_address: str | None) -> None:
        self.add_address = add_address

    async def health(self, timeout_ms: int | None = None) -> bool:
        b = self._bookie
        return b.up and not b.hung  # a hung bookie does not answer in time

    def add(self, request: AddRequest) -> asyncio.Future[None]:
        if self.closed:
            fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            fut.set_exception(BookieUnavailable(f"client for {self._address} is closed"))
            return fut
        fut = self._bookie.add(request)
        if not fut.done():
            self._inflight.add(fut)
            fut.add_done_callback(self._inflight.discard)
        return fut

    def add_batch(
        self,
        ledger_id: int,
        master_key: bytes,
        entries: Sequence[AddEntryLike],
        *,
        recovery: bool = False,
    ) -> asyncio.Future[None]:
        """As ``BookieClient.add_batch``: one future for the entries (each is stored, held,
        dropped or failed as a single add would be); it fails with the first Fenced or
        Unauthorized error, else the first error."""
        loop = asyncio.get_running_loop()
        out: asyncio.Future[None] = loop.create_future()
        futs = [
            self.add(
                AddRequest(ledger_id, e.entry_id, e.lac, e.crc32c, e.payload, master_key, recovery)
            )
            for e in entries
        ]
        remaining = len(futs)

        def on_one(_: object) -> None:
            nonlocal remaining
            remaining -= 1
            if remaining or out.done():
                return
            errors = [
                BookieUnavailable("add cancelled") if f.cancelled() else f.exception() for f in futs
            ]
            found = [e for e in errors if e is not None]
            if not found:
                out.set_result(None)
                return
            severe = [e for e in found if isinstance(e, Fenced | Unauthorized)]
            out.set_exception((severe or found)[0])

        if not futs:
            out.set_result(None)
        for f in futs:
            f.add_done_callback(on_one)
        return out

    async def _gate(self) -> None:
        b = self._bookie
        if b.hung:
            fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            b._held.append((fut, None))
            await fut
        b._check_up()

    async def read_entry(self, ledger_id: int, entry_id: int) -> Entry:
        await self._gate()
        return self._bookie.read_entry(ledger_id, entry_id)

    async def read_range(
        self, ledger_id: int, first_entry_id: int, last_entry_id: int, max_bytes: int = 4 << 20
    ) -> list[Entry]:
        await self._gate()
        ledger = self._bookie.entries.get(ledger_id)
        if ledger is None:
            raise NoLedger(f"no ledger {ledger_id}")
        out: list[Entry] = []
        size = 0
        for e in range(first_entry_id, last_entry_id + 1):
            entry = ledger.get(e)
            if entry is None or (out and size + len(entry.payload) > max_bytes):
                break
            out.append(entry)
            size += len(entry.payload)
        if not out:
            raise NoEntry(f"no entry {ledger_id}:{first_entry_id}")
        return out

    async def read_packed(
        self, ledger_id: int, first_entry_id: int, last_entry_id: int, max_bytes: int = 4 << 20
    ) -> EntryRun:
        """``read_range``'s entries as one run, checked as the real client checks them."""
        entries = await self.read_range(ledger_id, first_entry_id, last_entry_id, max_bytes)
        starts: list[int] = []
        ends: list[int] = []
        at = 0
        for entry in entries:
            if crc32c.crc32c(entry.payload) != entry.crc32c:
                raise CorruptEntry(f"checksum mismatch on {ledger_id}:{entry.entry_id}")
            starts.append(at)
            at += len(entry.payload)
            ends.append(at)
        data = b"".join(e.payload for e in entries)
        return EntryRun(ledger_id, first_entry_id, data, starts, ends)

    async def read_lac(self, ledger_id: int) -> int:
        await self._gate()
        return self._bookie.lacs.get(ledger_id, -1)

    async def wait_for_lac(self, ledger_id: int, previous_lac: int, timeout_ms: int) -> int:
        await self._gate()
        lac = self._bookie.lacs.get(ledger_id, -1)
        if lac > previous_lac:
            return lac
        fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._bookie._lac_waiters.append((ledger_id, previous_lac, fut))
        try:
            return await asyncio.wait_for(fut, timeout_ms / 1000.0)
        except TimeoutError:
            return self._bookie.lacs.get(ledger_id, -1)

    async def fence(self, ledger_id: int, master_key: bytes) -> int:
        await self._gate()
        return self._bookie.fence(ledger_id, master_key)

    async def write_lac(self, ledger_id: int, master_key: bytes, lac: int) -> None:
        await self._gate()
        if lac > self._bookie.lacs.get(ledger_id, -1):
            self._bookie.lacs[ledger_id] = lac

    async def force_ledger(self, ledger_id: int) -> None:
        await self._gate()

    async def info(self) -> BookieInfo:
        await self._gate()
        return BookieInfo(self._bookie.bookie_id, False, 1 << 40, 1 << 40)

    async def close(self) -> None:
        """As ``BookieClient.close``: adds still unanswered fail with ``BookieUnavailable``."""
        self.closed = True
        inflight, self._inflight = self._inflight, set()
        for fut in inflight:
            if not fut.done():
                fut.set_exception(BookieUnavailable(f"client for {self._address} closed"))


class FakeBookieCluster:
    """Fake bookies registered in a metadata store, and the client factory for them."""

    def __init__(self, server: MemoryMetadataServer, count: int = 3) -> None:
        self.server = server
        self.bookies: dict[str, FakeBookie] = {}
        self._sessions: dict[str, MemoryMetadataStore] = {}
        for i in range(count):
            self.add_bookie(f"127.0.0.1:{3181 + i}")

    def add_bookie(self, bookie_id: str) -> FakeBookie:
        bookie = FakeBookie(bookie_id)
        self.bookies[bookie_id] = bookie
        self._register(bookie_id)
        return bookie

    def _register(self, bookie_id: str) -> None:
        session = self.server.connect()
        self._sessions[bookie_id] = session
        self.server.put(
            session.session_id,
            paths.bookie_registration(bookie_id),
            json.dumps({"address": bookie_id}).encode(),
            expected_version=None,
            ephemeral=True,
            sequential=False,
        )

    def __getitem__(self, bookie_id: str) -> FakeBookie:
        return self.bookies[bookie_id]

    def factory(self, address: str) -> FakeBookieClient:
        return FakeBookieClient(self.bookies[address], address)

    def crash(self, bookie_id: str, *, keep_registration: bool = False) -> None:
        self.bookies[bookie_id].crash()
        if not keep_registration:
            self.unregister(bookie_id)

    def unregister(self, bookie_id: str) -> None:
        session = self._sessions.pop(bookie_id, None)
        if session is not None:
            self.server.expire_session(session.session_id)

    def restart(self, bookie_id: str) -> None:
        self.bookies[bookie_id].restart()
        if bookie_id not in self._sessions:
            self._register(bookie_id)

    def gc(self, live_ledgers: set[int]) -> None:
        """Bookie GC: drop ledgers whose metadata is gone."""
        for bookie in self.bookies.values():
            for ledger_id in list(bookie.entries):
                if ledger_id not in live_ledgers:
                    bookie.delete_ledger(ledger_id)


__all__ = ["FakeBookie", "FakeBookieClient", "FakeBookieCluster"]
