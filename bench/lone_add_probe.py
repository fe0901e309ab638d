"""Where a lone add's time goes: per-stage timestamps of one-in-flight adds to a real bookie.

Runs a bookie process (disk engine, journal fsync on) whose classes are wrapped, in that
process only, to take ``time.monotonic_ns()`` at each stage (the wrappers live here: the
shipped code carries no probe and costs nothing), and a ``BookieClient`` in this process,
likewise wrapped, adding ``--count`` 100-byte entries strictly one at a time over
``--transport`` (gRPC ``Add`` stream or the fast add port). CLOCK_MONOTONIC is one clock for
both processes, so the stages line up across them:

    add()                  client: the add is queued (BookieClient.add)
    -> built               client: the sender task built the message (one loop hop)
    -> bookie accepted     transport client -> bookie, and the bookie's read of it
    -> journal hand-off    bookie: submit (checks, write cache, journal append) + the
                           end-of-iteration group flush
    -> write started       the journal thread picked the group up (thread wake + GIL)
    -> synced              writev + fdatasync
    -> back on the loop    call_soon_threadsafe: the loop thread woke and ran _on_synced
    -> answer built        the futures' callbacks up to the response (drain_done)
    -> client response     transport bookie -> client, and the client's read of it
    -> add done            the add's future resolved and the awaiting task resumed

Prints p50/p99 µs per stage and, as its last line, one JSON object.

Example: ``.venv/bin/python bench/lone_add_probe.py --transport tcp --count 3000``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any

import crc32c
from _common import free_port, install_uvloop

STAGES = [
    ("add->built", "add", "built"),
    ("built->bookie_accepted", "built", "accepted"),
    ("accepted->journal_handoff", "accepted", "handoff"),
    ("handoff->write_started", "handoff", "write_start"),
    ("write_started->synced", "write_start", "synced"),
    ("synced->loop", "synced", "on_synced"),
    ("loop->answer_built", "on_synced", "answer"),
    ("answer->client_response", "answer", "response"),
    ("client_response->add_done", "response", "done"),
]


# -- the bookie child -----------------------------------------------------------------------


def _serve(argv: list[str]) -> None:
    data_dir, port, fast_port, out = argv
    from magnetar.bookie import journal as journal_mod
    from magnetar.bookie import main as bookie_main
    from magnetar.bookie import server as server_mod

    marks: dict[str, list[int]] = {k: [] for k in ("accepted", "handoff", "write_start")}
    marks.update({"synced": [], "on_synced": [], "answer": []})
    now = time.monotonic_ns

    def wrap(cls: Any, name: str, before: str | None, after: str | None = None) -> None:
        orig = getattr(cls, name)

        def wrapper(*a: Any, **k: Any) -> Any:
            if before:
                marks[before].append(now())
            try:
                return orig(*a, **k)
            finally:
                if after:
                    marks[after].append(now())

        setattr(cls, name, wrapper)

    wrap(server_mod.BookieService, "accept_batch", "accepted")
    wrap(server_mod.BookieService, "drain_done", "answer")
    wrap(journal_mod.Journal, "_handoff", "handoff")
    wrap(journal_mod.Journal, "_write_groups", "write_start", "synced")
    wrap(journal_mod.Journal, "_on_synced", "on_synced")
    config = bookie_main.BookieConfig(
        data_dir=data_dir, metadata="none", port=int(port), fast_add_port=int(fast_port)
    )
    config.log_level = "WARNING"
    install_uvloop()
    sys.setswitchinterval(bookie_main.SWITCH_INTERVAL_S)
    try:
        asyncio.run(bookie_main.run(config, ready=lambda _: print("ready", flush=True)))
    finally:
        with open(out, "w") as f:
            json.dump(marks, f)


# -- the client -----------------------------------------------------------------------------


async def _drive(args: argparse.Namespace, address: str, add_address: str | None) -> dict:
    from magnetar.bookie import client as client_mod
    from magnetar.bookie.api import AddRequest

    marks: dict[str, list[int]] = {"add": [], "built": [], "response": [], "done": []}
    now = time.monotonic_ns
    build = client_mod._Stream._build
    on_response = client_mod._Stream._on_response

    def built(self: Any) -> bytes:
        marks["built"].append(now())
        return build(self)

    def responded(self: Any, resp: Any) -> None:
        marks["response"].append(now())
        on_response(self, resp)

    client_mod._Stream._build = built  # type: ignore[method-assign]
    client_mod._Stream._on_response = responded  # type: ignore[method-assign]
    client = client_mod.BookieClient(address, add_address=add_address)
    payload = b"x" * args.entry_bytes
    crc = crc32c.crc32c(payload)
    ledger = int(time.time()) % 1_000_000
    try:
        for i in range(args.count):
            marks["add"].append(now())
            await client.add(AddRequest(ledger, i, i - 1, crc, payload, b"probe-key"))
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
    p.add_argument("--warmup", type=int, default=200, help="first adds not recorded")
    p.add_argument("--entry-bytes", type=int, default=100)
    p.add_argument("--slowest", type=int, default=0, help="print the stages of the N slowest adds")
    args = p.parse_args()
    if not 0 <= args.warmup < args.count:
        p.error(f"--warmup ({args.warmup}) must be below --count ({args.count})")
    print(f"# command: {shlex.join([sys.executable, *sys.argv])}", flush=True)
    install_uvloop()
    tmp = tempfile.mkdtemp(prefix="lone-add-")
    port, fast_port = free_port(), free_port()
    out = os.path.join(tmp, "bookie-marks.json")
    child = subprocess.Popen(
        [
            sys.executable,
            __file__,
            "--serve",
            os.path.join(tmp, "b"),
            str(port),
            str(fast_port),
            out,
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        if child.stdout.readline().strip() != "ready":
            raise SystemExit("bookie did not start")
        add_address = f"127.0.0.1:{fast_port}" if args.transport == "tcp" else None
        client_marks = asyncio.run(_drive(args, f"127.0.0.1:{port}", add_address))
    finally:
        child.send_signal(signal.SIGTERM)
        child.wait(60)
    with open(out) as f:
        marks: dict[str, list[int]] = json.load(f) | client_marks
    n = args.count
    lengths = {k: len(v) for k, v in marks.items()}
    if any(v != n for v in lengths.values()):
        raise SystemExit(f"stage counts differ (not one record per add): {lengths}")
    rows: dict[str, dict[str, float]] = {}
    slowest = sorted(range(args.warmup, n), key=lambda i: marks["add"][i] - marks["done"][i])
    for i in slowest[: args.slowest]:
        steps = " ".join(
            f"{name}+{(marks[b][i] - marks[a][i]) / 1000:.0f}" for name, a, b in STAGES
        )
        total = (marks["done"][i] - marks["add"][i]) / 1000
        print(f"# slow add {i}: {total:7.0f} µs = {steps}")
    print(f"{'stage':28s} {'p50 µs':>8s} {'p99 µs':>8s}")
    for name, a, b in [*STAGES, ("total add->done", "add", "done")]:
        xs = [(marks[b][i] - marks[a][i]) / 1000 for i in range(args.warmup, n)]
        rows[name] = {"p50_us": _pct(xs, 0.5), "p99_us": _pct(xs, 0.99)}
        print(f"{name:28s} {rows[name]['p50_us']:8.1f} {rows[name]['p99_us']:8.1f}")
    print(
        json.dumps(
            {
                "transport": args.transport,
                "count": n - args.warmup,
                "entry_bytes": args.entry_bytes,
                "load_avg_1m": os.getloadavg()[0],
                "stages": rows,
            }
        )
    )


if __name__ == "__main__":
    main()
