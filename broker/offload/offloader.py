"""The ``Offloader`` contract and its implementation on a ``BlobStore``.

Owns:
- ``Offloader`` (Protocol): ``offload(source, attempt, extra_metadata)`` writes a sealed ledger
  and returns the ``OffloadedLedger`` to record, only after both objects were read back and
  verified; ``open(offloaded)`` returns a read handle of the same shape as a bookie one;
  ``delete(offloaded)``; ``delete_attempt(ledger_id, attempt)`` removes what one attempt wrote
  (a failed or crashed one: its UUID was recorded before it started); ``delete_orphans(ledger_id,
  keep)`` finds by listing every attempt of a ledger other than ``keep`` and removes it.
- ``BlobStoreOffloader``: the one implementation (every driver is a ``BlobStore``), with a
  small bounded cache of parsed index objects (entries and bytes) and the statistics.
- ``OffloaderTuning`` (what is not a Pulsar policy) and ``create_offloader(policies)``.
Must not know: managed ledgers, topics, the protocol; which library is behind the store.
Invariants: an ``OffloadedLedger`` is only ever returned for a verified upload; attempts never
share an object (the key carries the attempt's UUID); ``delete_orphans`` never deletes an
attempt named in ``keep``.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import random
import uuid as uuid_mod
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from magnetar.broker.offload.drivers import StoreSpec, store_spec
from magnetar.broker.offload.errors import OffloadError
from magnetar.broker.offload.flow import FlowPermits
from magnetar.broker.offload.index import OffloadIndex
from magnetar.broker.offload.isolation import OffloadWorker
from magnetar.broker.offload.jobs import LocatedLedger, OffloadJob
from magnetar.broker.offload.keys import data_key, index_key, parse_key
from magnetar.broker.offload.policies import EffectiveOffloadPolicies
from magnetar.broker.offload.reader import OffloadedReadHandle, ReadBudget, ReadCounters
from magnetar.broker.offload.records import LedgerSource, OffloadedLedger, OffloaderStatistics
from magnetar.broker.offload.retry import RetryPolicy, with_retries
from magnetar.broker.offload.store import BlobStore, open_blob_store
from magnetar.broker.offload.upload import UploadPlan, upload_ledger
from magnetar.clock import Clock, SystemClock

log = logging.getLogger(__name__)


class Offloader(Protocol):
    @property
    def driver_name(self) -> str: ...

    def driver_metadata(self) -> Mapping[str, str]: ...

    @property
    def isolated(self) -> bool:
        """Offloads run in the broker's offload worker process (given a ``LocatedLedger``)."""
        ...

    async def offload(
        self,
        source: LedgerSource,
        attempt: uuid_mod.UUID,
        extra_metadata: Mapping[str, str],
        located: LocatedLedger | None = None,
    ) -> OffloadedLedger: ...

    async def open(
        self, offloaded: OffloadedLedger, *, read_budget: ReadBudget | None = None
    ) -> OffloadedReadHandle: ...

    async def delete(self, offloaded: OffloadedLedger) -> None: ...

    async def delete_attempt(self, ledger_id: int, attempt: uuid_mod.UUID) -> None: ...

    async def delete_orphans(
        self, ledger_id: int, keep: Collection[uuid_mod.UUID]
    ) -> list[str]: ...

    def statistics(self) -> OffloaderStatistics: ...

    async def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class OffloaderTuning:
    """Knobs of ours beside Pulsar's policies; each bounds memory or time."""

    read_ahead_bytes_max: int = 8 << 20
    """Bytes of blocks one sequential reader may hold fetched or in flight ahead of it."""
    index_cache_entries_max: int = 256
    index_cache_bytes_max: int = 8 << 20
    upload_part_concurrency: int = 2
    """Multipart parts in flight per offload: upload memory is about this x part size."""
    read_retry: RetryPolicy = field(default_factory=RetryPolicy)
    """How long reads (and opens) wait for an unavailable store, and how they back off."""
    store_request_timeout_ms: int | None = None
    """One request's timeout (None: the library's, 30 s)."""
    store_retries: int | None = None
    """The library's retries of one request (None: its own, 10 with back-off)."""
    flow: FlowPermits = field(default_factory=lambda: FlowPermits(-1))
    """The broker's offload read rate, shared by all its offloads (unlimited by default)."""
    worker: OffloadWorker | None = None
    """The broker's offload worker process (``managedLedgerOffloadWorker``); None: offloads
    run on the caller's loop."""

    def spec_of(self, spec: StoreSpec) -> StoreSpec:
        """``spec`` with these request bounds."""
        return dataclasses.replace(
            spec,
            request_timeout_ms=self.store_request_timeout_ms,
            library_retries=self.store_retries,
        )


