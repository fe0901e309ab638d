"""Topic compaction: the pure "latest per key" fold, the view record format, and a
compaction over in-memory storage read back through ``CompactedCursor`` (original ids,
ack sets hiding compacted-out batch members, the live tail after the horizon, a stored
view found again after a reopen, incremental generations)."""

from __future__ import annotations

import pytest

from magnetar.broker.compaction import (
    COMPACTION_SUBSCRIPTION,
    CompactedCursor,
    CompactionAlreadyRunning,
    CompactionStatus,
    KeyedMessage,
    LatestPerKey,
    TopicCompaction,
    decode_record,
    encode_record,
    entry_messages,
    int_to_words,
    words_to_int,
)
from magnetar.broker.ledger.position import EARLIEST, Position
from magnetar.broker.naming import TopicName
from magnetar.broker.storage.memory import MemoryStorageFactory
from magnetar.broker.topics.persistent import PersistentTopic
from magnetar.client.protocol import build_batch
from magnetar.client.protocol.proto import pulsar_api_pb2 as pb

P = Position


def single(key: str | None, value: bytes, *, null: bool = False) -> bytes:
    md = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1)
    if key is not None:
        md.partition_key = key
    if null:
        md.null_value = True
    raw = md.SerializeToString()
    return len(raw).to_bytes(4, "big") + raw + value


def batch(*msgs: tuple[str | None, bytes]) -> bytes:
    singles = []
    for key, value in msgs:
        smm = pb.SingleMessageMetadata(payload_size=len(value))
        if key is not None:
            smm.partition_key = key
        singles.append((smm, value))
    md = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1)
    md.num_messages_in_batch = len(msgs)
    raw = md.SerializeToString()
    return len(raw).to_bytes(4, "big") + raw + build_batch(singles)


# --------------------------------------------------------------------------- the fold


def test_latest_value_per_key_wins_and_tombstones_delete() -> None:
    fold = LatestPerKey()
    fold.add(P(1, 0), [KeyedMessage(-1, "a", False)])
    fold.add(P(1, 1), [KeyedMessage(-1, "b", False)])
    fold.add(P(1, 2), [KeyedMessage(-1, "a", False)])
    fold.add(P(1, 3), [KeyedMessage(-1, "b", True)])  # deletes b
    fold.add(P(1, 4), [KeyedMessage(-1, None, False)])  # no key: left out
    fold.add(P(1, 5), [KeyedMessage(-1, "c", True)])  # deleting an absent key
    assert fold.retained() == {P(1, 2): {-1}}
    assert fold.messages_seen == 6
    assert fold.retained_messages == 1


def test_batch_members_are_folded_one_by_one() -> None:
    fold = LatestPerKey()
    fold.add(P(1, 0), [KeyedMessage(0, "a", False), KeyedMessage(1, "b", False)])
    fold.add(P(1, 1), [KeyedMessage(0, "a", False), KeyedMessage(1, "c", False)])
    assert fold.retained() == {P(1, 0): {1}, P(1, 1): {0, 1}}


def test_retain_null_key_option_keeps_keyless_messages() -> None:
    fold = LatestPerKey(retain_null_key=True)
    fold.add(P(1, 0), [KeyedMessage(-1, None, False)])
    assert fold.retained() == {P(1, 0): {-1}}


def test_a_chunked_message_is_kept_whole_or_not_at_all() -> None:
    fold = LatestPerKey()

    def chunk(uuid: str, i: int, n: int) -> list[KeyedMessage]:
        return [KeyedMessage(-1, "k", False, uuid, i, n)]

    fold.add(P(1, 0), chunk("u1", 0, 2))
    fold.add(P(1, 1), [KeyedMessage(-1, "other", False)])
    fold.add(P(1, 2), chunk("u1", 1, 2))
    assert fold.retained() == {P(1, 0): {-1}, P(1, 1): {-1}, P(1, 2): {-1}}
    fold.add(P(1, 3), chunk("u2", 1, 2))  # its first chunk is missing: not retained
    assert fold.retained() == {P(1, 0): {-1}, P(1, 1): {-1}, P(1, 2): {-1}}
    fold.add(P(1, 4), chunk("u3", 0, 2))
    fold.add(P(1, 5), chunk("u3", 1, 2))  # the newer chunked value replaces the first
    assert fold.retained() == {P(1, 1): {-1}, P(1, 4): {-1}, P(1, 5): {-1}}
    assert fold.messages_seen == 4


