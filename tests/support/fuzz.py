"""Hostile-input generators and broker health checks, shared by the ``fuzz`` test tier and
``bench/fuzz_soak.py``. Every generator takes a seeded ``random.Random``: a seed replays a run.

Owns:
- ``FrameFuzzer``: Pulsar protocol frames of three kinds: random bytes, mutated valid frames
  (bit flips, truncation, size fields rewritten), and valid commands in random order with
  absurd ids (producer/consumer/request ids, ledger/entry ids, permits, message counts,
  ack sets, names with NUL, slashes and invalid UTF-8). ``run_connection`` sends one
  connection's worth and drains what comes back.
- ``RestFuzzer``: admin REST requests: random paths (Pulsar route templates with hostile
  segments, and random ones), random methods, random bodies (bad UTF-8, deep nesting,
  4,301-digit integers, wrong types).
- ``BrokerWatch``: a process's RSS and open file descriptors from /proc, and the tracebacks
  its log gained since a mark.
"""

from __future__ import annotations

import json
import os
import pathlib
import random
import socket
import struct
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field

import crc32c

from magnetar.client.protocol.proto import pulsar_api_pb2 as pb
from support.hostile import entry
from support.raw_client import RawClient

T = pb.BaseCommand
U64 = (1 << 64) - 1

# -- values ------------------------------------------------------------------------------------


def absurd_int(rng: random.Random, bits: int = 64) -> int:
    top = (1 << bits) - 1
    return rng.choice(
        [0, 1, 2, 3, 7, top, top - 1, top >> 1, (top >> 1) + 1, 1 << 30, rng.getrandbits(bits)]
    )


def small_or_absurd(rng: random.Random, bits: int = 64) -> int:
    return rng.randrange(4) if rng.random() < 0.6 else absurd_int(rng, bits)


def hostile_name(rng: random.Random) -> str:
    return rng.choice(
        [
            "s",
            "sub",
            "a",
            "a/b",
            "a/b/__delayed_index",
            "__delayed_index",
            "x\x00y",
            "",
            " ",
            "%2F",
            "pulsar.dedup",
            "\u00e9\u6f22",
            "n" * rng.choice([10, 300, 2000]),
        ]
    )


def topic_name(rng: random.Random, namespace: str) -> str:
    if rng.random() < 0.8:
        domain = "persistent" if rng.random() < 0.85 else "non-persistent"
        local = f"fuzz-{rng.randrange(4)}"
        if rng.random() < 0.1:
            local += f"-partition-{rng.randrange(3)}"
        return f"{domain}://{namespace}/{local}"
    return rng.choice(
        [
            "",
            "persistent://",
            "persistent://public",
            f"persistent://{namespace}/",
            f"persistent://{namespace}/a\x00b",
            "bogus://public/default/t",
            "persistent://nobody/none/t",
            f"persistent://{namespace}/" + "t" * 3000,
            f"persistent://{namespace}/sp ace",
        ]
    )


# -- frames ------------------------------------------------------------------------------------


def frame(cmd: pb.BaseCommand, tail: bytes = b"") -> bytes:
    body = cmd.SerializePartialToString()
    return struct.pack(">II", 4 + len(body) + len(tail), len(body)) + body + tail


def entry_tail(rng: random.Random) -> bytes:
    """Headers-and-payload of a SEND, mostly valid, sometimes not."""
    md = pb.MessageMetadata()
    if rng.random() < 0.9:
        md.producer_name = "p"
    md.sequence_id = small_or_absurd(rng)
    md.publish_time = rng.choice([1, int(time.time() * 1000), absurd_int(rng)])
    payload = os.urandom(rng.choice([0, 1, 10, 100]))
    if rng.random() < 0.3:
        n = small_or_absurd(rng, 31)
        md.num_messages_in_batch = n if rng.random() < 0.8 else -n
        single = pb.SingleMessageMetadata(payload_size=0).SerializeToString()
        payload = (struct.pack(">I", len(single)) + single) * rng.randrange(1, 5)
    if rng.random() < 0.15:
        md.uuid = "u"
        md.num_chunks_from_msg = small_or_absurd(rng, 31)
        md.chunk_id = small_or_absurd(rng, 31)
    if rng.random() < 0.15:
        md.deliver_at_time = absurd_int(rng, 63)
    if rng.random() < 0.1:
        md.compression = rng.choice([1, 2, 3, 4])
        md.uncompressed_size = absurd_int(rng, 32)
    if rng.random() < 0.1:
        md.partition_key = hostile_name(rng)
    raw = md.SerializePartialToString()
    body = struct.pack(">I", len(raw)) + raw + payload
    if rng.random() < 0.5:
        crc = crc32c.crc32c(body) if rng.random() < 0.95 else rng.getrandbits(32)
        return b"\x0e\x01" + struct.pack(">I", crc) + body
    return body


