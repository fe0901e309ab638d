"""Token buckets for publish and dispatch throttling.

Owns: ``TokenBucket`` (one dimension: messages or bytes) and ``RateLimiter`` (messages and
bytes together, from a ``policies.Rate``). A bucket holds at most one period's worth of
tokens and refills continuously at ``rate / period``. ``consume`` may drive it negative
(the publish that crossed the limit is already read; the connection is then paused until
the debt is repaid: Pulsar's behaviour); ``available`` tells dispatch how much it may send.
Time comes from an injected ``Clock`` (``monotonic_ms``). Pure: no asyncio.
Must not know: connections, dispatchers.
"""

from __future__ import annotations

from magnetar.broker.policies.model import Rate
from magnetar.clock import Clock


class TokenBucket:
    __slots__ = ("_at_ms", "_clock", "_tokens", "capacity", "period_ms", "rate")

    def __init__(self, rate: int, period_s: float, clock: Clock) -> None:
        if rate <= 0 or period_s <= 0:
            raise ValueError("a token bucket needs a positive rate and period")
        self.rate = rate
        self.period_ms = period_s * 1000.0
        self.capacity = float(rate)
        self._clock = clock
        self._tokens = float(rate)
        self._at_ms = clock.monotonic_ms()

    def __repr__(self) -> str:
        return f"<TokenBucket {self.rate}/{self.period_ms:.0f}ms tokens={self.tokens:.1f}>"

    def _refill(self) -> None:
        now = self._clock.monotonic_ms()
        elapsed = now - self._at_ms
        if elapsed > 0:
            self._tokens = min(self.capacity, self._tokens + elapsed * self.rate / self.period_ms)
            self._at_ms = now

    @property
    def tokens(self) -> float:
        self._refill()
        return self._tokens

    def available(self) -> int:
        """Whole tokens that may be taken now (0 when in debt)."""
        return max(0, int(self.tokens))

    def consume(self, n: int) -> bool:
        """Take ``n`` tokens (possibly going into debt); True if the bucket is still not in
        debt afterwards."""
        self._refill()
        self._tokens -= n
        return self._tokens >= 0

    def delay_s(self) -> float:
        """Seconds until the bucket is out of debt (0 if it is not in debt)."""
        tokens = self.tokens
        if tokens >= 0:
            return 0.0
        return -tokens * self.period_ms / self.rate / 1000.0


class RateLimiter:
    """Messages and bytes per period; a dimension with rate <= 0 is unlimited."""

    __slots__ = ("bytes_", "msgs", "rate")

    def __init__(self, rate: Rate, clock: Clock) -> None:
        self.rate = rate
        self.msgs = TokenBucket(rate.msgs, rate.period_s, clock) if rate.msgs > 0 else None
        self.bytes_ = TokenBucket(rate.bytes_, rate.period_s, clock) if rate.bytes_ > 0 else None

    def __repr__(self) -> str:
        return f"<RateLimiter {self.msgs!r} {self.bytes_!r}>"

    def consume(self, msgs: int, size: int) -> bool:
        ok = True
        if self.msgs is not None:
            ok = self.msgs.consume(msgs) and ok
        if self.bytes_ is not None:
            ok = self.bytes_.consume(size) and ok
        return ok

    def available_msgs(self) -> int | None:
        """Messages that may be dispatched now (None: unlimited by messages)."""
        if self.bytes_ is not None and self.bytes_.tokens <= 0:
            return 0
        return self.msgs.available() if self.msgs is not None else None

    def delay_s(self) -> float:
        return max(
            self.msgs.delay_s() if self.msgs is not None else 0.0,
            self.bytes_.delay_s() if self.bytes_ is not None else 0.0,
        )

    def refill_delay_s(self) -> float:
        """Seconds until at least one message may be dispatched again."""
        delay = self.delay_s()
        if self.msgs is not None and self.msgs.tokens < 1:
            delay = max(delay, (1 - self.msgs.tokens) * self.msgs.period_ms / self.msgs.rate / 1000)
        return delay


__all__ = ["RateLimiter", "TokenBucket"]
