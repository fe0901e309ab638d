"""``make bench``: the end-to-end scenarios of ``bench/perf.py`` against one standalone.

Starts ``magnetar standalone`` once (free ports, temporary data dir), runs each scenario as a
``bench/perf.py`` subprocess for a few seconds (``--seconds``, default 5) with the official
client, and prints one table plus, as the last line, a JSON object with every scenario's
figures and whether the issue's targets were met on this run:

- ``batching``: 100-byte messages, batching, as fast as possible — target >= 200,000 msg/s
  produced and consumed;
- ``no-batching``: the same without batching — target >= 20,000 msg/s;
- ``latency-5k``: a fixed 5,000 msg/s — target publish p99 <= 10 ms;
- ``shared-2c``: batching, two consumers on a Shared subscription (no target);
- ``magnetar-client``: batching with our own client (no target; skipped if unusable);
- ``raw-batching`` / ``raw-no-batching``: ``--client raw`` (per-entry protocol frames, no
  client library: what the broker and bookie sustain when the client is not the bound);
- ``keyshared``: ``bench/keyshared_perf.py`` on the same standalone: Key_Shared vs Shared,
  4 consumers, 1,000 keys, unbatched — target Key_Shared >= 70% of Shared;
- ``cache-memory``: ``bench/cache_memory.py`` (its own standalone): 600 MB of unread backlog
  over 20 topics through a 64 MB entry cache budget — target: the broker's RSS grows by at
  most the budget plus the bench's stated overhead;
- ``reclaim``: ``bench/reclaim_perf.py`` (its own ZooKeeper, bookie process and broker):
  16 MB through TTL and through retention (1 s expiry checks and bookie GC) — target: the
  bookie's entry-log bytes fall to 10% of the peak within 10 s, in both.

Numbers depend on what else runs on the machine: the load average is in each result.
``--only NAME`` (repeatable) runs a subset; ``--profile DIR`` py-spies the servers in each.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import StandaloneServer, loadavg

PERF = os.path.join(os.path.dirname(os.path.abspath(__file__)), "perf.py")

SCENARIOS: list[tuple[str, list[str]]] = [
    ("batching", []),
    ("no-batching", ["--no-batching"]),
    ("latency-5k", ["--rate", "5000"]),
    ("shared-2c", ["--consumers", "2", "--subscription-type", "Shared"]),
    ("magnetar-client", ["--client", "magnetar"]),
    ("raw-batching", ["--client", "raw", "--receiver-queue-size", "10000"]),
    ("raw-no-batching", ["--client", "raw", "--no-batching"]),
]
TARGETS = {
    "batching": ("msgs_per_s", ">=", 200_000),
    "no-batching": ("msgs_per_s", ">=", 20_000),
    "latency-5k": ("publish_p99_ms", "<=", 10.0),
    "keyshared": ("ratio", ">=", 0.70),
}
BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
#: benches with their own script, quick parameters (keyshared runs on the standalone above)
EXTRA: list[tuple[str, str, list[str]]] = [
    ("keyshared", "keyshared_perf.py", ["--repeat", "1"]),
    ("reclaim", "reclaim_perf.py", ["--mb", "16", "--timeout-s", "75"]),
    ("cache-memory", "cache_memory.py", []),
]
#: reclaim: seconds from the TTL policy / the last ack until the entry logs are down
RECLAIM_TARGET_S = 10.0


def run_json(name: str, cmd: list[str]) -> dict[str, Any] | str:
    """Run one bench command: its output indented, its last line (one JSON object) returned,
    or the reason it did not run."""
    print(f"\n=== {name}: {' '.join(cmd[1:])}", flush=True)
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, check=False)
    out = proc.stdout.decode(errors="replace").rstrip().splitlines()
    for line in out[:-1]:
        print(f"  {line}", flush=True)
    if proc.returncode != 0 or not out:
        reason = out[-1] if out else f"exit {proc.returncode}"
        print(f"  {name}: not run: {reason}", flush=True)
        return reason
    try:
        result: dict[str, Any] = json.loads(out[-1])
    except json.JSONDecodeError:
        return f"no JSON result: {out[-1]}"
    return result


def run_scenario(
    name: str, extra: list[str], server: StandaloneServer, args: argparse.Namespace
) -> dict[str, Any] | str:
    cmd = [
        sys.executable,
        PERF,
        "--service-url",
        server.service_url,
        "--broker-pid",
        str(server.pid),
        "--topic",
        f"persistent://public/default/bench-{name}-{time.time_ns()}",
        "--seconds",
        str(args.seconds),
        "--warmup-seconds",
        str(args.warmup_seconds),
        *extra,
    ]
    if args.profile:
        cmd += ["--profile", os.path.join(args.profile, name)]
    return run_json(name, cmd)


def run_extra(
    name: str,
    script: str,
    extra: list[str],
    server: StandaloneServer | None,
    args: argparse.Namespace,
) -> dict[str, Any] | str:
    """One of ``EXTRA``: its output indented, its last line (one JSON object) returned."""
    cmd = [sys.executable, os.path.join(BENCH_DIR, script), *extra]
    if name == "keyshared":
        assert server is not None
        cmd += ["--service-url", server.service_url, "--broker-pid", str(server.pid)]
        cmd += ["--seconds", str(args.seconds), "--warmup-seconds", str(args.warmup_seconds)]
    return run_json(name, cmd)


def reclaim_verdict(result: dict[str, Any]) -> str:
    scenarios = result.get("scenarios", {})
    times = {k: v.get("t_reclaimed_s") for k, v in scenarios.items()}
    ok = bool(times) and all(t is not None and t <= RECLAIM_TARGET_S for t in times.values())
    return f"{'met' if ok else 'MISSED'} (seconds to reclaim: {times} <= {RECLAIM_TARGET_S})"


def cache_memory_verdict(result: dict[str, Any]) -> str:
    ok = bool(result.get("within_budget"))
    return (
        f"{'met' if ok else 'MISSED'} (RSS +{result.get('rss_growth_peak_mb')} MB <= "
        f"{result.get('limit_growth_mb')} MB for {result.get('unread_backlog_mb')} MB unread)"
    )


def verdict(name: str, result: dict[str, Any]) -> str:
    if name == "reclaim":
        return reclaim_verdict(result)
    if name == "cache-memory":
        return cache_memory_verdict(result)
    if name not in TARGETS:
        return ""
    key, op, goal = TARGETS[name]
    value = result.get(key)
    if not isinstance(value, int | float):
        return "n/a"
    ok = value >= goal if op == ">=" else value <= goal
    return f"{'met' if ok else 'MISSED'} ({key} {value} {op} {goal})"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seconds", type=float, default=5.0, help="measured seconds per scenario")
    p.add_argument("--warmup-seconds", type=float, default=1.0)
    p.add_argument(
        "--only", action="append", choices=[n for n, _ in SCENARIOS] + [n for n, _, _ in EXTRA]
    )
    p.add_argument("--profile", metavar="DIR", help="py-spy the broker and bookie per scenario")
    args = p.parse_args()
    chosen = [(n, e) for n, e in SCENARIOS if not args.only or n in args.only]
    extras = [x for x in EXTRA if not args.only or x[0] in args.only]
    print(f"# load average at start: {loadavg()} on {os.cpu_count()} cores", flush=True)
    results: dict[str, Any] = {}
    extra_results: dict[str, Any] = {}
    if chosen or any(n == "keyshared" for n, _, _ in extras):
        with StandaloneServer() as server:
            print(
                f"# standalone {server.service_url}: broker pid {server.pid}, "
                f"bookie pids {server.bookie_pids()}",
                flush=True,
            )
            for name, extra in chosen:
                results[name] = run_scenario(name, extra, server, args)
            for name, script, extra in extras:
                if name == "keyshared":
                    extra_results[name] = run_extra(name, script, extra, server, args)
    for name, script, extra in extras:
        if name != "keyshared":
            extra_results[name] = run_extra(name, script, extra, None, args)

    head = (
        f"{'scenario':<16} {'msg/s':>9} {'MB/s':>6} {'pub p50':>8} {'pub p99':>8} "
        f"{'e2e p99':>8} {'cores b/k/p/c':>20} {'load':>5}  target"
    )
    print("\n" + head + "\n" + "-" * len(head))
    for name, r in results.items():
        if isinstance(r, str):
            print(f"{name:<16} not run: {r[:80]}")
            continue
        c = r.get("cpu_cores", {})
        cores = "/".join(f"{c.get(k, 0):.2f}" for k in ("broker", "bookie", "producer", "consumer"))
        print(
            f"{name:<16} {r['msgs_per_s']:>9.0f} {r['mb_per_s']:>6.2f} {r['publish_p50_ms']:>8.2f} "
            f"{r['publish_p99_ms']:>8.2f} {r['e2e_p99_ms']:>8.2f} {cores:>20} "
            f"{r['loadavg_before'][0]:>5.2f}  {verdict(name, r)}"
        )
    for name, r in extra_results.items():
        if isinstance(r, str):
            print(f"{name:<16} not run: {r[:80]}")
        elif name == "keyshared":
            print(
                f"{name:<16} Key_Shared {r['keyshared_msgs_per_s']:.0f} msg/s vs Shared "
                f"{r['shared_msgs_per_s']:.0f} msg/s, ratio {r['ratio']}  {verdict(name, r)}"
            )
        else:
            print(f"{name:<16} {verdict(name, r)}")
    results.update(extra_results)
    summary = {
        "scenarios": results,
        "targets": {
            n: verdict(n, r)
            for n, r in results.items()
            if (n in TARGETS or n in ("reclaim", "cache-memory")) and isinstance(r, dict)
        },
        "seconds": args.seconds,
        "loadavg_end": loadavg(),
    }
    print(json.dumps(summary), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
