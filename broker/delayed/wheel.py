"""The near wheel: delayed entries due within the horizon, in compact arrays.

Owns: ``NearWheel`` — records ``(deliver_at_ms, ledger_id, entry_id)`` bucketed by
``deliver_at_ms // slot_ms``; each slot is one flat ``array('q')`` (24 bytes a record), a
heap orders the slot keys. The slot being drained is sorted once into a list and popped
from the front (later inserts into it keep it sorted).
Invariant: ``pop_due`` returns records in (deliver_at, ledger, entry) order, none with
``deliver_at > now``. Must not know: storage, clocks, positions' meaning.
"""

from __future__ import annotations

import bisect
import heapq
from array import array

Record = tuple[int, int, int]


class NearWheel:
    __slots__ = ("_ci", "_count", "_cur", "_cur_key", "_keys", "_slots", "slot_ms")

    def __init__(self, slot_ms: int = 100) -> None:
        self.slot_ms = max(1, slot_ms)
        self._slots: dict[int, array[int]] = {}
        self._keys: list[int] = []  # heap of slot keys present in _slots
        self._cur_key: int | None = None  # the slot being drained (sorted into _cur)
        self._cur: list[Record] = []
        self._ci = 0  # _cur[:_ci] already popped
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def add(self, at_ms: int, ledger_id: int, entry_id: int) -> None:
        key = at_ms // self.slot_ms
        if self._cur_key is not None and key <= self._cur_key:
            bisect.insort(self._cur, (at_ms, ledger_id, entry_id), lo=self._ci)
        else:
            arr = self._slots.get(key)
            if arr is None:
                arr = self._slots[key] = array("q")
                heapq.heappush(self._keys, key)
            arr.append(at_ms)
            arr.append(ledger_id)
            arr.append(entry_id)
        self._count += 1

    def _open_next(self) -> bool:
        """Make the earliest slot the current one; False when the wheel is empty."""
        if self._ci < len(self._cur):
            return True
        self._cur, self._ci, self._cur_key = [], 0, None
        if not self._keys:
            return False
        key = heapq.heappop(self._keys)
        arr = self._slots.pop(key)
        recs = [(arr[i], arr[i + 1], arr[i + 2]) for i in range(0, len(arr), 3)]
        recs.sort()
        self._cur, self._cur_key = recs, key
        return True

    def peek_at_ms(self) -> int | None:
        """The earliest due time held, or None."""
        if not self._open_next():
            return None
        return self._cur[self._ci][0]

    def pop_due(self, now_ms: int, max_n: int) -> list[Record]:
        out: list[Record] = []
        while len(out) < max_n and self._open_next():
            cur, i = self._cur, self._ci
            end = min(len(cur), i + max_n - len(out))
            j = i
            while j < end and cur[j][0] <= now_ms:
                j += 1
            out.extend(cur[i:j])
            self._ci = j
            if j < len(cur):
                break  # the next record is not due, or max_n is reached
        self._count -= len(out)
        if self._ci >= len(self._cur) and self._cur:
            self._cur, self._ci, self._cur_key = [], 0, None
        return out

    def nbytes(self) -> int:
        """Approximate memory held by the records (arrays + the sorted current slot)."""
        arrays = sum(a.buffer_info()[1] * a.itemsize + 64 for a in self._slots.values())
        return arrays + 8 * len(self._keys) + 100 * (len(self._cur) - self._ci)

    def clear(self) -> None:
        self._slots.clear()
        self._keys.clear()
        self._cur, self._ci, self._cur_key = [], 0, None
        self._count = 0


__all__ = ["NearWheel", "Record"]
