"""Stored entries into Arrow record batches, in bulk: what a reading task yields to Spark.

Owns: ``EntryColumns``, which takes whole stored entries (the bytes a broker stores per
entry: checksum, ``MessageMetadata``, payload) as they come from the bookies, and builds the
source's columns (``rows.arrow_schema`` or a schema'd topic's value columns, then the
metadata columns) without a Python object per message: one ``MessageMetadata`` per entry
(the codec's ``entry_metadata``; checksums are the storage's), a batch payload cut by the
codec's ``scan_batch`` (members that carry nothing but their size and sequence id, as
batching producers write them, are never parsed), payloads sliced and joined into one Arrow
buffer, and the per-message columns (ids, times) computed per entry and expanded with numpy;
``binary_array`` is that buffer building. Typed (schema'd) topics decode a whole batch's
payloads per writer schema at once (``TopicSchema.decode_column``).

Which messages of an entry are taken: those after/at the read's ``start`` and up to its
``end`` (only the first and last entries of a read hold others), published before
``ending_time_ms`` when set. A chunked message cannot be assembled from one task's entries
alone: ``ChunkedEntry`` tells the caller to read those entries through the broker.

Invariants: the columns of one built batch have equal lengths; rows are in entry order and
member order; a batch holds at most what was added since the last ``build``.

Must not know: bookies, Spark, the network.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from magnetar.client._compression import DecompressionError, decompress
from magnetar.client.protocol import RemoteProtocolError, encode_varint, entry_metadata, scan_batch
from magnetar.spark.positions import Position, Start, ends_by
from magnetar.spark.rows import arrow_schema

_parse_smm: Callable[[bytes], Any] | None = None


class EntryError(ValueError):
    """An entry that does not decode (malformed metadata or batch, bad checksum)."""


class ChunkedEntry(Exception):
    """The entry is one chunk of a chunked message: the caller reads it through the broker."""

    def __init__(self, ledger: int, entry: int) -> None:
        super().__init__(f"entry {ledger}:{entry} is a chunk of a chunked message")
        self.ledger = ledger
        self.entry = entry


def binary_array(values: Sequence[bytes], kind: Any = None) -> Any:
    """``values`` as one Arrow binary (or ``kind``: string) array: the bytes joined once and
    the offsets from their lengths (``pa.array`` with an explicit binary type converts item
    by item, about 20 times slower)."""
    n = len(values)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.fromiter(map(len, values), dtype=np.int64, count=n), out=offsets[1:])
    if offsets[-1] < 1 << 31:
        return pa.Array.from_buffers(
            kind or pa.binary(),
            n,
            [None, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(b"".join(values))],
        )
    large = pa.large_string() if kind == pa.string() else pa.large_binary()
    arr = pa.Array.from_buffers(
        large, n, [None, pa.py_buffer(offsets), pa.py_buffer(b"".join(values))]
    )
    return arr.cast(kind or pa.binary())


_UINT64 = (1 << 64) - 1
_MEMBER_TAGS: list[bytes] = []
"""``_MEMBER_TAGS[i]``: the ``batch_index`` field of a ``MessageIdData`` (tag 4, varint i)."""


def _member_tags(hi: int) -> list[bytes]:
    while len(_MEMBER_TAGS) < hi:
        _MEMBER_TAGS.append(b"\x20" + encode_varint(len(_MEMBER_TAGS)))
    return _MEMBER_TAGS


def message_id_bytes(runs: Sequence[tuple[int, ...]], partition: int) -> Any:
    """``MessageIdData`` bytes (``MessageId.serialize()``, Pulsar's ``toByteArray``) of every
    row: ledgerId (1), entryId (2), partition (3), then batch_index (4) for a batch member.
    ``runs``: (ledger, entry, rows, first batch index or -1) per entry; the entry's fields are
    encoded once and each member adds its index's tag from a table."""
    tail = b"\x18" + encode_varint(partition & _UINT64)
    out: list[bytes] = []
    heads: dict[int, bytes] = {}
    for ledger, entry, count, lo, *_ in runs:
        head = heads.get(ledger)
        if head is None:
            head = heads[ledger] = b"\x08" + encode_varint(ledger) + b"\x10"
        prefix = head + encode_varint(entry) + tail
        if lo < 0:
            out.append(prefix)
        else:
            out.extend([prefix + t for t in _member_tags(lo + count)[lo : lo + count]])
    return binary_array(out)


def _smm(raw: bytes) -> Any:
    global _parse_smm
    if _parse_smm is None:
        from magnetar.client.protocol import pb

        _parse_smm = pb.SingleMessageMetadata.FromString
    return _parse_smm(raw)


class EntryColumns:
    """The messages of added entries, as columns; ``build`` makes them one record batch.

    ``typed``: the read's ``TopicSchema`` (None: ``value BINARY``); ``writer_of``: the
    ``pb.Schema`` that wrote a schema version (typed reads resolve old versions with it)."""

    def __init__(
        self,
        topic: str,
        start: Start,
        end: Position,
        *,
        ending_time_ms: int | None = None,
        typed: Any = None,
        writer_of: Callable[[bytes], Any] | None = None,
    ) -> None:
        self.topic = topic
        self.start = start
        self.end = end
        self.until = ending_time_ms
        self.typed = typed
        self.writer_of = writer_of
        self.partition = _partition_index(topic)
        p = start.position
        self._edges = {(end.ledger, end.entry)} | (
            {(p.ledger, p.entry)} if p is not None else set()
        )
        """The entries that may hold messages the read does not take."""
        schema = arrow_schema()
        if typed is not None:
            meta = [f for f in schema if f.name != "value"]
            schema = pa.schema([*typed.value_fields(), *meta])
        self.schema = schema
        self.clear()

    def clear(self) -> None:
        self.values: list[bytes] = []
        self.nbytes = 0
        self._runs: list[tuple[int, int, int, int, int, int]] = []
        """One per entry (its rows are consecutive): ledger, entry, rows, batch index of the
        first row (-1: not a batch), publish time, event time."""
        self._versions: list[bytes] = []  # per run: the schema version that wrote it
        # rows with their own key, properties or event time
        self._keys: dict[int, bytes] = {}
        self._props: dict[int, list[tuple[str, str]]] = {}
        self._member_event: dict[int, int] = {}

    def __len__(self) -> int:
        return len(self.values)

    def _bounds(self, ledger: int, entry: int, n: int) -> tuple[int, int]:
        """Members ``lo .. hi-1`` of a batch entry of ``n`` that the read takes (a bound with
        batch index -1 stands for the whole entry: ``positions``)."""
        lo, hi = 0, n
        p = self.start.position
        if p is not None and (p.ledger, p.entry) == (ledger, entry):
            if self.start.kind == "after":
                lo = p.batch + 1 if p.batch >= 0 else n
            else:
                lo = max(p.batch, 0)
        e = self.end
        if (e.ledger, e.entry) == (ledger, entry) and e.batch >= 0:
            hi = min(n, e.batch + 1)
        return lo, hi

    def _takes_whole(self, ledger: int, entry: int) -> bool:
        """Whether the read takes a message that is a whole entry (only the read's first and
        last entries can hold messages it does not take)."""
        pos = Position(ledger, entry, -1)
        return self.start.includes(pos) and ends_by(pos, self.end)

    def add(self, ledger: int, entry: int, data: bytes) -> None:
        """Take the messages of one stored entry (``EntryError`` when it does not decode)."""
        self.add_entries(ledger, entry, [data])

    def add_entries(self, ledger: int, first: int, datas: list[bytes]) -> None:
        """Take the messages of consecutive stored entries ``first``, ``first + 1``, ...
        (``EntryError`` when one does not decode). Their checksums are the storage's
        (verified where they were read), as the broker reads entries. One loop for the
        whole chunk: an entry that is one message costs a metadata parse and a few appends."""
        values, runs, versions = self.values, self._runs, self._versions
        keys, props, edges, until = self._keys, self._props, self._edges, self.until
        for entry, data in enumerate(datas, first):
            try:
                md, at = entry_metadata(data)
            except RemoteProtocolError as exc:
                raise EntryError(f"entry {ledger}:{entry}: {exc}") from None
            if md.HasField("num_chunks_from_msg"):
                raise ChunkedEntry(ledger, entry)
            publish = md.publish_time
            if until is not None and publish >= until:
                continue
            payload = data[at:]
            if md.compression:
                try:
                    payload = decompress(md.compression, payload, md.uncompressed_size)
                except DecompressionError as exc:
                    raise EntryError(f"entry {ledger}:{entry}: {exc}") from None
            edge = (ledger, entry) in edges
            if md.HasField("num_messages_in_batch"):
                self._add_batch(ledger, entry, md, payload, edge)
                continue
            if edge and not self._takes_whole(ledger, entry):
                continue
            row = len(values)
            values.append(payload)
            self.nbytes += len(payload)
            runs.append((ledger, entry, 1, -1, publish, md.event_time))
            versions.append(md.schema_version)
            if md.HasField("partition_key"):
                keys[row] = md.partition_key.encode()
            if md.properties:
                props[row] = [(kv.key, kv.value) for kv in md.properties]

    def _add_batch(self, ledger: int, entry: int, md: Any, payload: bytes, edge: bool) -> None:
        """The members of one batch entry the read takes, cut by the codec's ``scan_batch``."""
        n = md.num_messages_in_batch
        lo, hi = self._bounds(ledger, entry, n) if edge else (0, n)
        if lo >= hi:
            return
        try:
            spans = scan_batch(payload, n)
        except RemoteProtocolError as exc:
            raise EntryError(f"entry {ledger}:{entry}: {exc}") from None
        row = len(self.values)
        k_lo, k_hi = 3 * lo, 3 * hi
        self.values.extend([payload[spans[k + 1] : spans[k + 2]] for k in range(k_lo, k_hi, 3)])
        self.nbytes += spans[k_hi - 1] - spans[k_lo + 1]
        self._runs.append((ledger, entry, hi - lo, lo, md.publish_time, md.event_time))
        self._versions.append(md.schema_version)
        if max(spans[k_lo:k_hi:3]) < 0:
            return  # plain members: no key, properties or event time of their own
        for i in range(lo, hi):
            start = spans[3 * i]
            if start < 0:
                continue
            smm = _smm(payload[start : spans[3 * i + 1]])
            r = row + i - lo
            if smm.HasField("partition_key"):
                self._keys[r] = smm.partition_key.encode()
            if smm.properties:
                self._props[r] = [(kv.key, kv.value) for kv in smm.properties]
            if smm.event_time:
                self._member_event[r] = smm.event_time

    def _sparse(self, values: dict[int, Any], n: int, kind: Any) -> Any:
        if not values:
            return pa.nulls(n, kind)
        column: list[Any] = [None] * n
        for i, v in values.items():
            column[i] = v
        return pa.array(column, kind)

    def build(self) -> Any:
        """The rows added since the last ``build`` as one ``pyarrow.RecordBatch``."""
        s = self.schema
        n = len(self.values)
        runs = np.array(self._runs, dtype=np.int64).reshape(-1, 6)
        counts = runs[:, 2]
        ledgers = np.repeat(runs[:, 0], counts)
        entries = np.repeat(runs[:, 1], counts)
        run_start = np.zeros(len(counts), dtype=np.int64)
        np.cumsum(counts[:-1], out=run_start[1:])
        first = runs[:, 3]
        batches = np.arange(n, dtype=np.int64) - np.repeat(run_start - first, counts)
        batches[np.repeat(first < 0, counts)] = -1
        publish = np.repeat(runs[:, 4], counts) * 1000
        event = np.repeat(runs[:, 5], counts)
        for r, ms in self._member_event.items():
            event[r] = ms
        id_string = pc.binary_join_element_wise(
            pc.cast(pa.array(ledgers), pa.string()),
            pc.cast(pa.array(entries), pa.string()),
            pc.cast(pa.array(batches), pa.string()),
            ":",
        )
        topic = self.topic.encode()
        topic_offsets = np.arange(n + 1, dtype=np.int32) * len(topic)
        topic_col = pa.Array.from_buffers(
            pa.string(), n, [None, pa.py_buffer(topic_offsets), pa.py_buffer(topic * n)]
        )
        meta = [
            self._sparse(self._keys, n, s.field("__key").type),
            topic_col,
            message_id_bytes(self._runs, self.partition),
            id_string,
            pa.array(publish, s.field("__publishTime").type),
            pa.array(event * 1000, s.field("__eventTime").type, mask=event == 0),
            self._sparse(self._props, n, s.field("__messageProperties").type),
        ]
        if self.typed is None:
            columns = [binary_array(self.values)]
        else:
            run_of_row = np.repeat(np.arange(len(counts)), counts)
            columns = self.typed.decode_column(
                self.values, run_of_row, self._versions, self.writer_of
            )
        batch = pa.RecordBatch.from_arrays([*columns, *meta], schema=s)
        self.clear()
        return batch


def _partition_index(topic: str) -> int:
    """The partition a topic-partition's message ids carry (-1: a non-partitioned topic)."""
    head, sep, tail = topic.rpartition("-partition-")
    return int(tail) if sep and head and tail.isdigit() else -1


__all__ = ["ChunkedEntry", "EntryColumns", "EntryError", "binary_array", "message_id_bytes"]
