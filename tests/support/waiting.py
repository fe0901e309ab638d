"""Waiting on conditions in tests: the one place where a test waits for something.

Owns: ``wait_until`` (blocking: tests that drive processes, threads or the official client)
and ``wait_for`` (async: tests on an event loop). Both poll a predicate until it holds and
fail with ``AssertionError`` naming what was awaited once ``timeout_s`` has passed. The
predicate may return any value: the first truthy one is returned, so a wait can also fetch
(``owner = wait_until(lambda: find_owner(), 60, "an owner")``). ``ignore`` lists exceptions
that mean "not yet" (a server still starting answers with a refused connection). ``what``
may be a function, called only on a timeout (a process's log tail, the state seen last).

Invariants: a wait never returns before its condition holds; the poll interval is a pace,
never synchronisation; the timeout is a bound, generous on a loaded machine (reaching it is
a failure, never a result). Must not know: what is being waited for.

"Nothing more arrived" is not a wait: use a positive barrier (send a marker after, wait for
it, then check nothing else came before it) or virtual time (``magnetar.clock.VirtualClock``
injected, moved past the timer that would send).
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")

DEFAULT_TIMEOUT_S = 30.0
# async polls start by yielding to the loop (an in-memory condition usually holds within a
# few turns) and back off to this pace, so a long wait does not spin a shared CPU
_ASYNC_INTERVAL_MAX_S = 0.02
_YIELD_POLLS = 20


def wait_until(
    pred: Callable[[], T],
    timeout_s: float = DEFAULT_TIMEOUT_S,
    what: str | Callable[[], str] = "condition",
    *,
    interval_s: float = 0.05,
    ignore: tuple[type[BaseException], ...] = (),
) -> T:
    """Block until ``pred()`` is truthy and return it; ``AssertionError`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    last_exc: BaseException | None = None
    while True:
        try:
            result = pred()
        except ignore as exc:
            last_exc = exc
        else:
            if result:
                return result
        if time.monotonic() > deadline:
            raise AssertionError(_timeout_message(what, timeout_s, last_exc)) from last_exc
        time.sleep(interval_s)  # polling pace of a deadline-bounded wait


async def wait_for(
    pred: Callable[[], T | Awaitable[T]],
    timeout_s: float = DEFAULT_TIMEOUT_S,
    what: str | Callable[[], str] = "condition",
    *,
    interval_s: float = _ASYNC_INTERVAL_MAX_S,
    ignore: tuple[type[BaseException], ...] = (),
) -> T:
    """Until ``pred()`` (sync, or returning an awaitable) is truthy; return it.
    ``AssertionError`` after ``timeout_s`` of loop time."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    last_exc: BaseException | None = None
    polls = 0
    while True:
        try:
            result = pred()
            if inspect.isawaitable(result):
                result = await result
        except ignore as exc:
            last_exc = exc
        else:
            if result:
                return result  # type: ignore[return-value]
        if loop.time() > deadline:
            raise AssertionError(_timeout_message(what, timeout_s, last_exc)) from last_exc
        polls += 1
        # polling pace of a deadline-bounded wait
        await asyncio.sleep(0 if polls <= _YIELD_POLLS else interval_s)


def _timeout_message(
    what: str | Callable[[], str], timeout_s: float, last_exc: BaseException | None
) -> str:
    tail = f" (last: {last_exc!r})" if last_exc is not None else ""
    described = what() if callable(what) else what
    return f"timed out after {timeout_s} s waiting for {described}{tail}"


__all__ = ["DEFAULT_TIMEOUT_S", "wait_for", "wait_until"]
