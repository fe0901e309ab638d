"""Location index (segments in RocksDB, tmp dir) against a dict model: overlapping rewrites,
gaps, long runs, ledger deletion, ledger table, log maps and the checkpoint mark."""

from __future__ import annotations

import pathlib
import random

from magnetar.bookie.index import SEGMENT_ENTRIES_MAX, BookieIndex, LedgerRecord


def check(index: BookieIndex, model: dict[int, dict[int, int]], ledgers: range) -> None:
    for lid in ledgers:
        entries = model.get(lid, {})
        assert index.ledger_locations(lid) == entries
        last = index.last_entry(lid)
        if entries:
            top = max(entries)
            assert last == (top, entries[top])
        else:
            assert last is None
        for e in range(-1 if not entries else 0, (max(entries) if entries else 0) + 3):
            if e < 0:
                continue
            assert index.get_location(lid, e) == entries.get(e), (lid, e)


def test_segments_match_a_dict_model_under_random_overlapping_writes(
    tmp_path: pathlib.Path,
) -> None:
    rng = random.Random(7)
    index = BookieIndex(str(tmp_path / "index"))
    model: dict[int, dict[int, int]] = {}
    loc = 1
    try:
        for round_ in range(60):
            batch = index.batch()
            for lid in rng.sample(range(1, 6), 3):
                start = rng.randrange(0, 300)
                kind = rng.random()
                if kind < 0.4:  # contiguous run
                    ids = list(range(start, start + rng.randrange(1, 80)))
                elif kind < 0.8:  # striping-like gaps
                    step = rng.choice([2, 3])
                    ids = list(range(start, start + rng.randrange(1, 200), step))
                else:  # sparse, with holes larger than a segment's gap limit
                    ids = sorted(rng.sample(range(start, start + 2000), rng.randrange(1, 20)))
                locs = []
                for _ in ids:
                    locs.append(loc)
                    loc += 1
                batch.put_entries(lid, ids, locs)
                model.setdefault(lid, {}).update(zip(ids, locs, strict=True))
            if round_ == 30:
                batch.delete_ledger(2)
                model.pop(2, None)
            index.commit(batch, sync=False)
            if round_ == 30:
                model.pop(2, None)
            if round_ % 10 == 9:
                check(index, model, range(7))
        check(index, model, range(7))
    finally:
        index.close()


def test_long_run_splits_and_everything_survives_reopen(tmp_path: pathlib.Path) -> None:
    path = str(tmp_path / "index")
    index = BookieIndex(path)
    n = SEGMENT_ENTRIES_MAX * 2 + 5
    batch = index.batch()
    batch.put_entries(9, list(range(n)), [1000 + i for i in range(n)])
    batch.put_ledger(LedgerRecord(9, b"key", fenced=True, explicit_lac=41))
    batch.put_log_map(3, {9: 12345})
    batch.put_mark(b"0123456789abcdef")
    index.commit(batch)
    assert batch.count >= 3 + 3  # three segments
    index.close()
    index = BookieIndex(path)
    try:
        assert index.get_location(9, n - 1) == 1000 + n - 1
        assert index.get_location(9, SEGMENT_ENTRIES_MAX) == 1000 + SEGMENT_ENTRIES_MAX
        assert index.get_location(9, n) is None
        assert index.last_entry(9) == (n - 1, 1000 + n - 1)
        assert index.ledgers() == [LedgerRecord(9, b"key", True, 41)]
        assert index.log_maps() == {3: {9: 12345}}
        assert index.get_mark() == b"0123456789abcdef"
    finally:
        index.close()
