"""Scale-out: publish throughput with 1, 2 and 3 brokers, and the CPU each broker process
spends per message, so that what a machine with more cores would give can be read off.

For each broker count of ``--brokers`` (default ``1,2,3``): a real cluster (ZooKeeper from
Debian's jar, ``--bookies`` bookie processes, that many ``magnetar broker`` processes), a
namespace of ``--bundles`` bundles, ``--topics`` topics whose bundles the load-manager leader
spreads over the brokers, one official-client producer per topic (batching on; the topics
shared among ``--clients`` worker processes) publishing as fast as its pending queue allows
for ``--seconds`` after ``--warmup-seconds``. Measured over the window: messages stored per
second (each topic's ``msgInCounter`` from its owner) in total and per broker, and the user +
system CPU seconds of every broker, bookie and client process (``/proc/<pid>/stat``, the
figures psutil's ``cpu_times`` reads: meaningful even on a loaded machine, unlike wall-clock
rates, which on this 2-core machine are bound by the clients' CPU).

The extrapolation (from the run with the most brokers, whose cost per message includes the
cluster's own work): a broker process is one Python event loop, so it uses at most one core;
with ``us_per_msg`` of broker CPU per message, one broker core carries ``1e6 / us_per_msg``
msg/s, and N brokers on N free cores carry N times that (``brokers_only``: bookies and
clients elsewhere), or N cores shared by brokers and bookies carry
``N * 1e6 / (broker + bookie us_per_msg)`` (``brokers_and_bookies``), as long as the bundles
spread evenly (the leader's placement) and nothing else (disk, network) binds first.

    .venv/bin/python bench/scaleout_perf.py --brokers 1,2,3 --seconds 10
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import pathlib
import sys
import time
from multiprocessing.synchronize import Event

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

import pulsar  # noqa: E402
from _common import loadavg, proc_cpu_s  # noqa: E402
from support.broker_process import BrokerProcess  # noqa: E402
from support.cluster import Cluster, own_cluster, wait_until  # noqa: E402


def produce(service_url: str, topics: list[str], size: int, stop: Event) -> None:
    """A worker process: one producer per topic (batching on), ``send_async`` round-robin
    until ``stop``; the receipts are counted by the brokers (``msgInCounter``)."""
    client = pulsar.Client(service_url, operation_timeout_seconds=60)
    producers = [
        client.create_producer(
            t,
            batching_enabled=True,
            batching_max_publish_delay_ms=5,
            max_pending_messages=2000,
            block_if_queue_full=True,
        )
        for t in topics
    ]
    payload = b"x" * size

    def done(_res: pulsar.Result, _mid: object) -> None:
        pass

    while not stop.is_set():
        for p in producers:
            p.send_async(payload, done)
    for p in producers:
        p.flush()
    client.close()


def msg_in(cluster: Cluster, topics: list[str], owners: list[BrokerProcess]) -> list[int]:
    """Each topic's ``msgInCounter``, asked of its owner."""
    out = []
    for t, owner in zip(topics, owners, strict=True):
        path = "/admin/v2/" + t.replace("://", "/") + "/stats"
        out.append(int(json.loads(owner.admin("GET", path))["msgInCounter"]))
    return out


