"""Retries with exponential back-off and jitter, on an injected clock and random source.

Owns: ``RetryPolicy`` (first and largest back-off, a deadline) and ``with_retries``, which
repeats an operation while it fails with a retriable ``OffloadError`` and the deadline allows
another wait; then the last error is raised. Non-retriable errors are raised at once.
Must not know: what is retried.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from magnetar.broker.offload.errors import OffloadError
from magnetar.clock import Clock

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    initial_backoff_ms: int = 100
    max_backoff_ms: int = 5_000
    deadline_ms: int = 120_000
    """How long a reader waits for an unavailable store before the read fails (retriable)."""

    def __post_init__(self) -> None:
        if not 0 < self.initial_backoff_ms <= self.max_backoff_ms or self.deadline_ms < 0:
            raise ValueError(f"bad retry policy {self}")


async def with_retries(
    op: Callable[[], Awaitable[T]],
    policy: RetryPolicy,
    clock: Clock,
    rng: random.Random,
    on_retry: Callable[[OffloadError], None] | None = None,
) -> T:
    start = clock.monotonic_ms()
    backoff = float(policy.initial_backoff_ms)
    while True:
        try:
            return await op()
        except OffloadError as exc:
            if not exc.retriable:
                raise
            wait_ms = rng.uniform(backoff / 2, backoff)
            if clock.monotonic_ms() + wait_ms - start > policy.deadline_ms:
                raise
            if on_retry is not None:
                on_retry(exc)
            await clock.sleep(wait_ms / 1000.0)
            backoff = min(backoff * 2, float(policy.max_backoff_ms))


__all__ = ["RetryPolicy", "with_retries"]
