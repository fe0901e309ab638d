"""Bookie add throughput and latency: one bookie process, journal fsync on.

Closed loop: ``--inflight`` adds are kept outstanding through one ``BookieClient`` (one Add
stream; adds issued in the same loop iteration travel in one message). Each completion
records its latency and issues the next add. Reports adds/s, MB/s and latency percentiles.

By default it starts its own bookie (``python -m magnetar.bookie``, temporary data dir, no
metadata) and stops it at the end; ``--bookie host:port`` uses a running one instead.
``--matrix`` runs 100 B / 1 KB / 64 KB x 1 / 16 / 256 in flight. ``--baseline`` measures the
floor on the same machine and load: a bare grpc.aio stream carrying pre-built messages of
``--batch-entries`` entries with one write + ``fdatasync`` per message; ``--floor`` measures
that floor for the run's window right after the run and reports the run as a fraction of it
(``of_floor``): this machine's speed varies from day to day, the fraction much less.

The last output line is one JSON object (``adds_per_s``, ``mb_per_s``, ``p50_ms``, ``p99_ms``,
``p999_ms`` and the parameters; with ``--matrix`` also ``results`` for every combination and
the headline fields are those of 1 KB at 256 in flight).

Example: ``.venv/bin/python bench/bookie_perf.py --entry-bytes 1024 --inflight 256 --seconds 10``
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from typing import Any

import crc32c
import grpc

from magnetar.bookie.api import AddRequest
from magnetar.bookie.client import BookieClient
from magnetar.bookie.proto import bookie_pb2 as pb
from magnetar.bookie.proto import bookie_pb2_grpc as pb_grpc

KEY = b"bench-master-key"


@dataclass
class Result:
    entry_bytes: int
    inflight: int
    seconds: float
    adds: int
    errors: int
    adds_per_s: float
    mb_per_s: float
    p50_ms: float
    p99_ms: float
    p999_ms: float
    max_ms: float
    batches_sent: int
    entries_per_batch: float
    client_cpu_us_per_add: float = 0.0
    bookie_cpu_us_per_add: float = 0.0
    completed_total: int = 0  # including warm-up (for CPU per add)


def percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return float("nan")
    idx = min(len(sorted_values) - 1, max(0, round(q * (len(sorted_values) - 1))))
    return sorted_values[idx]


async def run_one(
    client: BookieClient,
    *,
    entry_bytes: int,
    inflight: int,
    seconds: float,
    warmup_s: float,
    ledger_id: int,
    batch: int = 0,
) -> Result:
    """Closed loop keeping ``inflight`` entries outstanding. ``batch == 0``: one
    ``BookieClient.add`` per entry; ``batch > 0``: ``add_batch`` calls of ``batch`` entries,
    as the managed ledger drives bookies (one future per batch)."""
    loop = asyncio.get_running_loop()
    payload = os.urandom(entry_bytes)
    crc = crc32c.crc32c(payload)
    latencies: list[float] = []
    perf = time.perf_counter
    start = perf()
    measure_from = start + warmup_s
    stop_at = measure_from + seconds
    next_entry = 0
    outstanding = 0
    completed_total = 0
    errors = 0
    first_error: list[BaseException] = []
    done = loop.create_future()
    batches_before = client.statistics().batches_sent
    entries_before = client.statistics().entries_sent
    counted_batches = [0, 0]

    def issue() -> None:
        nonlocal next_entry, outstanding
        entry = next_entry
        next_entry += 1
        outstanding += 1
        t0 = perf()
        fut = client.add(AddRequest(ledger_id, entry, entry - 1, crc, payload, KEY))
        fut.add_done_callback(lambda f, t0=t0: on_done(f, t0))

    def issue_batch() -> None:
        nonlocal next_entry, outstanding
        first = next_entry
        next_entry += batch
        outstanding += batch
        entries = [
            AddRequest(ledger_id, e, e - 1, crc, payload, KEY) for e in range(first, first + batch)
        ]
        t0 = perf()
        fut = client.add_batch(ledger_id, KEY, entries)
        fut.add_done_callback(lambda f, t0=t0: on_done(f, t0, batch))

    def on_done(fut: asyncio.Future[None], t0: float, count: int = 1) -> None:
        nonlocal outstanding, errors, completed_total
        outstanding -= count
        completed_total += count
        now = perf()
        if fut.cancelled() or fut.exception() is not None:
            errors += count
            if not first_error:
                first_error.append(fut.exception() or asyncio.CancelledError())
        elif now >= measure_from and t0 >= measure_from:
            latencies.extend([now - t0] * count)
        if now < measure_from:
            stats = client.statistics()
            counted_batches[0] = stats.batches_sent
            counted_batches[1] = stats.entries_sent
        if now < stop_at and errors < 100:
            issue_batch() if batch else issue()
        elif outstanding == 0 and not done.done():
            done.set_result(None)

    if batch:
        for _ in range(max(1, inflight // batch)):
            issue_batch()
    else:
        for _ in range(inflight):
            issue()
    await done
    elapsed = max(1e-9, min(perf(), stop_at) - measure_from)
    if first_error and not latencies:
        raise RuntimeError(f"every add failed: {first_error[0]!r}")
    latencies.sort()
    n = len(latencies)
    stats = client.statistics()
    b0 = counted_batches[0] or batches_before
    e0 = counted_batches[1] or entries_before
    batches = stats.batches_sent - b0
    entries = stats.entries_sent - e0
    return Result(
        entry_bytes=entry_bytes,
        inflight=inflight,
        seconds=round(elapsed, 3),
        adds=n,
        errors=errors,
        adds_per_s=round(n / elapsed, 1),
        mb_per_s=round(n * entry_bytes / elapsed / 1e6, 2),
        p50_ms=round(percentile(latencies, 0.50) * 1000, 3),
        p99_ms=round(percentile(latencies, 0.99) * 1000, 3),
        p999_ms=round(percentile(latencies, 0.999) * 1000, 3),
        max_ms=round((latencies[-1] if latencies else float("nan")) * 1000, 3),
        batches_sent=batches,
        entries_per_batch=round(entries / batches, 1) if batches else 0.0,
        completed_total=completed_total,
    )


def proc_cpu_s(pid: int | None) -> float:
    """User + system CPU seconds of a process (all threads), from /proc; 0 if unknown."""
    if pid is None:
        return 0.0
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_healthy(address: str, proc: subprocess.Popen[bytes] | None, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise SystemExit(f"bookie exited with {proc.returncode}")
        try:
            with grpc.insecure_channel(address) as ch:
                resp = pb_grpc.BookieStub(ch).Health(pb.HealthRequest(), timeout=0.5)
                if resp.serving:
                    return
        except grpc.RpcError:
            pass
        time.sleep(0.05)  # readiness polling interval
    raise SystemExit(f"bookie at {address} not healthy after {timeout_s}s")


def start_bookie(args: argparse.Namespace) -> tuple[subprocess.Popen[bytes], str, str]:
    data_dir = args.data_dir or tempfile.mkdtemp(prefix="bookie-perf-")
    port = free_port()
    if args.transport == "tcp":
        args.fast_add_port = free_port()
    cmd = [
        sys.executable,
        "-m",
        "magnetar.bookie",
        "--data-dir",
        os.path.join(data_dir, "bookie"),
        "--port",
        str(port),
        "--metadata",
        "none",
        "--storage",
        args.storage,
        "--log-level",
        "WARNING",
    ]
    if args.bookie_config:
        cmd += ["--config", args.bookie_config]
    if args.transport == "tcp":
        cmd += ["--fast-add-port", str(args.fast_add_port)]
    log_path = os.path.join(data_dir, "bookie.log")
    print(f"# bookie: {shlex.join(cmd)}  (log: {log_path})", flush=True)
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    address = f"127.0.0.1:{port}"
    wait_healthy(address, proc, 30)
    return proc, address, data_dir


def stop_bookie(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM (a graceful stop), SIGKILL after 30 s."""
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)


