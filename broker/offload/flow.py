"""Offload flow permits: how many bytes per second a broker's offloads together may read from
the bookies (Pulsar's ``managedLedgerOffloadFlowPermitsPerSecond``; unlimited by default).

An offload reads a sealed ledger back from the bookies, packs, uploads and verifies it, all on
the broker's loop and CPU; unpaced it takes what it can, and publishes on the same broker wait
behind it (docs/benchmarks.md, issue 30). Paced, it trades offload speed for the broker's
latency.

Owns: ``FlowPermits``: after each read of n bytes, ``pace(n)`` waits until the broker-wide
schedule (every offload's reads added up, at the configured rate) allows the next read. One
second of bytes may be read ahead of the schedule (a burst), so short offloads do not wait.
Must not know: what is read, stores, managed ledgers.
"""

from __future__ import annotations

from magnetar.clock import Clock, SystemClock

BURST_SECONDS = 1.0
"""Bytes of this many seconds at the rate may be read before any wait."""


class FlowPermits:
    """A broker's offload read rate; ``bytes_per_second`` <= 0: unlimited."""

    def __init__(self, bytes_per_second: int, clock: Clock | None = None) -> None:
        self.bytes_per_second = bytes_per_second
        self._clock = clock or SystemClock()
        self._due_ms: float | None = None
        """When the bytes read so far are paid for, on the monotonic clock."""

    def __repr__(self) -> str:
        rate = self.bytes_per_second
        return f"<FlowPermits {rate if rate > 0 else 'unlimited'} B/s>"

    @property
    def limited(self) -> bool:
        return self.bytes_per_second > 0

    async def pace(self, read_bytes: int) -> None:
        """``read_bytes`` were just read: wait until the schedule allows the next read."""
        if not self.limited or read_bytes <= 0:
            return
        now = self._clock.monotonic_ms()
        start = now if self._due_ms is None else max(self._due_ms, now)
        self._due_ms = start + read_bytes * 1000.0 / self.bytes_per_second
        wait_ms = self._due_ms - now - BURST_SECONDS * 1000
        if wait_ms > 0:
            await self._clock.sleep(wait_ms / 1000)


__all__ = ["BURST_SECONDS", "FlowPermits"]
