"""End-to-end produce/consume benchmark, modelled on ``pulsar-perf produce|consume``.

One run: P producers and C consumers on one topic for ``--seconds`` (after ``--warmup-seconds``),
at ``--rate`` msg/s in total (default: as fast as possible), ``--size``-byte messages, with or
without client-side batching. It prints produced and consumed throughput, publish latency
(send call -> broker receipt callback) and end-to-end latency (send call -> receipt by the
consumer: every payload starts with the 8-byte CLOCK_MONOTONIC send time, so producer and
consumer processes on this host share the clock), and the CPU used by every process.

Processes: the producers run in one worker process and the consumers in another (so the two
sides do not share a GIL); the broker is ``magnetar standalone`` (started here, on free ports
and a temporary data dir, unless ``--service-url`` is given), with its bookie child process.
CPU seconds of each process are read from /proc at the start and end of the measured window.

Clients (``--client``):
- ``official`` (default): pulsar-client (C++ core). ``--official-api raw`` (default) calls
  the extension module ``_pulsar`` that the ``pulsar`` package wraps (same C++ producer and
  consumer, without the wrapper's per-call Python type checks); ``wrapper`` uses
  ``pulsar.Producer.send_async``/``Consumer.receive``. Publish latency is measured on every
  ``--latency-sample``-th message only: each receipt callback re-acquires the GIL from the
  client's I/O thread, and doing that for every message costs ~20 us/msg on this machine
  (default: every message when ``--rate`` <= 20,000, else every 16th).
  Consumers use ``batch_receive`` (up to 500 messages, 1 ms timeout) when ``--rate`` is
  unset or above 20,000, else ``receive`` per message (no batch timeout in the e2e latency).
- ``magnetar``: our asyncio client ``magnetar.client`` (imported lazily; a clear error if it
  is not usable yet). ``--magnetar-api batch`` (the default when batching at full rate without
  keys) uses its throughput API: ``send_batch`` of ``--batch-max-messages`` payloads per call,
  pipelined, ``receive_batch`` and one acknowledgement per received batch (publish latency is
  one sample per call); ``send`` uses ``send_async`` and ``receive`` per message.
- ``raw``: no client library: per-entry protocol frames built with ``magnetar.client.protocol``
  (see ``bench/_raw.py``), so the figures show what the broker and bookie sustain.

``--tls-ab`` runs each client plain and over TLS (``--tls``), alternating in the same run
(with ``--repeat`` rounds), and prints the TLS/plain ratio of msg/s and the CPU µs per message.

``--client`` also takes a comma list (``magnetar,official,raw``): each runs on its own fresh
standalone, ``--repeat`` rounds alternating the order, and a side-by-side summary and one JSON
object with every run close the output.

``--sync-publishes N``: latency mode: N sequential synchronous publishes (one in flight, each
awaited), batching off; the disk's own ``fdatasync`` latency on the standalone's data dir is
measured right after (``fdatasync_floor_ms``), and so is the floor of a lone publish through
our process layout with no work in it (``path_floor_ms``: ``bench/path_floor.py``).

``--profile DIR`` records the broker and bookie processes with py-spy during the measured
window (raw collapsed stacks, a flame-graph SVG each, and a top-frames summary printed);
``--profile-clients`` adds the two worker processes (with ``--native`` frames).

The last output line is one JSON object: ``msgs_per_s`` (consumed msg/s, or produced when
there are no consumers), ``mb_per_s``, ``publish_p50_ms``, ``publish_p99_ms``, ``e2e_p99_ms``,
more percentiles, counts, CPU per process, load average, and the parameters.

Examples::

    .venv/bin/python bench/perf.py --seconds 10                      # batching, max rate
    .venv/bin/python bench/perf.py --no-batching --seconds 10
    .venv/bin/python bench/perf.py --rate 5000 --seconds 10          # latency at fixed rate
    .venv/bin/python bench/perf.py --tls --seconds 10                # over pulsar+ssl://
    .venv/bin/python bench/perf.py --consumers 2 --subscription-type Shared --profile /tmp/p
"""

from __future__ import annotations

import argparse
import array
import functools
import json
import math
import multiprocessing
import os
import shlex
import struct
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import (
    StandaloneServer,
    child_pids,
    collapsed_to_svg,
    cpu_pressure_total_s,
    loadavg,
    percentile,
    proc_cpu_s,
    proc_runqueue_wait_s,
    start_py_spy,
    summarize_collapsed,
)
from path_floor import measure as measure_path_floor

SUBSCRIPTION_TYPES = ("Exclusive", "Shared", "Failover", "Key_Shared")
STAMP = struct.Struct("<q")
READY_TIMEOUT_S = 60.0
LOW_RATE = 20_000

# ------------------------------------------------------------------------------------ workers
# A worker gets a config dict, connects, sends ("ready", pid), waits for ("go", times_ns),
# runs, and sends ("done", result dict) or ("error", text). The consumer worker also waits for
# ("expect", total_sent) and stops once it has received that many (or after --drain-seconds).


def _worker_entry(role: str, conn: Connection, cfg: dict[str, Any]) -> None:
    try:
        if cfg["client"] == "raw":
            from _raw import raw_consumer, raw_producer

            _run_async((raw_producer if role == "producer" else raw_consumer)(conn, cfg))
        elif cfg["client"] == "official":
            if role == "producer":
                _official_producer(conn, cfg)
            else:
                _official_consumer(conn, cfg)
        elif role == "producer":
            _run_async(_magnetar_producer(conn, cfg))
        else:
            _run_async(_magnetar_consumer(conn, cfg))
    except BaseException:
        conn.send(("error", f"{role} worker failed:\n{traceback.format_exc()}"))


def _run_async(coro: Any) -> None:
    import asyncio

    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    asyncio.run(coro)


def _payload_maker(cfg: dict[str, Any]) -> tuple[Callable[[int], bytes], bool]:
    """(make(now_ns) -> payload, stamped). Payloads of >= 8 bytes carry the send time."""
    size = cfg["size"]
    if size < STAMP.size:
        fixed = os.urandom(size)
        return (lambda _now: fixed), False
    pad = os.urandom(size - STAMP.size)
    pack = STAMP.pack
    return (lambda now: pack(now) + pad), True


