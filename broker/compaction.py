"""Topic compaction: a compacted view keeping the latest message per key, and reading it.

Owns:
- the pure fold (``entry_messages``, ``LatestPerKey``): which messages of a stream of entries
  survive "latest value per key" (key = ``partition_key``, of each SingleMessageMetadata in
  a batch); an empty payload or ``null_value`` deletes its key; messages without a key are
  left out (Pulsar's ``compactionRetainNullKey=false``);
- the compacted-view record format and ``CompactedView`` (one generation: a managed ledger
  named ``<topic>/__compaction/compacted-<generation>`` holding, in position order, each
  retained entry as (original position, retained batch indexes, ORIGINAL entry bytes
  unchanged), sealed by a trailer record carrying the *compaction horizon*);
- ``TopicCompaction``: a topic's compaction state (the current view, status NOT_RUN /
  RUNNING / SUCCESS / ERROR, last statistics) and ``compact()``, Pulsar's two phases over
  the previous view followed by the topic's entries after the previous horizon up to the
  current end (phase one folds keys in memory, phase two copies the retained entries);
- ``CompactedCursor``: a ``TopicCursor`` over a subscription's own cursor that, while the
  read position is at or before the horizon, serves the view (only retained entries at or
  after the read position, with their original message ids), then continues on the live
  tail. A partially retained batch goes out with a CommandMessage ``ack_set`` whose 0 bits
  are the messages compacted out (the official clients skip them and return their permits);
- ``CompactionMonitor``: the periodic check that compacts topics whose bytes not yet
  compacted exceed their ``compaction_threshold``.

Invariants: a generation becomes visible only once its trailer is written (one append: a
crash leaves either the old or the new view); on load the newest sealed generation wins and
every other one is deleted; the ``__compaction`` durable cursor's mark-delete is the horizon
of the current view (so retention never trims data not yet compacted); the view only ever
holds positions <= its horizon, in increasing order.
Must not know: sockets, frames, dispatch (the dispatchers see an ordinary cursor).
"""

from __future__ import annotations

import asyncio
import bisect
import collections
import enum
import json
import logging
import struct
import time
from array import array
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from magnetar.broker.ledger.position import Position
from magnetar.broker.storage import Entry, TopicCursor, TopicLedger, TopicStorageFactory
from magnetar.client.protocol import parse_batch, parse_entry
from magnetar.zk.clock import Clock, SystemClock

log = logging.getLogger(__name__)

COMPACTION_SUBSCRIPTION = "__compaction"
"""The durable cursor holding the topic's data after the horizon (Pulsar's name)."""

_VIEW_PREFIX = "compacted-"
_DATA_MAGIC = b"MGC1"
_TRAILER_MAGIC = b"MGCT"
_RECORD = struct.Struct(">4sqqI")  # magic, original ledger, original entry, mask length
_WORD = 1 << 64
_COPY_BATCH_ENTRIES = 64
_COPY_BATCH_BYTES = 1 << 20
_READ_BATCH_ENTRIES = 100
_MASKS_MAX = 10_000
_CHUNKS_PENDING_MAX = 10_000
_CHUNK_EXPIRY_MS = 60_000
"""An incomplete chunked message older than this is abandoned (the client's default
``expireTimeOfIncompleteChunkedMessage``), so it no longer holds the horizon back."""


# --------------------------------------------------------------------------- the pure fold


@dataclass(frozen=True, slots=True)
class KeyedMessage:
    """One message of an entry as compaction sees it: batch index (-1 when the entry is a
    single message), key (None without one), and whether it deletes its key."""

    index: int
    key: str | None
    tombstone: bool
    chunk_uuid: str | None = None
    """Chunked message: the entries with this uuid are one message (kept or dropped together)."""
    chunk_id: int = 0
    chunks: int = 1
    publish_time_ms: int = 0
    """Set for chunks: an incomplete group this recent may still be being written."""


