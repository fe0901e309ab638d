"""``bench/perf.py --client raw``: a load generator that speaks the Pulsar protocol directly.

Why: the official Python client costs ~15 us of CPU per message (produce + consume) on this
machine, which caps an end-to-end run long before the broker does. This driver does per-entry
work only: the batch payload (``--batch-max-messages`` messages of ``--size`` bytes, or one
message with ``--no-batching``) is built once; each SEND gets a fresh ``MessageMetadata``
(sequence id, publish time, and ``event_time`` = the CLOCK_MONOTONIC send time in
microseconds, which the consumer uses for end-to-end latency). The consumer counts
``num_messages_in_batch`` per MESSAGE, grants permits in halves of its receiver queue as
the C++ client does, and acknowledges each received entry (individual, one ACK command per
read, like the C++ client's grouped acks) or cumulatively.

So the figures measure the broker and bookie: not a client library. Publish latency is per
entry (send -> receipt), end-to-end per entry (send -> receipt by the consumer).
Uses the sans-I/O codec ``magnetar.client.protocol``; one connection per worker; no lookup
redirects (a single broker, such as standalone).
"""

from __future__ import annotations

import array
import asyncio
import os
import time
import urllib.parse
from collections.abc import Callable
from multiprocessing.connection import Connection as Pipe
from typing import Any

from magnetar.client.protocol import NEED_DATA, Connection, PayloadCommand, Role, build_batch
from magnetar.client.protocol import commands as cmds
from magnetar.client.protocol.proto import pulsar_api_pb2 as pb

SUB_TYPES = {"Exclusive": 0, "Shared": 1, "Failover": 2, "Key_Shared": 3}
T = pb.BaseCommand


class RawConnection:
    """One protocol connection: a reader task routes events to request futures or handlers."""

    def __init__(self) -> None:
        self.proto = Connection(Role.CLIENT)
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.requests: dict[int, asyncio.Future[Any]] = {}
        self.next_request_id = 1
        self.on_receipt: Callable[[pb.CommandSendReceipt], None] | None = None
        self.on_message: Callable[[list[PayloadCommand]], None] | None = None
        self._connected: asyncio.Future[None] | None = None
        self._task: asyncio.Task[None] | None = None

    async def open(self, service_url: str) -> None:
        url = urllib.parse.urlparse(service_url)
        self.reader, self.writer = await asyncio.open_connection(url.hostname, url.port or 6650)
        self._connected = asyncio.get_running_loop().create_future()
        self._task = asyncio.create_task(self._read_loop())
        self.write(self.proto.send(cmds.connect("magnetar-bench-raw")))
        await asyncio.wait_for(self._connected, 10)

    def write(self, data: bytes) -> None:
        assert self.writer is not None
        self.writer.write(data)

    async def request(self, make: Callable[[int], pb.BaseCommand]) -> Any:
        rid = self.next_request_id
        self.next_request_id += 1
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.requests[rid] = fut
        self.write(self.proto.send(make(rid)))
        return await asyncio.wait_for(fut, 30)

    def _answer(self, rid: int, value: Any, error: str | None = None) -> None:
        fut = self.requests.pop(rid, None)
        if fut is not None and not fut.done():
            if error is None:
                fut.set_result(value)
            else:
                fut.set_exception(RuntimeError(error))

    async def _read_loop(self) -> None:
        assert self.reader is not None
        proto = self.proto
        while True:
            data = await self.reader.read(1 << 18)
            if not data:
                return
            proto.receive_data(data)
            messages: list[PayloadCommand] = []
            while True:
                ev = proto.next_event()
                if ev is NEED_DATA:
                    break
                if isinstance(ev, PayloadCommand):
                    messages.append(ev)
                    continue
                t = ev.base.type
                if t == T.SEND_RECEIPT:
                    if self.on_receipt is not None:
                        self.on_receipt(ev.base.send_receipt)
                elif t == T.CONNECTED:
                    assert self._connected is not None
                    self._connected.set_result(None)
                elif t == T.PING:
                    self.write(proto.send(cmds.pong()))
                elif t == T.LOOKUP_RESPONSE:
                    r = ev.base.lookupTopicResponse
                    self._answer(r.request_id, r, r.message if r.response == r.Failed else None)
                elif t == T.PRODUCER_SUCCESS:
                    self._answer(ev.base.producer_success.request_id, ev.base.producer_success)
                elif t == T.SUCCESS:
                    self._answer(ev.base.success.request_id, None)
                elif t == T.ERROR:
                    e = ev.base.error
                    self._answer(e.request_id, None, f"{e.error}: {e.message}")
                elif t == T.SEND_ERROR:
                    raise RuntimeError(f"send error: {ev.base.send_error.message}")
            if messages and self.on_message is not None:
                self.on_message(messages)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
        if self.writer is not None:
            self.writer.close()


def _batch_payload(cfg: dict[str, Any]) -> tuple[bytes, int]:
    body = os.urandom(cfg["size"])
    n = cfg["batch_max_messages"] if cfg["batching"] else 1
    if n == 1:
        return body, 1
    return build_batch(
        (pb.SingleMessageMetadata(payload_size=len(body)), body) for _ in range(n)
    ), n


