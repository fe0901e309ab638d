"""The topic storage contract (``contract.py``) over the real managed ledger.

Owns: ``ManagedLedgerStorage`` (a ``TopicStorageFactory`` over ``ManagedLedgerFactory``),
``ManagedLedgerAdapter`` (a ``TopicLedger`` over a ``ManagedLedger``; beyond the contract,
what the admin API shows and asks of tiered storage: each ledger's offload state and
record (``ledger_details``), a manual offload and its status) and
``ManagedCursorAdapter`` (a ``TopicCursor`` over a ``ManagedCursor``): thin translations —
positions and sentinels (EARLIEST / LATEST), batch-index ack sets between the wire format
(words of a bit set, 1 = not yet acknowledged) and the cursor's (batch size, acknowledged
mask), durable redelivery counts, tail notifications after each completed append.
``add_entries_then`` is the publish hot path: one managed-ledger add per entry and one
callback when the last is done (adds complete in order), instead of a task per batch.
Must not know: the wire protocol, dispatch.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Iterable
from typing import Any

from magnetar.broker.ledger.cursor import ManagedCursor
from magnetar.broker.ledger.managed_ledger import ManagedLedger, ManagedLedgerFactory
from magnetar.broker.ledger.offloading import OffloadProcessStatus, OffloadStatistics
from magnetar.broker.ledger.position import EARLIEST, LATEST, Position
from magnetar.broker.offload import EffectiveOffloadPolicies
from magnetar.broker.storage.contract import (
    Entry,
    OffloadWorkerStatistics,
    StorageFailures,
    StorageMemory,
    int_to_words,
    words_to_int,
)
from magnetar.zk import paths

_new_entry = tuple.__new__  # Entry(p, d) without the NamedTuple's Python-level __new__


class ManagedCursorAdapter:
    def __init__(self, ledger: ManagedLedgerAdapter, cursor: ManagedCursor) -> None:
        self._tl = ledger
        self._ml = ledger.ml
        self.cursor = cursor
        self.name = cursor.name
        self.durable = cursor.durable

    def __repr__(self) -> str:
        return f"<ManagedCursorAdapter {self.cursor!r}>"

    @property
    def mark_delete_position(self) -> Position:
        return self.cursor.mark_delete_position

    @property
    def read_position(self) -> Position:
        return self.cursor.read_position

    def is_acked(self, position: Position) -> bool:
        return self.cursor.is_acknowledged(position)

    def batch_ack_set(self, position: Position) -> list[int] | None:
        got = self.cursor.batch_ack_set(position)
        if got is None:
            return None
        size, acked = got
        return int_to_words(((1 << size) - 1) & ~acked, size)

    def redelivery_count(self, position: Position) -> int:
        return self.cursor.redelivery_count(position)

    async def increment_redelivery(self, position: Position) -> int:
        return await self.cursor.increment_redelivery(position)

    async def read_entries(self, max_entries: int) -> list[Entry]:
        got = await self.cursor.read_entries(max_entries)
        return [_new_entry(Entry, e) for e in got]  # (position, payload) -> (position, data)

    async def read_positions(self, positions: list[Position]) -> list[Entry]:
        """The unacknowledged entries at ``positions``, in the order given; consecutive
        positions of one ledger are fetched with one range read (replays are often runs).
        A position past the last confirmed entry names no entry (a client's made-up ack) and
        is left out."""
        last = self._ml.last_confirmed
        wanted = [p for p in positions if p <= last and not self.cursor.is_acknowledged(p)]
        out: list[Entry] = []
        i = 0
        while i < len(wanted):
            first = wanted[i]
            j = i + 1
            while (
                j < len(wanted)
                and wanted[j].ledger_id == first.ledger_id
                and wanted[j].entry_id == wanted[j - 1].entry_id + 1
            ):
                j += 1
            last = wanted[j - 1]
            got = await self._ml.read_range(first.ledger_id, first.entry_id, last.entry_id)
            out.extend(Entry(e.position, e.payload) for e in got)
            i = j
        return out

    async def ack(self, positions: Iterable[Position]) -> None:
        await self.cursor.delete(positions)

    async def ack_batch_index(self, position: Position, ack_set: list[int], size: int) -> bool:
        if self.cursor.is_acknowledged(position):
            # nothing new, but the write holding it may still be in flight: the ack's
            # receipt (ACK_RESPONSE) must mean durable
            await self.cursor.flush()
            return True
        if size <= 0:
            return False
        # only the words that cover the batch count: an ack set longer than the entry's
        # real batch is cut, never expanded
        unacked = words_to_int(ack_set[: (size + 63) // 64])
        acked = ~unacked & ((1 << size) - 1)
        if not acked:
            return False
        return await self.cursor.delete_batch_mask(position, size, acked)

    async def ack_cumulative(self, position: Position) -> None:
        await self.cursor.mark_delete(position)

    def rewind(self) -> None:
        self.cursor.rewind()

    def seek(self, position: Position) -> None:
        self.cursor.seek(self._tl.concrete(position))

    async def reset(self, position: Position) -> None:
        await self.cursor.reset(self._tl.concrete(position))

    def backlog(self) -> int:
        return self.cursor.backlog().entries

    def backlog_size(self) -> int:
        return self.cursor.backlog().bytes


class ManagedLedgerAdapter:
    def __init__(self, ml: ManagedLedger) -> None:
        self.ml = ml
        self.name = ml.name
        self._listeners: list[Callable[[], None]] = []
        self._cursors: dict[str, ManagedCursorAdapter] = {}

    def __repr__(self) -> str:
        return f"<ManagedLedgerAdapter {self.ml!r}>"

    def concrete(self, position: Position) -> Position:
        ledgers = self.ml.ledgers
        if position == EARLIEST or position.ledger_id < 0:
            return ledgers.first_position
        if position == LATEST or position.ledger_id >= LATEST.ledger_id:
            return ledgers.position_after(ledgers.last_confirmed)
        return position

    @property
    def terminated(self) -> bool:
        return self.ml.is_terminated

    async def terminate(self) -> Position:
        """Pulsar's topic terminate (the flag persists in the managed ledger's metadata)."""
        return await self.ml.terminate()

    @property
    def properties(self) -> dict[str, str]:
        return self.ml.properties

    async def set_property(self, key: str, value: str) -> None:
        await self.ml.set_property(key, value)

    async def truncate(self) -> list[int]:
        """Pulsar's topic truncate: every ledger before the current one is deleted."""
        return await self.ml.truncate()

    @property
    def last_confirmed(self) -> Position | None:
        lc = self.ml.last_confirmed
        return None if lc.entry_id < 0 else lc

    @property
    def first_position(self) -> Position | None:
        return None if self.last_confirmed is None else self.ml.ledgers.first_position

    @property
    def num_entries(self) -> int:
        return sum(n for _, n, _ in self.ml.ledger_sizes())

    @property
    def total_size(self) -> int:
        return sum(b for _, _, b in self.ml.ledger_sizes())

    async def add_entries(self, datas: list[bytes]) -> list[Position]:
        if not datas:
            return []
        futures = self.ml.add_many_nowait(datas)
        # the managed ledger completes adds in order: once the last is done, all are
        try:
            await futures[-1]
            positions = [f.result() for f in futures]
        except BaseException:
            for f in futures:  # every outcome retrieved (no "never retrieved" warnings)
                if f.done() and not f.cancelled():
                    f.exception()
            raise
        for listener in list(self._listeners):
            listener()
        return positions

    def add_entries_then(
        self,
        datas: list[bytes],
        then: Callable[[list[Position] | None, BaseException | None], None],
    ) -> None:
        """``add_entries`` without a task or a future of its own: ``then(positions, None)``
        (after the tail listeners ran) or ``then(None, error)`` is called back once the
        last add is done. Raises at once if the ledger refuses an add."""
        futures = self.ml.add_many_nowait(datas)

        def done(_last: asyncio.Future[Position]) -> None:
            # the managed ledger completes adds in order: once the last is done, all are
            try:
                positions = [f.result() for f in futures]
            except BaseException as exc:
                for f in futures:  # every outcome retrieved (no "never retrieved" warnings)
                    if f.done() and not f.cancelled():
                        f.exception()
                then(None, exc)
                return
            for listener in list(self._listeners):
                listener()
            then(positions, None)

        futures[-1].add_done_callback(done)

    async def read_entries(self, start: Position, max_entries: int) -> list[Entry]:
        got, _ = await self.ml.reads.read_from(self.concrete(start), max_entries)
        return [_new_entry(Entry, e) for e in got]

    def add_tail_listener(self, listener: Callable[[], None]) -> None:
        self._listeners.append(listener)

    def remove_tail_listener(self, listener: Callable[[], None]) -> None:
        if listener in self._listeners:
            self._listeners.remove(listener)

    async def open_cursor(self, name: str, *, initial_earliest: bool) -> ManagedCursorAdapter:
        got = self._cursors.get(name)
        if got is not None:
            got.rewind()
            return got
        cursor = await self.ml.open_cursor(name, EARLIEST if initial_earliest else LATEST)
        wrapped = ManagedCursorAdapter(self, cursor)
        wrapped.rewind()
        self._cursors[name] = wrapped
        return wrapped

    def new_non_durable_cursor(self, name: str, start: Position) -> ManagedCursorAdapter:
        if start not in (EARLIEST, LATEST):
            start = self.ml.ledgers.next_valid_position(start)
        return ManagedCursorAdapter(self, self.ml.new_non_durable_cursor(start, name))

    async def delete_cursor(self, name: str) -> None:
        self._cursors.pop(name, None)
        await self.ml.delete_cursor(name)

    def cursor_names(self) -> list[str]:
        return sorted(self.ml.cursors)

    def ledger_sizes(self) -> list[tuple[int, int, int]]:
        return self.ml.ledger_sizes()

    async def find_by_publish_time(
        self, publish_time_ms: int, publish_time_of: Callable[[bytes], int]
    ) -> Position | None:
        return await self.ml.reads.find_by_publish_time(publish_time_ms, publish_time_of)

    def set_retention(self, time_ms: int, size_bytes: int) -> None:
        cfg = self.ml.config
        if (cfg.retention_time_ms, cfg.retention_size_bytes) != (time_ms, size_bytes):
            self.ml.config = dataclasses.replace(
                cfg, retention_time_ms=time_ms, retention_size_bytes=size_bytes
            )
            self.ml.trimming.trim_soon()

    def trim_soon(self) -> None:
        self.ml.trimming.trim_soon()

    # -- tiered storage ---------------------------------------------------------------------
    def set_offload_policies(self, policies: EffectiveOffloadPolicies | None) -> None:
        self.ml.offloading.set_policies(policies)

    def offload_statistics(self) -> OffloadStatistics | None:
        return self.ml.offloading.statistics()

    def trigger_offload(self, until: Position | None) -> None:
        """Offload every sealed ledger before ``until``'s ledger (None: every sealed
        ledger), in the background (``Offloading.trigger``: its errors say why not)."""
        if until is None:
            ids = self.ml.ledgers.ids
            until = Position(ids[-1], 0) if ids else Position(0, 0)
        self.ml.offloading.trigger(until)

    def offload_status(self) -> OffloadProcessStatus:
        return self.ml.offloading.status()

    def ledger_details(self) -> list[dict[str, Any]]:
        """Each ledger as Pulsar's internal stats show it (``ledgerId``, ``entries``,
        ``size``, ``timestamp``, ``offloaded``), with its offload context when it has one
        (``offloadContext``: the attempt, ``complete``, ``bookkeeperDeleted``, and the
        record a reader opens the objects with)."""
        ml = self.ml
        out: list[dict[str, Any]] = []
        for (ledger_id, entries, size), info in zip(
            ml.ledger_sizes(), ml.ledgers.ledgers, strict=True
        ):
            row: dict[str, Any] = {
                "ledgerId": ledger_id,
                "entries": entries,
                "size": size,
                "timestamp": info.timestamp_ms,
                "offloaded": info.offloaded,
                "underReplicated": False,
            }
            if info.offload is not None:
                row["offloadContext"] = info.offload.to_json()
            out.append(row)
        return out

    @property
    def index_home(self) -> ManagedLedger:
        return self.ml

    async def close(self) -> None:
        self._listeners.clear()
        await self.ml.close()