class FrameFuzzer:
    def __init__(self, rng: random.Random, namespace: str = "public/default") -> None:
        self.rng = rng
        self.namespace = namespace

    def connect(self) -> bytes:
        return frame(
            T(
                type=T.CONNECT,
                connect=pb.CommandConnect(client_version="fuzz", protocol_version=20),
            )
        )

    def command(self) -> tuple[pb.BaseCommand, bytes]:
        """A valid command (well-formed, required fields set) with hostile values."""
        rng = self.rng
        ids = small_or_absurd
        kind = rng.choice(
            [
                "producer", "send", "send", "send", "subscribe", "flow", "ack", "ack",
                "redeliver", "seek", "last", "stats", "lookup", "pmeta", "topics",
                "close_producer", "close_consumer", "unsubscribe", "ping", "schema",
            ]
        )  # fmt: skip
        if kind == "producer":
            c = pb.CommandProducer(
                topic=topic_name(rng, self.namespace),
                producer_id=ids(rng),
                request_id=ids(rng),
            )
            if rng.random() < 0.2:
                c.producer_access_mode = rng.randrange(4)
            if rng.random() < 0.2:
                c.initial_subscription_name = hostile_name(rng)
            return T(type=T.PRODUCER, producer=c), b""
        if kind == "send":
            s = pb.CommandSend(producer_id=ids(rng), sequence_id=small_or_absurd(rng))
            if rng.random() < 0.3:
                s.num_messages = rng.choice([-1, 0, 1, 2, 1 << 20, (1 << 31) - 1, -(1 << 31)])
            return T(type=T.SEND, send=s), entry_tail(rng)
        if kind == "subscribe":
            c2 = pb.CommandSubscribe(
                topic=topic_name(rng, self.namespace),
                subscription=hostile_name(rng),
                subType=rng.randrange(4),
                consumer_id=ids(rng),
                request_id=ids(rng),
                initialPosition=rng.randrange(2),
            )
            if rng.random() < 0.2:
                c2.start_message_id.ledgerId = absurd_int(rng)
                c2.start_message_id.entryId = absurd_int(rng)
            if rng.random() < 0.1:
                c2.durable = False
            return T(type=T.SUBSCRIBE, subscribe=c2), b""
        if kind == "flow":
            f = pb.CommandFlow(consumer_id=ids(rng), messagePermits=absurd_int(rng, 32))
            return T(type=T.FLOW, flow=f), b""
        if kind == "ack":
            a = pb.CommandAck(consumer_id=ids(rng), ack_type=rng.randrange(2), request_id=ids(rng))
            for _ in range(rng.choice([0, 1, 1, 3, 50])):
                m = a.message_id.add(ledgerId=small_or_absurd(rng), entryId=small_or_absurd(rng))
                if rng.random() < 0.3:
                    m.ack_set.extend(
                        rng.choice([-1, 0, -2, rng.getrandbits(63)])
                        for _ in range(rng.choice([1, 2, 100, 2000]))
                    )
            return T(type=T.ACK, ack=a), b""
        if kind == "redeliver":
            r = pb.CommandRedeliverUnacknowledgedMessages(consumer_id=ids(rng))
            for _ in range(rng.randrange(3)):
                r.message_ids.add(ledgerId=absurd_int(rng), entryId=absurd_int(rng))
            return T(
                type=T.REDELIVER_UNACKNOWLEDGED_MESSAGES, redeliverUnacknowledgedMessages=r
            ), b""
        if kind == "seek":
            sk = pb.CommandSeek(consumer_id=ids(rng), request_id=ids(rng))
            if rng.random() < 0.5:
                sk.message_id.ledgerId = absurd_int(rng)
                sk.message_id.entryId = absurd_int(rng)
            else:
                sk.message_publish_time = absurd_int(rng)
            return T(type=T.SEEK, seek=sk), b""
        if kind == "last":
            g = pb.CommandGetLastMessageId(consumer_id=ids(rng), request_id=ids(rng))
            return T(type=T.GET_LAST_MESSAGE_ID, getLastMessageId=g), b""
        if kind == "stats":
            st = pb.CommandConsumerStats(consumer_id=ids(rng), request_id=ids(rng))
            return T(type=T.CONSUMER_STATS, consumerStats=st), b""
        if kind == "lookup":
            lk = pb.CommandLookupTopic(
                topic=topic_name(rng, self.namespace),
                request_id=ids(rng),
                authoritative=rng.random() < 0.5,
            )
            return T(type=T.LOOKUP, lookupTopic=lk), b""
        if kind == "pmeta":
            pm = pb.CommandPartitionedTopicMetadata(
                topic=topic_name(rng, self.namespace), request_id=ids(rng)
            )
            return T(type=T.PARTITIONED_METADATA, partitionMetadata=pm), b""
        if kind == "topics":
            ns = rng.choice([self.namespace, "public", "", "a/b/c", "x\x00/y", "nobody/none"])
            gt = pb.CommandGetTopicsOfNamespace(request_id=ids(rng), namespace=ns)
            return T(type=T.GET_TOPICS_OF_NAMESPACE, getTopicsOfNamespace=gt), b""
        if kind == "close_producer":
            cp = pb.CommandCloseProducer(producer_id=ids(rng), request_id=ids(rng))
            return T(type=T.CLOSE_PRODUCER, close_producer=cp), b""
        if kind == "close_consumer":
            cc = pb.CommandCloseConsumer(consumer_id=ids(rng), request_id=ids(rng))
            return T(type=T.CLOSE_CONSUMER, close_consumer=cc), b""
        if kind == "unsubscribe":
            u = pb.CommandUnsubscribe(consumer_id=ids(rng), request_id=ids(rng))
            return T(type=T.UNSUBSCRIBE, unsubscribe=u), b""
        if kind == "schema":
            gs = pb.CommandGetSchema(topic=topic_name(rng, self.namespace), request_id=ids(rng))
            return T(type=T.GET_SCHEMA, getSchema=gs), b""
        return T(type=T.PING, ping=pb.CommandPing()), b""

    def mutate(self, data: bytes) -> bytes:
        rng = self.rng
        b = bytearray(data)
        how = rng.randrange(5)
        if how == 0 and b:
            for _ in range(rng.randrange(1, 4)):
                i = rng.randrange(len(b))
                b[i] ^= 1 << rng.randrange(8)
        elif how == 1 and len(b) > 8:
            b = b[: rng.randrange(8, len(b))]
            struct.pack_into(">I", b, 0, len(b) - 4)
        elif how == 2 and len(b) > 8:
            struct.pack_into(">I", b, 4, absurd_int(rng, 32))
        elif how == 3 and len(b) > 8:
            i = rng.randrange(8, len(b))
            b[i:i] = b"\xff\xfe"
            struct.pack_into(">I", b, 0, len(b) - 4)
        else:
            struct.pack_into(">I", b, 0, absurd_int(rng, 32)) if len(b) >= 4 else None
        return bytes(b)

    def frames(self, count: int) -> list[bytes]:
        """One connection's worth: CONNECT, then ``count`` frames, mostly valid commands."""
        rng = self.rng
        out = [self.connect()] if rng.random() < 0.95 else []
        for _ in range(count):
            r = rng.random()
            if r < 0.8:
                out.append(frame(*self.command()))
            elif r < 0.95:
                out.append(self.mutate(frame(*self.command())))
            else:
                out.append(os.urandom(rng.randrange(1, 64)))
        return out


