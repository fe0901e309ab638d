"""The ``magnetar`` Spark data source: rows/s of a batch write, a batch read and a streaming read
on ``local[2]``, against ``magnetar.client`` alone doing the same work (the baseline).

Issue 17 §4. One ``magnetar standalone`` (free ports, temporary data dir), one local Spark
session. ``--messages`` messages of ``--message-bytes`` bytes (default 1,000,000 x 100):

- ``batch_write``: ``spark.range(n)`` → ``value`` of the given size →
  ``df.write.format("magnetar")`` into a topic of ``--partitions`` partitions (exactly-once,
  the default: one producer per task and partition, sequence ids, broker deduplication);
- ``batch_read``: ``spark.read.format("magnetar")`` of that topic, ``count()`` forced through
  every row's ``value`` (``sum(length(value))``);
- ``stream_read``: ``spark.readStream.format("magnetar")`` with ``Trigger.AvailableNow`` into a
  ``noop`` sink, from earliest to the end;
- baselines: ``magnetar.client`` alone, in this process: one producer per partition sending
  ``send_async`` with the same exactly-once settings (``baseline_write``), and one reader per
  partition reading everything (``baseline_read``), partitions concurrently.

Each figure is rows per second of wall time from the action's start to its end (Spark's
planning and Python worker start included: what a user waits for). The ratio is Spark's rate
over the baseline's. The last line printed is one JSON object.

    .venv/bin/python bench/spark_perf.py                      # 1,000,000 x 100 B
    .venv/bin/python bench/spark_perf.py --messages 200000
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import StandaloneServer, loadavg


def _admin(web_url: str, method: str, path: str, body: object) -> None:
    req = urllib.request.Request(
        web_url + path,
        data=json.dumps(body).encode(),
        method=method,
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=30):
        pass


async def _baseline_write(service_url: str, topic: str, n: int, size: int, parts: int) -> float:
    from magnetar.client import Client

    payload = b"x" * size
    async with Client(service_url) as client:
        names = await client.get_topic_partitions(topic)
        start = time.perf_counter()

        async def one(i: int, name: str) -> None:
            producer = await client.create_producer(
                name, producer_name=f"baseline-{i}", block_if_queue_full=True
            )
            for seq, _ in enumerate(range(i, n, len(names))):
                await producer.send_async(payload, sequence_id=seq)
            await producer.flush()

        await asyncio.gather(*(one(i, name) for i, name in enumerate(names)))
        return time.perf_counter() - start


async def _baseline_read(service_url: str, topic: str, n: int) -> tuple[float, int]:
    from magnetar.client import Client, MessageId

    async with Client(service_url) as client:
        names = await client.get_topic_partitions(topic)
        start = time.perf_counter()

        async def one(name: str) -> int:
            reader = await client.create_reader(name, MessageId.earliest)
            last = await reader.get_last_message_id()
            got = 0
            while True:
                msg = await reader.read_next(60_000)
                got += len(msg.data()) > 0
                if msg.message_id() >= last:
                    break
            await reader.close()
            return got

        counts = await asyncio.gather(*(one(name) for name in names))
        return time.perf_counter() - start, sum(counts)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--message-bytes", type=int, default=100)
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument("--master", default="local[2]")
    args = ap.parse_args()
    print("command:", " ".join([sys.executable, *sys.argv]), flush=True)
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    import magnetar.spark

    n, size, parts = args.messages, args.message_bytes, args.partitions
    result: dict[str, object] = {
        "bench": "spark_perf",
        "messages": n,
        "message_bytes": size,
        "partitions": parts,
        "master": args.master,
        "loadavg_start": loadavg(),
    }
    with StandaloneServer() as server:
        for name in ("spark-perf", "baseline-perf"):
            _admin(
                server.web_url,
                "PUT",
                f"/admin/v2/persistent/public/default/{name}/partitions",
                parts,
            )
        spark = (
            SparkSession.builder.master(args.master)
            .appName("spark_perf")
            .config("spark.ui.enabled", "false")
            .config("spark.driver.host", "127.0.0.1")
            .config("spark.driver.bindAddress", "127.0.0.1")
            .config("spark.python.authenticate.socketTimeout", "180s")
            .config("spark.driver.memory", "2g")
            .getOrCreate()
        )
        magnetar.spark.register(spark)
        opts = {
            "service.url": server.service_url,
            "admin.url": server.web_url,
            "topic": "persistent://public/default/spark-perf",
        }
        try:
            df = spark.range(0, n, 1, parts).select(
                F.expr(f"cast(rpad(cast(id as string), {size}, 'x') as binary)").alias("value")
            )
            t = time.perf_counter()
            df.write.format("magnetar").options(**opts).mode("append").save()
            write_s = time.perf_counter() - t

            t = time.perf_counter()
            row = (
                spark.read.format("magnetar")
                .options(**opts)
                .load()
                .agg(F.count("*").alias("n"), F.sum(F.length("value")).alias("bytes"))
                .collect()[0]
            )
            read_s = time.perf_counter() - t
            assert row.n == n and row.bytes == n * size, (row, n)

            t = time.perf_counter()
            query = (
                spark.readStream.format("magnetar")
                .options(**opts, startingOffsets="earliest")
                .load()
                .writeStream.format("noop")
                .trigger(availableNow=True)
                .start()
            )
            query.awaitTermination()
            stream_s = time.perf_counter() - t
            streamed = sum(p["numInputRows"] for p in query.recentProgress)
            assert streamed == n, (streamed, n)
        finally:
            spark.stop()

        base_topic = "persistent://public/default/baseline-perf"
        _admin(
            server.web_url,
            "POST",
            "/admin/v2/persistent/public/default/baseline-perf/deduplication",
            True,
        )
        bw_s = asyncio.run(_baseline_write(server.service_url, base_topic, n, size, parts))
        br_s, got = asyncio.run(_baseline_read(server.service_url, base_topic, n))
        assert got == n, (got, n)

    def rate(seconds: float) -> int:
        return round(n / seconds)

    result.update(
        batch_write_rows_s=rate(write_s),
        batch_read_rows_s=rate(read_s),
        stream_read_rows_s=rate(stream_s),
        baseline_write_rows_s=rate(bw_s),
        baseline_read_rows_s=rate(br_s),
        ratio_batch_write=round(bw_s / write_s, 3),
        ratio_batch_read=round(br_s / read_s, 3),
        ratio_stream_read=round(br_s / stream_s, 3),
        loadavg_end=loadavg(),
    )
    for key, value in result.items():
        print(f"{key:24s} {value}")
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
