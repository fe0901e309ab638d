"""Reading a ledger: the read-handle contract and its bookie implementation.

Owns:
- ``ReadHandle``, the contract every reader of a ledger is written against (the managed
  ledger, cursor recovery, an offloader serving an offloaded ledger, a Spark executor): the
  ledger id, the last add confirmed, the length, whether the ledger is closed, and
  ``read(first, last)``, entries first..last inclusive, never past the last add confirmed,
  each a ``LedgerEntry`` whose checksum was verified.
- ``BookieReadHandle``, the contract over bookies: each entry is read from any replica of
  its write set (those with a recent failure asked last), an unstriped fragment with packed
  range reads (one buffer per read, no message per entry: ``BookieClientAPI.read_packed``);
  when no replica of the ensembles it knows answers and it can reload the metadata, it reads
  again with the current ensembles (auto-recovery may have moved the entries). Besides
  ``read``, ``read_runs`` gives the same entries as ``LedgerEntries`` (buffers and offsets),
  for readers that decode entries in bulk.
- ``open_sealed_ledger``: a read-only handle on a CLOSED ledger from its metadata and a
  ``BookiePool``, without a metadata store. It never fences (only plain reads reach the
  bookies) and never reloads metadata.
Must not know: managed ledgers, topics, gRPC, the metadata store (a reload is a callable).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Protocol

from magnetar.bookie.errors import BookieError, BookieTimeout, BookieUnavailable
from magnetar.broker.bookkeeper.entry import LedgerEntries, LedgerEntry, unframe, unframe_run
from magnetar.broker.bookkeeper.errors import (
    BookieFailure,
    EntryCorrupt,
    LedgerNotSealed,
    ReadBeyondLastConfirmed,
)
from magnetar.broker.bookkeeper.metadata import LedgerMetadata, write_set
from magnetar.broker.bookkeeper.replicas import BookiePool, BookieReplicas
from magnetar.broker.bookkeeper.states import LedgerState


class ReadHandle(Protocol):
    """Reads of one ledger, up to its last add confirmed."""

    @property
    def ledger_id(self) -> int: ...

    @property
    def last_add_confirmed(self) -> int:
        """The last entry a reader may read (-1: none); final once the ledger is closed."""
        ...

    @property
    def length(self) -> int:
        """Bytes of payload up to the last add confirmed."""
        ...

    @property
    def is_closed(self) -> bool: ...

    async def read(self, first_entry_id: int, last_entry_id: int) -> list[LedgerEntry]:
        """Entries first..last inclusive, checksums verified; ``ReadBeyondLastConfirmed``
        past the last add confirmed, ``BookieFailure`` / ``EntryCorrupt`` when no replica
        serves an entry intact."""
        ...


MetadataReload = Callable[[int], Awaitable[tuple[LedgerMetadata, int] | None]]
"""The ledger's metadata and version as stored now (bookie addresses resolved), or None
when it cannot be read."""


class BookieReadHandle:
    """A ``ReadHandle`` over the bookies of the ledger's ensembles."""

    _adopts_fresh_metadata = True

    def __init__(
        self,
        replicas: BookieReplicas,
        metadata: LedgerMetadata,
        version: int = -1,
        *,
        reload: MetadataReload | None = None,
    ) -> None:
        self._replicas = replicas
        self._reload = reload
        self.metadata = metadata
        self.version = version
        self._lac = metadata.last_entry_id if metadata.state is LedgerState.CLOSED else -1

    def __repr__(self) -> str:
        return f"<{type(self).__name__} ledger={self.ledger_id} lac={self.last_add_confirmed}>"

    @property
    def ledger_id(self) -> int:
        return self.metadata.ledger_id

    @property
    def last_add_confirmed(self) -> int:
        return self._lac

    @property
    def is_closed(self) -> bool:
        return self.metadata.state is LedgerState.CLOSED

    @property
    def length(self) -> int:
        return self.metadata.length

    async def read_lac(self) -> int:
        """Ask the last fragment's bookies for the LAC they learned (non-owner readers)."""
        if self.is_closed:
            return self._lac
        ens = self.metadata.last_ensemble
        results = await asyncio.gather(
            *(self._replicas.client(b).read_lac(self.ledger_id) for b in ens),
            return_exceptions=True,
        )
        seen = [r for r in results if isinstance(r, int)]
        if seen:
            self._lac = max(self._lac, *seen)
        return self._lac

    async def wait_for_lac(self, previous_lac: int, timeout_ms: int) -> int:
        """Long poll: returns once LAC > previous_lac, or at the timeout."""
        if self._lac > previous_lac or self.is_closed:
            return self._lac
        ens = self.metadata.last_ensemble
        tasks = [
            asyncio.ensure_future(
                self._replicas.client(b).wait_for_lac(self.ledger_id, previous_lac, timeout_ms)
            )
            for b in ens
        ]
        try:
            for done in asyncio.as_completed(tasks):
                try:
                    lac = await done
                except BookieError:
                    continue
                if lac > previous_lac:
                    self._lac = max(self._lac, lac)
                    break
        finally:
            for task in tasks:
                task.cancel()
        return self._lac

    async def read(self, first_entry_id: int, last_entry_id: int) -> list[LedgerEntry]:
        """Entries first..last inclusive; never past the last add confirmed."""
        self._check_range(first_entry_id, last_entry_id)
        try:
            return await read_entries(self._replicas, self.metadata, first_entry_id, last_entry_id)
        except BookieFailure:
            # No replica of the ensembles we know answered: auto-recovery may have moved the
            # entries (it swaps ensembles in the metadata); read again with the current ones.
            fresh = await self._fresh_ensembles()
            if fresh is None:
                raise
            return await read_entries(self._replicas, fresh, first_entry_id, last_entry_id)

    async def read_runs(self, first_entry_id: int, last_entry_id: int) -> list[LedgerEntries]:
        """``read``'s entries as consecutive runs in buffers (no object per entry)."""
        self._check_range(first_entry_id, last_entry_id)
        try:
            return await read_runs(self._replicas, self.metadata, first_entry_id, last_entry_id)
        except BookieFailure:
            fresh = await self._fresh_ensembles()
            if fresh is None:
                raise
            return await read_runs(self._replicas, fresh, first_entry_id, last_entry_id)

    def _check_range(self, first_entry_id: int, last_entry_id: int) -> None:
        if first_entry_id < 0 or last_entry_id < first_entry_id:
            raise ValueError(f"bad range {first_entry_id}..{last_entry_id}")
        if last_entry_id > self.last_add_confirmed:
            raise ReadBeyondLastConfirmed(
                f"ledger {self.ledger_id}: {last_entry_id} > LAC {self.last_add_confirmed}"
            )

    async def _fresh_ensembles(self) -> LedgerMetadata | None:
        """The metadata as stored now if its ensembles differ from ours (else None); a
        reader adopts it (a writer keeps its own, changed only by its own CAS)."""
        if self._reload is None:
            return None
        got = await self._reload(self.ledger_id)
        if got is None:
            return None
        fresh, version = got
        if fresh.ensembles == self.metadata.ensembles:
            return None
        if self._adopts_fresh_metadata and fresh.state is self.metadata.state:
            self.metadata, self.version = fresh, version
        return fresh