def _pace(sent: int, start_ns: int, now_ns: int, rate: float) -> int:
    """How many messages are due now at ``rate`` msg/s (0: sleep until the next one)."""
    due = int((now_ns - start_ns) * rate / 1e9) + 1
    return min(due - sent, 1000)


SYNC_WARMUP = 200


def fdatasync_floor(directory: str, n: int, record_bytes: int = 256) -> dict[str, float]:
    """The disk's own latency: ``n`` writes of ``record_bytes`` each followed by fdatasync
    (what one lone journal record costs at least), in ``directory``, into a preallocated file
    as the journal writes them; p50/p99 in ms."""
    path = os.path.join(directory, f"fdatasync-floor-{os.getpid()}.bin")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    lat = []
    try:
        os.posix_fallocate(fd, 0, max(16 << 20, n * record_bytes))
        record = b"\1" * record_bytes
        for i in range(n):
            t = time.monotonic_ns()
            os.pwrite(fd, record, i * record_bytes)
            os.fdatasync(fd)
            lat.append(time.monotonic_ns() - t)
    finally:
        os.close(fd)
        os.unlink(path)
    lat.sort()
    return {
        "p50": round(percentile(lat, 0.5) / 1e6, 3),
        "p99": round(percentile(lat, 0.99) / 1e6, 3),
    }


def _msgs_per_entry(web_url: str, topic: str) -> float | None:
    """Messages per stored entry on ``topic`` (the broker's counters over the whole run): what
    the producer's batching made of the messages, which the per-entry costs scale with."""
    import urllib.request

    path = topic.replace("persistent://", "persistent/")
    try:
        with urllib.request.urlopen(f"{web_url}/admin/v2/{path}/stats", timeout=10) as r:
            msgs = json.load(r).get("msgInCounter", 0)
        with urllib.request.urlopen(f"{web_url}/admin/v2/{path}/internalStats", timeout=10) as r:
            entries = json.load(r).get("entriesAddedCounter", 0)
    except (OSError, ValueError):
        return None
    return round(msgs / entries, 1) if entries else None


def _sync_result(latencies: array.array[int], n: int) -> dict[str, Any]:
    return {
        "pid": os.getpid(),
        "sent_total": n + SYNC_WARMUP,
        "sent_in_window": n,
        "publish_latency_ns": latencies.tobytes(),
        "errors": 0,
        "flush_s": 0.0,
    }


def _sync_publishes(
    cfg: dict[str, Any], start_at: int, send: Callable[[bytes], Any], make: Any
) -> dict[str, Any]:
    """--sync-publishes N: one message in flight, each awaited (after SYNC_WARMUP unrecorded)."""
    mono = time.monotonic_ns
    time.sleep(max(0.0, (start_at - mono()) / 1e9))  # start with the measured window
    latencies = array.array("q")
    n = cfg["sync_publishes"]
    for i in range(n + SYNC_WARMUP):
        t = mono()
        send(make(t))
        if i >= SYNC_WARMUP:
            latencies.append(mono() - t)
    return _sync_result(latencies, n)


async def _sync_publishes_async(
    cfg: dict[str, Any], start_at: int, send: Callable[[bytes], Any], make: Any
) -> dict[str, Any]:
    import asyncio

    mono = time.monotonic_ns
    await asyncio.sleep(max(0.0, (start_at - mono()) / 1e9))
    latencies = array.array("q")
    n = cfg["sync_publishes"]
    for i in range(n + SYNC_WARMUP):
        t = mono()
        await send(make(t))
        if i >= SYNC_WARMUP:
            latencies.append(mono() - t)
    return _sync_result(latencies, n)


def _official_client(cfg: dict[str, Any]) -> Any:
    import pulsar

    return pulsar.Client(
        cfg["service_url"],
        tls_trust_certs_file_path=cfg.get("tls_trust_certs_file_path") or None,
        io_threads=cfg["io_threads"],
        operation_timeout_seconds=30,
        logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
    )


def _official_producer(conn: Connection, cfg: dict[str, Any]) -> None:
    import _pulsar
    import pulsar

    client = _official_client(cfg)
    kwargs: dict[str, Any] = {
        "batching_enabled": cfg["batching"],
        "batching_max_messages": cfg["batch_max_messages"],
        "batching_max_allowed_size_in_bytes": cfg["batch_max_bytes"],
        "batching_max_publish_delay_ms": cfg["batch_max_delay_ms"],
        "max_pending_messages": cfg["max_pending"],
        "block_if_queue_full": True,
        "send_timeout_millis": 30_000,
    }
    if cfg["subscription_type"] == "Key_Shared" and cfg["batching"]:
        kwargs["batching_type"] = pulsar.BatchingType.KeyBased
    producers = [client.create_producer(cfg["topic"], **kwargs) for _ in range(cfg["producers"])]
    conn.send(("ready", os.getpid()))
    kind, times = conn.recv()
    assert kind == "go"
    start_ns, measure_from, stop_at = times

    make, _stamped = _payload_maker(cfg)
    mono = time.monotonic_ns
    if cfg["sync_publishes"]:
        send_sync = producers[0].send
        conn.send(("done", _sync_publishes(cfg, measure_from, send_sync, make)))
        for p in producers:
            p.close()
        client.close()
        return
    ok = _pulsar.Result.Ok
    latencies = array.array("q")
    lat_append = latencies.append
    errors = [0]

    def on_ack(t0: int, res: Any, _msg_id: Any) -> None:
        if res == ok:
            if t0 >= measure_from:
                lat_append(mono() - t0)
        else:
            errors[0] += 1

    n_producers = len(producers)
    keys = [f"key-{k}" for k in range(cfg["keys"])]
    n_keys = len(keys)
    every = cfg["latency_sample"]
    rate = cfg["rate"]
    if cfg["official_api"] == "raw":
        builder = _pulsar.MessageBuilder
        raw_sends = [p._producer.send_async for p in producers]

        def send(i: int, payload: bytes, cb: Any) -> None:
            mb = builder().content(payload)
            if n_keys:
                mb.partition_key(keys[i % n_keys])
            raw_sends[i % n_producers](mb.build(), cb)

    else:
        wrapped = [p.send_async for p in producers]

        def send(i: int, payload: bytes, cb: Any) -> None:
            if n_keys:
                wrapped[i % n_producers](payload, cb, partition_key=keys[i % n_keys])
            else:
                wrapped[i % n_producers](payload, cb)

    sent = 0
    first_in_window = -1
    chunk = 256
    while True:
        now = mono()
        if now >= stop_at:
            break
        if first_in_window < 0 and now >= measure_from:
            first_in_window = sent
        if rate:
            n = _pace(sent, start_ns, now, rate)
            if n <= 0:
                time.sleep(min(0.001, (sent - (now - start_ns) * rate / 1e9) / rate))  # pacing
                continue
        else:
            n = chunk
        for _ in range(n):
            t = mono()
            send(sent, make(t), functools.partial(on_ack, t) if sent % every == 0 else None)
            sent += 1
    last_in_window = sent
    for p in producers:
        p.flush()
    flushed = mono()
    for p in producers:
        p.close()
    client.close()
    conn.send(
        (
            "done",
            {
                "pid": os.getpid(),
                "sent_total": sent,
                "sent_in_window": last_in_window - max(0, first_in_window),
                "publish_latency_ns": latencies.tobytes(),
                "errors": errors[0],
                "flush_s": (flushed - stop_at) / 1e9,
            },
        )
    )


