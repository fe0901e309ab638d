"""The ledger client (BookKeeper's client role): create, open (with recovery), delete.

Owns: ledger creation (id, ensemble placement, create-only metadata), opening for read,
open-with-recovery (BookKeeper's protocol, reference/bookkeeper.md section 2.2) and deletion
(metadata only; bookies reclaim the space in their GC).
Recovery: CAS the metadata OPEN -> IN_RECOVERY; fence every bookie of the last fragment
until every write set has answered from at least Qw - Qa + 1 bookies (so the old writer can
never again gather Qa acks); read forward from max(LAC, fragment start - 1) until an entry
is known missing (Qw - Qa + 1 bookies of its write set say NoEntry); re-write the found tail
to full write sets with recovery adds; CAS to CLOSED at the last found entry.
Must not know: managed ledgers, topics.
"""

from __future__ import annotations

import asyncio
import logging
import random

from magnetar.bookie.api import Entry
from magnetar.bookie.errors import BookieError, NoEntry, NoLedger
from magnetar.broker.bookkeeper.context import HandleContext, LedgerClientConfig
from magnetar.broker.bookkeeper.entry import LedgerEntry, unframe
from magnetar.broker.bookkeeper.errors import BookieFailure, EntryCorrupt, LedgerNotFound
from magnetar.broker.bookkeeper.metadata import (
    LedgerMetadata,
    master_key_for,
    write_set,
    write_sets,
)
from magnetar.broker.bookkeeper.placement import BookieClientFactory, BookieRegistry, RackPolicy
from magnetar.broker.bookkeeper.read_handle import BookieReadHandle, ReadHandle
from magnetar.broker.bookkeeper.states import LedgerState
from magnetar.broker.bookkeeper.write_handle import WriteHandle
from magnetar.clock import Clock, SystemClock
from magnetar.zk import paths
from magnetar.zk.errors import AlreadyExists, BadVersion, NotFound
from magnetar.zk.recipes import IdAllocator
from magnetar.zk.store import CREATE_ONLY, MetadataStore

log = logging.getLogger(__name__)


