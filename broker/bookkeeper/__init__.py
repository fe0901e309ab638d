"""BookKeeper's client: replicated ledgers over bookies (the broker is BookKeeper's client).

Modules: ``errors`` (the exception tree), ``states`` (ledger and writer lifecycles as
transition tables), ``metadata`` (a ledger's metadata and its codec, write sets),
``entry`` (the stored framing and its checksum), ``replicas`` (reaching bookies for reads),
``placement`` (registered bookies, ensembles, quarantine), ``read_handle`` (the read
contract and its bookie implementation), ``write_handle`` (the single writer: quorum adds,
ensemble changes, fencing), ``context`` (what handles need of their client), ``client``
(create, open with recovery, delete), ``autorecovery/`` (auditor, re-replication,
decommission), ``testing`` (in-memory bookies for the fast tiers).

The read contract (what the managed ledger, an offloader and a Spark connector share):
``ReadHandle`` is ``ledger_id``, ``last_add_confirmed``, ``length``, ``is_closed`` and
``await read(first, last)`` -> ``list[LedgerEntry]`` (``ledger_id``, ``entry_id``,
``payload``, ``cumulative_length``), entries first..last inclusive, never past the last add
confirmed, each checksum verified (``EntryCorrupt`` when no replica has the entry intact,
``BookieFailure`` when none answers). ``LedgerClient.open_ledger`` returns one over the
bookies, with the metadata store. Without a metadata store, a SEALED (CLOSED) ledger is
read from its metadata alone, never fencing::

    metadata = LedgerMetadata.from_dict(doc)  # e.g. from the admin REST API
    async with BookiePool(BookieClient, addresses) as bookies:  # bookie id -> host:port
        handle = open_sealed_ledger(metadata, bookies)
        entries = await handle.read(0, handle.last_add_confirmed)

(``open_sealed_ledger`` refuses a ledger that is not CLOSED: ``LedgerNotSealed``.)

Must not know: managed ledgers, cursors, topics, the wire protocol, ``magnetar.client``
(an import-linter contract says so).
"""

from magnetar.broker.bookkeeper.client import LedgerClient
from magnetar.broker.bookkeeper.context import LedgerClientConfig
from magnetar.broker.bookkeeper.entry import LedgerEntry
from magnetar.broker.bookkeeper.errors import (
    BookieFailure,
    EntryCorrupt,
    InvalidStateTransition,
    LedgerClosed,
    LedgerError,
    LedgerFenced,
    LedgerNotFound,
    LedgerNotSealed,
    MetadataConflict,
    NotEnoughBookies,
    ReadBeyondLastConfirmed,
    TooManyPendingAdds,
)
from magnetar.broker.bookkeeper.metadata import LedgerMetadata
from magnetar.broker.bookkeeper.placement import BookieClientFactory, RackPolicy
from magnetar.broker.bookkeeper.read_handle import (
    BookieReadHandle,
    ReadHandle,
    open_sealed_ledger,
)
from magnetar.broker.bookkeeper.replicas import BookiePool, BookieReaderFactory
from magnetar.broker.bookkeeper.states import LedgerState
from magnetar.broker.bookkeeper.write_handle import WriteHandle

__all__ = [
    "BookieClientFactory",
    "BookieFailure",
    "BookiePool",
    "BookieReadHandle",
    "BookieReaderFactory",
    "EntryCorrupt",
    "InvalidStateTransition",
    "LedgerClient",
    "LedgerClientConfig",
    "LedgerClosed",
    "LedgerEntry",
    "LedgerError",
    "LedgerFenced",
    "LedgerMetadata",
    "LedgerNotFound",
    "LedgerNotSealed",
    "LedgerState",
    "MetadataConflict",
    "NotEnoughBookies",
    "RackPolicy",
    "ReadBeyondLastConfirmed",
    "ReadHandle",
    "TooManyPendingAdds",
    "WriteHandle",
    "open_sealed_ledger",
]