def _official_consumer(conn: Connection, cfg: dict[str, Any]) -> None:
    import _pulsar
    import pulsar

    client = _official_client(cfg)
    batch = cfg["receive"] == "batch"
    consumers = [
        client.subscribe(
            cfg["topic"],
            cfg["subscription"],
            consumer_type=getattr(pulsar.ConsumerType, cfg["subscription_type"].replace("_", "")),
            receiver_queue_size=cfg["receiver_queue_size"],
            consumer_name=f"perf-consumer-{i}",
            batch_receive_policy=pulsar.ConsumerBatchReceivePolicy(500, 16 << 20, 1)
            if batch
            else None,
        )
        for i in range(cfg["consumers"])
    ]
    conn.send(("ready", os.getpid()))
    kind, times = conn.recv()
    assert kind == "go"
    _start_ns, measure_from, stop_at = times
    stamped = cfg["size"] >= STAMP.size
    mono = time.monotonic_ns
    wall_ms = time.time_ns
    stop = threading.Event()
    counters = [[0, 0] for _ in consumers]  # [received_total, received_in_window]
    e2e_lists = [array.array("q") for _ in consumers]
    errors: list[str] = []
    cumulative = cfg["ack"] == "cumulative"

    def run(idx: int, consumer: Any) -> None:
        raw = consumer._consumer if cfg["official_api"] == "raw" else None
        counter = counters[idx]
        e2e = e2e_lists[idx].append
        unpack = STAMP.unpack_from
        if raw is not None:
            ack = raw.acknowledge_cumulative if cumulative else raw.acknowledge
            receive = raw.batch_receive if batch else functools.partial(raw.receive, 100)
        else:
            ack = consumer.acknowledge_cumulative if cumulative else consumer.acknowledge
            receive = consumer.batch_receive if batch else functools.partial(consumer.receive, 100)
        try:
            while not stop.is_set():
                try:
                    got = receive()
                except _pulsar.Timeout:
                    continue
                now = mono()
                msgs = got if batch else (got,)
                for m in msgs:
                    if stamped:
                        t = unpack(m.data())[0]
                        if measure_from <= t < stop_at:
                            e2e(now - t)
                    else:
                        t = m.publish_timestamp() * 1_000_000
                        e2e(wall_ms() - t)  # ms resolution only
                    if not cumulative:
                        ack(m)
                if cumulative and msgs:
                    ack(msgs[-1])
                counter[0] += len(msgs)
                if measure_from <= now < stop_at:
                    counter[1] += len(msgs)
        except Exception:
            errors.append(traceback.format_exc())

    threads = [
        threading.Thread(target=run, args=(i, c), daemon=True) for i, c in enumerate(consumers)
    ]
    for t in threads:
        t.start()
    kind, expected = conn.recv()
    assert kind == "expect"
    deadline = time.monotonic() + cfg["drain_seconds"]
    while sum(c[0] for c in counters) < expected and time.monotonic() < deadline:
        time.sleep(0.01)  # polling the counters, bounded by the drain deadline
    stop.set()
    for t in threads:
        t.join(5)
    e2e_all = array.array("q")
    for lst in e2e_lists:
        e2e_all.extend(lst)
    for c in consumers:
        c.close()
    client.close()
    conn.send(
        (
            "done",
            {
                "pid": os.getpid(),
                "received_total": sum(c[0] for c in counters),
                "received_in_window": sum(c[1] for c in counters),
                "e2e_latency_ns": e2e_all.tobytes(),
                "errors": errors,
                "per_consumer": [c[0] for c in counters],
            },
        )
    )


def _magnetar_client(cfg: dict[str, Any]) -> Any:
    from magnetar.client import Client

    return Client(
        cfg["service_url"], tls_trust_certs_file_path=cfg.get("tls_trust_certs_file_path") or None
    )


async def _recv_in_thread(conn: Connection) -> Any:
    import asyncio

    return await asyncio.get_running_loop().run_in_executor(None, conn.recv)


