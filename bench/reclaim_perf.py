"""TTL and retention reclaiming space: bytes on a real bookie's disk before, after, and when.

Issue 5 §4/§6: "Space is reclaimed promptly once ledgers fall outside retention (bytes on the
bookies' disks go down)". A small cluster in this process's reach: a ZooKeeper server
(Debian's jar), one bookie *process* on a temporary data dir, and a broker (the real
``BrokerService`` on its own event-loop thread, with its admin REST API on a free port:
policies are set over HTTP with Pulsar's paths). The official ``pulsar-client`` publishes
``--mb`` MB of ``--message-bytes`` messages (no batching: one entry each) to a fresh topic
with a durable subscription, then one scenario runs:

- ``ttl``: nobody consumes. Once the data is flushed to the bookie's entry logs, the topic's
  ``messageTTL`` policy is set (topic level, ``--ttl-s``); the broker's expiry check (every
  ``--ttl-check-s``) moves the cursor past the expired messages; the managed ledger trims
  the ledgers behind it; the bookie's GC (every ``--gc-interval-s``) drops them and deletes
  (or compacts) their entry logs.
- ``retention``: topic ``retention`` policy ``--retention-minutes``/``--retention-mb`` set
  first; a consumer receives and acknowledges everything; trimming and GC follow.

Printed per scenario: disk bytes of the bookie (entry logs, index, journal; allocated blocks
as ``du`` counts them, found with ``os.scandir``) at the start (peak, flushed), then
``t_*`` seconds from the policy change (TTL) or the last acknowledgement (retention) until:
the backlog is 0, the topic is down to its current ledger, the entry logs hold at most
``--reclaimed-fraction`` of the peak; and the bytes at the end (``--settle-s`` after that,
or at ``--timeout-s``). The managed ledger never trims its *current* ledger and the bookie
never collects its *current* entry log, so what remains is about one ledger
(``--entries-per-ledger`` x message size) plus one entry log (``--entry-log-mb``).
``--defaults`` keeps the broker's and bookie's default sizes (50,000 entries per ledger,
10 min minimum ledger age, 512 MB entry logs, 60 s GC) to show what a default deployment
reclaims (nothing below those sizes: see the report). The last line is one JSON object.

    .venv/bin/python bench/reclaim_perf.py --mb 64
    .venv/bin/python bench/reclaim_perf.py --scenario ttl --mb 8 --defaults --timeout-s 90
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shlex
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import loadavg  # noqa: E402
from support.bookies import BookieFactory, BookieProcess  # noqa: E402
from support.broker import InProcessBroker  # noqa: E402
from support.ledger_cluster import chroot_url, wait_registered  # noqa: E402
from support.zookeeper import ZooKeeperServer  # noqa: E402

SUBSCRIPTION = "reclaim-sub"
POLL_S = 0.1  # sampling interval of the disk / ledger / backlog figures


# ------------------------------------------------------------------------------- measuring


def tree_bytes(path: pathlib.Path) -> int:
    """Allocated bytes of every file under ``path`` (``du``: st_blocks * 512)."""
    total = 0
    stack = [str(path)]
    while stack:
        try:
            it = os.scandir(stack.pop())
        except OSError:
            continue
        with it:
            for e in it:
                try:
                    if e.is_dir(follow_symlinks=False):
                        stack.append(e.path)
                    elif e.is_file(follow_symlinks=False):
                        total += e.stat(follow_symlinks=False).st_blocks * 512
                except OSError:
                    continue
    return total


def bookie_disk(bookie: BookieProcess) -> dict[str, int]:
    """Bytes on the bookie's disk: entry logs, location index (RocksDB), journal, total."""
    ledgers = bookie.data_dir / "ledgers"
    logs = 0
    try:
        with os.scandir(ledgers) as it:
            for e in it:
                if e.name.endswith(".log") and e.is_file():
                    logs += e.stat().st_blocks * 512
    except OSError:
        pass
    index = tree_bytes(ledgers / "index")
    journal = tree_bytes(bookie.data_dir / "journal")
    return {
        "entry_logs": logs,
        "index": index,
        "journal": journal,
        "total": tree_bytes(bookie.data_dir),
    }


