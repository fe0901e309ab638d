"""Deduplication's recovery point (``producer.DEDUP_SNAPSHOTS``), on memory storage: a new
owner of a deduplicated topic reads again only the entries after the last snapshot, not the
whole topic (a topic of millions of entries loaded within its lookup's timeout), and still
refuses what was stored before it."""

from __future__ import annotations

from typing import Any

from support.publish_sink import PublishOutcomes
from support.replication_fakes import entry_bytes
from support.waiting import wait_for

from magnetar.broker.ledger.position import Position
from magnetar.broker.naming import TopicName
from magnetar.broker.storage.memory import MemoryStorageFactory
from magnetar.broker.topics.persistent import PersistentTopic
from magnetar.broker.topics.producer import (
    DEDUP_SNAPSHOT_EVERY_ENTRIES,
    DEDUP_SNAPSHOT_PROPERTY,
    DEDUP_SNAPSHOTS,
    AccessMode,
    Producer,
)
from magnetar.broker.topics.sequence_snapshots import SequenceSnapshot

TOPIC = "persistent://t/ns/orders"


async def _open(
    storage: MemoryStorageFactory, every: int = DEDUP_SNAPSHOT_EVERY_ENTRIES
) -> tuple[PersistentTopic, list[int]]:
    """The topic's next owner, and the number of entries its load read."""
    name = TopicName.parse(TOPIC)
    ledger = await storage.open(name.managed_ledger_name)
    read: list[int] = []
    plain = ledger.read_entries

    async def counted(*args: Any, **kwargs: Any) -> Any:
        got = await plain(*args, **kwargs)
        read.append(len(got))
        return got

    ledger.read_entries = counted  # type: ignore[method-assign]
    topic = PersistentTopic(name, ledger, dedup_enabled=True, dedup_snapshot_every=every)
    await topic.load()
    return topic, read


async def _publish(topic: PersistentTopic, seqs: range | list[int]) -> list[bool]:
    """Whether each was stored (False: a duplicate)."""
    producer = Producer(1, "app", AccessMode.SHARED)
    topic.add_producer(producer)
    sink = PublishOutcomes()
    for seq in seqs:
        data = entry_bytes(b"m%d" % seq, sequence_id=seq)
        topic.publish_message(sink, producer, seq, seq, 1, data)
    await wait_for(lambda: len(sink.got) >= len(seqs), 10, "outcomes")
    topic.remove_producer(producer)
    assert not any(isinstance(g, Exception) for g in sink.got)
    return [isinstance(g, Position) for g in sink.got]


def _stored_snapshot(topic: PersistentTopic) -> SequenceSnapshot | None:
    return DEDUP_SNAPSHOTS.decode(topic.ledger.properties.get(DEDUP_SNAPSHOT_PROPERTY))


async def test_a_new_owner_reads_again_only_what_follows_the_snapshot() -> None:
    storage = MemoryStorageFactory()
    topic, _ = await _open(storage)
    n = 3 * DEDUP_SNAPSHOT_EVERY_ENTRIES + 17
    assert all(await _publish(topic, range(n)))

    def taken() -> bool:
        snap = _stored_snapshot(topic)
        return snap is not None and snap.position.entry_id >= 3 * DEDUP_SNAPSHOT_EVERY_ENTRIES - 1

    await wait_for(taken, 10, "the third snapshot")
    # no close: the next owner opens the same ledger (a SIGKILLed broker)
    successor, read = await _open(storage)
    assert sum(read) <= DEDUP_SNAPSHOT_EVERY_ENTRIES  # not the whole topic
    assert successor.last_sequence_id("app") == n - 1
    assert await _publish(successor, [0, n - 2, n - 1, n, n + 1]) == [
        False,
        False,
        False,
        True,
        True,
    ]


async def test_a_clean_close_leaves_nothing_to_read_again() -> None:
    storage = MemoryStorageFactory()
    topic, _ = await _open(storage)
    assert all(await _publish(topic, range(10)))
    await topic.close()
    snap = _stored_snapshot(topic)
    assert snap is not None and snap.ids == {"app": 9}
    assert snap.position == topic.ledger.last_confirmed
    successor, read = await _open(storage)
    assert sum(read) == 0
    assert await _publish(successor, [9, 10]) == [False, True]


async def test_without_a_readable_snapshot_the_whole_topic_is_read() -> None:
    storage = MemoryStorageFactory()
    topic, _ = await _open(storage)
    assert all(await _publish(topic, range(25)))
    await topic.ledger.set_property(DEDUP_SNAPSHOT_PROPERTY, "{not json")
    successor, read = await _open(storage)
    assert sum(read) == 25
    assert successor.last_sequence_id("app") == 24


def test_a_snapshot_too_large_for_the_metadata_is_not_stored() -> None:
    big = SequenceSnapshot(Position(1, 2), {f"producer-{i:08d}": i for i in range(20_000)})
    assert DEDUP_SNAPSHOTS.encode(big) is None
    small = SequenceSnapshot(Position(1, 2), {"a": 5})
    assert DEDUP_SNAPSHOTS.decode(DEDUP_SNAPSHOTS.encode(small)) == small
    assert DEDUP_SNAPSHOTS.decode("") is None
    assert DEDUP_SNAPSHOTS.decode('{"position": 3}') is None


async def test_brokerDeduplicationEntriesInterval_sets_the_cadence() -> None:
    storage = MemoryStorageFactory()
    topic, _ = await _open(storage, every=10)
    assert all(await _publish(topic, range(10)))
    await wait_for(lambda: _stored_snapshot(topic) is not None, 10, "a snapshot at 10 entries")
    snap = _stored_snapshot(topic)
    assert snap is not None and snap.ids == {"app": 9}
