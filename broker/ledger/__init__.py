"""Managed ledgers and cursors over BookKeeper's ledgers (``magnetar.broker.bookkeeper``).

Public API (what a broker topic uses): ``ManagedLedgerFactory(store, bookie_client_factory,
config)`` -> ``await factory.open(name)`` -> ``ManagedLedger`` (``add``/``add_nowait`` ->
``Position``, ``open_cursor``, ``new_non_durable_cursor``, ``delete_cursor``,
``read_range``, ``ledger_sizes``, ``get_last_confirmed``, ``terminate``, ``truncate``,
``close``, ``delete``, ``statistics``; its parts ``ledgers``, ``reads``, ``trimming``,
``rollover``, ``cursors``) and ``ManagedCursor`` (``read_entries``,
``read_entries_or_wait``, ``mark_delete``, ``delete``, ``delete_batch_indexes``,
``redelivery_count``, ``increment_redelivery``, ``backlog``, ``seek``, ``reset``,
``reset_to_publish_time``, ``rewind``, ``find_by_publish_time``).
Must not know: topics, producers, subscriptions, the wire protocol, ``magnetar.client``.
"""

from magnetar.broker.ledger.config import ManagedLedgerConfig
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
    ManagedLedger,
    ManagedLedgerFactory,
    ManagedLedgerStatistics,
)
from magnetar.broker.ledger.position import EARLIEST, LATEST, Position
from magnetar.broker.ledger.reads import ManagedEntry

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
