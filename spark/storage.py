"""Reading ledger entries straight from the bookies, inside a Spark task (read-only).

Owns: ``LedgerReader``: the entries ``first`` .. ``last`` of one ledger (a ``LedgerLayout``
from the planner: fragments and bookie addresses, no metadata store) read from the bookies
that hold them: range reads from one member of a fragment's ensemble where every member holds
the whole fragment (E == Qw; requests spread over the members), single-entry reads from each
entry's write set otherwise (E > Qw); the other replicas when one fails; a few requests in
flight ahead of the caller (``READ_WINDOW`` requests of about ``READ_BYTES`` each: what
bounds a task's memory for reading); each entry's checksum verified (the bookie client's
crc32c of the stored bytes) and its ledger frame stripped (``unframe``). For a ledger that
is still open, ``confirmed`` is its last add confirmed as the bookies know it: entries after
it belong to the writer (the caller reads them through the broker).

Never writes, never fences, never opens a ledger for recovery: the topic's writer is never
disturbed. With bookie TLS the client presents the job's certificate (``GrpcTls``); a bookie
that refuses its role answers ``Unauthorized``.

Errors: ``StorageUnavailable`` (no replica answered: unreachable, refused, timed out,
corrupt), ``StorageDataLost`` (every replica says the ledger or the entry does not exist:
deleted by retention meanwhile).

The one module of ``magnetar.spark`` that imports the bookie client and the ledger codec (the
import-linter contract ``spark`` allows exactly these imports, here).

Must not know: Spark, topics, messages.
"""

from __future__ import annotations

import asyncio
import bisect
import collections
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass

from magnetar.bookie.client import BookieClient
from magnetar.bookie.errors import BookieError, NoEntry, NoLedger
from magnetar.bookie.tls import GrpcTls
from magnetar.broker.ledger.handle import unframe
from magnetar.broker.ledger.metadata import write_set
from magnetar.spark.layout import Fragment, LedgerLayout

log = logging.getLogger(__name__)

READ_BYTES = 2 << 20
"""Entries asked per range request: about this many stored bytes (by the ledger's average)."""
READ_BYTES_MAX = 8 << 20
"""What a bookie may answer to one range request at most (it answers less, never more)."""
READ_WINDOW = 3
"""Range requests in flight per task (single-entry reads: ``READ_WINDOW_ENTRIES``)."""
READ_WINDOW_ENTRIES = 64
READ_ENTRIES_MAX = 10_000
"""Entries per range request at most."""


class StorageError(RuntimeError):
    """Entries could not be read from the bookies."""


class StorageUnavailable(StorageError):
    """No bookie holding the entries answered (down, unreachable, refused or corrupt)."""


class StorageDataLost(StorageError):
    """Every bookie holding the entries says they do not exist (the ledger was deleted)."""


@dataclass(frozen=True, slots=True)
class _Request:
    first: int
    last: int
    replicas: tuple[str, ...]


