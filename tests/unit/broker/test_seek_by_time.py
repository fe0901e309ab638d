"""Seek by publish time is a binary search of the storage, not a scan of the topic.

``PersistentTopic.find_position_by_time`` asks the storage contract's
``find_by_publish_time``; here the in-memory storage's ``read_entries`` is made to fail, so a
scan would be caught, and the answer is checked against the definition (the first entry
published at or after the time; LATEST when none is).
"""

from __future__ import annotations

import struct

import pytest

from magnetar.broker.ledger.position import LATEST, Position
from magnetar.broker.naming import TopicName
from magnetar.broker.storage.contract import Entry
from magnetar.broker.storage.memory import MemoryLedger
from magnetar.broker.topics.persistent import PersistentTopic
from magnetar.client.protocol.proto import pulsar_api_pb2 as pb


def _entry(publish_time: int) -> bytes:
    md = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=publish_time)
    raw = md.SerializeToString()
    return struct.pack(">I", len(raw)) + raw + b"x"


class _NoScan(MemoryLedger):
    async def read_entries(self, start: Position, max_entries: int) -> list[Entry]:
        raise AssertionError("seek by time scanned the topic")


@pytest.mark.parametrize(
    ("target", "want"),
    [(0, 0), (100, 0), (101, 1), (250, 2), (300, 2), (350, 4), (399, 4), (400, 4), (401, None)],
)
async def test_seek_by_time_is_a_search(target: int, want: int | None) -> None:
    ledger = _NoScan("t", 7)
    await ledger.add_entries([_entry(t) for t in (100, 200, 300, 300, 400)])
    topic = PersistentTopic(TopicName.parse("persistent://a/b/t"), ledger)
    got = await topic.find_position_by_time(target)
    assert got == (LATEST if want is None else Position(7, want))
