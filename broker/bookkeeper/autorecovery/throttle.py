"""The replication worker's byte-rate limit (BookKeeper's ``replicationRateByBytes``).

Owns: ``ByteThrottle``, a token bucket of at most one second of bytes, refilled at ``rate``
bytes per second on the injected clock. ``consume(n)`` returns at once while tokens remain
and otherwise sleeps until the debt is paid (a batch bigger than the bucket is let through
and paid for afterwards, so progress never stops).
Must not know: what the bytes are.
"""

from __future__ import annotations

from magnetar.clock import Clock


class ByteThrottle:
    def __init__(self, rate_bytes_per_s: int, clock: Clock) -> None:
        self.rate = rate_bytes_per_s
        self._clock = clock
        self._tokens = float(max(rate_bytes_per_s, 0))
        self._last_ms = clock.monotonic_ms()
        self.waited_s = 0.0

    @property
    def unlimited(self) -> bool:
        return self.rate <= 0

    def __repr__(self) -> str:
        return f"<ByteThrottle rate={self.rate}B/s tokens={self._tokens:.0f}>"

    async def consume(self, nbytes: int) -> None:
        if self.unlimited:
            return
        now = self._clock.monotonic_ms()
        self._tokens = min(
            float(self.rate), self._tokens + (now - self._last_ms) * self.rate / 1000
        )
        self._last_ms = now
        self._tokens -= nbytes
        if self._tokens < 0:
            wait_s = -self._tokens / self.rate
            self.waited_s += wait_s
            await self._clock.sleep(wait_s)
            self._tokens = 0.0
            self._last_ms = self._clock.monotonic_ms()


__all__ = ["ByteThrottle"]
