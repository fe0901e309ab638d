"""Background reads: the bookie's share of its time for reads that may wait.

A bookie serves adds and reads on one event loop in one interpreter. A reader that never
idles (an offload reading a sealed ledger back, packed, call after call) makes every add wait
behind the read in progress; docs/benchmarks.md (issue 30) measured the harm per call, not per
byte: a lone add's p99 doubled beside a reader, and only a reader that left the bookie idle
almost all of the time kept it within +20 %. Reads served by another thread or a cheaper
transport did not change that; spacing the calls did.

So a reader that can wait marks its reads ``background`` (``ReadRequest.background``: the
offload worker does), and the bookie spaces them: while it has taken an add within the last
``ADDS_RECENT_S``, background reads together use at most ``share_percent`` of its time.
After a background read that cost ``c`` (by a fixed model: ``CALL_COST_S`` per call plus
``MIB_COST_S`` per MiB answered, this machine's measured bookie CPU; not the handler's wall
time, which counts every add served meanwhile), the next one starts ``c * (100 / share - 1)``
later. With no recent add they run
at once, so an idle bookie serves them at full speed. One runs at a time while paced (a FIFO
queue); none waits longer than ``WAIT_MAX_S`` (so many background readers at once exceed the
share rather than time out). ``share_percent`` 100: never wait.

Owns: ``BackgroundReads`` (``note_add``, ``run``, its counters).
Must not know: gRPC, what a read does, storage.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from magnetar.clock import Clock, SystemClock

ADDS_RECENT_S = 1.0
"""A bookie that took an add this recently is serving writers: background reads are paced."""

CALL_COST_S = 0.0015
"""Bookie CPU one read call costs whatever its size (gRPC, protobuf, the loop's hand-offs):
docs/benchmarks.md measured 0.7-0.9 ms for an empty ``Info`` call on a fast day of this
machine and 1.7 ms on a slow one."""

MIB_COST_S = 0.0025
"""Bookie CPU per MiB a read answers: a packed 1 MiB read cost 2.0 ms more than an empty
call on a fast day, 2.7 ms on a slow one."""

SHARE_PERCENT_DEFAULT = 1
"""The bookie setting ``background_read_share_percent``'s default, the one share everywhere:
with 1 MiB reads a 1 % share kept a lone add's p99 within +20 % (docs/benchmarks.md, issue 30,
session 13)."""

WAIT_MAX_S = 5.0
"""The longest a background read waits for its turn (a client times a read out at 30 s)."""

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class BackgroundReadStatistics:
    reads: int
    """Background reads served."""
    paced: int
    """Of them, those that waited for their turn."""
    wait_s: float
    """Their waits added up."""


class BackgroundReads:
    """Spaces background reads while the bookie takes adds (see the module docstring)."""

    def __init__(
        self, share_percent: int = SHARE_PERCENT_DEFAULT, clock: Clock | None = None
    ) -> None:
        if not 1 <= share_percent <= 100:
            raise ValueError(f"share_percent must be 1..100, not {share_percent}")
        self.share_percent = share_percent
        self._clock = clock or SystemClock()
        self._last_add_ms = -1e18
        self._next_ms = 0.0
        """When the next paced background read may start (monotonic ms)."""
        self._turn = asyncio.Lock()
        self._reads = 0
        self._paced = 0
        self._wait_s = 0.0

    def __repr__(self) -> str:
        return f"<BackgroundReads {self.share_percent}%>"

    def note_add(self) -> None:
        """An add arrived (called for every add batch: keep it cheap)."""
        self._last_add_ms = self._clock.monotonic_ms()

    def statistics(self) -> BackgroundReadStatistics:
        return BackgroundReadStatistics(self._reads, self._paced, self._wait_s)

    def _writers_present(self, now_ms: float) -> bool:
        return now_ms - self._last_add_ms <= ADDS_RECENT_S * 1000

    async def run(self, read: Callable[[], Awaitable[T]], size: Callable[[T], int]) -> T:
        """Serve one background read (``read()`` starts it; ``size`` of its answer, in
        bytes): at once while no add is recent, else when its turn comes."""
        self._reads += 1
        if self.share_percent >= 100:
            return await read()
        if not self._writers_present(self._clock.monotonic_ms()):
            return self._charged(await read(), size)
        async with self._turn:
            now = self._clock.monotonic_ms()
            if self._writers_present(now) and self._next_ms > now:
                wait_ms = min(self._next_ms - now, WAIT_MAX_S * 1000)
                self._paced += 1
                self._wait_s += wait_ms / 1000
                await self._clock.sleep(wait_ms / 1000)
            return self._charged(await read(), size)

    def _charged(self, answer: T, size: Callable[[T], int]) -> T:
        cost_ms = (CALL_COST_S + MIB_COST_S * size(answer) / (1 << 20)) * 1000
        after = self._clock.monotonic_ms() + cost_ms * (100 / self.share_percent - 1)
        self._next_ms = max(self._next_ms, after)
        return answer


__all__ = [
    "ADDS_RECENT_S",
    "CALL_COST_S",
    "MIB_COST_S",
    "WAIT_MAX_S",
    "BackgroundReadStatistics",
    "BackgroundReads",
]
