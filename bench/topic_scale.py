"""Thousands of topics on one broker: garbage-collection pauses while loading them, and the
event loop's lag while ``/metrics`` is built.

Issue 12 §4: loading 30,000 topics caused 0.4 s collector pauses that stalled every client,
and ``/metrics`` at 10,000 topics held the loop for 127 ms. This bench runs the real
``BrokerService`` (managed ledgers over in-process fake bookies and the in-memory metadata
store: the broker's own objects, without bookie processes) in this process, with the broker's
GC handling (``--gc serving``: ``tune_gc_for_serving(service)`` as a broker process applies
at start: raised thresholds, start-up heap frozen, and ``TopicGcFreezer`` freezing what topic
loads add), the thresholds and start-up freeze alone (``--gc startup-freeze``, the broker
before ``TopicGcFreezer``) or CPython's defaults (``--gc default``).
A ticker task on the loop stands for a client: it asks to run every 1 ms and records how
late it runs (loop lag).

1. Load ``--topics`` topics (``--concurrency`` at a time, as a burst of clients would),
   with ``gc.callbacks`` timing every collection: count, total and longest pause per
   generation, and the ticker's longest lag.
2. ``/metrics`` over those topics: once built in one go (``metrics_text()``, as before), once
   as the HTTP handler streams it (``slices_yielding``): build time and the ticker's longest
   lag.

The last line is one JSON object (timing figures: run it on a quiet machine).

    .venv/bin/python bench/topic_scale.py --topics 10000
    .venv/bin/python bench/topic_scale.py --topics 10000 --gc default
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import shlex
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import loadavg

from magnetar.broker.admin.http_api import slices_yielding
from magnetar.broker.admin.metrics import BrokerMetrics
from magnetar.broker.bookkeeper.testing import FakeBookieCluster
from magnetar.broker.config import BrokerConfig
from magnetar.broker.ledger import ManagedLedgerConfig, ManagedLedgerFactory
from magnetar.broker.protocol.listener import BinaryListener
from magnetar.broker.runtime import BrokerServiceRunner, tune_gc_for_serving
from magnetar.broker.service import BrokerService
from magnetar.broker.storage.managed_adapter import ManagedLedgerStorage
from magnetar.zk.memory import MemoryMetadataServer


class GcTimer:
    """Every collection's duration by generation, from ``gc.callbacks``."""

    def __init__(self) -> None:
        self.pauses: dict[int, list[float]] = {0: [], 1: [], 2: []}
        self._start = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._start = time.perf_counter()
        else:
            self.pauses[info["generation"]].append(time.perf_counter() - self._start)

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for gen, pauses in self.pauses.items():
            out[f"gen{gen}"] = {
                "count": len(pauses),
                "total_ms": round(sum(pauses) * 1000, 1),
                "max_ms": round(max(pauses, default=0.0) * 1000, 1),
            }
        out["max_pause_ms"] = max(v["max_ms"] for v in out.values())
        return out