async def _magnetar_producer(conn: Connection, cfg: dict[str, Any]) -> None:
    import asyncio

    from magnetar.client import BatchingType

    client = _magnetar_client(cfg)
    kwargs: dict[str, Any] = {
        "batching_enabled": cfg["batching"],
        "batching_max_messages": cfg["batch_max_messages"],
        "batching_max_allowed_size_in_bytes": cfg["batch_max_bytes"],
        "batching_max_publish_delay_ms": cfg["batch_max_delay_ms"],
        "max_pending_messages": cfg["max_pending"],
        "block_if_queue_full": True,
    }
    if cfg["subscription_type"] == "Key_Shared" and cfg["batching"]:
        kwargs["batching_type"] = BatchingType.KeyBased
    producers = [
        await client.create_producer(cfg["topic"], **kwargs) for _ in range(cfg["producers"])
    ]
    conn.send(("ready", os.getpid()))
    kind, times = await _recv_in_thread(conn)
    assert kind == "go"
    start_ns, measure_from, stop_at = times
    make, _stamped = _payload_maker(cfg)
    mono = time.monotonic_ns
    if cfg["sync_publishes"]:
        result = await _sync_publishes_async(cfg, measure_from, producers[0].send, make)
        for p in producers:
            await p.close()
        await client.close()
        conn.send(("done", result))
        return
    latencies = array.array("q")
    errors = [0]

    def on_done(t0: int, fut: asyncio.Future[Any]) -> None:
        if fut.cancelled() or fut.exception() is not None:
            errors[0] += 1
        elif t0 >= measure_from:
            latencies.append(mono() - t0)

    sends = [p.send_async for p in producers]
    n_producers = len(sends)
    keys = [f"key-{k}" for k in range(cfg["keys"])]
    every = cfg["latency_sample"]
    rate = cfg["rate"]
    sent = 0
    first_in_window = -1
    if cfg["magnetar_api"] == "batch":
        # the throughput API: send_batch of batch_max_messages payloads, pipelined (the
        # pending queue bounds what is in flight); publish latency: one sample per call
        batch_sends = [p.send_batch for p in producers]
        chunk = max(1, min(cfg["batch_max_messages"], cfg["max_pending"]))
        calls = 0
        while True:
            now = mono()
            if now >= stop_at:
                break
            if first_in_window < 0 and now >= measure_from:
                first_in_window = sent
            fut = await batch_sends[calls % n_producers]([make(now) for _ in range(chunk)])
            fut.add_done_callback(functools.partial(on_done, now))
            calls += 1
            sent += chunk
    while cfg["magnetar_api"] != "batch":
        now = mono()
        if now >= stop_at:
            break
        if first_in_window < 0 and now >= measure_from:
            first_in_window = sent
        if rate:
            n = _pace(sent, start_ns, now, rate)
            if n <= 0:
                await asyncio.sleep(min(0.001, (sent - (now - start_ns) * rate / 1e9) / rate))
                continue
        else:
            n = 256
        for _ in range(n):
            t = mono()
            if keys:
                fut = await sends[sent % n_producers](make(t), partition_key=keys[sent % len(keys)])
            else:
                fut = await sends[sent % n_producers](make(t))
            if sent % every == 0:
                fut.add_done_callback(functools.partial(on_done, t))
            sent += 1
        await asyncio.sleep(0)
    last_in_window = sent
    for p in producers:
        await p.flush()
    flushed = mono()
    for p in producers:
        await p.close()
    await client.close()
    conn.send(
        (
            "done",
            {
                "pid": os.getpid(),
                "sent_total": sent,
                "sent_in_window": last_in_window - max(0, first_in_window),
                "publish_latency_ns": latencies.tobytes(),
                "errors": errors[0],
                "flush_s": (flushed - stop_at) / 1e9,
            },
        )
    )


async def _magnetar_consumer(conn: Connection, cfg: dict[str, Any]) -> None:
    import asyncio
    import contextlib

    from magnetar.client import ConsumerType

    client = _magnetar_client(cfg)
    consumers = [
        await client.subscribe(
            cfg["topic"],
            cfg["subscription"],
            consumer_type=getattr(ConsumerType, cfg["subscription_type"]),
            receiver_queue_size=cfg["receiver_queue_size"],
            consumer_name=f"perf-consumer-{i}",
        )
        for i in range(cfg["consumers"])
    ]
    conn.send(("ready", os.getpid()))
    kind, times = await _recv_in_thread(conn)
    assert kind == "go"
    _start_ns, measure_from, stop_at = times
    stamped = cfg["size"] >= STAMP.size
    mono = time.monotonic_ns
    counters = [[0, 0] for _ in consumers]
    total = [0]
    target = [1 << 62]
    all_received = asyncio.Event()
    e2e = array.array("q")
    errors: list[str] = []
    cumulative = cfg["ack"] == "cumulative"

    async def run_batches(idx: int, consumer: Any) -> None:
        # the throughput API: receive_batch (entries undecoded), payloads sliced, the whole
        # batch acknowledged at once (or cumulatively up to its last message)
        counter = counters[idx]
        unpack = STAMP.unpack_from
        try:
            while True:
                batch = await consumer.receive_batch(1000)
                now = mono()
                n = len(batch)
                if stamped:
                    for p in batch.payloads():
                        t = unpack(p)[0]
                        if measure_from <= t < stop_at:
                            e2e.append(now - t)
                if cumulative:
                    await consumer.acknowledge_cumulative(batch.last())
                else:
                    await consumer.acknowledge(batch)
                counter[0] += n
                total[0] += n
                if total[0] >= target[0]:
                    all_received.set()
                if measure_from <= now < stop_at:
                    counter[1] += n
        except asyncio.CancelledError:
            raise
        except Exception:
            errors.append(traceback.format_exc())

    async def run(idx: int, consumer: Any) -> None:
        counter = counters[idx]
        unpack = STAMP.unpack_from
        ack = consumer.acknowledge_cumulative if cumulative else consumer.acknowledge
        try:
            while True:
                m = await consumer.receive()
                now = mono()
                if stamped:
                    t = unpack(m.data())[0]
                    if measure_from <= t < stop_at:
                        e2e.append(now - t)
                else:
                    e2e.append(time.time_ns() - m.publish_timestamp() * 1_000_000)
                await ack(m)
                counter[0] += 1
                total[0] += 1
                if total[0] >= target[0]:
                    all_received.set()
                if measure_from <= now < stop_at:
                    counter[1] += 1
        except asyncio.CancelledError:
            raise
        except Exception:
            errors.append(traceback.format_exc())

    loop_fn = run_batches if cfg["magnetar_api"] == "batch" else run
    tasks = [asyncio.create_task(loop_fn(i, c)) for i, c in enumerate(consumers)]
    kind, expected = await _recv_in_thread(conn)
    assert kind == "expect"
    target[0] = expected
    if total[0] >= expected:
        all_received.set()
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(all_received.wait(), cfg["drain_seconds"])
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    for c in consumers:
        await c.close()
    await client.close()
    conn.send(
        (
            "done",
            {
                "pid": os.getpid(),
                "received_total": sum(c[0] for c in counters),
                "received_in_window": sum(c[1] for c in counters),
                "e2e_latency_ns": e2e.tobytes(),
                "errors": errors,
                "per_consumer": [c[0] for c in counters],
            },
        )
    )


