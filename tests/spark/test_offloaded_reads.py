"""Offloaded ledgers read by Spark tasks straight from the object store, on a real standalone
that offloads to a real S3 server (moto over HTTP) or to a directory (the filesystem driver).

A topic's early ledgers are offloaded and deleted from the bookies (deletion lag 0); a batch
read and an ``AvailableNow`` stream read the whole topic with ``readPath=storage`` while the
broker dispatches nothing (its own topic stats): the offloaded ledgers from the store with
the job's ``pulsar.offload.*`` settings, the current ledger from the bookies. A task whose
store cannot be reached (a wrong endpoint or directory) reads through the broker when
``readPath`` is unset, and fails naming the options with ``readPath=storage``.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import pathlib
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import DispatchWatch
from pyspark.sql import functions as F
from support.net import free_port
from support.offload import OffloadAdmin, broker_settings
from support.s3 import ACCESS_KEY, REGION, SECRET_KEY, S3Bucket
from support.standalone import StandaloneProcess

from magnetar.client import Client as AsyncClient
from magnetar.spark import cluster, options
from magnetar.spark.positions import Position, Start
from magnetar.spark.splits import locate
from magnetar.spark.storage import OffloadUnavailable
from magnetar.spark.tasks import Split, read_split

TOPIC = "persistent://public/default/offloaded"
PLAIN, BATCHED = 1_200, 1_000
ENTRIES_PER_LEDGER = 150


@dataclasses.dataclass
class Tiered:
    sa: StandaloneProcess
    driver: str
    store_options: dict[str, str]
    """What the tasks need to reach the store (credentials for S3; nothing for a directory)."""
    unreachable: dict[str, str]
    """Settings that send the tasks to a store that is not there."""

    def opts(self, **extra: str) -> dict[str, str]:
        return {
            "service.url": self.sa.service_url,
            "admin.url": self.sa.web_url,
            "topic": TOPIC,
            **self.store_options,
            **extra,
        }


def _produce(sa: StandaloneProcess) -> None:
    async def go() -> None:
        async with AsyncClient(sa.service_url) as client:
            producer = await client.create_producer(
                TOPIC, batching_enabled=False, block_if_queue_full=True
            )
            for i in range(PLAIN):
                await producer.send_async(b"p-%05d-" % i + b"x" * 200)
            await producer.flush()
            await (await producer.send_batch([b"b-%05d" % i for i in range(BATCHED)]))

    asyncio.run(go())


def _expected() -> set[str]:
    return {f"p-{i:05d}-" + "x" * 200 for i in range(PLAIN)} | {
        f"b-{i:05d}" for i in range(BATCHED)
    }


@pytest.fixture(scope="module", params=["filesystem", "s3"])
def tiered(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Tiered]:
    base = tmp_path_factory.mktemp(f"tiered-{request.param}")
    if request.param == "s3":
        server = request.getfixturevalue("s3_server")
        bucket = S3Bucket(server, server.create_bucket())
        conf = broker_settings(bucket=bucket, entries_per_ledger=ENTRIES_PER_LEDGER)
        store = {
            "pulsar.offload.s3ManagedLedgerOffloadCredentialId": ACCESS_KEY,
            "pulsar.offload.s3ManagedLedgerOffloadCredentialSecret": SECRET_KEY,
            "pulsar.offload.s3ManagedLedgerOffloadRegion": REGION,
        }
        elsewhere = {
            "pulsar.offload.s3ManagedLedgerOffloadServiceEndpoint": f"http://127.0.0.1:{free_port()}"
        }
    else:
        conf = broker_settings(directory=base / "offloaded", entries_per_ledger=ENTRIES_PER_LEDGER)
        store = {}
        elsewhere = {"pulsar.offload.fileSystemURI": f"file://{base / 'not-there'}"}
    sa = StandaloneProcess(base / "data", base / "standalone.log", config=conf).start()
    try:
        _produce(sa)
        offload = OffloadAdmin(sa.web_url, TOPIC)
        offload.trigger()  # every sealed ledger
        offload.wait_status("SUCCESS")
        offload.wait_offloaded(bookie_deleted=True)
        yield Tiered(sa, request.param, store, {**store, **elsewhere})
    finally:
        sa.stop()


def _layout(t: Tiered) -> Any:
    return cluster.fetch_layout(options.read_options(t.opts(), streaming=False).client, TOPIC)


def test_a_topic_whose_early_ledgers_are_offloaded_is_read_whole_from_storage(
    spark: Any, tiered: Tiered
) -> None:
    layout = _layout(tiered)
    gone = [led for led in layout.ledgers if not led.on_bookies]
    assert len(gone) >= 5 and all(led.offload for led in gone)  # only in the object store
    assert layout.ledgers[-1].on_bookies  # the current ledger
    df = (
        spark.read.format("magnetar")
        .options(**tiered.opts(readPath="storage", maxRecordsPerPartition="500"))
        .load()
    )
    assert df.rdd.getNumPartitions() >= 3
    with DispatchWatch(tiered.sa, TOPIC) as watch:
        rows = df.select(F.col("value").cast("string").alias("v"), "__messageIdString").collect()
    counts = collections.Counter(r.v for r in rows)
    assert set(counts) == _expected() and max(counts.values()) == 1
    assert {int(r["__messageIdString"].split(":")[0]) for r in rows} >= {
        led.ledger_id for led in gone
    }
    assert watch.samples > 0 and watch.most == 0  # the broker dispatched nothing


def test_an_available_now_stream_reads_the_offloaded_ledgers_from_storage(
    spark: Any, tiered: Tiered, tmp_path: pathlib.Path
) -> None:
    stream = (
        spark.readStream.format("magnetar")
        .options(
            **tiered.opts(
                readPath="storage", startingOffsets="earliest", maxRecordsPerPartition="700"
            )
        )
        .load()
    )
    name = f"offloaded_{tiered.driver}"
    with DispatchWatch(tiered.sa, TOPIC) as watch:
        query = (
            stream.select(F.col("value").cast("string").alias("v"))
            .writeStream.format("memory")
            .queryName(name)
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .trigger(availableNow=True)
            .start()
        )
        assert query.awaitTermination(300)
    assert query.exception() is None
    got = collections.Counter(r.v for r in spark.sql(f"select v from {name}").collect())
    assert set(got) == _expected() and max(got.values()) == 1
    assert watch.most == 0


def _offloaded_split(t: Tiered, settings: dict[str, str], *, fallback: bool) -> tuple[Any, Split]:
    """A split of the topic's offloaded ledgers and the options its task runs with."""
    layout = _layout(t)
    gone = [led for led in layout.ledgers if not led.on_bookies]
    end = Position(gone[-1].ledger_id, gone[-1].entries - 1, -1)
    located = locate(layout, Start.earliest(), end)
    opts = options.read_options(
        {**t.opts(), **settings, **({} if fallback else {"readPath": "storage"})},
        streaming=False,
    )
    return opts, Split(TOPIC, "earliest", str(end), located.ranges, storage=True, fallback=fallback)


def test_a_task_that_cannot_reach_the_store_reads_through_the_broker(tiered: Tiered) -> None:
    """(The executor side alone.) ``readPath`` unset: from the first offloaded ledger it
    cannot read, the task goes on through the broker (which reads the store itself)."""
    opts, split = _offloaded_split(tiered, tiered.unreachable, fallback=True)
    got = [v for b in read_split(opts, split) for v in b.column("value").to_pylist()]
    # every message of the split, though the settings point the task at no store
    assert got == [b"p-%05d-" % i + b"x" * 200 for i in range(len(got))]
    assert len(got) == sum(r.entries for r in split.ranges)


def test_with_read_path_storage_an_unreachable_store_fails_naming_the_options(
    tiered: Tiered,
) -> None:
    opts, split = _offloaded_split(tiered, tiered.unreachable, fallback=False)
    with pytest.raises(OffloadUnavailable) as refused:
        list(read_split(opts, split))
    message = str(refused.value)
    assert "readPath=storage" in message and "readPath=broker" in message
    assert "pulsar.offload." in message
    assert "offloaded to" in message
