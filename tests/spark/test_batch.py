"""Batch reads and writes of the ``magnetar`` format on a real local Spark session and a real
standalone: a 100,000-row round trip through a partitioned topic, a task retried mid-write
without duplicates, offsets and time bounds, and bad options failing at planning time."""

from __future__ import annotations

import contextlib
import threading
from typing import Any

import pytest
from conftest import admin, kill_python_workers, publish
from pyspark.errors import AnalysisException
from pyspark.sql import functions as F
from support.standalone import StandaloneProcess
from support.waiting import wait_until

NS = "persistent://public/default"


def _opts(sa: StandaloneProcess, **extra: str) -> dict[str, str]:
    return {"service.url": sa.service_url, "admin.url": sa.web_url, **extra}


def test_round_trip_100k_rows_through_a_partitioned_topic(
    spark: Any, standalone: StandaloneProcess
) -> None:
    topic = "persistent://public/default/roundtrip"
    admin(standalone, "PUT", "/admin/v2/persistent/public/default/roundtrip/partitions", 3)
    n = 100_000
    df = spark.range(n).select(
        F.concat(F.lit("v-"), F.col("id").cast("string")).alias("value"),
        F.when(F.col("id") % 10 == 0, F.concat(F.lit("k"), (F.col("id") % 7).cast("string"))).alias(
            "__key"
        ),
        F.when(F.col("id") < 3, F.create_map(F.lit("n"), F.col("id").cast("string"))).alias(
            "__messageProperties"
        ),
        (F.col("id") + 1_700_000_000_000).alias("__eventTime"),
    )
    df.write.format("magnetar").options(**_opts(standalone, topic=topic)).mode("append").save()

    part0 = "/admin/v2/persistent/public/default/roundtrip-partition-0/stats"
    stats = admin(standalone, "GET", part0)
    assert stats["deduplicationStatus"] == "Enabled"  # exactlyOnce (the default) turned it on

    back = spark.read.format("magnetar").options(**_opts(standalone, topic=topic)).load().cache()
    assert back.columns == [
        "value",
        "__key",
        "__topic",
        "__messageId",
        "__messageIdString",
        "__publishTime",
        "__eventTime",
        "__messageProperties",
    ]
    agg = back.agg(
        F.count("*").alias("rows"),
        F.countDistinct("value").alias("distinct"),
        F.countDistinct("__topic").alias("partitions"),
        F.sum(F.when(F.col("__key").isNotNull(), 1).otherwise(0)).alias("keyed"),
        F.min("__eventTime").alias("first_event"),
        F.countDistinct("__messageIdString").alias("ids"),
    ).collect()[0]
    assert (agg.rows, agg.distinct, agg.partitions, agg.keyed, agg.ids) == (n, n, 3, n // 10, n)
    assert int(agg.first_event.timestamp() * 1000) == 1_700_000_000_000
    # keyed rows went to hash(key) % 3, as the official client routes them: one key, one partition
    per_key = (
        back.where("__key is not null").groupBy("__key").agg(F.countDistinct("__topic").alias("t"))
    )
    assert per_key.where("t > 1").count() == 0
    props = {
        r["value"]: r["__messageProperties"]
        for r in back.where("value in ('v-0', 'v-1', 'v-5')")
        .select(F.col("value").cast("string").alias("value"), "__messageProperties")
        .collect()
    }
    assert props == {"v-0": {"n": "0"}, "v-1": {"n": "1"}, "v-5": None}


@pytest.mark.parametrize("exactly_once", [True, False])
def test_a_killed_task_is_retried_without_duplicates(
    spark: Any, standalone: StandaloneProcess, exactly_once: bool
) -> None:
    """Rows go out in batch entries (exactly-once too); killed mid-write, the tasks are
    retried and, under exactly-once, the broker drops every batch it already stored."""
    name = f"retried-{str(exactly_once).lower()}"
    topic = f"persistent://public/default/{name}"
    stats_path = f"/admin/v2/persistent/public/default/{name}/stats"
    n = 300_000
    publish(standalone.service_url, topic, [])  # the topic exists (and has stats) from now
    df = spark.range(0, n, 1, 2).select(F.concat(F.lit("row-"), F.col("id")).alias("value"))
    watch: dict[str, int] = {}

    def kill_mid_write() -> None:
        """Once the broker holds part of the rows, kill the tasks writing them."""

        def stored() -> int:
            n: int = admin(standalone, "GET", stats_path)["msgInCounter"]
            return n if n >= 20_000 else 0

        with contextlib.suppress(AssertionError):  # not reached: the test's checks say so
            watch["stored_at_kill"] = wait_until(stored, 120, "20,000 rows stored", interval_s=0.02)
            watch["killed"] = kill_python_workers()

    killer = threading.Thread(target=kill_mid_write)
    killer.start()
    try:
        df.write.format("magnetar").options(
            **_opts(standalone, topic=topic, exactlyOnce=str(exactly_once).lower())
        ).mode("append").save()  # succeeds: Spark retries the killed tasks
    finally:
        killer.join(130)
    # the tasks were killed mid-write, after the broker had stored part of their rows
    assert watch.get("killed", 0) > 0 and 20_000 <= watch["stored_at_kill"] < n
    stats = admin(standalone, "GET", stats_path)
    assert stats["numberOfEntries"] < n // 100  # batch entries, not a message each
    back = spark.read.format("magnetar").options(**_opts(standalone, topic=topic)).load()
    got = back.agg(
        F.count("*").alias("rows"),
        F.countDistinct("value").alias("distinct"),
        F.min(F.expr("cast(substring(cast(value as string), 5) as bigint)")).alias("lo"),
        F.max(F.expr("cast(substring(cast(value as string), 5) as bigint)")).alias("hi"),
    ).collect()[0]
    assert (got.distinct, got.lo, got.hi) == (n, 0, n - 1)  # every row
    if exactly_once:
        assert got.rows == n
    else:  # at-least-once: the retry re-sent what the killed attempt had stored
        assert got.rows > n


def test_offsets_and_times_bound_a_batch_read(spark: Any, standalone: StandaloneProcess) -> None:
    topic = "persistent://public/default/bounds"
    ids = publish(standalone.service_url, topic, [f"m{i}".encode() for i in range(10)])
    opts = _opts(standalone, topic=topic)

    def values(**extra: str) -> list[str]:
        df = spark.read.format("magnetar").options(**opts, **extra).load()
        return [r.v for r in df.select(F.col("value").cast("string").alias("v")).collect()]

    pos = [f"{m.ledger_id()}:{m.entry_id()}" for m in ids]
    assert values() == [f"m{i}" for i in range(10)]
    assert values(
        startingOffsets=f'{{"{topic}": "{pos[3]}"}}', endingOffsets=f'{{"{topic}": "{pos[6]}"}}'
    ) == ["m3", "m4", "m5", "m6"]
    rows = spark.read.format("magnetar").options(**opts).load().select("__publishTime").collect()
    times = [int(r["__publishTime"].timestamp() * 1000) for r in rows]
    assert set(values(startingTime=str(times[4]))) >= {f"m{i}" for i in range(5, 10)}
    assert set(values(endingTime=str(times[0]))) == set()
    # the snapshot's end is fixed at planning: a message published after it is not read
    planned = spark.read.format("magnetar").options(**opts).load()
    publish(standalone.service_url, topic, [b"late"])
    assert planned.count() in (10, 11)  # (Spark may plan again at the action)


def test_topic_filters_prune_partitions_at_planning(
    spark: Any, standalone: StandaloneProcess
) -> None:
    """With ``spark.sql.python.filterPushdown.enabled``, filters on ``__topic`` (=, IN, starts
    with) reach the source, which plans only the matching topic-partitions (one task each);
    the rows are those Spark's own filter would keep."""
    admin(standalone, "PUT", "/admin/v2/persistent/public/default/pd-a/partitions", 3)
    for i in range(3):
        publish(standalone.service_url, f"{NS}/pd-a-partition-{i}", [f"a{i}".encode()])
    publish(standalone.service_url, f"{NS}/pd-b", [b"b"])
    pattern = _opts(standalone, topicsPattern=f"{NS}/pd-.*")
    # without the option the reader takes no filters (Spark refuses one that could while its
    # conf is off): every partition is planned
    assert (
        spark.read.format("magnetar")
        .options(**pattern)
        .load()
        .filter(F.col("__topic") == f"{NS}/pd-b")
        .rdd.getNumPartitions()
        == 4
    )
    df = spark.read.format("magnetar").options(**pattern, filterPushdown="true")
    loaded = df.load()
    conf = "spark.sql.python.filterPushdown.enabled"
    spark.conf.set(conf, "true")
    try:
        cases = [
            (F.col("__topic") == f"{NS}/pd-b", 1, {"b"}),
            (F.col("__topic").isin(f"{NS}/pd-a-partition-0", f"{NS}/pd-b"), 2, {"a0", "b"}),
            (F.col("__topic").startswith(f"{NS}/pd-a"), 3, {"a0", "a1", "a2"}),
        ]
        for condition, tasks, values in cases:
            filtered = loaded.filter(condition)
            assert filtered.rdd.getNumPartitions() == tasks
            got = {r.v for r in filtered.select(F.col("value").cast("string").alias("v")).collect()}
            assert got == values
        # another filter stays with Spark: every partition is planned, the rows are right
        other = loaded.filter(F.col("value").cast("string") == "b")
        assert other.rdd.getNumPartitions() == 4 and other.count() == 1
    finally:
        spark.conf.unset(conf)


def test_bad_options_fail_at_planning_with_the_option_named(
    spark: Any, standalone: StandaloneProcess
) -> None:
    base = {"service.url": standalone.service_url}
    # (every option's checks are unit-tested in tests/unit/spark; these prove the errors reach
    # the user through Spark, at planning, before any task runs)
    cases: list[tuple[dict[str, str], str]] = [
        ({"topic": "t", "statringOffsets": "earliest"}, "unknown option 'statringoffsets'"),
        ({"topic": "t", "startingOffsets": "latest"}, "'latest' is not allowed in batch"),
        (
            {"topic": "t", "endingOffsets": '{"persistent://public/default/nope": "1:1"}'},
            "not a partition of the selected topics",
        ),
    ]
    for extra, expected in cases:
        with pytest.raises(AnalysisException) as info:
            spark.read.format("magnetar").options(**base, **extra).load().collect()
        assert expected in str(info.value), (extra, str(info.value)[:2000])
    no_url = {"topic": "t"}
    with pytest.raises(AnalysisException) as info:
        spark.read.format("magnetar").options(**no_url).load()
    assert "option 'service.url' is required" in str(info.value)

    df = spark.range(3).select(F.col("id").cast("string").alias("value"))
    writes: list[tuple[dict[str, str], str, str]] = [
        ({"topic": "t"}, "append", "exactlyOnce=true needs option 'admin.url'"),
        ({"exactlyOnce": "false"}, "append", "'topic' option is required"),
        ({"topic": "t", "exactlyOnce": "false"}, "overwrite", "save mode 'overwrite'"),
    ]
    for extra, mode, expected in writes:
        with pytest.raises(AnalysisException) as info:
            df.write.format("magnetar").options(**base, **extra).mode(mode).save()
        assert expected in str(info.value), (extra, str(info.value)[:2000])
    with pytest.raises(AnalysisException) as info:
        spark.range(3).select(F.col("id").alias("value"), F.lit(1).alias("__key")).write.format(
            "magnetar"
        ).options(**base, topic="t", exactlyOnce="false").mode("append").save()
    assert "column '__key' must be a string or binary" in str(info.value)