def run_connection(port: int, frames: list[bytes], drain_s: float = 0.05) -> int:
    """Send ``frames`` on one connection and read back what comes within ``drain_s``; the
    number of frames sent (the broker may close the connection on a violation)."""
    sent = 0
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            s.settimeout(drain_s)
            for data in frames:
                try:
                    s.sendall(data)
                except OSError:
                    break
                sent += 1
            deadline = time.monotonic() + drain_s
            while time.monotonic() < deadline:
                try:
                    if not s.recv(1 << 16):
                        break
                except (TimeoutError, OSError):
                    break
    except OSError:
        pass
    return sent


# -- REST --------------------------------------------------------------------------------------

_TEMPLATES = [
    "/admin/v2/tenants",
    "/admin/v2/tenants/{t}",
    "/admin/v2/namespaces/{t}",
    "/admin/v2/namespaces/{t}/{ns}",
    "/admin/v2/namespaces/{t}/{ns}/topics",
    "/admin/v2/namespaces/{t}/{ns}/bundles",
    "/admin/v2/namespaces/{t}/{ns}/{policy}",
    "/admin/v2/namespaces/{t}/{ns}/backlogQuota",
    "/admin/v2/namespaces/{t}/{ns}/backlogQuotaMap",
    "/admin/v2/{d}/{t}/{ns}",
    "/admin/v2/{d}/{t}/{ns}/partitioned",
    "/admin/v2/{d}/{t}/{ns}/{topic}",
    "/admin/v2/{d}/{t}/{ns}/{topic}/partitions",
    "/admin/v2/{d}/{t}/{ns}/{topic}/subscriptions",
    "/admin/v2/{d}/{t}/{ns}/{topic}/subscription/{sub}",
    "/admin/v2/{d}/{t}/{ns}/{topic}/stats",
    "/admin/v2/{d}/{t}/{ns}/{topic}/unload",
    "/admin/v2/{d}/{t}/{ns}/{topic}/compaction",
    "/admin/v2/{d}/{t}/{ns}/{topic}/{policy}",
    "/lookup/v2/topic/{d}/{t}/{ns}/{topic}",
    "/admin/v2/brokers/health",
    "/admin/v2/clusters",
    "/metrics",
]
_POLICIES = [
    "messageTTL", "retention", "maxProducersPerTopic", "maxConsumersPerTopic",
    "maxUnackedMessagesPerConsumer", "deduplication", "compactionThreshold",
    "delayedDelivery", "publishRate", "dispatchRate", "subscriptionDispatchRate", "nope",
]  # fmt: skip


