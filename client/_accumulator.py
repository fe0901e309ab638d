"""The producer's batch accumulator (pure): messages in, batches out. No I/O, no timers.

Owns: grouping messages into batches bounded by ``max_messages`` and ``max_bytes`` (payload
bytes), either one batch at a time (``BatchingType.Default``) or one open batch per key
(``BatchingType.KeyBased``, needed for Key_Shared consumers: a batch carries the first
message's key). The sender (``_producer``) turns each batch into one SEND; the batching delay
timer lives there too (aiokafka's accumulator/sender split).

Invariants: a returned batch is never empty; no batch exceeds ``max_messages``; a batch exceeds
``max_bytes`` only when it holds one message; messages leave in the order they arrived (per key
in key-based mode); ``len(self)`` equals the number of messages held.

Must not know: sequence ids, compression, connections.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

T = TypeVar("T")


@dataclass(slots=True)
class Batch(Generic[T]):
    key: Hashable
    items: list[T] = field(default_factory=list)
    size_bytes: int = 0


@dataclass(frozen=True, slots=True)
class AccumulatorStatistics:
    messages: int
    bytes: int
    open_batches: int
    batches_emitted: int


class BatchAccumulator(Generic[T]):
    def __init__(self, max_messages: int, max_bytes: int, *, key_based: bool = False) -> None:
        if max_messages <= 0 or max_bytes <= 0:
            raise ValueError("max_messages and max_bytes must be > 0")
        self.max_messages = max_messages
        self.max_bytes = max_bytes
        self.key_based = key_based
        self._open: dict[Hashable, Batch[T]] = {}
        self._messages = 0
        self._bytes = 0
        self._emitted = 0

    def __len__(self) -> int:
        return self._messages

    @property
    def size_bytes(self) -> int:
        return self._bytes

    def add(self, item: T, size_bytes: int, key: Hashable = None) -> list[Batch[T]]:
        """Add one message; returns the batches that are complete because of it."""
        k = key if self.key_based else None
        out: list[Batch[T]] = []
        batch = self._open.get(k)
        if batch is not None and batch.items and batch.size_bytes + size_bytes > self.max_bytes:
            out.append(self._take(k))
            batch = None
        if batch is None:
            batch = self._open[k] = Batch(k)
        batch.items.append(item)
        batch.size_bytes += size_bytes
        self._messages += 1
        self._bytes += size_bytes
        if self.key_based:
            if self._messages >= self.max_messages or self._bytes >= self.max_bytes:
                out.extend(self.drain())
        elif len(batch.items) >= self.max_messages or batch.size_bytes >= self.max_bytes:
            out.append(self._take(k))
        return out

    def _take(self, key: Hashable) -> Batch[T]:
        batch = self._open.pop(key)
        self._messages -= len(batch.items)
        self._bytes -= batch.size_bytes
        self._emitted += 1
        return batch

    def drain(self) -> list[Batch[T]]:
        """Every open batch (in key insertion order); the accumulator is empty afterwards."""
        return [self._take(k) for k in list(self._open)]

    def statistics(self) -> AccumulatorStatistics:
        return AccumulatorStatistics(self._messages, self._bytes, len(self._open), self._emitted)

    def check_invariants(self) -> None:
        n = sum(len(b.items) for b in self._open.values())
        size = sum(b.size_bytes for b in self._open.values())
        assert n == self._messages, (n, self._messages)
        assert size == self._bytes, (size, self._bytes)
        for b in self._open.values():
            assert b.items
            assert len(b.items) < self.max_messages or self.key_based

    def __repr__(self) -> str:
        s: Any = self.statistics()
        return f"<BatchAccumulator {s}>"


__all__ = ["AccumulatorStatistics", "Batch", "BatchAccumulator"]
