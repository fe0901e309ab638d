"""Lifecycle state machines of BookKeeper's client, written as data.

Owns: ``StateMachine`` (a transition table) and the states and events of (1) a ledger's
metadata (OPEN / IN_RECOVERY / CLOSED, as BookKeeper), (2) a writer's handle on a ledger.
Each is an Enum of states, an Enum of events and a transition table; anything not in the
table is illegal and raises ``InvalidStateTransition``. Tests walk every (state, event) pair.
(The managed ledger's lifecycle, ``magnetar.broker.ledger.states``, uses the same table.)
Must not know: I/O. Callers decide with ``next`` synchronously, then carry out the I/O.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Generic, TypeVar

from magnetar.broker.bookkeeper.errors import InvalidStateTransition

S = TypeVar("S", bound=enum.Enum)
E = TypeVar("E", bound=enum.Enum)


class StateMachine(Generic[S, E]):
    """A transition table: ``next(state, event)`` is the new state or raises."""

    def __init__(self, name: str, table: Mapping[tuple[S, E], S]) -> None:
        self.name = name
        self.table = dict(table)

    def allowed(self, state: S, event: E) -> bool:
        return (state, event) in self.table

    def next(self, state: S, event: E) -> S:
        try:
            return self.table[(state, event)]
        except KeyError:
            raise InvalidStateTransition(
                f"{self.name}: event {event.name} not allowed in state {state.name}"
            ) from None


# -- 1. ledger metadata (persisted) ---------------------------------------------------------
class LedgerState(enum.Enum):
    OPEN = "OPEN"
    IN_RECOVERY = "IN_RECOVERY"
    CLOSED = "CLOSED"


class LedgerEvent(enum.Enum):
    ENSEMBLE_CHANGE = enum.auto()  # the writer (or the recoverer) replaced a bookie
    CLOSE = enum.auto()  # the writer closes its ledger
    BEGIN_RECOVERY = enum.auto()  # a new owner starts recovery (fencing)
    FINISH_RECOVERY = enum.auto()  # the recoverer closes the ledger at the recovered end


LEDGER_FSM: StateMachine[LedgerState, LedgerEvent] = StateMachine(
    "ledger",
    {
        (LedgerState.OPEN, LedgerEvent.ENSEMBLE_CHANGE): LedgerState.OPEN,
        (LedgerState.OPEN, LedgerEvent.CLOSE): LedgerState.CLOSED,
        (LedgerState.OPEN, LedgerEvent.BEGIN_RECOVERY): LedgerState.IN_RECOVERY,
        # a recoverer that crashed leaves IN_RECOVERY; the next one resumes
        (LedgerState.IN_RECOVERY, LedgerEvent.BEGIN_RECOVERY): LedgerState.IN_RECOVERY,
        (LedgerState.IN_RECOVERY, LedgerEvent.ENSEMBLE_CHANGE): LedgerState.IN_RECOVERY,
        (LedgerState.IN_RECOVERY, LedgerEvent.FINISH_RECOVERY): LedgerState.CLOSED,
    },
)


# -- 2. a writer's handle (in memory) --------------------------------------------------------
class HandleState(enum.Enum):
    OPEN = "OPEN"
    CLOSING = "CLOSING"
    CLOSED = "CLOSED"
    FENCED = "FENCED"  # a recoverer took the ledger: every add fails with LedgerFenced
    ERRORED = "ERRORED"  # not enough bookies for too long: the owner takes its adds, rolls over


class HandleEvent(enum.Enum):
    ADD = enum.auto()
    CLOSE = enum.auto()
    CLOSED = enum.auto()
    FENCED = enum.auto()
    FATAL = enum.auto()


HANDLE_FSM: StateMachine[HandleState, HandleEvent] = StateMachine(
    "ledger-handle",
    {
        (HandleState.OPEN, HandleEvent.ADD): HandleState.OPEN,
        (HandleState.OPEN, HandleEvent.CLOSE): HandleState.CLOSING,
        (HandleState.OPEN, HandleEvent.FENCED): HandleState.FENCED,
        (HandleState.OPEN, HandleEvent.FATAL): HandleState.ERRORED,
        (HandleState.CLOSING, HandleEvent.CLOSED): HandleState.CLOSED,
        (HandleState.CLOSING, HandleEvent.FENCED): HandleState.FENCED,
        (HandleState.CLOSING, HandleEvent.FATAL): HandleState.ERRORED,
        # closing an already closed / dead handle is a no-op, not an error
        (HandleState.CLOSED, HandleEvent.CLOSE): HandleState.CLOSED,
        (HandleState.FENCED, HandleEvent.CLOSE): HandleState.FENCED,
        (HandleState.FENCED, HandleEvent.FENCED): HandleState.FENCED,
        (HandleState.ERRORED, HandleEvent.CLOSE): HandleState.ERRORED,
        (HandleState.ERRORED, HandleEvent.FENCED): HandleState.FENCED,
        # a writer that failed for want of bookies closes the ledger at its LAC
        (HandleState.ERRORED, HandleEvent.CLOSED): HandleState.CLOSED,
    },
)


__all__ = [
    "HANDLE_FSM",
    "LEDGER_FSM",
    "HandleEvent",
    "HandleState",
    "LedgerEvent",
    "LedgerState",
    "StateMachine",
]
