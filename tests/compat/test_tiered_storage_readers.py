"""Everything that reads a topic works unchanged over offloaded ledgers (official client).

One real ``magnetar standalone`` offloads a keyed topic (some messages delayed) to a directory
and deletes the bookie copies; after a full restart only the object store holds the data:
Shared, Failover and Key_Shared subscriptions get every message (Key_Shared in order per
key), a consumer seeks by message id into the offloaded part, ``GET_LAST_MESSAGE_ID`` answers
(``has_message_available``), delayed messages arrive when due, compaction reads the
offloaded ledgers and a compacted reader sees the last value of each key, and the Spark
connector's entry point opens an offloaded ledger from its internal-stats record without
a broker.
"""

from __future__ import annotations

import asyncio
import collections
import pathlib
import time

import pulsar
from support.offload import OffloadAdmin, broker_settings
from support.standalone import StandaloneFactory
from support.waiting import wait_until

from magnetar.broker.offload.registry import open_offloaded_ledger

TOPIC = "persistent://public/default/tiered-readers"
KEYS = [f"k{i}" for i in range(7)]
N = 140


def _drain(consumer: pulsar.Consumer, n: int) -> list[pulsar.Message]:
    out = []
    for _ in range(n):
        msg = consumer.receive(15_000)
        consumer.acknowledge(msg)
        out.append(msg)
    return out


def test_every_reader_reads_offloaded_ledgers(
    standalone_factory: StandaloneFactory, tmp_path: pathlib.Path
) -> None:
    directory = tmp_path / "offloaded"
    sa = standalone_factory.create(
        config=broker_settings(directory=directory, entries_per_ledger=20)
    ).start()
    client = pulsar.Client(sa.service_url, operation_timeout_seconds=30)
    producer = client.create_producer(TOPIC, batching_enabled=False)
    sent: list[tuple[str, bytes]] = []
    ids = []
    for i in range(N):
        key = KEYS[i % len(KEYS)]
        body = f"{key}:{i}".encode()
        ids.append(producer.send(body, partition_key=key))
        sent.append((key, body))
    delayed = [f"delayed-{i}".encode() for i in range(3)]
    due = time.time() + 4
    for body in delayed:
        producer.send(body, deliver_at=int(due * 1000))
    producer.send(b"tail", partition_key="tail")  # the current ledger is not empty
    admin = OffloadAdmin(sa.web_url, TOPIC)
    admin.trigger()
    admin.wait_status("SUCCESS")
    admin.wait_offloaded(bookie_deleted=True)
    sealed = admin.sealed_ledgers()
    client.close()
    sa.stop()
    sa.start()
    client = pulsar.Client(sa.service_url, operation_timeout_seconds=30)
    bodies = [b for _, b in sent]
    total = N + len(delayed) + 1

    for kind in (pulsar.ConsumerType.Shared, pulsar.ConsumerType.Failover):
        consumer = client.subscribe(
            TOPIC,
            f"sub-{kind}",
            consumer_type=kind,
            initial_position=pulsar.InitialPosition.Earliest,
        )
        got = [m.data() for m in _drain(consumer, N)]
        assert sorted(got[:N]) == sorted(bodies)
        consumer.close()

    key_shared = [
        client.subscribe(
            TOPIC,
            "sub-key-shared",
            consumer_type=pulsar.ConsumerType.KeyShared,
            initial_position=pulsar.InitialPosition.Earliest,
        )
        for _ in range(2)
    ]
    per_key: dict[str, list[bytes]] = collections.defaultdict(list)
    received = 0
    while received < N + 1:  # the delayed ones come later; the tail key is one more
        for c in key_shared:
            try:
                msg = c.receive(200)
            except pulsar.Timeout:
                continue
            c.acknowledge(msg)
            if msg.data().startswith(b"delayed-"):
                continue
            per_key[msg.partition_key()].append(msg.data())
            received += 1
    for key in KEYS:
        assert per_key[key] == [b for k, b in sent if k == key]  # in order per key

    seeker = client.subscribe(TOPIC, "seeker", initial_position=pulsar.InitialPosition.Latest)
    seeker.seek(ids[33])  # the client then delivers what follows that message
    assert seeker.receive(10_000).data() == bodies[34]
    reader = client.create_reader(TOPIC, ids[N - 1])
    assert reader.has_message_available()  # GET_LAST_MESSAGE_ID past an offloaded part

    # delayed delivery: the index points into offloaded ledgers; due messages come through
    late = client.subscribe(
        TOPIC,
        "delayed",
        consumer_type=pulsar.ConsumerType.Shared,
        initial_position=pulsar.InitialPosition.Earliest,
    )
    got_late: list[bytes] = [m.data() for m in _drain(late, total)]
    assert sorted(got_late) == sorted([*bodies, *delayed, b"tail"])
    assert time.time() >= due - 0.5  # the delayed ones waited for their time

    # compaction reads the offloaded ledgers; a compacted reader sees each key's last value
    compaction = OffloadAdmin(sa.web_url, TOPIC)
    compaction.call("PUT", "/compaction")
    wait_until(
        lambda: compaction.call("GET", "/compaction")["status"] == "SUCCESS", 30, "compaction"
    )
    compacted = client.create_reader(TOPIC, pulsar.MessageId.earliest, is_read_compacted=True)
    last: dict[str, bytes] = {}
    while compacted.has_message_available():
        msg = compacted.read_next(10_000)
        if msg.partition_key():
            last[msg.partition_key()] = msg.data()
    for key in KEYS:
        assert last[key] == [b for k, b in sent if k == key][-1]
    client.close()

    # the Spark connector's entry point: an offloaded ledger from its record, no broker
    record = sealed[1]["offloadContext"]["record"]

    async def read_offloaded() -> int:
        async with open_offloaded_ledger(record) as handle:
            entries = await handle.read(0, handle.last_add_confirmed)
        return len(entries)

    assert asyncio.run(read_offloaded()) == sealed[1]["entries"]
