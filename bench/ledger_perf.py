"""Managed-ledger add throughput and latency against real bookie processes.

Starts what it needs: a ZooKeeper server (Debian's jar) on a free port, ``--bookies`` bookie
processes registered in it, then one ``ManagedLedger`` in this process adding
``--entry-bytes`` entries with ``--inflight`` adds outstanding for ``--seconds``.
The last output line is one JSON object: adds_per_s, p50_ms, p99_ms, p999_ms, ...

    .venv/bin/python bench/ledger_perf.py --bookies 2 --ensemble 2 --write-quorum 2 \
        --ack-quorum 2 --entry-bytes 1024 --inflight 256 --seconds 10
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import gc
import json
import os
import pathlib
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from support.bookies import BookieFactory  # noqa: E402
from support.net import free_port  # noqa: E402
from support.zookeeper import ZooKeeperServer  # noqa: E402

from magnetar.bookie import client as bookie_client  # noqa: E402
from magnetar.bookie.client import BookieClient  # noqa: E402
from magnetar.broker.bookkeeper import write_handle as handle_module  # noqa: E402
from magnetar.broker.bookkeeper.testing import FakeBookieCluster  # noqa: E402
from magnetar.broker.ledger import (  # noqa: E402
    ManagedLedgerConfig,
    ManagedLedgerFactory,
    Position,
)
from magnetar.zk import paths  # noqa: E402
from magnetar.zk.factory import open_metadata_store  # noqa: E402
from magnetar.zk.memory import MemoryMetadataServer  # noqa: E402


def proc_cpu_s(pid: int | None) -> float:
    """User + system CPU seconds of a process (from /proc), 0 if unknown."""
    if pid is None:
        return 0.0
    try:
        fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def percentile(sorted_ms: list[float], q: float) -> float:
    if not sorted_ms:
        return 0.0
    return sorted_ms[min(len(sorted_ms) - 1, int(q * len(sorted_ms)))]


class InstantBookieClient:
    """``--in-process-bookies``: encodes each batch as ``BookieClient.add_batch`` does and
    acknowledges it on the next loop iteration. What remains is this process's own cost:
    the ledger layer, the encoding and this benchmark's loop (no transport, no bookie)."""

    def __init__(self, address: str) -> None:
        self.address = address
        self.batches_sent = self.entries_sent = 0

    def add_batch(
        self, ledger_id: int, master_key: bytes, entries: Sequence[Any], *, recovery: bool = False
    ) -> asyncio.Future[None]:
        parts, _ = bookie_client.encode_entries(ledger_id, entries)
        b"".join(parts)  # the message is built once per bookie
        self.batches_sent += 1
        self.entries_sent += len(entries)
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        loop.call_soon(fut.set_result, None)
        return fut

    def statistics(self) -> Any:
        return self

    async def close(self) -> None:
        pass


