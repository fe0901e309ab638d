"""Delayed delivery at scale: broker RSS for N pending delayed entries, delivery lateness under
load, and recovery time, against real bookie processes and ZooKeeper.

Starts a ZooKeeper server (Debian's jar) on a free port and ``--bookies`` bookie processes;
this process plays the broker: one ``DelayedDeliveryIndex`` over its managed ledger
(``ManagedLedgerSegmentStore``) on the real clock.
1. memory: RSS before and after adding ``--pending`` entries due between 1 day and 2 years
   ahead (in dispatcher-sized batches of 100), flushed to the bookies.
2. lateness: ``--due`` entries due within the next ``--window-s`` seconds while
   ``--load-rate`` far-future entries a second keep arriving; a consumer pops on ``on_due``;
   lateness = pop time - deliver_at (early deliveries are counted: must be 0).
3. recovery: close, reopen and recover the index; the time and the pending count.
The last output line is one JSON object (pending, rss_delta_mb, delivery_lateness_p99_ms, ...).

    .venv/bin/python bench/delayed_perf.py --pending 1000000 --due 20000 --window-s 20 \
        --load-rate 20000
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import pathlib
import random
import sys
import tempfile
import time
import uuid

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from support.bookies import BookieFactory  # noqa: E402
from support.ledger_cluster import bookie_client_factory  # noqa: E402
from support.zookeeper import ZooKeeperServer  # noqa: E402

from magnetar.broker.delayed import (  # noqa: E402
    DelayedDeliveryConfig,
    DelayedDeliveryIndex,
    ManagedLedgerSegmentStore,
    delayed_index_ledger_name,
)
from magnetar.broker.ledger import ManagedLedgerConfig, ManagedLedgerFactory, Position  # noqa: E402
from magnetar.clock import SystemClock  # noqa: E402
from magnetar.zk import paths  # noqa: E402
from magnetar.zk.factory import open_metadata_store  # noqa: E402

DAY_MS = 86_400_000
YEAR_MS = 365 * DAY_MS


def rss_mb() -> float:
    for line in pathlib.Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024.0
    return 0.0


def percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    return values[min(len(values) - 1, int(q * len(values)))]


async def run(args: argparse.Namespace, url: str) -> dict[str, object]:
    store = await open_metadata_store(url)
    deadline = time.monotonic() + 30
    while len(await store.children(paths.AVAILABLE_BOOKIES)) < args.bookies:
        if time.monotonic() > deadline:
            raise SystemExit("bookies did not register")
        await asyncio.sleep(0.05)
    ml_config = ManagedLedgerConfig(
        ensemble_size=args.ensemble, write_quorum=args.write_quorum, ack_quorum=args.ack_quorum
    )
    factory = ManagedLedgerFactory(store, bookie_client_factory, ml_config)
    clock = SystemClock()
    name = delayed_index_ledger_name(f"bench/ns/persistent/delayed-{uuid.uuid4().hex[:8]}", "sub")
    config = DelayedDeliveryConfig()
    wake = asyncio.Event()
    index = DelayedDeliveryIndex(
        ManagedLedgerSegmentStore(factory, name), clock, config, on_due=wake.set, name=name
    )
    await index.recover()
    rng = random.Random(1)
    next_entry = 0

    def position() -> Position:
        nonlocal next_entry
        pos = Position(1_000 + next_entry // 50_000, next_entry % 50_000)
        next_entry += 1
        return pos

    # -- 1. memory
    gc.collect()
    rss_before = rss_mb()
    t0 = time.perf_counter()
    now = clock.now_ms()
    for i in range(args.pending):
        index.add(position(), now + DAY_MS + rng.randrange(2 * YEAR_MS))
        if i % 100 == 99:
            await asyncio.sleep(0)  # one dispatcher round: seals proceed in the background
    await index.flush()
    add_s = time.perf_counter() - t0
    gc.collect()
    rss_after = rss_mb()
    st = index.statistics()

    # -- 2. lateness under load
    due: dict[Position, int] = {}
    lateness: list[float] = []
    early = 0
    stop = False

    async def producer() -> None:
        start = clock.now_ms()
        added = 0
        step = 0.01
        while not stop:
            elapsed_s = (clock.now_ms() - start) / 1000.0
            want = int(elapsed_s * args.load_rate)
            for _ in range(want - added):
                index.add(position(), clock.now_ms() + DAY_MS + rng.randrange(YEAR_MS))
            added = max(added, want)
            await asyncio.sleep(step)

    async def consumer() -> None:
        nonlocal early
        while len(lateness) + early < len(due):
            nd = index.next_due_ms()
            timeout = 1.0 if nd is None else max(0.0, (nd - clock.now_ms()) / 1000.0)
            try:
                await asyncio.wait_for(wake.wait(), min(timeout, 1.0))
            except TimeoutError:
                pass
            wake.clear()
            while True:
                t = clock.now_ms()
                got = index.pop_due(t, 1_000)
                if not got:
                    break
                for pos in got:
                    at = due.get(pos)
                    if at is None:
                        continue
                    if t < at:
                        early += 1
                    else:
                        lateness.append(t - at)
                await asyncio.sleep(0)

    prod = asyncio.ensure_future(producer())
    start = clock.now_ms()
    for _ in range(args.due):
        pos = position()
        at = start + 1_000 + rng.randrange(int(args.window_s * 1000))
        due[pos] = at
        index.add(pos, at)
    cons_task = asyncio.ensure_future(consumer())
    try:
        await asyncio.wait_for(cons_task, args.window_s + 30)
    finally:
        stop = True
        await prod
    lateness.sort()
    pending_after_load = index.size()
    rss_end = rss_mb()

    # -- 3. recovery
    await index.close()
    t1 = time.perf_counter()
    index2 = DelayedDeliveryIndex(ManagedLedgerSegmentStore(factory, name), clock, config)
    await index2.recover()
    recover_s = time.perf_counter() - t1
    recovered = index2.size()
    await index2.delete()
    await factory.close()
    await store.close()
    return {
        "pending": args.pending,
        "rss_before_mb": round(rss_before, 1),
        "rss_after_mb": round(rss_after, 1),
        "rss_delta_mb": round(rss_after - rss_before, 1),
        "index_memory_bytes": st.memory_bytes,
        "add_per_s": round(args.pending / add_s),
        "runs": st.runs,
        "chunks": st.chunks,
        "due": args.due,
        "load_rate_per_s": args.load_rate,
        "delivered": len(lateness),
        "early": early,
        "delivery_lateness_p50_ms": percentile(lateness, 0.5),
        "delivery_lateness_p99_ms": percentile(lateness, 0.99),
        "delivery_lateness_max_ms": lateness[-1] if lateness else 0.0,
        "pending_after_load": pending_after_load,
        "rss_end_mb": round(rss_end, 1),
        "recover_s": round(recover_s, 3),
        "recovered_pending": recovered,
        "loop": args.loop,
    }


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--bookies", type=int, default=2)
    p.add_argument("--ensemble", type=int, default=2)
    p.add_argument("--write-quorum", type=int, default=2)
    p.add_argument("--ack-quorum", type=int, default=2)
    p.add_argument("--pending", type=int, default=1_000_000)
    p.add_argument("--due", type=int, default=20_000)
    p.add_argument("--window-s", type=float, default=20.0)
    p.add_argument("--load-rate", type=int, default=20_000, help="far-future adds per second")
    p.add_argument("--loop", choices=["uvloop", "asyncio"], default="uvloop")
    args = p.parse_args()
    print("command:", " ".join([".venv/bin/python", "bench/delayed_perf.py", *sys.argv[1:]]))
    with tempfile.TemporaryDirectory(prefix="delayed-perf-") as tmp:
        zk = ZooKeeperServer()
        zk.start()
        bookies = BookieFactory(pathlib.Path(tmp) / "bookies")
        try:
            url = f"{zk.url}/bench-{uuid.uuid4().hex[:8]}"
            bookies.start_many(args.bookies, metadata=url)
            if args.loop == "uvloop":
                import uvloop

                uvloop.install()
            result = asyncio.run(run(args, url))
        finally:
            bookies.close()
            zk.close()
    print(json.dumps(result))


if __name__ == "__main__":
    main()
