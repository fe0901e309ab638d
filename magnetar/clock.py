"""Injectable time for everything with a timer: server, client and tools alike.

Owns: the ``Clock`` protocol (wall time, monotonic time, sleep, call_later), the real
``SystemClock`` and a ``VirtualClock`` that tests drive by hand. Must not know: who uses it;
it imports nothing of Magnetar, so the client, the bookie and the broker share this one module.
Invariant: ``VirtualClock`` time never moves backwards and only moves when ``advance`` is called.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections.abc import Callable
from typing import Protocol


class TimerHandle(Protocol):
    def cancel(self) -> None: ...


class Clock(Protocol):
    def now_ms(self) -> int:
        """Wall-clock milliseconds since the epoch (publish times, retention)."""
        ...

    def monotonic_ms(self) -> float:
        """Monotonic milliseconds (timeouts, rates)."""
        ...

    async def sleep(self, seconds: float) -> None: ...

    def call_later(self, delay_s: float, callback: Callable[[], None]) -> TimerHandle: ...


class SystemClock:
    """The real clock, on the running asyncio loop."""

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def monotonic_ms(self) -> float:
        return time.monotonic() * 1000.0

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    def call_later(self, delay_s: float, callback: Callable[[], None]) -> TimerHandle:
        return asyncio.get_running_loop().call_later(delay_s, callback)


class _VirtualTimer:
    __slots__ = ("callback", "cancelled", "due_ms")

    def __init__(self, due_ms: float, callback: Callable[[], None]) -> None:
        self.due_ms = due_ms
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class VirtualClock:
    """A clock that moves only when the test calls ``advance``."""

    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        self._now_ms = float(start_ms)
        self._timers: list[tuple[float, int, _VirtualTimer]] = []
        self._seq = itertools.count()

    def now_ms(self) -> int:
        return int(self._now_ms)

    def monotonic_ms(self) -> float:
        return self._now_ms

    def call_later(self, delay_s: float, callback: Callable[[], None]) -> TimerHandle:
        timer = _VirtualTimer(self._now_ms + max(0.0, delay_s) * 1000.0, callback)
        heapq.heappush(self._timers, (timer.due_ms, next(self._seq), timer))
        return timer

    async def sleep(self, seconds: float) -> None:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def wake() -> None:
            if not fut.done():
                fut.set_result(None)

        self.call_later(seconds, wake)
        await fut

    def advance(self, seconds: float) -> int:
        """Move time forward, running due timers in order; returns how many ran."""
        target = self._now_ms + seconds * 1000.0
        ran = 0
        while self._timers and self._timers[0][0] <= target:
            due, _, timer = heapq.heappop(self._timers)
            self._now_ms = max(self._now_ms, due)
            if not timer.cancelled:
                timer.callback()
                ran += 1
        self._now_ms = target
        return ran


__all__ = ["Clock", "SystemClock", "TimerHandle", "VirtualClock"]