# ------------------------------------------------------------------------------------- parent


class Worker:
    def __init__(self, ctx: Any, role: str, cfg: dict[str, Any]) -> None:
        self.role = role
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(
            target=_worker_entry, args=(role, child, cfg), name=f"perf-{role}", daemon=True
        )
        self.proc.start()
        child.close()
        self.pid: int | None = None

    def recv(self, kind: str, timeout_s: float) -> Any:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.conn.poll(0.1):
                try:
                    got, value = self.conn.recv()
                except EOFError:
                    break
                if got == "error":
                    raise SystemExit(value)
                if got != kind:
                    raise SystemExit(f"{self.role} worker sent {got!r}, expected {kind!r}")
                return value
            if not self.proc.is_alive() and not self.conn.poll():
                break
        raise SystemExit(
            f"{self.role} worker: no {kind!r} within {timeout_s} s "
            f"(alive={self.proc.is_alive()}, exit={self.proc.exitcode})"
        )

    def send(self, value: Any) -> None:
        self.conn.send(value)

    def close(self) -> None:
        self.proc.join(5)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(5)


def _pcts(ns_bytes: bytes) -> dict[str, float]:
    values = sorted(array.array("q", ns_bytes))
    out = {"n": float(len(values))}
    for name, q in (("p50", 0.5), ("p95", 0.95), ("p99", 0.99), ("p999", 0.999)):
        out[name] = round(percentile(values, q) / 1e6, 3)
    out["max"] = round(values[-1] / 1e6, 3) if values else float("nan")
    return out


def check_magnetar_client() -> None:
    try:
        from magnetar.client import Client, ConsumerType  # noqa: F401
    except Exception as exc:
        raise SystemExit(
            f"--client magnetar: magnetar.client is not importable/usable yet ({exc!r}); "
            "use --client official"
        ) from exc


