"""Planning splits (``splits`` and ``layout``, pure): a topic-partition's range located in its
ledgers, cut into splits that cover it exactly once, in order (one single-partition topic
becomes several tasks), sized by ``maxRecordsPerPartition`` / ``minPartitions`` as Spark's
Kafka source does, with data loss found where the range starts."""

from __future__ import annotations

import json
import pickle
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from magnetar.spark.layout import Fragment, LayoutError, LedgerLayout, PartitionLayout, parse_layout
from magnetar.spark.positions import Position, Start
from magnetar.spark.splits import Located, cut, locate, split_counts

T = "persistent://public/default/t"


def ledger(lid: int, entries: int, size_per_entry: int = 100, closed: bool = True) -> LedgerLayout:
    return LedgerLayout(lid, entries, entries * size_per_entry, closed, 1, (Fragment(0, ("b:1",)),))


def layout(*ledgers: LedgerLayout, mpe: float | None = None) -> PartitionLayout:
    return PartitionLayout(T, ledgers, mpe, False)


def spans(loc: Located) -> list[tuple[int, int, int]]:
    return [(r.ledger.ledger_id, r.first, r.last) for r in loc.ranges]


def test_locate_walks_the_ledgers_between_start_and_end() -> None:
    lay = layout(ledger(3, 10), ledger(5, 0), ledger(7, 20, closed=False))
    assert spans(locate(lay, Start.earliest(), Position(7, 19, -1))) == [(3, 0, 9), (7, 0, 19)]
    # a whole message read last: its entry is done; a batch member: its entry is read again
    assert spans(locate(lay, Start.after(Position(3, 4, -1)), Position(7, 5, 2))) == [
        (3, 5, 9),
        (7, 0, 5),
    ]
    assert spans(locate(lay, Start.after(Position(3, 4, 7)), Position(3, 6, -1))) == [(3, 4, 6)]
    assert spans(locate(lay, Start.at(Position(7, 3, -1)), Position(7, 3, -1))) == [(7, 3, 3)]
    # the last entry of a ledger read: the next ledger from its start
    assert spans(locate(lay, Start.after(Position(3, 9, -1)), Position(7, 1, -1))) == [(7, 0, 1)]


def test_locate_reports_a_start_whose_ledger_is_gone() -> None:
    lay = layout(ledger(8, 5), ledger(9, 5))
    loc = locate(lay, Start.after(Position(4, 2, -1)), Position(9, 4, -1))
    assert loc.lost is not None and "4:2:-1" in loc.lost and "first ledger left is 8" in loc.lost
    assert spans(loc) == [(8, 0, 4), (9, 0, 4)]  # (read from what is left when told to go on)
    # a ledger missing from the middle (it held nothing): not a loss, the read goes on after it
    gap = locate(lay, Start.after(Position(8, 4, -1)), Position(9, 4, -1))
    assert gap.lost is None and spans(gap) == [(9, 0, 4)]


def test_split_counts_follow_kafka_options_and_a_byte_bound() -> None:
    big = locate(layout(ledger(1, 10_000)), Start.earliest(), Position(1, 9_999, -1))
    small = locate(layout(ledger(2, 100)), Start.earliest(), Position(2, 99, -1))
    # 10,000 entries x 100 messages each, at most 100,000 messages a split: 10 splits
    assert split_counts([(big, 100.0)], max_records_per_partition=100_000, min_partitions=None) == [
        10
    ]
    # minPartitions: shared by size (Spark's KafkaOffsetRangeCalculator), one at least each
    assert split_counts(
        [(big, 1.0), (small, 1.0)], max_records_per_partition=None, min_partitions=8
    ) == [8, 1]
    # neither: the byte bound (1 MB entries here: 32 MiB a split at most)
    assert split_counts(
        [(big, 1.0)], max_records_per_partition=None, min_partitions=None, split_bytes_max=1 << 25
    ) == [1]
    assert split_counts([(big, 1.0)], max_records_per_partition=None, min_partitions=None,
                        split_bytes_max=100_000) == [10]  # fmt: skip
    # never more splits than entries; an empty range none
    empty = Located(())
    assert split_counts(
        [(small, 1.0), (empty, 1.0)], max_records_per_partition=1, min_partitions=None
    ) == [100, 0]


def test_one_ledger_is_cut_by_entries_and_small_ledgers_share_a_split() -> None:
    one = locate(layout(ledger(1, 1000)), Start.earliest(), Position(1, 999, -1))
    assert [[(r.first, r.last) for r in s] for s in cut(one, 4)] == [
        [(0, 249)],
        [(250, 499)],
        [(500, 749)],
        [(750, 999)],
    ]
    many = locate(
        layout(ledger(1, 10), ledger(2, 10), ledger(3, 10), ledger(4, 50)),
        Start.earliest(),
        Position(4, 49, -1),
    )
    got = [[(r.ledger.ledger_id, r.first, r.last) for r in s] for s in cut(many, 2)]
    assert got == [[(1, 0, 9), (2, 0, 9), (3, 0, 9)], [(4, 0, 24)], [(4, 25, 49)]]


