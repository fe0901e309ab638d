"""``TopicCompaction``: a persistent topic's compaction state and ``compact()``.

Owns: the topic's current ``CompactedView``, its status (NOT_RUN / RUNNING / SUCCESS /
ERROR) and last statistics, one compaction at a time (``trigger``), loading the newest sealed
generation at topic load, deleting generations, and ``compact()``: Pulsar's two phases over
the previous view followed by the topic's entries after the previous horizon up to the
current end (phase one folds keys in memory with ``LatestPerKey``, phase two copies the
retained entries into a new generation). A chunked message still being written across the
end moves the horizon back before its first chunk. Also Pulsar's compaction metrics
(``pulsar_compaction_*``), ``LongRunningProcessStatus`` and ``CompactionStats``.

Invariants: on load the newest sealed generation wins and every other one is deleted; the
``__compaction`` durable cursor's mark-delete is the horizon of the current view (so
retention never trims data not yet compacted); a new generation is installed by a synchronous
swap of ``view``, then the cursor moves and the old generation is deleted; a failed run
deletes its unsealed ledger.
Must not know: sockets, frames, dispatch, consumers (readers go through
``CompactedCursor``); the topic is duck-typed (``ledger``, ``subscriptions``,
``create_subscription``).
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from magnetar.broker.compaction.fold import LatestPerKey, entry_messages
from magnetar.broker.compaction.view import (
    COMPACTION_SUBSCRIPTION,
    READ_BATCH_ENTRIES,
    CompactedView,
    Trailer,
    encode_record,
    generation_of,
    next_position,
    view_name,
    views_prefix,
)
from magnetar.broker.ledger.position import Position
from magnetar.broker.storage.contract import TopicLedger, TopicStorageFactory
from magnetar.client.protocol import entry_marker_type
from magnetar.clock import Clock, SystemClock

log = logging.getLogger(__name__)

_COPY_BATCH_ENTRIES = 64
_COPY_BATCH_BYTES = 1 << 20
_CHUNK_EXPIRY_MS = 60_000
"""An incomplete chunked message older than this is abandoned (the client's default
``expireTimeOfIncompleteChunkedMessage``), so it no longer holds the horizon back."""


class CompactionStatus(enum.Enum):
    NOT_RUN = "NOT_RUN"
    RUNNING = "RUNNING"
    SUCCESS = "SUCCESS"
    ERROR = "ERROR"


class CompactionAlreadyRunning(Exception):
    pass


@dataclass(frozen=True, slots=True)
class CompactionStatistics:
    status: str
    generation: int
    horizon: str
    view_entries: int
    last_removed_messages: int
    last_succeed_ms: int
    last_failed_ms: int
    last_duration_ms: int
    runs: int


class TopicCompaction:
    """A persistent topic's compacted view, its state and its compactions (one at a time)."""

    def __init__(
        self,
        storage: TopicStorageFactory,
        topic_ledger_name: str,
        *,
        clock: Clock | None = None,
        retain_null_key: bool = False,
    ) -> None:
        self.storage = storage
        self.topic_ledger_name = topic_ledger_name
        self.clock: Clock = clock or SystemClock()
        self.retain_null_key = retain_null_key
        self.view: CompactedView | None = None
        self.status = CompactionStatus.NOT_RUN
        self.last_error = ""
        self.last_removed_messages = 0
        self.last_succeed_ms = 0
        self.last_failed_ms = 0
        self.last_duration_ms = 0
        self.runs = 0
        self.succeeded = 0
        self.failed = 0
        self.removed_total = 0
        self._task: asyncio.Task[None] | None = None
        self.closed = False

    def __repr__(self) -> str:
        return f"<TopicCompaction {self.topic_ledger_name} {self.status.value} view={self.view}>"

    @property
    def horizon(self) -> Position | None:
        return self.view.horizon if self.view is not None else None

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    # -- lifecycle
    async def load(self) -> None:
        """Find the newest sealed generation; delete the others (older, or never sealed)."""
        try:
            names = await self.storage.list(views_prefix(self.topic_ledger_name))
        except Exception:
            names = []
        gens = sorted(((g, n) for n in names if (g := generation_of(n)) is not None), reverse=True)
        for gen, name in gens:
            if self.view is None:
                ledger = await self.storage.open(name, keep_all=True)
                view = await CompactedView.open(ledger)
                if view is not None and view.generation == gen:
                    self.view = view
                    self.status = CompactionStatus.SUCCESS
                    self.last_removed_messages = view.trailer.messages_removed
                    self.last_succeed_ms = view.trailer.finished_ms
                    continue
                await ledger.close()
            log.info("deleting stale compacted view %s", name)
            await self._delete_ledger(name)

    async def _stop(self) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()
            try:
                await self._task
            except BaseException:
                pass
        if self.view is not None:
            await self.view.ledger.close()

    async def close(self) -> None:
        """Topic unload: stop a running compaction, close the view's ledger."""
        self.closed = True
        await self._stop()

    async def delete(self) -> None:
        """Topic or ``__compaction`` deletion: drop every generation (they sit under the
        cursor's node). A later compaction starts afresh."""
        await self._stop()
        view, self.view = self.view, None
        self.status = CompactionStatus.NOT_RUN
        names = set(await self.storage.list(views_prefix(self.topic_ledger_name)))
        if view is not None:
            names.add(view.ledger.name)
        for name in sorted(names):
            await self._delete_ledger(name)

    async def _delete_ledger(self, name: str) -> None:
        try:
            await self.storage.delete(name)
        except Exception:
            log.warning("deleting compacted view %s failed", name, exc_info=True)

    # -- triggering
    def trigger(self, topic: Any) -> asyncio.Task[None]:
        """Start a compaction of ``topic`` (a ``PersistentTopic``); raise
        ``CompactionAlreadyRunning`` if one is running."""
        if self.running:
            raise CompactionAlreadyRunning("Compaction already in progress")
        if self.closed:
            raise CompactionAlreadyRunning("Topic is closing")
        self.status = CompactionStatus.RUNNING
        task = asyncio.get_running_loop().create_task(self._run(topic))
        self._task = task
        return task

    async def _run(self, topic: Any) -> None:
        started = self.clock.now_ms()
        t0 = time.monotonic()
        try:
            await self.compact(topic)
        except asyncio.CancelledError:
            self.status = CompactionStatus.ERROR
            self.last_error = "cancelled (topic closed)"
            raise
        except Exception as exc:
            log.warning("compaction of %s failed", self.topic_ledger_name, exc_info=True)
            self.status = CompactionStatus.ERROR
            self.last_error = f"{type(exc).__name__}: {exc}"
            self.last_failed_ms = self.clock.now_ms()
            self.failed += 1
        else:
            self.succeeded += 1
            self.removed_total += self.last_removed_messages
            self.status = CompactionStatus.SUCCESS
            self.last_error = ""
            self.last_succeed_ms = self.clock.now_ms()
        finally:
            self.runs += 1
            self.last_duration_ms = int((time.monotonic() - t0) * 1000)
            log.info(
                "compaction of %s: %s in %d ms (started %d)",
                self.topic_ledger_name,
                self.status.value,
                self.last_duration_ms,
                started,
            )

    async def uncompacted_bytes(self, topic: Any) -> int:
        """Bytes not yet compacted: the ``__compaction`` cursor's backlog, the whole topic
        before the first compaction (Pulsar's estimate)."""
        sub = topic.subscriptions.get(COMPACTION_SUBSCRIPTION)
        if sub is None:
            return int(topic.ledger.total_size)
        return int(sub.cursor.backlog_size())

    # -- the compaction itself
    async def _source(
        self, ledger: TopicLedger, previous: CompactedView | None, horizon: Position
    ) -> AsyncIterator[tuple[Position, int | None, bytes]]:
        """The input stream: the previous view's records, then the topic's entries after
        the previous horizon up to ``horizon`` (inclusive), as (position, mask, data)."""
        if previous is not None:
            pos: Position | None = Position(-1, -1)
            while pos is not None:
                recs, pos = await previous.read(pos, READ_BATCH_ENTRIES, lambda _: False)
                for r in recs:
                    yield r.position, r.mask, r.data
                if not recs:
                    break
            start: Position | None = next_position(previous.horizon)
        else:
            start = ledger.first_position
        while start is not None and start <= horizon:
            entries = await ledger.read_entries(start, READ_BATCH_ENTRIES)
            if not entries:
                break
            for e in entries:
                if e.position > horizon:
                    return
                if previous is not None and e.position <= previous.horizon:
                    continue
                yield e.position, None, e.data
            start = next_position(entries[-1].position)

    async def _phase_one(
        self, ledger: TopicLedger, previous: CompactedView | None, horizon: Position
    ) -> LatestPerKey:
        fold = LatestPerKey(retain_null_key=self.retain_null_key)
        async for pos, mask, data in self._source(ledger, previous, horizon):
            try:
                if entry_marker_type(data):
                    continue  # a marker (geo-replication's): never a message of the view
                _, msgs = entry_messages(data)
            except Exception:
                continue  # not a message entry: never retained
            if mask is not None:
                msgs = [m for m in msgs if m.index < 0 or (mask >> m.index) & 1]
            fold.add(pos, msgs)
        return fold

    async def compact(self, topic: Any) -> None:
        """Build and install a new generation covering the topic up to its current end."""
        ledger: TopicLedger = topic.ledger
        horizon = ledger.last_confirmed
        previous = self.view
        if horizon is None or (previous is not None and horizon <= previous.horizon):
            self.last_removed_messages = 0
            return  # nothing new since the last compaction
        # phase one: the latest message of each key
        fold = await self._phase_one(ledger, previous, horizon)
        cut, before = fold.cut_before_pending_chunks(self.clock.now_ms() - _CHUNK_EXPIRY_MS)
        if cut:  # a chunked message is being written across the end: stop before it
            if before is None or (previous is not None and before <= previous.horizon):
                self.last_removed_messages = 0
                return
            horizon = before
            fold = await self._phase_one(ledger, previous, horizon)
        retained = fold.retained()
        # phase two: copy the retained entries, in log order, into a new generation
        generation = (previous.generation + 1) if previous is not None else 1
        name = view_name(self.topic_ledger_name, generation)
        if await self.storage.exists(name):  # a leftover of a failed run
            await self.storage.delete(name)
        if COMPACTION_SUBSCRIPTION not in topic.subscriptions:
            # the cursor first: the generations live under its node
            await topic.create_subscription(COMPACTION_SUBSCRIPTION, earliest=True)
        out = await self.storage.open(name, keep_all=True)
        index: list[tuple[Position, Position]] = []
        try:
            batch: list[bytes] = []
            origins: list[Position] = []
            size = 0

            async def flush() -> None:
                nonlocal batch, origins, size
                if batch:
                    locs = await out.add_entries(batch)
                    index.extend(zip(origins, locs, strict=True))
                batch, origins, size = [], [], 0

            if retained:
                async for pos, _mask, data in self._source(ledger, previous, horizon):
                    keep = retained.get(pos)
                    if keep is None:
                        continue
                    n, _ = entry_messages(data)
                    new_mask: int | None = None
                    if -1 not in keep and len(keep) < n:
                        new_mask = 0
                        for i in keep:
                            new_mask |= 1 << i
                    batch.append(encode_record(pos, new_mask, data))
                    origins.append(pos)
                    size += len(data)
                    if len(batch) >= _COPY_BATCH_ENTRIES or size >= _COPY_BATCH_BYTES:
                        await flush()
            await flush()
            removed = fold.messages_seen - fold.retained_messages
            trailer = Trailer(horizon, generation, len(index), removed, self.clock.now_ms())
            await out.add_entries([trailer.encode()])  # sealed: this generation is the view
        except BaseException:
            await out.close()
            await self._delete_ledger(name)
            raise
        view = CompactedView(out, trailer, index)
        # install: synchronous swap, then move the cursor and drop the old generation
        self.view = view
        self.last_removed_messages = removed
        sub = topic.subscriptions.get(COMPACTION_SUBSCRIPTION)
        if sub is not None:
            await sub.cursor.ack_cumulative(horizon)
        if previous is not None:
            await previous.ledger.close()
            await self._delete_ledger(previous.ledger.name)

    # -- observability
    def statistics(self) -> CompactionStatistics:
        view = self.view
        return CompactionStatistics(
            self.status.value,
            view.generation if view else 0,
            str(view.horizon) if view else "",
            len(view) if view else 0,
            self.last_removed_messages,
            self.last_succeed_ms,
            self.last_failed_ms,
            self.last_duration_ms,
            self.runs,
        )

    def metrics(self) -> dict[str, int]:
        """Pulsar's compaction metric names (``pulsar_compaction_*``) and their values."""
        return {
            "pulsar_compaction_removed_event_count": self.removed_total,
            "pulsar_compaction_succeed_count": self.succeeded,
            "pulsar_compaction_failed_count": self.failed,
            "pulsar_compaction_duration_time_in_mills": self.last_duration_ms,
            "pulsar_compaction_compacted_entries_count": len(self.view) if self.view else 0,
        }

    def status_json(self) -> dict[str, Any]:
        """Pulsar's ``LongRunningProcessStatus``."""
        out: dict[str, Any] = {"status": self.status.value}
        if self.status is CompactionStatus.ERROR:
            out["lastError"] = self.last_error
        return out

    def stats_json(self) -> dict[str, Any]:
        """Pulsar's ``CompactionStats`` in topic stats."""
        return {
            "lastCompactionRemovedEventCount": self.last_removed_messages,
            "lastCompactionSucceedTimestamp": self.last_succeed_ms,
            "lastCompactionFailedTimestamp": self.last_failed_ms,
            "lastCompactionDurationTimeInMills": self.last_duration_ms,
        }


__all__ = [
    "CompactionAlreadyRunning",
    "CompactionStatistics",
    "CompactionStatus",
    "TopicCompaction",
]
