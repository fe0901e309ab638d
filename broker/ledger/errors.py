"""Typed errors of the managed ledger and its cursors.

Owns: the managed-ledger branch of the ledger exception tree; it extends BookKeeper's
(``magnetar.broker.bookkeeper.errors``): ``LedgerError`` is the root of both and a fenced
managed ledger is also a ``LedgerFenced``, so those two are exported here too: they are what
a managed ledger's caller catches. Must not know: topics, clients.
"""

from __future__ import annotations

from magnetar.broker.bookkeeper.errors import LedgerError, LedgerFenced


class ManagedLedgerError(LedgerError):
    """Base of managed-ledger errors."""


class ManagedLedgerFenced(ManagedLedgerError, LedgerFenced):
    """Another owner took over this managed ledger (metadata CAS lost or ledger fenced)."""


class ManagedLedgerClosed(ManagedLedgerError):
    """The managed ledger (or cursor) was closed by its owner."""


class ManagedLedgerTerminated(ManagedLedgerError):
    """The managed ledger was terminated: no more adds."""


class LedgerOutOfOrder(ManagedLedgerError):
    """A ledger whose id is not above every ledger of the managed ledger was offered to it.

    Positions compare by ledger id first, so appending it would order its entries before
    entries written earlier: cursors would skip them and trimming could delete them unread.
    The managed ledger refuses it rather than misorder anything."""


class CursorNotFound(ManagedLedgerError):
    pass


class CursorAlreadyExists(ManagedLedgerError):
    pass


__all__ = [
    "CursorAlreadyExists",
    "CursorNotFound",
    "LedgerError",
    "LedgerFenced",
    "LedgerOutOfOrder",
    "ManagedLedgerClosed",
    "ManagedLedgerError",
    "ManagedLedgerFenced",
    "ManagedLedgerTerminated",
]
