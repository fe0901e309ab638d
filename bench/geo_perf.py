"""Geo-replication: lag at a steady publish rate, and the catch-up of a backlog.

Starts two ``magnetar standalone`` clusters, ``east`` and ``west`` (each its own metadata,
registered with each other), and a namespace replicated to both. Everything runs on this
machine: both clusters, the publisher and the consumer.

1. Lag: the official client publishes ``--rate`` messages per second (batched) in east for
   ``--seconds``; a consumer in west receives them. Each message carries its send time; the
   replication lag of a message is its arrival in west minus that (one clock): p50, p99 and
   max. In the same run: the publish rate achieved in east and the arrival rate in west
   (``replication_vs_local``, 1.0 = replication keeps up with publishing).
2. Catch-up: west is stopped, ``--backlog`` messages (batched) are published in east (its
   backlog for west is visible in east's stats), west starts again on its data, and the
   time from west being healthy again until it stored them all gives the catch-up rate
   (messages per second, counted by west's ``msgInCounter`` of the topic since it loaded it
   again: duplicates are not stored, so exactly ``--backlog`` means once each);
   ``reconnect_s`` is the part spent before the first one arrived (the replicator's
   reconnection back-off) and ``catch_up_transfer_rate`` the rate after it.
Checks that every message arrived once (the lag phase by the consumer; the catch-up by the
counters). The last line is one JSON object; the first says the command.

    .venv/bin/python bench/geo_perf.py --rate 5000 --seconds 20 --backlog 1000000
    .venv/bin/python bench/geo_perf.py --rate 500 --seconds 2 --backlog 5000     # smoke
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import pulsar
from _common import StandaloneServer, loadavg, percentile

NAMESPACE = "geo/bench"


def _http(base: str, method: str, path: str, body: Any = None) -> Any:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(base + path, data=data, method=method)
    req.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(req, timeout=30) as resp:
        raw = resp.read()
        return json.loads(raw) if raw else None


def _setup(clusters: dict[str, StandaloneServer]) -> None:
    for name, server in clusters.items():
        for other_name, other in clusters.items():
            if other_name != name:
                _http(
                    server.web_url,
                    "PUT",
                    f"/admin/v2/clusters/{other_name}",
                    {"serviceUrl": other.web_url, "brokerServiceUrl": other.service_url},
                )
        _http(
            server.web_url,
            "PUT",
            "/admin/v2/tenants/geo",
            {"adminRoles": [], "allowedClusters": sorted(clusters)},
        )
        _http(server.web_url, "PUT", f"/admin/v2/namespaces/{NAMESPACE}")
        _http(
            server.web_url,
            "POST",
            f"/admin/v2/namespaces/{NAMESPACE}/replication",
            sorted(clusters),
        )


def _stats(server: StandaloneServer, topic: str) -> dict[str, Any]:
    """The topic's stats ({} while the cluster does not have it loaded: just restarted)."""
    try:
        path = f"/admin/v2/persistent/{NAMESPACE}/{topic}/stats"
        return dict(_http(server.web_url, "GET", path))
    except urllib.error.HTTPError as exc:
        if exc.code in (404, 503):
            return {}
        raise


def _wait(pred: Any, timeout_s: float, what: str) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = pred()
        if got:
            return got
        time.sleep(0.05)  # polling pace of a bounded wait
    raise TimeoutError(what)


