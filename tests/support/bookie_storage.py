"""Storage-engine test kit: request builders and the ``open_bookie`` fixture (real files in a
tmp dir, injectable file layer). Registered in ``support.fixtures``."""

from __future__ import annotations

import pathlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import crc32c
import pytest

from magnetar.bookie.api import AddRequest
from magnetar.bookie.core import Bookie, BookieConfig
from magnetar.bookie.files import FaultyFileSystem, FileSystem
from magnetar.bookie.testing import submit_requests

KEY = b"k" * 20


def req(
    ledger: int,
    entry: int,
    payload: bytes | None = None,
    *,
    lac: int | None = None,
    key: bytes = KEY,
    recovery: bool = False,
    crc: int | None = None,
) -> AddRequest:
    data = payload if payload is not None else f"L{ledger}E{entry}".encode() * 10
    return AddRequest(
        ledger_id=ledger,
        entry_id=entry,
        lac=entry - 1 if lac is None else lac,
        crc32c=crc32c.crc32c(data) if crc is None else crc,
        payload=data,
        master_key=key,
        recovery=recovery,
    )


def payload_of(ledger: int, entry: int) -> bytes:
    return f"L{ledger}E{entry}".encode() * 10


async def add_ok(bookie: Bookie, requests: list[AddRequest]) -> None:
    statuses = await submit_requests(bookie, requests)
    assert statuses == [0] * len(requests), statuses


OpenBookie = Callable[..., Awaitable[Bookie]]


@pytest.fixture
async def open_bookie(tmp_path: pathlib.Path) -> AsyncIterator[OpenBookie]:
    """``await open_bookie(fs=None, **config)``: a started bookie on ``tmp_path``; reopening
    with the same tmp_path is a restart. Bookies still open at teardown are closed."""
    opened: list[Bookie] = []

    async def factory(fs: FileSystem | None = None, **overrides: Any) -> Bookie:
        cfg = {
            "journal_dir": str(tmp_path / "journal"),
            "ledger_dir": str(tmp_path / "ledgers"),
            "checkpoint_interval_ms": 3_600_000,
            **overrides,
        }
        bookie = Bookie(BookieConfig(**cfg), fs=fs if fs is not None else FaultyFileSystem())
        await bookie.start()
        opened.append(bookie)
        return bookie

    yield factory
    for bookie in opened:
        if bookie._started:
            await bookie.halt()
