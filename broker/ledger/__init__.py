"""Managed ledgers and cursors over BookKeeper's ledgers (``magnetar.broker.bookkeeper``).

Public API (what a broker topic uses): ``ManagedLedgerFactory(store, bookie_client_factory,
config)`` -> ``await factory.open(name)`` -> ``ManagedLedger`` (``add``/``add_nowait`` ->
``Position``, ``open_cursor``, ``new_non_durable_cursor``, ``read_entries``,
``read_entries_or_wait``, ``get_last_confirmed``, ``trim``, ``close``, ``delete``,
``statistics``) and ``ManagedCursor`` (``mark_delete``, ``delete``,
``delete_batch_indexes``, ``redelivery_count``, ``increment_redelivery``, ``backlog``,
``seek``, ``reset``, ``reset_to_publish_time``, ``rewind``, ``find_by_publish_time``).
Must not know: topics, producers, subscriptions, the wire protocol, ``magnetar.client``.
"""

from magnetar.broker.ledger.cursor import Backlog, CursorStatistics, ManagedCursor
from magnetar.broker.ledger.errors import (
    CursorAlreadyExists,
    CursorNotFound,
    LedgerError,
    LedgerFenced,
    LedgerOutOfOrder,
    ManagedLedgerClosed,
    ManagedLedgerError,
    ManagedLedgerFenced,
    ManagedLedgerTerminated,
)
from magnetar.broker.ledger.managed_ledger import (
    ManagedEntry,
    ManagedLedger,
    ManagedLedgerConfig,
    ManagedLedgerFactory,
    ManagedLedgerStatistics,
)
from magnetar.broker.ledger.position import EARLIEST, LATEST, Position

__all__ = [
    "EARLIEST",
    "LATEST",
    "Backlog",
    "CursorAlreadyExists",
    "CursorNotFound",
    "CursorStatistics",
    "LedgerError",
    "LedgerFenced",
    "LedgerOutOfOrder",
    "ManagedCursor",
    "ManagedEntry",
    "ManagedLedger",
    "ManagedLedgerClosed",
    "ManagedLedgerConfig",
    "ManagedLedgerError",
    "ManagedLedgerFactory",
    "ManagedLedgerFenced",
    "ManagedLedgerStatistics",
    "ManagedLedgerTerminated",
    "Position",
]
