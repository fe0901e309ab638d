"""The stored ledger list is the same bytes whether each ledger's part comes from the cache of
earlier writes or is encoded anew, through every kind of change a managed ledger makes."""

from __future__ import annotations

import dataclasses
import json
import uuid
from typing import Any

import pytest

from magnetar.broker.ledger.ledger_list import LedgerInfo, LedgerList, OffloadContext


def _reference(ledgers: LedgerList) -> bytes:
    return json.dumps(
        {"ledgers": [i.to_json() for i in ledgers.ledgers], "properties": ledgers.properties},
        separators=(",", ":"),
    ).encode()


def _check(ledgers: LedgerList) -> None:
    assert ledgers.to_bytes() == _reference(ledgers)
    assert LedgerList.from_bytes("ml", ledgers.to_bytes()).ledgers == ledgers.ledgers


def test_every_change_is_written() -> None:
    ledgers = LedgerList("ml")
    _check(ledgers)
    for ledger_id in (3, 5, 9):
        ledgers.append(ledger_id, now_ms=1_000 + ledger_id)
        _check(ledgers)
    first = ledgers.ledgers[0]
    first.entries, first.size, first.timestamp_ms = 10, 1_000, 2_000  # closed
    _check(ledgers)
    started = OffloadContext(uuid.uuid4(), timestamp_ms=5)
    first.offload = started
    _check(ledgers)
    first.offload = dataclasses.replace(started, timestamp_ms=6)  # same uid, other values
    _check(ledgers)
    first.offload = None  # an attempt cleaned up
    _check(ledgers)
    ledgers.properties["k"] = "v"
    _check(ledgers)
    ledgers.remove({3})
    _check(ledgers)
    ledgers.append(11, now_ms=7)
    ledgers.ledgers[-1].entries = 1
    _check(ledgers)


def test_only_changed_ledgers_are_encoded_again(monkeypatch: pytest.MonkeyPatch) -> None:
    ledgers = LedgerList("ml")
    for ledger_id in range(1, 201):
        ledgers.append(ledger_id, now_ms=ledger_id)
    ledgers.to_bytes()
    encoded: list[int] = []
    original = LedgerInfo.to_json

    def counting(self: LedgerInfo) -> dict[str, Any]:
        encoded.append(self.ledger_id)
        return original(self)

    monkeypatch.setattr(LedgerInfo, "to_json", counting)
    ledgers.ledgers[7].offload = OffloadContext(uuid.uuid4())
    before = ledgers.to_bytes()
    assert encoded == [8]
    assert before == ledgers.to_bytes() and encoded == [8]