def entry_messages(data: bytes) -> tuple[int, list[KeyedMessage]]:
    """(messages in the entry, its messages as compaction sees them). A batch that cannot
    be opened (encrypted, unknown codec) counts as one message keyed by the outer key."""
    stored = parse_entry(data, verify_checksum=False)
    md = stored.metadata
    if not md.HasField("num_messages_in_batch"):
        key = md.partition_key if md.HasField("partition_key") else None
        tomb = md.null_value or len(stored.payload) == 0
        if md.HasField("uuid") and md.num_chunks_from_msg > 1:
            return 1, [
                KeyedMessage(
                    -1, key, False, md.uuid, md.chunk_id, md.num_chunks_from_msg, md.publish_time
                )
            ]
        return 1, [KeyedMessage(-1, key, tomb)]
    n = md.num_messages_in_batch
    try:
        if md.encryption_keys:
            raise ValueError("encrypted batch")
        payload = stored.payload
        if md.compression:
            from magnetar.client._compression import decompress

            payload = decompress(md.compression, payload, md.uncompressed_size)
        singles = parse_batch(payload, n)
    except Exception:
        key = md.partition_key if md.HasField("partition_key") else None
        return n, [KeyedMessage(-1, key, False)]
    out = []
    for s in singles:
        smm = s.metadata
        if smm.compacted_out:
            continue
        key = smm.partition_key if smm.HasField("partition_key") else None
        out.append(KeyedMessage(s.index, key, smm.null_value or smm.payload_size == 0))
    return n, out


class LatestPerKey:
    """Phase one: feed entries in log order; ``retained()`` tells which messages survive.

    Memory: one (key, position, index) per live key (Pulsar's phase one keeps the same map),
    plus the positions of chunked messages still being assembled (at most
    ``_CHUNKS_PENDING_MAX`` of them; older incomplete ones are forgotten, never retained).
    A chunked message counts once, at its last chunk, and is retained whole or not at all.
    """

    def __init__(self, *, retain_null_key: bool = False) -> None:
        self.retain_null_key = retain_null_key
        self._latest: dict[str, tuple[Position, int, tuple[Position, ...]]] = {}
        self._null_key: list[tuple[Position, int, tuple[Position, ...]]] = []
        self._chunks: dict[str, list[Position]] = {}
        # per pending group: the position fed just before its first chunk, and that chunk's
        # publish time (a compaction must not cut a group still being written in two)
        self._chunk_starts: dict[str, tuple[Position | None, int]] = {}
        self._last_fed: Position | None = None
        self.messages_seen = 0

    def __repr__(self) -> str:
        return f"<LatestPerKey keys={len(self._latest)} seen={self.messages_seen}>"

    def add(self, position: Position, messages: Iterable[KeyedMessage]) -> None:
        before, self._last_fed = self._last_fed, position
        for m in messages:
            earlier: tuple[Position, ...] = ()
            if m.chunk_uuid is not None:
                got = self._chunks.pop(m.chunk_uuid, [])  # re-inserted: newest last
                start = self._chunk_starts.pop(m.chunk_uuid, (before, m.publish_time_ms))
                got.append(position)
                if m.chunk_id < m.chunks - 1:
                    self._chunks[m.chunk_uuid] = got
                    self._chunk_starts[m.chunk_uuid] = start
                    while len(self._chunks) > _CHUNKS_PENDING_MAX:
                        oldest = next(iter(self._chunks))
                        del self._chunks[oldest]
                        self._chunk_starts.pop(oldest, None)
                    continue
                if len(got) != m.chunks:  # its first chunks are missing: never retained
                    self.messages_seen += 1
                    continue
                earlier = tuple(got[:-1])
            self.messages_seen += 1
            if m.key is None:
                if self.retain_null_key and not m.tombstone:
                    self._null_key.append((position, m.index, earlier))
                continue
            if m.tombstone:
                self._latest.pop(m.key, None)
            else:
                self._latest[m.key] = (position, m.index, earlier)

    @property
    def keys(self) -> int:
        return len(self._latest)

    def cut_before_pending_chunks(self, since_ms: int) -> tuple[bool, Position | None]:
        """(True, p) when a chunked message published at or after ``since_ms`` is still
        incomplete: the horizon must then be ``p``, the position just before its first
        chunk (None: nothing before it). Older incomplete groups count as abandoned."""
        cuts = [b for b, t in self._chunk_starts.values() if t >= since_ms]
        if not cuts:
            return False, None
        if any(b is None for b in cuts):
            return True, None
        return True, min(b for b in cuts if b is not None)

    def retained(self) -> dict[Position, set[int]]:
        """Position -> retained batch indexes ({-1} for a whole single-message entry)."""
        out: dict[Position, set[int]] = {}
        for pos, index, earlier in list(self._latest.values()) + self._null_key:
            out.setdefault(pos, set()).add(index)
            for chunk in earlier:
                out.setdefault(chunk, set()).add(-1)
        return out

    @property
    def retained_messages(self) -> int:
        return len(self._latest) + len(self._null_key)