async def main_async(args: argparse.Namespace) -> list[Result]:
    proc: subprocess.Popen[bytes] | None = None
    scratch: str | None = None  # a data dir this run created, removed at the end
    if args.bookie:
        address = args.bookie
        wait_healthy(address, None, 10)
    else:
        proc, address, data_dir = start_bookie(args)
        scratch = None if args.data_dir else data_dir
    if args.profile_bookie and proc is not None:
        print(f"# bookie pid {proc.pid} (profile it with py-spy)", flush=True)
    add_address = None
    if args.transport == "tcp":
        if args.fast_add_port is None:
            raise SystemExit("--transport tcp with --bookie needs --fast-add-port")
        add_address = f"{address.rpartition(':')[0]}:{args.fast_add_port}"
    client = BookieClient(
        address,
        max_batch_entries=args.batch_entries,
        max_batch_bytes=args.batch_bytes,
        add_address=add_address,
    )
    spy: subprocess.Popen[bytes] | None = None
    results: list[Result] = []
    try:
        if args.matrix:
            combos = [(b, i) for b in (100, 1024, 65536) for i in (1, 16, 256)]
        else:
            combos = [(args.entry_bytes, args.inflight)]
        if args.profile_bookie and proc is not None:
            total = len(combos) * (args.seconds + args.warmup_seconds) + 1
            spy = subprocess.Popen(  # noqa: ASYNC220 (started once, before measuring)
                [
                    shutil.which("py-spy")
                    or os.path.join(os.path.dirname(sys.executable), "py-spy"),
                    "record",
                    "--pid",
                    str(proc.pid),
                    "--duration",
                    str(int(total)),
                    "--format",
                    "raw",
                    "-o",
                    args.profile_bookie,
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        for n, (entry_bytes, inflight) in enumerate(combos):
            cpu0, bcpu0 = time.process_time(), proc_cpu_s(proc.pid if proc else None)
            r = await run_one(
                client,
                entry_bytes=entry_bytes,
                inflight=inflight,
                seconds=args.seconds,
                warmup_s=args.warmup_seconds,
                ledger_id=args.ledger_base + n,
                batch=args.batch,
            )
            total_adds = max(1, r.completed_total)
            r.client_cpu_us_per_add = round((time.process_time() - cpu0) / total_adds * 1e6, 2)
            if proc is not None:
                bcpu = proc_cpu_s(proc.pid) - bcpu0
                r.bookie_cpu_us_per_add = round(bcpu / total_adds * 1e6, 2)
            results.append(r)
            print(
                f"  {r.entry_bytes:>7} B  inflight {r.inflight:>4}: {r.adds_per_s:>10.0f} adds/s "
                f"{r.mb_per_s:>8.1f} MB/s  p50 {r.p50_ms:.2f} ms  p99 {r.p99_ms:.2f} ms  "
                f"p99.9 {r.p999_ms:.2f} ms  ({r.entries_per_batch} entries/batch; CPU/add "
                f"client {r.client_cpu_us_per_add} us, bookie {r.bookie_cpu_us_per_add} us)",
                flush=True,
            )
    finally:
        await client.close()
        if spy is not None:
            spy.wait()
        if proc is not None:
            stop_bookie(proc)
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
    return results


def table(results: list[Result]) -> str:
    head = (
        f"{'entry B':>8} {'inflight':>8} {'adds/s':>10} {'MB/s':>8} {'p50 ms':>8} "
        f"{'p99 ms':>8} {'p99.9 ms':>9} {'max ms':>8} {'err':>4} {'ent/batch':>9}"
    )
    lines = [head, "-" * len(head)]
    for r in results:
        lines.append(
            f"{r.entry_bytes:>8} {r.inflight:>8} {r.adds_per_s:>10.0f} {r.mb_per_s:>8.1f} "
            f"{r.p50_ms:>8.2f} {r.p99_ms:>8.2f} {r.p999_ms:>9.2f} {r.max_ms:>8.2f} "
            f"{r.errors:>4} {r.entries_per_batch:>9.1f}"
        )
    return "\n".join(lines)


BASELINE_METHOD = "/baseline.Journal/Add"


async def baseline_serve(port: int, directory: str) -> None:
    """The floor: a bare grpc.aio stream whose handler writes each message to a file and
    fdatasyncs it (in a thread) before answering with 8 bytes; no parsing, no cache, no index."""
    fd = os.open(os.path.join(directory, "baseline.journal"), os.O_WRONLY | os.O_CREAT)

    async def handler(requests: Any, context: Any) -> Any:
        async for message in requests:
            os.write(fd, message)
            await asyncio.to_thread(os.fdatasync, fd)
            yield message[:8]

    server = grpc.aio.server(options=[("grpc.max_receive_message_length", 64 << 20)])
    handlers = {"Add": grpc.stream_stream_rpc_method_handler(handler)}
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler("baseline.Journal", handlers),)
    )
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    await server.wait_for_termination()


