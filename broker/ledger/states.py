"""The managed ledger's lifecycle, written as data.

Owns: the states and events of a managed ledger (ledger opened, closing the current ledger,
creating the next, closed, fenced, terminated) and their transition table; anything not in
the table is illegal and raises ``InvalidStateTransition``. Tests walk every (state, event)
pair. Must not know: I/O. Callers decide with ``next`` synchronously, then carry out the I/O.
"""

from __future__ import annotations

import enum

from magnetar.broker.bookkeeper.states import StateMachine


# -- a managed ledger (in memory) ---------------------------------------------------------
class ManagedLedgerState(enum.Enum):
    LEDGER_OPENED = "LedgerOpened"
    CLOSING_LEDGER = "ClosingLedger"
    CREATING_LEDGER = "CreatingLedger"
    CLOSED = "Closed"
    FENCED = "Fenced"
    TERMINATED = "Terminated"


class ManagedLedgerEvent(enum.Enum):
    ADD = enum.auto()  # direct in LedgerOpened; queued while rolling over
    ROLLOVER = enum.auto()  # the current ledger is full (or failed)
    LEDGER_CLOSED = enum.auto()
    LEDGER_CREATED = enum.auto()
    CLOSE = enum.auto()
    FENCE = enum.auto()  # metadata CAS lost or the ledger was fenced: another owner
    TERMINATE = enum.auto()


_ML = ManagedLedgerState
_MLE = ManagedLedgerEvent
MANAGED_LEDGER_FSM: StateMachine[ManagedLedgerState, ManagedLedgerEvent] = StateMachine(
    "managed-ledger",
    {
        (_ML.LEDGER_OPENED, _MLE.ADD): _ML.LEDGER_OPENED,
        (_ML.LEDGER_OPENED, _MLE.ROLLOVER): _ML.CLOSING_LEDGER,
        (_ML.LEDGER_OPENED, _MLE.CLOSE): _ML.CLOSED,
        (_ML.LEDGER_OPENED, _MLE.FENCE): _ML.FENCED,
        (_ML.LEDGER_OPENED, _MLE.TERMINATE): _ML.TERMINATED,
        (_ML.CLOSING_LEDGER, _MLE.ADD): _ML.CLOSING_LEDGER,
        (_ML.CLOSING_LEDGER, _MLE.LEDGER_CLOSED): _ML.CREATING_LEDGER,
        (_ML.CLOSING_LEDGER, _MLE.CLOSE): _ML.CLOSED,
        (_ML.CLOSING_LEDGER, _MLE.FENCE): _ML.FENCED,
        (_ML.CREATING_LEDGER, _MLE.ADD): _ML.CREATING_LEDGER,
        (_ML.CREATING_LEDGER, _MLE.LEDGER_CREATED): _ML.LEDGER_OPENED,
        (_ML.CREATING_LEDGER, _MLE.CLOSE): _ML.CLOSED,
        (_ML.CREATING_LEDGER, _MLE.FENCE): _ML.FENCED,
        # opening a managed ledger that was terminated: no new ledger is created
        (_ML.CREATING_LEDGER, _MLE.TERMINATE): _ML.TERMINATED,
        (_ML.CLOSED, _MLE.CLOSE): _ML.CLOSED,
        (_ML.FENCED, _MLE.CLOSE): _ML.FENCED,
        (_ML.FENCED, _MLE.FENCE): _ML.FENCED,
        (_ML.TERMINATED, _MLE.CLOSE): _ML.CLOSED,
        (_ML.TERMINATED, _MLE.FENCE): _ML.FENCED,
    },
)


__all__ = ["MANAGED_LEDGER_FSM", "ManagedLedgerEvent", "ManagedLedgerState"]
