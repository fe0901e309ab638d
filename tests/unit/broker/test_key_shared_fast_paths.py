"""Key_Shared hot-path shortcuts give the reference answers.

- ``entry_slot_from_bytes`` (metadata parsed as the small ``StickyKeyView`` type, key -> slot
  memoised) equals ``entry_slot`` of the full ``MessageMetadata`` parse, for generated
  metadata (any key kind, checksum or not, properties, batches, delays) and on garbage it
  either equals it or the reference fails too.
- ``KeySharedSelector.select`` is memoised per slot: the memo never outlives a consumer
  change (every slot matches a selector built afresh with the same consumers).
- The dispatcher hashes an entry once: a parked entry replays with the slot it was parked
  with, so ``slot_of`` is called once per entry however often it waits.
"""

from __future__ import annotations

import base64
import struct

import crc32c
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.dispatch import dispatched

from magnetar.broker.dispatch import key_shared
from magnetar.broker.dispatch.consumer import Consumer, OutMessage, SubType
from magnetar.broker.dispatch.dispatchers import KeySharedDispatcher
from magnetar.broker.dispatch.key_shared import (
    KEY_SHARED_SLOTS,
    KeySharedMode,
    KeySharedSelector,
    entry_slot,
    entry_slot_from_bytes,
)
from magnetar.broker.storage.contract import Entry
from magnetar.broker.storage.memory import MemoryLedger
from magnetar.broker.topics.subscription import Subscription
from magnetar.client.protocol import RemoteProtocolError, parse_entry
from magnetar.client.protocol.proto import pulsar_api_pb2 as pb


def stored(md: pb.MessageMetadata, payload: bytes = b"payload", *, checksum: bool) -> bytes:
    raw = md.SerializeToString()
    body = struct.pack(">I", len(raw)) + raw + payload
    if checksum:
        return b"\x0e\x01" + struct.pack(">I", crc32c.crc32c(body)) + body
    return body


def reference(data: bytes) -> int:
    return entry_slot(parse_entry(data, verify_checksum=False).metadata)


keys = st.one_of(st.text(max_size=20), st.text(alphabet="abc-0123", max_size=8))


@st.composite
def metadatas(draw: st.DrawFn) -> pb.MessageMetadata:
    md = pb.MessageMetadata(
        producer_name=draw(st.text(max_size=12)),
        sequence_id=draw(st.integers(0, 2**64 - 1)),
        publish_time=draw(st.integers(0, 2**64 - 1)),
    )
    for k, v in draw(st.lists(st.tuples(keys, keys), max_size=3)):
        md.properties.add(key=k, value=v)
    kind = draw(st.sampled_from(["none", "partition", "b64", "ordering", "both"]))
    if kind in ("partition", "both"):
        md.partition_key = draw(keys)
    if kind == "b64":
        md.partition_key = base64.b64encode(draw(st.binary(max_size=12))).decode()
        md.partition_key_b64_encoded = True
    if kind in ("ordering", "both"):
        md.ordering_key = draw(st.binary(max_size=12))
    if draw(st.booleans()):
        md.num_messages_in_batch = draw(st.integers(1, 1000))
    if draw(st.booleans()):
        md.deliver_at_time = draw(st.integers(0, 2**62))
    if draw(st.booleans()):
        md.uncompressed_size = draw(st.integers(0, 2**31))
    if draw(st.booleans()):
        md.event_time = draw(st.integers(0, 2**63))
    return md


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(metadatas(), st.booleans())
def test_slot_from_bytes_equals_the_full_parse(md: pb.MessageMetadata, checksum: bool) -> None:
    data = stored(md, checksum=checksum)
    assert entry_slot_from_bytes(data) == reference(data)
    assert 0 <= entry_slot_from_bytes(data) < KEY_SHARED_SLOTS


def test_slot_from_bytes_on_the_usual_key_kinds() -> None:
    base = {"producer_name": "p", "sequence_id": 1, "publish_time": 2}
    cases = [
        pb.MessageMetadata(**base),
        pb.MessageMetadata(**base, partition_key="key-1"),
        pb.MessageMetadata(**base, partition_key="ключ"),  # non-ASCII UTF-8
        pb.MessageMetadata(**base, partition_key="", ordering_key=b""),  # present, empty
        pb.MessageMetadata(
            **base,
            partition_key=base64.b64encode(b"\x00\xff").decode(),
            partition_key_b64_encoded=True,
        ),
        pb.MessageMetadata(**base, partition_key="pk", ordering_key=b"ok"),
    ]
    slots = [entry_slot_from_bytes(stored(md, checksum=False)) for md in cases]
    assert slots == [reference(stored(md, checksum=False)) for md in cases]
    assert len(set(slots)) == len(slots)  # the key kinds really differ


@settings(max_examples=400, deadline=None)
@given(metadatas(), st.data())
def test_slot_from_bytes_on_damaged_bytes_equals_or_the_reference_fails(
    md: pb.MessageMetadata, data: st.DataObject
) -> None:
    raw = bytearray(stored(md, checksum=False))
    for _ in range(data.draw(st.integers(1, 3))):
        at = data.draw(st.integers(0, len(raw) - 1))
        raw[at] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(raw)))
    damaged = bytes(raw[:cut])
    try:
        want = reference(damaged)
    except Exception:
        return  # the dispatcher maps an unparsable entry to its fixed slot either way
    assert entry_slot_from_bytes(damaged) == want


@pytest.mark.parametrize(
    "meta",
    [
        pytest.param(
            pb.MessageMetadata(partition_key="k").SerializePartialToString(), id="no-required"
        ),
        pytest.param(b"\x00\x01", id="garbage"),
        pytest.param(
            b"\x0a\x01p\x10\x01\x18\x01\x32\x02\xff\xfe",  # partition_key not UTF-8
            id="key-not-utf8",
        ),
    ],
)
def test_slot_from_bytes_refuses_what_the_parse_refuses(meta: bytes) -> None:
    data = struct.pack(">I", len(meta)) + meta
    with pytest.raises(RemoteProtocolError):
        reference(data)
    with pytest.raises(RemoteProtocolError):
        entry_slot_from_bytes(data)


def test_slot_memo_is_bounded() -> None:
    key_shared._slot_memo.clear()
    base = {"producer_name": "p", "sequence_id": 1, "publish_time": 2}
    for i in range(key_shared.SLOT_MEMO_MAX + 10):
        md = pb.MessageMetadata(**base, partition_key=f"k{i}")
        entry_slot_from_bytes(stored(md, checksum=False))
    assert len(key_shared._slot_memo) <= key_shared.SLOT_MEMO_MAX


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
        pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1, partition_key=key),
        checksum=False,
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
        return entry_slot_from_bytes(entry.data)

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
