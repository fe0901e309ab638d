"""In-process throughput of the bookie storage engine (no gRPC): adds/s and MB/s.

Usage: .venv/bin/python bench/storage_perf.py [--seconds 3] [--dir /tmp/x] [--profile]
Each scenario runs ``producers`` tasks, each keeping one batch of ``batch`` entries in flight
(so ``producers x batch`` entries are in flight), over ``ledgers`` ledgers, on a fresh bookie in
a temporary directory on the real disk. ``engine_cpu_us_per_add`` (process CPU time of all
threads per add, minus the time the bench spends building requests) is the number that does
not depend on what else runs on the machine. Adds go through ``submit_packed`` (the engine's
only add path, as the gRPC service hands it a received message). Batch latency is from
``submit_packed`` to its future resolving (after the journal fdatasync). The last line is a
JSON object with every result.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

import crc32c

from magnetar.bookie.api import AddRequest
from magnetar.bookie.core import Bookie, BookieConfig
from magnetar.bookie.wire import pack_entries

SCENARIOS = [
    # name, entry size, batch, producers, ledgers
    ("100B", 100, 128, 2, 8),
    ("1KB", 1024, 128, 2, 8),
    ("1KB-256inflight-b32", 1024, 32, 8, 8),
    ("1KB-1024inflight", 1024, 128, 8, 8),
    ("64KB", 64 * 1024, 8, 4, 4),
    ("64KB-128inflight", 64 * 1024, 16, 8, 8),
]


async def run_scenario(  # noqa: PLR0917
    base: str,
    name: str,
    size: int,
    batch: int,
    producers: int,
    ledgers: int,
    seconds: float,
) -> dict[str, object]:
    d = tempfile.mkdtemp(prefix=f"storage-perf-{name}-", dir=base)
    bookie = Bookie(BookieConfig(journal_dir=f"{d}/journal", ledger_dir=f"{d}/ledgers"))
    await bookie.start()
    payload = os.urandom(size)
    crc = crc32c.crc32c(payload)
    key = b"k" * 20
    latencies: list[float] = []
    counts = [0] * producers
    stop_at = time.perf_counter() + seconds
    failures = 0
    build_s = [0.0]  # time the bench spends building AddRequest objects (not the engine's)

    async def producer(p: int) -> None:
        nonlocal failures
        next_entry = [0] * ledgers
        li = p % ledgers
        while time.perf_counter() < stop_at:
            li = (li + 1) % ledgers
            lid = p * ledgers + li + 1  # each producer writes its own ledgers
            first = next_entry[li]
            next_entry[li] = first + batch
            b0 = time.thread_time()
            reqs = [
                AddRequest(lid, e, e - 1, crc, payload, key) for e in range(first, first + batch)
            ]
            buf = b"".join(pack_entries(lid, reqs)[0])
            build_s[0] += time.thread_time() - b0
            t0 = time.perf_counter()
            statuses = await bookie.submit_packed(buf, key)[0]
            latencies.append(time.perf_counter() - t0)
            if any(statuses):
                failures += 1
            counts[p] += batch

    t0 = time.perf_counter()
    cpu0 = time.process_time()
    await asyncio.gather(*(producer(p) for p in range(producers)))
    elapsed = time.perf_counter() - t0
    cpu_s = time.process_time() - cpu0 - build_s[0]
    total = sum(counts)
    ckpt0 = time.perf_counter()
    await bookie.close()
    close_s = time.perf_counter() - ckpt0
    shutil.rmtree(d, ignore_errors=True)
    latencies.sort()
    q = statistics.quantiles(latencies, n=100) if len(latencies) > 2 else [0.0] * 99
    return {
        "scenario": name,
        "entry_bytes": size,
        "batch": batch,
        "in_flight": batch * producers,
        "adds_per_s": round(total / elapsed),
        "mb_per_s": round(total * size / elapsed / 1e6, 1),
        # CPU of every thread of the process per add, bench's request building excluded:
        # 1e6 / this = adds/s one free core could sustain (the GIL makes it ~one core).
        "engine_cpu_us_per_add": round(cpu_s / total * 1e6, 2),
        "batch_p50_ms": round(q[49] * 1000, 2),
        "batch_p99_ms": round(q[98] * 1000, 2),
        "failed_batches": failures,
        "close_s": round(close_s, 2),
    }


async def main_async(args: argparse.Namespace) -> list[dict[str, object]]:
    results = []
    for name, size, batch, producers, ledgers in SCENARIOS:
        if args.only and name not in args.only:
            continue
        r = await run_scenario(args.dir, name, size, batch, producers, ledgers, args.seconds)
        print(r, file=sys.stderr)
        results.append(r)
    return results


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--dir", default=tempfile.gettempdir())
    parser.add_argument("--only", nargs="*")
    parser.add_argument("--profile", action="store_true", help="pyinstrument the run")
    parser.add_argument("--uvloop", action="store_true")
    parser.add_argument(
        "--switch-interval-ms", type=float, default=None, help="sys.setswitchinterval (GIL)"
    )
    args = parser.parse_args()
    if args.switch_interval_ms is not None:
        sys.setswitchinterval(args.switch_interval_ms / 1000.0)
    if args.uvloop:
        import uvloop

        uvloop.install()
    if args.profile:
        from pyinstrument import Profiler

        profiler = Profiler(interval=0.0005, async_mode="disabled")
        profiler.start()
        results = asyncio.run(main_async(args))
        profiler.stop()
        print(profiler.output_text(unicode=False, color=False, show_all=False), file=sys.stderr)
    else:
        results = asyncio.run(main_async(args))
    print(json.dumps({"storage_perf": results}))


if __name__ == "__main__":
    main()
