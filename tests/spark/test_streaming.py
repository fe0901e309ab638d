"""Streaming reads and writes of the ``magnetar`` format on a real local Spark session and a
real standalone: a query stopped mid-stream and restarted from its checkpoint delivers every
message exactly once into a parquet sink, admission control caps micro-batches, a replayed
micro-batch writes no duplicates, partitions and topics appearing mid-stream are read from
their start, and lost data fails the query or is skipped as asked."""

from __future__ import annotations

import collections
import contextlib
import json
import pathlib
from typing import Any

import pytest
from conftest import admin, publish
from pyspark.errors import StreamingQueryException
from pyspark.sql import functions as F
from support.standalone import StandaloneProcess
from support.waiting import wait_until

NS = "persistent://public/default"


def _opts(sa: StandaloneProcess, **extra: str) -> dict[str, str]:
    return {"service.url": sa.service_url, "admin.url": sa.web_url, **extra}


def _parquet_values(spark: Any, path: pathlib.Path) -> list[str]:
    if not (path / "_spark_metadata").exists():
        return []
    df = spark.read.schema("value BINARY").parquet(str(path))
    return [r.v for r in df.select(F.col("value").cast("string").alias("v")).collect()]


def test_restart_from_checkpoint_is_exactly_once_and_micro_batches_are_capped(
    spark: Any, standalone: StandaloneProcess, tmp_path: pathlib.Path
) -> None:
    topic = f"{NS}/clickstream"
    publish(standalone.service_url, topic, [f"a-{i}".encode() for i in range(300)])
    sink, checkpoint = tmp_path / "sink", tmp_path / "checkpoint"

    def start(**trigger: Any) -> Any:
        stream = (
            spark.readStream.format("magnetar")
            .options(
                **_opts(
                    standalone,
                    topic=topic,
                    startingOffsets="earliest",
                    maxRecordsPerTrigger="40",
                    subscriptionName="spark-progress",
                )
            )
            .load()
        )
        return (
            stream.select("value", "__messageIdString")
            .writeStream.format("parquet")
            .option("path", str(sink))
            .option("checkpointLocation", str(checkpoint))
            .trigger(**trigger)
            .start()
        )

    query = start(processingTime="100 milliseconds")
    wait_until(
        lambda: len(_parquet_values(spark, sink)) >= 80, 120, "two micro-batches in the sink"
    )
    query.stop()  # mid-stream: most of the 300 messages are still unread
    first_run = query.recentProgress
    assert 80 <= len(_parquet_values(spark, sink)) < 300
    publish(standalone.service_url, topic, [f"b-{i}".encode() for i in range(200)])

    query = start(availableNow=True)  # resumes from the checkpoint, ends at today's end
    assert query.awaitTermination(300)
    assert query.exception() is None
    progress = first_run + query.recentProgress
    sizes = [p["numInputRows"] for p in progress if p["numInputRows"]]
    assert sizes and max(sizes) <= 40  # admission control: every micro-batch capped
    assert sum(sizes) == 500

    values = _parquet_values(spark, sink)
    counts = collections.Counter(values)
    expected = {f"a-{i}" for i in range(300)} | {f"b-{i}" for i in range(200)}
    assert set(counts) == expected and max(counts.values()) == 1  # no gap, no duplicate

    # the optional durable cursor followed the commits (progress for backlog, not correctness)
    stats = admin(standalone, "GET", "/admin/v2/persistent/public/default/clickstream/stats")
    assert "spark-progress" in stats["subscriptions"]