def open_sealed_ledger(metadata: LedgerMetadata, bookies: BookiePool) -> BookieReadHandle:
    """A read-only handle on the CLOSED ledger ``metadata`` describes, reading from
    ``bookies``: no metadata store, never fencing (a sealed ledger has no writer to fence),
    its last add confirmed and length those of the metadata. ``LedgerNotSealed`` for a
    ledger that is not closed (its end belongs to a writer or a recovery)."""
    if metadata.state is not LedgerState.CLOSED:
        raise LedgerNotSealed(
            f"ledger {metadata.ledger_id} is {metadata.state.name}: only a CLOSED ledger "
            "can be read without a metadata store"
        )
    return BookieReadHandle(bookies, metadata)


async def read_entries(
    replicas: BookieReplicas, meta: LedgerMetadata, first: int, last: int
) -> list[LedgerEntry]:
    """Entries first..last of the ledger ``meta`` describes, from its replicas."""
    out: list[LedgerEntry] = []
    for ensemble, start, stop in _fragments(meta, first, last):
        if len(ensemble) == meta.write_quorum:
            for run in await _read_range_any(replicas, meta.ledger_id, ensemble, start, stop):
                out.extend(run.entries())
        else:
            out.extend(await _read_striped(replicas, meta, ensemble, start, stop))
    return out


