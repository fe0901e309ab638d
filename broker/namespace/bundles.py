"""Namespace bundles: hash ranges of a namespace's 32-bit topic-hash space.

Owns: bundle ranges and their names (``0x00000000_0x40000000``, as Pulsar), mapping a topic
name to its bundle (Murmur3_32 of the full topic name, ARCHITECTURE §7), and splitting a
bundle at the midpoint. Pure: no I/O; the boundaries are persisted in the namespace policies
by ``resources.py``.

Invariants: boundaries are strictly increasing, start at 0 and end at 0xFFFFFFFF; ranges are
closed-open except the last, which includes 0xFFFFFFFF.
"""

from __future__ import annotations

import bisect
import itertools
from dataclasses import dataclass

import mmh3

FULL_LOWER = 0x00000000
FULL_UPPER = 0xFFFFFFFF
DEFAULT_NUM_BUNDLES = 4


def topic_hash(topic: str) -> int:
    """The unsigned 32-bit Murmur3 hash placing a topic in its namespace's bundles."""
    return mmh3.hash(topic.encode(), signed=False)


@dataclass(frozen=True, slots=True, order=True)
class BundleRange:
    lower: int
    upper: int

    @property
    def name(self) -> str:
        return f"0x{self.lower:08x}_0x{self.upper:08x}"

    @classmethod
    def parse(cls, name: str) -> BundleRange:
        try:
            lo, hi = name.split("_")
            lower, upper = int(lo, 16), int(hi, 16)
        except ValueError:
            raise ValueError(f"invalid bundle range {name!r}") from None
        if not (FULL_LOWER <= lower < upper <= FULL_UPPER):
            raise ValueError(f"invalid bundle range {name!r}")
        return cls(lower, upper)

    def contains(self, hash_value: int) -> bool:
        if self.upper == FULL_UPPER:
            return self.lower <= hash_value <= self.upper
        return self.lower <= hash_value < self.upper

    def __str__(self) -> str:
        return self.name


def default_boundaries(num_bundles: int = DEFAULT_NUM_BUNDLES) -> list[int]:
    if num_bundles < 1:
        raise ValueError("a namespace has at least one bundle")
    step = (FULL_UPPER + 1) // num_bundles
    bounds = [i * step for i in range(num_bundles)]
    return [*bounds, FULL_UPPER]


@dataclass(frozen=True, slots=True)
class NamespaceBundles:
    boundaries: tuple[int, ...]

    def __post_init__(self) -> None:
        b = self.boundaries
        if len(b) < 2 or b[0] != FULL_LOWER or b[-1] != FULL_UPPER:
            raise ValueError("bundle boundaries must start at 0x0 and end at 0xffffffff")
        if any(x >= y for x, y in itertools.pairwise(b)):
            raise ValueError("bundle boundaries must be strictly increasing")

    @classmethod
    def default(cls, num_bundles: int = DEFAULT_NUM_BUNDLES) -> NamespaceBundles:
        return cls(tuple(default_boundaries(num_bundles)))

    @property
    def ranges(self) -> list[BundleRange]:
        b = self.boundaries
        return [BundleRange(b[i], b[i + 1]) for i in range(len(b) - 1)]

    def find(self, topic: str) -> BundleRange:
        """The bundle holding ``topic`` (the full topic name, e.g. ``persistent://t/ns/x``)."""
        h = topic_hash(topic)
        i = bisect.bisect_right(self.boundaries, h) - 1
        i = min(i, len(self.boundaries) - 2)
        return BundleRange(self.boundaries[i], self.boundaries[i + 1])

    def split(self, bundle: BundleRange) -> NamespaceBundles:
        """Split ``bundle`` at its midpoint (Pulsar's ``range_equally_divide``)."""
        if bundle not in self.ranges:
            raise ValueError(f"bundle {bundle} is not one of this namespace's bundles")
        if bundle.upper - bundle.lower <= 1:
            raise ValueError(f"bundle {bundle} is too small to split")
        mid = bundle.lower + (bundle.upper - bundle.lower) // 2
        return NamespaceBundles(tuple(sorted({*self.boundaries, mid})))


__all__ = [
    "DEFAULT_NUM_BUNDLES",
    "BundleRange",
    "NamespaceBundles",
    "default_boundaries",
    "topic_hash",
]
