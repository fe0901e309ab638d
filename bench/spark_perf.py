"""The ``magnetar`` Spark data source at pipeline scale: rows/s of batch writes, batch reads
(storage and broker paths) and streaming reads, for a batched and an unbatched topic, against
three references measured in the same run.

Issue 28 §5. One ``magnetar standalone`` (free ports, temporary data dir), one Spark session
(``--master``, default ``local[2]``). ``--messages`` rows of ``--message-bytes`` bytes
(default 1,000,000 x 100) in topics of ``--partitions`` partitions:

- ``write_batched``: ``spark.range(n)`` -> ``value`` -> ``df.write.format("magnetar")``
  (exactly-once, the default: batch entries cut on the sink's grid) into topic ``batched``;
- ``write_unbatched``: the same with ``pulsar.producer.batchingEnabled=false`` (one entry a
  row) into topic ``unbatched``;
- ``read_<storage|broker>_<batched|unbatched>``: ``spark.read.format("magnetar")`` with
  ``readPath`` storage / broker, ``count()`` and ``sum(length(value))`` (every row's value
  goes through);
- ``stream_<batched|unbatched>``: ``spark.readStream`` with ``Trigger.AvailableNow`` into a
  ``noop`` sink, from earliest to the end (the default read path);
- references: ``client_send_batch`` (``magnetar.client`` alone, one producer per partition,
  ``Producer.send_batch`` of the same payloads, partitions concurrently: the throughput API),
  ``client_read`` (a reader per partition, ``receive_batch``, payloads only),
  ``parquet_read`` (Spark reading the same rows, same columns, from a Parquet file) and
  ``memory_read`` (a Python data source yielding the same rows as Arrow batches from memory:
  the ceiling of Spark's Python data source API; its second run, the first starts the
  workers).

The storage reads and the streams run twice, as the in-memory source does:
``read_storage_<topic>_first`` and ``stream_<topic>_first`` pay the warm-up of a query's
first run (Spark's JIT of the Arrow-to-row path, the reading module's first imports in each
worker), ``read_storage_<topic>`` and ``stream_<topic>`` are the warm figures the ratios use
(the in-memory source's is its second run too). Each figure is rows per
second of wall time from the action's start to its end (planning
included: what a user waits for; the session's Python workers are started by a small warm-up
write and read first, as in a long-running pipeline). ``worker_rss_mb_max``: the largest
resident size seen of any Python worker while the storage reads ran (what a task's memory
bound comes to). The ratios are the issue's targets: batch read of each topic over the
in-memory ceiling, streaming over batch read, batch write over ``client_send_batch``. The
last line printed is one JSON object.

    .venv/bin/python bench/spark_perf.py --messages 10000000 --partitions 1
    .venv/bin/python bench/spark_perf.py --messages 200000          # a smoke run
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pathlib
import shutil
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import StandaloneServer, loadavg

NS = "persistent://public/default"


def _admin(web_url: str, method: str, path: str, body: object) -> None:
    req = urllib.request.Request(
        web_url + path,
        data=json.dumps(body).encode(),
        method=method,
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=60):
        pass


def _payloads(n: int, size: int, start: int = 0) -> list[bytes]:
    return [str(i).encode().ljust(size, b"x") for i in range(start, start + n)]


async def _client_send_batch(service_url: str, topic: str, n: int, size: int) -> float:
    """``Producer.send_batch`` of the same payloads, one producer per partition."""
    from magnetar.client import Client

    async with Client(service_url) as client:
        names = await client.get_topic_partitions(topic)
        share = [len(range(i, n, len(names))) for i in range(len(names))]
        chunks = [_payloads(k, size) for k in share]
        start = time.perf_counter()

        async def one(name: str, payloads: list[bytes]) -> None:
            producer = await client.create_producer(
                name, block_if_queue_full=True, max_pending_messages=20_000
            )
            futs = []
            for i in range(0, len(payloads), 100_000):
                futs.append(await producer.send_batch(payloads[i : i + 100_000]))
            await asyncio.gather(*futs)

        await asyncio.gather(*(one(name, c) for name, c in zip(names, chunks, strict=True)))
        return time.perf_counter() - start


async def _client_read(service_url: str, topic: str) -> tuple[float, int]:
    """A reader per partition, ``receive_batch``, payloads only."""
    from magnetar.client import Client, MessageId

    async with Client(service_url) as client:
        names = await client.get_topic_partitions(topic)
        start = time.perf_counter()

        async def one(name: str) -> int:
            reader = await client.create_reader(name, MessageId.earliest, receiver_queue_size=5000)
            last = await reader.get_last_message_id()
            got = 0
            while True:
                batch = await reader.consumer.receive_batch(5000, 60_000)
                got += len(batch.payloads())
                if batch.message_ids()[-1] >= last:
                    break
            await reader.close()
            return got

        counts = await asyncio.gather(*(one(name) for name in names))
        return time.perf_counter() - start, sum(counts)


class WorkerMemory:
    """Samples the resident size of Spark's Python workers (``pyspark.daemon``'s children)."""

    def __init__(self) -> None:
        self.max_mb = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        page_mb = os.sysconf("SC_PAGE_SIZE") / (1 << 20)
        while not self._stop.is_set():
            daemons, procs = set(), {}
            for d in pathlib.Path("/proc").iterdir():
                if not d.name.isdigit():
                    continue
                try:
                    cmd = (d / "cmdline").read_bytes()
                    ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
                    rss = int((d / "statm").read_text().split()[1]) * page_mb
                except (OSError, ValueError, IndexError):
                    continue
                if b"pyspark.daemon" in cmd:
                    daemons.add(int(d.name))
                procs[int(d.name)] = (ppid, rss)
            for ppid, rss in procs.values():
                if ppid in daemons:
                    self.max_mb = max(self.max_mb, rss)
            self._stop.wait(0.2)  # sampling period

    def __enter__(self) -> WorkerMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)


def _memory_source(rows: int, size: int, tasks: int) -> Any:
    """A Python data source yielding ``rows`` rows (the ``magnetar`` source's columns) as
    Arrow batches built once in memory, in ``tasks`` partitions."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    from magnetar.spark.rows import SOURCE_DDL

    class MemoryReader(DataSourceReader):  # type: ignore[misc]
        def partitions(self) -> list[InputPartition]:
            return [InputPartition(len(range(i, rows, tasks))) for i in range(tasks)]

        def read(self, partition: InputPartition) -> Iterator[Any]:
            import datetime

            import pyarrow as pa

            from magnetar.spark.rows import arrow_schema

            n = 65_536
            now = datetime.datetime.now(datetime.UTC)
            batch = pa.RecordBatch.from_arrays(
                [
                    pa.array(_payloads(n, size), pa.binary()),
                    pa.nulls(n, pa.binary()),
                    pa.array(["persistent://public/default/memory"] * n),
                    pa.array([b"\x08\x01\x10\x02\x18\x00"] * n, pa.binary()),
                    pa.array([f"1:{i}:-1" for i in range(n)]),
                    pa.array([now] * n, pa.timestamp("us", tz="UTC")),
                    pa.nulls(n, pa.timestamp("us", tz="UTC")),
                    pa.nulls(n, pa.map_(pa.string(), pa.string())),
                ],
                schema=arrow_schema(),
            )
            left = partition.value
            while left > 0:
                yield batch if left >= n else batch.slice(0, left)
                left -= n

    class MemorySource(DataSource):  # type: ignore[misc]
        @classmethod
        def name(cls) -> str:
            return "memory_rows"

        def schema(self) -> str:
            return SOURCE_DDL

        def reader(self, schema: Any) -> Any:
            return MemoryReader()

    return MemorySource


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--message-bytes", type=int, default=100)
    ap.add_argument("--partitions", type=int, default=1)
    ap.add_argument("--master", default="local[2]")
    args = ap.parse_args()
    print("command:", " ".join([sys.executable, *sys.argv]), flush=True)
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    import magnetar.spark

    n, size, parts = args.messages, args.message_bytes, args.partitions
    result: dict[str, Any] = {
        "bench": "spark_perf",
        "messages": n,
        "message_bytes": size,
        "partitions": parts,
        "master": args.master,
        "loadavg_start": loadavg(),
    }
    seconds: dict[str, float] = {}
    scratch = pathlib.Path(tempfile.mkdtemp(prefix="spark-perf-"))
    with StandaloneServer() as server:
        # A pipeline's topics have retention: without it the broker deletes a topic with no
        # producer and no subscription after 60 s (inactive-topic deletion, as Pulsar), and
        # storage reads are not connections to it (the reference reader came last and found
        # the batched topic gone).
        _admin(
            server.web_url,
            "POST",
            "/admin/v2/namespaces/public/default/retention",
            {"retentionTimeInMinutes": -1, "retentionSizeInMB": -1},
        )
        for name in ("batched", "unbatched", "client"):
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
            .config("spark.python.worker.reuse", "true")
            .config("spark.driver.memory", "2g")
            .getOrCreate()
        )
        spark.sparkContext.setLogLevel("ERROR")
        magnetar.spark.register(spark)
        opts = {"service.url": server.service_url, "admin.url": server.web_url}
        tasks = spark.sparkContext.defaultParallelism

        def timed(key: str, action: Callable[[], Any]) -> Any:
            t = time.perf_counter()
            out = action()
            seconds[key] = time.perf_counter() - t
            print(f"{key:28s} {n / seconds[key]:>12,.0f} rows/s", flush=True)
            return out

        def rows(df: Any) -> None:
            row = df.agg(F.count("*").alias("n"), F.sum(F.length("value")).alias("b")).collect()[0]
            assert row.n == n and row.b == n * size, (row, n)

        try:
            # warm up: Python workers started, modules imported, before anything is timed
            warm = spark.range(0, 1000, 1, tasks).select(
                F.col("id").cast("string").cast("binary").alias("value")
            )
            warm.write.format("magnetar").options(**opts, topic=f"{NS}/warm").mode("append").save()
            for path in ("storage", "broker"):
                spark.read.format("magnetar").options(
                    **opts, topic=f"{NS}/warm", readPath=path
                ).load().count()
            source = spark.range(0, n, 1, max(tasks, parts)).select(
                F.expr(f"cast(rpad(cast(id as string), {size}, 'x') as binary)").alias("value")
            )
            for topic, extra in (
                ("batched", {}),
                ("unbatched", {"pulsar.producer.batchingEnabled": "false"}),
            ):
                timed(
                    f"write_{topic}",
                    lambda topic=topic, extra=extra: (
                        source.write.format("magnetar")
                        .options(**opts, topic=f"{NS}/{topic}", **extra)
                        .mode("append")
                        .save()
                    ),
                )
            memory = WorkerMemory()
            with memory:
                for path in ("storage", "broker"):
                    for topic in ("batched", "unbatched"):
                        df = spark.read.format("magnetar").options(
                            **opts, topic=f"{NS}/{topic}", readPath=path
                        )
                        if path == "storage":  # first and warm, as the in-memory source
                            timed(f"read_{path}_{topic}_first", lambda df=df: rows(df.load()))
                        timed(f"read_{path}_{topic}", lambda df=df: rows(df.load()))
            result["worker_rss_mb_max"] = round(memory.max_mb)
            for topic in ("batched", "unbatched"):

                def stream(topic: str = topic) -> None:
                    query = (
                        spark.readStream.format("magnetar")
                        .options(**opts, topic=f"{NS}/{topic}", startingOffsets="earliest")
                        .load()
                        .writeStream.format("noop")
                        .trigger(availableNow=True)
                        .start()
                    )
                    query.awaitTermination()
                    got = sum(p["numInputRows"] for p in query.recentProgress)
                    assert got == n, (got, n)

                timed(f"stream_{topic}_first", stream)  # first and warm, as the reads
                timed(f"stream_{topic}", stream)
            # references: Parquet and the in-memory Python source, same rows and columns
            parquet = str(scratch / "rows.parquet")
            spark.read.format("magnetar").options(
                **opts, topic=f"{NS}/batched"
            ).load().write.parquet(parquet)
            timed("parquet_read", lambda: rows(spark.read.parquet(parquet)))
            spark.dataSource.register(_memory_source(n, size, tasks))
            timed("memory_read_first", lambda: rows(spark.read.format("memory_rows").load()))
            timed("memory_read", lambda: rows(spark.read.format("memory_rows").load()))
        finally:
            spark.stop()
            shutil.rmtree(scratch, ignore_errors=True)

        seconds["client_send_batch"] = asyncio.run(
            _client_send_batch(server.service_url, f"{NS}/client", n, size)
        )
        read_s, got = asyncio.run(_client_read(server.service_url, f"{NS}/batched"))
        assert got == n, (got, n)
        seconds["client_read"] = read_s

    rate = {k: round(n / s) for k, s in seconds.items()}
    result.update({f"{k}_rows_s": v for k, v in rate.items()})
    ceiling = rate["memory_read"]
    for topic in ("batched", "unbatched"):
        for path in ("storage", "broker"):
            result[f"ratio_read_{path}_{topic}_to_memory"] = round(
                rate[f"read_{path}_{topic}"] / ceiling, 3
            )
        result[f"ratio_stream_{topic}_to_read"] = round(
            rate[f"stream_{topic}"] / rate[f"read_storage_{topic}"], 3
        )
    result["ratio_write_batched_to_client_send_batch"] = round(
        rate["write_batched"] / rate["client_send_batch"], 3
    )
    result["loadavg_end"] = loadavg()
    for key, value in result.items():
        print(f"{key:44s} {value}")
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
