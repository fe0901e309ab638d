"""Re-replication after a bookie loss, while a publish load runs: time, MB/s, foreground p99.

A small real cluster: a ZooKeeper server (Debian's jar), ``--bookies`` bookie processes
(E=Qw=Qa=2) and one ``magnetar autorecovery`` process (the auditor and a replication worker,
``lostBookieRecoveryDelay`` 0, throttled by ``--batch`` = ``rereplicationEntryBatchSize`` and
``--rate-mb`` = ``replicationRateByBytes``). This process preloads ``--mb`` MB in closed
ledgers of ``--ledger-mb`` MB (entries of ``--entry-bytes``), then runs a publish load of
``--load-rate`` adds/s (``--load-bytes`` each, one open ledger at a time, rolled every
``--load-ledger-entries``) and measures its add latency for ``--baseline-s`` seconds; then
SIGKILLs the bookie holding the most data and wipes its disk. Reported:
- ``bytes_to_rereplicate``: the bytes of the entries the lost bookie held (from metadata);
- ``t_detect_s``: kill -> its registration gone (the metadata session timeout, ``--zk-timeout-ms``);
- ``t_recover_s``: registration gone -> no closed preloaded ledger references it;
- ``mb_per_s``: bytes_to_rereplicate / t_recover_s;
- ``load_p50_ms``/``load_p99_ms`` before (baseline) and during the recovery, and
  ``p99_ratio`` = during / baseline (the issue's goal: within 2x when throttled).
The last line is one JSON object.

    .venv/bin/python bench/recovery_perf.py --mb 64
    .venv/bin/python bench/recovery_perf.py --mb 16 --rate-mb 4 --batch 50
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pathlib
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import loadavg  # noqa: E402
from support.bookies import BookieFactory  # noqa: E402
from support.ledger_cluster import bookie_client_factory, wait_registered  # noqa: E402
from support.zookeeper import ZooKeeperServer  # noqa: E402

from magnetar.broker.bookkeeper import LedgerClient, LedgerClientConfig  # noqa: E402
from magnetar.broker.bookkeeper.metadata import LedgerMetadata, write_set  # noqa: E402
from magnetar.zk import paths  # noqa: E402
from magnetar.zk.factory import open_metadata_store  # noqa: E402
from magnetar.zk.store import MetadataStore  # noqa: E402


def percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def preload(client: LedgerClient, args: argparse.Namespace) -> list[int]:
    per_ledger = max(1, int(args.ledger_mb * (1 << 20)) // args.entry_bytes)
    n_ledgers = max(1, int(args.mb * (1 << 20)) // (per_ledger * args.entry_bytes))
    payload = os.urandom(args.entry_bytes)
    ids: list[int] = []
    sem = asyncio.Semaphore(4)

    async def one() -> None:
        async with sem:
            w = await client.create_ledger()
            for start in range(0, per_ledger, 500):
                await asyncio.gather(
                    *(w.add_nowait(payload) for _ in range(min(500, per_ledger - start)))
                )
            await w.close()
            ids.append(w.ledger_id)

    await asyncio.gather(*(one() for _ in range(n_ledgers)))
    return ids


async def meta_of(store: MetadataStore, ledger_id: int) -> LedgerMetadata:
    got = await store.get(paths.ledger_metadata(ledger_id))
    assert got is not None
    return LedgerMetadata.from_bytes(got.value)


class Load:
    """Adds at a fixed rate; records each add's latency with the phase it started in."""

    def __init__(self, client: LedgerClient, args: argparse.Namespace) -> None:
        self.client = client
        self.args = args
        self.phase = "baseline"
        self.latencies: dict[str, list[float]] = {"baseline": [], "recovery": [], "after": []}
        self.failures = 0
        self.stop = asyncio.Event()

    async def run(self) -> None:
        payload = os.urandom(self.args.load_bytes)
        interval = 1.0 / self.args.load_rate
        handle = await self.client.create_ledger()
        written = 0
        pending: set[asyncio.Task[None]] = set()
        next_t = time.monotonic()
        while not self.stop.is_set():
            if written >= self.args.load_ledger_entries:
                old, handle, written = handle, await self.client.create_ledger(), 0
                pending.add(asyncio.ensure_future(old.close()))  # type: ignore[arg-type]
            phase = self.phase
            t0 = time.monotonic()
            fut = handle.add_nowait(payload)
            written += 1

            def done(f: asyncio.Future[Any], t0: float = t0, phase: str = phase) -> None:
                if f.exception() is not None:
                    self.failures += 1
                else:
                    self.latencies[phase].append((time.monotonic() - t0) * 1000)

            fut.add_done_callback(done)
            next_t += interval
            delay = next_t - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            else:
                await asyncio.sleep(0)
        await handle.close()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    base = pathlib.Path(tempfile.mkdtemp(prefix="magnetar-recovery-"))
    zk = ZooKeeperServer(data_dir=base / "zk")
    zk.start()
    factory = BookieFactory(base / "bookies")
    auto: subprocess.Popen[bytes] | None = None
    url = f"{zk.url}/recovery-{uuid.uuid4().hex[:8]}"
    fast = ["--zk-timeout-ms", str(args.zk_timeout_ms)]
    try:
        bookies = factory.start_many(args.bookies, metadata=url, extra_args=fast)
        store = await open_metadata_store(url)
        await wait_registered(store, args.bookies)
        client = LedgerClient(
            store,
            bookie_client_factory,
            LedgerClientConfig(ensemble_size=2, write_quorum=2, ack_quorum=2, add_timeout_ms=2000),
        )
        t = time.monotonic()
        ids = await preload(client, args)
        preload_s = time.monotonic() - t
        held: dict[str, int] = {b.bookie_id: 0 for b in bookies}
        for lid in ids:
            meta = await meta_of(store, lid)
            for index, (first, ensemble) in enumerate(meta.ensembles):
                last = meta.fragment_last_entry(index)
                assert last is not None
                for e in range(first, last + 1):
                    for b in write_set(ensemble, meta.write_quorum, e):
                        held[b] += args.entry_bytes + 8
        victim = max(bookies, key=lambda b: held[b.bookie_id])
        auto_cmd = [
            sys.executable, "-m", "magnetar.broker.cli", "autorecovery",
            "--metadata", url, "--node-id", "bench", "--zk-timeout-ms", str(args.zk_timeout_ms),
            "--lost-bookie-recovery-delay-s", "0",
            "--rereplication-entry-batch-size", str(args.batch),
            "--replication-rate-by-bytes",
            str(int(args.rate_mb * (1 << 20))) if args.rate_mb > 0 else "-1",
            "--log-level", "WARNING",
        ]  # fmt: skip
        auto = subprocess.Popen(  # noqa: ASYNC220 (returns at once; the bench is single-task here)
            auto_cmd, stdout=subprocess.DEVNULL, start_new_session=True
        )
        load = Load(client, args)
        load_task = asyncio.ensure_future(load.run())
        await asyncio.sleep(args.baseline_s)  # measuring window of the baseline (a benchmark)
        load.phase = "recovery"
        t_kill = time.monotonic()
        victim.kill()
        shutil.rmtree(victim.data_dir, ignore_errors=True)
        while await store.exists(paths.bookie_registration(victim.bookie_id)) is not None:  # noqa: ASYNC110 (timing the expiry: polled on purpose)
            await asyncio.sleep(0.05)
        t_gone = time.monotonic()
        deadline = t_gone + args.timeout_s
        remaining = list(ids)
        while remaining and time.monotonic() < deadline:
            remaining = [
                lid for lid in remaining
                if victim.bookie_id in (await meta_of(store, lid)).all_bookies
            ]  # fmt: skip
            if remaining:
                await asyncio.sleep(0.1)
        t_done = time.monotonic()
        load.phase = "after"
        await asyncio.sleep(min(args.baseline_s, 2.0))
        load.stop.set()
        await load_task
        await client.close()
        await store.close()
        rec_s = t_done - t_gone
        nbytes = held[victim.bookie_id]
        base_p99 = percentile(load.latencies["baseline"], 0.99)
        rec_p99 = percentile(load.latencies["recovery"], 0.99)
        return {
            "bench": "recovery_perf",
            "mb": args.mb,
            "ledgers": len(ids),
            "entry_bytes": args.entry_bytes,
            "bookies": args.bookies,
            "batch": args.batch,
            "rate_mb": args.rate_mb,
            "preload_s": round(preload_s, 2),
            "bytes_to_rereplicate": nbytes,
            "recovered": not remaining,
            "ledgers_left": len(remaining),
            "t_detect_s": round(t_gone - t_kill, 2),
            "t_recover_s": round(rec_s, 2),
            "mb_per_s": round(nbytes / (1 << 20) / rec_s, 2) if rec_s > 0 else None,
            "load_rate": args.load_rate,
            "load_adds": {k: len(v) for k, v in load.latencies.items()},
            "load_failures": load.failures,
            "load_p50_ms": {k: round(percentile(v, 0.5), 2) for k, v in load.latencies.items()},
            "load_p99_ms": {k: round(percentile(v, 0.99), 2) for k, v in load.latencies.items()},
            "p99_ratio": round(rec_p99 / base_p99, 2) if base_p99 else None,
            "loadavg": loadavg(),
        }
    finally:
        if auto is not None and auto.poll() is None:
            auto.kill()
            auto.wait(10)
        factory.close()
        zk.close()
        shutil.rmtree(base, ignore_errors=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--mb", type=float, default=64.0, help="ledger data preloaded (MB)")
    p.add_argument("--ledger-mb", type=float, default=1.0)
    p.add_argument("--entry-bytes", type=int, default=4096)
    p.add_argument("--bookies", type=int, default=4)
    p.add_argument("--batch", type=int, default=10, help="rereplicationEntryBatchSize")
    p.add_argument(
        "--rate-mb", type=float, default=0.0, help="replicationRateByBytes in MB/s (0: unlimited)"
    )
    p.add_argument("--load-rate", type=float, default=200.0, help="foreground adds per second")
    p.add_argument("--load-bytes", type=int, default=1024)
    p.add_argument("--load-ledger-entries", type=int, default=2000)
    p.add_argument("--baseline-s", type=float, default=5.0)
    p.add_argument("--zk-timeout-ms", type=int, default=4000)
    p.add_argument("--timeout-s", type=float, default=600.0)
    args = p.parse_args()
    print("$ " + shlex.join([sys.executable, *sys.argv]), flush=True)
    result = asyncio.run(main_async(args))
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
