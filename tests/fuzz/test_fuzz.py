"""Fuzzing a real standalone broker (issue 13 §4): protocol frames (random, mutated, valid
commands in random order with absurd ids), slow clients and admin REST requests. Each test
runs for a bounded time and ends with the same checks: the broker answers (health and a
produce/consume round trip), its RSS and open fds are back near their baseline, and its log
has no traceback."""

from __future__ import annotations

import random
import socket
import struct
import time
from collections.abc import Callable

from support.fuzz import (
    BrokerWatch,
    FrameFuzzer,
    RestFuzzer,
    Usage,
    http_request,
    round_trip,
    run_connection,
)
from support.hostile import entry
from support.raw_client import RawClient, T
from support.standalone import StandaloneProcess
from support.waiting import wait_until

from magnetar.client.protocol.proto import pulsar_api_pb2 as pb

RSS_SLACK_BYTES = 96 << 20
FD_SLACK = 8


def _settled(standalone: StandaloneProcess, watch: BrokerWatch, baseline: Usage, what: str) -> None:
    assert standalone.proc is not None and standalone.proc.poll() is None, "broker died"
    assert standalone.healthy(), "health check failed"
    round_trip(standalone.port, f"persistent://public/default/probe-{what}")
    wait_until(
        lambda: watch.usage().fds <= baseline.fds + FD_SLACK,
        60,
        f"open fds back near baseline {baseline.fds}: {watch.usage().fds}",
    )
    now = watch.usage()
    assert now.rss_bytes <= baseline.rss_bytes + RSS_SLACK_BYTES, (baseline, now)
    tracebacks = watch.tracebacks_since_mark()
    assert not tracebacks, "\n\n".join(tracebacks[:5])


def _for(seconds: float, step: Callable[[], int]) -> int:
    deadline = time.monotonic() + seconds
    total = 0
    while time.monotonic() < deadline:
        total += step()
    return total


def test_protocol_frames(
    standalone: StandaloneProcess, watch: BrokerWatch, rng: random.Random, fuzz_seconds: float
) -> None:
    round_trip(standalone.port, "persistent://public/default/probe-warm")
    baseline = watch.usage()
    fuzzer = FrameFuzzer(rng)
    sent = _for(
        fuzz_seconds * 2,
        lambda: run_connection(standalone.port, fuzzer.frames(rng.choice([5, 40, 200]))),
    )
    print(f"protocol frames sent: {sent}")
    assert sent > 0
    _settled(standalone, watch, baseline, "frames")


def test_slow_clients(
    standalone: StandaloneProcess, watch: BrokerWatch, rng: random.Random, fuzz_seconds: float
) -> None:
    """Connections that never finish a handshake, stop mid-frame, trickle bytes, or stop
    reading while messages are dispatched to them: each is closed on time (keep-alive 2 s,
    partial-frame budget), and none holds the broker."""
    baseline = watch.usage()
    port = standalone.port
    socks: list[socket.socket] = []
    for _ in range(10):  # no handshake at all
        socks.append(socket.create_connection(("127.0.0.1", port), timeout=5))
    for _ in range(10):  # a handshake, then half a frame declared huge
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        s.sendall(
            FrameFuzzer(rng).connect()
            + struct.pack(">I", 5 << 20)
            + b"\0" * rng.randrange(1, 1 << 20)
        )
        socks.append(s)
    # a consumer that never reads while a producer fills its socket
    topic = "persistent://public/default/fuzz-slow"
    reader = RawClient(port)
    reader.connect()
    reader.send(
        T(
            type=T.SUBSCRIBE,
            subscribe=pb.CommandSubscribe(
                topic=topic,
                subscription="slow",
                subType=pb.CommandSubscribe.Shared,
                consumer_id=1,
                request_id=1,
            ),
        )
    )
    assert reader.recv().type == T.SUCCESS
    reader.send(T(type=T.FLOW, flow=pb.CommandFlow(consumer_id=1, messagePermits=100_000)))
    writer = RawClient(port)
    writer.connect()
    writer.send(
        T(type=T.PRODUCER, producer=pb.CommandProducer(topic=topic, producer_id=1, request_id=1))
    )
    assert writer.recv().type == T.PRODUCER_SUCCESS
    payload = entry(b"x" * 60_000)
    for seq in range(200):
        writer.send(T(type=T.SEND, send=pb.CommandSend(producer_id=1, sequence_id=seq)), payload)
    # trickle: a valid handshake one byte at a time, slower than the keep-alive allows
    trickle = socket.create_connection(("127.0.0.1", port), timeout=5)
    for b in FrameFuzzer(rng).connect()[:3]:
        try:
            trickle.sendall(bytes([b]))
        except OSError:
            break  # closed already
        time.sleep(0.5)  # the slow client's pace, not synchronisation
    socks.append(trickle)

    def all_closed() -> bool:
        for s in socks:
            s.settimeout(0.01)
            try:
                while True:
                    data = s.recv(1 << 16)
                    if not data:
                        break
                else:
                    continue
            except (TimeoutError, BlockingIOError):
                return False
            except OSError:
                pass
        return True

    wait_until(all_closed, 60, "idle, half-framed and trickling connections closed")
    for s in socks:
        s.close()
    reader.close()
    writer.close()
    assert True
    _settled(standalone, watch, baseline, "slow")


def test_admin_rest(
    standalone: StandaloneProcess, watch: BrokerWatch, rng: random.Random, fuzz_seconds: float
) -> None:
    baseline = watch.usage()
    fuzzer = RestFuzzer(rng)
    statuses: dict[int, int] = {}
    failures: list[str] = []

    def one() -> int:
        method, path, body = fuzzer.request()
        status = http_request("127.0.0.1", standalone.web_port, method, path, body)
        statuses[status] = statuses.get(status, 0) + 1
        if status >= 500 or status == 0:
            failures.append(f"{status} {method} {path} {body[:80]!r}")
        return 1

    count = _for(fuzz_seconds * 2, one)
    print(f"REST requests: {count}, statuses: {sorted(statuses.items())}")
    assert not failures, "\n".join(failures[:20])
    _settled(standalone, watch, baseline, "rest")
