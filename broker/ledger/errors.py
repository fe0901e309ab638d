"""Typed errors of the ledger layer (ledgers, managed ledgers, cursors).

Owns: one exception tree with ``retriable`` flags. Bookie and metadata-store errors are
translated into these where the ledger layer catches them. Must not know: topics, clients.
"""

from __future__ import annotations


class LedgerError(Exception):
    """Base of ledger-layer errors; ``retriable``: the same call may succeed later."""

    retriable: bool = False


class LedgerFenced(LedgerError):
    """Another writer has recovered (fenced) this ledger: this handle must stop writing."""


class LedgerClosed(LedgerError):
    """The ledger is closed (or closing) for writes."""


class LedgerNotFound(LedgerError):
    """No metadata for this ledger id."""


class NotEnoughBookies(LedgerError):
    """Fewer healthy bookies than the ensemble / quorum needs."""

    retriable = True


class BookieFailure(LedgerError):
    """A read or recovery step could not get enough answers from bookies."""

    retriable = True


class ReadBeyondLastConfirmed(LedgerError):
    """A read asked for an entry past the last add confirmed: it may never exist."""


class EntryCorrupt(LedgerError):
    """No replica returned the entry with a matching checksum."""


class MetadataConflict(LedgerError):
    """A compare-and-set on ledger metadata lost to a concurrent change."""

    retriable = True


class TooManyPendingAdds(LedgerError):
    """The writer's bounded pending-add queue is full (back-pressure)."""

    retriable = True


class InvalidStateTransition(LedgerError):
    """A state machine got an event that its transition table does not allow."""


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
    "BookieFailure",
    "CursorAlreadyExists",
    "CursorNotFound",
    "EntryCorrupt",
    "InvalidStateTransition",
    "LedgerClosed",
    "LedgerError",
    "LedgerFenced",
    "LedgerNotFound",
    "LedgerOutOfOrder",
    "ManagedLedgerClosed",
    "ManagedLedgerError",
    "ManagedLedgerFenced",
    "ManagedLedgerTerminated",
    "MetadataConflict",
    "NotEnoughBookies",
    "ReadBeyondLastConfirmed",
    "TooManyPendingAdds",
]
