"""Auto-recovery: the auditor, replication workers and operator actions (BookKeeper's
auto-recovery, ``reference/bookkeeper.md`` section 5.3), beside the ledger client it uses.

Modules: ``config`` (settings), ``layout`` (marks, locks and draining markers in the
metadata store), ``checker`` (which fragments lack a replica), ``throttle`` (byte rate),
``worker`` (copy, verify, one CAS), ``auditor`` (marks), ``daemon`` (election + worker),
``admin`` (recover / decommission with progress).
Must not know: topics, managed ledgers, the bookie's internals.
"""

from magnetar.broker.bookkeeper.autorecovery.admin import (
    BookieActionError,
    Progress,
    decommission_bookie,
    ledgers_referencing,
    recover_bookie,
)
from magnetar.broker.bookkeeper.autorecovery.auditor import Auditor, AuditorStatistics
from magnetar.broker.bookkeeper.autorecovery.checker import ClusterView, Fault, FaultKind
from magnetar.broker.bookkeeper.autorecovery.config import AutoRecoveryConfig
from magnetar.broker.bookkeeper.autorecovery.daemon import AutoRecovery, ledger_client_for
from magnetar.broker.bookkeeper.autorecovery.layout import Mark, UnderReplication
from magnetar.broker.bookkeeper.autorecovery.throttle import ByteThrottle
from magnetar.broker.bookkeeper.autorecovery.worker import (
    ReplicationFailed,
    ReplicationWorker,
    WorkerStatistics,
)

__all__ = [
    "Auditor",
    "AuditorStatistics",
    "AutoRecovery",
    "AutoRecoveryConfig",
    "BookieActionError",
    "ByteThrottle",
    "ClusterView",
    "Fault",
    "FaultKind",
    "Mark",
    "Progress",
    "ReplicationFailed",
    "ReplicationWorker",
    "UnderReplication",
    "WorkerStatistics",
    "decommission_bookie",
    "ledger_client_for",
    "ledgers_referencing",
    "recover_bookie",
]
