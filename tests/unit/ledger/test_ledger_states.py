"""Every (state, event) pair of the ledger-layer state machines."""

from __future__ import annotations

import itertools

import pytest

from magnetar.broker.bookkeeper.errors import InvalidStateTransition
from magnetar.broker.bookkeeper.states import (
    HANDLE_FSM,
    LEDGER_FSM,
    HandleEvent,
    HandleState,
    LedgerEvent,
    LedgerState,
)
from magnetar.broker.ledger.states import MANAGED_LEDGER_FSM, ManagedLedgerEvent, ManagedLedgerState

L, LE = LedgerState, LedgerEvent
LEDGER_EXPECTED = {
    (L.OPEN, LE.ENSEMBLE_CHANGE): L.OPEN,
    (L.OPEN, LE.CLOSE): L.CLOSED,
    (L.OPEN, LE.BEGIN_RECOVERY): L.IN_RECOVERY,
    (L.IN_RECOVERY, LE.BEGIN_RECOVERY): L.IN_RECOVERY,
    (L.IN_RECOVERY, LE.ENSEMBLE_CHANGE): L.IN_RECOVERY,
    (L.IN_RECOVERY, LE.FINISH_RECOVERY): L.CLOSED,
}
H, HE = HandleState, HandleEvent
HANDLE_EXPECTED = {
    (H.OPEN, HE.ADD): H.OPEN,
    (H.OPEN, HE.CLOSE): H.CLOSING,
    (H.OPEN, HE.FENCED): H.FENCED,
    (H.OPEN, HE.FATAL): H.ERRORED,
    (H.CLOSING, HE.CLOSED): H.CLOSED,
    (H.CLOSING, HE.FENCED): H.FENCED,
    (H.CLOSING, HE.FATAL): H.ERRORED,
    (H.CLOSED, HE.CLOSE): H.CLOSED,
    (H.FENCED, HE.CLOSE): H.FENCED,
    (H.FENCED, HE.FENCED): H.FENCED,
    (H.ERRORED, HE.CLOSE): H.ERRORED,
    (H.ERRORED, HE.FENCED): H.FENCED,
    (H.ERRORED, HE.CLOSED): H.CLOSED,  # a writer failed for want of bookies closes at its LAC
}
M, ME = ManagedLedgerState, ManagedLedgerEvent
ML_EXPECTED = {
    (M.LEDGER_OPENED, ME.ADD): M.LEDGER_OPENED,
    (M.LEDGER_OPENED, ME.ROLLOVER): M.CLOSING_LEDGER,
    (M.LEDGER_OPENED, ME.CLOSE): M.CLOSED,
    (M.LEDGER_OPENED, ME.FENCE): M.FENCED,
    (M.LEDGER_OPENED, ME.TERMINATE): M.TERMINATED,
    (M.CLOSING_LEDGER, ME.ADD): M.CLOSING_LEDGER,
    (M.CLOSING_LEDGER, ME.LEDGER_CLOSED): M.CREATING_LEDGER,
    (M.CLOSING_LEDGER, ME.CLOSE): M.CLOSED,
    (M.CLOSING_LEDGER, ME.FENCE): M.FENCED,
    (M.CREATING_LEDGER, ME.ADD): M.CREATING_LEDGER,
    (M.CREATING_LEDGER, ME.LEDGER_CREATED): M.LEDGER_OPENED,
    (M.CREATING_LEDGER, ME.CLOSE): M.CLOSED,
    (M.CREATING_LEDGER, ME.FENCE): M.FENCED,
    (M.CREATING_LEDGER, ME.TERMINATE): M.TERMINATED,
    (M.CLOSED, ME.CLOSE): M.CLOSED,
    (M.FENCED, ME.CLOSE): M.FENCED,
    (M.FENCED, ME.FENCE): M.FENCED,
    (M.TERMINATED, ME.CLOSE): M.CLOSED,
    (M.TERMINATED, ME.FENCE): M.FENCED,
}

CASES = [
    (LEDGER_FSM, LedgerState, LedgerEvent, LEDGER_EXPECTED),
    (HANDLE_FSM, HandleState, HandleEvent, HANDLE_EXPECTED),
    (MANAGED_LEDGER_FSM, ManagedLedgerState, ManagedLedgerEvent, ML_EXPECTED),
]


@pytest.mark.parametrize(
    ("fsm", "state", "event", "expected"),
    [
        (fsm, s, e, expected.get((s, e)))
        for fsm, states, events, expected in CASES
        for s, e in itertools.product(states, events)
    ],
    ids=lambda v: getattr(v, "name", None) if not isinstance(v, dict) else None,
)
def test_every_state_event_pair(fsm, state, event, expected) -> None:  # type: ignore[no-untyped-def]
    if expected is None:
        assert not fsm.allowed(state, event)
        with pytest.raises(InvalidStateTransition):
            fsm.next(state, event)
    else:
        assert fsm.allowed(state, event)
        assert fsm.next(state, event) is expected


def test_closed_ledger_is_terminal() -> None:
    for event in LedgerEvent:
        assert not LEDGER_FSM.allowed(LedgerState.CLOSED, event)