class ManagedLedgerStorage:
    """``TopicStorageFactory`` over a ``ManagedLedgerFactory``."""

    def __init__(self, factory: ManagedLedgerFactory) -> None:
        self.factory = factory

    async def open(self, name: str, *, keep_all: bool = False) -> ManagedLedgerAdapter:
        config = None
        if keep_all:  # no cursor holds it: infinite retention keeps every ledger
            config = dataclasses.replace(
                self.factory.config, retention_time_ms=-1, retention_size_bytes=-1
            )
        return ManagedLedgerAdapter(await self.factory.open(name, config))

    async def exists(self, name: str) -> bool:
        return await self.factory.store.exists(paths.managed_ledger(name)) is not None

    async def delete(self, name: str) -> None:
        await self.factory.delete(name)

    async def list(self, prefix: str) -> list[str]:
        parent = prefix.rstrip("/")
        children = await self.factory.store.children(paths.managed_ledger(parent))
        return sorted(f"{parent}/{c}" for c in children)

    async def close(self) -> None:
        await self.factory.close()

    def failure_statistics(self) -> StorageFailures:
        return StorageFailures(self.factory.ledgers_given_up, self.factory.adds_moved)

    def memory_statistics(self) -> StorageMemory:
        cache = self.factory.entry_cache.statistics()
        budget = self.factory.read_ahead_budget
        return StorageMemory(
            cache.size_bytes, cache.max_bytes, budget.held, budget.capacity, budget.refused
        )

    def offload_worker_statistics(self) -> OffloadWorkerStatistics:
        worker = self.factory.offloaders.tuning.worker
        if worker is None:
            return OffloadWorkerStatistics(False, 0, 0, 0)
        return OffloadWorkerStatistics(
            worker.running, worker.starts, worker.jobs, worker.jobs_failed
        )


__all__ = ["ManagedCursorAdapter", "ManagedLedgerAdapter", "ManagedLedgerStorage"]
