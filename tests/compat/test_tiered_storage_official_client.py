"""Pulsar's tiered-storage reference scenario, with real processes and the official client.

A real ``magnetar standalone`` (broker and bookie processes) writes a topic until its ledgers
roll over; ``PUT .../offload`` moves every sealed ledger to the object store (the filesystem
driver, the S3 driver against a real S3 server: moto over HTTP, or the azureblob driver against
Azurite, Microsoft's Azure Blob Storage emulator); the bookie copies are
deleted (deletion lag 0); the whole standalone restarts, so no cache helps; then a consumer
and a reader read the whole topic back byte for byte, and a consumer seeks by time into the
offloaded part. Then the namespace's offload threshold offloads by itself.
"""

from __future__ import annotations

import pathlib

import pulsar
import pytest
from support.azurite import AzureContainer
from support.offload import OffloadAdmin, broker_settings, payloads
from support.s3 import S3Bucket
from support.standalone import StandaloneFactory
from support.waiting import wait_until

TOPIC = "persistent://public/default/tiered"
MESSAGES = 330
SIZE = 2_000  # 660 KB in ledgers of 40 entries: 8 sealed, the current one holds 10


def _read_all(receive: object, n: int) -> list[pulsar.Message]:
    got = []
    for _ in range(n):
        got.append(receive(10_000))  # type: ignore[operator]
    return got


@pytest.mark.parametrize("driver", ["filesystem", "s3", "azure"])
def test_offloaded_topic_reads_back_whole_after_a_full_restart(
    driver: str,
    standalone_factory: StandaloneFactory,
    tmp_path: pathlib.Path,
    request: pytest.FixtureRequest,
) -> None:
    bucket: S3Bucket | None = request.getfixturevalue("s3_bucket") if driver == "s3" else None
    box: AzureContainer | None = (
        request.getfixturevalue("azure_container") if driver == "azure" else None
    )
    directory = tmp_path / "offloaded"
    if box is not None:  # Pulsar's azureblob: the account and its key in the environment
        conf = broker_settings(**box.policies_json())
        sa = standalone_factory.create(config=conf, environ=box.server.environment()).start()
    else:
        conf = broker_settings(directory=None if bucket else directory, bucket=bucket)
        sa = standalone_factory.create(config=conf).start()
    data = payloads(MESSAGES, SIZE)
    client = pulsar.Client(sa.service_url, operation_timeout_seconds=30)
    producer = client.create_producer(TOPIC, batching_enabled=False)
    ids = [producer.send(p) for p in data]
    admin = OffloadAdmin(sa.web_url, TOPIC)
    assert admin.status()["status"] == "NOT_RUN"
    admin.trigger()  # no body: every sealed ledger
    status = admin.wait_status("SUCCESS")
    current = admin.internal_stats()["ledgers"][-1]["ledgerId"]
    assert status["firstUnoffloadedMessage"]["ledgerId"] == current
    admin.wait_offloaded(bookie_deleted=True)
    sealed = admin.sealed_ledgers()
    assert len(sealed) >= MESSAGES // 40 - 1
    stats = admin.stats()
    assert stats["offloadedStorageSize"] == sum(ledger["size"] for ledger in sealed)
    assert stats["lastOffloadLedgerId"] == sealed[-1]["ledgerId"]
    records = [ledger["offloadContext"]["record"] for ledger in sealed]
    if bucket is not None:
        listed = bucket.server.client().list_objects_v2(Bucket=bucket.name).get("Contents", [])
        keys = {o["Key"] for o in listed}
    elif box is not None:
        keys = box.keys()
    else:
        keys = {p.name for p in directory.iterdir()}
    assert {r["dataKey"] for r in records} | {r["indexKey"] for r in records} <= keys
    producer.close()
    client.close()

    # the whole standalone restarts: the broker's caches and read handles are gone
    sa.stop()
    sa.start()
    client = pulsar.Client(sa.service_url, operation_timeout_seconds=30)
    consumer = client.subscribe(TOPIC, "all", initial_position=pulsar.InitialPosition.Earliest)
    got = _read_all(consumer.receive, MESSAGES)
    assert [m.data() for m in got] == data
    assert [str(m.message_id()) for m in got] == [str(i) for i in ids]
    reader = client.create_reader(TOPIC, pulsar.MessageId.earliest)
    assert [m.data() for m in _read_all(reader.read_next, MESSAGES)] == data

    # seek by time into the offloaded part: the first message published at or after it
    times = [m.publish_timestamp() for m in got]
    offloaded_ids = {ledger["ledgerId"] for ledger in sealed}
    k = next(
        i
        for i in range(MESSAGES // 3, MESSAGES)
        if times[i] > times[i - 1] and got[i].message_id().ledger_id() in offloaded_ids
    )
    seeker = client.subscribe(TOPIC, "seeker", initial_position=pulsar.InitialPosition.Latest)
    seeker.seek(times[k])
    first = seeker.receive(10_000)
    assert first.data() == data[k]
    assert admin.stats()["offloadedStorageSize"] > 0
    client.close()


def test_a_namespace_threshold_offloads_ledgers_as_they_roll_over(
    standalone_factory: StandaloneFactory, tmp_path: pathlib.Path
) -> None:
    directory = tmp_path / "offloaded"
    sa = standalone_factory.create(config=broker_settings(directory=directory)).start()
    admin = OffloadAdmin(sa.web_url, TOPIC)
    ns = OffloadAdmin(sa.web_url, "persistent://public/default/x")
    ns.path = "/admin/v2/namespaces/public/default"
    assert ns.call("GET", "/offloadThreshold") == -1
    ns.call("PUT", "/offloadThreshold", 0)  # offload every sealed ledger at once
    assert ns.call("GET", "/offloadThreshold") == 0
    client = pulsar.Client(sa.service_url, operation_timeout_seconds=30)
    producer = client.create_producer(TOPIC, batching_enabled=False)
    data = payloads(130, 500)
    for p in data:
        producer.send(p)
    wait_until(lambda: len(admin.sealed_ledgers()) >= 3, 30, "three sealed ledgers")
    admin.wait_offloaded(bookie_deleted=True)
    assert admin.status()["status"] == "NOT_RUN"  # nobody asked: the threshold did it
    reader = client.create_reader(TOPIC, pulsar.MessageId.earliest)
    assert [m.data() for m in _read_all(reader.read_next, len(data))] == data
    client.close()
