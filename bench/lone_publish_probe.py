"""Where a lone publish's time goes in the broker: per-stage timestamps of synchronous sends.

Runs a standalone (broker in a child process whose classes are wrapped there, and only there,
to take ``time.monotonic_ns()`` at each stage; its bookie is a plain child of it, journal
fsync on) and ``magnetar.client`` in this process sending ``--count`` 100-byte messages one at
a time, each awaited. CLOCK_MONOTONIC is one clock for every process; each stage's first mark
inside a send's window is taken. Stages (broker unless said):

    client send            -> connection read   client encode + transport client -> broker
    connection read        -> topic publish     frame decode, producer checks
    topic publish          -> topic submit      end-of-iteration batching of the topic (hop)
    topic submit           -> handle flush      managed ledger append, the handle's outbox
    handle flush           -> bookie msg built  BookieClient sender task (hop)
    bookie msg built       -> bookie response   the bookie round trip (bench/lone_add_probe.py)
    bookie response        -> handle progress   the batch future's callback (hop)
    handle progress        -> topic completed   quorum, LAC, the entry future's callback (hop)
    topic completed        -> receipt flushed   receipt encode, the connection's flush (hop)
    receipt flushed        -> client done       transport broker -> client + client decode

Prints p50/p99 µs per stage; the last line is one JSON object.

Example: ``.venv/bin/python bench/lone_publish_probe.py --count 3000 --transport tcp``
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import itertools
import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any

from _common import free_port, install_uvloop

MARKS = [
    ("send", None),
    ("conn_read", "magnetar.broker.protocol.connection:ServerConnection.data_received"),
    ("publish", "magnetar.broker.topics.persistent:PersistentTopic.publish_message"),
    ("submit", "magnetar.broker.topics.persistent:PersistentTopic._submit"),
    ("handle_flush", "magnetar.broker.bookkeeper.write_handle:WriteHandle._flush_outbox"),
    ("bookie_built", "magnetar.bookie.client:_Stream._build"),
    ("bookie_response", "magnetar.bookie.client:_Stream._on_response"),
    ("handle_progress", "magnetar.broker.bookkeeper.write_handle:WriteHandle._on_progress"),
    ("topic_completed", "magnetar.broker.topics.persistent:PersistentTopic._completed"),
    ("receipt_flushed", "magnetar.broker.protocol.connection:ServerConnection._flush_out"),
    ("done", None),
]


def _serve(argv: list[str]) -> None:
    import importlib

    data_dir, port, web_port, bookie_port, fast, out = argv
    marks: dict[str, list[int]] = {name: [] for name, target in MARKS if target}
    now = time.monotonic_ns
    for name, target in MARKS:
        if target is None:
            continue
        module, _, qual = target.partition(":")
        cls_name, _, meth = qual.partition(".")
        cls = getattr(importlib.import_module(module), cls_name)
        orig = getattr(cls, meth)

        def wrapper(*a: Any, _orig: Any = orig, _list: list[int] = marks[name], **k: Any) -> Any:
            _list.append(now())
            return _orig(*a, **k)

        setattr(cls, meth, wrapper)
    from magnetar.broker.config import BrokerConfig
    from magnetar.broker.standalone import run_standalone

    config = BrokerConfig(
        broker_service_port=int(port),
        web_service_port=int(web_port),
        advertised_address="127.0.0.1",
        bookkeeper_fast_add_enabled=fast == "1",
    )
    install_uvloop()
    try:
        asyncio.run(run_standalone(data_dir, config, bookie_port=int(bookie_port)))
    finally:
        with open(out, "w") as f:
            json.dump(marks, f)


async def _drive(url: str, count: int, size: int) -> dict[str, list[int]]:
    from magnetar.client import Client

    marks: dict[str, list[int]] = {"send": [], "done": []}
    now = time.monotonic_ns
    deadline = time.monotonic() + 90
    while True:
        try:
            client = Client(url)
            producer = await client.create_producer("persistent://public/default/lone-probe")
            break
        except Exception:
            await client.close()
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)  # readiness polling of a starting broker
    payload = b"x" * size
    try:
        for _ in range(count):
            marks["send"].append(now())
            await producer.send(payload)
            marks["done"].append(now())
    finally:
        await client.close()
    return marks


def _pct(xs: list[float], p: float) -> float:
    s = sorted(xs)
    return round(s[min(len(s) - 1, int(len(s) * p))], 1)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--serve":
        _serve(sys.argv[2:])
        return
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--transport", choices=["grpc", "tcp"], default="tcp")
    p.add_argument("--count", type=int, default=3000)
    p.add_argument("--warmup", type=int, default=200)
    p.add_argument("--size", type=int, default=100)
    p.add_argument("--slowest", type=int, default=0, help="print the stages of the N slowest sends")
    args = p.parse_args()
    print(f"# command: {shlex.join([sys.executable, *sys.argv])}", flush=True)
    install_uvloop()
    tmp = tempfile.mkdtemp(prefix="lone-publish-")
    port, web, bookie = free_port(), free_port(), free_port()
    out = os.path.join(tmp, "broker-marks.json")
    fast = "1" if args.transport == "tcp" else "0"
    child = subprocess.Popen(
        [
            sys.executable,
            __file__,
            "--serve",
            os.path.join(tmp, "d"),
            str(port),
            str(web),
            str(bookie),
            fast,
            out,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        client_marks = asyncio.run(
            _drive(f"pulsar://127.0.0.1:{port}", args.count + args.warmup, args.size)
        )
    finally:
        child.send_signal(signal.SIGTERM)
        child.wait(60)
    with open(out) as f:
        marks: dict[str, list[int]] = json.load(f) | client_marks
    for v in marks.values():
        v.sort()
    names = [name for name, _ in MARKS]
    windows = list(zip(marks["send"], marks["done"], strict=True))[args.warmup :]
    per: dict[str, list[float]] = {}
    breakdowns: list[tuple[float, float, str]] = []  # (total µs, s since start, stages)
    for t0, t1 in windows:
        ts = []
        for name in names:
            xs = marks[name]
            i = bisect.bisect_left(xs, t0)
            ts.append(xs[i] if i < len(xs) and xs[i] <= t1 else None)
        present = [(n, t) for n, t in zip(names, ts, strict=True) if t is not None]
        for (a, ta), (b, tb) in itertools.pairwise(present):
            per.setdefault(f"{a}->{b}", []).append((tb - ta) / 1000)
        per.setdefault("total", []).append((t1 - t0) / 1000)
        if args.slowest:
            steps = " ".join(
                f"{b}+{(tb - ta) / 1000:.0f}" for (_, ta), (b, tb) in itertools.pairwise(present)
            )
            breakdowns.append(((t1 - t0) / 1000, (t0 - windows[0][0]) / 1e9, steps))
    rows = {
        k: {"p50_us": _pct(v, 0.5), "p99_us": _pct(v, 0.99), "n": len(v)} for k, v in per.items()
    }
    for total, at, steps in sorted(breakdowns, reverse=True)[: args.slowest]:
        print(f"# slow send at {at:7.3f} s: {total:7.0f} µs = {steps}")
    print(f"{'stage':34s} {'p50 µs':>8s} {'p99 µs':>8s} {'n':>6s}")
    for k, r in rows.items():
        print(f"{k:34s} {r['p50_us']:8.1f} {r['p99_us']:8.1f} {r['n']:6d}")
    print(
        json.dumps(
            {
                "transport": args.transport,
                "count": len(windows),
                "load_avg_1m": os.getloadavg()[0],
                "stages": rows,
            }
        )
    )


if __name__ == "__main__":
    main()
