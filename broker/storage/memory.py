"""The in-memory implementation of the storage contract (``contract.py``).

Owns: ``MemoryStorageFactory``, ``MemoryLedger``, ``MemoryCursor``: the reference
implementation for unit and fast integration tiers (one ledger id per managed ledger, every
entry kept, nothing durable).
Must not know: the wire protocol, consumers, dispatch.
"""

from __future__ import annotations

import asyncio
import bisect
import itertools
from collections.abc import Callable, Iterable

from magnetar.broker.ledger.errors import ManagedLedgerTerminated
from magnetar.broker.ledger.offloading import OffloadStatistics
from magnetar.broker.ledger.position import Position
from magnetar.broker.offload import EffectiveOffloadPolicies
from magnetar.broker.storage.contract import (
    AddedCallback,
    Entry,
    IndexHome,
    OffloadWorkerStatistics,
    StorageFailures,
    StorageMemory,
)

_ledger_ids = itertools.count(1)


def next_ledger_id() -> int:
    """A ledger id unique in this process, for ledgers that live in memory only (memory
    storage, non-persistent topics' message ids)."""
    return next(_ledger_ids)


def _bits_clear(words: list[int]) -> bool:
    return all(w == 0 for w in words)


class MemoryCursor:
    """A cursor over a ``MemoryLedger``; durable ones survive ``MemoryLedger`` reopen."""

    def __init__(self, ledger: MemoryLedger, name: str, durable: bool, mark: Position) -> None:
        self._ledger = ledger
        self.name = name
        self.durable = durable
        self._mark = mark
        self._acked: list[Position] = []  # sorted, all > mark
        self._batch_acks: dict[Position, list[int]] = {}
        self._redeliveries: dict[Position, int] = {}
        self._read = ledger.next_of(mark)

    def __repr__(self) -> str:
        return f"<MemoryCursor {self.name} mark={self._mark} read={self._read}>"

    @property
    def mark_delete_position(self) -> Position:
        return self._mark

    @property
    def read_position(self) -> Position:
        return self._read

    def is_acked(self, position: Position) -> bool:
        if position <= self._mark:
            return True
        i = bisect.bisect_left(self._acked, position)
        return i < len(self._acked) and self._acked[i] == position

    def batch_ack_set(self, position: Position) -> list[int] | None:
        return self._batch_acks.get(position)

    async def read_entries(self, max_entries: int) -> list[Entry]:
        out: list[Entry] = []
        if self._read <= self._mark:
            self._read = self._ledger.next_of(self._mark)
        while len(out) < max_entries:
            batch = self._ledger.read_sync(self._read, max(max_entries - len(out), 16))
            if not batch:
                break
            for entry in batch:
                self._read = self._ledger.next_of(entry.position)
                if not self.is_acked(entry.position):
                    out.append(entry)
                    if len(out) >= max_entries:
                        break
        return out

    async def read_positions(self, positions: list[Position]) -> list[Entry]:
        out = []
        for pos in positions:
            entry = self._ledger.get(pos)
            if entry is not None and not self.is_acked(pos):
                out.append(entry)
        return out

    async def ack(self, positions: Iterable[Position]) -> None:
        for pos in positions:
            if pos <= self._mark:
                continue
            self._batch_acks.pop(pos, None)
            self._redeliveries.pop(pos, None)
            i = bisect.bisect_left(self._acked, pos)
            if i < len(self._acked) and self._acked[i] == pos:
                continue
            self._acked.insert(i, pos)
        self._advance_mark()

    def redelivery_count(self, position: Position) -> int:
        return self._redeliveries.get(position, 0)

    async def increment_redelivery(self, position: Position) -> int:
        if self.is_acked(position):
            return 0
        count = self._redeliveries.get(position, 0) + 1
        self._redeliveries[position] = count
        return count

    async def ack_batch_index(self, position: Position, ack_set: list[int], size: int) -> bool:
        if self.is_acked(position):
            return True
        if _bits_clear(ack_set):
            await self.ack([position])
            return True
        current = self._batch_acks.get(position)
        if current is None:
            self._batch_acks[position] = list(ack_set)
        else:
            n = max(len(current), len(ack_set))
            cur = current + [-1] * (n - len(current))
            new = list(ack_set) + [-1] * (n - len(ack_set))
            merged = [a & b for a, b in zip(cur, new, strict=True)]
            if _bits_clear(merged):
                await self.ack([position])
                return True
            self._batch_acks[position] = merged
        return False

    async def ack_cumulative(self, position: Position) -> None:
        if position <= self._mark:
            return
        self._mark = position
        i = bisect.bisect_right(self._acked, position)
        del self._acked[:i]
        for pos in [p for p in self._batch_acks if p <= position]:
            del self._batch_acks[pos]
        self._advance_mark()

    def _advance_mark(self) -> None:
        n = 0
        mark = self._mark
        acked = self._acked
        while n < len(acked) and acked[n] == self._ledger.next_of(mark):
            mark = acked[n]
            n += 1
        if n:
            del acked[:n]
            self._mark = mark
        if self._read <= self._mark:
            self._read = self._ledger.next_of(self._mark)

    def rewind(self) -> None:
        self._read = self._ledger.next_of(self._mark)

    def seek(self, position: Position) -> None:
        self._read = position

    async def reset(self, position: Position) -> None:
        self._acked.clear()
        self._batch_acks.clear()
        self._mark = self._ledger.previous_of(position)
        self._read = self._ledger.next_of(self._mark)

    def backlog(self) -> int:
        last = self._ledger.last_confirmed
        if last is None or last <= self._mark:
            return 0
        return max(0, last.entry_id - self._mark.entry_id - len(self._acked))

    def backlog_size(self) -> int:
        total = 0
        for entry in self._ledger.read_sync(self._ledger.next_of(self._mark), 2**62):
            if not self.is_acked(entry.position):
                total += len(entry.data)
        return total


