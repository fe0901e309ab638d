"""GC: deleted ledgers' bytes are reclaimed (dead logs deleted, sparse logs compacted), live
ledgers stay readable, also after a restart."""

from __future__ import annotations

import pathlib

import pytest
from support.bookie_storage import OpenBookie, add_ok, req

from magnetar.bookie.errors import NoLedger


def log_bytes(ledger_dir: pathlib.Path) -> int:
    return sum(p.stat().st_size for p in ledger_dir.glob("*.log"))


async def test_gc_reclaims_deleted_ledgers_and_keeps_live_data(
    open_bookie: OpenBookie, tmp_path: pathlib.Path
) -> None:
    bookie = await open_bookie(entry_log_size_max=256 * 1024)
    payload = {lid: bytes([lid]) * 1500 for lid in (1, 2, 3)}
    # Log 1: ledgers 2 and 3 (one sorted flush), then the start of ledger 1; ledger 1 then
    # fills log 2 alone and goes on in log 3 (the current log).
    await add_ok(bookie, [req(lid, e, payload[lid]) for e in range(40) for lid in (2, 3)])
    await bookie.checkpoint()
    await add_ok(bookie, [req(1, e, payload[1]) for e in range(200)])
    await bookie.checkpoint()
    ledger_dir = tmp_path / "ledgers"
    before = log_bytes(ledger_dir)
    candidates = bookie.local_ledger_ids()
    assert candidates == {1, 2, 3}
    result = await bookie.collect_garbage(live_ledger_ids={3}, candidates=candidates)
    after = log_bytes(ledger_dir)
    assert set(result.deleted_ledgers) == {1, 2}
    assert result.deleted_logs, "logs holding only dead ledgers are deleted"
    assert result.compacted_logs, "the log shared by 2 (dead) and 3 (live) is compacted"
    assert result.reclaimed_bytes > 100 * 1500
    assert result.written_bytes > 0
    assert before - after == result.reclaimed_bytes
    with pytest.raises(NoLedger):
        await bookie.read_entry(1, 0)
    got = await bookie.read_range(3, 0, 39, 1 << 20)
    assert [e.payload for e in got] == [payload[3]] * 40
    await bookie.close()
    bookie = await open_bookie(entry_log_size_max=256 * 1024)
    assert bookie.local_ledger_ids() == {3}
    bookie.storage.read_cache.clear()
    got = await bookie.read_range(3, 0, 39, 1 << 20)
    assert [e.entry_id for e in got] == list(range(40))
    remaining = {p.name for p in ledger_dir.glob("*.log")}
    assert not any(f"{i:016x}.log" in remaining for i in result.deleted_logs)


async def test_gc_skips_ledgers_not_in_candidates(open_bookie: OpenBookie) -> None:
    bookie = await open_bookie()
    await add_ok(bookie, [req(1, 0)])
    candidates = bookie.local_ledger_ids()
    await add_ok(bookie, [req(2, 0)])  # created after the metadata snapshot was taken
    result = await bookie.collect_garbage(live_ledger_ids=set(), candidates=candidates)
    assert result.deleted_ledgers == (1,)
    assert (await bookie.read_entry(2, 0)).entry_id == 0
