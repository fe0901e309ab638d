"""Virtual time that moves by itself: trio's ``MockClock(autojump_threshold=0)`` for asyncio.

Owns: ``AutojumpClock``, a ``magnetar.clock.VirtualClock`` that, while its context is
entered (``async with AutojumpClock() as clock:``), jumps to the next timer whenever the
event loop has nothing else to run. Code under test gets it as its injected ``Clock``: its
timeouts, back-offs and periodic checks then fire in the order and at the virtual times they
would in real time, without the test waiting for them or guessing how far to ``advance``.

Idle means: the loop's ready queue stayed empty for ``idle_turns`` consecutive turns. Each
turn polls I/O with a zero timeout, so data already on a socket is handled before time
jumps; a peer that has not answered yet (another process) is not waited for: use it in the
unit tiers, over fakes. It reads the loop's ready queue (``_ready``, CPython's
``BaseEventLoop``); on a loop without one, any ``idle_turns`` turns count as idle.

Invariants: time only moves forward; it moves only to the due time of a pending timer;
nothing runs while no timer is pending (the jumper sleeps until one is armed).
Must not know: what the timers do.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
from collections.abc import Callable
from types import TracebackType

from magnetar.clock import TimerHandle, VirtualClock


class AutojumpClock(VirtualClock):
    def __init__(self, start_ms: int = 1_700_000_000_000, *, idle_turns: int = 3) -> None:
        super().__init__(start_ms)
        self.idle_turns = idle_turns
        self.jumps = 0
        self._armed: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None

    def call_later(self, delay_s: float, callback: Callable[[], None]) -> TimerHandle:
        handle = super().call_later(delay_s, callback)
        if self._armed is not None:
            self._armed.set()
        return handle

    def _next_due_ms(self) -> float | None:
        while self._timers and self._timers[0][2].cancelled:
            heapq.heappop(self._timers)
        return self._timers[0][0] if self._timers else None

    async def _run(self) -> None:
        assert self._armed is not None
        loop = asyncio.get_running_loop()
        idle = 0
        while True:
            due = self._next_due_ms()
            if due is None:
                self._armed.clear()
                await self._armed.wait()
                idle = 0
                continue
            await asyncio.sleep(0)
            if getattr(loop, "_ready", None):
                idle = 0  # something else is runnable: not idle yet
                continue
            idle += 1
            if idle >= self.idle_turns:
                idle = 0
                due = self._next_due_ms()
                if due is not None:
                    self.advance(max(0.0, (due - self._now_ms) / 1000.0))
                    self.jumps += 1

    async def __aenter__(self) -> AutojumpClock:
        self._armed = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(self._run())
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self._task = None
        self._armed = None


__all__ = ["AutojumpClock"]
