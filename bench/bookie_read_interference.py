"""What a catch-up reader costs a bookie's adds: lone-add latency with and without bulk reads.

Starts a bookie process (disk engine, journal fsync on), fills one ledger with ``--fill-mb``
of ``--entry-bytes`` entries (so most of it is in entry logs, past the write cache), then
alternates two phases ``--rounds`` times, each ``--seconds`` long:

    idle   one add at a time to a second ledger (100 B entries): the adds' latencies
    busy   the same, while a reader process reads the filled ledger over and over with
           packed range reads of ``--read-kib`` (as the offload worker, Spark and a broker's
           catch-up cursor read), in ``SCHED_IDLE`` with ``--reader-idle`` (the offload
           worker's class) or at normal priority

``--reads fg bg`` runs the busy phase twice per round, alternating: once with plain reads
(``fg``) and once with reads marked background (``bg``: ``ReadRequest.background``, as the
offload worker marks its reads), which the bookie spaces to ``--share`` percent of its time
while adds come in (its ``background_read_share_percent``; bookie/background.py). Each busy
phase has its own idle phase just before it.

Before the phases it measures, alone, what one call costs the bookie: an empty RPC (``Info``)
and one packed read of ``--read-kib`` (wall time per call, one in flight, and the bookie
process's CPU per call, all its threads).

It prints each phase's p50/p99 and the reader's MB/s; the last line is one JSON object
with per-round figures and the median p99 increase (busy over the idle phase before it).

The file's pages stay in the page cache after the fill (24 GiB here), so this measures the
bookie's CPU and loop, not the disk; ``--drop-caches`` (root) drops them before each busy
phase so the reads also go to the disk.

Example: ``.venv/bin/python bench/bookie_read_interference.py --rounds 4``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import time

import crc32c
from _common import install_uvloop
from bookie_perf import proc_cpu_s, start_bookie, stop_bookie

from magnetar.bookie.api import AddRequest
from magnetar.bookie.client import BookieClient

KEY = b"interference"
FILL_LEDGER = 7001
PROBE_LEDGER = 7002
SELF = os.path.abspath(__file__)


def _drop_caches() -> None:
    subprocess.run(["sync"], check=True)
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("1\n")


def _percentile(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))] if s else 0.0


async def _fill(client: BookieClient, mb: int, entry_bytes: int) -> int:
    payload = os.urandom(entry_bytes)
    crc = crc32c.crc32c(payload)
    count = mb * 1024 * 1024 // entry_bytes
    step = 500
    for first in range(0, count, step):
        last = min(count, first + step)
        batch = [AddRequest(FILL_LEDGER, e, e - 1, crc, payload, KEY) for e in range(first, last)]
        await client.add_batch(FILL_LEDGER, KEY, batch)
    return count


async def _probe(client: BookieClient, seconds: float, next_entry: int) -> tuple[list[float], int]:
    payload = b"p" * 100
    crc = crc32c.crc32c(payload)
    out: list[float] = []
    stop = time.perf_counter() + seconds
    while time.perf_counter() < stop:
        t0 = time.perf_counter()
        await client.add(AddRequest(PROBE_LEDGER, next_entry, next_entry - 1, crc, payload, KEY))
        out.append((time.perf_counter() - t0) * 1000)
        next_entry += 1
    return out, next_entry


async def _call_costs(
    client: BookieClient, pid: int, count: int, read_kib: int
) -> dict[str, float]:
    """Per call, alone: wall ms and bookie CPU ms of ``Info`` and of a packed read."""
    out: dict[str, float] = {}
    n = 300
    t0, cpu0 = time.perf_counter(), proc_cpu_s(pid)
    for _ in range(n):
        await client.info()
    out["info_ms"] = round((time.perf_counter() - t0) / n * 1000, 3)
    out["info_bookie_cpu_ms"] = round((proc_cpu_s(pid) - cpu0) / n * 1000, 3)
    t0, cpu0 = time.perf_counter(), proc_cpu_s(pid)
    first, reads = 0, 0
    while first < count and reads < n:
        run = await client.read_packed(FILL_LEDGER, first, count - 1, read_kib * 1024)
        first += len(run.starts)
        reads += 1
    out["read_ms"] = round((time.perf_counter() - t0) / reads * 1000, 3)
    out["read_bookie_cpu_ms"] = round((proc_cpu_s(pid) - cpu0) / reads * 1000, 3)
    return out


def _reader_main(address: str, last: int, read_kib: int, idle: bool, background: bool) -> None:
    """The reader child: packed reads of the filled ledger, start to end, over and over;
    prints the bytes read so far on each SIGTERM-free line of stdout."""
    if idle:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))

    async def run() -> None:
        client = BookieClient(address, background_reads=background)
        total = 0
        t0 = time.perf_counter()
        try:
            while True:
                first = 0
                while first <= last:
                    run = await client.read_packed(FILL_LEDGER, first, last, read_kib * 1024)
                    first += len(run.starts)
                    total += len(run.data)
                    now = time.perf_counter()
                    if now - t0 >= 0.5:
                        print(total, flush=True)
                        t0 = now
        finally:
            await client.close()

    install_uvloop()
    asyncio.run(run())


async def main_async(args: argparse.Namespace) -> dict[str, object]:
    args.transport = "grpc"
    args.storage = "disk"
    proc, address, data_dir = start_bookie(args)
    client = BookieClient(address)
    rounds: list[dict[str, float | str]] = []
    costs: dict[str, float] = {}
    try:
        count = await _fill(client, args.fill_mb, args.entry_bytes)
        print(f"# filled ledger {FILL_LEDGER}: {count} entries of {args.entry_bytes} B", flush=True)
        costs = await _call_costs(client, proc.pid, count, args.read_kib)
        print(
            f"# alone, per call: Info {costs['info_ms']} ms (bookie CPU "
            f"{costs['info_bookie_cpu_ms']} ms); {args.read_kib} KiB packed read "
            f"{costs['read_ms']} ms (bookie CPU {costs['read_bookie_cpu_ms']} ms)",
            flush=True,
        )
        next_entry = 0
        _, next_entry = await _probe(client, 1.0, next_entry)  # warm-up
        for n, mode in ((n, mode) for n in range(args.rounds) for mode in args.reads):
            idle, next_entry = await _probe(client, args.seconds, next_entry)
            if args.drop_caches:
                _drop_caches()
            cmd = [
                sys.executable,
                SELF,
                "--reader",
                address,
                str(count - 1),
                str(args.read_kib),
                "1" if args.reader_idle else "0",
                "1" if mode == "bg" else "0",
            ]
            reader = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)  # noqa: ASYNC220
            assert reader.stdout is not None
            reader.stdout.readline()  # it is reading
            busy, next_entry = await _probe(client, args.seconds, next_entry)
            reader.send_signal(signal.SIGKILL)
            lines = reader.stdout.read().split()
            reader.wait()
            read_mb = int(lines[-1]) / 1e6 if lines else 0.0
            r: dict[str, float | str] = {
                "reads": mode,
                "idle_p50_ms": round(_percentile(idle, 0.5), 3),
                "idle_p99_ms": round(_percentile(idle, 0.99), 3),
                "busy_p50_ms": round(_percentile(busy, 0.5), 3),
                "busy_p99_ms": round(_percentile(busy, 0.99), 3),
                "reader_mb_per_s": round(read_mb / args.seconds, 1),
            }
            r["p99_increase_pct"] = round(
                100 * (float(r["busy_p99_ms"]) / float(r["idle_p99_ms"]) - 1), 1
            )
            rounds.append(r)
            print(
                f"round {n + 1} {mode}: idle p50 {r['idle_p50_ms']} p99 {r['idle_p99_ms']} ms | "
                f"busy p50 {r['busy_p50_ms']} p99 {r['busy_p99_ms']} ms "
                f"({r['p99_increase_pct']:+}%) | reader {r['reader_mb_per_s']} MB/s",
                flush=True,
            )
    finally:
        await client.close()
        stop_bookie(proc)
        if not args.data_dir:
            shutil.rmtree(data_dir, ignore_errors=True)
    return {
        "bench": "bookie_read_interference",
        "read_kib": args.read_kib,
        "reader_idle": args.reader_idle,
        "share_percent": args.share,
        "alone_per_call": costs,
        "rounds": rounds,
        "median_p99_increase_pct": {
            mode: _median(rounds, mode, "p99_increase_pct") for mode in args.reads
        },
        "median_reader_mb_per_s": {
            mode: _median(rounds, mode, "reader_mb_per_s") for mode in args.reads
        },
    }


def _median(rounds: list[dict[str, float | str]], mode: str, key: str) -> float:
    return round(statistics.median(float(r[key]) for r in rounds if r["reads"] == mode), 1)


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--reader":
        address, last, kib, idle, background = sys.argv[2:7]
        _reader_main(address, int(last), int(kib), idle == "1", background == "1")
        return 0
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--fill-mb", type=int, default=256)
    p.add_argument("--entry-bytes", type=int, default=1024)
    p.add_argument("--read-kib", type=int, default=256)
    p.add_argument("--seconds", type=float, default=8.0)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--reader-idle", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--drop-caches", action="store_true", help="root: drop the page cache")
    p.add_argument("--data-dir", help="where the bookie keeps its data (default: tmp)")
    p.add_argument("--bookie-config", help="YAML config for the bookie")
    p.add_argument(
        "--reads",
        nargs="+",
        choices=["fg", "bg"],
        default=["fg"],
        help="busy phases per round, alternating: plain reads (fg), reads marked background (bg)",
    )
    p.add_argument(
        "--share",
        type=int,
        help="the bookie's background_read_share_percent (default: the bookie's default)",
    )
    args = p.parse_args()
    if args.share is not None:
        os.environ["MAGNETAR_BOOKIE_BACKGROUND_READ_SHARE_PERCENT"] = str(args.share)
    print(f"# command: {shlex.join([sys.executable, *sys.argv])}", flush=True)
    install_uvloop()
    result = asyncio.run(main_async(args))
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