# --------------------------------------------------------------------------- records


def encode_record(position: Position, mask: int | None, data: bytes) -> bytes:
    """A view record: the original position, the retained-index mask (None: whole entry)
    and the original entry bytes."""
    raw = b"" if mask is None else mask.to_bytes((mask.bit_length() + 7) // 8 or 1, "little")
    return _RECORD.pack(_DATA_MAGIC, position.ledger_id, position.entry_id, len(raw)) + raw + data


@dataclass(frozen=True, slots=True)
class ViewRecord:
    position: Position
    mask: int | None
    data: bytes


def decode_record(raw: bytes) -> ViewRecord | None:
    """The record, or None for the trailer."""
    if raw[:4] == _TRAILER_MAGIC:
        return None
    magic, ledger_id, entry_id, n = _RECORD.unpack_from(raw, 0)
    if magic != _DATA_MAGIC:
        raise ValueError(f"not a compacted-view record: {magic!r}")
    start = _RECORD.size
    mask = int.from_bytes(raw[start : start + n], "little") if n else None
    return ViewRecord(Position(ledger_id, entry_id), mask, raw[start + n :])


@dataclass(frozen=True, slots=True)
class Trailer:
    horizon: Position
    generation: int
    entries: int
    messages_removed: int
    finished_ms: int

    def encode(self) -> bytes:
        doc = {
            "horizon": str(self.horizon),
            "generation": self.generation,
            "entries": self.entries,
            "removed": self.messages_removed,
            "finished_ms": self.finished_ms,
        }
        return _TRAILER_MAGIC + json.dumps(doc).encode()

    @classmethod
    def decode(cls, raw: bytes) -> Trailer:
        doc = json.loads(raw[4:])
        return cls(
            Position.parse(doc["horizon"]),
            int(doc["generation"]),
            int(doc["entries"]),
            int(doc["removed"]),
            int(doc["finished_ms"]),
        )


def words_to_int(words: list[int]) -> int:
    value = 0
    for i, w in enumerate(words):
        value |= (w % _WORD) << (64 * i)
    return value


def int_to_words(value: int, size: int) -> list[int]:
    out = []
    for i in range((size + 63) // 64):
        w = (value >> (64 * i)) & (_WORD - 1)
        out.append(w - _WORD if w >= (1 << 63) else w)
    return out


def view_name(topic_ledger: str, generation: int) -> str:
    return f"{topic_ledger}/{COMPACTION_SUBSCRIPTION}/{_VIEW_PREFIX}{generation:012d}"


def _generation_of(name: str) -> int | None:
    tail = name.rsplit("/", 1)[-1]
    if not tail.startswith(_VIEW_PREFIX) or not tail[len(_VIEW_PREFIX) :].isdigit():
        return None
    return int(tail[len(_VIEW_PREFIX) :])


def _after(pos: Position) -> Position:
    return Position(pos.ledger_id, pos.entry_id + 1)


# --------------------------------------------------------------------------- a generation


class _Positions:
    """A read-only sequence of Positions over two int64 arrays (16 bytes a key)."""

    __slots__ = ("entries", "ledgers")

    def __init__(self) -> None:
        self.ledgers = array("q")
        self.entries = array("q")

    def append(self, pos: Position) -> None:
        self.ledgers.append(pos.ledger_id)
        self.entries.append(pos.entry_id)

    def __len__(self) -> int:
        return len(self.ledgers)

    def __getitem__(self, i: int) -> Position:
        return Position(self.ledgers[i], self.entries[i])


class CompactedView:
    """One sealed generation: its ledger, its horizon, and an index from original
    positions to view positions (two arrays each, 32 bytes per retained entry)."""

    def __init__(self, ledger: TopicLedger, trailer: Trailer) -> None:
        self.ledger = ledger
        self.trailer = trailer
        self.originals = _Positions()
        self.locations = _Positions()

    def __repr__(self) -> str:
        return f"<CompactedView {self.ledger.name} horizon={self.horizon} entries={len(self)}>"

    @property
    def horizon(self) -> Position:
        return self.trailer.horizon

    @property
    def generation(self) -> int:
        return self.trailer.generation

    def __len__(self) -> int:
        return len(self.originals)

    def check_invariants(self) -> None:
        prev: Position | None = None
        for i in range(len(self.originals)):
            pos = self.originals[i]
            assert pos <= self.horizon, (pos, self.horizon)
            assert prev is None or prev < pos, (prev, pos)
            prev = pos

    @classmethod
    async def open(cls, ledger: TopicLedger) -> CompactedView | None:
        """Scan a generation's ledger; None when it has no trailer (never sealed)."""
        entries: list[Entry] = []
        trailer: Trailer | None = None
        start = ledger.first_position
        index: list[tuple[Position, Position]] = []
        while start is not None:
            entries = await ledger.read_entries(start, _READ_BATCH_ENTRIES)
            for e in entries:
                rec = decode_record(e.data)
                if rec is None:
                    trailer = Trailer.decode(e.data)
                else:
                    index.append((rec.position, e.position))
            last = ledger.last_confirmed
            if not entries or last is None or entries[-1].position >= last:
                break
            start = _after(entries[-1].position)
        if trailer is None:
            return None
        view = cls(ledger, trailer)
        for orig, loc in index:
            view.originals.append(orig)
            view.locations.append(loc)
        return view

    def first_at_or_after(self, pos: Position) -> int:
        return bisect.bisect_left(self.originals, pos)

    async def read(
        self, start: Position, max_entries: int, skip: Callable[[ViewRecord], bool]
    ) -> tuple[list[ViewRecord], Position | None]:
        """Up to ``max_entries`` records at or after ``start`` that ``skip`` does not drop;
        and the next position to read in the view (None: the view is exhausted)."""
        i = self.first_at_or_after(start)
        out: list[ViewRecord] = []
        while i < len(self) and len(out) < max_entries:
            got = await self.ledger.read_entries(self.locations[i], _READ_BATCH_ENTRIES)
            if not got:
                break
            for e in got:
                rec = decode_record(e.data)
                if rec is None:  # the trailer
                    i = len(self)
                    break
                i += 1
                if skip(rec):
                    continue
                out.append(rec)
                if len(out) >= max_entries:
                    break
        return out, (self.originals[i] if i < len(self) else None)

    async def read_at(self, pos: Position) -> ViewRecord | None:
        i = self.first_at_or_after(pos)
        if i >= len(self) or self.originals[i] != pos:
            return None
        got = await self.ledger.read_entries(self.locations[i], 1)
        return decode_record(got[0].data) if got else None


# --------------------------------------------------------------------------- a topic's state


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
        prefix = f"{self.topic_ledger_name}/{COMPACTION_SUBSCRIPTION}/"
        try:
            names = await self.storage.list(prefix)
        except Exception:
            names = []
        gens = sorted(((g, n) for n in names if (g := _generation_of(n)) is not None), reverse=True)
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
        prefix = f"{self.topic_ledger_name}/{COMPACTION_SUBSCRIPTION}/"
        names = set(await self.storage.list(prefix))
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
        cursor = sub.cursor
        size = getattr(cursor, "backlog_size", None)
        return int(size()) if size is not None else int(topic.ledger.total_size)

    # -- the compaction itself
    async def _source(
        self, ledger: TopicLedger, previous: CompactedView | None, horizon: Position
    ) -> Any:
        """The input stream: the previous view's records, then the topic's entries after
        the previous horizon up to ``horizon`` (inclusive), as (position, mask, data)."""
        if previous is not None:
            pos: Position | None = Position(-1, -1)
            while pos is not None:
                recs, pos = await previous.read(pos, _READ_BATCH_ENTRIES, lambda _: False)
                for r in recs:
                    yield r.position, r.mask, r.data
                if not recs:
                    break
            start: Position | None = _after(previous.horizon)
        else:
            start = ledger.first_position
        while start is not None and start <= horizon:
            entries = await ledger.read_entries(start, _READ_BATCH_ENTRIES)
            if not entries:
                break
            for e in entries:
                if e.position > horizon:
                    return
                if previous is not None and e.position <= previous.horizon:
                    continue
                yield e.position, None, e.data
            start = _after(entries[-1].position)

    async def _phase_one(
        self, ledger: TopicLedger, previous: CompactedView | None, horizon: Position
    ) -> LatestPerKey:
        fold = LatestPerKey(retain_null_key=self.retain_null_key)
        async for pos, mask, data in self._source(ledger, previous, horizon):
            try:
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
        view = CompactedView(out, trailer)
        for orig, loc in index:
            view.originals.append(orig)
            view.locations.append(loc)
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


# --------------------------------------------------------------------------- reading


class CompactedCursor:
    """A ``TopicCursor`` serving the compacted view before the live tail (read_compacted).

    All positioning goes through this wrapper: while the logical read position is at or
    before the current horizon, reads come from the view; then the inner cursor is moved
    after the horizon and reads continue on the topic. Acks go to the inner cursor (the
    entries keep their original ids)."""

    def __init__(
        self, inner: TopicCursor, compaction: TopicCompaction, *, from_earliest: bool = False
    ) -> None:
        self.inner = inner
        self.compaction = compaction
        self.name = inner.name
        self.durable = inner.durable
        # the read position while it is inside the view (None: follow the inner cursor)
        self._logical: Position | None = Position(-1, -1) if from_earliest else None
        # a cursor started at the earliest position counts nothing below its starting
        # mark-delete as acknowledged until the mark moves (the view may hold entries
        # older than what the ledger still has)
        self._floor: Position | None = inner.mark_delete_position if from_earliest else None
        self._masks: collections.OrderedDict[Position, tuple[int, int]] = collections.OrderedDict()

    def __repr__(self) -> str:
        return f"<CompactedCursor {self.inner!r} logical={self._logical}>"

    def unwrap(self) -> TopicCursor:
        return self.inner

    def _horizon(self) -> Position | None:
        return self.compaction.horizon

    @property
    def mark_delete_position(self) -> Position:
        return self.inner.mark_delete_position

    @property
    def read_position(self) -> Position:
        return self._logical if self._logical is not None else self.inner.read_position

    def _view_acked(self, position: Position) -> bool:
        floor = self._floor
        if floor is not None:
            if self.inner.mark_delete_position != floor:
                self._floor = None
            elif position <= floor:
                return False
        return self.inner.is_acked(position)

    def _record_acked(self, rec: ViewRecord) -> bool:
        """Acknowledged, or a batch whose retained members are all acknowledged (an ack
        set of zeros would read as "deliver everything" to the client)."""
        if self._view_acked(rec.position):
            return True
        if rec.mask is not None:
            words = self.inner.batch_ack_set(rec.position)
            if words and not words_to_int(words) & rec.mask:
                return True
        return False

    def is_acked(self, position: Position) -> bool:
        return self._view_acked(position)

    def batch_ack_set(self, position: Position) -> list[int] | None:
        words = self.inner.batch_ack_set(position)
        got = self._masks.get(position)
        if got is None:
            return words
        size, mask = got
        unacked = words_to_int(words) if words else (1 << size) - 1
        return int_to_words(unacked & mask, size)

    def _remember(self, rec: ViewRecord) -> None:
        if rec.mask is None:
            return
        try:
            n, _ = entry_messages(rec.data)
        except Exception:
            return
        self._masks[rec.position] = (n, rec.mask)
        self._masks.move_to_end(rec.position)
        while len(self._masks) > _MASKS_MAX:
            self._masks.popitem(last=False)

    async def read_entries(self, max_entries: int) -> list[Entry]:
        view = self.compaction.view
        try:
            return await self._read_entries(view, max_entries)
        except Exception:
            if self.compaction.view is view:
                raise
            # a new generation replaced (and deleted) the one being read: read it instead
            return await self._read_entries(self.compaction.view, max_entries)

    async def _read_entries(self, view: CompactedView | None, max_entries: int) -> list[Entry]:
        pos = self.read_position
        if view is None or pos > view.horizon:
            if self._logical is not None:
                self.inner.seek(self._logical)
                self._logical = None
            return await self.inner.read_entries(max_entries)
        recs, nxt = await view.read(pos, max_entries, self._record_acked)
        for r in recs:
            self._remember(r)
        out = [Entry(r.position, r.data) for r in recs]
        if nxt is not None:
            self._logical = nxt
            return out
        # the view is exhausted: the live tail after the horizon
        self._logical = None
        self.inner.seek(_after(view.horizon))
        if len(out) < max_entries:
            out += await self.inner.read_entries(max_entries - len(out))
        return out

    async def read_positions(self, positions: list[Position]) -> list[Entry]:
        view = self.compaction.view
        if view is None:
            return await self.inner.read_positions(positions)
        out: list[Entry] = []
        live = [p for p in positions if p > view.horizon]
        for pos in positions:
            if pos <= view.horizon and not self._view_acked(pos):
                rec = await view.read_at(pos)
                if rec is not None and not self._record_acked(rec):
                    self._remember(rec)
                    out.append(Entry(rec.position, rec.data))
        if live:
            out += await self.inner.read_positions(live)
        return out

    async def ack(self, positions: Iterable[Position]) -> None:
        await self.inner.ack(positions)

    async def ack_batch_index(self, position: Position, ack_set: list[int], size: int) -> bool:
        got = self._masks.get(position)
        if got is not None:  # messages compacted out count as acknowledged
            _, mask = got
            ack_set = int_to_words(words_to_int(ack_set) & mask, size)
            if not any(ack_set):
                await self.inner.ack([position])
                return True
        return await self.inner.ack_batch_index(position, ack_set, size)

    def redelivery_count(self, position: Position) -> int:
        return self.inner.redelivery_count(position)

    async def increment_redelivery(self, position: Position) -> int:
        return await self.inner.increment_redelivery(position)

    async def ack_cumulative(self, position: Position) -> None:
        await self.inner.ack_cumulative(position)

    def _logical_after(self, position: Position) -> Position | None:
        horizon = self._horizon()
        return position if horizon is not None and position <= horizon else None

    def rewind(self) -> None:
        self.inner.rewind()
        mark = self.inner.mark_delete_position
        if self._floor is not None and mark == self._floor:
            self._logical = self._logical_after(Position(-1, -1))
        else:
            self._floor = None
            self._logical = self._logical_after(_after(mark))

    def seek(self, position: Position) -> None:
        self.inner.seek(position)
        self._logical = self._logical_after(position)

    async def reset(self, position: Position) -> None:
        await self.inner.reset(position)
        if position.ledger_id < 0:  # earliest: the whole view again
            self._floor = self.inner.mark_delete_position
            self._logical = self._logical_after(Position(-1, -1))
        else:
            self._floor = None
            self._logical = self._logical_after(position)
        self._masks.clear()

    def backlog(self) -> int:
        return self.inner.backlog()

    def backlog_size(self) -> int:
        return int(getattr(self.inner, "backlog_size", lambda: 0)())


# --------------------------------------------------------------------------- automatic


class CompactionMonitor:
    """Every ``interval_s``: compact each loaded persistent topic whose bytes not yet
    compacted exceed its threshold (resolved ``compaction_threshold``; 0 = off)."""

    def __init__(
        self,
        topics: Callable[[], Iterable[Any]],
        threshold_of: Callable[[Any], int],
        interval_s: float,
        clock: Clock | None = None,
    ) -> None:
        self.topics = topics
        self.threshold_of = threshold_of
        self.interval_s = interval_s
        self.clock: Clock = clock or SystemClock()
        self._timer: Any = None
        self._task: asyncio.Task[int] | None = None
        self.checks = 0
        self.triggered = 0
        self.closed = False

    def __repr__(self) -> str:
        return f"<CompactionMonitor every {self.interval_s}s triggered={self.triggered}>"

    def start(self) -> None:
        if self.interval_s > 0:
            self._arm()

    def _arm(self) -> None:
        if not self.closed:
            self._timer = self.clock.call_later(self.interval_s, self._fire)

    def _fire(self) -> None:
        if self.closed:
            return
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self.check_now())
        self._arm()

    def close(self) -> None:
        self.closed = True
        if self._timer is not None:
            self._timer.cancel()
        if self._task is not None and not self._task.done():
            self._task.cancel()

    async def check_now(self) -> int:
        """One pass; returns how many compactions it started."""
        self.checks += 1
        started = 0
        for topic in list(self.topics()):
            comp = getattr(topic, "compaction", None)
            if comp is None or comp.running or comp.closed or getattr(topic, "closed", False):
                continue
            threshold = self.threshold_of(topic)
            if threshold <= 0:
                continue
            try:
                pending = await comp.uncompacted_bytes(topic)
            except Exception:
                continue
            if pending > threshold and not comp.running:
                comp.trigger(topic)
                started += 1
        self.triggered += started
        return started


__all__ = [
    "COMPACTION_SUBSCRIPTION",
    "CompactedCursor",
    "CompactedView",
    "CompactionAlreadyRunning",
    "CompactionMonitor",
    "CompactionStatistics",
    "CompactionStatus",
    "KeyedMessage",
    "LatestPerKey",
    "TopicCompaction",
    "Trailer",
    "ViewRecord",
    "decode_record",
    "encode_record",
    "entry_messages",
    "int_to_words",
    "view_name",
    "words_to_int",
]
