"""``message_id_columns`` (an entry's part once, a batch index's part from a table) against
the ids ``MessageId`` makes, row by row, for whole-entry messages and batch members."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from magnetar.client.protocol import MessageId
from magnetar.spark.message_ids import MEMBER_TABLE_MAX, message_id_columns

pytestmark = pytest.mark.unit

entries = st.lists(
    st.tuples(
        st.integers(0, 2**63 - 1),  # ledger
        st.integers(0, 2**63 - 1),  # entry
        st.one_of(st.none(), st.tuples(st.integers(0, 3000), st.integers(1, 5))),  # members
    ),
    min_size=1,
    max_size=20,
)


def _check(rows: list[tuple[int, int, int | None]], partition: int) -> None:
    by_entry: list[list[int]] = []  # ledger, entry, rows, first row's batch index
    for ledger, entry, b in rows:
        if by_entry and by_entry[-1][:2] == [ledger, entry]:
            by_entry[-1][2] += 1
        else:
            by_entry.append([ledger, entry, 1, -1 if b is None else b])
    ids, texts = message_id_columns(
        *(np.array([e[k] for e in by_entry], dtype=np.int64) for k in range(4)), partition
    )
    want = [
        MessageId(ledger, entry, partition, -1 if b is None else b) for ledger, entry, b in rows
    ]
    assert ids.to_pylist() == [m.serialize() for m in want]
    assert texts.to_pylist() == [
        f"{ledger}:{entry}:{-1 if b is None else b}" for ledger, entry, b in rows
    ]


@settings(deadline=None)  # the first call loads Arrow's compute functions
@given(entries, st.sampled_from([-1, 0, 7, 300]))
def test_ids_are_message_id_s(spec: list[tuple[int, int, tuple[int, int] | None]], p: int) -> None:
    rows: list[tuple[int, int, int | None]] = []
    seen = set()
    for ledger, entry, members in spec:
        if (ledger, entry) in seen:
            continue
        seen.add((ledger, entry))
        if members is None:
            rows.append((ledger, entry, None))
        else:
            first, count = members
            rows.extend((ledger, entry, first + i) for i in range(count))
    _check(rows, p)


def test_a_batch_index_past_the_table_is_made_per_row() -> None:
    _check(
        [(5, 6, 0), (5, 7, MEMBER_TABLE_MAX + 3), (5, 7, MEMBER_TABLE_MAX + 4), (5, 8, None)], -1
    )


def test_small_batches_among_whole_entries_are_made_per_row() -> None:
    _check([(1, 2, None), (1, 3, 0), (1, 4, None), (1, 5, None), (1, 6, 3), (1, 6, 4)], 2)


def test_no_rows() -> None:
    ids, texts = message_id_columns([], [], [], [], -1)
    assert len(ids) == len(texts) == 0


@pytest.mark.parametrize("entries", [range(12), range(95, 1005), range(10**12 - 3, 10**12 + 3)])
def test_whole_entries_of_one_ledger_have_their_text_made_at_once(entries: range) -> None:
    _check([(77, e, None) for e in entries], 3)