def test_a_chunked_message_being_written_holds_the_horizon_back() -> None:
    fold = LatestPerKey()
    fold.add(P(1, 0), [KeyedMessage(-1, "a", False)])
    fold.add(P(1, 1), [KeyedMessage(-1, "k", False, "old", 0, 2, publish_time_ms=10)])
    fold.add(P(1, 2), [KeyedMessage(-1, "b", False)])
    fold.add(P(1, 3), [KeyedMessage(-1, "k", False, "new", 0, 3, publish_time_ms=500)])
    fold.add(P(1, 4), [KeyedMessage(-1, "k", False, "new", 1, 3, publish_time_ms=500)])
    # "old" is abandoned (published before the expiry point), "new" may still complete
    assert fold.cut_before_pending_chunks(since_ms=100) == (True, P(1, 2))
    assert fold.cut_before_pending_chunks(since_ms=1_000) == (False, None)
    first = LatestPerKey()
    first.add(P(1, 0), [KeyedMessage(-1, "k", False, "u", 0, 2, publish_time_ms=500)])
    assert first.cut_before_pending_chunks(since_ms=100) == (True, None)


def test_entry_messages_reads_keys_and_tombstones() -> None:
    assert entry_messages(single("k", b"v")) == (1, [KeyedMessage(-1, "k", False)])
    assert entry_messages(single("k", b"")) == (1, [KeyedMessage(-1, "k", True)])
    assert entry_messages(single("k", b"x", null=True)) == (1, [KeyedMessage(-1, "k", True)])
    n, msgs = entry_messages(batch(("a", b"1"), (None, b"2"), ("b", b"")))
    assert n == 3
    assert msgs == [
        KeyedMessage(0, "a", False),
        KeyedMessage(1, None, False),
        KeyedMessage(2, "b", True),
    ]


def test_record_round_trip_and_ack_set_words() -> None:
    data = single("k", b"v")
    rec = decode_record(encode_record(P(7, 3), 0b101, data))
    assert rec is not None
    assert (rec.position, rec.mask, rec.data) == (P(7, 3), 0b101, data)
    whole = decode_record(encode_record(P(7, 4), None, data))
    assert whole is not None and whole.mask is None
    for size in (1, 63, 64, 65, 130):
        value = ((1 << size) - 1) & ~2
        assert words_to_int(int_to_words(value, size)) == value


# --------------------------------------------------------------------------- over storage


async def _topic(storage: MemoryStorageFactory, name: str = "t") -> PersistentTopic:
    tn = TopicName.parse(f"persistent://public/default/{name}")
    ledger = await storage.open(tn.managed_ledger_name)
    topic = PersistentTopic(tn, ledger)
    await topic.load()
    topic.compaction = TopicCompaction(storage, tn.managed_ledger_name)
    await topic.compaction.load()
    return topic


async def _read_all(cursor: CompactedCursor) -> list[tuple[Position, list[int] | None]]:
    out = []
    while True:
        got = await cursor.read_entries(3)
        if not got:
            return out
        out += [(e.position, cursor.batch_ack_set(e.position)) for e in got]


async def test_compacted_cursor_serves_view_then_live_tail() -> None:
    storage = MemoryStorageFactory()
    topic = await _topic(storage)
    pos = await topic.ledger.add_entries(
        [
            single("a", b"a1"),  # 0: overwritten
            batch(("b", b"b1"), ("a", b"a2"), ("c", b"c1")),  # 1: keeps b1 and a2? a2 below
            single("c", b""),  # 2: deletes c
            single(None, b"nokey"),  # 3: left out
            single("d", b"d1"),  # 4
            single("a", b"a3"),  # 5: latest a
        ]
    )
    comp = topic.compaction
    assert comp is not None
    await comp.compact(topic)
    view = comp.view
    assert view is not None
    view.check_invariants()
    assert view.horizon == pos[5]
    assert [view.originals[i] for i in range(len(view))] == [pos[1], pos[4], pos[5]]
    assert comp.last_removed_messages == 8 - 3
    # the __compaction cursor sits at the horizon
    assert topic.subscriptions[COMPACTION_SUBSCRIPTION].cursor.mark_delete_position == pos[5]

    later = await topic.ledger.add_entries([single("a", b"a4")])
    cursor = CompactedCursor(
        topic.ledger.new_non_durable_cursor("r", EARLIEST), comp, from_earliest=True
    )
    got = await _read_all(cursor)
    # batch entry 1: only b1 (index 0) is retained; a2 and c1 are hidden by the ack set
    hidden = int_to_words(0b001, 3)
    assert got == [(pos[1], hidden), (pos[4], None), (pos[5], None), (later[0], None)]
    # rewind serves the view again (a reader acks nothing)
    cursor.rewind()
    assert [p for p, _ in await _read_all(cursor)] == [pos[1], pos[4], pos[5], later[0]]
    # seek into the middle of the view
    cursor.seek(pos[2])
    assert [p for p, _ in await _read_all(cursor)] == [pos[4], pos[5], later[0]]


