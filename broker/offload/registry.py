"""The offloaders of one broker: one per store location, shared by every managed ledger.

Owns: ``OffloaderRegistry``: the ``BlobStoreOffloader`` (and its store, its index cache, its
statistics) of each distinct store configuration, created on first use and closed with the
registry; ``for_policies(policies)`` (what a managed ledger writes with: its effective
policies), ``for_record(record, policies)`` (what reads an offloaded ledger: the record's
driver metadata names the store, so a ledger offloaded before a namespace changed bucket is
still read from where it went; credentials and tuning come from ``policies``, else from the
broker's defaults), and each offloader's limit of offloads running at once
(``managedLedgerOffloadMaxThreads``, Pulsar's offload thread pool: here a semaphore of that
many slots per offloader). ``open_offloaded_ledger(record, credentials)``: an offloaded
ledger opened outside a broker (the Spark connector's executors), from the record the
admin API shows and the reader's own credentials.
Invariants: one offloader per key (the store-defining part of the policies: driver, bucket,
region, endpoint, credentials, role, block sizes); ``for_record`` never writes.
Must not know: managed ledgers, topics.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import random
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

from magnetar.broker.offload.errors import InvalidOffloadPolicies
from magnetar.broker.offload.offloader import BlobStoreOffloader, OffloaderTuning, create_offloader
from magnetar.broker.offload.policies import (
    DEFAULT_DELETION_LAG_MS,
    DEFAULT_MAX_BLOCK_SIZE_BYTES,
    DEFAULT_MAX_THREADS,
    DEFAULT_PREFETCH_ROUNDS,
    DEFAULT_READ_BUFFER_SIZE_BYTES,
    Driver,
    EffectiveOffloadPolicies,
    OffloadPolicies,
    ReadPriority,
)
from magnetar.broker.offload.reader import OffloadedReadHandle
from magnetar.broker.offload.records import OffloadedLedger, OffloaderStatistics
from magnetar.broker.offload.store import BlobStore
from magnetar.clock import Clock, SystemClock

log = logging.getLogger(__name__)

StoreFactory = Callable[[EffectiveOffloadPolicies], BlobStore]
"""Opens the store of resolved policies (tests: a memory store or a fault wrapper)."""


def _key(policies: EffectiveOffloadPolicies) -> EffectiveOffloadPolicies:
    """The part of the policies that defines a store and how it is written (thresholds,
    deletion lag, read priority and concurrency do not)."""
    return dataclasses.replace(
        policies,
        threshold_bytes=None,
        threshold_seconds=None,
        deletion_lag_ms=0,
        read_priority=ReadPriority.TIERED_STORAGE_FIRST,
        max_threads=1,
    )


def policies_for_record(
    record: OffloadedLedger, base: EffectiveOffloadPolicies | None
) -> EffectiveOffloadPolicies:
    """Policies that reach the store a record names (``policies_for_location``)."""
    return policies_for_location(record.driver, record.driver_metadata, base)


def policies_for_location(
    driver_name: str, driver_metadata: Mapping[str, str], base: EffectiveOffloadPolicies | None
) -> EffectiveOffloadPolicies:
    """Policies that reach the store Pulsar's driver metadata names: the driver and the
    location (bucket or directory, region, endpoint) from it, the rest (credentials, block
    sizes) from ``base`` when it is the same driver, else the defaults."""
    meta = driver_metadata
    driver = Driver.parse(meta.get("managedLedgerOffloadDriver") or driver_name)
    location = meta.get("bucket", "")
    region = meta.get("region") or None
    endpoint = meta.get("serviceEndpoint") or None
    if not location:
        raise InvalidOffloadPolicies(f"driver metadata {dict(meta)} names no bucket or directory")
    changes: dict[str, Any] = {
        "driver": driver,
        "bucket": location if driver.is_cloud else "",
        "region": region,
        "service_endpoint": endpoint,
        "file_system_root": None if driver.is_cloud else location,
    }
    if base is not None and base.driver is driver:
        return base.with_changes(**changes)
    return EffectiveOffloadPolicies(
        max_block_size_bytes=DEFAULT_MAX_BLOCK_SIZE_BYTES,
        read_buffer_size_bytes=DEFAULT_READ_BUFFER_SIZE_BYTES,
        max_threads=DEFAULT_MAX_THREADS,
        prefetch_rounds=DEFAULT_PREFETCH_ROUNDS,
        threshold_bytes=None,
        threshold_seconds=None,
        deletion_lag_ms=DEFAULT_DELETION_LAG_MS,
        read_priority=ReadPriority.TIERED_STORAGE_FIRST,
        **changes,
    )


class OffloaderRegistry:
    """The broker's offloaders (see the module docstring)."""

    def __init__(
        self,
        *,
        defaults: EffectiveOffloadPolicies | None = None,
        tuning: OffloaderTuning | None = None,
        clock: Clock | None = None,
        rng: random.Random | None = None,
        store_factory: StoreFactory | None = None,
    ) -> None:
        self.defaults = defaults
        """The broker's own policies (broker.conf), if it names a driver."""
        self.tuning = tuning or OffloaderTuning()
        self._clock = clock or SystemClock()
        self._rng = rng or random.Random()
        self._store_factory = store_factory
        self._offloaders: dict[EffectiveOffloadPolicies, BlobStoreOffloader] = {}
        self._slots: dict[EffectiveOffloadPolicies, asyncio.Semaphore] = {}
        self._closed = False

    def __repr__(self) -> str:
        return f"<OffloaderRegistry {len(self._offloaders)} offloaders>"

    def __len__(self) -> int:
        return len(self._offloaders)

    def for_policies(self, policies: EffectiveOffloadPolicies) -> BlobStoreOffloader:
        """The offloader that writes with ``policies`` (created on first use; a store the
        library refuses raises ``InvalidOffloadPolicies``)."""
        key = _key(policies)
        offloader = self._offloaders.get(key)
        if offloader is None:
            if self._closed:
                raise InvalidOffloadPolicies("the broker's offloaders are closed")
            store = self._store_factory(policies) if self._store_factory is not None else None
            offloader = create_offloader(
                policies, tuning=self.tuning, clock=self._clock, rng=self._rng, store=store
            )
            self._offloaders[key] = offloader
            self._slots[key] = asyncio.Semaphore(policies.max_threads)
            log.info("offloader %r created", offloader)
        return offloader

    def slots(self, policies: EffectiveOffloadPolicies) -> asyncio.Semaphore:
        """Offloads of ``policies``' offloader that may run at once: a slot each."""
        self.for_policies(policies)
        return self._slots[_key(policies)]

    def for_record(
        self, record: OffloadedLedger, policies: EffectiveOffloadPolicies | None
    ) -> BlobStoreOffloader:
        """An offloader that reads (and deletes) what ``record`` describes: one already
        writing to that location if any, else one built for it (``policies_for_record``)."""
        wanted = dict(record.driver_metadata)
        for candidate in (policies, self.defaults):
            if candidate is not None and candidate.driver_metadata() == wanted:
                return self.for_policies(candidate)
        for offloader in self._offloaders.values():
            if offloader.driver_metadata() == wanted:
                return offloader
        base = policies if policies is not None else self.defaults
        return self.for_policies(policies_for_record(record, base))

    def statistics(self) -> list[OffloaderStatistics]:
        return [o.statistics() for o in self._offloaders.values()]

    async def close(self) -> None:
        self._closed = True
        offloaders, self._offloaders = list(self._offloaders.values()), {}
        self._slots.clear()
        for offloader in offloaders:
            await offloader.close()
        if self.tuning.worker is not None:
            await self.tuning.worker.close()