async def read_runs(
    replicas: BookieReplicas, meta: LedgerMetadata, first: int, last: int
) -> list[LedgerEntries]:
    """``read_entries``' entries as consecutive runs in buffers."""
    out: list[LedgerEntries] = []
    for ensemble, start, stop in _fragments(meta, first, last):
        if len(ensemble) == meta.write_quorum:
            out.extend(await _read_range_any(replicas, meta.ledger_id, ensemble, start, stop))
        else:
            out.append(LedgerEntries.of(await _read_striped(replicas, meta, ensemble, start, stop)))
    return out


def _fragments(
    meta: LedgerMetadata, first: int, last: int
) -> list[tuple[tuple[str, ...], int, int]]:
    """(ensemble, first, last) of each fragment's part of first..last."""
    out = []
    entry_id = first
    while entry_id <= last:
        idx = meta.fragment_index(entry_id)
        _frag_first, ensemble = meta.ensembles[idx]
        frag_last = meta.ensembles[idx + 1][0] - 1 if idx + 1 < len(meta.ensembles) else last
        stop = min(last, frag_last)
        out.append((tuple(ensemble), entry_id, stop))
        entry_id = stop + 1
    return out


async def _read_striped(
    replicas: BookieReplicas,
    meta: LedgerMetadata,
    ensemble: tuple[str, ...],
    first: int,
    last: int,
) -> list[LedgerEntry]:
    """A striped fragment (E > Qw): each entry from its own write set."""
    return list(
        await asyncio.gather(
            *(
                _read_one(replicas, meta.ledger_id, write_set(ensemble, meta.write_quorum, e), e)
                for e in range(first, last + 1)
            )
        )
    )


async def _read_range_any(
    replicas: BookieReplicas, ledger_id: int, ensemble: tuple[str, ...], first: int, last: int
) -> list[LedgerEntries]:
    """Every bookie of an unstriped fragment holds every entry: packed range reads, from
    another replica when one fails, entry by entry when none serves a range."""
    out: list[LedgerEntries] = []
    start = first
    while start <= last:
        progressed = False
        for bookie in _read_order(replicas, ensemble):
            try:
                run = unframe_run(await replicas.client(bookie).read_packed(ledger_id, start, last))
            except (BookieError, EntryCorrupt) as exc:
                _read_failed(replicas, bookie, exc)
                continue
            if len(run) and run.first_entry_id == start:
                out.append(run)
                start = run.last_entry_id + 1
                progressed = True
                break
        if not progressed:
            # fall back to entry-by-entry reads on the replicas
            out.append(LedgerEntries.of([await _read_one(replicas, ledger_id, ensemble, start)]))
            start += 1
    return out


async def _read_one(
    replicas: BookieReplicas, ledger_id: int, ws: tuple[str, ...], entry_id: int
) -> LedgerEntry:
    errors: list[Exception] = []
    for bookie in _read_order(replicas, ws):
        try:
            entry = await replicas.client(bookie).read_entry(ledger_id, entry_id)
            return unframe(entry)
        except (BookieError, EntryCorrupt) as exc:
            _read_failed(replicas, bookie, exc)
            errors.append(exc)
    if errors and all(isinstance(e, EntryCorrupt) for e in errors):
        raise EntryCorrupt(f"{ledger_id}:{entry_id} corrupt on every replica")
    raise BookieFailure(f"cannot read {ledger_id}:{entry_id} from {ws}: {errors}")


def _read_order(replicas: BookieReplicas, ws: tuple[str, ...]) -> list[str]:
    """The replicas to ask, in write-set order but those with a recent failed add or read
    last, as BookKeeper reorders its read sequence by bookie health: a frozen replica costs
    one read timeout, not one per read."""
    return sorted(ws, key=replicas.read_last)


def _read_failed(replicas: BookieReplicas, bookie: str, exc: Exception) -> None:
    if isinstance(exc, BookieUnavailable | BookieTimeout):
        replicas.read_failed(bookie)


__all__ = [
    "BookieReadHandle",
    "MetadataReload",
    "ReadHandle",
    "open_sealed_ledger",
    "read_entries",
    "read_runs",
]