class MemoryLedger:
    """One ledger id per managed ledger; entry ids are list indexes."""

    def __init__(self, name: str, ledger_id: int) -> None:
        self.name = name
        self.ledger_id = ledger_id
        self._entries: list[Entry] = []
        self._size = 0
        self._listeners: list[Callable[[], None]] = []
        self.cursors: dict[str, MemoryCursor] = {}
        self.closed = False
        self._terminated = False
        self.properties: dict[str, str] = {}

    def __repr__(self) -> str:
        return f"<MemoryLedger {self.name} entries={len(self._entries)}>"

    async def set_property(self, key: str, value: str) -> None:
        self.properties[key] = value

    # positions
    def next_of(self, pos: Position) -> Position:
        if pos.ledger_id < self.ledger_id:
            return Position(self.ledger_id, 0)
        if pos.ledger_id > self.ledger_id:
            return Position(self.ledger_id, len(self._entries))
        return Position(self.ledger_id, pos.entry_id + 1)

    def previous_of(self, pos: Position) -> Position:
        if pos.ledger_id < self.ledger_id:
            return Position(self.ledger_id, -1)
        if pos.ledger_id > self.ledger_id:
            return Position(self.ledger_id, len(self._entries) - 1)
        return Position(self.ledger_id, min(pos.entry_id, len(self._entries)) - 1)

    @property
    def last_confirmed(self) -> Position | None:
        if not self._entries:
            return None
        return self._entries[-1].position

    @property
    def first_position(self) -> Position | None:
        return self._entries[0].position if self._entries else None

    @property
    def num_entries(self) -> int:
        return len(self._entries)

    @property
    def total_size(self) -> int:
        return self._size

    async def add_entries(self, datas: list[bytes]) -> list[Position]:
        positions = self._append(datas)
        self._notify_tail()
        return positions

    def add_entries_then(self, datas: list[bytes], then: AddedCallback) -> None:
        """Stored at once; reported on the next loop turn, as a real append would be."""
        positions = self._append(datas)

        def report() -> None:
            self._notify_tail()
            then(positions, None)

        asyncio.get_running_loop().call_soon(report)

    def _append(self, datas: list[bytes]) -> list[Position]:
        if self._terminated:
            raise ManagedLedgerTerminated(f"{self.name} is terminated")
        out = []
        for data in datas:
            pos = Position(self.ledger_id, len(self._entries))
            self._entries.append(Entry(pos, bytes(data)))
            self._size += len(data)
            out.append(pos)
        return out

    def _notify_tail(self) -> None:
        for listener in list(self._listeners):
            listener()

    def get(self, pos: Position) -> Entry | None:
        if pos.ledger_id != self.ledger_id or not 0 <= pos.entry_id < len(self._entries):
            return None
        return self._entries[pos.entry_id]

    def read_sync(self, start: Position, max_entries: int) -> list[Entry]:
        if start.ledger_id < self.ledger_id:
            i = 0
        elif start.ledger_id > self.ledger_id:
            return []
        else:
            i = max(0, start.entry_id)
        return self._entries[i : i + max(1, max_entries)]

    async def read_entries(self, start: Position, max_entries: int) -> list[Entry]:
        return self.read_sync(start, max_entries)

    def ledger_sizes(self) -> list[tuple[int, int, int]]:
        return [(self.ledger_id, len(self._entries), self._size)]

    async def find_by_publish_time(
        self, publish_time_ms: int, publish_time_of: Callable[[bytes], int]
    ) -> Position | None:
        i = bisect.bisect_left(
            self._entries, publish_time_ms, key=lambda e: publish_time_of(e.data)
        )
        return self._entries[i].position if i < len(self._entries) else None

    @property
    def terminated(self) -> bool:
        return self._terminated

    async def terminate(self) -> Position:
        self._terminated = True
        return self.last_confirmed or Position(self.ledger_id, -1)

    async def truncate(self) -> list[int]:
        return []  # one ledger, the current one: nothing before it

    def set_retention(self, time_ms: int, size_bytes: int) -> None:
        """Memory storage keeps every entry (it serves tests and nothing else)."""

    def trim_soon(self) -> None:
        """Memory storage keeps every entry (it serves tests and nothing else)."""

    def set_offload_policies(self, policies: EffectiveOffloadPolicies | None) -> None:
        """Memory storage offloads nothing (it serves tests and nothing else)."""

    def offload_statistics(self) -> OffloadStatistics | None:
        return None

    @property
    def index_home(self) -> IndexHome | None:
        return None

    def add_tail_listener(self, listener: Callable[[], None]) -> None:
        self._listeners.append(listener)

    def remove_tail_listener(self, listener: Callable[[], None]) -> None:
        if listener in self._listeners:
            self._listeners.remove(listener)

    async def open_cursor(self, name: str, *, initial_earliest: bool) -> MemoryCursor:
        cursor = self.cursors.get(name)
        if cursor is None:
            if initial_earliest:
                mark = Position(self.ledger_id, -1)
            else:
                mark = Position(self.ledger_id, len(self._entries) - 1)
            cursor = MemoryCursor(self, name, True, mark)
            self.cursors[name] = cursor
        cursor.rewind()
        return cursor

    def new_non_durable_cursor(self, name: str, start: Position) -> MemoryCursor:
        if start.ledger_id < 0:  # earliest
            mark = Position(self.ledger_id, -1)
        elif start.ledger_id >= 2**63 - 1:  # latest
            mark = Position(self.ledger_id, len(self._entries) - 1)
        else:
            mark = self.previous_of(start)
        return MemoryCursor(self, name, False, mark)

    async def delete_cursor(self, name: str) -> None:
        self.cursors.pop(name, None)

    def cursor_names(self) -> list[str]:
        return sorted(self.cursors)

    async def close(self) -> None:
        self.closed = True
        self._listeners.clear()


