"""Tiered storage under faults, with real processes: a ``magnetar standalone`` offloading to a
real S3 server (moto over HTTP, a process of the test's own so it can be frozen with SIGSTOP)
and the official client.

- The store stops answering during an offload: the ledgers stay on the bookies and read
  whole meanwhile; when the store answers again the offload resumes by itself.
- The store stops answering while a consumer reads offloaded ledgers: the consumer waits and
  resumes when it returns; nothing is skipped, nothing is out of order.
- SIGKILL of the broker in the middle of an upload, and after the objects are written but
  before the metadata records them: after a restart no ledger is half offloaded (everything
  reads back from the bookies), the next offload completes, and the objects the killed
  attempt left behind are deleted (the bucket holds exactly what the metadata records).
"""

from __future__ import annotations

import itertools
import pathlib
from collections.abc import Iterator

import pulsar
import pytest
from support.offload import OffloadAdmin, broker_settings, payloads, publish, read_all
from support.s3 import S3Bucket, S3Server
from support.standalone import StandaloneFactory, StandaloneProcess
from support.waiting import wait_until

TOPIC = "persistent://public/default/tiered-faults"


@pytest.fixture
def bucket(private_s3_server: S3Server) -> S3Bucket:
    return S3Bucket(private_s3_server, private_s3_server.create_bucket())


@pytest.fixture
def store_resumed(private_s3_server: S3Server) -> Iterator[S3Server]:
    """The private server, resumed at teardown whatever the test left it as."""
    try:
        yield private_s3_server
    finally:
        if private_s3_server.running:
            private_s3_server.resume()


def _keys(bucket: S3Bucket) -> set[str]:
    listed = bucket.server.client().list_objects_v2(Bucket=bucket.name)
    return {o["Key"] for o in listed.get("Contents", [])}


def _recorded(admin: OffloadAdmin) -> set[str]:
    out = set()
    for ledger in admin.internal_stats()["ledgers"]:
        record = ledger.get("offloadContext", {}).get("record")
        if record is not None:
            out |= {record["dataKey"], record["indexKey"]}
    return out


def _publish(sa: StandaloneProcess, data: list[bytes]) -> None:
    publish(sa.service_url, TOPIC, data)


def _read_all(sa: StandaloneProcess, n: int, timeout_ms: int = 30_000) -> list[bytes]:
    return read_all(sa.service_url, TOPIC, n, timeout_ms)


def test_the_store_down_during_an_offload_leaves_ledgers_on_bookies_and_the_offload_resumes(
    standalone_factory: StandaloneFactory, bucket: S3Bucket, store_resumed: S3Server
) -> None:
    sa = standalone_factory.create(config=broker_settings(bucket=bucket)).start()
    data = payloads(130, 1_000)
    admin = OffloadAdmin(sa.web_url, TOPIC)
    _publish(sa, data)
    store_resumed.pause()
    # automatic offloading from now: every sealed ledger, with the store not answering
    ns = OffloadAdmin(sa.web_url, TOPIC)
    ns.path = "/admin/v2/namespaces/public/default"
    ns.call("PUT", "/offloadThreshold", 0)
    wait_until(
        lambda: admin.stats().get("lastOffloadFailureTimeStamp", 0) > 0,
        30,
        "an offload attempt to fail on the frozen store",
    )
    assert not any(ledger["offloaded"] for ledger in admin.sealed_ledgers())
    assert _read_all(sa, len(data)) == data  # from the bookies, whole
    store_resumed.resume()
    admin.wait_offloaded(bookie_deleted=True, timeout_s=60)
    assert _read_all(sa, len(data)) == data  # from the store now
    wait_until(lambda: _keys(bucket) == _recorded(admin), 30, "the failed attempts cleaned up")


def test_the_store_down_during_a_read_makes_the_consumer_wait_never_skip(
    standalone_factory: StandaloneFactory, bucket: S3Bucket, store_resumed: S3Server
) -> None:
    conf = broker_settings(bucket=bucket, managedLedgerReadAheadEntries=0)
    sa = standalone_factory.create(config=conf).start()
    data = payloads(250, 1_000)
    admin = OffloadAdmin(sa.web_url, TOPIC)
    _publish(sa, data)
    admin.trigger()
    admin.wait_status("SUCCESS")
    admin.wait_offloaded(bookie_deleted=True)
    sa.stop()
    sa.start()  # nothing cached
    client = pulsar.Client(sa.service_url, operation_timeout_seconds=30)
    consumer = client.subscribe(
        TOPIC,
        "through-an-outage",
        initial_position=pulsar.InitialPosition.Earliest,
        receiver_queue_size=10,
    )
    got = [consumer.receive(10_000).data() for _ in range(20)]
    store_resumed.pause()
    # the consumer drains what the broker already read, then waits for the store
    with pytest.raises(pulsar.Timeout):
        while True:
            got.append(consumer.receive(3_000).data())
    assert len(got) < len(data) - 10
    assert got == data[: len(got)]
    store_resumed.resume()
    while len(got) < len(data):
        msg = consumer.receive(30_000)
        got.append(msg.data())
        consumer.acknowledge(msg)
    assert got == data
    assert admin.stats()["subscriptions"]["through-an-outage"]["msgBacklog"] >= 0
    client.close()


