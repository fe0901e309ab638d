"""``bench/fuzz_soak.py``: a long hostile-input run against a real ``magnetar standalone``.

The ``fuzz`` test tier runs the same generators (``tests/support/fuzz.py``) for about a minute;
this runs them for as long as asked: ``--frames`` protocol frames (random, mutated, valid
commands in random order with absurd ids; default 1,000,000), ``--slow`` slow clients (no
handshake, half a frame, a trickle), and ``--rest`` admin REST requests (random paths,
methods and bodies; default 400,000), from ``--workers`` processes, each seeded from
``--seed``. It reports the counts, the HTTP statuses, the broker's RSS and open fds before
and after (after a settle: connections closed, a produce/consume round trip served), and
every ERROR or traceback its log gained. Exit status 1 if the broker died, stopped
answering, answered a 5xx, or logged a traceback.

    .venv/bin/python bench/fuzz_soak.py --frames 1000000 --rest 400000
    .venv/bin/python bench/fuzz_soak.py --frames 100000 --rest 40000 --seed 7   # shorter
"""

from __future__ import annotations

import argparse
import collections
import json
import multiprocessing
import pathlib
import random
import socket
import struct
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from support.fuzz import (  # noqa: E402
    BrokerWatch,
    FrameFuzzer,
    RestFuzzer,
    http_request,
    round_trip,
    run_connection,
)
from support.standalone import StandaloneProcess  # noqa: E402


def _frames_worker(args: tuple[int, int, str]) -> int:
    port, budget, seed = args
    rng = random.Random(seed)
    fuzzer = FrameFuzzer(rng)
    sent = 0
    while sent < budget:
        sent += run_connection(port, fuzzer.frames(min(budget - sent, rng.choice([5, 40, 200]))))
    return sent


def _rest_worker(args: tuple[int, int, str]) -> dict[int, int]:
    port, budget, seed = args
    rng = random.Random(seed)
    fuzzer = RestFuzzer(rng)
    statuses: collections.Counter[int] = collections.Counter()
    for _ in range(budget):
        method, path, body = fuzzer.request()
        try:
            statuses[http_request("127.0.0.1", port, method, path, body)] += 1
        except OSError:
            statuses[0] += 1
    return dict(statuses)


def _slow_clients(port: int, count: int, rng: random.Random) -> int:
    socks = []
    connect = FrameFuzzer(rng).connect()
    for i in range(count):
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            if i % 3 == 1:
                s.sendall(connect + struct.pack(">I", 5 << 20) + b"\0" * rng.randrange(1, 1 << 20))
            elif i % 3 == 2:
                s.sendall(connect[:3])
            socks.append(s)
        except OSError:
            break
    return len(socks)


def _split(total: int, parts: int) -> list[int]:
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--frames", type=int, default=1_000_000)
    ap.add_argument("--rest", type=int, default=400_000)
    ap.add_argument("--slow", type=int, default=300, help="slow clients held open at once")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--data-dir", default=None)
    args = ap.parse_args()
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 32)
    base = pathlib.Path(args.data_dir or tempfile.mkdtemp(prefix="magnetar-fuzz-soak-"))
    proc = StandaloneProcess(
        base / "data",
        base / "standalone.log",
        config={"keep_alive_interval_seconds": 2, "max_buffered_partial_frames_size_in_mb": 64},
    )
    proc.start(timeout_s=120)
    assert proc.proc is not None
    watch = BrokerWatch(proc.proc.pid, proc.log_path)
    watch.mark()
    before = watch.usage()
    print(f"seed {seed}; broker pid {proc.proc.pid}; log {proc.log_path}", flush=True)
    result: dict[str, object] = {"seed": seed}
    ok = True
    try:
        t0 = time.monotonic()
        with multiprocessing.Pool(args.workers) as pool:
            jobs = [
                (proc.port, n, f"{seed}:frames:{i}")
                for i, n in enumerate(_split(args.frames, args.workers * 8))
            ]
            sent = sum(pool.map(_frames_worker, jobs))
            frames_s = time.monotonic() - t0
            print(f"frames sent: {sent} in {frames_s:.0f} s", flush=True)
            held = _slow_clients(proc.port, args.slow, random.Random(f"{seed}:slow"))
            print(f"slow clients opened: {held}", flush=True)
            t1 = time.monotonic()
            statuses: collections.Counter[int] = collections.Counter()
            rest_jobs = [
                (proc.web_port, n, f"{seed}:rest:{i}")
                for i, n in enumerate(_split(args.rest, args.workers * 8))
            ]
            for part in pool.map(_rest_worker, rest_jobs):
                statuses.update(part)
            rest_s = time.monotonic() - t1
        print(f"REST requests: {sum(statuses.values())} in {rest_s:.0f} s", flush=True)
        alive = proc.proc.poll() is None and proc.healthy()
        if alive:
            round_trip(proc.port, "persistent://public/default/soak-probe")
        deadline = time.monotonic() + 120
        while alive and watch.usage().fds > before.fds + 8 and time.monotonic() < deadline:
            time.sleep(0.5)  # settle: the broker closes idle connections (keep-alive 2 s)
        after = watch.usage() if alive else None
        tracebacks = watch.tracebacks_since_mark()
        server_errors = sum(n for s, n in statuses.items() if s >= 500 or s == 0)
        ok = alive and not tracebacks and server_errors == 0
        result.update(
            frames=sent,
            frames_seconds=round(frames_s),
            slow_clients=held,
            rest_requests=sum(statuses.values()),
            rest_seconds=round(rest_s),
            statuses=dict(sorted(statuses.items())),
            alive=alive,
            after=None if after is None else {"rss_bytes": after.rss_bytes, "fds": after.fds},
            tracebacks=len(tracebacks),
        )
        result["before"] = {"rss_bytes": before.rss_bytes, "fds": before.fds}
        print(json.dumps(result, indent=2))
        for t in tracebacks[:10]:
            print(t[:2000])
    finally:
        proc.stop()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
