"""The clock the client's timers use, injectable so tests can drive virtual time.

Owns: the ``Clock`` protocol (the same shape as ``magnetar.zk.clock.Clock``, which the client
must not import) and ``SystemClock``. Everything with a timer in the client (keep-alive, ack
grouping, negative acks, ack timeout, batching delay, backoff, send/operation timeouts) reads
time from a ``Clock`` passed to ``Client(clock=...)``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Protocol


class TimerHandle(Protocol):
    def cancel(self) -> None: ...


class Clock(Protocol):
    def now_ms(self) -> int:
        """Wall-clock milliseconds since the epoch (publish times, deliver_at)."""
        ...

    def monotonic_ms(self) -> float:
        """Monotonic milliseconds (deadlines)."""
        ...

    async def sleep(self, seconds: float) -> None: ...

    def call_later(self, delay_s: float, callback: Callable[[], None]) -> TimerHandle: ...


class SystemClock:
    """Real time, timers on the running event loop."""

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def monotonic_ms(self) -> float:
        return time.monotonic() * 1000.0

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    def call_later(self, delay_s: float, callback: Callable[[], None]) -> TimerHandle:
        return asyncio.get_running_loop().call_later(delay_s, callback)


__all__ = ["Clock", "SystemClock", "TimerHandle"]
