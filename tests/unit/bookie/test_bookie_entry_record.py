"""The bookie's ``Entry`` record, built once per entry read by the bookie and every reader:
its fast constructor (slot descriptors) behaves as the frozen dataclass's."""

from __future__ import annotations

import dataclasses

import pytest

from magnetar.bookie import api


def test_fast_entry_constructor_equals_the_dataclass_one() -> None:
    slow = api.Entry.__new__(api.Entry)
    api._dataclass_entry_init(slow, 1, 2, 3, 4, b"p")
    fast = api.Entry(1, 2, 3, 4, b"p")
    assert fast == slow and repr(fast) == repr(slow) and hash(fast) == hash(slow)
    assert api.Entry(ledger_id=1, entry_id=2, lac=3, crc32c=4, payload=b"p") == slow
    assert dataclasses.replace(fast, lac=9).lac == 9
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.lac = 5  # type: ignore[misc]
