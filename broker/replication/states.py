"""A replicator's lifecycle as data: its states, the events it gets, what each one does.

Owns: ``State``, ``Event``, ``Action`` and ``TRANSITIONS`` (state, event) -> (next state,
actions), total over every pair: a pair not in the table is ``IGNORED`` (stale: a retry
timer firing after a stop, a failure reported twice) or a ``InvalidTransition`` (a bug).

    STOPPED --start--> STARTING --connected--> RUNNING
    STARTING --failed--> BACKING_OFF --retry_due--> STARTING
    RUNNING --failed--> BACKING_OFF (producer closed, cursor rewound)
    STARTING / RUNNING --stop--> STOPPING --closed--> STOPPED
    BACKING_OFF --stop--> STOPPED

Entering RUNNING rewinds the cursor to just after its mark-delete position, so whatever was
sent but not receipted before (a failure, an unload, a crash of this broker) is sent again:
the remote drops what it already stored (``positions``), so nothing is lost or repeated.
Pure. Must not know: I/O, asyncio.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class State(enum.Enum):
    STOPPED = "Stopped"
    STARTING = "Starting"
    RUNNING = "Started"
    BACKING_OFF = "BackingOff"
    STOPPING = "Stopping"


class Event(enum.Enum):
    START = "start"
    CONNECTED = "connected"
    FAILED = "failed"
    RETRY_DUE = "retry_due"
    STOP = "stop"
    CLOSED = "closed"


class Action(enum.Enum):
    CONNECT = "connect"
    """Create the producer on the remote cluster."""
    REWIND_AND_READ = "rewind_and_read"
    """Rewind the cursor past its mark-delete position, then replicate."""
    CLOSE_PRODUCER = "close_producer"
    """Stop reading, drop what is in flight, close the remote producer."""
    SCHEDULE_RETRY = "schedule_retry"
    """Arm the back-off timer (its reason is kept for stats)."""
    CANCEL_RETRY = "cancel_retry"


@dataclass(frozen=True, slots=True)
class Transition:
    next: State
    actions: tuple[Action, ...] = ()


class InvalidTransition(RuntimeError):
    """An event that cannot happen in that state (a bug in the caller)."""


IGNORED = "ignored"

_S, _E, _A = State, Event, Action

TRANSITIONS: dict[tuple[State, Event], Transition | str] = {
    (_S.STOPPED, _E.START): Transition(_S.STARTING, (_A.CONNECT,)),
    (_S.STOPPED, _E.STOP): IGNORED,
    (_S.STOPPED, _E.FAILED): IGNORED,
    (_S.STOPPED, _E.RETRY_DUE): IGNORED,
    (_S.STOPPED, _E.CLOSED): IGNORED,
    (_S.STARTING, _E.START): IGNORED,
    (_S.STARTING, _E.CONNECTED): Transition(_S.RUNNING, (_A.REWIND_AND_READ,)),
    (_S.STARTING, _E.FAILED): Transition(_S.BACKING_OFF, (_A.SCHEDULE_RETRY,)),
    (_S.STARTING, _E.STOP): Transition(_S.STOPPING, (_A.CLOSE_PRODUCER,)),
    (_S.STARTING, _E.RETRY_DUE): IGNORED,
    (_S.RUNNING, _E.START): IGNORED,
    (_S.RUNNING, _E.FAILED): Transition(_S.BACKING_OFF, (_A.CLOSE_PRODUCER, _A.SCHEDULE_RETRY)),
    (_S.RUNNING, _E.STOP): Transition(_S.STOPPING, (_A.CLOSE_PRODUCER,)),
    (_S.RUNNING, _E.RETRY_DUE): IGNORED,
    (_S.BACKING_OFF, _E.START): IGNORED,
    (_S.BACKING_OFF, _E.RETRY_DUE): Transition(_S.STARTING, (_A.CONNECT,)),
    (_S.BACKING_OFF, _E.STOP): Transition(_S.STOPPED, (_A.CANCEL_RETRY,)),
    (_S.BACKING_OFF, _E.FAILED): IGNORED,
    (_S.BACKING_OFF, _E.CLOSED): IGNORED,
    (_S.STOPPING, _E.CONNECTED): Transition(_S.STOPPING, (_A.CLOSE_PRODUCER,)),
    (_S.STOPPING, _E.CLOSED): Transition(_S.STOPPED),
    (_S.STOPPING, _E.STOP): IGNORED,
    (_S.STOPPING, _E.FAILED): IGNORED,
    (_S.STOPPING, _E.RETRY_DUE): IGNORED,
}
"""Pairs absent here are invalid: START while STOPPING (wait for the stop first),
CONNECTED without a pending connect, CLOSED without a pending close."""


def next_transition(state: State, event: Event) -> Transition | None:
    """The transition for ``event`` in ``state``; None when it is ignored."""
    found = TRANSITIONS.get((state, event))
    if found is None:
        raise InvalidTransition(f"{event.value} in state {state.value}")
    if isinstance(found, str):
        return None
    return found


__all__ = [
    "IGNORED",
    "TRANSITIONS",
    "Action",
    "Event",
    "InvalidTransition",
    "State",
    "Transition",
    "next_transition",
]
