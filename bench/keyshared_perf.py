"""Key_Shared vs Shared throughput: the same producer load, the same number of consumers.

Issue 5 §6: "Key_Shared throughput with 4 consumers vs Shared (target >= 70% of Shared)".
Each run is one ``bench/perf.py`` measurement (official ``pulsar-client``, producers and
consumers in two worker processes, CPU of every process from /proc) on a fresh topic of one
``magnetar standalone`` (started here unless ``--service-url``): a Shared subscription with
``--consumers`` consumers, then a Key_Shared one, both fed by keyed messages (``--keys``
partition keys, round robin) from an identical producer. ``--repeat N`` alternates the order
(S,K then K,S ...) and reports medians, so slow drifts of the machine's load hit both.

Producer batching (``--batching``), identical in both runs:
- ``none`` (default): one message per entry, so the dispatcher's per-entry work (hashing,
  ordering guard) is fully exposed: the hard case for Key_Shared;
- ``key-based``: the official client's KEY_BASED batching (one key per batch, what Pulsar
  requires for Key_Shared with batching), for the Shared run too;
- ``default``: default batching for both (Key_Shared then routes a whole batch by its first
  key, as Pulsar does).

Figures: consumed msg/s of each run, their ratio (target >= 0.70), and the broker's CPU
microseconds per message (less sensitive to what else runs on the machine than msg/s).
The last output line is one JSON object: ``keyshared_msgs_per_s``, ``shared_msgs_per_s``,
``ratio``, ``broker_us_per_msg_*``, each run's figures and the parameters.

    .venv/bin/python bench/keyshared_perf.py --seconds 10 --repeat 3
    .venv/bin/python bench/keyshared_perf.py --batching key-based --keys 100 --profile /tmp/ks
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import statistics
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import perf
from _common import StandaloneServer, loadavg

TARGET_RATIO = 0.70
BATCHING_HINT = {"none": "Shared", "default": "Shared", "key-based": "Key_Shared"}


class _SameProducerWorker(perf.Worker):
    """``perf.Worker`` whose producer config does not depend on the subscription type.

    ``perf.py``'s producer picks KEY_BASED batching when the run is Key_Shared; here the
    batching type is the bench's ``--batching`` choice for both runs (the producer reads the
    subscription type for nothing else)."""

    batching_hint = "Shared"

    def __init__(self, ctx: Any, role: str, cfg: dict[str, Any]) -> None:
        if role == "producer":
            cfg = {**cfg, "subscription_type": self.batching_hint}
        super().__init__(ctx, role, cfg)


def perf_argv(
    args: argparse.Namespace, sub_type: str, service_url: str, pid: int | None
) -> list[str]:
    argv = [
        "--service-url",
        service_url,
        "--topic",
        f"persistent://public/default/ksbench-{sub_type.lower()}-{time.time_ns()}",
        "--subscription-type",
        sub_type,
        "--consumers",
        str(args.consumers),
        "--producers",
        str(args.producers),
        "--keys",
        str(args.keys),
        "--size",
        str(args.size),
        "--seconds",
        str(args.seconds),
        "--warmup-seconds",
        str(args.warmup_seconds),
        "--drain-seconds",
        str(args.drain_seconds),
        "--receiver-queue-size",
        str(args.receiver_queue_size),
        "--max-pending",
        str(args.max_pending),
        "--batching" if args.batching != "none" else "--no-batching",
    ]
    if args.rate:
        argv += ["--rate", str(args.rate)]
    if pid is not None:
        argv += ["--broker-pid", str(pid)]
    if args.profile:
        run_dir = os.path.join(args.profile, f"{sub_type.lower()}-{time.time_ns()}")
        argv += ["--profile", run_dir, "--profile-top", "25"]
    return argv


def one_run(
    args: argparse.Namespace, sub_type: str, service_url: str, pid: int | None
) -> dict[str, Any]:
    argv = perf_argv(args, sub_type, service_url, pid)
    print(f"\n=== {sub_type}: bench/perf.py {shlex.join(argv)}", flush=True)
    perf_args = perf.build_parser().parse_args(argv)
    _SameProducerWorker.batching_hint = BATCHING_HINT[args.batching]
    perf.Worker = _SameProducerWorker  # type: ignore[misc]
    result = perf.run(perf_args)
    if result["missing"] or result["consumer_errors"] or result["publish_errors"]:
        print(
            f"# WARNING {sub_type}: missing {result['missing']}, consumer errors "
            f"{result['consumer_errors']}, publish errors {result['publish_errors']}",
            flush=True,
        )
    keep = (
        "msgs_per_s",
        "produce_msgs_per_s",
        "consume_msgs_per_s",
        "e2e_p50_ms",
        "e2e_p99_ms",
        "publish_p99_ms",
        "sent_total",
        "received_total",
        "missing",
        "publish_errors",
        "consumer_errors",
        "cpu_cores",
        "cpu_us_per_msg",
        "loadavg_before",
        "loadavg_after",
    )
    out = {k: result.get(k) for k in keep}
    out["subscription_type"] = sub_type
    if "profiles" in result:
        out["profiles"] = result["profiles"]
    return out


def _strict(value: Any) -> Any:
    """Strict JSON: figures that could not be measured (NaN) become null."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {k: _strict(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_strict(v) for v in value]
    return value