@dataclass
class RestFuzzer:
    rng: random.Random
    tenants: list[str] = field(default_factory=lambda: ["fuzz"])

    def segment(self, good: list[str]) -> str:
        rng = self.rng
        r = rng.random()
        if r < 0.75:
            return rng.choice(good)
        return rng.choice(
            [
                "%00", "a%00b", "%FF", "..", "%2F", "sp%20ace", "x" * 2000, "%E9%6F",
                "\u00e9", "-", "=", "a:b", "%25", "%",
            ]
        )  # fmt: skip

    def path(self) -> str:
        rng = self.rng
        if rng.random() < 0.05:
            return "/" + "/".join(
                urllib.parse.quote(os.urandom(rng.randrange(1, 6)).hex()) for _ in range(3)
            )
        tpl = rng.choice(_TEMPLATES)
        return tpl.format(
            t=self.segment([*self.tenants, "public"]),
            ns=self.segment(["default", "ns1", "ns2"]),
            d=self.segment(["persistent", "non-persistent"]),
            topic=self.segment(["t0", "t1", "t2", "t1-partition-0"]),
            sub=self.segment(["s", "a%2Fb"]),
            policy=rng.choice(_POLICIES),
        )

    def body(self) -> bytes:
        rng = self.rng
        r = rng.randrange(14)
        if r == 0:
            return b""
        if r == 1:
            return os.urandom(rng.randrange(1, 64))
        if r == 2:
            return b"[" * 5000 + b"]" * 5000
        if r == 3:
            return b"9" * 4301
        if r == 4:
            return b'{"a": "\xff\xfe"}'
        if r == 5:
            return json.dumps(rng.choice([1, 0, -1, 3, 10**20, 2**63, "3", None, True])).encode()
        if r == 6:
            return json.dumps({"bundles": {"numBundles": absurd_int(rng, 33)}}).encode()
        if r == 7:
            return json.dumps({"adminRoles": rng.choice([5, "x", [1], None, ["r"]])}).encode()
        if r == 8:
            return json.dumps(
                {"retention_policies": {"retentionTimeInMinutes": rng.choice(["abc", 5, -2])}}
            ).encode()
        if r == 9:
            return json.dumps(
                {
                    "limitSize": absurd_int(rng, 63),
                    "limitTime": rng.choice([1, "x"]),
                    "policy": rng.choice(["producer_request_hold", "zzz", 1]),
                }
            ).encode()
        if r == 10:
            return json.dumps(
                {"retentionTimeInMinutes": rng.choice([1, -1, "x"]), "retentionSizeInMB": 1}
            ).encode()
        if r == 11:
            return json.dumps(
                {"publishThrottlingRateInMsg": rng.choice([1, "x", None]), "ratePeriodInSecond": 0}
            ).encode()
        if r == 12:
            return b'{"a":' * 100 + b"1" + b"}" * 100
        return json.dumps(
            {"active": rng.choice([True, "x"]), "tickTime": absurd_int(rng, 40)}
        ).encode()

    def request(self) -> tuple[str, str, bytes]:
        rng = self.rng
        method = rng.choice(["GET", "GET", "PUT", "POST", "DELETE", "PATCH", "HEAD"])
        return method, self.path(), self.body() if method in ("PUT", "POST") else b""