class LedgerClient:
    """Creates, opens, recovers and deletes ledgers."""

    def __init__(
        self,
        store: MetadataStore,
        client_factory: BookieClientFactory,
        config: LedgerClientConfig | None = None,
        *,
        clock: Clock | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.store = store
        self.config = config or LedgerClientConfig()
        self.clock: Clock = clock or SystemClock()
        self.rng = rng or random.Random()
        self.registry = BookieRegistry(
            store,
            client_factory,
            self.clock,
            quarantine_ms=self.config.quarantine_ms,
            rng=self.rng,
            rack_policy=RackPolicy(
                self.config.min_num_racks_per_write_quorum,
                self.config.enforce_min_num_racks_per_write_quorum,
            ),
        )
        self._ids = IdAllocator(store, paths.LEDGER_IDGEN)
        self.master_key = master_key_for(self.config.password)
        self.context = HandleContext(self.store, self.config, self.clock, self.registry)
        """What the handles this client makes need of it."""

    async def create_ledger(
        self,
        *,
        ensemble_size: int | None = None,
        write_quorum: int | None = None,
        ack_quorum: int | None = None,
        custom: dict[str, str] | None = None,
        min_ledger_id: int = -1,
    ) -> WriteHandle:
        """A new OPEN ledger whose id is above ``min_ledger_id`` (a managed ledger passes its
        largest ledger id: its ledgers' ids must increase, see ``IdAllocator.next_id``)."""
        cfg = self.config
        e = ensemble_size or cfg.ensemble_size
        qw = write_quorum or cfg.write_quorum
        qa = ack_quorum or cfg.ack_quorum
        ensemble = await self.registry.choose_ensemble(e, write_quorum=qw)
        await self.registry.resolve(ensemble)
        while True:
            ledger_id = await self._ids.next_id(min_ledger_id)
            meta = LedgerMetadata(
                ledger_id=ledger_id,
                ensemble_size=e,
                write_quorum=qw,
                ack_quorum=qa,
                state=LedgerState.OPEN,
                ensembles=((0, ensemble),),
                master_key=self.master_key,
                ctime_ms=self.clock.now_ms(),
                custom=tuple(sorted((custom or {}).items())),
            )
            try:
                result = await self.store.put(
                    paths.ledger_metadata(ledger_id), meta.to_bytes(), expected_version=CREATE_ONLY
                )
            except AlreadyExists:
                continue
            log.debug("created ledger %d on %s", ledger_id, ensemble)
            return WriteHandle(self.context, meta, result.stat.version)

    async def read_metadata(self, ledger_id: int) -> tuple[LedgerMetadata, int]:
        got = await self.store.get(paths.ledger_metadata(ledger_id))
        if got is None:
            raise LedgerNotFound(f"ledger {ledger_id} has no metadata")
        return LedgerMetadata.from_bytes(got.value), got.stat.version

    async def open_ledger(self, ledger_id: int, *, recovery: bool = True) -> BookieReadHandle:
        """Open for reading. With ``recovery``, a ledger that is not closed is fenced,
        recovered and closed first (the previous writer can no longer add)."""
        meta, version = await self.read_metadata(ledger_id)
        await self.registry.resolve(meta.all_bookies)
        if meta.state is LedgerState.CLOSED or not recovery:
            handle = self._reader(meta, version)
            if not handle.is_closed:
                await handle.read_lac()
            return handle
        return await self._recover(ledger_id)

    def _reader(self, meta: LedgerMetadata, version: int) -> BookieReadHandle:
        return BookieReadHandle(self.registry, meta, version, reload=self.context.reload_metadata)

    async def located(self, handle: ReadHandle) -> tuple[LedgerMetadata, dict[str, str]] | None:
        """A ledger read over bookies, as a process without the metadata store needs it to
        read the same entries (the offload worker): its metadata and its bookies' ``host:port``
        by bookie id. None for a handle that is not read from bookies."""
        if not isinstance(handle, BookieReadHandle):
            return None
        meta = handle.metadata
        return meta, await self.registry.addresses(meta.all_bookies)

    async def delete_ledger(self, ledger_id: int) -> None:
        try:
            await self.store.delete(paths.ledger_metadata(ledger_id))
        except NotFound:
            pass

    async def close(self) -> None:
        await self.registry.close()

    # -- recovery -------------------------------------------------------------------------------
    async def _recover(self, ledger_id: int) -> BookieReadHandle:
        path = paths.ledger_metadata(ledger_id)
        while True:
            meta, version = await self.read_metadata(ledger_id)
            if meta.state is LedgerState.CLOSED:
                return self._reader(meta, version)
            recovering = meta.in_recovery()
            try:
                result = await self.store.put(path, recovering.to_bytes(), expected_version=version)
            except BadVersion:
                continue
            meta, version = recovering, result.stat.version
            break
        lac = await self._fence(meta)
        start = max(lac, meta.last_fragment_first_entry - 1)
        length = 0
        if start >= 0:
            length = (await self._recovery_read(meta, start)).cumulative_length
        handle = WriteHandle(
            self.context, meta, version, recovery=True, last_add_confirmed=start, length=length
        )
        try:
            futures: list[asyncio.Future[int]] = []
            entry_id = start + 1
            done = False
            batch = self.config.recovery_read_batch
            while not done:
                results = await asyncio.gather(
                    *(
                        self._recovery_read_or_none(meta, e)
                        for e in range(entry_id, entry_id + batch)
                    )
                )
                for found in results:
                    if found is None:
                        done = True
                        break
                    entry, stored = found
                    futures.append(handle.add_recovered(entry, stored))
                    entry_id += 1
            if futures:
                await asyncio.gather(*futures)
            await handle.close()
        except BaseException:
            await handle.abort()
            raise
        log.info(
            "recovered ledger %d: last entry %d (LAC seen %d), length %d",
            ledger_id,
            handle.last_add_confirmed,
            lac,
            handle.length,
        )
        return self._reader(handle.metadata, handle.version)

    async def _fence(self, meta: LedgerMetadata) -> int:
        """Fence the last fragment's bookies until every write set is covered (at least
        Qw - Qa + 1 answers in each); returns the highest LAC among the answers. Bookies
        that hang do not delay the result once coverage is reached."""
        ensemble = meta.last_ensemble
        timeout_s = self.config.fence_timeout_ms / 1000.0
        need = meta.write_quorum - meta.ack_quorum + 1
        sets = write_sets(ensemble, meta.write_quorum)

        async def fence_one(bookie: str) -> tuple[str, int]:
            client = self.registry.client(bookie)
            await asyncio.wait_for(client.fence(meta.ledger_id, meta.master_key), timeout_s)
            try:
                return bookie, await asyncio.wait_for(client.read_lac(meta.ledger_id), timeout_s)
            except (NoLedger, NoEntry):
                return bookie, -1

        def covered() -> bool:
            return all(sum(1 for b in ws if b in answered) >= need for ws in sets)

        answered: dict[str, int] = {}
        errors: list[BaseException] = []
        tasks = [asyncio.ensure_future(fence_one(b)) for b in ensemble]
        try:
            for next_done in asyncio.as_completed(tasks):
                try:
                    bookie, lac = await next_done
                except (BookieError, TimeoutError) as exc:
                    errors.append(exc)
                    continue
                answered[bookie] = lac
                if covered():
                    break
        finally:
            for task in tasks:
                task.cancel()
        if not covered():
            raise BookieFailure(
                f"ledger {meta.ledger_id}: cannot fence every write set of {ensemble}: "
                f"answered {sorted(answered)}, errors {errors}"
            )
        return max([-1, *answered.values()])

    async def _recovery_read(self, meta: LedgerMetadata, entry_id: int) -> LedgerEntry:
        found = await self._recovery_read_or_none(meta, entry_id)
        if found is None:
            raise BookieFailure(f"ledger {meta.ledger_id}: confirmed entry {entry_id} missing")
        return found[0]

    async def _recovery_read_or_none(
        self, meta: LedgerMetadata, entry_id: int
    ) -> tuple[LedgerEntry, bytes] | None:
        """The entry if any replica has it; None once Qw - Qa + 1 replicas say it does not
        exist (it cannot have been acknowledged). Replicas are asked in parallel."""
        ws = write_set(meta.ensemble_for(entry_id), meta.write_quorum, entry_id)
        need_missing = meta.write_quorum - meta.ack_quorum + 1
        missing = 0
        errors: list[BaseException] = []

        async def read_one(bookie: str) -> Entry:
            return await self.registry.client(bookie).read_entry(meta.ledger_id, entry_id)

        tasks = [asyncio.ensure_future(read_one(b)) for b in ws]
        try:
            for next_done in asyncio.as_completed(tasks):
                try:
                    raw = await next_done
                    return unframe(raw), raw.payload
                except (NoEntry, NoLedger):
                    missing += 1
                    if missing >= need_missing:
                        return None
                except (BookieError, EntryCorrupt, TimeoutError) as exc:
                    errors.append(exc)
        finally:
            for task in tasks:
                task.cancel()
        raise BookieFailure(
            f"ledger {meta.ledger_id}: entry {entry_id}: {missing} missing, errors {errors}"
        )


__all__ = ["LedgerClient"]