async def test_acked_view_entries_are_skipped_and_batch_acks_count_compacted_out() -> None:
    storage = MemoryStorageFactory()
    topic = await _topic(storage)
    pos = await topic.ledger.add_entries(
        [single("x", b"1"), batch(("y", b"1"), ("x", b"2")), single("y", b"2")]
    )
    assert topic.compaction is not None
    await topic.compaction.compact(topic)
    inner = await topic.ledger.open_cursor("s", initial_earliest=True)
    cursor = CompactedCursor(inner, topic.compaction, from_earliest=True)
    got = await _read_all(cursor)
    assert got == [(pos[1], int_to_words(0b10, 2)), (pos[2], None)]
    # the client acks the only retained member of the batch: the whole entry is acked
    assert await cursor.ack_batch_index(pos[1], int_to_words(0b01, 2), 2)
    await cursor.ack([pos[2]])
    cursor.rewind()
    assert await _read_all(cursor) == []


async def test_view_survives_reopen_and_compaction_is_incremental() -> None:
    storage = MemoryStorageFactory()
    topic = await _topic(storage)
    first = await topic.ledger.add_entries([single("a", b"1"), single("b", b"1")])
    assert topic.compaction is not None
    await topic.compaction.compact(topic)
    await topic.close()

    # a new broker life: the sealed generation is found again
    topic = await _topic(storage)
    comp = topic.compaction
    assert comp is not None and comp.view is not None
    assert comp.view.horizon == first[1]
    assert comp.view.generation == 1
    second = await topic.ledger.add_entries([single("a", b"2"), single("c", b"1")])
    await comp.compact(topic)
    assert comp.view.generation == 2
    assert [comp.view.originals[i] for i in range(len(comp.view))] == [
        first[1],
        second[0],
        second[1],
    ]
    # the first generation is gone; only the second one is stored
    names = await storage.list(f"{topic.ledger.name}/{COMPACTION_SUBSCRIPTION}/")
    assert names == [comp.view.ledger.name]
    # a generation never sealed (crash before its trailer) is deleted on load
    stale = await storage.open(f"{topic.ledger.name}/{COMPACTION_SUBSCRIPTION}/compacted-9")
    await stale.add_entries([encode_record(P(1, 0), None, single("z", b"1"))])
    await topic.close()
    topic = await _topic(storage)
    assert topic.compaction is not None and topic.compaction.view is not None
    assert topic.compaction.view.generation == 2
    assert not await storage.exists(stale.name)


async def test_deleting_the_compaction_subscription_deletes_the_views() -> None:
    storage = MemoryStorageFactory()
    topic = await _topic(storage)
    await topic.ledger.add_entries([single("a", b"1")])
    assert topic.compaction is not None
    await topic.compaction.compact(topic)
    name = topic.compaction.view.ledger.name  # type: ignore[union-attr]
    await topic.delete_subscription(COMPACTION_SUBSCRIPTION, force=True)
    assert topic.compaction.view is None
    assert not await storage.exists(name)


async def test_one_compaction_at_a_time_and_status() -> None:
    storage = MemoryStorageFactory()
    topic = await _topic(storage)
    await topic.ledger.add_entries([single("a", b"1"), single("a", b"")])
    comp = topic.compaction
    assert comp is not None
    assert comp.status_json() == {"status": "NOT_RUN"}
    task = comp.trigger(topic)
    assert comp.status is CompactionStatus.RUNNING
    with pytest.raises(CompactionAlreadyRunning):
        comp.trigger(topic)
    await task
    assert comp.status_json() == {"status": "SUCCESS"}
    assert comp.view is not None and len(comp.view) == 0  # the only key was deleted
    assert comp.stats_json()["lastCompactionRemovedEventCount"] == 2


