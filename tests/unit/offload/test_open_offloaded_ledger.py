"""``open_offloaded_ledger``: an offloaded ledger opened outside a broker from its record (the
filesystem driver on a temporary directory). The reader's own location (here the directory
the objects are mounted at) wins over the record's; the bucket and keys stay the record's;
without it the record's location is used."""

from __future__ import annotations

import pathlib
import shutil
import uuid

import pytest

from magnetar.broker.offload import ObjectNotFound, OffloadPolicies, create_offloader
from magnetar.broker.offload.registry import open_offloaded_ledger
from magnetar.broker.offload.testing import MemoryLedgerSource, payloads_of


async def _offloaded(directory: pathlib.Path) -> tuple[dict[str, object], list[bytes]]:
    policies = OffloadPolicies(driver="filesystem", file_system_uri=f"file://{directory}")
    effective = policies.resolve()
    assert effective is not None
    offloader = create_offloader(effective)
    payloads = payloads_of([300] * 40)
    try:
        record = await offloader.offload(MemoryLedgerSource(7, payloads), uuid.uuid4(), {})
    finally:
        await offloader.close()
    return record.to_json(), payloads


async def test_the_reader_s_location_wins_over_the_record_s(tmp_path: pathlib.Path) -> None:
    written, mounted = tmp_path / "written", tmp_path / "mounted"
    record, payloads = await _offloaded(written)
    async with open_offloaded_ledger(record) as handle:  # where the broker wrote it
        assert [e.payload for e in await handle.read(0, 39)] == payloads
    shutil.copytree(written, mounted)
    shutil.rmtree(written)
    moved = OffloadPolicies(file_system_uri=f"file://{mounted}")
    async with open_offloaded_ledger(record, moved) as handle:
        assert [e.payload for e in await handle.read(5, 9)] == payloads[5:10]
    with pytest.raises(ObjectNotFound):
        async with open_offloaded_ledger(record, OffloadPolicies()):
            pass  # the record's own directory is gone
