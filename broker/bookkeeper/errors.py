"""Typed errors of BookKeeper's client (ledgers, their handles, placement, recovery).

Owns: one exception tree with ``retriable`` flags. Bookie and metadata-store errors are
translated into these where the client catches them. The managed ledger's own errors
(``magnetar.broker.ledger.errors``) extend this tree. Must not know: managed ledgers, topics.
"""

from __future__ import annotations


class LedgerError(Exception):
    """Base of ledger errors; ``retriable``: the same call may succeed later."""

    retriable: bool = False


class LedgerFenced(LedgerError):
    """Another writer has recovered (fenced) this ledger: this handle must stop writing."""


class LedgerClosed(LedgerError):
    """The ledger is closed (or closing) for writes."""


class LedgerNotFound(LedgerError):
    """No metadata for this ledger id."""


class LedgerNotSealed(LedgerError):
    """A read-only handle without a metadata store was asked for a ledger that is not
    CLOSED: its end belongs to a writer (or a recovery) that such a reader cannot see."""


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


__all__ = [
    "BookieFailure",
    "EntryCorrupt",
    "InvalidStateTransition",
    "LedgerClosed",
    "LedgerError",
    "LedgerFenced",
    "LedgerNotFound",
    "LedgerNotSealed",
    "MetadataConflict",
    "NotEnoughBookies",
    "ReadBeyondLastConfirmed",
    "TooManyPendingAdds",
]
