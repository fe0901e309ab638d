"""``spark.uniform``: runs of plain entries of one size and one metadata layout read as
columns at once, and ``EntryColumns`` taking such runs (``range`` offsets, as a packed read
of equal-length entries gives them) with the rows the per-message path makes.

The reference is the codec's ``entries_metadata``: wherever ``uniform_plain`` takes a run,
its publish times and payload starts are the codec's; wherever the entries are not plain or
do not share one layout, it declines (None) and the run goes the general way."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_spark_columns import LEDGER, TOPIC, by_messages

from magnetar.client.protocol import encode_headers_and_payload, entries_metadata, pb
from magnetar.spark import columns as columns_module
from magnetar.spark.columns import EntryColumns
from magnetar.spark.layout import Fragment, LedgerLayout, PartitionLayout
from magnetar.spark.positions import Position, Start
from magnetar.spark.splits import locate
from magnetar.spark.uniform import uniform_plain

GAP = 12  # a storage framing before each entry, as BookKeeper's


def laid_out(data: list[bytes]) -> tuple[bytes, range, range]:
    size = len(data[0])
    assert all(len(d) == size for d in data)
    buf = b"".join(b"\xee" * GAP + d for d in data)
    stride = GAP + size
    return buf, range(GAP, len(buf), stride), range(GAP + size, len(buf) + 1, stride)


def md(seq: int, **fields: Any) -> pb.MessageMetadata:
    return pb.MessageMetadata(
        producer_name="p", sequence_id=seq, publish_time=1_700_000_000_000 + seq, **fields
    )


def uniform_entries(n: int, first_seq: int = 200) -> list[bytes]:
    return [encode_headers_and_payload(md(first_seq + i), b"v%04d" % i) for i in range(n)]


def test_a_plain_run_of_one_layout_is_the_codec_s() -> None:
    data = uniform_entries(50)
    # another producer's entry among them, a name of the same length (concurrent writers)
    data[7] = encode_headers_and_payload(
        pb.MessageMetadata(producer_name="q", sequence_id=300, publish_time=1_700_000_000_300),
        b"w0007",
    )
    buf, starts, ends = laid_out(data)
    got = uniform_plain(buf, starts, ends)
    want = entries_metadata(buf, starts, ends)
    assert got is not None and want.plain
    assert got.publish_times.tolist() == want.publish_times
    assert list(got.payload_starts) == want.payload_starts


@settings(max_examples=120, deadline=None)
@given(
    st.lists(st.integers(0, (1 << 63) - 1), min_size=1, max_size=40),
    st.sampled_from([{}, {"uncompressed_size": 7}, {"replicated_from": "east"}]),
    st.integers(0, 2),
)
def test_wherever_it_takes_a_run_it_agrees_with_the_codec(
    times: list[int], extra: dict[str, Any], width: int
) -> None:
    data = [
        encode_headers_and_payload(
            pb.MessageMetadata(producer_name="pr", sequence_id=i, publish_time=t, **extra),
            b"x" * width,
        )
        for i, t in enumerate(times)
    ]
    if len({len(d) for d in data}) != 1:
        return  # not one size: never laid out as ranges
    buf, starts, ends = laid_out(data)
    got = uniform_plain(buf, starts, ends)
    want = entries_metadata(buf, starts, ends)
    if got is None:  # varints of another length somewhere: declined, never wrong
        return
    assert got.publish_times.tolist() == want.publish_times
    assert list(got.payload_starts) == want.payload_starts


@pytest.mark.parametrize(
    "variant",
    ["key", "properties", "event_time", "batch", "producer", "shifted_varint", "no_checksum"],
)
def test_runs_that_are_not_plain_or_not_of_one_layout_are_declined(variant: str) -> None:
    data = uniform_entries(8)
    if variant == "key":
        data[5] = encode_headers_and_payload(md(205, partition_key="k"), b"v5")
    elif variant == "properties":
        data = [
            encode_headers_and_payload(
                md(200 + i, properties=[pb.KeyValue(key="a", value="")]), b"v"
            )
            for i in range(8)
        ]
    elif variant == "event_time":
        data = [encode_headers_and_payload(md(200 + i, event_time=5), b"v%d" % i) for i in range(8)]
    elif variant == "batch":
        data = [
            encode_headers_and_payload(md(200 + i, num_messages_in_batch=1), b"%d" % i)
            for i in range(8)
        ]
    elif variant == "producer":  # a longer name, a shorter payload: the same size
        data[5] = encode_headers_and_payload(
            pb.MessageMetadata(producer_name="pq", sequence_id=205, publish_time=1_700_000_000_205),
            b"v005",
        )
    elif variant == "shifted_varint":  # sequence id 127 -> 128 takes a byte from the payload
        data = [
            encode_headers_and_payload(md(seq), b"v" * (5 if seq < 128 else 4))
            for seq in range(120, 128 + 8)
        ]
    else:
        data = [
            encode_headers_and_payload(md(200 + i), b"v%04d" % i, checksum=False) for i in range(8)
        ]
    buf, starts, ends = laid_out(data)
    assert uniform_plain(buf, starts, ends) is None
    if variant in {"producer", "shifted_varint", "no_checksum"}:  # still plain: the codec's way
        assert entries_metadata(buf, starts, ends).plain


def _by_ranges(data: list[bytes], start: Start, end: Position, until: int | None = None) -> Any:
    """The entries the planner gives a task (``splits.locate``), each range laid out as a
    packed read of equal-length entries gives them."""
    ledger = LedgerLayout(LEDGER, len(data), 100, True, 1, (Fragment(0, ("b:1",)),))
    located = locate(PartitionLayout(TOPIC, (ledger,), None, False), start, end)
    cols = EntryColumns(TOPIC, start, end, ending_time_ms=until)
    for r in located.ranges:
        first, last = r.first, min(r.last, len(data) - 1)
        buf, starts, ends = laid_out(data[first : last + 1])
        cols.add_run(LEDGER, first, buf, starts, ends)
    return cols.build()


@pytest.mark.parametrize(
    ("start", "end", "until"),
    [
        (Start.earliest(), Position(LEDGER, 1 << 40, -1), None),
        (Start.after(Position(LEDGER, 3, -1)), Position(LEDGER, 8, -1), None),
        (Start.earliest(), Position(LEDGER, 1 << 40, -1), 1_700_000_000_000 + 206),
    ],
)
def test_a_uniform_run_makes_the_rows_the_per_message_path_makes(
    monkeypatch: pytest.MonkeyPatch, start: Start, end: Position, until: int | None
) -> None:
    data = uniform_entries(11)

    def general_way(*args: Any) -> Any:
        raise AssertionError("a uniform run went the general way")

    monkeypatch.setattr(columns_module, "entries_metadata", general_way)
    got = _by_ranges(data, start, end, until)
    monkeypatch.undo()
    want = by_messages(data, start, end)
    if until is not None:
        keep = [t < until * 1000 for t in want.column("__publishTime").cast("int64").to_pylist()]
        want = want.filter(keep)
    assert got.schema == want.schema
    for name in got.schema.names:
        assert got.column(name).to_pylist() == want.column(name).to_pylist(), name


def test_a_declined_run_in_ranges_still_makes_the_same_rows() -> None:
    data = uniform_entries(8)
    data[5] = encode_headers_and_payload(md(205, partition_key="k"), b"v5")
    everything = (Start.earliest(), Position(LEDGER, 1 << 40, -1))
    got, want = _by_ranges(data, *everything), by_messages(data, *everything)
    for name in got.schema.names:
        assert got.column(name).to_pylist() == want.column(name).to_pylist(), name