@contextlib.asynccontextmanager
async def open_offloaded_ledger(
    record: OffloadedLedger | Mapping[str, Any],
    credentials: OffloadPolicies | None = None,
    *,
    tuning: OffloaderTuning | None = None,
) -> AsyncIterator[OffloadedReadHandle]:
    """Read one offloaded ledger outside a broker::

        async with open_offloaded_ledger(ledger["offload"], creds) as handle:
            entries = await handle.read(0, handle.last_add_confirmed)

    ``record``: the offload record of the ledger (``OffloadedLedger`` or its JSON, as the
    admin API shows it). ``credentials``: policies giving what the record does not (S3 keys
    or role, a GCS key file; with the same driver, block sizes) and where this reader reaches
    the store when it is not where the broker did (a region, an endpoint, the directory a
    filesystem store is mounted at: these win over the record's; the bucket and keys are the
    record's); without them the store's environment is used (``AWS_ACCESS_KEY_ID``...,
    ``GOOGLE_APPLICATION_CREDENTIALS``, ``AZURE_STORAGE_ACCOUNT``). Entries come back
    checksum-verified, as from the broker."""
    offloaded = record if isinstance(record, OffloadedLedger) else OffloadedLedger.from_json(record)
    base = None
    if credentials is not None:
        merged = OffloadPolicies.merge(
            dataclasses.replace(
                credentials, driver=offloaded.driver_metadata.get("managedLedgerOffloadDriver")
            ),
            None,
            None,
        )
        base = _resolved_or_none(merged, offloaded)
    policies = policies_for_record(offloaded, base)
    if base is not None:
        policies = policies.with_changes(
            region=base.region,
            service_endpoint=base.service_endpoint,
            file_system_root=base.file_system_root,
        )
    offloader = create_offloader(policies, tuning=tuning)
    # the same objects (bucket, keys), at the location this reader reaches them
    reached = dataclasses.replace(offloaded, driver_metadata=offloader.driver_metadata())
    try:
        handle = await offloader.open(reached)
        try:
            yield handle
        finally:
            handle.close_now()
    finally:
        await offloader.close()


def _resolved_or_none(
    policies: OffloadPolicies, record: OffloadedLedger
) -> EffectiveOffloadPolicies | None:
    """``policies`` resolved with the record's location filled in where they lack one (a
    reader's credentials need not repeat the bucket)."""
    meta = record.driver_metadata
    filled = dataclasses.replace(
        policies,
        bucket=policies.bucket or meta.get("bucket") or None,
        region=policies.region or meta.get("region") or None,
        service_endpoint=policies.service_endpoint or meta.get("serviceEndpoint") or None,
        file_system_uri=policies.file_system_uri or meta.get("bucket") or None,
    )
    return filled.resolve()


__all__ = [
    "OffloaderRegistry",
    "StoreFactory",
    "open_offloaded_ledger",
    "policies_for_location",
    "policies_for_record",
]