class LagTicker:
    """A task that asks to run every ``interval_s``; ``max_lag_s``: the latest it ran."""

    def __init__(self, interval_s: float = 0.001) -> None:
        self.interval_s = interval_s
        self.max_lag_s = 0.0
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        while True:
            t = time.perf_counter()
            await asyncio.sleep(self.interval_s)
            self.max_lag_s = max(self.max_lag_s, time.perf_counter() - t - self.interval_s)

    def start(self) -> None:
        self.max_lag_s = 0.0
        self._task = asyncio.ensure_future(self._run())

    async def stop(self) -> float:
        assert self._task is not None
        await asyncio.sleep(2 * self.interval_s)  # a wake-up due during a stall runs first
        self._task.cancel()
        try:
            await self._task
        except asyncio.CancelledError:
            pass
        return round(self.max_lag_s * 1000, 1)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    server = MemoryMetadataServer()
    bookies = FakeBookieCluster(server, 3)
    ml_config = ManagedLedgerConfig(ensemble_size=1, write_quorum=1, ack_quorum=1)
    factory = ManagedLedgerFactory(server.connect(), bookies.factory, ml_config)
    config = BrokerConfig(
        broker_service_port=0,
        bind_address="127.0.0.1",
        advertised_address="127.0.0.1",
        managed_ledger_default_ensemble_size=1,
        managed_ledger_default_write_quorum=1,
        managed_ledger_default_ack_quorum=1,
    )
    service = BrokerService(config, server.connect(), ManagedLedgerStorage(factory))
    listener = BinaryListener(service)
    await listener.start()
    runner = BrokerServiceRunner(service)
    await runner.start()
    freezer = None
    if args.gc == "serving":
        freezer = tune_gc_for_serving(service)
    elif args.gc == "startup-freeze":
        tune_gc_for_serving()
    timer = GcTimer()
    ticker = LagTicker()
    result: dict[str, Any] = {"topics": args.topics, "gc": args.gc}
    try:
        names = [f"persistent://public/default/scale-{i}" for i in range(args.topics)]
        pending = iter(names)

        async def load() -> None:  # one of --concurrency clients, each loading in turn
            for name in pending:
                await service.get_topic(name, create=True)

        gc.collect()
        gc.callbacks.append(timer)
        ticker.start()
        t0 = time.perf_counter()
        await asyncio.gather(*(load() for _ in range(args.concurrency)))
        result["load_s"] = round(time.perf_counter() - t0, 2)
        result["load_max_loop_lag_ms"] = await ticker.stop()
        gc.callbacks.remove(timer)
        result["load_gc"] = timer.summary()
        result["gc_objects_tracked"] = len(gc.get_objects())
        result["gc_objects_frozen"] = gc.get_freeze_count()

        ticker.start()
        await asyncio.sleep(0.01)
        t0 = time.perf_counter()
        text = BrokerMetrics(service).render()
        result["metrics_in_one_go_ms"] = round((time.perf_counter() - t0) * 1000, 1)
        result["metrics_in_one_go_max_loop_lag_ms"] = await ticker.stop()
        ticker.start()
        await asyncio.sleep(0.01)
        t0 = time.perf_counter()
        pieces = [piece async for piece in slices_yielding(BrokerMetrics(service).chunks())]
        result["metrics_yielding_ms"] = round((time.perf_counter() - t0) * 1000, 1)
        result["metrics_yielding_max_loop_lag_ms"] = await ticker.stop()
        result["metrics_bytes"] = len(text)
        result["metrics_slices"] = len(pieces)
        assert "".join(pieces) == text, "the same text either way"
    finally:
        if freezer is not None:
            freezer.close()
            result["gc_freezes"] = freezer.freezes
        await runner.close()
        await listener.close()
        await factory.close()
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n")[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--topics", type=int, default=10_000)
    p.add_argument("--concurrency", type=int, default=200, help="topics loading at once")
    p.add_argument("--gc", choices=["serving", "startup-freeze", "default"], default="serving")
    args = p.parse_args(argv)
    print(f"# command: {shlex.join([sys.executable, *sys.argv])}", flush=True)
    load_start = loadavg()
    print(f"# load average at start: {load_start} on {os.cpu_count()} cores", flush=True)
    result = asyncio.run(run(args))
    result["loadavg_before"] = load_start
    g = result["load_gc"]
    print(
        f"# {args.topics} topics loaded in {result['load_s']} s (gc {args.gc}): longest "
        f"collection {g['max_pause_ms']} ms (gen2: {g['gen2']['count']} collections, "
        f"{g['gen2']['total_ms']} ms), longest loop lag {result['load_max_loop_lag_ms']} ms",
        flush=True,
    )
    print(
        f"# /metrics ({result['metrics_bytes']} bytes): in one go {result['metrics_in_one_go_ms']}"
        f" ms, loop lag {result['metrics_in_one_go_max_loop_lag_ms']} ms; yielding "
        f"{result['metrics_yielding_ms']} ms, loop lag {result['metrics_yielding_max_loop_lag_ms']}"
        " ms",
        flush=True,
    )
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