class LedgerReader:
    """Reads of ledger entries from the bookies for one task (a client per bookie)."""

    def __init__(self, *, tls: GrpcTls | None, timeout_ms: int = 30_000, spread: int = 0) -> None:
        self.tls = tls
        self.timeout_ms = timeout_ms
        self.spread = spread
        """Which member of an ensemble range requests start with (a task's index spreads
        the tasks of one ledger over its replicas)."""
        self._clients: dict[str, BookieClient] = {}

    def _client(self, address: str) -> BookieClient:
        client = self._clients.get(address)
        if client is None:
            client = BookieClient(address, timeout_ms=self.timeout_ms, tls=self.tls, fast_add=False)
            self._clients[address] = client
        return client

    async def close(self) -> None:
        clients, self._clients = list(self._clients.values()), {}
        for c in clients:
            await c.close()

    async def confirmed(self, ledger: LedgerLayout) -> int:
        """The last add confirmed of an open ledger, as its last fragment's bookies know it
        (the highest any of them answers; -1: none yet)."""
        errors: list[str] = []
        best = None
        for address in ledger.fragments[-1].bookies:
            try:
                lac = await self._client(address).read_lac(ledger.ledger_id)
            except NoLedger:
                lac = -1
            except BookieError as exc:
                errors.append(f"{address}: {type(exc).__name__}: {exc}")
                continue
            best = lac if best is None else max(best, lac)
        if best is None:
            raise StorageUnavailable(
                f"ledger {ledger.ledger_id}: no bookie answered its last add confirmed ("
                + "; ".join(errors)
                + ")"
            )
        return best

    def _requests(self, ledger: LedgerLayout, first: int, last: int) -> list[_Request]:
        out: list[_Request] = []
        frags = ledger.fragments
        step = max(1, min(READ_ENTRIES_MAX, int(READ_BYTES / ledger.entry_bytes)))
        for i, frag in enumerate(frags):
            lo = max(first, frag.first_entry)
            hi = last if i + 1 == len(frags) else min(last, frags[i + 1].first_entry - 1)
            if lo > hi:
                continue
            out.extend(self._fragment_requests(ledger, frag, lo, hi, step=step, n=len(out)))
        return out

    def _fragment_requests(
        self, ledger: LedgerLayout, frag: Fragment, lo: int, hi: int, *, step: int, n: int
    ) -> list[_Request]:
        ens = frag.bookies
        if len(ens) > ledger.write_quorum:  # striped: each bookie holds some of the entries
            return [
                _Request(e, e, write_set(ens, ledger.write_quorum, e)) for e in range(lo, hi + 1)
            ]
        out = []
        for k, a in enumerate(range(lo, hi + 1, step)):
            first = (self.spread + n + k) % len(ens)
            out.append(_Request(a, min(hi, a + step - 1), ens[first:] + ens[:first]))
        return out

    async def _fetch(self, ledger_id: int, req: _Request) -> list[bytes]:
        """The stored payloads of ``req``'s entries from the first replica that answers
        (fewer than asked when the bookie's answer reached its byte bound: the rest is asked
        again by the caller)."""
        failed: list[str] = []
        missing: list[str] = []
        for address in req.replicas:
            client = self._client(address)
            try:
                if req.first == req.last:
                    got = [await client.read_entry(ledger_id, req.first)]
                else:
                    got = await client.read_range(ledger_id, req.first, req.last, READ_BYTES_MAX)
            except (NoEntry, NoLedger) as exc:
                missing.append(f"{address}: {exc}")
                continue
            except BookieError as exc:
                failed.append(f"{address}: {type(exc).__name__}: {exc}")
                continue
            return [unframe(e).payload for e in got]
        where = f"entries {ledger_id}:{req.first}..{req.last}"
        if failed:
            raise StorageUnavailable(f"{where}: no bookie answered ({'; '.join(failed + missing)})")
        raise StorageDataLost(f"{where} do not exist on any bookie ({'; '.join(missing)})")

    async def sample(self, ledger: LedgerLayout, entry_ids: list[int]) -> list[bytes]:
        """The stored payloads of a few entries (read concurrently, each from its replicas)."""
        ens = {e: ledger.fragments[_fragment_of(ledger, e)].bookies for e in entry_ids}
        return [
            got[0]
            for got in await asyncio.gather(
                *(
                    self._fetch(
                        ledger.ledger_id, _Request(e, e, write_set(ens[e], ledger.write_quorum, e))
                    )
                    for e in entry_ids
                )
            )
        ]

    async def entries(
        self, ledger: LedgerLayout, first: int, last: int
    ) -> AsyncIterator[tuple[int, list[bytes]]]:
        """(id of the first, stored payloads) of consecutive entries ``first`` .. ``last``,
        in order, in chunks; at most ``READ_WINDOW`` requests ahead of the caller."""
        todo = collections.deque(self._requests(ledger, first, last))
        window = READ_WINDOW_ENTRIES if ledger.striped else READ_WINDOW
        inflight: collections.deque[tuple[_Request, asyncio.Task[list[bytes]]]] = (
            collections.deque()
        )
        lid = ledger.ledger_id
        try:
            while todo or inflight:
                while todo and len(inflight) < window:
                    req = todo.popleft()
                    inflight.append((req, asyncio.ensure_future(self._fetch(lid, req))))
                req, task = inflight.popleft()
                got = await task
                if not got:
                    raise StorageDataLost(f"entries {lid}:{req.first}..{req.last}: none read")
                if req.first + len(got) - 1 < req.last:  # the bookie's byte bound: ask the rest
                    rest = _Request(req.first + len(got), req.last, req.replicas)
                    # in order: cancel what was sent after it, send it first, then them again
                    later = [r for r, t in inflight]
                    for _, t in inflight:
                        t.cancel()
                    inflight.clear()
                    todo.extendleft(reversed([rest, *later]))
                yield req.first, got
        finally:
            for _, t in inflight:
                t.cancel()


def _fragment_of(ledger: LedgerLayout, entry_id: int) -> int:
    firsts = [f.first_entry for f in ledger.fragments]
    return max(0, bisect.bisect_right(firsts, entry_id) - 1)


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
    "StorageDataLost",
    "StorageError",
    "StorageUnavailable",
    "grpc_tls",
]
