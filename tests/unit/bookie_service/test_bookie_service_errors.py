"""The bookie service turns every exception into a status at one point: a ``BookieError``
answers with its code, anything else with ``IO_ERROR`` (logged); no handler raises. Adds
reach the storage only as packed batches, and a master key over the bound fails its batch."""

from __future__ import annotations

import asyncio
from typing import Any

import crc32c
import pytest

from magnetar.bookie.errors import BadRequest, NoLedger, StatusCode
from magnetar.bookie.proto import bookie_pb2 as pb
from magnetar.bookie.server import MASTER_KEY_BYTES_MAX, BookieService
from magnetar.bookie.testing import MemoryBookieStorage
from magnetar.bookie.wire import BatchHeader, pack_entries


class Broken(MemoryBookieStorage):
    """Every call fails: with ``error`` (a ``BookieError``) or an unexpected exception."""

    def __init__(self, error: Exception) -> None:
        super().__init__("broken")
        self.error = error

    def _fail(self, *args: Any, **kwargs: Any) -> Any:
        raise self.error

    async def _fail_async(self, *args: Any, **kwargs: Any) -> Any:
        raise self.error

    read_lac = _fail
    info = _fail
    submit_packed = _fail
    read_entry = _fail_async
    read_range = _fail_async
    wait_for_lac = _fail_async
    fence = _fail_async
    write_lac = _fail_async
    force_ledger = _fail_async


@pytest.mark.parametrize(
    ("error", "code"),
    [(NoLedger("gone"), StatusCode.NO_LEDGER), (RuntimeError("bug"), StatusCode.IO_ERROR)],
)
async def test_every_handler_answers_with_a_status(error: Exception, code: int) -> None:
    service = BookieService(Broken(error))
    ctx: Any = None
    key = b"k" * 20
    answers = [
        await service.Read(pb.ReadRequest(ledger_id=1, first_entry_id=0, last_entry_id=0), ctx),
        await service.Read(pb.ReadRequest(ledger_id=1, first_entry_id=0, last_entry_id=5), ctx),
        await service.Read(pb.ReadRequest(ledger_id=1, long_poll=True, timeout_ms=1), ctx),
        await service.ReadLac(pb.LedgerRequest(ledger_id=1), ctx),
        await service.Fence(pb.FenceRequest(ledger_id=1, master_key=key), ctx),
        await service.WriteLac(pb.WriteLacRequest(ledger_id=1, master_key=key, lac=0), ctx),
        await service.ForceLedger(pb.LedgerRequest(ledger_id=1), ctx),
        await service.Info(pb.InfoRequest(), ctx),
    ]
    assert [a.status for a in answers] == [code] * len(answers)
    assert (await service.Health(pb.HealthRequest(), ctx)).serving is False
    # bad input is a BookieError too: BAD_REQUEST, the storage never asked
    bad = await service.ReadLac(pb.LedgerRequest(ledger_id=-1), ctx)
    assert bad.status == StatusCode.BAD_REQUEST


async def test_adds_reach_the_storage_packed_and_a_huge_master_key_fails_its_batch() -> None:
    storage = MemoryBookieStorage("m")
    service = BookieService(storage)

    class Entry:
        def __init__(self, entry_id: int, payload: bytes) -> None:
            self.entry_id, self.lac, self.payload = entry_id, entry_id - 1, payload
            self.crc32c = crc32c.crc32c(payload)

    parts, nbytes = pack_entries(3, [Entry(0, b"a"), Entry(1, b"b")])
    data = b"".join(parts)
    count, size, codes = service._submit(BatchHeader(1, b"k", False, 0, nbytes), data)
    assert count == 2 and size == nbytes
    assert await asyncio.ensure_future(codes) == [0, 0]  # type: ignore[arg-type]
    huge = b"k" * (MASTER_KEY_BYTES_MAX + 1)
    count, _, refused = service._submit(BatchHeader(2, huge, False, 0, nbytes), data)
    assert count == 0 and isinstance(refused, BadRequest)
    assert [e.payload for e in await storage.read_range(3, 0, 9, 1 << 20)] == [b"a", b"b"]
