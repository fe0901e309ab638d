"""Key_Shared hot-path shortcuts give the reference answers (the slot read from an entry's
bytes is the codec's, tested in ``tests/unit/protocol/test_entry_view.py``).

- ``KeySharedSelector.select`` is memoised per slot: the memo never outlives a consumer
  change (every slot matches a selector built afresh with the same consumers).
- The dispatcher hashes an entry once: a parked entry replays with the slot it was parked
  with, so ``slot_of`` is called once per entry however often it waits.
"""

from __future__ import annotations

import struct

import pytest
from support.dispatch import dispatched

from magnetar.broker.dispatch.consumer import Consumer, OutMessage, SubType
from magnetar.broker.dispatch.dispatchers import KeySharedDispatcher
from magnetar.broker.dispatch.key_shared import (
    KEY_SHARED_SLOTS,
    KeySharedMode,
    KeySharedSelector,
)
from magnetar.broker.storage.contract import Entry
from magnetar.broker.storage.memory import MemoryLedger
from magnetar.broker.topics.subscription import Subscription
from magnetar.client.protocol import entry_slot
from magnetar.client.protocol.proto import pulsar_api_pb2 as pb


def stored(md: pb.MessageMetadata, payload: bytes = b"payload") -> bytes:
    raw = md.SerializeToString()
    return struct.pack(">I", len(raw)) + raw + payload


# ---------------------------------------------------------------- selector memo


class C:
    def __init__(self, name: str) -> None:
        self.name = name


@pytest.mark.parametrize("mode", [KeySharedMode.AUTO_SPLIT, KeySharedMode.STICKY])
def test_select_memo_never_outlives_a_consumer_change(mode: KeySharedMode) -> None:
    sel: KeySharedSelector[C] = KeySharedSelector(mode)
    consumers = [C(f"c{i}") for i in range(4)]
    ranges = [[(0, 9999)], [(10000, 29999)], [(30000, 49999)], [(50000, 65535)]]
    probe = range(0, KEY_SHARED_SLOTS, 97)

    def fresh(members: list[int]) -> KeySharedSelector[C]:
        s: KeySharedSelector[C] = KeySharedSelector(mode)
        for i in members:
            s.add_consumer(consumers[i], consumers[i].name, ranges[i])
        return s

    members: list[int] = []
    for step in [0, 1, 2, -1, 3, -0, -2]:
        if step >= 0 and step not in members:
            sel.add_consumer(consumers[step], consumers[step].name, ranges[step])
            members.append(step)
        else:
            sel.remove_consumer(consumers[-step])
            members.remove(-step)
        want = fresh(members)
        assert [sel.select(s) for s in probe] == [want.select(s) for s in probe]
        assert [sel.select(s) for s in probe] == [want.select(s) for s in probe]  # memoised
        sel.check_invariants()


# ---------------------------------------------------------------- one hash per entry


def keyed(key: str) -> bytes:
    return stored(
        pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1, partition_key=key)
    )


class Sink:
    def __init__(self) -> None:
        self.got: dict[Consumer, list[OutMessage]] = {}

    def send_messages(self, consumer: Consumer, messages: list[OutMessage]) -> None:
        self.got.setdefault(consumer, []).extend(messages)

    def send_active_consumer_change(self, consumer: Consumer, is_active: bool) -> None:
        pass

    def send_close_consumer(self, consumer: Consumer) -> None:
        pass


async def test_a_parked_entry_is_not_hashed_again_when_it_replays() -> None:
    ledger = MemoryLedger("t", 5)
    cursor = await ledger.open_cursor("s", initial_earliest=True)
    calls: dict[int, int] = {}

    def slot_of(entry: Entry) -> int:
        calls[entry.position.entry_id] = calls.get(entry.position.entry_id, 0) + 1
        return entry_slot(entry.data)

    sub = Subscription("t", "s", cursor, lambda e: 1, slot_of=slot_of)
    sink = Sink()
    a = Consumer(1, "a", SubType.KEY_SHARED, sink=sink)
    b = Consumer(2, "b", SubType.KEY_SHARED, sink=sink)
    sub.add_consumer(a)
    sub.add_consumer(b)
    await ledger.add_entries([keyed(f"k{i % 20}") for i in range(60)])
    sub.flow(a, 100)  # b has no permits: the entries of its keys are read and parked
    sub.notify_new_entries()
    await dispatched(sub)
    d = sub.dispatcher
    assert isinstance(d, KeySharedDispatcher) and d.ks is not None
    to_a = len(sink.got.pop(a, []))
    parked = d.ks.parked_count
    assert parked > 0 and to_a + parked == 60
    sub.flow(b, 100)  # now they replay
    await dispatched(sub)
    assert len(sink.got.pop(b, [])) == parked and d.ks.parked_count == 0
    assert sorted(calls) == list(range(60))
    assert max(calls.values()) == 1, calls  # each entry hashed once
