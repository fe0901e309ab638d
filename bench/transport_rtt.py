"""What one request/response round trip costs on loopback, per transport (one in flight).

Measures, in two processes (a server child and this client), the round trip of a 150-byte
request answered by a 10-byte response, strictly one at a time:

- ``grpc``: a bare grpc.aio bidirectional stream (raw bytes, no protobuf), as the bookie's
  ``Add`` stream is used;
- ``tcp``: a plain asyncio TCP connection carrying length-prefixed frames (the bookie's fast
  add transport: ``bookie/fast_add.py``), ``TCP_NODELAY`` on;
- ``tcp+thread``: the same, but the server hands each request to a worker thread and the
  answer comes back through ``call_soon_threadsafe`` (the journal's hand-off, without fsync);
- ``grpc+thread``: the gRPC stream with the same thread hand-off.

Both processes run uvloop (as the broker and bookie do). No fsync anywhere: this is the
transport and hand-off cost alone. The last output line is one JSON object (µs per round
trip, p50/p99 per mode).

Example: ``.venv/bin/python bench/transport_rtt.py --count 5000 --modes grpc,tcp,tcp+thread``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import queue
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
from _common import free_port, install_uvloop

METHOD = "/bench.Echo/Stream"
LEN = struct.Struct(">I")


class _Worker:
    """A thread that runs ``fn`` and hands the answer back to the loop (journal-like)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.q: queue.SimpleQueue[tuple[bytes, Callable[[bytes], None]]] = queue.SimpleQueue()
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        while True:
            data, done = self.q.get()
            self.loop.call_soon_threadsafe(done, data[:10])

    def submit(self, data: bytes, done: Callable[[bytes], None]) -> None:
        self.q.put((data, done))


# -- server -------------------------------------------------------------------------------


async def _serve(port_grpc: int, port_tcp: int, thread: bool) -> None:
    loop = asyncio.get_running_loop()
    worker = _Worker(loop) if thread else None

    async def stream(it: AsyncIterator[bytes], ctx: Any) -> AsyncIterator[bytes]:
        if worker is None:
            async for data in it:
                yield data[:10]
            return
        async for data in it:
            fut: asyncio.Future[bytes] = loop.create_future()
            worker.submit(data, fut.set_result)
            yield await fut

    server = grpc.aio.server()
    handler = grpc.stream_stream_rpc_method_handler(stream)
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler("bench.Echo", {"Stream": handler}),)
    )
    server.add_insecure_port(f"127.0.0.1:{port_grpc}")
    await server.start()

    class Proto(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            self.t: Any = transport
            sock = transport.get_extra_info("socket")
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.buf = bytearray()

        def _reply(self, data: bytes) -> None:
            self.t.write(LEN.pack(len(data)) + data)

        def data_received(self, data: bytes) -> None:
            self.buf += data
            while len(self.buf) >= 4:
                (n,) = LEN.unpack_from(self.buf)
                if len(self.buf) < 4 + n:
                    break
                msg = bytes(self.buf[4 : 4 + n])
                del self.buf[: 4 + n]
                if worker is None:
                    self._reply(msg[:10])
                else:
                    worker.submit(msg, self._reply)

    tcp = await loop.create_server(Proto, "127.0.0.1", port_tcp)
    print("ready", flush=True)
    await asyncio.Event().wait()
    tcp.close()


# -- client -------------------------------------------------------------------------------


async def _grpc_rtt(port: int, count: int, payload: bytes) -> list[float]:
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    call = channel.stream_stream(METHOD)()
    out: list[float] = []
    for i in range(count + 200):
        t0 = time.perf_counter_ns()
        await call.write(payload)
        await call.read()
        if i >= 200:
            out.append((time.perf_counter_ns() - t0) / 1000)
    await call.done_writing()
    await channel.close()
    return out


async def _tcp_rtt(port: int, count: int, payload: bytes) -> list[float]:
    loop = asyncio.get_running_loop()
    waiter: list[asyncio.Future[bytes]] = []

    class Proto(asyncio.Protocol):
        buf = bytearray()

        def data_received(self, data: bytes) -> None:
            self.buf += data
            while len(self.buf) >= 4:
                (n,) = LEN.unpack_from(self.buf)
                if len(self.buf) < 4 + n:
                    break
                msg = bytes(self.buf[4 : 4 + n])
                del self.buf[: 4 + n]
                waiter.pop(0).set_result(msg)

    transport, _ = await loop.create_connection(Proto, "127.0.0.1", port)
    transport.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    frame = LEN.pack(len(payload)) + payload
    out: list[float] = []
    for i in range(count + 200):
        t0 = time.perf_counter_ns()
        fut = loop.create_future()
        waiter.append(fut)
        transport.write(frame)
        await fut
        if i >= 200:
            out.append((time.perf_counter_ns() - t0) / 1000)
    transport.close()
    return out


def _pct(xs: list[float], p: float) -> float:
    s = sorted(xs)
    return round(s[min(len(s) - 1, int(len(s) * p))], 1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=5000)
    ap.add_argument("--modes", default="grpc,tcp,grpc+thread,tcp+thread")
    ap.add_argument("--rounds", type=int, default=2, help="each mode this many times, alternating")
    ap.add_argument("--serve", nargs=3, metavar=("GRPC", "TCP", "THREAD"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    install_uvloop()
    if args.serve:
        asyncio.run(_serve(int(args.serve[0]), int(args.serve[1]), args.serve[2] == "1"))
        return
    print("command:", " ".join(sys.argv), flush=True)
    payload = b"x" * 150
    modes = args.modes.split(",")
    results: dict[str, list[dict[str, float]]] = {m: [] for m in modes}
    for r in range(args.rounds):
        order = modes if r % 2 == 0 else list(reversed(modes))
        for mode in order:
            thread = mode.endswith("+thread")
            pg, pt = free_port(), free_port()
            proc = subprocess.Popen(
                [sys.executable, __file__, "--serve", str(pg), str(pt), "1" if thread else "0"],
                stdout=subprocess.PIPE,
                text=True,
            )
            try:
                assert proc.stdout is not None
                proc.stdout.readline()
                if mode.startswith("grpc"):
                    xs = asyncio.run(_grpc_rtt(pg, args.count, payload))
                else:
                    xs = asyncio.run(_tcp_rtt(pt, args.count, payload))
            finally:
                proc.kill()
                proc.wait()
            row = {
                "p50_us": _pct(xs, 0.5),
                "p99_us": _pct(xs, 0.99),
                "mean_us": round(sum(xs) / len(xs), 1),
            }
            results[mode].append(row)
            print(
                f"{mode:12s} p50 {row['p50_us']:7.1f} µs  p99 {row['p99_us']:7.1f} µs", flush=True
            )
    print(json.dumps({"count": args.count, "results": results}))


if __name__ == "__main__":
    main()
