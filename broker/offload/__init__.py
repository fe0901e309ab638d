"""Tiered storage: sealed ledgers written to an object store and read back as if nothing moved.

Public API: ``OffloadPolicies`` (Pulsar's ``offloadPolicies``, JSON and broker.conf names) ->
``.resolve()`` -> ``EffectiveOffloadPolicies`` -> ``create_offloader(...)`` -> an ``Offloader``
(``offload(source, attempt_uuid, extra)`` -> ``OffloadedLedger`` after a verified upload;
``open(offloaded)`` -> ``OffloadedReadHandle`` with a ledger read handle's shape; ``delete``,
``delete_attempt``, ``delete_orphans``, ``statistics``). Drivers: ``aws-s3``/``S3``,
``google-cloud-storage``, ``azureblob``, ``filesystem``, all on one library (obstore, in
``store.py`` only). ``FaultInjectingBlobStore`` wraps any store for tests. The object layout is
Pulsar's jcloud layout (``blocks.py``, ``index.py``, ``keys.py``; docs/tiered-storage.md).
Must not know: managed ledgers, topics, the protocol (the managed ledger uses this package).
"""

from magnetar.broker.offload.drivers import StoreKind, StoreSpec, store_spec
from magnetar.broker.offload.errors import (
    EntryOutOfRange,
    InvalidOffloadPolicies,
    LedgerNotSealed,
    ObjectNotFound,
    OffloadCorrupt,
    OffloadError,
    SourceMismatch,
    StoreAccessDenied,
    StoreUnavailable,
)
from magnetar.broker.offload.faults import FaultInjectingBlobStore, FaultStatistics
from magnetar.broker.offload.index import LedgerSummary, OffloadIndex
from magnetar.broker.offload.keys import data_key, index_key, parse_key
from magnetar.broker.offload.offloader import (
    BlobStoreOffloader,
    Offloader,
    OffloaderTuning,
    create_offloader,
)
from magnetar.broker.offload.policies import (
    Driver,
    EffectiveOffloadPolicies,
    OffloadPolicies,
    ReadPriority,
)
from magnetar.broker.offload.reader import OffloadedReadHandle, ReadHandleStatistics
from magnetar.broker.offload.records import LedgerSource, OffloadedLedger, OffloaderStatistics
from magnetar.broker.offload.retry import RetryPolicy
from magnetar.broker.offload.store import BlobStore, ObjectInfo, memory_blob_store, open_blob_store

__all__ = [
    "BlobStore",
    "BlobStoreOffloader",
    "Driver",
    "EffectiveOffloadPolicies",
    "EntryOutOfRange",
    "FaultInjectingBlobStore",
    "FaultStatistics",
    "InvalidOffloadPolicies",
    "LedgerNotSealed",
    "LedgerSource",
    "LedgerSummary",
    "ObjectInfo",
    "ObjectNotFound",
    "OffloadCorrupt",
    "OffloadError",
    "OffloadIndex",
    "OffloadPolicies",
    "OffloadedLedger",
    "OffloadedReadHandle",
    "Offloader",
    "OffloaderStatistics",
    "OffloaderTuning",
    "ReadHandleStatistics",
    "ReadPriority",
    "RetryPolicy",
    "SourceMismatch",
    "StoreAccessDenied",
    "StoreKind",
    "StoreSpec",
    "StoreUnavailable",
    "create_offloader",
    "data_key",
    "index_key",
    "memory_blob_store",
    "open_blob_store",
    "parse_key",
    "store_spec",
]
