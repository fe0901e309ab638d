"""The floor of a lone publish on this machine: our process layout with no work in it.

A sync publish crosses three processes and four threads: the client's loop, the broker's
loop, the bookie's loop and the bookie's journal thread (plus, for the official client, its
C++ I/O thread). This script builds exactly that chain with nothing else in it, in Python
with uvloop as the real processes run, and times ``--count`` round trips one at a time:

    client ──TCP──▶ relay (broker) ──TCP──▶ store (bookie) ──SimpleQueue──▶ journal thread
                                                                      (write + fdatasync)
    client ◀──TCP── relay ◀──TCP── store ◀──call_soon_threadsafe──┘

Frames are length-prefixed, ``TCP_NODELAY`` is on, the journal thread drains its queue as
ours does and answers through ``call_soon_threadsafe``; the fdatasync is on a file in
``--dir`` (give it the data dir of the run being compared). What a real publish costs above
this floor is Magnetar's own work; what the floor costs is the machine's (scheduler wake-ups
across two cores, loopback TCP, the disk's fdatasync). ``bench/perf.py --sync-publishes``
runs it after its runs and reports ``path_floor_ms`` beside ``fdatasync_floor_ms``.

Example: ``.venv/bin/python bench/path_floor.py --count 3000 --dir /tmp``
The last output line is one JSON object (ms: p50, p95, p99, p999).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import queue
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

from _common import free_port, install_uvloop, percentile

LEN_BYTES = 4
WARMUP = 200


class _Framed(asyncio.Protocol):
    """Length-prefixed frames in, ``on_frame(frame_with_prefix)`` out."""

    def __init__(self, on_frame: Callable[[_Framed, bytes], None]) -> None:
        self.on_frame = on_frame
        self.buf = bytearray()
        self.transport: Any = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        transport.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while len(self.buf) >= LEN_BYTES:
            n = int.from_bytes(self.buf[:LEN_BYTES], "big")
            if len(self.buf) < LEN_BYTES + n:
                return
            frame = bytes(self.buf[: LEN_BYTES + n])
            del self.buf[: LEN_BYTES + n]
            self.on_frame(self, frame)


def _frame(payload: bytes) -> bytes:
    return len(payload).to_bytes(LEN_BYTES, "big") + payload


async def _store(port: int, directory: str) -> None:
    """The bookie: each frame goes to a journal thread (write + fdatasync), answered after."""
    loop = asyncio.get_running_loop()
    q: queue.SimpleQueue[tuple[bytes, _Framed]] = queue.SimpleQueue()
    fd = os.open(os.path.join(directory, f"path-floor-{os.getpid()}.bin"), os.O_WRONLY | os.O_CREAT)

    def answer(done: list[tuple[bytes, _Framed]]) -> None:
        for _, conn in done:
            conn.transport.write(_frame(b"ok"))

    def journal() -> None:
        while True:
            items = [q.get()]
            while True:
                try:
                    items.append(q.get_nowait())
                except queue.Empty:
                    break
            os.writev(fd, [frame for frame, _ in items])
            os.fdatasync(fd)
            loop.call_soon_threadsafe(answer, items)

    threading.Thread(target=journal, daemon=True).start()
    await loop.create_server(lambda: _Framed(lambda c, f: q.put((f, c))), "127.0.0.1", port)
    print("ready", flush=True)
    await asyncio.Event().wait()


async def _relay(port: int, store_port: int) -> None:
    """The broker: forwards each frame to the store, and each answer back in order."""
    loop = asyncio.get_running_loop()
    waiting: list[_Framed] = []
    _, upstream = await loop.create_connection(
        lambda: _Framed(lambda _c, f: waiting.pop(0).transport.write(f)), "127.0.0.1", store_port
    )

    def forward(conn: _Framed, frame: bytes) -> None:
        waiting.append(conn)
        upstream.transport.write(frame)

    await loop.create_server(lambda: _Framed(forward), "127.0.0.1", port)
    print("ready", flush=True)
    await asyncio.Event().wait()


async def _client(port: int, count: int) -> list[int]:
    loop = asyncio.get_running_loop()
    waiter: list[asyncio.Future[bytes]] = []
    _, conn = await loop.create_connection(
        lambda: _Framed(lambda _c, f: waiter.pop(0).set_result(f)), "127.0.0.1", port
    )
    frame = _frame(b"x" * 100)
    out: list[int] = []
    for i in range(count + WARMUP):
        t0 = time.monotonic_ns()
        fut = loop.create_future()
        waiter.append(fut)
        conn.transport.write(frame)
        await fut
        if i >= WARMUP:
            out.append(time.monotonic_ns() - t0)
    conn.transport.close()
    return out


def measure(directory: str, count: int) -> dict[str, float]:
    """Start the store and relay processes, time ``count`` lone round trips; ms percentiles."""
    store_port, relay_port = free_port(), free_port()
    procs: list[subprocess.Popen[str]] = []
    try:
        for role in (["--store", str(store_port)], ["--relay", str(relay_port), str(store_port)]):
            proc = subprocess.Popen(
                [sys.executable, __file__, "--dir", directory, *role],
                stdout=subprocess.PIPE,
                text=True,
            )
            procs.append(proc)
            assert proc.stdout is not None
            if proc.stdout.readline().strip() != "ready":
                raise SystemExit(f"path_floor: {role[0]} did not start")
        lat = sorted(asyncio.run(_client(relay_port, count)))
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
    return {
        k: round(percentile(lat, q) / 1e6, 3)
        for k, q in (("p50", 0.5), ("p95", 0.95), ("p99", 0.99), ("p999", 0.999))
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=3000, help="timed round trips (after 200 warm-up)")
    ap.add_argument("--dir", default=None, help="where the store fdatasyncs (default: a temp dir)")
    ap.add_argument("--rounds", type=int, default=1, help="repeat the measurement this many times")
    ap.add_argument("--store", nargs=1, help=argparse.SUPPRESS)
    ap.add_argument("--relay", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.count < 1 or args.rounds < 1:
        ap.error("--count and --rounds must be at least 1")
    install_uvloop()
    if args.store:
        asyncio.run(_store(int(args.store[0]), args.dir))
        return
    if args.relay:
        asyncio.run(_relay(int(args.relay[0]), int(args.relay[1])))
        return
    print("# command:", " ".join([sys.executable, *sys.argv]), flush=True)
    with tempfile.TemporaryDirectory(prefix="path-floor-", dir=args.dir) as directory:
        rows = [measure(directory, args.count) for _ in range(args.rounds)]
    for row in rows:
        print(f"# path floor ms: {row}", flush=True)
    print(json.dumps({"count": args.count, "path_floor_ms": rows}))


if __name__ == "__main__":
    main()
