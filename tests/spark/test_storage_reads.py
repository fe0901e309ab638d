"""Reads at pipeline scale on a real local Spark session and a real standalone: one
single-partition topic planned into several tasks (batch and streaming), sealed ledgers read
straight from the bookies while the broker dispatches nothing (by its own topic stats), the
open ledger read too, and what a task does when no bookie answers (``readPath`` unset: the
broker; ``readPath=storage``: an error naming the option)."""

from __future__ import annotations

import asyncio
import collections
import dataclasses
from typing import Any

import pytest
from conftest import DispatchWatch, admin
from pyspark.sql import functions as F
from support.standalone import StandaloneProcess

from magnetar.client import Client as AsyncClient
from magnetar.spark import cluster, options
from magnetar.spark.layout import Fragment
from magnetar.spark.read import StreamReader
from magnetar.spark.splits import EntryRange
from magnetar.spark.storage import StorageUnavailable
from magnetar.spark.tasks import Split, read_split

NS = "persistent://public/default"


def _opts(sa: StandaloneProcess, **extra: str) -> dict[str, str]:
    return {"service.url": sa.service_url, "admin.url": sa.web_url, **extra}


def _produce(sa: StandaloneProcess, topic: str, plain: int, batched: int) -> None:
    """``batched`` messages in batch entries of 1,000 (send_batch), then ``plain`` messages
    one per entry."""

    async def go() -> None:
        async with AsyncClient(sa.service_url) as client:
            producer = await client.create_producer(
                topic, block_if_queue_full=True, max_pending_messages=5000
            )
            if batched:
                done = await producer.send_batch([b"b-%d" % i for i in range(batched)])
                await done
            for i in range(plain):
                await producer.send_async(b"p-%d" % i)
            await producer.flush()

    asyncio.run(go())


def _expected(plain: int, batched: int) -> set[str]:
    return {f"p-{i}" for i in range(plain)} | {f"b-{i}" for i in range(batched)}


def test_sealed_ledgers_are_read_from_the_bookies_in_several_tasks(
    spark: Any, standalone: StandaloneProcess
) -> None:
    name = "sealed"
    plain, batched = 3000, 20_000
    _produce(standalone, f"{NS}/{name}", plain, batched)
    admin(standalone, "PUT", f"/admin/v2/persistent/public/default/{name}/unload")  # seals it
    df = (
        spark.read.format("magnetar")
        .options(**_opts(standalone, topic=name, readPath="storage", maxRecordsPerPartition="4000"))
        .load()
    )
    tasks = df.rdd.getNumPartitions()  # planning loads the topic again (a new, empty ledger)
    assert tasks >= 4  # one topic-partition, several tasks
    with DispatchWatch(standalone, name) as watch:
        rows = df.select(F.col("value").cast("string").alias("v"), "__messageIdString").collect()
    counts = collections.Counter(r.v for r in rows)
    assert set(counts) == _expected(plain, batched) and max(counts.values()) == 1
    assert len({r["__messageIdString"] for r in rows}) == plain + batched
    # the broker dispatched no message: every row came from the bookies
    assert watch.samples > 0 and watch.most == 0
    # ... where a read through the broker is seen by the same counters
    through = (
        spark.read.format("magnetar")
        .options(**_opts(standalone, topic=name, readPath="broker", minPartitions="3"))
        .load()
    )
    assert through.rdd.getNumPartitions() >= 3
    with DispatchWatch(standalone, name) as watch:
        assert through.count() == plain + batched
    assert watch.most > 0


def test_the_open_ledger_and_its_tail_are_read_whole(
    spark: Any, standalone: StandaloneProcess
) -> None:
    """Nothing sealed: the bookies' part of the open ledger, up to the last add confirmed
    they know, and the rest through the broker, in splits; and a micro-batch of a stream is
    planned into splits the same way."""
    name = "open-ledger"
    plain, batched = 2000, 30_000
    _produce(standalone, f"{NS}/{name}", plain, batched)
    extra = {"topic": name, "maxRecordsPerPartition": "5000"}
    df = spark.read.format("magnetar").options(**_opts(standalone, **extra)).load()
    assert df.rdd.getNumPartitions() >= 4
    values = collections.Counter(
        r.v for r in df.select(F.col("value").cast("string").alias("v")).collect()
    )
    assert set(values) == _expected(plain, batched) and max(values.values()) == 1

    opts = options.read_options(
        _opts(standalone, startingOffsets="earliest", **extra), streaming=True
    )
    reader = StreamReader(opts)
    start = reader.initialOffset()
    end = reader.latestOffset(start, None)
    splits = reader.partitions(start, end)
    assert len(splits) >= 4 and all(isinstance(s, Split) and s.storage for s in splits)
    covered = [
        (r.ledger.ledger_id, e)
        for s in splits
        for r in s.ranges
        for e in range(r.first, r.last + 1)
    ]
    assert covered == sorted(set(covered))  # each entry once, in order


def _unreachable_split(sa: StandaloneProcess, topic: str, *, fallback: bool) -> Split:
    """A split of the topic's entries whose bookie does not answer (a closed port)."""
    layout = cluster.fetch_layout(
        options.read_options(_opts(sa, topic=topic), streaming=False).client, topic
    )
    led = layout.ledgers[0]
    assert led.closed
    gone = dataclasses.replace(led, fragments=(Fragment(0, ("127.0.0.1:9",)),))
    return Split(
        topic,
        "earliest",
        f"{led.ledger_id}:{led.entries - 1}",
        (EntryRange(gone, 0, led.entries - 1),),
        storage=True,
        fallback=fallback,
    )


@pytest.mark.parametrize("fallback", [True, False])
def test_when_no_bookie_answers(standalone: StandaloneProcess, fallback: bool) -> None:
    """(The executor side alone: a task reading a split.) ``readPath`` unset: the task reads
    through the broker instead; ``readPath=storage``: it fails, naming the option."""
    topic = f"{NS}/no-bookie-{str(fallback).lower()}"
    _produce(standalone, topic, 50, 0)
    admin(
        standalone,
        "PUT",
        f"/admin/v2/persistent/public/default/no-bookie-{str(fallback).lower()}/unload",
    )
    split = _unreachable_split(standalone, topic, fallback=fallback)
    opts = options.read_options(
        _opts(standalone, topic=topic, **({} if fallback else {"readPath": "storage"})),
        streaming=False,
    )
    if fallback:
        got = [v for b in read_split(opts, split) for v in b.column("value").to_pylist()]
        assert got == [b"p-%d" % i for i in range(50)]
    else:
        with pytest.raises(StorageUnavailable) as refused:
            list(read_split(opts, split))
        assert "readPath=storage" in str(refused.value)
        assert "readPath=broker" in str(refused.value)
        assert "127.0.0.1:9" in str(refused.value)