def run(args: argparse.Namespace) -> dict[str, Any]:
    if args.client == "magnetar":
        check_magnetar_client()
    server: StandaloneServer | None = None
    service_url = args.service_url
    load_before = loadavg()
    print(f"# load average before: {load_before}", flush=True)
    trust_certs = args.tls_trust_certs_file_path or ""
    if args.tls and args.client == "raw":
        raise SystemExit("--tls: use --client official or magnetar (the raw client is plain TCP)")
    if not service_url:
        server = StandaloneServer(args.data_dir, tls=args.tls)
        print(f"# standalone: {shlex.join(server.command())}", flush=True)
        server.start()
        service_url = server.service_url_tls if args.tls else server.service_url
        trust_certs = trust_certs or server.trust_certs_file
        print(
            f"# standalone ready at {service_url}: broker pid {server.pid}, "
            f"bookie pids {server.bookie_pids()} (log {server.log_path})",
            flush=True,
        )
    topic = args.topic or f"persistent://public/default/perf-{os.getpid()}-{time.time_ns()}"
    rate = float(args.rate or 0)
    latency_sample = args.latency_sample or (1 if rate and rate <= LOW_RATE else 16)
    if args.sync_publishes:
        latency_sample = 1  # every synchronous publish is timed
    receive = args.receive
    if args.client != "official":
        receive = "single"  # batch_receive is the official client's (see --magnetar-api)
    elif receive == "auto":
        receive = "single" if rate and rate <= LOW_RATE else "batch"
    magnetar_api = args.magnetar_api
    if magnetar_api == "auto":
        batch_api = args.client == "magnetar" and args.batching and not rate and not args.keys
        magnetar_api = "batch" if batch_api else "send"
    cfg: dict[str, Any] = {
        "client": args.client,
        "official_api": args.official_api,
        "service_url": service_url,
        "tls_trust_certs_file_path": trust_certs,
        "topic": topic,
        "subscription": args.subscription,
        "subscription_type": args.subscription_type,
        "producers": args.producers,
        "consumers": args.consumers,
        "rate": rate,
        "size": args.size,
        "batching": args.batching,
        "batch_max_messages": args.batch_max_messages,
        "batch_max_bytes": args.batch_max_bytes,
        "batch_max_delay_ms": args.batch_max_delay_ms,
        "max_pending": args.max_pending,
        "receiver_queue_size": args.receiver_queue_size,
        "latency_sample": latency_sample if args.client != "raw" else "per entry",
        "receive": receive,
        "ack": args.ack,
        "keys": args.keys,
        "io_threads": args.io_threads,
        "drain_seconds": args.drain_seconds,
        "magnetar_api": magnetar_api,
        "sync_publishes": args.sync_publishes,
    }
    ctx = multiprocessing.get_context("spawn")
    workers: list[Worker] = []
    spies: list[tuple[str, str, Any]] = []
    floor: dict[str, float] | None = None
    path_floor: dict[str, float] | None = None
    msgs_per_entry: float | None = None
    try:
        consumer = Worker(ctx, "consumer", cfg) if args.consumers > 0 else None
        if consumer is not None:
            workers.append(consumer)
            consumer.pid = consumer.recv("ready", READY_TIMEOUT_S)
        producer = Worker(ctx, "producer", cfg)
        workers.append(producer)
        producer.pid = producer.recv("ready", READY_TIMEOUT_S)

        pids: dict[str, list[int]] = {"producer": [producer.pid or 0]}
        if consumer is not None:
            pids["consumer"] = [consumer.pid or 0]
        if server is not None:
            pids["broker"] = [server.pid or 0]
            pids["bookie"] = server.bookie_pids()
        elif args.broker_pid:
            pids["broker"] = [args.broker_pid]
            pids["bookie"] = args.bookie_pid or child_pids(args.broker_pid)

        start_ns = time.monotonic_ns() + 200_000_000
        measure_from = start_ns + int(args.warmup_seconds * 1e9)
        stop_at = measure_from + int(args.seconds * 1e9)
        for w in workers:
            w.send(("go", (start_ns, measure_from, stop_at)))
        time.sleep(max(0.0, (measure_from - time.monotonic_ns()) / 1e9))  # wait for the window
        cpu0 = {name: sum(proc_cpu_s(p) for p in ps) for name, ps in pids.items()}
        wait0 = {name: sum(proc_runqueue_wait_s(p) for p in ps) for name, ps in pids.items()}
        psi0 = cpu_pressure_total_s()
        wall0 = time.monotonic()
        if args.profile:
            os.makedirs(args.profile, exist_ok=True)
            targets = [n for n in ("broker", "bookie") if n in pids]
            if args.profile_clients:
                targets += [n for n in ("producer", "consumer") if n in pids]
            for name in targets:
                for k, pid in enumerate(pids[name]):
                    label = name if k == 0 else f"{name}{k}"
                    raw = os.path.join(args.profile, f"{label}.txt")
                    native = args.profile_native or name in ("producer", "consumer")
                    spies.append((label, raw, start_py_spy(pid, raw, args.seconds, native=native)))
        time.sleep(max(0.0, (stop_at - time.monotonic_ns()) / 1e9))  # the measured window
        cpu1 = {name: sum(proc_cpu_s(p) for p in ps) for name, ps in pids.items()}
        wait1 = {name: sum(proc_runqueue_wait_s(p) for p in ps) for name, ps in pids.items()}
        psi1 = cpu_pressure_total_s()
        wall = time.monotonic() - wall0
        prod = producer.recv("done", 120 + args.seconds)
        cons = None
        if consumer is not None:
            consumer.send(("expect", prod["sent_total"]))
            cons = consumer.recv("done", args.drain_seconds + 60)
        if server is not None:
            msgs_per_entry = _msgs_per_entry(server.web_url, topic)
        if args.sync_publishes:  # the disk's part of a lone publish, on the same disk
            floor = fdatasync_floor(
                str(server.data_dir) if server is not None else tempfile.gettempdir(),
                args.sync_publishes,
            )
            print(f"# fdatasync floor (256 B writes): p50 {floor['p50']}, p99 {floor['p99']} ms")
            path_floor = measure_path_floor(
                str(server.data_dir) if server is not None else tempfile.gettempdir(),
                args.sync_publishes,
            )
            print(f"# path floor (bench/path_floor.py): {path_floor} ms")
    finally:
        for w in workers:
            w.close()
        for _label, _raw, spy in spies:
            try:
                spy.wait(60)
            except Exception:
                spy.kill()
        if server is not None:
            server.stop()
    load_after = loadavg()

    seconds = args.seconds
    produced_rate = prod["sent_in_window"] / seconds
    consumed_rate = cons["received_in_window"] / seconds if cons else 0.0
    msgs_per_s = consumed_rate if cons else produced_rate
    pub = _pcts(prod["publish_latency_ns"])
    e2e = _pcts(cons["e2e_latency_ns"]) if cons else {}
    cpu_cores = {name: round((cpu1[name] - cpu0[name]) / wall, 3) for name in cpu1}
    # Time runnable but not running (all threads): how starved each process was of CPU.
    runqueue_wait = {name: round((wait1[name] - wait0[name]) / wall, 3) for name in wait1}
    cpu_pressure_pct = (
        round(100 * (psi1 - psi0) / wall, 1) if psi0 is not None and psi1 is not None else None
    )
    # CPU cost per message moved, per process: less sensitive to other load than msg/s, and
    # sum(us/msg) gives the rate this machine's cores could sustain if nothing else ran.
    window_msgs = max(1.0, prod["sent_in_window"], cons["received_in_window"] if cons else 0)
    cpu_us_per_msg = {
        name: round((cpu1[name] - cpu0[name]) / window_msgs * 1e6, 2) for name in cpu1
    }
    total_us = sum(cpu_us_per_msg.values())
    cpu_bound_msgs_per_s = round((os.cpu_count() or 1) * 1e6 / total_us) if total_us else None
    missing = prod["sent_total"] - cons["received_total"] if cons else 0
    result: dict[str, Any] = {
        "msgs_per_s": round(msgs_per_s, 1),
        "mb_per_s": round(msgs_per_s * args.size / 1e6, 3),
        "publish_p50_ms": pub["p50"],
        "publish_p99_ms": pub["p99"],
        "e2e_p99_ms": e2e.get("p99", float("nan")),
        "produce_msgs_per_s": round(produced_rate, 1),
        "consume_msgs_per_s": round(consumed_rate, 1),
        "publish_p95_ms": pub["p95"],
        "publish_p999_ms": pub["p999"],
        "publish_max_ms": pub["max"],
        "publish_latency_samples": int(pub["n"]),
        "e2e_p50_ms": e2e.get("p50", float("nan")),
        "e2e_p95_ms": e2e.get("p95", float("nan")),
        "e2e_p999_ms": e2e.get("p999", float("nan")),
        "e2e_max_ms": e2e.get("max", float("nan")),
        "sent_total": prod["sent_total"],
        "received_total": cons["received_total"] if cons else 0,
        "missing": missing,
        "publish_errors": prod["errors"],
        "consumer_errors": len(cons["errors"]) if cons else 0,
        "flush_s": round(prod["flush_s"], 3),
        "cpu_cores": cpu_cores,
        "cpu_cores_total": round(sum(cpu_cores.values()), 3),
        "cpu_us_per_msg": cpu_us_per_msg,
        "runqueue_wait_s_per_s": runqueue_wait,
        "cpu_pressure_some_pct": cpu_pressure_pct,
        "cpu_bound_msgs_per_s": cpu_bound_msgs_per_s,
        "loadavg_before": load_before,
        "loadavg_after": load_after,
        "fdatasync_floor_ms": floor,
        "path_floor_ms": path_floor,
        "msgs_per_entry": msgs_per_entry,
        # parameters
        "client": args.client,
        "official_api": args.official_api if args.client == "official" else None,
        "magnetar_api": magnetar_api if args.client == "magnetar" else None,
        "service_url": args.service_url or "started standalone",
        "tls": bool(args.tls or (args.service_url or "").startswith("pulsar+ssl://")),
        "rate": rate or None,
        "size": args.size,
        "producers": args.producers,
        "consumers": args.consumers,
        "subscription_type": args.subscription_type,
        "batching": args.batching,
        "batch_max_messages": args.batch_max_messages,
        "batch_max_delay_ms": args.batch_max_delay_ms,
        "max_pending": args.max_pending,
        "receiver_queue_size": args.receiver_queue_size,
        "receive": receive,
        "ack": args.ack,
        "keys": args.keys,
        "latency_sample": latency_sample if args.client != "raw" else "per entry",
        "seconds": seconds,
        "warmup_seconds": args.warmup_seconds,
    }
    if cons and cons["errors"]:
        print(f"# consumer errors:\n{cons['errors'][0]}", flush=True)
    print(
        f"produced: {produced_rate:>10.0f} msg/s  {produced_rate * args.size / 1e6:7.2f} MB/s  "
        f"({prod['sent_total']} sent, {prod['errors']} errors, flush {prod['flush_s']:.2f} s)",
        flush=True,
    )
    if cons:
        print(
            f"consumed: {consumed_rate:>10.0f} msg/s  {consumed_rate * args.size / 1e6:7.2f} MB/s  "
            f"({cons['received_total']} received, {missing} missing, "
            f"per consumer {cons['per_consumer']})",
            flush=True,
        )
    print(
        f"publish latency ms: p50 {pub['p50']}  p95 {pub['p95']}  p99 {pub['p99']}  "
        f"p99.9 {pub['p999']}  max {pub['max']}  ({int(pub['n'])} samples, "
        + ("one per entry)" if args.client == "raw" else f"every {latency_sample}th message)"),
        flush=True,
    )
    if cons:
        print(
            f"end-to-end latency ms: p50 {e2e['p50']}  p95 {e2e['p95']}  p99 {e2e['p99']}  "
            f"p99.9 {e2e['p999']}  max {e2e['max']}  ({int(e2e['n'])} samples)",
            flush=True,
        )
    print(
        "cpu cores used in the window: "
        + ", ".join(f"{k} {v}" for k, v in cpu_cores.items())
        + f" (total {result['cpu_cores_total']} of {os.cpu_count()}); "
        f"load average after {load_after}",
        flush=True,
    )
    print(
        "waiting for a CPU (s per s, all threads): "
        + ", ".join(f"{k} {v}" for k, v in runqueue_wait.items())
        + f"; machine CPU pressure (PSI some) {cpu_pressure_pct}% of the window",
        flush=True,
    )
    print(
        "cpu us per message: "
        + ", ".join(f"{k} {v}" for k, v in cpu_us_per_msg.items())
        + f" (total {total_us:.2f}: {os.cpu_count()} idle cores would sustain about "
        f"{cpu_bound_msgs_per_s} msg/s)",
        flush=True,
    )
    for label, raw, _spy in spies:
        if os.path.exists(raw) and os.path.getsize(raw) > 0:
            svg = raw[: -len(".txt")] + ".svg"
            collapsed_to_svg(raw, svg, f"{label} pid during perf run")
            print(f"# profile of {label}: {raw} (flame graph {svg})", flush=True)
            print(summarize_collapsed(raw, args.profile_top), flush=True)
            result.setdefault("profiles", {})[label] = svg
    return result


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--service-url", help="use this broker instead of starting standalone")
    p.add_argument(
        "--tls",
        action="store_true",
        help="over TLS: the started standalone also listens on pulsar+ssl:// (a fresh test CA) "
        "and the clients use that URL; compare with a run without --tls for the TLS cost",
    )
    p.add_argument(
        "--tls-trust-certs-file-path", help="CA file for a --service-url pulsar+ssl://..."
    )
    p.add_argument(
        "--broker-pid", type=int, help="with --service-url: broker pid for CPU and profiles"
    )
    p.add_argument(
        "--bookie-pid",
        type=int,
        action="append",
        help="with --broker-pid: bookie pid(s) (default: the broker's child processes)",
    )
    p.add_argument(
        "--client",
        default="official",
        help="official, magnetar or raw; a comma list (magnetar,official,raw) runs each in "
        "turn, --repeat rounds alternating, and prints them side by side",
    )
    p.add_argument(
        "--tls-ab",
        action="store_true",
        help="each client plain and over TLS, alternating in the same run (with --repeat), "
        "and the TLS/plain ratio of msg/s and of CPU us per message",
    )
    p.add_argument("--repeat", type=int, default=1, help="rounds over the --client list")
    p.add_argument(
        "--sync-publishes",
        type=int,
        default=0,
        metavar="N",
        help="latency mode: N sequential synchronous publishes (one in flight, each awaited; "
        f"after {SYNC_WARMUP} unrecorded), no batching; publish p50/p99 are theirs "
        "(official and magnetar clients)",
    )
    p.add_argument(
        "--magnetar-api",
        choices=["auto", "send", "batch"],
        default="auto",
        help="magnetar client: send_async + receive per message, or the throughput API "
        "(send_batch, receive_batch, acknowledge of the whole batch); auto: batch when "
        "batching at full rate without keys",
    )
    p.add_argument(
        "--official-api",
        choices=["raw", "wrapper"],
        default="raw",
        help="official client: _pulsar calls (raw) or the pulsar package's wrappers",
    )
    p.add_argument("--topic", help="default: a new persistent://public/default/perf-... topic")
    p.add_argument("--rate", type=float, default=0, help="total msg/s (default: max)")
    p.add_argument("--size", type=int, default=100, help="message size in bytes")
    p.add_argument("--producers", type=int, default=1)
    p.add_argument("--consumers", type=int, default=1)
    p.add_argument("--subscription", default="perf-sub")
    p.add_argument("--subscription-type", choices=SUBSCRIPTION_TYPES, default="Exclusive")
    p.add_argument("--batching", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--batch-max-messages", type=int, default=1000)
    p.add_argument("--batch-max-bytes", type=int, default=128 * 1024)
    p.add_argument("--batch-max-delay-ms", type=int, default=1)
    p.add_argument("--max-pending", type=int, default=5000, help="producer pending queue")
    p.add_argument("--receiver-queue-size", type=int, default=1000)
    p.add_argument("--receive", choices=["auto", "single", "batch"], default="auto")
    p.add_argument("--ack", choices=["individual", "cumulative"], default="individual")
    p.add_argument("--keys", type=int, default=0, help="round-robin over N partition keys")
    p.add_argument("--latency-sample", type=int, default=0, help="time every Nth publish")
    p.add_argument("--io-threads", type=int, default=1, help="official client I/O threads")
    p.add_argument("--seconds", type=float, default=10.0, help="measured window")
    p.add_argument("--warmup-seconds", type=float, default=1.0)
    p.add_argument("--drain-seconds", type=float, default=30.0, help="max wait for consumers")
    p.add_argument("--data-dir", help="standalone data dir (default: temporary, removed)")
    p.add_argument("--profile", metavar="DIR", help="py-spy the broker and bookie into DIR")
    p.add_argument("--profile-clients", action="store_true", help="also py-spy the workers")
    p.add_argument(
        "--profile-native",
        action="store_true",
        help="native (C) frames for the servers too; pauses them while sampling",
    )
    p.add_argument("--profile-top", type=int, default=15)
    return p


def _clean(result: dict[str, Any]) -> dict[str, Any]:
    """Strict JSON: figures that could not be measured (no consumer, no sample) are null."""
    return {k: None if isinstance(v, float) and math.isnan(v) else v for k, v in result.items()}


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.producers < 1:
        raise SystemExit("--producers must be >= 1")
    if args.ack == "cumulative" and args.subscription_type in ("Shared", "Key_Shared"):
        raise SystemExit("cumulative acks are not allowed on Shared/Key_Shared subscriptions")
    clients = [c.strip() for c in args.client.split(",") if c.strip()]
    if args.sync_publishes:
        if "raw" in clients:
            raise SystemExit("--sync-publishes: official or magnetar clients")
        args.batching = False
    for c in clients:
        if c not in ("official", "magnetar", "raw"):
            raise SystemExit(f"--client: unknown client {c!r} (official, magnetar, raw)")
    print(f"# command: {shlex.join([sys.executable, *sys.argv])}", flush=True)
    tls_modes = (False, True) if args.tls_ab else (bool(args.tls),)
    variants = [(c, t) for c in clients for t in tls_modes]

    def label(c: str, t: bool) -> str:
        return f"{c}+tls" if t and args.tls_ab else c

    if len(variants) == 1 and args.repeat <= 1:
        args.client = clients[0]
        print(json.dumps(_clean(run(args))), flush=True)
        return 0
    runs: list[dict[str, Any]] = []
    for round_no in range(max(1, args.repeat)):
        order = variants if round_no % 2 == 0 else variants[::-1]  # alternate the order
        for c, t in order:
            print(f"# round {round_no + 1}: --client {c}{' --tls' if t else ''}", flush=True)
            one = argparse.Namespace(**vars(args))
            one.client = c
            one.tls = t
            r = _clean(run(one))
            r["variant"] = label(c, t)
            runs.append(r)
    print("# side by side (msg/s, publish p50/p99 ms, CPU us per message per process):")
    summary: dict[str, Any] = {}
    for c in [label(c, t) for c, t in variants]:
        mine = [r for r in runs if r["variant"] == c]
        rates = sorted(r["msgs_per_s"] for r in mine)
        cpu = {
            k: round(sorted(r["cpu_us_per_msg"][k] for r in mine)[len(mine) // 2], 2)
            for k in mine[0]["cpu_us_per_msg"]
        }
        summary[c] = {
            "msgs_per_s": [r["msgs_per_s"] for r in mine],
            "median_msgs_per_s": rates[len(rates) // 2],
            "publish_p50_ms": [r["publish_p50_ms"] for r in mine],
            "publish_p99_ms": [r["publish_p99_ms"] for r in mine],
            "path_floor_ms": [r.get("path_floor_ms") for r in mine],
            "msgs_per_entry": [r.get("msgs_per_entry") for r in mine],
            "median_cpu_us_per_msg": cpu,
            "magnetar_api": mine[0].get("magnetar_api"),
        }
        print(
            f"{c:>9}: {summary[c]['msgs_per_s']} msg/s (median {rates[len(rates) // 2]:.0f}); "
            f"p50 {summary[c]['publish_p50_ms']} p99 {summary[c]['publish_p99_ms']} ms; "
            f"cpu us/msg {cpu}; msgs/entry {summary[c]['msgs_per_entry']}"
            + (f"; path floor {summary[c]['path_floor_ms']}" if args.sync_publishes else ""),
            flush=True,
        )
    if args.tls_ab:
        for c in clients:
            plain, tls = summary[c], summary[f"{c}+tls"]
            cpu_plain = sum(plain["median_cpu_us_per_msg"].values())
            cpu_tls = sum(tls["median_cpu_us_per_msg"].values())
            ratio = tls["median_msgs_per_s"] / plain["median_msgs_per_s"]
            summary[f"{c}:tls_ratio"] = {
                "msgs_per_s_tls_over_plain": round(ratio, 3),
                "cpu_us_per_msg_plain": round(cpu_plain, 2),
                "cpu_us_per_msg_tls": round(cpu_tls, 2),
            }
            print(
                f"{c}: TLS/plain msg/s {ratio:.3f}; CPU us/msg (all processes) plain "
                f"{cpu_plain:.2f}, TLS {cpu_tls:.2f}",
                flush=True,
            )
    print(json.dumps({"side_by_side": summary, "runs": runs}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