def _median(values: list[float]) -> float:
    clean = [v for v in values if isinstance(v, int | float) and not math.isnan(v)]
    return round(statistics.median(clean), 2) if clean else float("nan")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n")[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--service-url", help="use this broker instead of starting standalone")
    p.add_argument("--broker-pid", type=int, help="with --service-url: for CPU figures")
    p.add_argument("--consumers", type=int, default=4)
    p.add_argument("--producers", type=int, default=1)
    p.add_argument("--keys", type=int, default=1000, help="distinct partition keys")
    p.add_argument("--size", type=int, default=100, help="message size in bytes")
    p.add_argument("--rate", type=float, default=0, help="total msg/s (default: max)")
    p.add_argument("--batching", choices=sorted(BATCHING_HINT), default="none")
    p.add_argument("--seconds", type=float, default=10.0, help="measured window per run")
    p.add_argument("--warmup-seconds", type=float, default=1.0)
    p.add_argument("--drain-seconds", type=float, default=30.0)
    p.add_argument("--receiver-queue-size", type=int, default=1000)
    p.add_argument("--max-pending", type=int, default=5000)
    p.add_argument("--repeat", type=int, default=1, help="pairs of runs (order alternates)")
    p.add_argument("--data-dir", help="standalone data dir (default: temporary, removed)")
    p.add_argument("--profile", metavar="DIR", help="py-spy the broker and bookie per run")
    args = p.parse_args(argv)
    if args.consumers < 1 or args.repeat < 1:
        raise SystemExit("--consumers and --repeat must be >= 1")
    print(f"# command: {shlex.join([sys.executable, *sys.argv])}", flush=True)
    load_start = loadavg()
    print(f"# load average at start: {load_start} on {os.cpu_count()} cores", flush=True)

    server: StandaloneServer | None = None
    service_url = args.service_url
    broker_pid = args.broker_pid
    runs: dict[str, list[dict[str, Any]]] = {"Shared": [], "Key_Shared": []}
    try:
        if not service_url:
            server = StandaloneServer(args.data_dir)
            print(f"# standalone: {shlex.join(server.command())}", flush=True)
            server.start()
            service_url = server.service_url
            broker_pid = server.pid
            print(f"# standalone ready at {service_url}: broker pid {broker_pid}", flush=True)
        for i in range(args.repeat):
            order = ("Shared", "Key_Shared") if i % 2 == 0 else ("Key_Shared", "Shared")
            for sub_type in order:
                runs[sub_type].append(one_run(args, sub_type, service_url, broker_pid))
    finally:
        if server is not None:
            server.stop()

    shared = _median([r["msgs_per_s"] for r in runs["Shared"]])
    keyed = _median([r["msgs_per_s"] for r in runs["Key_Shared"]])
    ratio = round(keyed / shared, 3) if shared and not math.isnan(shared) else None
    us_shared = _median([r["cpu_us_per_msg"].get("broker", math.nan) for r in runs["Shared"]])
    us_keyed = _median([r["cpu_us_per_msg"].get("broker", math.nan) for r in runs["Key_Shared"]])
    missing = sum(r["missing"] or 0 for rs in runs.values() for r in rs)
    print("\nrun           msg/s   broker us/msg  e2e p99 ms  load", flush=True)
    for sub_type in ("Shared", "Key_Shared"):
        for r in runs[sub_type]:
            us = r["cpu_us_per_msg"].get("broker", 0)
            print(
                f"{sub_type:<11} {r['msgs_per_s']:>9.0f} {us:>11.1f}"
                f" {r['e2e_p99_ms'] or 0:>11.1f}  {r['loadavg_before'][0]:.2f}",
                flush=True,
            )
    verdict = "met" if ratio is not None and ratio >= TARGET_RATIO else "MISSED"
    print(
        f"Shared {shared:.0f} msg/s, Key_Shared {keyed:.0f} msg/s (medians of {args.repeat}): "
        f"ratio {ratio} ({verdict}: target >= {TARGET_RATIO}); broker CPU us/msg "
        f"Shared {us_shared}, Key_Shared {us_keyed}",
        flush=True,
    )
    summary: dict[str, Any] = {
        "keyshared_msgs_per_s": keyed,
        "shared_msgs_per_s": shared,
        "ratio": ratio,
        "target_ratio": TARGET_RATIO,
        "target_met": ratio is not None and ratio >= TARGET_RATIO,
        "broker_us_per_msg_shared": us_shared,
        "broker_us_per_msg_keyshared": us_keyed,
        "broker_us_ratio": round(us_keyed / us_shared, 3) if us_shared else None,
        "missing": missing,
        "runs": runs,
        # parameters
        "consumers": args.consumers,
        "producers": args.producers,
        "keys": args.keys,
        "size": args.size,
        "rate": args.rate or None,
        "batching": args.batching,
        "seconds": args.seconds,
        "repeat": args.repeat,
        "receiver_queue_size": args.receiver_queue_size,
        "service_url": args.service_url or "started standalone",
        "loadavg_start": load_start,
        "loadavg_end": loadavg(),
    }
    print(json.dumps(_strict(summary)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
