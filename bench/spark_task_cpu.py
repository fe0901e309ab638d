"""The Spark connector's storage read without Spark: CPU a row of a reading task's own work.

One ``magnetar standalone`` (free ports, temporary data dir); ``--messages`` rows published
by ``magnetar.client`` into a single-partition topic, batched (``send_batch``: batch entries
of plain members) or unbatched (one entry a row); payloads of ``--message-bytes``, or with
``--vary`` of 50-150 bytes (a batch of varying sizes takes the member-by-member scan). Then
the read is planned as Spark would (``BatchReader.partitions``, ``readPath=storage``) and
every split is read in this process with ``read_split``, ``--repeat`` times: rows/s, and
CPU µs a row of this process (the task's decoding into Arrow batches) and of the bookie
(serving the reads). This is what a Spark task costs before Spark's own share (Arrow to the
JVM, the query): ``bench/spark_perf.py`` measures the whole.

    .venv/bin/python bench/spark_task_cpu.py --messages 2000000
    .venv/bin/python bench/spark_task_cpu.py --messages 2000000 --vary
    .venv/bin/python bench/spark_task_cpu.py --messages 1000000 --unbatched

The last line printed is one JSON object (the best of the repeats by this process's CPU).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
import urllib.request
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import StandaloneServer, loadavg, proc_cpu_s

TOPIC = "persistent://public/default/task-cpu"


def _payloads(n: int, size: int, vary: bool) -> list[bytes]:
    if vary:
        return [str(i).encode().ljust(50 + (i * 37) % 101, b"x") for i in range(n)]
    return [str(i).encode().ljust(size, b"x") for i in range(n)]


async def _publish(service_url: str, payloads: list[bytes], batched: bool) -> None:
    from magnetar.client import Client

    async with Client(service_url) as client:
        producer = await client.create_producer(
            TOPIC, block_if_queue_full=True, max_pending_messages=20_000, batching_enabled=batched
        )
        futures: list[Any] = []
        if batched:
            for i in range(0, len(payloads), 100_000):
                futures.append(await producer.send_batch(payloads[i : i + 100_000]))
        else:
            for payload in payloads:
                futures.append(await producer.send_async(payload))
        await asyncio.gather(*futures)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--message-bytes", type=int, default=100)
    ap.add_argument("--vary", action="store_true", help="payloads of 50-150 bytes")
    ap.add_argument("--unbatched", action="store_true", help="one entry a row")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    print("command:", " ".join([sys.executable, *sys.argv]), flush=True)
    from magnetar.spark.options import read_options
    from magnetar.spark.read import BatchReader

    n = args.messages
    result: dict[str, Any] = {
        "bench": "spark_task_cpu",
        "messages": n,
        "message_bytes": "50-150" if args.vary else args.message_bytes,
        "batched": not args.unbatched,
        "loadavg_start": loadavg(),
    }
    with StandaloneServer() as server:
        request = urllib.request.Request(
            f"{server.web_url}/admin/v2/namespaces/public/default/retention",
            data=json.dumps({"retentionTimeInMinutes": -1, "retentionSizeInMB": -1}).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        urllib.request.urlopen(request, timeout=30).close()
        payloads = _payloads(n, args.message_bytes, args.vary)
        asyncio.run(_publish(server.service_url, payloads, not args.unbatched))
        del payloads
        options = {
            "service.url": server.service_url,
            "admin.url": server.web_url,
            "topic": TOPIC,
            "readPath": "storage",
        }
        reader = BatchReader(read_options(options, streaming=False))
        bookie = server.bookie_pids()[0]
        runs = []
        for _ in range(args.repeat):
            splits = reader.partitions()
            own0, bookie0, t0 = time.process_time(), proc_cpu_s(bookie), time.perf_counter()
            rows = sum(batch.num_rows for split in splits for batch in reader.read(split))
            wall = time.perf_counter() - t0
            assert rows == n, (rows, n)
            run = {
                "splits": len(splits),
                "rows_s": round(n / wall),
                "task_cpu_us_row": round((time.process_time() - own0) / n * 1e6, 3),
                "bookie_cpu_us_row": round((proc_cpu_s(bookie) - bookie0) / n * 1e6, 3),
            }
            print(json.dumps(run), flush=True)
            runs.append(run)
    result.update(min(runs, key=lambda r: r["task_cpu_us_row"]))
    result["loadavg_end"] = loadavg()
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