async def test_batch_with_every_retained_member_acked_is_not_served_again() -> None:
    storage = MemoryStorageFactory()
    topic = await _topic(storage)
    pos = await topic.ledger.add_entries([batch(("a", b"1"), ("b", b"1")), single("a", b"2")])
    assert topic.compaction is not None
    await topic.compaction.compact(topic)
    inner = await topic.ledger.open_cursor("s", initial_earliest=True)
    cursor = CompactedCursor(inner, topic.compaction, from_earliest=True)
    assert await _read_all(cursor) == [(pos[0], int_to_words(0b10, 2)), (pos[1], None)]
    # "b" (index 1) acked by an older broker life, "a" (index 0, compacted out) never:
    # the retained members are all acknowledged, so the entry must not go out again
    # (an all-zero ack set would make the client deliver every member)
    assert not await inner.ack_batch_index(pos[0], int_to_words(0b01, 2), 2)
    cursor.rewind()
    assert await _read_all(cursor) == [(pos[1], None)]


async def test_view_outlives_trimmed_ledgers_on_the_managed_ledger() -> None:
    """Retention may delete ledgers wholly before the horizon: readers from the earliest
    position and new subscriptions at Earliest still get the whole view."""
    import random

    from magnetar.broker.bookkeeper.testing import FakeBookieCluster
    from magnetar.broker.ledger import ManagedLedgerConfig, ManagedLedgerFactory
    from magnetar.broker.storage.managed_adapter import ManagedLedgerStorage
    from magnetar.zk import MemoryMetadataServer

    config = ManagedLedgerConfig(
        ensemble_size=1,
        write_quorum=1,
        ack_quorum=1,
        max_entries_per_ledger=2,
        min_ledger_rollover_time_ms=0,
    )
    server = MemoryMetadataServer()
    bookies = FakeBookieCluster(server, count=1)
    factory = ManagedLedgerFactory(server.connect(), bookies.factory, config, rng=random.Random(1))
    storage = ManagedLedgerStorage(factory)
    tn = TopicName.parse("persistent://public/default/trimmed")
    topic = PersistentTopic(tn, await storage.open(tn.managed_ledger_name))
    await topic.load()
    topic.compaction = TopicCompaction(storage, tn.managed_ledger_name)  # type: ignore[arg-type]
    pos: list[Position] = []
    for value in (b"1", b"2", b"3", b"4", b"5", b"6"):
        pos += await topic.ledger.add_entries([single("ab"[len(pos) % 2], value)])
    await topic.compaction.compact(topic)
    assert topic.compaction.view is not None
    assert [topic.compaction.view.originals[i] for i in range(2)] == [pos[4], pos[5]]
    ml = topic.ledger.ml  # type: ignore[attr-defined]
    await ml.trimming.trim()  # only __compaction holds the topic: ledgers up to the horizon go
    await ml.trimming.idle()  # the one the cursor's move started
    assert pos[0].ledger_id not in ml.ledgers.ids
    assert pos[3].ledger_id not in ml.ledgers.ids

    reader = CompactedCursor(
        topic.ledger.new_non_durable_cursor("r", EARLIEST), topic.compaction, from_earliest=True
    )
    assert [p for p, _ in await _read_all(reader)] == [pos[4], pos[5]]
    inner = await topic.ledger.open_cursor("late", initial_earliest=True)
    sub = CompactedCursor(inner, topic.compaction, from_earliest=True)
    assert [p for p, _ in await _read_all(sub)] == [pos[4], pos[5]]
    await storage.close()


def chunk_entry(key: str, uuid: str, chunk_id: int, chunks: int, value: bytes) -> bytes:
    import time

    md = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=int(time.time() * 1000))
    md.partition_key = key
    md.uuid = uuid
    md.chunk_id = chunk_id
    md.num_chunks_from_msg = chunks
    md.total_chunk_msg_size = 2 * len(value)
    raw = md.SerializeToString()
    return len(raw).to_bytes(4, "big") + raw + value


async def test_compaction_never_cuts_a_chunked_message_being_written() -> None:
    storage = MemoryStorageFactory()
    topic = await _topic(storage)
    pos = await topic.ledger.add_entries(
        [single("a", b"1"), chunk_entry("k", "u", 0, 2, b"x" * 10)]
    )
    comp = topic.compaction
    assert comp is not None
    await comp.compact(topic)
    assert comp.view is not None and comp.view.horizon == pos[0]  # stops before the chunk
    rest = await topic.ledger.add_entries([chunk_entry("k", "u", 1, 2, b"y" * 10)])
    await comp.compact(topic)
    view = comp.view
    assert view is not None and view.horizon == rest[0]
    assert [view.originals[i] for i in range(len(view))] == [pos[0], pos[1], rest[0]]
