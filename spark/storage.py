"""Reading ledger entries straight from storage, inside a Spark task (read-only): from the
bookies, and a ledger offloaded to tiered storage from its object store.

Owns: ``LedgerReader``: the entries ``first`` .. ``last`` of one ledger (a ``LedgerLayout``
from the planner: its fragments and the bookies' addresses, or its offload record; no
metadata store), handed to the caller as runs (``LedgerEntries``: a buffer and the entries'
offsets, no object per entry).

- A ledger on the bookies is read through BookKeeper's read-handle contract
  (``broker.bookkeeper``: any replica of an entry's write set, packed range reads on
  unstriped fragments, each entry's checksum verified) with ``open_sealed_ledger``. A sealed
  ledger is read as it is; the ledger still open is read as the snapshot its writer had
  confirmed when the read was planned (the broker's last add confirmed, given by the ledgers
  endpoint as ``entries``): those entries are on an ack quorum of bookies and never change,
  and nothing after them is read here (the caller reads any later entry through the
  broker). The bookies' own last add confirmed lags the writer's (it rides on the next add),
  so it is not the bound.
- A ledger whose bookie copy is deleted after its offload is read from its object store
  (``offloaded.OffloadedLedgers``, with the job's ``pulsar.offload.*`` settings); so is an
  offloaded ledger still on the bookies when no bookie serves it (its copy deleted since the
  planner looked).

``READ_WINDOW`` reads of about ``READ_BYTES`` are kept in flight ahead of the caller (what
bounds a task's memory for reading, with the store's read-ahead).

Never writes, never fences, never opens a ledger for recovery: the topic's writer is never
disturbed. With bookie TLS the bookie clients present the job's certificate (``GrpcTls``).

Errors: ``StorageUnavailable`` (no replica served an entry: down, unreachable, refused,
corrupt, or the ledger deleted meanwhile), and its kind ``OffloadUnavailable`` (an offloaded
ledger's store did not serve it).

The one module of ``magnetar.spark`` that imports the bookie client and BookKeeper's client
(the import-linter contract ``spark`` allows exactly these imports, here).

Must not know: Spark, topics, messages.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import AsyncIterator

from magnetar.bookie.client import read_clients
from magnetar.bookie.tls import GrpcTls
from magnetar.broker.bookkeeper.entry import LedgerEntries
from magnetar.broker.bookkeeper.errors import LedgerError
from magnetar.broker.bookkeeper.metadata import LedgerMetadata
from magnetar.broker.bookkeeper.read_handle import BookieReadHandle, open_sealed_ledger
from magnetar.broker.bookkeeper.replicas import BookiePool
from magnetar.broker.bookkeeper.states import LedgerState
from magnetar.spark.layout import LedgerLayout
from magnetar.spark.offloaded import OffloadedLedgers, OffloadUnreadable, describe

log = logging.getLogger(__name__)

READ_BYTES = 2 << 20
"""Entries asked per read: about this many stored bytes (by the ledger's average)."""
READ_WINDOW = 3
"""Reads in flight per task."""
READ_ENTRIES_MAX = 10_000
"""Entries per read at most."""


class StorageError(RuntimeError):
    """Entries could not be read from the bookies."""


class StorageUnavailable(StorageError):
    """No bookie holding the entries served them."""


class OffloadUnavailable(StorageUnavailable):
    """An offloaded ledger's object store did not serve its entries."""


class LedgerReader:
    """Reads of ledger entries from storage for one task (a client per bookie; one
    offloaded ledger open at a time). ``offload``: the job's ``pulsar.offload.*`` settings."""

    def __init__(
        self,
        *,
        tls: GrpcTls | None,
        offload: dict[str, str] | None = None,
        timeout_ms: int = 30_000,
    ) -> None:
        self.pool = BookiePool(read_clients(tls=tls, timeout_ms=timeout_ms))
        self._handles: dict[int, BookieReadHandle] = {}
        self._offloaded = OffloadedLedgers(offload or {})

    async def close(self) -> None:
        await self._offloaded.close()
        await self.pool.close()

    def _handle(self, ledger: LedgerLayout) -> BookieReadHandle:
        handle = self._handles.get(ledger.ledger_id)
        if handle is None:
            metadata = LedgerMetadata(
                ledger_id=ledger.ledger_id,
                ensemble_size=ledger.ensemble_size,
                write_quorum=ledger.write_quorum,
                ack_quorum=ledger.ack_quorum,
                state=LedgerState.CLOSED,  # sealed, or the confirmed snapshot of the open one
                ensembles=tuple((f.first_entry, f.bookies) for f in ledger.fragments),
                master_key=b"",
                last_entry_id=confirmed(ledger),
                length=ledger.length if ledger.closed else ledger.size,
            )
            handle = self._handles[ledger.ledger_id] = open_sealed_ledger(metadata, self.pool)
        return handle

    async def _read(self, ledger: LedgerLayout, first: int, last: int) -> list[LedgerEntries]:
        if ledger.on_bookies:
            try:
                return await self._handle(ledger).read_runs(first, last)
            except LedgerError as exc:
                failed = StorageUnavailable(
                    f"entries {ledger.ledger_id}:{first}..{last} from "
                    f"{sorted({b for f in ledger.fragments for b in f.bookies})}: {exc}"
                )
                if ledger.offload is None:
                    raise failed from None
                log.info("%s; reading them from tiered storage", failed)
        try:
            return [await self._offloaded.read(ledger, first, last)]
        except OffloadUnreadable as exc:
            raise OffloadUnavailable(
                f"entries {ledger.ledger_id}:{first}..{last}, offloaded to "
                f"{describe(ledger)}: {exc}"
            ) from None

    async def sample(self, ledger: LedgerLayout, entry_ids: list[int]) -> list[bytes]:
        """The stored payloads of a few entries (read concurrently; none of a ledger only in
        tiered storage: a planner's estimate is not worth opening its objects)."""
        if not ledger.on_bookies:
            return []
        entry_ids = [e for e in entry_ids if e <= confirmed(ledger)]
        got = await asyncio.gather(*(self._read(ledger, e, e) for e in entry_ids))
        return [run.payloads()[0] for runs in got for run in runs[:1]]

    async def entries(
        self, ledger: LedgerLayout, first: int, last: int
    ) -> AsyncIterator[LedgerEntries]:
        """Consecutive entries ``first`` .. ``last`` (at most ``confirmed(ledger)``), in
        order, in runs (buffers and offsets: no object per entry); at most ``READ_WINDOW``
        reads ahead of the caller."""
        step = max(1, min(READ_ENTRIES_MAX, int(READ_BYTES / ledger.entry_bytes)))
        todo = collections.deque((a, min(last, a + step - 1)) for a in range(first, last + 1, step))
        inflight: collections.deque[asyncio.Task[list[LedgerEntries]]] = collections.deque()
        try:
            while todo or inflight:
                while todo and len(inflight) < READ_WINDOW:
                    a, b = todo.popleft()
                    inflight.append(asyncio.ensure_future(self._read(ledger, a, b)))
                for run in await inflight.popleft():
                    yield run
        finally:
            for t in inflight:
                t.cancel()


def confirmed(ledger: LedgerLayout) -> int:
    """The last entry of ``ledger`` read from the bookies: a sealed ledger's last, the open
    one's last add confirmed by its writer when the read was planned."""
    return ledger.last_entry_id if ledger.closed else ledger.entries - 1


def grpc_tls(
    trust_certs_file: str | None, certificate_file: str | None, key_file: str | None
) -> GrpcTls:
    """The job's TLS files as the bookie client's TLS settings."""
    return GrpcTls(
        certificate_file=certificate_file or "",
        key_file=key_file or "",
        trust_certs_file=trust_certs_file or "",
    )


__all__ = [
    "LedgerReader",
    "OffloadUnavailable",
    "StorageError",
    "StorageUnavailable",
    "confirmed",
    "grpc_tls",
]