def run(count: int, args: argparse.Namespace) -> dict[str, object]:
    with own_cluster(f"scaleout-{count}-", bookies=args.bookies, brokers=count) as cluster:
        first = cluster.brokers[0]
        first.admin(
            "PUT", "/admin/v2/namespaces/public/scale", {"bundles": {"numBundles": args.bundles}}
        )
        wait_until(
            lambda: len(json.loads(first.admin("GET", "/admin/v2/brokers/test"))) == count,
            60,
            "every broker's load report",
        )
        topics = [f"persistent://public/scale/t{i}" for i in range(args.topics)]
        ctx = multiprocessing.get_context("spawn")
        stop = ctx.Event()
        workers = [
            ctx.Process(
                target=produce,
                args=(cluster.service_url, topics[i :: args.clients], args.size, stop),
            )
            for i in range(args.clients)
        ]
        for w in workers:
            w.start()
        time.sleep(args.warmup_seconds)  # warm-up window of the measurement, not a wait
        owning = [cluster.owner(t) for t in topics]
        owners = [b.name for b in owning]
        brokers = {b.name: b.proc.pid if b.proc else None for b in cluster.brokers}
        bookies = [b.pid for b in cluster._bookies.bookies]
        acked0 = msg_in(cluster, topics, owning)
        client0 = sum(proc_cpu_s(w.pid) for w in workers)
        cpu0 = {n: proc_cpu_s(pid) for n, pid in brokers.items()}
        bookie0 = sum(proc_cpu_s(pid) for pid in bookies)
        t0 = time.monotonic()
        time.sleep(args.seconds)  # the measured window
        elapsed = time.monotonic() - t0
        cpu1 = {n: proc_cpu_s(pid) for n, pid in brokers.items()}
        bookie1 = sum(proc_cpu_s(pid) for pid in bookies)
        client1 = sum(proc_cpu_s(w.pid) for w in workers)
        acked1 = msg_in(cluster, topics, owning)
        moved = [cluster.owner(t).name for t in topics] != owners
        stop.set()
        for w in workers:
            w.join(60)
    msgs = [b - a for a, b in zip(acked0, acked1, strict=True)]
    total = sum(msgs)
    per_broker = {}
    for name in brokers:
        n = sum(m for m, o in zip(msgs, owners, strict=True) if o == name)
        cpu = cpu1[name] - cpu0[name]
        per_broker[name] = {
            "topics": owners.count(name),
            "msg_s": round(n / elapsed),
            "cpu_s": round(cpu, 2),
            "us_per_msg": round(1e6 * cpu / n, 2) if n else None,
        }
    broker_cpu = sum(cpu1[n] - cpu0[n] for n in brokers)
    us_per_msg = 1e6 * broker_cpu / total if total else 0.0
    return {
        "brokers": count,
        "msg_s": round(total / elapsed),
        "topics_moved_during_window": moved,
        "per_broker": per_broker,
        "broker_us_per_msg": round(us_per_msg, 2),
        "bookie_us_per_msg": round(1e6 * (bookie1 - bookie0) / total, 2) if total else None,
        "client_us_per_msg": round(1e6 * (client1 - client0) / total, 2) if total else None,
        "one_broker_core_msg_s": round(1e6 / us_per_msg) if us_per_msg else None,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--brokers", default="1,2,3", help="broker counts to run, comma-separated")
    p.add_argument("--bookies", type=int, default=2)
    p.add_argument("--topics", type=int, default=12)
    p.add_argument("--bundles", type=int, default=12)
    p.add_argument("--size", type=int, default=100, help="payload bytes")
    p.add_argument("--clients", type=int, default=2, help="producer worker processes")
    p.add_argument("--seconds", type=float, default=10)
    p.add_argument("--warmup-seconds", type=float, default=3)
    p.add_argument("--cores", default="4,8,16", help="core counts to extrapolate to")
    args = p.parse_args()
    print("command:", " ".join([".venv/bin/python", "bench/scaleout_perf.py", *sys.argv[1:]]))
    print("loadavg before:", loadavg())
    runs = [run(int(n), args) for n in args.brokers.split(",")]
    for r in runs:
        print(
            f"{r['brokers']} broker(s): {r['msg_s']} msg/s, broker {r['broker_us_per_msg']} us/msg,"
            f" bookie {r['bookie_us_per_msg']} us/msg, client {r['client_us_per_msg']} us/msg;"
            f" per broker {r['per_broker']}"
        )
    # the run with the most brokers: its per-message cost includes the cluster's own work
    # (load reports, probes, lookups through the leader)
    last = runs[-1]
    server_us = float(last["broker_us_per_msg"]) + float(last["bookie_us_per_msg"] or 0)
    projected = {
        c: {
            "brokers_only": round(int(c) * 1e6 / float(last["broker_us_per_msg"])),
            "brokers_and_bookies": round(int(c) * 1e6 / server_us),
        }
        for c in args.cores.split(",")
        if server_us
    }
    print(f"projection (server cores -> msg/s, clients elsewhere): {projected}")
    print(
        json.dumps(
            {
                "runs": runs,
                "projected_msg_s_by_server_cores": projected,
                "topics": args.topics,
                "bundles": args.bundles,
                "size": args.size,
                "seconds": args.seconds,
                "loadavg_after": loadavg(),
            }
        )
    )


if __name__ == "__main__":
    main()