class Admin:
    """The broker's admin REST API on a free port, served on the broker's loop."""

    def __init__(self, broker: InProcessBroker) -> None:
        from aiohttp import web

        from magnetar.broker.admin.http_api import AdminApi

        service = broker.service
        assert service is not None
        self.broker = broker

        async def start() -> tuple[Any, int]:
            runner = web.AppRunner(AdminApi.of_service(service).app())
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            return runner, int(runner.addresses[0][1])

        self.runner, port = broker.call(start)
        self.url = f"http://127.0.0.1:{port}"

    def close(self) -> None:
        self.broker.call(self.runner.cleanup)

    def request(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method)
        req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                raw = resp.read()
                return resp.status, json.loads(raw) if raw else None
        except urllib.error.HTTPError as exc:
            raw = exc.read()
            return exc.code, json.loads(raw) if raw else None

    def post(self, path: str, body: Any) -> None:
        status, got = self.request("POST", path, body)
        if status not in (200, 204):
            raise RuntimeError(f"POST {path} -> {status} {got}")


def wait_until(pred: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not pred():
        if time.monotonic() > deadline:
            raise TimeoutError(f"not reached within {timeout_s} s: {what}")
        time.sleep(0.05)  # polling a condition, bounded by the deadline


class Cluster:
    def __init__(self, args: argparse.Namespace, base: pathlib.Path) -> None:
        self.args = args
        self.base = base
        self.zk: ZooKeeperServer | None = None
        self.bookies: BookieFactory | None = None
        self.bookie: BookieProcess | None = None
        self.broker: InProcessBroker | None = None
        self.admin: Admin | None = None

    def start(self) -> Cluster:
        a = self.args
        self.zk = ZooKeeperServer(data_dir=self.base / "zk")
        self.zk.start()
        url = chroot_url(self.zk.url)
        bookie_args = ["--log-level", "INFO"]
        if not a.defaults:
            cfg = self.base / "bookie.yaml"
            cfg.write_text(
                "engine:\n"
                f"  entry_log_size_max: {int(a.entry_log_mb * (1 << 20))}\n"
                f"  checkpoint_interval_ms: {a.checkpoint_ms}\n"
                f"  journal_file_size_max: {int(a.journal_mb * (1 << 20))}\n"
            )
            bookie_args += ["--gc-interval-s", str(a.gc_interval_s), "--config", str(cfg)]
        self.bookies = BookieFactory(self.base / "bookies")
        self.bookie = self.bookies.start(metadata=url, extra_args=bookie_args)
        ml: dict[str, Any] = {"ensemble_size": 1, "write_quorum": 1, "ack_quorum": 1}
        config: dict[str, Any] = {}
        if not a.defaults:
            ml.update(
                min_ledger_rollover_time_ms=0,
                max_entries_per_ledger=a.entries_per_ledger,
            )
            # BrokerConfig counts the expiry check in whole minutes (a broker.conf file
            # cannot say less than 1): the in-process broker takes a fraction directly.
            config["message_expiry_check_interval_in_minutes"] = a.ttl_check_s / 60.0
        else:
            ml.update(min_ledger_rollover_time_ms=10 * 60_000, max_entries_per_ledger=50_000)
        self.broker = InProcessBroker(metadata_url=url, managed_ledger=ml, **config).start()
        service = self.broker.service
        assert service is not None
        self.broker.call(lambda: wait_registered(service.store, 1), timeout=35)
        self.admin = Admin(self.broker)
        return self

    def close(self) -> None:
        if self.admin is not None:
            try:
                self.admin.close()
            except Exception:
                pass
        if self.broker is not None:
            self.broker.stop()
        if self.bookies is not None:
            self.bookies.close()
        if self.zk is not None:
            self.zk.close()

    # -- figures
    def ledgers(self, topic: str) -> int:
        broker = self.broker
        assert broker is not None

        async def get() -> int:
            assert broker.service is not None
            t = broker.service.topics.get(topic)
            ml = getattr(getattr(t, "ledger", None), "ml", None)
            return len(ml.ledgers.ids) if ml is not None else -1

        return int(broker.call(get))

    def backlog(self, topic: str) -> int:
        assert self.admin is not None
        local = topic.split("://", 1)[1]
        status, stats = self.admin.request("GET", f"/admin/v2/persistent/{local}/stats")
        if status != 200:
            return -1
        return int(stats["subscriptions"][SUBSCRIPTION]["msgBacklog"])

    def applied(self, topic: str, pred: Callable[[Any], bool]) -> None:
        broker = self.broker
        assert broker is not None

        async def get() -> Any:
            assert broker.service is not None
            state = broker.service.policies._states.get(topic)
            return None if state is None else state.policies

        wait_until(lambda: (p := broker.call(get)) is not None and pred(p), 10, "policy applied")

    def ledger_state(self, topic: str) -> dict[str, Any]:
        """Diagnosis: the managed ledger's ledgers and each cursor's mark-delete position."""
        broker = self.broker
        assert broker is not None

        async def get() -> dict[str, Any]:
            assert broker.service is not None
            t = broker.service.topics.get(topic)
            ml = getattr(getattr(t, "ledger", None), "ml", None)
            if ml is None:
                return {}
            return {
                "ledger_ids": list(ml.ledgers.ids),
                "last_confirmed": str(ml.last_confirmed),
                "mark_delete": {
                    name: str(c.mark_delete_position) for name, c in ml.cursors.items()
                },
            }

        return dict(broker.call(get))

    def gc_lines(self) -> list[str]:
        assert self.bookie is not None
        return [ln for ln in self.bookie.log_text().splitlines() if "gc round done" in ln]


# ------------------------------------------------------------------------------- scenarios


def publish(client: Any, topic: str, total_bytes: int, size: int) -> tuple[int, float]:
    producer = client.create_producer(
        topic, batching_enabled=False, max_pending_messages=2000, block_if_queue_full=True
    )
    payload = os.urandom(size)
    n = max(1, total_bytes // size)
    t0 = time.monotonic()
    for _ in range(n):
        producer.send_async(payload, None)
    producer.flush()
    producer.close()
    return n, time.monotonic() - t0


def run_scenario(
    name: str, cluster: Cluster, client: Any, args: argparse.Namespace
) -> dict[str, Any]:
    import pulsar

    assert cluster.admin is not None and cluster.bookie is not None
    topic = f"persistent://public/default/reclaim-{name}-{uuid.uuid4().hex[:8]}"
    local = topic.split("://", 1)[1]
    print(f"\n=== {name}: {topic}", flush=True)
    consumer = client.subscribe(
        topic, SUBSCRIPTION, consumer_type=pulsar.ConsumerType.Shared, receiver_queue_size=1000
    )
    if name == "retention":
        body = {
            "retentionTimeInMinutes": args.retention_minutes,
            "retentionSizeInMB": args.retention_mb,
        }
        cluster.admin.post(f"/admin/v2/persistent/{local}/retention", body)
        want_ms = args.retention_minutes * 60_000
        cluster.applied(topic, lambda p: p.retention_time_ms == want_ms)
    else:
        consumer.close()  # the durable subscription stays, with nobody consuming
    disk0 = bookie_disk(cluster.bookie)
    n, publish_s = publish(client, topic, int(args.mb * (1 << 20)), args.message_bytes)
    published = n * args.message_bytes
    print(f"published {n} messages ({published / 1e6:.1f} MB) in {publish_s:.1f} s", flush=True)
    # the peak: what the journal handed to the entry logs (checkpoint / cache flush)
    try:
        wait_until(
            lambda: (
                bookie_disk(cluster.bookie)["entry_logs"] - disk0["entry_logs"]  # type: ignore[arg-type]
                >= 0.9 * published
            ),
            args.flush_timeout_s,
            "entry logs hold the data",
        )
        flushed = True
    except TimeoutError:
        flushed = False  # (--defaults: the write cache may hold it longer)
    peak = bookie_disk(cluster.bookie)
    ledgers_peak = cluster.ledgers(topic)
    print(
        f"peak on the bookie's disk: {fmt(peak)}; {ledgers_peak} ledgers"
        + ("" if flushed else " (entry logs below 90% of the data: not flushed yet)"),
        flush=True,
    )

    t0 = time.monotonic()
    consume_s = None
    if name == "ttl":
        cluster.admin.post(f"/admin/v2/persistent/{local}/messageTTL", args.ttl_s)
        cluster.applied(topic, lambda p: p.message_ttl_s == args.ttl_s)
    else:
        got = 0
        while got < n:
            consumer.acknowledge(consumer.receive(10_000))
            got += 1
        consume_s = time.monotonic() - t0
        t0 = time.monotonic()  # times count from the last acknowledgement
        print(f"received and acknowledged {got} messages in {consume_s:.1f} s", flush=True)

    marks: dict[str, float | None] = {"backlog_zero": None, "one_ledger": None, "reclaimed": None}
    threshold = args.reclaimed_fraction * peak["entry_logs"]
    samples: list[tuple[float, int, int, int]] = []
    end_at = t0 + args.timeout_s
    settle_until: float | None = None
    while True:
        now = time.monotonic()
        disk = bookie_disk(cluster.bookie)
        ledgers = cluster.ledgers(topic)
        backlog = cluster.backlog(topic)
        t = round(now - t0, 2)
        samples.append((t, disk["entry_logs"], ledgers, backlog))
        if marks["backlog_zero"] is None and backlog == 0:
            marks["backlog_zero"] = t
        if marks["one_ledger"] is None and 0 < ledgers <= 1 < ledgers_peak:
            marks["one_ledger"] = t
        if marks["reclaimed"] is None and disk["entry_logs"] <= threshold:
            marks["reclaimed"] = t
            settle_until = now + args.settle_s
        if settle_until is not None and now >= settle_until:
            break
        if now >= end_at:
            break
        time.sleep(POLL_S)  # sampling interval of the timeline
    end = bookie_disk(cluster.bookie)
    if name == "retention":
        consumer.close()
    gc = cluster.gc_lines()
    result: dict[str, Any] = {
        "topic": topic,
        "messages": n,
        "published_bytes": published,
        "publish_s": round(publish_s, 2),
        "consume_s": round(consume_s, 2) if consume_s is not None else None,
        "flushed_before_policy": flushed,
        "peak": peak,
        "end": end,
        "reclaimed_bytes": peak["entry_logs"] - end["entry_logs"],
        "reclaimed_pct": round(100 * (1 - end["entry_logs"] / peak["entry_logs"]), 1)
        if peak["entry_logs"]
        else None,
        "ledgers_peak": ledgers_peak,
        "ledgers_end": samples[-1][2],
        "t_backlog_zero_s": marks["backlog_zero"],
        "t_one_ledger_s": marks["one_ledger"],
        "t_reclaimed_s": marks["reclaimed"],
        "timed_out": marks["reclaimed"] is None,
        "gc_rounds_logged": len(gc),
        "last_gc": gc[-1].split("result=", 1)[-1].strip('"')[:300] if gc else None,
        "timeline": thin(samples, 20),
        "ledger_state_end": cluster.ledger_state(topic),
    }
    print(
        f"after: {fmt(end)}; ledgers {result['ledgers_end']}; "
        f"t(backlog 0) {marks['backlog_zero']} s, t(one ledger) {marks['one_ledger']} s, "
        f"t(entry logs <= {args.reclaimed_fraction:.0%} of peak) {marks['reclaimed']} s "
        f"({'from the TTL policy' if name == 'ttl' else 'from the last ack'}); "
        f"reclaimed {result['reclaimed_pct']}% of the entry-log bytes",
        flush=True,
    )
    if marks["reclaimed"] is None:
        print(f"NOT reclaimed within {args.timeout_s} s: {result['ledger_state_end']}", flush=True)
    if gc:
        print(f"bookie GC rounds logged: {len(gc)}; last: {result['last_gc']}", flush=True)
    return result


def thin(samples: list[tuple[float, int, int, int]], keep: int) -> list[list[float | int]]:
    """At most ``keep`` samples (evenly spread, last included) of (t, log bytes, ledgers,
    backlog) for the JSON report."""
    if len(samples) <= keep:
        return [list(s) for s in samples]
    step = (len(samples) - 1) / (keep - 1)
    return [list(samples[round(i * step)]) for i in range(keep)]


def fmt(disk: dict[str, int]) -> str:
    return ", ".join(f"{k} {v / 1e6:.2f} MB" for k, v in disk.items())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n")[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--scenario", choices=["ttl", "retention", "both"], default="both")
    p.add_argument("--mb", type=float, default=32.0, help="MB published per scenario")
    p.add_argument("--message-bytes", type=int, default=4096)
    p.add_argument("--ttl-s", type=int, default=1, help="messageTTL policy (seconds)")
    p.add_argument("--ttl-check-s", type=float, default=1.0, help="broker expiry check interval")
    p.add_argument("--retention-minutes", type=int, default=0)
    p.add_argument("--retention-mb", type=int, default=0)
    p.add_argument("--entries-per-ledger", type=int, default=500, help="ledger rollover")
    p.add_argument("--entry-log-mb", type=float, default=1.0, help="bookie entry log size")
    p.add_argument("--journal-mb", type=float, default=4.0, help="bookie journal file size")
    p.add_argument("--gc-interval-s", type=float, default=1.0, help="bookie GC interval")
    p.add_argument("--checkpoint-ms", type=int, default=500, help="bookie checkpoint interval")
    p.add_argument(
        "--defaults",
        action="store_true",
        help="default rollover / entry-log / GC / expiry-check settings (ignores the above)",
    )
    p.add_argument("--reclaimed-fraction", type=float, default=0.1)
    p.add_argument("--timeout-s", type=float, default=60.0, help="max wait per scenario")
    p.add_argument("--settle-s", type=float, default=2.0, help="keep sampling after reclaim")
    p.add_argument("--flush-timeout-s", type=float, default=20.0)
    args = p.parse_args(argv)
    print(f"# command: {shlex.join([sys.executable, *sys.argv])}", flush=True)
    load_start = loadavg()
    print(f"# load average at start: {load_start} on {os.cpu_count()} cores", flush=True)
    import pulsar

    scenarios = ["ttl", "retention"] if args.scenario == "both" else [args.scenario]
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="reclaim-perf-") as tmp:
        cluster = Cluster(args, pathlib.Path(tmp))
        try:
            cluster.start()
            assert cluster.broker is not None
            client = pulsar.Client(
                cluster.broker.service_url,
                operation_timeout_seconds=30,
                logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
            )
            try:
                for name in scenarios:
                    results[name] = run_scenario(name, cluster, client, args)
            finally:
                client.close()
        finally:
            cluster.close()
    summary: dict[str, Any] = {
        "scenarios": results,
        "mb": args.mb,
        "message_bytes": args.message_bytes,
        "defaults": args.defaults,
        "ttl_s": args.ttl_s,
        "ttl_check_s": None if args.defaults else args.ttl_check_s,
        "retention_minutes": args.retention_minutes,
        "retention_mb": args.retention_mb,
        "entries_per_ledger": 50_000 if args.defaults else args.entries_per_ledger,
        "entry_log_mb": 512 if args.defaults else args.entry_log_mb,
        "gc_interval_s": 60 if args.defaults else args.gc_interval_s,
        "journal_mb": 256 if args.defaults else args.journal_mb,
        "reclaimed_fraction": args.reclaimed_fraction,
        "loadavg_start": load_start,
        "loadavg_end": loadavg(),
    }
    print(json.dumps(summary), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