class MemoryStorageFactory:
    """Keeps ledgers across topic close/reopen, like a managed-ledger factory over bookies."""

    def __init__(self) -> None:
        self._ledgers: dict[str, MemoryLedger] = {}

    async def open(self, name: str, *, keep_all: bool = False) -> MemoryLedger:
        ledger = self._ledgers.get(name)
        if ledger is None:
            ledger = MemoryLedger(name, next_ledger_id())
            self._ledgers[name] = ledger
        ledger.closed = False
        return ledger

    async def exists(self, name: str) -> bool:
        return name in self._ledgers

    async def delete(self, name: str) -> None:
        self._ledgers.pop(name, None)

    async def list(self, prefix: str) -> list[str]:
        return sorted(n for n in self._ledgers if n.startswith(prefix))

    async def close(self) -> None:
        """Nothing held outside this process."""

    def failure_statistics(self) -> StorageFailures:
        """No bookies: nothing to ride through."""
        return StorageFailures(0, 0)

    def memory_statistics(self) -> StorageMemory:
        """No cache and no read-ahead: everything is in the ledgers' lists."""
        return StorageMemory(0, 0, 0, 0, 0)

    def offload_worker_statistics(self) -> OffloadWorkerStatistics:
        """No ledgers to offload."""
        return OffloadWorkerStatistics(False, 0, 0, 0)


__all__ = ["MemoryCursor", "MemoryLedger", "MemoryStorageFactory", "next_ledger_id"]
