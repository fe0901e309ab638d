"""The replication worker: claims under-replicated ledgers and repairs them.

Owns: the repair of one marked ledger, under its replication lock (one worker per ledger at a
time, across processes):
1. read the metadata and find the faults (``checker``: lost, draining, missing entries);
2. decide, per fragment, where each faulty member's entries go: a replacement bookie chosen
   by the placement policy (rack-aware; never read-only, draining or quarantined), or the
   same bookie when it is writable and only lost its data;
3. copy the entries it should hold, ``rereplication_entry_batch_size`` at a time, from
   surviving replicas (checksums verified on read), as recovery adds, then read them back
   from the target and compare bytes and checksums; throttled by ``replication_rate_by_bytes``;
4. swap every replaced member in ONE compare-and-set of the metadata (copy first, then one
   CAS: a half-swapped ensemble never exists), re-reading on a version conflict and giving
   up the round if a planned fragment changed;
5. unmark the ledger when nothing is left to repair.
The last fragment of a ledger that is not closed is left to its writer; once the ledger has
been marked for ``open_ledger_rereplication_grace_period_ms`` the worker fences it (open
with recovery, which closes it) and repairs it like any closed ledger.
Must not know: topics, managed ledgers, who marked the ledger.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field

from magnetar.bookie.api import Entry
from magnetar.bookie.errors import BookieError
from magnetar.broker.bookkeeper.autorecovery.checker import (
    ClusterView,
    Fault,
    FaultKind,
    held_entries,
    metadata_faults,
    probe_faults,
)
from magnetar.broker.bookkeeper.autorecovery.config import AutoRecoveryConfig
from magnetar.broker.bookkeeper.autorecovery.layout import UnderReplication
from magnetar.broker.bookkeeper.autorecovery.throttle import ByteThrottle
from magnetar.broker.bookkeeper.client import LedgerClient
from magnetar.broker.bookkeeper.entry import unframe
from magnetar.broker.bookkeeper.errors import (
    BookieFailure,
    EntryCorrupt,
    LedgerError,
    LedgerNotFound,
    NotEnoughBookies,
)
from magnetar.broker.bookkeeper.metadata import LedgerMetadata, write_set
from magnetar.broker.bookkeeper.placement import LedgerBookieClient
from magnetar.broker.bookkeeper.states import LedgerState
from magnetar.zk import paths
from magnetar.zk.errors import BadVersion, LockBusy, MetadataError

log = logging.getLogger(__name__)

POLL_INTERVAL_S = 1.0
"""How often an idle worker looks for marks (marks are few; a poll is one walk of them)."""
DEFER_S = 2.0
"""A ledger that could not be finished (open tail, no spare bookie) is retried after this."""
HISTORY_MAX = 10_000
RANGE_READ_MAX_BYTES = 8 << 20


class ReplicationFailed(LedgerError):
    retriable = True


@dataclass(slots=True)
class WorkerStatistics:
    ledgers_repaired: int = 0
    ledgers_deferred: int = 0
    fragments_replicated: int = 0
    entries_copied: int = 0
    bytes_copied: int = 0
    cas_conflicts: int = 0
    failures: int = 0
    ledgers_gone: int = 0
    """Marked ledgers deleted before or while they were repaired (trimmed, or offloaded to
    tiered storage and their bookie copy deleted): nothing to re-replicate."""
    history: collections.deque[tuple[int, float, float]] = field(
        default_factory=lambda: collections.deque(maxlen=HISTORY_MAX)
    )
    """(ledger id, start, end) monotonic ms of each repair attempt under the lock."""


@dataclass(frozen=True, slots=True)
class _Copy:
    index: int
    first: int
    last: int
    source_ensemble: tuple[str, ...]
    bookie: str
    target: str


class ReplicationWorker:
    """Repairs marked ledgers; ``run`` until stopped, or ``replicate`` one ledger."""

    def __init__(
        self,
        ledgers: LedgerClient,
        config: AutoRecoveryConfig | None = None,
        *,
        worker_id: str | None = None,
    ) -> None:
        self.ledgers = ledgers
        self.store = ledgers.store
        self.config = config or AutoRecoveryConfig()
        self.clock = ledgers.clock
        self.worker_id = worker_id or f"worker-{uuid.uuid4().hex[:8]}"
        self.marks = UnderReplication(self.store)
        self.throttle = ByteThrottle(self.config.replication_rate_by_bytes, self.clock)
        self.stats = WorkerStatistics()
        self._deferred_until: dict[int, float] = {}
        self._wake = asyncio.Event()

    def __repr__(self) -> str:
        return f"<ReplicationWorker {self.worker_id} repaired={self.stats.ledgers_repaired}>"

    def retry_deferred(self) -> None:
        """Forget the deferrals: the next pass tries every marked ledger."""
        self._deferred_until.clear()

    def wake(self) -> None:
        self._wake.set()

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await self.run_once()
            except MetadataError as exc:
                log.warning("replication worker %s: metadata error %r", self.worker_id, exc)
            except Exception:
                log.exception("replication worker %s: round failed", self.worker_id)
            self._wake.clear()
            waiter = asyncio.ensure_future(self._wake.wait())
            stopper = asyncio.ensure_future(stop.wait())
            try:
                await asyncio.wait(
                    {waiter, stopper}, timeout=POLL_INTERVAL_S, return_when=asyncio.FIRST_COMPLETED
                )
            finally:
                waiter.cancel()
                stopper.cancel()

    async def run_once(self) -> int:
        """One pass over the marks; returns how many ledgers were repaired."""
        repaired = 0
        now = self.clock.monotonic_ms()
        for ledger_id in await self.marks.marked():
            if self._deferred_until.get(ledger_id, 0) > now:
                continue
            if await self.replicate(ledger_id) == "repaired":
                repaired += 1
        return repaired

    async def replicate(self, ledger_id: int) -> str:
        """Repair one ledger under its lock: 'repaired', 'deferred', 'busy', 'failed' or
        'gone' (deleted meanwhile: unmarked, never retried)."""
        lock = self.marks.lock(ledger_id, self.worker_id)
        try:
            await lock.acquire()
        except LockBusy:
            return "busy"
        start = self.clock.monotonic_ms()
        done: bool | None
        try:
            done = await self._repair(ledger_id)
        except LedgerNotFound:
            await self._gone(ledger_id)
            done = None
        except (LedgerError, BookieError, MetadataError, TimeoutError) as exc:
            log.warning("ledger %d: re-replication failed: %r", ledger_id, exc)
            self.stats.failures += 1
            self._defer(ledger_id)
            return "failed"
        finally:
            self.stats.history.append((ledger_id, start, self.clock.monotonic_ms()))
            await lock.release()
        if done is None:
            return "gone"
        if done:
            self.stats.ledgers_repaired += 1
            self._deferred_until.pop(ledger_id, None)
            return "repaired"
        self.stats.ledgers_deferred += 1
        self._defer(ledger_id)
        return "deferred"

    def _defer(self, ledger_id: int) -> None:
        self._deferred_until[ledger_id] = self.clock.monotonic_ms() + DEFER_S * 1000

    async def _gone(self, ledger_id: int) -> None:
        """The ledger's metadata is gone (retention, or tiered storage deleted its bookie
        copy after offloading it): there is nothing to re-replicate, now or later."""
        await self.marks.unmark(ledger_id)
        self._deferred_until.pop(ledger_id, None)
        self.stats.ledgers_gone += 1
        log.info("ledger %d: deleted (trimmed or offloaded): nothing to re-replicate", ledger_id)

    # -- one ledger ---------------------------------------------------------------------------
    async def _repair(self, ledger_id: int) -> bool:
        """True when the ledger is fully replicated (and unmarked); ``LedgerNotFound`` when
        it was deleted (before or while it was repaired)."""
        meta, _version = await self.ledgers.read_metadata(ledger_id)
        if meta.state is LedgerState.IN_RECOVERY:
            return False  # someone is recovering it; its result is repaired later
        view = await ClusterView.read(self.store)
        faults = await self._faults(meta, view)
        if any(f.last is None for f in faults):
            mark = await self.marks.get(ledger_id)
            grace = self.config.open_ledger_rereplication_grace_period_ms
            if mark is not None and self.clock.now_ms() - mark.marked_ms >= grace:
                log.info("ledger %d: open past the grace period, fencing it", ledger_id)
                await self.ledgers.open_ledger(ledger_id, recovery=True)
                meta, _version = await self.ledgers.read_metadata(ledger_id)
                view = await ClusterView.read(self.store)
                faults = await self._faults(meta, view)
        tail_left = any(f.last is None for f in faults)
        faults = [f for f in faults if f.last is not None]
        if faults:
            copies = await self._plan(meta, view, faults)
            await self.ledgers.registry.resolve({c.target for c in copies} | meta.all_bookies)
            lost = {f.bookie for f in faults if f.kind is FaultKind.LOST}
            for copy in copies:
                await self._copy(meta, copy, lost)
            await self._swap(ledger_id, copies)
        if tail_left:
            return False
        await self.marks.unmark(ledger_id)
        log.info("ledger %d fully replicated", ledger_id)
        return True

    async def _faults(self, meta: LedgerMetadata, view: ClusterView) -> list[Fault]:
        faults = metadata_faults(meta, view)
        known = {(f.fragment_index, f.bookie) for f in faults}
        faults += await probe_faults(meta, view, self.ledgers.registry.client, skip=known)
        return faults

    async def _plan(
        self, meta: LedgerMetadata, view: ClusterView, faults: Sequence[Fault]
    ) -> list[_Copy]:
        """Decide every copy of this round (no I/O but the placement's bookie list)."""
        by_fragment: dict[int, list[Fault]] = {}
        for f in faults:
            by_fragment.setdefault(f.fragment_index, []).append(f)
        avoid = {f.bookie for f in faults if f.kind is not FaultKind.MISSING}
        copies: list[_Copy] = []
        for index, group in sorted(by_fragment.items()):
            first, ensemble = meta.ensembles[index]
            last = group[0].last
            assert last is not None
            replace = {
                f.bookie
                for f in group
                if f.kind is not FaultKind.MISSING or f.bookie not in view.writable
            }
            new_ensemble = tuple(ensemble)
            if replace:
                try:
                    new_ensemble = await self.ledgers.registry.replace_bookies(
                        ensemble, replace, meta.write_quorum, exclude=avoid
                    )
                except NotEnoughBookies as exc:
                    raise ReplicationFailed(f"ledger {meta.ledger_id}: {exc}") from exc
            for f in group:
                target = new_ensemble[ensemble.index(f.bookie)]
                copies.append(_Copy(index, first, last, tuple(ensemble), f.bookie, target))
        return copies

    async def _copy(self, meta: LedgerMetadata, copy: _Copy, lost: set[str]) -> None:
        """Copy the entries ``copy.bookie`` holds in the fragment onto ``copy.target``."""
        if copy.last < copy.first:
            return  # an empty fragment: only the metadata changes
        ids = list(held_entries(meta, copy.index, copy.bookie, copy.first, copy.last))
        batch = self.config.rereplication_entry_batch_size
        target = self.ledgers.registry.client(copy.target)
        unusable = lost | {copy.bookie} if copy.target == copy.bookie else lost
        for i in range(0, len(ids), batch):
            chunk = ids[i : i + batch]
            entries = await self._read_batch(meta, copy, chunk, unusable)
            await target.add_batch(meta.ledger_id, meta.master_key, entries, recovery=True)
            back = await self._read_back(target, meta.ledger_id, chunk)
            nbytes = 0
            for entry in entries:
                got = back.get(entry.entry_id)
                if got is None or got.payload != entry.payload or got.crc32c != entry.crc32c:
                    raise ReplicationFailed(
                        f"ledger {meta.ledger_id} entry {entry.entry_id}: copy on {copy.target} "
                        "differs from the source"
                    )
                nbytes += len(entry.payload)
            self.stats.entries_copied += len(entries)
            self.stats.bytes_copied += nbytes
            await self.throttle.consume(nbytes)
        self.stats.fragments_replicated += 1
        log.info(
            "ledger %d fragment %d..%d: %d entries of %s copied to %s",
            meta.ledger_id,
            copy.first,
            copy.last,
            len(ids),
            copy.bookie,
            copy.target,
        )

    async def _read_batch(
        self, meta: LedgerMetadata, copy: _Copy, chunk: list[int], unusable: set[str]
    ) -> list[Entry]:
        """The entries of ``chunk`` from surviving replicas, checksums verified: one range
        read when every member holds every entry (E == Qw), else entry by entry."""
        contiguous = chunk[-1] - chunk[0] + 1 == len(chunk)
        if contiguous and len(copy.source_ensemble) == meta.write_quorum:
            for source in copy.source_ensemble:
                if source in unusable or source == copy.target:
                    continue
                try:
                    got = await self.ledgers.registry.client(source).read_range(
                        meta.ledger_id, chunk[0], chunk[-1], RANGE_READ_MAX_BYTES
                    )
                    for entry in got:
                        unframe(entry)
                except (BookieError, EntryCorrupt, TimeoutError):
                    continue
                if [e.entry_id for e in got] == chunk:
                    return got
        return [await self._read_replica(meta, copy, e, unusable) for e in chunk]

    @staticmethod
    async def _read_back(
        target: LedgerBookieClient, ledger_id: int, chunk: list[int]
    ) -> dict[int, Entry]:
        """What the target now holds for ``chunk`` (pair assertion of the copy)."""
        contiguous = chunk[-1] - chunk[0] + 1 == len(chunk)
        if contiguous:
            got = await target.read_range(ledger_id, chunk[0], chunk[-1], RANGE_READ_MAX_BYTES)
            if [e.entry_id for e in got] == chunk:
                return {e.entry_id: e for e in got}
        return {e: await target.read_entry(ledger_id, e) for e in chunk}

    async def _read_replica(
        self, meta: LedgerMetadata, copy: _Copy, entry_id: int, unusable: set[str]
    ) -> Entry:
        ws = write_set(copy.source_ensemble, meta.write_quorum, entry_id)
        errors: list[BaseException] = []
        for source in ws:
            if source in unusable or source == copy.target:
                continue
            try:
                entry = await self.ledgers.registry.client(source).read_entry(
                    meta.ledger_id, entry_id
                )
                unframe(entry)  # checksum verified before the copy
                return entry
            except (BookieError, EntryCorrupt, TimeoutError) as exc:
                errors.append(exc)
        raise BookieFailure(
            f"ledger {meta.ledger_id} entry {entry_id}: no readable replica in {ws}: {errors}"
        )

    async def _swap(self, ledger_id: int, copies: Sequence[_Copy]) -> None:
        """One CAS replacing every copied member; the planned fragments must be unchanged."""
        replacements: dict[int, dict[str, str]] = {}
        for c in copies:
            if c.target != c.bookie:
                replacements.setdefault(c.first, {})[c.bookie] = c.target
        if not replacements:
            return
        path = paths.ledger_metadata(ledger_id)
        while True:
            current, version = await self.ledgers.read_metadata(ledger_id)
            for c in copies:
                if c.target == c.bookie:
                    continue
                fragments = dict(current.ensembles)
                index = (
                    [f for f, _ in current.ensembles].index(c.first) if c.first in fragments else -1
                )
                if (
                    index < 0
                    or fragments[c.first] != c.source_ensemble
                    or current.fragment_last_entry(index) != c.last
                ):
                    raise ReplicationFailed(
                        f"ledger {ledger_id}: fragment at {c.first} changed while copying"
                    )
            updated = current.with_replaced_bookies(replacements)
            try:
                await self.store.put(path, updated.to_bytes(), expected_version=version)
            except BadVersion:
                self.stats.cas_conflicts += 1
                continue
            log.info("ledger %d: ensembles swapped %s", ledger_id, replacements)
            return


__all__ = ["ReplicationFailed", "ReplicationWorker", "WorkerStatistics"]