async def run(
    args: argparse.Namespace, url: str, bookie_pids: list[int | None]
) -> dict[str, object]:
    made: list[ManagedLedgerFactory] = []
    if args.in_process_bookies:
        server = MemoryMetadataServer()
        FakeBookieCluster(server, count=args.bookies)  # registrations only
        store: Any = server.connect()
        client_factory: Any = InstantBookieClient
    else:
        store = await open_metadata_store(url)

        def client_factory(address: str) -> BookieClient:
            # --transport tcp: the fast add port each bookie announces in its registration
            add_address = None
            if args.transport == "tcp":
                add_address = made[0].ledger_client.registry.add_address(address)
            return BookieClient(
                address, max_batch_entries=args.max_batch_entries, add_address=add_address
            )

    deadline = time.monotonic() + 30
    while len(await store.children(paths.AVAILABLE_BOOKIES)) < args.bookies:
        if time.monotonic() > deadline:
            raise SystemExit("bookies did not register")
        await asyncio.sleep(0.05)
    config = ManagedLedgerConfig(
        ensemble_size=args.ensemble,
        write_quorum=args.write_quorum,
        ack_quorum=args.ack_quorum,
        retention_time_ms=-1,
        retention_size_bytes=-1,
    )
    factory = ManagedLedgerFactory(store, client_factory, config)
    if not args.in_process_bookies:
        made.append(factory)
    ml = await factory.open(f"bench/ns/persistent/perf-{uuid.uuid4().hex[:8]}")
    configure_gc(args.gc)
    gc_timer = GcTimer()
    payload = os.urandom(args.entry_bytes)
    latencies: list[float] = []
    loop = asyncio.get_running_loop()
    done_count = 0
    errors = 0
    inflight = 0
    warmup_end = loop.time() + args.warmup
    end = warmup_end + args.seconds
    measuring = False
    stopping = False
    drained: asyncio.Future[None] = loop.create_future()
    start_count = 0
    cpu0 = time.process_time()
    bookie_cpu0 = 0.0
    t_start = loop.time()
    add_nowait = ml.add_nowait
    now = time.perf_counter  # uvloop's loop.time() only has millisecond resolution

    # Closed loop without a semaphore (its cost is not the ledger's): every completion
    # issues the next add from its callback, so completions delivered together issue their
    # replacements together, as a broker's connections do. Every add is awaited (a done
    # callback on its future) and timed. The futures and their issue times wait in FIFOs,
    # because a managed ledger completes adds strictly in issue order; each completion
    # checks it is the oldest future issued, so a reordering fails the run rather than
    # skewing the latencies. No closure, partial or tuple is made per add.
    issued: collections.deque[asyncio.Future[Position]] = collections.deque()
    issued_at: collections.deque[float] = collections.deque()
    push_fut, pop_fut = issued.append, issued.popleft
    push_t0, pop_t0 = issued_at.append, issued_at.popleft
    record = latencies.append

    def issue() -> None:
        nonlocal inflight
        fut = add_nowait(payload)
        push_fut(fut)
        push_t0(now())
        inflight += 1
        fut.add_done_callback(on_done)

    def on_done(fut: asyncio.Future[Position]) -> None:
        nonlocal done_count, errors, inflight
        if pop_fut() is not fut:
            raise SystemExit("an add completed out of order")
        t0 = pop_t0()
        inflight -= 1
        if fut.exception() is not None:
            errors += 1
        else:
            done_count += 1
            if measuring:
                record(now() - t0)
        if not stopping:
            issue()
        elif inflight == 0 and not drained.done():
            drained.set_result(None)

    for _ in range(args.inflight):
        issue()
    await asyncio.sleep(max(0.0, warmup_end - loop.time()))
    measuring = True
    start_count = done_count
    t_start = loop.time()
    cpu0 = time.process_time()
    bookie_cpu0 = sum(proc_cpu_s(p) for p in bookie_pids)
    batches0 = batch_counts(ml)
    gc0 = gc_timer.snapshot()
    await asyncio.sleep(max(0.0, end - loop.time()))
    measuring = False
    elapsed = loop.time() - t_start
    measured = done_count - start_count
    broker_cpu = time.process_time() - cpu0
    bookie_cpu = sum(proc_cpu_s(p) for p in bookie_pids) - bookie_cpu0
    batches1 = batch_counts(ml)
    gc1 = gc_timer.snapshot()
    stopping = True
    if inflight:
        await drained
    latencies = sorted(s * 1000.0 for s in latencies)
    stats = ml.statistics()
    await factory.close()
    await store.close()
    return {
        "transport": args.transport,
        "adds_per_s": round(measured / elapsed, 1),
        "mb_per_s": round(measured * args.entry_bytes / elapsed / 1e6, 2),
        "p50_ms": round(percentile(latencies, 0.50), 2),
        "p99_ms": round(percentile(latencies, 0.99), 2),
        "p999_ms": round(percentile(latencies, 0.999), 2),
        "max_ms": round(latencies[-1], 2) if latencies else 0.0,
        "broker_cpu_us_per_add": round(broker_cpu / max(measured, 1) * 1e6, 1),
        "bookies_cpu_us_per_add": round(bookie_cpu / max(measured, 1) * 1e6, 1),
        "load_avg_1m": os.getloadavg()[0],
        "adds": measured,
        "errors": errors,
        "seconds": round(elapsed, 2),
        "ledgers": stats.ledgers,
        "bookies": args.bookies,
        "ensemble": args.ensemble,
        "write_quorum": args.write_quorum,
        "ack_quorum": args.ack_quorum,
        "entry_bytes": args.entry_bytes,
        "inflight": args.inflight,
        "loop": args.loop,
        "entries_per_bookie_batch": round(
            (batches1[1] - batches0[1]) / max(1, batches1[0] - batches0[0]), 1
        ),
        "gc": args.gc,
        "gc_collections": [b - a for a, b in zip(gc0[0], gc1[0], strict=True)],
        "gc_us_per_add": round((gc1[1] - gc0[1]) / max(measured, 1) * 1e6, 2),
    }


