"""Runs of plain entries of one size and one metadata layout, read as columns at once.

Owns: ``uniform_plain``, which decides whether the stored entries ``data[starts[i]:ends[i]]``
of a run laid out at one stride (``range`` starts and ends: what a packed read of equal-length
entries gives) are plain messages whose metadata all have the first entry's layout (the same
fields in the same order, each varint and each string of the same length), and
if so gives their publish times (a numpy column) and where their payloads start. Such a run
is what a producer of unbatched messages of one size writes (a sink's rows, a schema's
fixed-size records), and reading it entry by entry in Python cost about two µs a row; here
every check and the publish-time decoding are numpy operations over the run's columns.

A run is taken only if every entry has the checksum header (``0x0e01``, crc32c: the storage
verified its own checksum of the bytes already, as ``entries_metadata`` trusts it), one
metadata size, and a metadata of the fields ``EntriesMetadata.plain`` allows (producer name,
sequence id, publish time, replication names, uncompressed size, highest sequence id), the
three required ones once each. Anything else returns None and the run goes the general way.

Must not know: bookies, Spark, Arrow.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

_MAGIC = b"\x0e\x01"
_META_AT = 10
"""Checksum header (magic, crc32c) and the metadata size: where the metadata starts."""
_PLAIN = frozenset({1, 2, 3, 5, 7, 9, 24})
"""``PlainMetadataColumns``' fields: producer_name, sequence_id, publish_time,
replicated_from, replicate_to, uncompressed_size, highest_sequence_id."""
_REQUIRED = (1, 2, 3)
_STRINGS = frozenset({1, 5, 7})
_PUBLISH_TIME = 3


class UniformRun(NamedTuple):
    publish_times: np.ndarray
    """int64, one per entry."""
    payload_starts: range
    """Where each entry's payload starts (it ends where the entry ends)."""


class _Field(NamedTuple):
    number: int
    tag_at: int
    value_at: int
    end: int
    varint: bool
    length_bytes: int = 0
    """A string's: the bytes of its length prefix."""


def uniform_plain(data: bytes, starts: range, ends: range) -> UniformRun | None:
    """The run's publish times and payload starts, or None when the entries are not plain
    entries of one layout (module docstring)."""
    k = len(starts)
    step = starts.step
    if k == 0 or len(ends) != k or ends.step != step or step <= 0:
        return None
    first = starts.start
    size = ends.start - first
    if size < _META_AT or not data.startswith(_MAGIC, first):
        return None
    meta_size = int.from_bytes(data[first + 6 : first + _META_AT], "big")
    if _META_AT + meta_size > size:
        return None
    layout = _layout(data[first + _META_AT : first + _META_AT + meta_size])
    if layout is None:
        return None
    width = _META_AT + meta_size
    rows = np.ndarray((k, width), np.uint8, data, first, (step, 1))
    # one masked comparison checks every row: the columns equal in all of them (magic,
    # metadata size, tags, string lengths) whole, and each varint's continuation bits (all
    # of its bytes but the last continue: the same length)
    mask = np.zeros(width, np.uint8)
    want = np.zeros(width, np.uint8)
    mask[:2] = mask[6:_META_AT] = 0xFF  # magic and metadata size
    publish: tuple[int, int] | None = None
    for field in layout:
        a, b, e = _META_AT + field.tag_at, _META_AT + field.value_at, _META_AT + field.end
        mask[a:b] = 0xFF  # the tag
        if field.varint:
            mask[b:e] = 0x80
            want[b : e - 1] = 0x80
            if field.number == _PUBLISH_TIME:
                publish = (b, e)
        else:  # the length prefix; the text may differ (producers' names, say)
            mask[b : b + field.length_bytes] = 0xFF
    whole = mask == 0xFF
    want[whole] = rows[0][whole]
    if publish is None or not (np.bitwise_and(rows, mask) == want).all():
        return None
    times = _varints(rows[:, publish[0] : publish[1]])
    payload_at = first + _META_AT + meta_size
    return UniformRun(times, range(payload_at, payload_at + k * step, step))


_EXACT_BYTES = 7
"""Varints of up to this many bytes (49 bits) are summed in float64 exactly."""
_WEIGHTS = 128.0 ** np.arange(_EXACT_BYTES)


def _varints(body: np.ndarray) -> np.ndarray:
    """The values of varints of ``body.shape[1]`` bytes each, one per row (at most 63 bits:
    publish times; up to ``_EXACT_BYTES``, one matrix product)."""
    width = body.shape[1]
    groups = body & 0x7F
    if width <= _EXACT_BYTES:
        return (groups.astype(np.float64) @ _WEIGHTS[:width]).astype(np.int64)
    out = np.zeros(len(body), dtype=np.uint64)
    for j in range(min(width, 9)):
        out |= groups[:, j].astype(np.uint64) << np.uint64(7 * j)
    return out.astype(np.int64)


def _layout(meta: bytes) -> list[_Field] | None:
    """The fields of one serialised ``MessageMetadata`` in order, if it is a plain one whose
    varints and strings are all there is to it; else None."""
    fields: list[_Field] = []
    pos, n = 0, len(meta)
    while pos < n:
        tag_at = pos
        key, pos = _varint(meta, pos)
        if key is None:
            return None
        number, wire = key >> 3, key & 7
        if number not in _PLAIN:
            return None
        value_at = pos
        if wire == 0 and number not in _STRINGS:
            value, pos = _varint(meta, pos)
            if value is None:
                return None
            fields.append(_Field(number, tag_at, value_at, pos, True))
        elif wire == 2 and number in _STRINGS:
            length, at = _varint(meta, pos)
            if length is None or at + length > n:
                return None
            pos = at + length
            fields.append(_Field(number, tag_at, value_at, pos, False, at - value_at))
        else:
            return None
    numbers = [f.number for f in fields]
    if any(numbers.count(r) != 1 for r in _REQUIRED):
        return None
    return fields


def _varint(data: bytes, pos: int) -> tuple[int | None, int]:
    result = shift = 0
    for i in range(pos, min(pos + 10, len(data))):
        b = data[i]
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, i + 1
        shift += 7
    return None, pos


__all__ = ["UniformRun", "uniform_plain"]
