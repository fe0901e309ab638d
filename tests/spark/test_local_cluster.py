"""The connector on ``local-cluster[2,1,1024]``: two executor JVMs started by Spark's own
standalone master, each with its own Python workers, nothing shared with the driver's
process: an exactly-once write killed mid-way and retried, read back from the bookies in
splits spread over both executors; and a stream from topic to topic whose replayed
micro-batch writes nothing twice. (Sized for a two-core machine: one session, small data.)"""

from __future__ import annotations

import contextlib
import pathlib
import threading
from typing import Any

from conftest import admin, kill_python_workers, publish
from pyspark.sql import functions as F
from support.standalone import StandaloneProcess
from support.waiting import wait_until

NS = "persistent://public/default"


def _opts(sa: StandaloneProcess, **extra: str) -> dict[str, str]:
    return {"service.url": sa.service_url, "admin.url": sa.web_url, **extra}


def test_a_killed_write_and_a_split_read_across_executors(
    cluster_spark: Any, standalone: StandaloneProcess
) -> None:
    spark = cluster_spark
    name = "cluster-rows"
    topic = f"{NS}/{name}"
    n = 200_000
    publish(standalone.service_url, topic, [])
    watch: dict[str, int] = {}

    def kill_mid_write() -> None:
        def stored() -> int:
            got: int = admin(
                standalone, "GET", f"/admin/v2/persistent/public/default/{name}/stats"
            )["msgInCounter"]
            return got if got >= 10_000 else 0

        with contextlib.suppress(AssertionError):  # not reached: the checks below say so
            watch["stored_at_kill"] = wait_until(stored, 240, "10,000 rows stored", interval_s=0.02)
            watch["killed"] = kill_python_workers()

    killer = threading.Thread(target=kill_mid_write)
    killer.start()
    try:
        df = spark.range(0, n, 1, 2).select(F.concat(F.lit("row-"), F.col("id")).alias("value"))
        df.write.format("magnetar").options(**_opts(standalone, topic=topic)).mode("append").save()
    finally:
        killer.join(250)
    assert watch.get("killed", 0) > 0 and 10_000 <= watch["stored_at_kill"] < n

    back = (
        spark.read.format("magnetar")
        .options(**_opts(standalone, topic=topic, maxRecordsPerPartition="40000"))
        .load()
    )
    assert back.rdd.getNumPartitions() >= 4  # one topic-partition, read by both executors
    got = back.agg(F.count("*").alias("rows"), F.countDistinct("value").alias("distinct")).collect()
    assert (got[0].rows, got[0].distinct) == (n, n)  # exactly once, every row
    executors = back.rdd.mapPartitions(lambda _: [__import__("os").getpid()]).distinct().count()
    assert executors >= 2  # tasks ran in more than one Python worker, away from the driver


def test_a_replayed_micro_batch_across_executors(
    cluster_spark: Any, standalone: StandaloneProcess, tmp_path: pathlib.Path
) -> None:
    spark = cluster_spark
    src, dst = f"{NS}/cluster-src", f"{NS}/cluster-dst"
    n = 40_000
    publish(standalone.service_url, src, [f"e-{i}".encode() for i in range(n)], batch=True)
    checkpoint = tmp_path / "checkpoint"

    def run() -> Any:
        query = (
            spark.readStream.format("magnetar")
            .options(**_opts(standalone, topic=src, startingOffsets="earliest"))
            .option("maxRecordsPerPartition", "10000")
            .load()
            .select("value")
            .writeStream.format("magnetar")
            .options(**_opts(standalone, topic=dst))
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        assert query.awaitTermination(600)
        assert query.exception() is None
        return query

    run()
    commits = sorted((checkpoint / "commits").glob("[0-9]*"), key=lambda p: int(p.name))
    commits[-1].unlink()  # as if the driver died after the sink wrote, before the commit
    (checkpoint / "commits" / f".{commits[-1].name}.crc").unlink(missing_ok=True)
    assert run().recentProgress[0]["numInputRows"] > 0
    back = spark.read.format("magnetar").options(**_opts(standalone, topic=dst)).load()
    got = (
        back.groupBy("value")
        .count()
        .agg(F.count("*").alias("distinct"), F.max("count").alias("most"))
        .collect()[0]
    )
    assert (got.distinct, got.most) == (n, 1)