async def raw_producer(conn: Pipe, cfg: dict[str, Any]) -> None:
    rc = RawConnection()
    await rc.open(cfg["service_url"])
    topic = cfg["topic"]
    await rc.request(lambda rid: cmds.lookup(topic, rid))
    ok = await rc.request(lambda rid: cmds.producer(topic, 1, rid))
    producer_name = ok.producer_name
    payload, per_entry = _batch_payload(cfg)
    window = max(1, cfg["max_pending"] // per_entry)
    mono = time.monotonic_ns
    sent_at: dict[int, int] = {}
    latencies = array.array("q")
    room = asyncio.Event()
    room.set()
    drained = asyncio.Event()
    conn.send(("ready", os.getpid()))
    kind, times = await asyncio.get_running_loop().run_in_executor(None, conn.recv)
    assert kind == "go"
    start_ns, measure_from, stop_at = times

    def on_receipt(r: pb.CommandSendReceipt) -> None:
        t0 = sent_at.pop(r.sequence_id, None)
        if t0 is not None and t0 >= measure_from:
            latencies.append(mono() - t0)
        if len(sent_at) < window:
            room.set()
        if not sent_at:
            drained.set()

    rc.on_receipt = on_receipt
    proto = rc.proto
    write = rc.write
    send_cmd = cmds.send
    md_cls = pb.MessageMetadata
    entry_rate = cfg["rate"] / per_entry if cfg["rate"] else 0.0
    seq = 0
    first_in_window = -1
    while True:
        now = mono()
        if now >= stop_at:
            break
        if first_in_window < 0 and now >= measure_from:
            first_in_window = seq
        if entry_rate:
            due = int((now - start_ns) * entry_rate / 1e9) + 1
            if due <= seq:
                await asyncio.sleep(
                    min(0.001, (seq + 1 - (now - start_ns) * entry_rate / 1e9) / entry_rate)
                )
                continue
        if len(sent_at) >= window:
            room.clear()
            await room.wait()
            continue
        md = md_cls(
            producer_name=producer_name,
            sequence_id=seq,
            publish_time=time.time_ns() // 1_000_000,
            event_time=now // 1000,
        )
        if per_entry > 1:
            md.num_messages_in_batch = per_entry
        sent_at[seq] = now
        write(proto.send_payload(send_cmd(1, seq, num_messages=per_entry), md, payload))
        seq += 1
        if seq % 16 == 0:
            await asyncio.sleep(0)  # let receipts in
    last_in_window = seq
    if sent_at:
        drained.clear()
        await asyncio.wait_for(drained.wait(), 60)
    flushed = mono()
    await rc.close()
    conn.send(
        (
            "done",
            {
                "pid": os.getpid(),
                "sent_total": seq * per_entry,
                "sent_in_window": (last_in_window - max(0, first_in_window)) * per_entry,
                "publish_latency_ns": latencies.tobytes(),
                "errors": 0,
                "flush_s": (flushed - stop_at) / 1e9,
            },
        )
    )


async def raw_consumer(conn: Pipe, cfg: dict[str, Any]) -> None:
    rc = RawConnection()
    await rc.open(cfg["service_url"])
    topic = cfg["topic"]
    await rc.request(lambda rid: cmds.lookup(topic, rid))
    consumer_ids = list(range(1, cfg["consumers"] + 1))
    for cid in consumer_ids:
        await rc.request(
            lambda rid, cid=cid: cmds.subscribe(
                topic,
                cfg["subscription"],
                cid,
                rid,
                sub_type=SUB_TYPES[cfg["subscription_type"]],
                consumer_name=f"perf-raw-consumer-{cid}",
            )
        )
    queue = cfg["receiver_queue_size"]
    mono = time.monotonic_ns
    e2e = array.array("q")
    state = {"total": 0, "window": 0, "target": 1 << 62}
    received = dict.fromkeys(consumer_ids, 0)
    since_flow = dict.fromkeys(consumer_ids, 0)
    all_received = asyncio.Event()
    cumulative = cfg["ack"] == "cumulative"
    measure_from = stop_at = 0
    proto = rc.proto

    def on_message(msgs: list[PayloadCommand]) -> None:
        now = mono()
        n_total = 0
        positions: dict[int, list[tuple[int, int]]] = {}
        for ev in msgs:
            md = ev.metadata
            assert md is not None
            n = md.num_messages_in_batch if md.HasField("num_messages_in_batch") else 1
            n_total += n
            t = md.event_time * 1000
            if measure_from <= t < stop_at:
                e2e.append(now - t)
            m = ev.base.message
            cid = m.consumer_id
            positions.setdefault(cid, []).append((m.message_id.ledgerId, m.message_id.entryId))
            received[cid] += n
            since_flow[cid] += n
        for cid, pos in positions.items():
            if cumulative:
                rc.write(proto.send(cmds.ack(cid, pos[-1:], cumulative=True)))
            else:
                rc.write(proto.send(cmds.ack(cid, pos)))
            if since_flow[cid] >= queue // 2:
                rc.write(proto.send(cmds.flow(cid, since_flow[cid])))
                since_flow[cid] = 0
        state["total"] += n_total
        if measure_from <= now < stop_at:
            state["window"] += n_total
        if state["total"] >= state["target"]:
            all_received.set()

    rc.on_message = on_message
    for cid in consumer_ids:
        rc.write(proto.send(cmds.flow(cid, queue)))
    conn.send(("ready", os.getpid()))
    loop = asyncio.get_running_loop()
    kind, times = await loop.run_in_executor(None, conn.recv)
    assert kind == "go"
    _start, measure_from, stop_at = times
    kind, expected = await loop.run_in_executor(None, conn.recv)
    assert kind == "expect"
    state["target"] = expected
    if state["total"] >= expected:
        all_received.set()
    try:
        await asyncio.wait_for(all_received.wait(), cfg["drain_seconds"])
    except TimeoutError:
        pass
    await rc.close()
    conn.send(
        (
            "done",
            {
                "pid": os.getpid(),
                "received_total": state["total"],
                "received_in_window": state["window"],
                "e2e_latency_ns": e2e.tobytes(),
                "errors": [],
                "per_consumer": [received[c] for c in consumer_ids],
            },
        )
    )