@pytest.mark.parametrize("exactly_once", [True, False])
def test_a_replayed_micro_batch_writes_no_duplicates(
    spark: Any, standalone: StandaloneProcess, tmp_path: pathlib.Path, exactly_once: bool
) -> None:
    """A micro-batch's rows go out in batch entries; replayed, under exactly-once the broker
    drops every one of them (the same batches under the same names and ids)."""
    eo = str(exactly_once).lower()
    src, dst = f"{NS}/orders-{eo}", f"{NS}/orders-copy-{eo}"
    n = 60_000
    publish(standalone.service_url, src, [f"o-{i}".encode() for i in range(n)], batch=True)
    checkpoint = tmp_path / "checkpoint"

    def run() -> Any:
        query = (
            spark.readStream.format("magnetar")
            .options(**_opts(standalone, topic=src, startingOffsets="earliest"))
            .option("maxRecordsPerPartition", "15000")  # the micro-batch is read by 4 tasks
            .load()
            .select("value")
            .writeStream.format("magnetar")
            .options(**_opts(standalone, topic=dst, exactlyOnce=eo))
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        assert query.awaitTermination(300)
        assert query.exception() is None
        return query

    run()
    commits = sorted((checkpoint / "commits").glob("[0-9]*"), key=lambda p: int(p.name))
    assert commits
    # as if the driver died after the sink wrote, before the commit
    commits[-1].unlink()
    (checkpoint / "commits" / f".{commits[-1].name}.crc").unlink(missing_ok=True)
    replay = run()
    assert replay.recentProgress[0]["numInputRows"] > 0  # the batch ran again
    stats = admin(standalone, "GET", f"/admin/v2/persistent/public/default/orders-copy-{eo}/stats")
    assert stats["numberOfEntries"] < n // 100  # batch entries, not a message each
    back = spark.read.format("magnetar").options(**_opts(standalone, topic=dst)).load()
    got = (
        back.groupBy("value")
        .count()
        .agg(F.count("*").alias("distinct"), F.max("count").alias("most"))
        .collect()[0]
    )
    assert got.distinct == n
    if exactly_once:
        assert got.most == 1
    else:  # at-least-once: the replayed batch was written twice
        assert got.most == 2


def test_max_bytes_per_trigger_caps_each_micro_batch(
    spark: Any, standalone: StandaloneProcess, tmp_path: pathlib.Path
) -> None:
    topic = f"{NS}/sized"
    publish(standalone.service_url, topic, [b"%099d" % i for i in range(50)])  # 100 B each
    query = (
        spark.readStream.format("magnetar")
        .options(
            **_opts(standalone, topic=topic, startingOffsets="earliest", maxBytesPerTrigger="1000")
        )
        .load()
        .writeStream.format("noop")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(300)
    sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    assert sum(sizes) == 50 and max(sizes) <= 10  # at most 1,000 payload bytes per batch


def test_pattern_and_partitions_added_mid_stream_start_at_earliest(
    spark: Any, standalone: StandaloneProcess
) -> None:
    admin(standalone, "PUT", "/admin/v2/persistent/public/default/pat-a/partitions", 2)
    publish(standalone.service_url, f"{NS}/pat-a", [f"a{i}".encode() for i in range(10)])
    publish(standalone.service_url, f"{NS}/pat-b", [f"b{i}".encode() for i in range(10)])
    publish(standalone.service_url, f"{NS}/other", [b"not matched"])
    query = (
        spark.readStream.format("magnetar")
        .options(**_opts(standalone, topicsPattern=f"{NS}/pat-.*", startingOffsets="earliest"))
        .load()
        .select(F.col("value").cast("string").alias("v"), "__topic")
        .writeStream.format("memory")
        .queryName("pattern_sink")
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    try:
        rows = lambda: spark.sql("select v, __topic from pattern_sink").collect()  # noqa: E731
        wait_until(lambda: len(rows()) >= 20, 120, "the first 20 messages")
        # a third partition for pat-a and a new topic pat-c, both with data, mid-stream
        admin(standalone, "POST", "/admin/v2/persistent/public/default/pat-a/partitions", 3)
        publish(
            standalone.service_url,
            f"{NS}/pat-a-partition-2",
            [f"a-new{i}".encode() for i in range(5)],
        )
        publish(standalone.service_url, f"{NS}/pat-c", [f"c{i}".encode() for i in range(5)])
        wait_until(lambda: len(rows()) >= 30, 120, "the messages of the new partition and topic")
        got = rows()
    finally:
        query.stop()
    counts = collections.Counter(r.v for r in got)
    expected = (
        {f"a{i}" for i in range(10)}
        | {f"b{i}" for i in range(10)}
        | {f"a-new{i}" for i in range(5)}
        | {f"c{i}" for i in range(5)}
    )
    assert set(counts) == expected and max(counts.values()) == 1
    topics = {r["__topic"] for r in got}
    assert f"{NS}/pat-a-partition-2" in topics and f"{NS}/pat-c" in topics


@pytest.mark.parametrize("fail", [True, False])
def test_lost_data_fails_the_query_or_is_skipped(
    spark: Any, standalone: StandaloneProcess, tmp_path: pathlib.Path, fail: bool
) -> None:
    name = f"lossy-{str(fail).lower()}"
    topic = f"{NS}/{name}"
    publish(standalone.service_url, topic, [f"old-{i}".encode() for i in range(20)])
    sink, checkpoint = tmp_path / "sink", tmp_path / "checkpoint"

    def run(**extra: str) -> Any:
        query = (
            spark.readStream.format("magnetar")
            .options(**_opts(standalone, topic=topic, startingOffsets="earliest", **extra))
            .load()
            .select("value")
            .writeStream.format("parquet")
            .option("path", str(sink))
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        with contextlib.suppress(StreamingQueryException):
            query.awaitTermination(300)
        return query

    assert run().exception() is None
    # while the query is down, its data goes (the topic is deleted and written anew)
    admin(standalone, "DELETE", f"/admin/v2/persistent/public/default/{name}?force=true")
    publish(standalone.service_url, topic, [f"new-{i}".encode() for i in range(10)])
    query = run(failOnDataLoss=str(fail).lower())
    values = collections.Counter(_parquet_values(spark, sink))
    if fail:
        assert query.exception() is not None
        assert "data loss" in str(query.exception())
        assert "failOnDataLoss=false" in str(query.exception())
        assert set(values) == {f"old-{i}" for i in range(20)}
    else:
        assert query.exception() is None
        expected = {f"old-{i}" for i in range(20)} | {f"new-{i}" for i in range(10)}
        assert set(values) == expected and max(values.values()) == 1


def test_the_user_guide_pipeline_runs_exactly_once_end_to_end(
    spark: Any, standalone: StandaloneProcess
) -> None:
    """docs/spark.md's pipeline, as printed (its URLs pointed at this standalone; the
    module's session is reused, so its ``spark.stop()`` is left to the fixture)."""
    doc = (pathlib.Path(__file__).parents[2] / "docs" / "spark.md").read_text()
    code = doc.split("## A runnable pipeline", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    code = (
        code.replace("pulsar://localhost:6650", standalone.service_url)
        .replace("http://localhost:8080", standalone.web_url)
        .replace("spark.stop()", "")
        .replace("totals.show(truncate=False)", "shown = totals.collect()")
    )
    scope: dict[str, Any] = {"__name__": "docs_pipeline"}
    exec(compile(code, "docs/spark.md", "exec"), scope)
    rows = scope["shown"]
    final: dict[str, int] = {}
    for r in rows:  # the last count written per page is its total
        final[r.page] = max(final.get(r.page, 0), json.loads(r.value)["count"])
    assert final == {f"page-{p}": len(range(p, 1000, 7)) for p in range(7)}
    # complete mode: the whole table (7 pages) once per micro-batch, nothing duplicated
    batches = [p for p in scope["query"].recentProgress if p["numInputRows"] > 0]
    assert len(batches) == 2 and len(rows) == 7 * len(batches)


def test_waiting_for_a_topic_that_does_not_exist_yet(
    spark: Any, standalone: StandaloneProcess
) -> None:
    """``waitingForNonExistedTopic``: in a namespace that does not create topics on first
    use, a read of a topic that does not exist fails at once, naming the topic and the
    option; with the option a stream started before the topic exists reads it from its
    start once it is created."""
    admin(standalone, "PUT", "/admin/v2/namespaces/public/no-auto")
    admin(
        standalone,
        "POST",
        "/admin/v2/namespaces/public/no-auto/autoTopicCreation",
        {"allowAutoTopicCreation": False},
    )
    topic = "persistent://public/no-auto/later"
    with pytest.raises(Exception) as refused:
        spark.read.format("magnetar").options(**_opts(standalone, topic=topic)).load().count()
    assert f"topic {topic} does not exist" in str(refused.value)
    assert "waitingForNonExistedTopic=true" in str(refused.value)
    query = (
        spark.readStream.format("magnetar")
        .options(
            **_opts(
                standalone,
                topic=topic,
                startingOffsets="earliest",
                waitingForNonExistedTopic="true",
            )
        )
        .load()
        .select(F.col("value").cast("string").alias("v"))
        .writeStream.format("memory")
        .queryName("waiting_sink")
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    try:
        # (whether planning reached the wait before the topic exists is up to Spark's start-up
        # pace; tests/unit/spark/test_spark_cluster.py proves the waiting on its own)
        admin(standalone, "PUT", "/admin/v2/persistent/public/no-auto/later")
        publish(standalone.service_url, topic, [f"l{i}".encode() for i in range(10)])
        rows = lambda: spark.sql("select v from waiting_sink").collect()  # noqa: E731
        wait_until(lambda: len(rows()) >= 10, 120, "the topic's messages once it exists")
        assert sorted(r.v for r in rows()) == sorted(f"l{i}" for i in range(10))
    finally:
        query.stop()