def batch_counts(ml: object) -> tuple[int, int]:
    """(batches, entries) sent by every bookie client so far (0s for other clients)."""
    registry = ml.ledger_client.registry  # type: ignore[attr-defined]
    batches = entries = 0
    for client in list(registry._clients.values()):
        stats = getattr(client, "statistics", None)
        if stats is not None:
            s = stats()
            batches += s.batches_sent
            entries += s.entries_sent
    return batches, entries


class GcTimer:
    """Collections per generation and seconds spent in them (``gc.callbacks``)."""

    def __init__(self) -> None:
        self.counts = [0, 0, 0]
        self.seconds = 0.0
        self._t0 = 0.0
        gc.callbacks.append(self._on_gc)

    def _on_gc(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._t0 = time.perf_counter()
        else:
            self.seconds += time.perf_counter() - self._t0
            self.counts[info["generation"]] += 1

    def snapshot(self) -> tuple[list[int], float]:
        return list(self.counts), self.seconds


def configure_gc(mode: str) -> None:
    """``default``; ``freeze`` (gc.freeze() after start-up: long-lived objects leave the
    collected generations); ``high`` (gen-0 threshold 50,000); ``freeze+high``."""
    if "high" in mode:
        gc.set_threshold(50_000, 20, 100)
    if "freeze" in mode:
        gc.collect()
        gc.freeze()


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--bookies", type=int, default=2)
    p.add_argument(
        "--transport",
        choices=["grpc", "tcp"],
        default="grpc",
        help="adds over gRPC or each bookie's fast add port (bookie/fast_add.py)",
    )
    p.add_argument("--ensemble", type=int, default=2)
    p.add_argument("--write-quorum", type=int, default=2)
    p.add_argument("--ack-quorum", type=int, default=2)
    p.add_argument("--entry-bytes", type=int, default=1024)
    p.add_argument("--inflight", type=int, default=256)
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--max-batch-entries", type=int, default=1000, help="per gRPC message")
    p.add_argument("--warmup", type=float, default=2.0)
    p.add_argument(
        "--completions-per-step",
        type=int,
        default=None,
        help="experiment: adds completed per loop callback (handle.COMPLETIONS_PER_STEP)",
    )
    p.add_argument(
        "--loop",
        choices=["uvloop", "asyncio"],
        default="uvloop",
        help="event loop (broker: uvloop)",
    )
    p.add_argument(
        "--gc",
        choices=["default", "freeze", "high", "freeze+high"],
        default="freeze+high",
        help="garbage collector setting of this (the broker's) process; the default is "
        "what a broker process runs with (broker/runtime.py tune_gc_for_serving)",
    )
    p.add_argument(
        "--in-process-bookies",
        action="store_true",
        help="diagnostic: no bookie processes; batches are encoded and acked in this process "
        "(measures the ledger layer + encoding + this loop: broker_cpu_us_per_add)",
    )
    p.add_argument(
        "--channel-option",
        action="append",
        default=[],
        metavar="NAME=INT",
        help="extra gRPC channel option of the broker's bookie clients (experiments)",
    )
    args = p.parse_args()
    # smaller ledger batches too (a ledger's batch is never split into several messages)
    handle_module.OUTBOX_MAX_ENTRIES = min(handle_module.OUTBOX_MAX_ENTRIES, args.max_batch_entries)
    if args.completions_per_step is not None:
        handle_module.COMPLETIONS_PER_STEP = args.completions_per_step
    for option in args.channel_option:
        name, _, value = option.partition("=")
        bookie_client.CHANNEL_OPTIONS.append((name, int(value)))
    if args.in_process_bookies:
        if args.loop == "uvloop":
            import uvloop

            uvloop.install()
        print(json.dumps(asyncio.run(run(args, "", [])) | {"in_process_bookies": True}))
        return
    with tempfile.TemporaryDirectory(prefix="ledger-perf-") as tmp:
        zk = ZooKeeperServer()
        zk.start()
        factory = BookieFactory(pathlib.Path(tmp) / "bookies")
        try:
            url = f"{zk.url}/bench-{uuid.uuid4().hex[:8]}"
            extra = (
                (lambda: ["--fast-add-port", str(free_port())]) if args.transport == "tcp" else list
            )
            procs = [factory.start(metadata=url, extra_args=extra()) for _ in range(args.bookies)]
            if args.loop == "uvloop":
                import uvloop

                uvloop.install()
            result = asyncio.run(run(args, url, [b.pid for b in procs]))
        finally:
            factory.close()
            zk.close()
    print(json.dumps(result))


if __name__ == "__main__":
    main()
