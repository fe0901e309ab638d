"""Delayed delivery for the dispatchers: the public names of ``magnetar.broker.delayed``.

The implementation lives in the ``magnetar.broker.delayed`` package (codec, near wheel,
stores, index); this module is the one import the Shared / Key_Shared dispatchers need.
Must not know: consumers, the wire protocol.
"""

from __future__ import annotations

from magnetar.broker.delayed import (
    DelayedDeliveryConfig,
    DelayedDeliveryIndex,
    DelayedIndexClosed,
    DelayedIndexError,
    DelayedIndexStatistics,
    IndexState,
    ManagedLedgerSegmentStore,
    MemorySegmentStore,
    SegmentStore,
    delayed_index_ledger_name,
    open_delayed_index,
)

__all__ = [
    "DelayedDeliveryConfig",
    "DelayedDeliveryIndex",
    "DelayedIndexClosed",
    "DelayedIndexError",
    "DelayedIndexStatistics",
    "IndexState",
    "ManagedLedgerSegmentStore",
    "MemorySegmentStore",
    "SegmentStore",
    "delayed_index_ledger_name",
    "open_delayed_index",
]