async def baseline_run(args: argparse.Namespace) -> Result:
    """Closed loop over the bare stream: ``inflight / batch_entries`` messages of
    ``batch_entries`` entries in flight (each a pre-built message: no per-entry client work)."""
    directory = tempfile.mkdtemp(prefix="bookie-perf-baseline-")
    port = free_port()
    cmd = [sys.executable, __file__, "--baseline-serve", str(port), "--data-dir", directory]
    proc = subprocess.Popen(cmd, start_new_session=True)  # noqa: ASYNC220 (once, before measuring)
    per = max(1, min(args.batch_entries, args.inflight))
    depth = max(1, args.inflight // per)
    message = os.urandom(args.entry_bytes) * per
    try:
        async with grpc.aio.insecure_channel(
            f"127.0.0.1:{port}", options=[("grpc.max_send_message_length", 64 << 20)]
        ) as channel:
            await asyncio.wait_for(channel.channel_ready(), 30)
            call = channel.stream_stream(BASELINE_METHOD)()
            sent: list[float] = []
            latencies: list[float] = []
            perf = time.perf_counter
            for _ in range(depth):
                sent.append(perf())
                await call.write(message)
            start = perf()
            measure_from = start + args.warmup_seconds
            stop_at = measure_from + args.seconds
            done = 0
            head = 0
            while perf() < stop_at:
                await call.read()
                now = perf()
                if now >= measure_from:
                    done += per
                    latencies.extend([now - sent[head]] * per)
                head += 1
                sent.append(perf())
                await call.write(message)
            await call.done_writing()
    finally:
        proc.terminate()
        proc.wait(10)
        shutil.rmtree(directory, ignore_errors=True)
    latencies.sort()
    elapsed = args.seconds
    return Result(
        entry_bytes=args.entry_bytes,
        inflight=args.inflight,
        seconds=elapsed,
        adds=done,
        errors=0,
        adds_per_s=round(done / elapsed, 1),
        mb_per_s=round(done * args.entry_bytes / elapsed / 1e6, 2),
        p50_ms=round(percentile(latencies, 0.50) * 1000, 3),
        p99_ms=round(percentile(latencies, 0.99) * 1000, 3),
        p999_ms=round(percentile(latencies, 0.999) * 1000, 3),
        max_ms=round((latencies[-1] if latencies else float("nan")) * 1000, 3),
        batches_sent=head,
        entries_per_batch=float(per),
    )


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--entry-bytes", type=int, default=1024)
    p.add_argument("--inflight", type=int, default=256)
    p.add_argument("--seconds", type=float, default=10.0, help="measured time per run")
    p.add_argument("--warmup-seconds", type=float, default=1.0)
    p.add_argument("--matrix", action="store_true", help="100 B/1 KB/64 KB x 1/16/256")
    p.add_argument("--bookie", help="host:port of a running bookie (default: start one)")
    p.add_argument(
        "--transport",
        choices=["grpc", "tcp"],
        default="grpc",
        help="Add stream over gRPC or the bookie's fast add port (bookie/fast_add.py)",
    )
    p.add_argument("--fast-add-port", type=int, help="with --bookie and --transport tcp")
    p.add_argument("--data-dir", help="where the started bookie keeps its data (default: tmp)")
    p.add_argument("--storage", choices=["disk", "memory"], default="disk")
    p.add_argument("--bookie-config", help="YAML config for the started bookie (engine: ...)")
    p.add_argument("--batch-entries", type=int, default=1000, help="max entries per message")
    p.add_argument(
        "--batch",
        type=int,
        default=0,
        help="entries per BookieClient.add_batch call, as brokers send them (0: one add() each)",
    )
    p.add_argument("--batch-bytes", type=int, default=4 * 1024 * 1024)
    p.add_argument("--ledger-base", type=int, default=int(time.time()) % 1_000_000 * 100)
    p.add_argument("--uvloop", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--profile-bookie", metavar="FILE", help="py-spy raw profile of the bookie")
    p.add_argument(
        "--tune-gc",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="client process GC as a broker's (young threshold 50,000, start-up heap frozen)",
    )
    p.add_argument(
        "--tune-malloc",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="client process glibc malloc as the bookie's (bookie.main.tune_malloc)",
    )
    p.add_argument(
        "--baseline",
        action="store_true",
        help="measure the floor instead: a bare grpc.aio stream, one write + fdatasync per "
        "message of --batch-entries entries (run it next to a bookie run: same load)",
    )
    p.add_argument(
        "--floor",
        action="store_true",
        help="after the run, measure the --baseline floor for the same window (--inflight "
        "entries in one message) and report floor_adds_per_s and of_floor (the fraction)",
    )
    p.add_argument("--baseline-serve", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.baseline_serve:
        asyncio.run(baseline_serve(args.baseline_serve, args.data_dir))
        return 0
    print(f"# command: {shlex.join([sys.executable, *sys.argv])}", flush=True)
    if args.uvloop:
        try:
            import uvloop

            uvloop.install()
        except ImportError:
            pass
    if args.tune_gc:
        gc.set_threshold(50_000, 20, 100)
        gc.freeze()
    if args.tune_malloc:
        from magnetar.bookie.main import tune_malloc

        tune_malloc()
    results = [asyncio.run(baseline_run(args))] if args.baseline else asyncio.run(main_async(args))
    print(table(results), flush=True)
    headline = next(
        (r for r in results if r.entry_bytes == 1024 and r.inflight == 256), results[-1]
    )
    out: dict[str, Any] = asdict(headline)
    out.update(
        baseline=args.baseline,
        load_avg_1m=os.getloadavg()[0],
        storage=args.storage,
        transport=args.transport,
        bookie=args.bookie or "started",
        batch_entries=args.batch_entries,
        journal_fsync=True,
    )
    if args.matrix:
        out["results"] = [asdict(r) for r in results]
    if args.floor and not args.baseline:
        # The same machine, minutes apart: its speed varies from day to day (the floor below
        # measured 35,000-158,000 entries/s on different days), so a figure is read against it.
        floor_args = argparse.Namespace(**vars(args))
        floor_args.batch_entries = headline.inflight  # the whole window in one message
        floor_args.inflight = headline.inflight
        floor = asyncio.run(baseline_run(floor_args))
        print(f"# floor (bare stream, one message + fdatasync per window): {floor.adds_per_s:.0f}")
        out.update(
            floor_adds_per_s=floor.adds_per_s,
            floor_p99_ms=floor.p99_ms,
            of_floor=round(headline.adds_per_s / max(1e-9, floor.adds_per_s), 3),
        )
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