class _IndexCache:
    """Parsed index objects by key, least recently used dropped first; bounded by entries and
    by encoded bytes."""

    def __init__(self, entries_max: int, bytes_max: int) -> None:
        self.entries_max = entries_max
        self.bytes_max = bytes_max
        self._items: collections.OrderedDict[str, tuple[OffloadIndex, int]] = (
            collections.OrderedDict()
        )
        self.bytes = 0
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._items)

    def get(self, key: str) -> OffloadIndex | None:
        item = self._items.get(key)
        if item is None:
            self.misses += 1
            return None
        self.hits += 1
        self._items.move_to_end(key)
        return item[0]

    def put(self, key: str, index: OffloadIndex, size: int) -> None:
        if size > self.bytes_max or self.entries_max == 0:
            return
        self.discard(key)
        self._items[key] = (index, size)
        self.bytes += size
        while len(self._items) > self.entries_max or self.bytes > self.bytes_max:
            _, (_, dropped) = self._items.popitem(last=False)
            self.bytes -= dropped

    def discard(self, key: str) -> None:
        item = self._items.pop(key, None)
        if item is not None:
            self.bytes -= item[1]


class BlobStoreOffloader:
    """``Offloader`` over one ``BlobStore`` (S3, GCS, Azure, a directory, memory)."""

    def __init__(
        self,
        store: BlobStore,
        *,
        spec: StoreSpec | None = None,
        driver: str,
        driver_metadata: Mapping[str, str],
        block_bytes: int,
        part_bytes: int,
        prefetch_rounds: int = 1,
        tuning: OffloaderTuning | None = None,
        clock: Clock | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self._store = store
        self._spec = spec
        """What opened the store (None: a store given as it is, which only this process
        can write to)."""
        self._driver = driver
        self._driver_metadata = dict(driver_metadata)
        self._tuning = tuning or OffloaderTuning()
        self._plan = UploadPlan(
            block_bytes=block_bytes,
            part_bytes=part_bytes,
            part_concurrency=self._tuning.upload_part_concurrency,
            prefetch_rounds=prefetch_rounds,
            flow=self._tuning.flow,
        )
        self._clock = clock or SystemClock()
        self._rng = rng or random.Random()
        self._cache = _IndexCache(
            self._tuning.index_cache_entries_max, self._tuning.index_cache_bytes_max
        )
        self._counters = ReadCounters()
        self._started = 0
        self._completed = 0
        self._in_worker = 0
        self._failed = 0
        self._ledger_bytes = 0
        self._data_bytes = 0
        self._opens = 0
        self._deleted = 0

    def __repr__(self) -> str:
        return f"<BlobStoreOffloader {self._driver} {self._store.describe()}>"

    @property
    def driver_name(self) -> str:
        return self._driver

    @property
    def store(self) -> BlobStore:
        return self._store

    def driver_metadata(self) -> Mapping[str, str]:
        return dict(self._driver_metadata)

    @property
    def isolated(self) -> bool:
        """A worker is configured and the store has a ``StoreSpec`` to name it to another
        process (a store handed over as an object has none: this loop writes it)."""
        return self._tuning.worker is not None and self._spec is not None

    def _worker_for(self, located: LocatedLedger | None) -> OffloadWorker | None:
        """The worker process that offloads ``located``, or None: this loop does."""
        return self._tuning.worker if self.isolated and located is not None else None

    async def offload(
        self,
        source: LedgerSource,
        attempt: uuid_mod.UUID,
        extra_metadata: Mapping[str, str],
        located: LocatedLedger | None = None,
    ) -> OffloadedLedger:
        """Upload ``source`` as ``attempt``. With ``located`` (where its bookies are) and an
        offload worker, the worker process does it; else this loop does."""
        ledger_id = source.ledger_id
        keys = (data_key(ledger_id, attempt), index_key(ledger_id, attempt))
        self._started += 1
        try:
            worker = self._worker_for(located)
            if worker is not None:
                assert located is not None and self._spec is not None
                plan = self._plan
                job = OffloadJob(
                    ledger=located,
                    spec=self._spec,
                    data_key=keys[0],
                    index_key=keys[1],
                    extra=dict(extra_metadata),
                    block_bytes=plan.block_bytes,
                    part_bytes=plan.part_bytes,
                    part_concurrency=plan.part_concurrency,
                    prefetch_rounds=plan.prefetch_rounds,
                    paced=plan.flow.limited,
                    bookie_tls=worker.bookie_tls,
                    bookie_timeout_ms=worker.bookie_timeout_ms,
                )
                result = await worker.run(job, plan.flow)
                self._in_worker += 1
            else:
                result = await upload_ledger(
                    self._store,
                    source,
                    data_key=keys[0],
                    index_key=keys[1],
                    extra=extra_metadata,
                    plan=self._plan,
                )
        except BaseException:
            self._failed += 1
            raise
        self._completed += 1
        self._ledger_bytes += result.index.ledger.length
        self._data_bytes += result.index.data_object_bytes
        self._cache.put(keys[1], result.index, result.index_object_bytes)
        return OffloadedLedger(
            ledger_id=ledger_id,
            attempt=attempt,
            driver=self._driver,
            driver_metadata=dict(self._driver_metadata),
            data_key=keys[0],
            index_key=keys[1],
            last_entry_id=result.index.last_entry_id,
            ledger_length=result.index.ledger.length,
            data_object_bytes=result.index.data_object_bytes,
            index_object_bytes=result.index_object_bytes,
            offloaded_at_ms=self._clock.now_ms(),
            extra=dict(extra_metadata),
        )

    async def open(
        self, offloaded: OffloadedLedger, *, read_budget: ReadBudget | None = None
    ) -> OffloadedReadHandle:
        """A read handle on an offloaded ledger; its read-ahead draws from ``read_budget``
        when given. The index comes from the cache or one GET (retried as reads are)."""
        self._check_ours(offloaded)
        self._opens += 1
        index = self._cache.get(offloaded.index_key)
        if index is None:
            started_ms = self._clock.monotonic_ms()

            def retried(exc: OffloadError) -> None:
                self._counters.read_retries += 1

            raw = await with_retries(
                lambda: self._store.get(offloaded.index_key),
                self._tuning.read_retry,
                self._clock,
                self._rng,
                retried,
            )
            self._counters.index_fetches += 1
            self._counters.index_fetch_ms_total += self._clock.monotonic_ms() - started_ms
            index = OffloadIndex.decode(raw)
            if index.ledger_id != offloaded.ledger_id or (
                index.data_object_bytes != offloaded.data_object_bytes
            ):
                raise OffloadError(
                    f"{offloaded.index_key} describes ledger {index.ledger_id} of "
                    f"{index.data_object_bytes} bytes, the record says {offloaded.ledger_id} "
                    f"of {offloaded.data_object_bytes}"
                )
            self._cache.put(offloaded.index_key, index, len(raw))
        return OffloadedReadHandle(
            self._store,
            offloaded.data_key,
            index,
            read_ahead_bytes_max=self._tuning.read_ahead_bytes_max,
            retry=self._tuning.read_retry,
            clock=self._clock,
            rng=self._rng,
            counters=self._counters,
            budget=read_budget,
        )

    async def delete(self, offloaded: OffloadedLedger) -> None:
        self._check_ours(offloaded)
        await self._delete_keys((offloaded.data_key, offloaded.index_key))

    async def delete_attempt(self, ledger_id: int, attempt: uuid_mod.UUID) -> None:
        await self._delete_keys((data_key(ledger_id, attempt), index_key(ledger_id, attempt)))

    async def delete_orphans(self, ledger_id: int, keep: Collection[uuid_mod.UUID]) -> list[str]:
        """Every object of ``ledger_id`` whose attempt is not in ``keep``, deleted; returns
        their keys. Lists the whole store location (a LIST request per 1,000 objects): call
        it when a ledger's offload state is settled, not per read. The caller must know that
        no attempt outside ``keep`` is still running (it owns the ledger)."""
        keep_set = set(keep)
        doomed = []
        async for info in self._store.list():
            parsed = parse_key(info.key)
            if (
                parsed is not None
                and parsed.ledger_id == ledger_id
                and (parsed.attempt not in keep_set)
            ):
                doomed.append(info.key)
        await self._delete_keys(doomed)
        return doomed

    async def _delete_keys(self, keys: Collection[str]) -> None:
        # index first: without it no reader can open the attempt, even if the data delete fails
        for key in sorted(keys, key=lambda k: not k.endswith("-index")):
            await self._store.delete(key)
            self._cache.discard(key)
            self._deleted += 1

    def _check_ours(self, offloaded: OffloadedLedger) -> None:
        if offloaded.driver_metadata != self._driver_metadata:
            raise OffloadError(
                f"ledger {offloaded.ledger_id} was offloaded to {offloaded.driver_metadata}, "
                f"this offloader writes to {self._driver_metadata}"
            )

    def statistics(self) -> OffloaderStatistics:
        c = self._counters
        return OffloaderStatistics(
            driver=self._driver,
            location=self._store.describe(),
            offloads_started=self._started,
            offloads_completed=self._completed,
            offloads_failed=self._failed,
            offloads_in_worker=self._in_worker,
            ledger_bytes_offloaded=self._ledger_bytes,
            data_bytes_written=self._data_bytes,
            opens=self._opens,
            index_cache_hits=self._cache.hits,
            index_cache_misses=self._cache.misses,
            index_cache_entries=len(self._cache),
            index_cache_bytes=self._cache.bytes,
            reads=c.reads,
            read_errors=c.read_errors,
            blocks_fetched=c.blocks_fetched,
            block_bytes_fetched=c.block_bytes_fetched,
            read_ahead_bytes=c.read_ahead_bytes,
            read_retries=c.read_retries,
            corrupt_reads=c.corrupt_reads,
            objects_deleted=self._deleted,
            block_fetch_ms_total=c.block_fetch_ms_total,
            index_fetches=c.index_fetches,
            index_fetch_ms_total=c.index_fetch_ms_total,
        )

    async def close(self) -> None:
        await self._store.close()


def create_offloader(
    policies: EffectiveOffloadPolicies,
    *,
    tuning: OffloaderTuning | None = None,
    clock: Clock | None = None,
    rng: random.Random | None = None,
    spec: StoreSpec | None = None,
    store: BlobStore | None = None,
) -> BlobStoreOffloader:
    """The offloader resolved policies describe. ``spec`` overrides the store configuration
    (timeouts, the library's retries); ``store`` replaces the store (a fault wrapper)."""
    if store is None:
        spec = spec or store_spec(policies)
        if tuning is not None:
            spec = tuning.spec_of(spec)
        store = open_blob_store(spec)
    else:
        spec = None  # a store given as it is (a fault wrapper, memory): only here
    return BlobStoreOffloader(
        store,
        spec=spec,
        driver=policies.driver.value,
        driver_metadata=policies.driver_metadata(),
        block_bytes=policies.read_buffer_size_bytes,
        part_bytes=policies.max_block_size_bytes,
        prefetch_rounds=policies.prefetch_rounds,
        tuning=tuning,
        clock=clock,
        rng=rng,
    )


__all__ = ["BlobStoreOffloader", "Offloader", "OffloaderTuning", "create_offloader"]