def _kill_standalone_with_store_frozen(sa: StandaloneProcess, store: S3Server) -> None:
    """The broker dies with requests to the store in flight; the store comes back after."""
    store.pause()
    sa.kill()
    store.resume()


def test_sigkill_mid_upload_leaves_nothing_half_offloaded_and_the_orphan_is_cleaned(
    standalone_factory: StandaloneFactory,
    bucket: S3Bucket,
    store_resumed: S3Server,
    tmp_path: pathlib.Path,
) -> None:
    # big ledgers (about 6 MB each, two multipart parts) so that an upload is under way
    conf = broker_settings(bucket=bucket, entries_per_ledger=100)
    sa = standalone_factory.create(config=conf).start()
    data = payloads(230, 60_000)
    admin = OffloadAdmin(sa.web_url, TOPIC)
    _publish(sa, data)
    admin.trigger()
    s3 = bucket.server.client()
    wait_until(
        lambda: s3.list_multipart_uploads(Bucket=bucket.name).get("Uploads"),
        30,
        "a multipart upload under way",
    )
    _kill_standalone_with_store_frozen(sa, store_resumed)
    sa.start()
    # nothing half offloaded: the topic reads whole, from the bookies
    assert _read_all(sa, len(data)) == data
    for ledger in admin.sealed_ledgers():
        if not ledger["offloaded"]:
            assert not ledger.get("offloadContext", {}).get("bookkeeperDeleted", False)
    admin.trigger()
    admin.wait_status("SUCCESS", timeout_s=120)
    admin.wait_offloaded(bookie_deleted=True, timeout_s=60)
    assert _keys(bucket) == _recorded(admin)
    assert _read_all(sa, len(data)) == data


def test_sigkill_after_the_upload_before_the_metadata_write_leaves_an_orphan_that_is_cleaned(
    standalone_factory: StandaloneFactory, bucket: S3Bucket, store_resumed: S3Server
) -> None:
    """The broker is killed once a ledger's index object exists (the last object an attempt
    writes, before it reads both back and records them): the killed attempt's objects are
    in the bucket, recorded nowhere as complete. Up to three ledgers are tried, until the
    kill lands before the record (it is a race with the broker's verification read)."""
    conf = broker_settings(bucket=bucket, entries_per_ledger=50)
    sa = standalone_factory.create(config=conf).start()
    data = payloads(160, 50_000)  # three sealed ledgers of about 2.5 MB
    admin = OffloadAdmin(sa.web_url, TOPIC)
    _publish(sa, data)
    s3 = bucket.server.client()
    landed = False
    ids = [ledger["ledgerId"] for ledger in admin.internal_stats()["ledgers"]]
    for ledger_id, following in list(itertools.pairwise(ids))[:3]:
        admin.trigger({"ledgerId": following, "entryId": 0})

        def index_written(lid: int = ledger_id) -> bool:
            keys = {o["Key"] for o in s3.list_objects_v2(Bucket=bucket.name).get("Contents", [])}
            return any(k.endswith(f"-ledger-{lid}-index") for k in keys)

        wait_until(index_written, 60, f"ledger {ledger_id}'s index object", interval_s=0.002)
        _kill_standalone_with_store_frozen(sa, store_resumed)
        orphans = _keys(bucket)
        sa.start()
        recorded = _recorded(admin)
        if not orphans <= recorded:
            landed = True  # objects exist that the metadata does not record as complete
            break
    assert landed, "the kill never landed between the upload and the metadata write"
    assert _read_all(sa, len(data)) == data  # the unrecorded copy is never read
    admin.trigger()  # settles the killed attempt, offloads the rest
    admin.wait_status("SUCCESS", timeout_s=120)
    admin.wait_offloaded(bookie_deleted=True, timeout_s=60)
    assert _keys(bucket) == _recorded(admin)
    assert not (orphans - _recorded(admin)) & _keys(bucket)
    assert _read_all(sa, len(data)) == data
