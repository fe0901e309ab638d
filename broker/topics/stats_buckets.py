"""Latency buckets as Pulsar exports them (``..._le_0_5``, ``..._le_1``, ... ``_le_overflow``).

Owns: ``StatsBuckets`` (cumulative counts per bucket, a count and a sum in milliseconds), and
``STORAGE_WRITE_LATENCY_BOUNDS_MS`` (Pulsar's bounds for ``pulsar_storage_write_latency``).
A bucket counts the values at or under its bound and over the previous one (not cumulative
across buckets, as Pulsar's). Recording is one bisect and three additions. Pure.
"""

from __future__ import annotations

import bisect

STORAGE_WRITE_LATENCY_BOUNDS_MS: tuple[float, ...] = (0.5, 1, 5, 10, 20, 50, 100, 200, 1000)


def bucket_suffix(bound: float | None) -> str:
    """``0_5`` for 0.5, ``10`` for 10, ``overflow`` for None (Pulsar's metric suffixes)."""
    if bound is None:
        return "overflow"
    text = f"{bound:g}"
    return text.replace(".", "_")


class StatsBuckets:
    __slots__ = ("bounds", "count", "counts", "sum_ms")

    def __init__(self, bounds: tuple[float, ...] = STORAGE_WRITE_LATENCY_BOUNDS_MS) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # the last one: over every bound
        self.count = 0
        self.sum_ms = 0.0

    def __repr__(self) -> str:
        return f"StatsBuckets(count={self.count}, sum_ms={self.sum_ms:.1f})"

    def add(self, value_ms: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value_ms)] += 1
        self.count += 1
        self.sum_ms += value_ms

    def items(self) -> list[tuple[str, int]]:
        """(suffix, count) per bucket: ``("0_5", n), ..., ("overflow", n)``."""
        bounds: list[float | None] = [*self.bounds, None]
        return [(bucket_suffix(b), c) for b, c in zip(bounds, self.counts, strict=True)]


__all__ = ["STORAGE_WRITE_LATENCY_BOUNDS_MS", "StatsBuckets", "bucket_suffix"]