def _lag(
    east: StandaloneServer, west: StandaloneServer, rate: int, seconds: float
) -> dict[str, Any]:
    topic = f"persistent://{NAMESPACE}/lag"
    ce = pulsar.Client(east.service_url, operation_timeout_seconds=60)
    cw = pulsar.Client(west.service_url, operation_timeout_seconds=60)
    try:
        consumer = cw.subscribe(
            topic,
            "bench",
            initial_position=pulsar.InitialPosition.Earliest,
            receiver_queue_size=5000,
        )
        producer = ce.create_producer(
            topic,
            batching_enabled=True,
            batching_max_publish_delay_ms=1,
            batching_max_messages=1000,
            max_pending_messages=50_000,
            block_if_queue_full=True,
        )
        total = int(rate * seconds)
        lags_ms: list[float] = []
        seen: set[int] = set()
        duplicates = 0
        arrivals: list[float] = []

        def consume() -> None:
            nonlocal duplicates
            while len(seen) < total:
                msg = consumer.receive(60_000)
                now = time.time_ns()
                data = msg.data()
                n = int.from_bytes(data[:8], "big")
                sent_ns = int.from_bytes(data[8:16], "big")
                if n in seen:
                    duplicates += 1
                seen.add(n)
                lags_ms.append((now - sent_ns) / 1e6)
                arrivals.append(time.monotonic())
                consumer.acknowledge_cumulative(msg)

        # warm-up: the topic loaded in both clusters and its replicator connected, so the
        # lag measured is the steady state's
        producer.send(b"\xff" * 8 + time.time_ns().to_bytes(8, "big"))
        consumer.acknowledge(consumer.receive(60_000))
        reader = threading.Thread(target=consume, daemon=True)
        reader.start()
        pad = b"x" * 84  # 100-byte messages
        start = time.monotonic()
        for i in range(total):
            due = start + i / rate
            delay = due - time.monotonic()
            if delay > 0:
                time.sleep(delay)  # the steady publish rate's pacing
            producer.send_async(
                i.to_bytes(8, "big") + time.time_ns().to_bytes(8, "big") + pad, None
            )
        producer.flush()
        published_s = time.monotonic() - start
        reader.join(120)
        if len(seen) < total:
            raise RuntimeError(f"west received {len(seen)} of {total}")
        lags_ms.sort()
        arrived_s = arrivals[-1] - start if arrivals else 0.0
        local_rate = total / published_s
        replicated_rate = total / arrived_s if arrived_s > 0 else 0.0
        return {
            "messages": total,
            "target_rate": rate,
            "publish_rate": round(local_rate, 1),
            "replication_rate": round(replicated_rate, 1),
            "replication_vs_local": round(replicated_rate / local_rate, 3) if local_rate else 0,
            "lag_p50_ms": round(percentile(lags_ms, 0.50), 2),
            "lag_p99_ms": round(percentile(lags_ms, 0.99), 2),
            "lag_max_ms": round(lags_ms[-1], 2),
            "duplicates": duplicates,
        }
    finally:
        ce.close()
        cw.close()


def _catch_up(east: StandaloneServer, west: StandaloneServer, backlog: int) -> dict[str, Any]:
    name = "catch-up"
    topic = f"persistent://{NAMESPACE}/{name}"
    ce = pulsar.Client(east.service_url, operation_timeout_seconds=60)
    try:
        producer = ce.create_producer(
            topic,
            batching_enabled=True,
            batching_max_messages=1000,
            batching_max_publish_delay_ms=5,
            max_pending_messages=100_000,
            block_if_queue_full=True,
        )
        producer.send(b"first")  # the topic and its replicator exist in both clusters
        _wait(lambda: _stats(west, name).get("msgInCounter", 0) >= 1, 60, "west has the topic")
        west.stop()  # its counters start again at 0 when it loads the topic again
        payload = b"y" * 100
        start = time.monotonic()
        for _ in range(backlog):
            producer.send_async(payload, None)
        producer.flush()
        publish_s = time.monotonic() - start
        kept = _stats(east, name)["replication"]["west"]["replicationBacklog"]
        west.start()
        back = time.monotonic()
        timeout_s = max(120.0, backlog / 5_000)
        _wait(lambda: _stats(west, name).get("msgInCounter", 0) > 0, timeout_s, "reconnected")
        first = time.monotonic()
        _wait(lambda: _stats(west, name).get("msgInCounter", 0) >= backlog, timeout_s, "caught up")
        caught_up_s = time.monotonic() - back
        transfer_s = time.monotonic() - first
        stored = int(_stats(west, name)["msgInCounter"])
        return {
            "backlog_messages": backlog,
            "backlog_entries_in_east": kept,
            "publish_rate_while_down": round(backlog / publish_s, 1),
            "catch_up_s": round(caught_up_s, 2),
            "catch_up_rate": round(backlog / caught_up_s, 1) if caught_up_s > 0 else 0,
            "reconnect_s": round(first - back, 2),
            "catch_up_transfer_rate": round(backlog / transfer_s, 1) if transfer_s > 0 else 0,
            "catch_up_stored": stored,
            "catch_up_exactly_once": stored == backlog,
        }
    finally:
        ce.close()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rate", type=int, default=5_000, help="messages per second published")
    p.add_argument("--seconds", type=float, default=20.0, help="length of the lag phase")
    p.add_argument("--backlog", type=int, default=1_000_000, help="messages to catch up")
    args = p.parse_args()
    print("command:", shlex.join([sys.executable, *sys.argv]), flush=True)
    base = tempfile.mkdtemp(prefix="magnetar-geo-perf-")
    clusters = {
        name: StandaloneServer(os.path.join(base, name), extra_args=["--cluster-name", name])
        for name in ("east", "west")
    }
    try:
        for server in clusters.values():
            server.start()
        _setup(clusters)
        east, west = clusters["east"], clusters["west"]
        result: dict[str, Any] = {"bench": "geo_perf", "loadavg_before": loadavg()}
        result.update(_lag(east, west, args.rate, args.seconds))
        result.update(_catch_up(east, west, args.backlog))
        result["loadavg_after"] = loadavg()
        print(json.dumps(result), flush=True)
        return 0 if result["duplicates"] == 0 and result["catch_up_exactly_once"] else 1
    finally:
        for server in clusters.values():
            server.stop()
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
