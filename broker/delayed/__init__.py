"""Delayed delivery (``deliver_at_time``) for Shared and Key_Shared subscriptions.

Public API: ``DelayedDeliveryIndex`` (the per-subscription index: ``add``, ``next_due_ms``,
``pop_due``, ``on_acked``, ``size``, ``statistics``, ``flush``, ``clear``, ``close``,
``delete``, ``recover``), ``DelayedDeliveryConfig``, the stores (``ManagedLedgerSegmentStore``
over a dedicated managed ledger, ``MemorySegmentStore``) and ``open_delayed_index``.
Modules: ``codec`` (chunk and snapshot bytes), ``wheel`` (the near wheel), ``store``
(where records live), ``index`` (the two-level wheel, sealing, loading, recovery).
Must not know: consumers, the wire protocol, message formats.
"""

from __future__ import annotations

from collections.abc import Callable

from magnetar.broker.delayed.codec import ChunkRef, CorruptIndexRecord, RunRef, Snapshot
from magnetar.broker.delayed.index import (
    DelayedDeliveryConfig,
    DelayedDeliveryIndex,
    DelayedIndexClosed,
    DelayedIndexError,
    DelayedIndexStatistics,
    IndexState,
)
from magnetar.broker.delayed.store import (
    ManagedLedgerSegmentStore,
    MemorySegmentStore,
    SegmentStore,
    delayed_index_ledger_name,
)
from magnetar.broker.delayed.wheel import NearWheel
from magnetar.broker.ledger.managed_ledger import ManagedLedgerFactory
from magnetar.clock import Clock


async def open_delayed_index(
    factory: ManagedLedgerFactory,
    topic_ledger_name: str,
    subscription: str,
    *,
    clock: Clock | None = None,
    config: DelayedDeliveryConfig | None = None,
    on_due: Callable[[], None] | None = None,
) -> DelayedDeliveryIndex:
    """The persisted index of a durable subscription, recovered and ready."""
    name = delayed_index_ledger_name(topic_ledger_name, subscription)
    store = ManagedLedgerSegmentStore(factory, name)
    index = DelayedDeliveryIndex(store, clock or factory.clock, config, on_due=on_due, name=name)
    await index.recover()
    return index


__all__ = [
    "ChunkRef",
    "CorruptIndexRecord",
    "DelayedDeliveryConfig",
    "DelayedDeliveryIndex",
    "DelayedIndexClosed",
    "DelayedIndexError",
    "DelayedIndexStatistics",
    "IndexState",
    "ManagedLedgerSegmentStore",
    "MemorySegmentStore",
    "NearWheel",
    "RunRef",
    "SegmentStore",
    "Snapshot",
    "delayed_index_ledger_name",
    "open_delayed_index",
]
