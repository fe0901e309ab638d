"""Stored entries into Arrow record batches, in bulk: what a reading task yields to Spark.

Owns: ``EntryColumns``, which takes runs of whole stored entries (the bytes a broker stores
per entry: checksum, ``MessageMetadata``, payload) as storage reads them, one buffer and the
entries' offsets in it (``add_run``), and builds the source's columns (``rows.arrow_schema``
or a schema'd topic's value columns, then the metadata columns) without a Python object per
message: the entries' metadata parsed together by the codec's ``entries_metadata``
(checksums are the storage's); a run of plain messages (no key, properties, batch,
compression, event time: ``EntriesMetadata.plain``) is taken whole, its per-row columns
extended in C; other entries one by one from their parsed metadata, a batch payload cut by
the codec's ``plain_runs`` (members that carry nothing but their size and sequence id, as
batching producers write them, found in runs of members alike: never parsed, their values
copied out a run at a time) or else ``scan_batch``; payloads sliced and joined into one Arrow
buffer (``binary_array``), and the per-row columns (ids, times) computed with numpy: the
``__messageId`` bytes and ``__messageIdString`` text of every row at once
(``message_ids``). Typed (schema'd) topics
decode a whole batch's payloads per writer schema at once (``TopicSchema.decode_column``).

Which messages of an entry are taken: those after/at the read's ``start`` and up to its
``end`` (only the first and last entries of a read hold others), published before
``ending_time_ms`` when set; none of a marker (an entry brokers write for each other, as
replicated subscriptions do: never delivered, as the broker's cursors skip them). A chunked
message cannot be assembled from one task's entries alone: ``ChunkedEntry`` tells the caller
to read those entries through the broker.

Invariants: the columns of one built batch have equal lengths; rows are in entry order and
member order; a batch holds at most what was added since the last ``build``.

Must not know: bookies, Spark, the network.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import accumulate, repeat
from typing import Any

import numpy as np
import pyarrow as pa

from magnetar.client._compression import DecompressionError, decompress
from magnetar.client.protocol import (
    PlainRun,
    RemoteProtocolError,
    entries_metadata,
    entry_metadata,
    plain_runs,
    scan_batch,
)
from magnetar.spark.message_ids import message_id_columns
from magnetar.spark.positions import Position, Start, ends_by
from magnetar.spark.rows import arrow_schema
from magnetar.spark.uniform import uniform_plain

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


class _Spans:
    """Values that are slices of one buffer: ``data[starts[i]:ends[i]]`` (disjoint, in
    order)."""

    __slots__ = ("data", "ends", "starts")

    def __init__(self, data: bytes, starts: Sequence[int], ends: Sequence[int]) -> None:
        self.data = data
        self.starts = starts
        self.ends = ends

    def array(self) -> Any:
        """The values as an Arrow binary array, picked out of the buffer in C++: the buffer
        seen as an array whose elements are the spans and the gaps between them (offsets
        ``s0, e0, s1, e1, ...``), of which every other element is taken."""
        n = len(self.starts)
        if n == 0:
            return pa.array([], pa.binary())
        offsets = np.empty(2 * n, dtype=np.int64)
        offsets[0::2] = self.starts
        offsets[1::2] = self.ends
        kind, width = (
            (pa.binary(), np.int32) if len(self.data) < 1 << 31 else (pa.large_binary(), np.int64)
        )
        whole = pa.Array.from_buffers(
            kind, 2 * n - 1, [None, pa.py_buffer(offsets.astype(width)), pa.py_buffer(self.data)]
        )
        return whole.take(pa.array(np.arange(0, 2 * n, 2, dtype=np.int64))).cast(pa.binary())

    def values(self) -> list[bytes]:
        data = self.data
        return list(map(data.__getitem__, map(slice, self.starts, self.ends)))


class _Block:
    """Values copied out of a buffer together, one after the other: ``data`` and each
    value's length."""

    __slots__ = ("data", "lengths")

    def __init__(self, data: bytes, lengths: Any) -> None:
        self.data = data
        self.lengths = lengths

    @staticmethod
    def array_of(blocks: list[_Block]) -> Any:
        """Consecutive blocks as one Arrow binary array."""
        lengths = np.concatenate([b.lengths for b in blocks])
        data = blocks[0].data if len(blocks) == 1 else b"".join(b.data for b in blocks)
        offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        if len(data) >= 1 << 31:
            return pa.Array.from_buffers(
                pa.large_binary(), len(lengths), [None, pa.py_buffer(offsets), pa.py_buffer(data)]
            ).cast(pa.binary())
        return pa.Array.from_buffers(
            pa.binary(),
            len(lengths),
            [None, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(data)],
        )

    def values(self) -> list[bytes]:
        ends = np.cumsum(self.lengths).tolist()
        return list(map(self.data.__getitem__, map(slice, [0, *ends[:-1]], ends)))


