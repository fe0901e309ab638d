"""The consumer's acknowledgement-side state machines, pure (time passed in as ``now_ms``).

Owns:
- ``AckGroupingTracker``: individual acks grouped until the next flush (every
  ``ack_group_time_ms``, default 100, or when ``max_pending`` ids wait), one pending cumulative
  ack, optional batch-index ack sets; and the duplicate filter (an entry acked recently is
  dropped if the broker sends it again).
- ``BatchAckTracker``: which indexes of each received batch entry the application has not
  acknowledged yet; the entry is acked on the wire only when all are (reference §3.10).
- ``NegativeAckTracker``: entry -> redelivery deadline; ``due(now)`` pops the expired ones.
- ``UnackedMessageTracker``: entry -> ack-timeout deadline for delivered, unacked messages.

Entries are ``(ledger_id, entry_id)`` tuples. Every structure has a size bound and
``check_invariants()``.

Must not know: connections, consumers, clocks.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass

Entry = tuple[int, int]


@dataclass(frozen=True, slots=True)
class AckFlush:
    individual: list[Entry]
    batch_index: dict[Entry, list[int]]  # entry -> ack_set words (bit set = still unacked)
    cumulative: Entry | None


class AckGroupingTracker:
    def __init__(self, *, max_pending: int = 1000, recent_max: int = 10_000) -> None:
        self.max_pending = max_pending
        self._individual: dict[Entry, None] = {}
        self._batch_sets: dict[Entry, list[int]] = {}
        self._cumulative: Entry | None = None
        self._last_cumulative: Entry = (-1, -1)
        self._recent: collections.OrderedDict[Entry, None] = collections.OrderedDict()
        self._recent_max = recent_max

    def __len__(self) -> int:
        return len(self._individual) + len(self._batch_sets) + (self._cumulative is not None)

    def add_individual(self, entry: Entry) -> bool:
        """Queue an entry-level ack; True when the tracker should be flushed now."""
        self._batch_sets.pop(entry, None)
        self._individual[entry] = None
        self._remember(entry)
        return len(self) >= self.max_pending

    def add_batch_index(self, entry: Entry, ack_set: list[int]) -> bool:
        if entry not in self._individual:
            self._batch_sets[entry] = ack_set
        return len(self) >= self.max_pending

    def add_cumulative(self, entry: Entry) -> None:
        if self._cumulative is None or entry > self._cumulative:
            self._cumulative = entry
        self._last_cumulative = max(self._last_cumulative, entry)

    def _remember(self, entry: Entry) -> None:
        self._recent[entry] = None
        if len(self._recent) > self._recent_max:
            self._recent.popitem(last=False)

    def is_duplicate(self, entry: Entry) -> bool:
        """An entry we already acked (individually, or at/below the last cumulative ack)."""
        return entry <= self._last_cumulative or entry in self._recent

    def flush(self) -> AckFlush:
        out = AckFlush(list(self._individual), dict(self._batch_sets), self._cumulative)
        self._individual.clear()
        self._batch_sets.clear()
        self._cumulative = None
        return out

    def check_invariants(self) -> None:
        assert not (set(self._individual) & set(self._batch_sets))
        assert len(self._recent) <= self._recent_max


def ack_set_words(unacked: set[int], batch_size: int) -> list[int]:
    """Java ``BitSet.toLongArray`` of the still-unacked indexes, as signed int64 words."""
    words = [0] * ((batch_size + 63) // 64)
    for i in unacked:
        words[i // 64] |= 1 << (i % 64)
    return [w - (1 << 64) if w >= 1 << 63 else w for w in words]


def unacked_from_ack_set(words: list[int], batch_size: int) -> set[int]:
    out = set()
    for i in range(batch_size):
        w = words[i // 64] if i // 64 < len(words) else 0
        if (w >> (i % 64)) & 1:
            out.add(i)
    return out


class BatchAckTracker:
    """Remaining (unacked) indexes of batch entries in flight to the application."""

    def __init__(self, max_entries: int = 100_000) -> None:
        self._remaining: dict[Entry, set[int]] = {}
        self._sizes: dict[Entry, int] = {}
        self.max_entries = max_entries

    def __len__(self) -> int:
        return len(self._remaining)

    def received(self, entry: Entry, batch_size: int, delivered: set[int]) -> None:
        """A batch entry arrived; ``delivered`` are the indexes handed to the application."""
        if entry in self._remaining:
            self._remaining[entry] |= delivered
        else:
            if len(self._remaining) >= self.max_entries:
                oldest = next(iter(self._remaining))
                self._remaining.pop(oldest)
                self._sizes.pop(oldest, None)
            self._remaining[entry] = set(delivered)
            self._sizes[entry] = batch_size

    def ack(self, entry: Entry, index: int) -> bool:
        """Ack one index; True when the whole entry is now acked (or unknown)."""
        remaining = self._remaining.get(entry)
        if remaining is None:
            return True
        remaining.discard(index)
        if not remaining:
            del self._remaining[entry]
            self._sizes.pop(entry, None)
            return True
        return False

    def known(self, entry: Entry) -> bool:
        return entry in self._remaining

    def remaining(self, entry: Entry) -> set[int]:
        return set(self._remaining.get(entry, ()))

    def size_of(self, entry: Entry) -> int:
        return self._sizes.get(entry, 0)

    def forget_upto(self, entry: Entry) -> None:
        for e in [e for e in self._remaining if e <= entry]:
            del self._remaining[e]
            self._sizes.pop(e, None)

    def forget(self, entry: Entry) -> None:
        self._remaining.pop(entry, None)
        self._sizes.pop(entry, None)

    def check_invariants(self) -> None:
        assert set(self._remaining) == set(self._sizes)
        assert all(self._remaining.values())


class NegativeAckTracker:
    def __init__(self, max_entries: int = 100_000) -> None:
        self._deadlines: dict[Entry, float] = {}
        self.max_entries = max_entries

    def __len__(self) -> int:
        return len(self._deadlines)

    def add(self, entry: Entry, now_ms: float, delay_ms: float) -> None:
        if entry not in self._deadlines and len(self._deadlines) >= self.max_entries:
            raise OverflowError("too many negatively acknowledged messages pending")
        self._deadlines[entry] = now_ms + delay_ms

    def remove(self, entry: Entry) -> None:
        self._deadlines.pop(entry, None)

    def due(self, now_ms: float) -> list[Entry]:
        out = [e for e, t in self._deadlines.items() if t <= now_ms]
        for e in out:
            del self._deadlines[e]
        return sorted(out)

    def next_deadline(self) -> float | None:
        return min(self._deadlines.values(), default=None)

    def clear(self) -> None:
        self._deadlines.clear()

    def check_invariants(self) -> None:
        assert len(self._deadlines) <= self.max_entries


class UnackedMessageTracker:
    def __init__(self, timeout_ms: int, max_entries: int = 1_000_000) -> None:
        self.timeout_ms = timeout_ms
        self._deadlines: dict[Entry, float] = {}
        self.max_entries = max_entries

    def __len__(self) -> int:
        return len(self._deadlines)

    def add(self, entry: Entry, now_ms: float) -> None:
        if len(self._deadlines) < self.max_entries or entry in self._deadlines:
            self._deadlines.setdefault(entry, now_ms + self.timeout_ms)

    def remove(self, entry: Entry) -> None:
        self._deadlines.pop(entry, None)

    def remove_upto(self, entry: Entry) -> None:
        for e in [e for e in self._deadlines if e <= entry]:
            del self._deadlines[e]

    def expired(self, now_ms: float) -> list[Entry]:
        out = [e for e, t in self._deadlines.items() if t <= now_ms]
        for e in out:
            del self._deadlines[e]
        return sorted(out)

    def clear(self) -> None:
        self._deadlines.clear()

    def check_invariants(self) -> None:
        assert len(self._deadlines) <= self.max_entries


__all__ = [
    "AckFlush",
    "AckGroupingTracker",
    "BatchAckTracker",
    "Entry",
    "NegativeAckTracker",
    "UnackedMessageTracker",
    "ack_set_words",
    "unacked_from_ack_set",
]