def http_request(
    host: str, port: int, method: str, path: str, body: bytes, *, timeout: float = 30
) -> int:
    """One raw HTTP/1.1 request on a fresh connection; the status (0 if none came)."""
    head = (
        f"{method} {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode("utf-8", "surrogateescape")
    with socket.create_connection((host, port), timeout=timeout) as s:
        s.sendall(head + body)
        data = b""
        while b"\r\n" not in data:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
    parts = data.split(b" ", 2)
    return int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0


# -- probing and watching the broker


def round_trip(port: int, topic: str) -> None:
    """Produce one message and consume it: the broker serves."""
    c = RawClient(port)
    c.sock.settimeout(30)
    c.connect()
    c.send(
        T(type=T.PRODUCER, producer=pb.CommandProducer(topic=topic, producer_id=1, request_id=1))
    )
    assert c.recv().type == T.PRODUCER_SUCCESS
    c.send(
        T(
            type=T.SUBSCRIBE,
            subscribe=pb.CommandSubscribe(
                topic=topic,
                subscription="probe",
                subType=pb.CommandSubscribe.Shared,
                consumer_id=1,
                request_id=2,
                initialPosition=pb.CommandSubscribe.Latest,
            ),
        )
    )
    assert c.recv().type == T.SUCCESS
    c.send(T(type=T.FLOW, flow=pb.CommandFlow(consumer_id=1, messagePermits=10)))
    c.send(T(type=T.SEND, send=pb.CommandSend(producer_id=1, sequence_id=0)), entry(b"probe"))
    got = c.recv()
    while got.type != T.MESSAGE:
        assert got.type in (T.SEND_RECEIPT, T.PING, T.PONG), got
        got = c.recv()
    assert c.last_payload.endswith(b"probe")
    c.close()


@dataclass(frozen=True, slots=True)
class Usage:
    rss_bytes: int
    fds: int


class BrokerWatch:
    """RSS and fds of a broker process, and the tracebacks its log gained since ``mark()``."""

    def __init__(self, pid: int, log_path: pathlib.Path) -> None:
        self.pid = pid
        self.log_path = log_path
        self._offset = 0

    def usage(self) -> Usage:
        rss = 0
        for line in pathlib.Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1]) * 1024
        return Usage(rss, len(os.listdir(f"/proc/{self.pid}/fd")))

    def mark(self) -> None:
        self._offset = self.log_path.stat().st_size

    def log_since_mark(self) -> str:
        with open(self.log_path, "rb") as f:
            f.seek(self._offset)
            return f.read().decode("utf-8", "replace")

    def tracebacks_since_mark(self) -> list[str]:
        """Log lines (with context) of tracebacks and ERROR records since ``mark()``."""
        lines = self.log_since_mark().splitlines()
        hits = []
        for i, line in enumerate(lines):
            if "level=ERROR" in line or "level=CRITICAL" in line:
                hits.append(line[:3000])
            elif "Traceback (most recent call last)" in line:
                hits.append("\n".join(lines[i : i + 25]))
        return hits


def chunks(items: list[bytes], size: int) -> Iterator[list[bytes]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


__all__ = [
    "BrokerWatch",
    "FrameFuzzer",
    "RestFuzzer",
    "Usage",
    "absurd_int",
    "entry_tail",
    "frame",
    "http_request",
    "round_trip",
    "run_connection",
]