class _Values:
    """The value column of a batch being built: ``bytes`` (decompressed payloads, batch
    members), spans of read buffers (plain messages: no bytes object per row) and blocks of
    values copied out together (the plain members of batches)."""

    def __init__(self) -> None:
        self._segments: list[list[bytes] | _Spans | _Block] = []
        self._loose: list[bytes] | None = None
        self._rows = 0

    def __len__(self) -> int:
        return self._rows

    def append(self, value: bytes) -> None:
        self.extend([value])

    def extend(self, values: list[bytes]) -> None:
        if self._loose is None:
            self._loose = []
            self._segments.append(self._loose)
        self._loose.extend(values)
        self._rows += len(values)

    def add_spans(self, data: bytes, starts: Sequence[int], ends: Sequence[int]) -> None:
        self._segments.append(_Spans(data, starts, ends))
        self._loose = None
        self._rows += len(starts)

    def add_block(self, data: bytes, lengths: Any) -> None:
        self._segments.append(_Block(data, lengths))
        self._loose = None
        self._rows += len(lengths)

    def as_list(self) -> list[bytes]:
        out: list[bytes] = []
        for seg in self._segments:
            out.extend(seg if isinstance(seg, list) else seg.values())
        return out

    def array(self) -> Any:
        """The values as one Arrow binary array (consecutive blocks as one)."""
        if all(isinstance(seg, list) for seg in self._segments):
            return binary_array(self.as_list())
        parts: list[Any] = []
        blocks: list[_Block] = []
        for seg in self._segments:
            if isinstance(seg, _Block):
                blocks.append(seg)
                continue
            if blocks:
                parts.append(_Block.array_of(blocks))
                blocks = []
            parts.append(binary_array(seg) if isinstance(seg, list) else seg.array())
        if blocks:
            parts.append(_Block.array_of(blocks))
        return parts[0] if len(parts) == 1 else pa.concat_arrays(parts)


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
        self.values = _Values()
        self.nbytes = 0
        """Bytes held for the batch: payloads copied, and whole read buffers whose spans
        are values (what bounds a task's memory)."""
        # one item per entry taken (its rows are consecutive): ledger, entry, rows, batch
        # index of the first row (-1: not a batch), publish time, event time; entries taken
        # one by one go to these lists, plain runs to blocks of numpy columns (``_blocks``,
        # in order with the lists flushed into them: ``_flush``)
        self._ledgers: list[int] = []
        self._entries: list[int] = []
        self._counts: list[int] = []
        self._firsts: list[int] = []
        self._publish: list[int] = []
        self._event: list[int] = []
        self._blocks: list[tuple[Any, ...]] = []
        self._versions: list[bytes] = []  # per entry: the schema version that wrote it
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
        self.add_run(ledger, entry, data, [0], [len(data)])

    def add_entries(self, ledger: int, first: int, datas: Sequence[bytes]) -> None:
        """``add_run`` of entries given one by one."""
        ends = list(accumulate(map(len, datas)))
        self.add_run(ledger, first, b"".join(datas), [0, *ends[:-1]], ends)

    def add_run(
        self, ledger: int, first: int, data: bytes, starts: Sequence[int], ends: Sequence[int]
    ) -> None:
        """Take the messages of consecutive stored entries ``first``, ``first + 1``, ...,
        entry ``first + i`` being ``data[starts[i]:ends[i]]`` (``EntryError`` when one does
        not decode). Their checksums are the storage's (verified where they were read), as
        the broker reads entries. A run of plain messages is taken whole (its values spans
        of ``data``, its per-row columns numpy arrays); other entries one by one from their
        parsed metadata."""
        if not len(starts):
            return
        if type(starts) is range and type(ends) is range:
            uniform = uniform_plain(data, starts, ends)
            if uniform is not None:
                self._add_plain(
                    ledger, first, data, uniform.payload_starts, ends, uniform.publish_times
                )
                return
        try:
            mds = entries_metadata(data, starts, ends)
        except RemoteProtocolError:
            raise self._entry_error(ledger, first, data, starts, ends) from None
        if mds.plain:
            self._add_plain(ledger, first, data, mds.payload_starts, ends, mds.publish_times)
            return
        values, versions = self.values, self._versions
        keys, props, edges, until = self._keys, self._props, self._edges, self.until
        payload_starts = mds.payload_starts
        for i, md in enumerate(mds.metadata):
            entry = first + i
            if md.marker_type:
                continue  # a marker: brokers write them for each other, never delivered
            if md.HasField("num_chunks_from_msg"):
                raise ChunkedEntry(ledger, entry)
            publish = md.publish_time
            if until is not None and publish >= until:
                continue
            payload = data[payload_starts[i] : ends[i]]
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
            self._run(ledger, entry, 1, -1, publish, md.event_time)
            versions.append(md.schema_version)
            if md.HasField("partition_key"):
                keys[row] = md.partition_key.encode()
            if md.properties:
                props[row] = [(kv.key, kv.value) for kv in md.properties]

    def _add_plain(  # noqa: PLR0917 (a run's buffer and offsets)
        self,
        ledger: int,
        first: int,
        data: bytes,
        payload_starts: Sequence[int],
        ends: Sequence[int],
        publish: Sequence[int] | np.ndarray,
    ) -> None:
        """A run of plain messages: each entry one row, nothing of its own but its payload and
        publish time."""
        take = self._plain_taken(ledger, first, publish)
        if take is None:
            entries = np.arange(first, first + len(publish), dtype=np.int64)
        else:  # the read's edges or its ending time leave some out
            payload_starts = [payload_starts[i] for i in take]
            ends = [ends[i] for i in take]
            publish = [publish[i] for i in take]
            entries = np.array(take, dtype=np.int64) + first
        k = len(entries)
        if type(payload_starts) is range and type(ends) is range:
            self.values.add_block(*_strided_copy(data, payload_starts, ends))
        else:
            self.values.add_spans(data, payload_starts, ends)
        self.nbytes += len(data)
        self._flush()
        ones = np.ones(k, dtype=np.int64)
        self._blocks.append(
            (
                np.full(k, ledger, dtype=np.int64),
                entries,
                ones,
                -ones,
                np.asarray(publish, dtype=np.int64),
                np.zeros(k, dtype=np.int64),
            )
        )
        self._versions.extend(repeat(b"", k))

    def _flush(self) -> None:
        """The entries taken one by one since the last block, as a block."""
        if not self._counts:
            return
        self._blocks.append(
            tuple(
                np.array(column, dtype=np.int64)
                for column in (
                    self._ledgers,
                    self._entries,
                    self._counts,
                    self._firsts,
                    self._publish,
                    self._event,
                )
            )
        )
        for column in (
            self._ledgers,
            self._entries,
            self._counts,
            self._firsts,
            self._publish,
            self._event,
        ):
            column.clear()

    def _plain_taken(
        self, ledger: int, first: int, publish: Sequence[int] | np.ndarray
    ) -> list[int] | None:
        """The entries of a plain run the read takes (None: all of them)."""
        last = first + len(publish) - 1
        drop = {
            e - first
            for lid, e in self._edges
            if lid == ledger and first <= e <= last and not self._takes_whole(ledger, e)
        }
        until = self.until
        if until is not None:
            drop.update(i for i, t in enumerate(publish) if t >= until)
        if not drop:
            return None
        return [i for i in range(len(publish)) if i not in drop]

    def _run(  # noqa: PLR0917 (one entry's per-row columns)
        self, ledger: int, entry: int, count: int, first: int, publish: int, event: int
    ) -> None:
        self._ledgers.append(ledger)
        self._entries.append(entry)
        self._counts.append(count)
        self._firsts.append(first)
        self._publish.append(publish)
        self._event.append(event)

    @staticmethod
    def _entry_error(
        ledger: int, first: int, data: bytes, starts: Sequence[int], ends: Sequence[int]
    ) -> EntryError:
        """The error of the first entry of a run that does not decode, naming it."""
        for i, (a, b) in enumerate(zip(starts, ends, strict=True)):
            try:
                entry_metadata(data[a:b])
            except RemoteProtocolError as exc:
                return EntryError(f"entry {ledger}:{first + i}: {exc}")
        return EntryError(f"entries {ledger}:{first}..: do not decode")

    def _add_batch(self, ledger: int, entry: int, md: Any, payload: bytes, edge: bool) -> None:
        """The members of one batch entry the read takes, cut by the codec's ``scan_batch``."""
        n = md.num_messages_in_batch
        lo, hi = self._bounds(ledger, entry, n) if edge else (0, n)
        if lo >= hi:
            return
        runs = plain_runs(payload, n)
        if runs is not None:  # plain members (as batching producers write them), found in C
            data, lengths = _copy_runs(payload, runs, lo, hi)
            self.values.add_block(data, lengths)
            self.nbytes += len(data)
            self._run(ledger, entry, hi - lo, lo, md.publish_time, md.event_time)
            self._versions.append(md.schema_version)
            return
        try:
            spans = scan_batch(payload, n)
        except RemoteProtocolError as exc:
            raise EntryError(f"entry {ledger}:{entry}: {exc}") from None
        row = len(self.values)
        k_lo, k_hi = 3 * lo, 3 * hi
        self.values.add_spans(payload, spans[k_lo + 1 : k_hi : 3], spans[k_lo + 2 : k_hi : 3])
        self.nbytes += len(payload)
        self._run(ledger, entry, hi - lo, lo, md.publish_time, md.event_time)
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
        self._flush()
        empty = np.zeros(0, dtype=np.int64)
        by_entry = [
            np.concatenate([block[i] for block in self._blocks]) if self._blocks else empty
            for i in range(6)
        ]
        ledgers, entries, counts, first, publish, event = by_entry
        if len(counts) != n:  # batch members: an entry's columns repeated for its rows
            publish = np.repeat(publish, counts)
            event = np.repeat(event, counts)
        publish = publish * 1000
        for r, ms in self._member_event.items():
            event[r] = ms
        ids, id_string = message_id_columns(ledgers, entries, counts, first, self.partition)
        topic = self.topic.encode()
        topic_offsets = np.arange(n + 1, dtype=np.int32) * len(topic)
        topic_col = pa.Array.from_buffers(
            pa.string(), n, [None, pa.py_buffer(topic_offsets), pa.py_buffer(topic * n)]
        )
        meta = [
            self._sparse(self._keys, n, s.field("__key").type),
            topic_col,
            ids,
            id_string,
            pa.array(publish, s.field("__publishTime").type),
            pa.array(event * 1000, s.field("__eventTime").type, mask=event == 0),
            self._sparse(self._props, n, s.field("__messageProperties").type),
        ]
        if self.typed is None:
            columns = [self.values.array()]
        else:
            run_of_row = np.repeat(np.arange(len(counts)), counts)
            columns = self.typed.decode_column(
                self.values.as_list(), run_of_row, self._versions, self.writer_of
            )
        batch = pa.RecordBatch.from_arrays([*columns, *meta], schema=s)
        self.clear()
        return batch