@settings(max_examples=200, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 300), min_size=1, max_size=8),
    n=st.integers(1, 40),
    data=st.data(),
)
def test_splits_cover_the_range_exactly_once_in_order(sizes: list[int], n: int, data: Any) -> None:
    lay = layout(*(ledger(i + 1, k) for i, k in enumerate(sizes)))
    held = [(led.ledger_id, e) for led in lay.ledgers for e in range(led.entries)]
    if not held:
        return
    a = data.draw(st.integers(0, len(held) - 1))
    b = data.draw(st.integers(a, len(held) - 1))
    start = Start.at(Position(*held[a], -1)) if a else Start.earliest()
    loc = locate(lay, start, Position(*held[b], -1))
    covered = [
        (r.ledger.ledger_id, e) for s in cut(loc, n) for r in s for e in range(r.first, r.last + 1)
    ]
    assert covered == held[a : b + 1]
    assert len(cut(loc, n)) <= max(n, len(sizes)) + len(sizes)


def test_layout_from_the_admin_document() -> None:
    doc = {
        "lastConfirmedEntry": "4:9",
        "messagesPerEntry": 250.0,
        "bookieTls": True,
        "ledgers": [
            {
                "ledgerId": 4,
                "entries": 10,
                "size": 5000,
                "state": "CLOSED",
                "ensembleSize": 3,
                "writeQuorum": 2,
                "ackQuorum": 2,
                "lastEntryId": 9,
                "length": 4000,
                "ensembles": [
                    {"firstEntryId": 0, "bookies": ["a:1", "b:1"]},
                    {"firstEntryId": 6, "bookies": ["a:1", "c:1", "d:1"]},
                ],
            }
        ],
    }
    lay = parse_layout(T, doc)
    led = lay.ledgers[0]
    assert (lay.messages_per_entry, lay.bookie_tls) == (250.0, True)
    assert led.closed and led.entry_bytes == 500 and led.striped
    assert (led.ensemble_size, led.ack_quorum, led.last_entry_id, led.length) == (3, 2, 9, 4000)
    assert led.fragments[1] == Fragment(6, ("a:1", "c:1", "d:1"))


RECORD = {
    "ledgerId": 3,
    "uid": "0f1e2d3c-0000-4000-8000-000000000001",
    "driverName": "S3",
    "driverMetadata": {"managedLedgerOffloadDriver": "S3", "bucket": "b", "region": "r"},
    "dataKey": "k",
    "indexKey": "k-index",
    "lastEntryId": 39,
    "length": 8000,
}


def test_offloaded_ledgers_carry_their_record() -> None:
    """A ledger offloaded and deleted from the bookies has no fragments but its record; one
    offloaded and still on the bookies has both; an offload in progress is neither."""
    on_bookies = {
        "ledgerId": 4,
        "entries": 40,
        "size": 8000,
        "state": "CLOSED",
        "writeQuorum": 1,
        "lastEntryId": 39,
        "length": 8000,
        "ensembles": [{"firstEntryId": 0, "bookies": ["a:1"]}],
    }
    doc = {
        "ledgers": [
            {
                "ledgerId": 3,
                "entries": 40,
                "size": 8000,
                "state": "CLOSED",
                "lastEntryId": 39,
                "length": 8000,
                "ensembles": [],
                "offloaded": True,
                "bookkeeperDeleted": True,
                "offloadContext": {"complete": True, "record": RECORD},
            },
            {
                **on_bookies,
                "offloaded": True,
                "offloadContext": {"complete": True, "record": {**RECORD, "ledgerId": 4}},
            },
            {
                **on_bookies,
                "ledgerId": 5,
                "offloaded": False,
                "offloadContext": {"complete": False},
            },
        ]
    }
    deleted, both, moving = parse_layout(T, doc).ledgers
    assert not deleted.on_bookies and deleted.closed and deleted.fragments == ()
    assert (deleted.entries, deleted.last_entry_id, deleted.length) == (40, 39, 8000)
    assert deleted.offload is not None and json.loads(deleted.offload) == RECORD
    assert both.on_bookies and both.offload is not None
    assert json.loads(both.offload)["ledgerId"] == 4
    assert moving.on_bookies and moving.offload is None
    assert pickle.loads(pickle.dumps(deleted)) == deleted  # it travels in a split


@pytest.mark.parametrize(
    "doc",
    [
        {"reason": "Topic not found"},
        {
            "ledgers": [
                {
                    "ledgerId": 3,
                    "entries": 1,
                    "size": 1,
                    "state": "CLOSED",
                    "lastEntryId": 0,
                    "length": 1,
                    "ensembles": [],
                    "bookkeeperDeleted": True,
                }
            ]
        },
        {
            "ledgers": [
                {
                    "ledgerId": 3,
                    "entries": 1,
                    "size": 1,
                    "state": "CLOSED",
                    "lastEntryId": 0,
                    "length": 1,
                    "ensembles": [],
                    "offloaded": True,
                    "offloadContext": {"complete": True},
                }
            ]
        },
        {"ledgers": [{"ledgerId": 1, "entries": 1, "size": 1, "writeQuorum": 1, "ensembles": []}]},
        {
            "ledgers": [
                {
                    "ledgerId": 1,
                    "entries": 1,
                    "size": 1,
                    "writeQuorum": 2,
                    "ensembles": [{"firstEntryId": 0, "bookies": ["a:1"]}],
                }
            ]
        },
    ],
)
def test_a_document_that_is_not_a_layout_is_refused(doc: Any) -> None:
    with pytest.raises(LayoutError):
        parse_layout(T, doc)
