"""Exponential backoff with jitter (reconnection, retried lookups), pure.

Owns: ``Backoff``: ``next_ms()`` doubles from ``initial_ms`` up to ``max_ms``, with up to 10 %
jitter taken from an injected ``random.Random``; ``reset()`` after a success. Mirrors the C++
client's ``Backoff`` (100 ms initial, 60 s max). Invariant: ``0 < next_ms() <= max_ms``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field


@dataclass(slots=True)
class Backoff:
    initial_ms: float = 100.0
    max_ms: float = 60_000.0
    rng: random.Random = field(default_factory=random.Random)
    _next_ms: float = field(init=False, default=0.0)

    def __post_init__(self) -> None:
        if not 0 < self.initial_ms <= self.max_ms:
            raise ValueError("need 0 < initial_ms <= max_ms")
        self._next_ms = self.initial_ms

    def next_ms(self) -> float:
        current = self._next_ms
        self._next_ms = min(self._next_ms * 2, self.max_ms)
        jitter = current * 0.1 * self.rng.random()
        return max(1.0, min(current - jitter, self.max_ms))

    def reset(self) -> None:
        self._next_ms = self.initial_ms


__all__ = ["Backoff"]