def _strided_copy(data: bytes, starts: range, ends: range) -> tuple[bytes, Any]:
    """(values, lengths): the spans of one length at one stride copied out together."""
    k = len(starts)
    width = ends.start - starts.start
    rows = np.ndarray((k, width), np.uint8, data, starts.start, (starts.step, 1))
    return rows.tobytes(), np.full(k, width, dtype=np.int64)


def _copy_runs(payload: bytes, runs: list[PlainRun], lo: int, hi: int) -> tuple[bytes, Any]:
    """The payloads of members ``lo .. hi-1`` of a batch cut in ``runs``, copied out one
    after the other (each run one strided numpy copy), and their lengths."""
    buffer = np.frombuffer(payload, dtype=np.uint8)
    chunks: list[bytes] = []
    lengths: list[Any] = []
    member = 0
    for at, stride, size, count in runs:
        a, b = max(lo - member, 0), min(hi - member, count)
        member += count
        if a >= b:
            continue
        rows = np.lib.stride_tricks.as_strided(
            buffer[at + a * stride :], shape=(b - a, size), strides=(stride, 1), writeable=False
        )
        chunks.append(rows.tobytes())
        lengths.append(np.full(b - a, size, dtype=np.int64))
    return b"".join(chunks) if len(chunks) != 1 else chunks[0], np.concatenate(lengths)


def _partition_index(topic: str) -> int:
    """The partition a topic-partition's message ids carry (-1: a non-partitioned topic)."""
    head, sep, tail = topic.rpartition("-partition-")
    return int(tail) if sep and head and tail.isdigit() else -1


__all__ = ["ChunkedEntry", "EntryColumns", "EntryError", "binary_array"]
