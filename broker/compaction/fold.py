"""The pure latest-per-key fold: which messages of a stream of entries survive compaction.

Owns:
- ``KeyedMessage`` and ``entry_messages``: an entry's messages as compaction sees them (key =
  ``partition_key``, of each SingleMessageMetadata in a batch; an empty payload or
  ``null_value`` deletes its key; a chunked message is identified by its uuid);
- ``LatestPerKey``, Pulsar's phase one: fed entries in log order, it tells which messages
  survive "latest value per key". Messages without a key are left out (Pulsar's
  ``compactionRetainNullKey=false``) unless ``retain_null_key`` is set.

Invariants: a tombstone removes its key (nothing of it is retained); a chunked message counts
once, at its last chunk, and is retained whole (every chunk's position) or not at all; the
pending chunked groups are bounded by ``CHUNKS_PENDING_MAX`` (the oldest are forgotten, never
retained).
Must not know: storage, ledgers, views, asyncio, the clock, topics or cursors (it is fed
positions and bytes; the caller does all I/O). Checked by the import-linter contract
``compaction-fold-is-pure``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from magnetar.broker.ledger.position import Position
from magnetar.client.protocol import EntryView, parse_batch

CHUNKS_PENDING_MAX = 10_000
"""Chunked messages being assembled at most; older incomplete ones are forgotten."""


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
    stored = EntryView.parse(data, verify_checksum=False)
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
    ``CHUNKS_PENDING_MAX`` of them; older incomplete ones are forgotten, never retained).
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
                    while len(self._chunks) > CHUNKS_PENDING_MAX:
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


__all__ = ["CHUNKS_PENDING_MAX", "KeyedMessage", "LatestPerKey", "entry_messages"]
