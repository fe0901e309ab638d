"""Tiered storage, store level: offload MB/s and read-back entries/s of a synthetic sealed ledger.

Starts what it needs: a real S3 server (``moto_server``, from the ``moto[server]`` package) on a
free port for the S3 driver, a temporary directory for the filesystem driver. For each driver
it offloads ``--ledger-mb`` of ``--entry-bytes`` entries (the upload, then the verification
read-back of every entry: what "offloaded" costs), then reads the ledger back from a fresh
offloader (no cache) sequentially, ``--batch`` entries per read, and finally
``--random-reads`` single-entry reads at random ids (latency percentiles).
``--compare-libraries`` adds the measurement behind docs/tiered-storage.md's choice of library:
a ``--compare-mb`` multipart upload and 1 MiB ranged GETs against the same moto server through
obstore, boto3 and (if installed) aiobotocore, with the client process's CPU seconds.

``--broker`` measures the whole path instead, on a real ``magnetar standalone`` with the
official client: a ``--backlog-mb`` backlog published (batched) into ledgers of
``--ledger-entries`` entries; the standalone restarted (no cache) and the backlog read by a
sequential consumer from the bookies (msg/s); publish latency (one message at a time, p99)
with nothing else going on, then while the whole backlog is offloaded (``PUT .../offload``;
offload MB/s), then idle again (the idle p99 is the mean of before and after); the bookie
copies deleted (deletion lag 0) and the bookie's disk bytes before
and after (its GC every second); the standalone restarted again and the same backlog read
by a new consumer from the object store (msg/s, and its ratio to the bookie read: the
targets are >= 0.5 with the filesystem driver, >= 0.25 through S3), with the broker
process's RSS before and at most during that read. ``--worker`` names where offloads run
(``managedLedgerOffloadWorker``; several: alternating runs), ``--bookie-share`` the bookies'
``background_read_share_percent`` (how much of a bookie's time the worker's background reads
may take while it takes adds; several: alternating runs), ``--rounds`` repeats the set; the
last line's ``summary`` has each setting's median publish p99 increase. ``--interleave``
offloads one ledger at a time instead, each offload phase followed by an idle phase of as many
publishes, so idle and offloading alternate every few seconds within the run (the idle p99 is
then of all idle phases; per phase p99s in ``phases``): the design that separates the
offload's effect from this machine's drift between minutes.

The first line printed is the command; the last is one JSON object. Against moto (a Python
server) the figures measure moto more than the client: compare drivers and libraries with
each other, not with S3.

    .venv/bin/python bench/offload_perf.py --driver both --ledger-mb 64 --entry-bytes 1024
    .venv/bin/python bench/offload_perf.py --driver s3 --ledger-mb 4 --compare-libraries
    .venv/bin/python bench/offload_perf.py --broker --driver both --backlog-mb 256
    .venv/bin/python bench/offload_perf.py --broker --driver s3 --backlog-mb 64 \
        --probe-messages 3000 --worker off idle --rounds 4
    .venv/bin/python bench/offload_perf.py --broker --driver both --backlog-mb 64 \
        --ledger-entries 5000 --probe-messages 3000 --interleave --bookie-share 1 --rounds 2
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import io
import itertools
import json
import os
import pathlib
import random
import shlex
import statistics
import sys
import tempfile
import threading
import time
import uuid
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from support.offload import OffloadAdmin, broker_settings  # noqa: E402
from support.s3 import ACCESS_KEY, REGION, SECRET_KEY, S3Bucket, S3Server  # noqa: E402
from support.standalone import StandaloneProcess  # noqa: E402
from support.waiting import wait_until  # noqa: E402

from magnetar.broker.offload import (  # noqa: E402
    OffloaderTuning,
    OffloadPolicies,
    create_offloader,
)
from magnetar.broker.offload.policies import EffectiveOffloadPolicies  # noqa: E402
from magnetar.broker.offload.testing import MemoryLedgerSource  # noqa: E402

MIB = 1024 * 1024


SHARE_ENV = "MAGNETAR_BOOKIE_BACKGROUND_READ_SHARE_PERCENT"


def _percentile(sorted_ms: list[float], q: float) -> float:
    if not sorted_ms:
        return 0.0
    return sorted_ms[min(len(sorted_ms) - 1, int(q * len(sorted_ms)))]


def _source(args: argparse.Namespace) -> MemoryLedgerSource:
    count = max(1, args.ledger_mb * MIB // args.entry_bytes)
    rng = random.Random(args.seed)
    block = rng.randbytes(args.entry_bytes + 4096)
    payloads = [block[i % 4096 : i % 4096 + args.entry_bytes] for i in range(count)]
    return MemoryLedgerSource(1, payloads)


async def _measure(
    name: str, policies: EffectiveOffloadPolicies, args: argparse.Namespace
) -> dict[str, Any]:
    source = _source(args)
    tuning = OffloaderTuning(read_ahead_bytes_max=args.read_ahead_bytes)
    writer = create_offloader(policies, tuning=tuning)
    cpu0, t0 = time.process_time(), time.perf_counter()
    done = await writer.offload(source, uuid.uuid4(), {"ManagedLedgerName": "bench"})
    offload_s = time.perf_counter() - t0
    offload_cpu = time.process_time() - cpu0

    reader = create_offloader(policies, tuning=tuning)
    handle = await reader.open(done)
    last = handle.last_add_confirmed
    cpu0, t0 = time.process_time(), time.perf_counter()
    read = 0
    for first in range(0, last + 1, args.batch):
        got = await handle.read(first, min(last, first + args.batch - 1))
        read += len(got)
    read_s = time.perf_counter() - t0
    read_cpu = time.process_time() - cpu0
    assert read == last + 1

    random_handle = await create_offloader(policies, tuning=tuning).open(done)
    rng = random.Random(args.seed + 1)
    latencies = []
    for _ in range(args.random_reads):
        entry = rng.randrange(0, last + 1)
        t = time.perf_counter()
        await random_handle.read(entry, entry)
        latencies.append((time.perf_counter() - t) * 1000.0)
    latencies.sort()
    stats = reader.statistics()
    mb = source.length / MIB
    return {
        "driver": name,
        "ledger_mb": round(mb, 1),
        "entries": last + 1,
        "entry_bytes": args.entry_bytes,
        "block_bytes": policies.read_buffer_size_bytes,
        "part_bytes": policies.max_block_size_bytes,
        "data_object_bytes": done.data_object_bytes,
        "index_object_bytes": done.index_object_bytes,
        "offload_mb_s": round(mb / offload_s, 1),
        "offload_cpu_s_per_mb": round(offload_cpu / mb, 4),
        "read_entries_s": round((last + 1) / read_s),
        "read_mb_s": round(mb / read_s, 1),
        "read_cpu_s_per_mb": round(read_cpu / mb, 4),
        "read_gets": stats.blocks_fetched,
        "random_read_p50_ms": round(_percentile(latencies, 0.5), 2),
        "random_read_p99_ms": round(_percentile(latencies, 0.99), 2),
    }


def _policies_s3(bucket: S3Bucket, args: argparse.Namespace) -> EffectiveOffloadPolicies:
    doc = {
        **bucket.policies_json(),
        "s3ManagedLedgerOffloadMaxBlockSizeInBytes": args.part_bytes,
        "s3ManagedLedgerOffloadReadBufferSizeInBytes": args.block_bytes,
    }
    resolved = OffloadPolicies.from_json(doc).resolve()
    assert resolved is not None
    return resolved


def _policies_fs(root: str, args: argparse.Namespace) -> EffectiveOffloadPolicies:
    resolved = OffloadPolicies.from_json(
        {
            "managedLedgerOffloadDriver": "filesystem",
            "fileSystemURI": f"file://{root}",
            "managedLedgerOffloadMaxBlockSizeInBytes": args.part_bytes,
            "managedLedgerOffloadReadBufferSizeInBytes": args.block_bytes,
        }
    ).resolve()
    assert resolved is not None
    return resolved


# -- the library comparison -------------------------------------------------------------------


def _compare_libraries(server: S3Server, args: argparse.Namespace) -> list[dict[str, Any]]:
    size = args.compare_mb * MIB
    part = 8 * MIB
    data = os.urandom(size)
    starts = [random.Random(5).randrange(0, size - MIB) for _ in range(args.compare_gets)]
    out = []

    def record(name: str, upload_s: float, gets_ms: list[float], cpu_s: float) -> None:
        out.append(
            {
                "library": name,
                "upload_mb_s": round(size / MIB / upload_s, 1),
                "ranged_get_1mib_p50_ms": round(statistics.median(gets_ms), 2),
                "client_cpu_s": round(cpu_s, 3),
            }
        )

    import obstore
    from obstore.store import S3Store

    bucket = server.create_bucket()
    store = S3Store(
        bucket,
        endpoint=server.endpoint,
        access_key_id=ACCESS_KEY,
        secret_access_key=SECRET_KEY,
        region=REGION,
        client_options={"allow_http": True},
    )

    async def with_obstore() -> tuple[float, list[float]]:
        async def chunks():  # type: ignore[no-untyped-def]
            for i in range(0, size, part):
                yield data[i : i + part]

        t = time.perf_counter()
        await obstore.put_async(store, "k", chunks(), chunk_size=part, max_concurrency=2)
        upload = time.perf_counter() - t
        gets = []
        for start in starts:
            t = time.perf_counter()
            got = await obstore.get_range_async(store, "k", start=start, length=MIB)
            gets.append((time.perf_counter() - t) * 1000)
            assert bytes(got) == data[start : start + MIB]
        return upload, gets

    cpu = time.process_time()
    upload, gets = asyncio.run(with_obstore())
    record("obstore", upload, gets, time.process_time() - cpu)

    from boto3.s3.transfer import TransferConfig

    client = server.client()
    bucket = server.create_bucket()
    cpu = time.process_time()
    t = time.perf_counter()
    config = TransferConfig(multipart_threshold=part, multipart_chunksize=part, max_concurrency=2)
    client.upload_fileobj(io.BytesIO(data), bucket, "k", Config=config)
    upload = time.perf_counter() - t
    gets = []
    for start in starts:
        t = time.perf_counter()
        body = client.get_object(Bucket=bucket, Key="k", Range=f"bytes={start}-{start + MIB - 1}")
        got = body["Body"].read()
        gets.append((time.perf_counter() - t) * 1000)
        assert got == data[start : start + MIB]
    record("boto3", upload, gets, time.process_time() - cpu)

    try:
        import aiobotocore.session
    except ImportError:
        out.append({"library": "aiobotocore", "skipped": "not installed (pip install aiobotocore)"})
        return out
    bucket = server.create_bucket()

    async def with_aiobotocore() -> tuple[float, list[float]]:
        session = aiobotocore.session.get_session()
        async with session.create_client(
            "s3",
            endpoint_url=server.endpoint,
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY,
            region_name=REGION,
        ) as c:
            t = time.perf_counter()
            mpu = await c.create_multipart_upload(Bucket=bucket, Key="k")
            gate = asyncio.Semaphore(2)

            async def upload_part(number: int, offset: int) -> dict[str, Any]:
                async with gate:
                    r = await c.upload_part(
                        Bucket=bucket,
                        Key="k",
                        UploadId=mpu["UploadId"],
                        PartNumber=number,
                        Body=data[offset : offset + part],
                    )
                    return {"PartNumber": number, "ETag": r["ETag"]}

            parts = await asyncio.gather(
                *(upload_part(n + 1, o) for n, o in enumerate(range(0, size, part)))
            )
            await c.complete_multipart_upload(
                Bucket=bucket,
                Key="k",
                UploadId=mpu["UploadId"],
                MultipartUpload={"Parts": list(parts)},
            )
            upload = time.perf_counter() - t
            gets = []
            for start in starts:
                t = time.perf_counter()
                r = await c.get_object(
                    Bucket=bucket, Key="k", Range=f"bytes={start}-{start + MIB - 1}"
                )
                got = await r["Body"].read()
                gets.append((time.perf_counter() - t) * 1000)
                assert got == data[start : start + MIB]
            return upload, gets

    cpu = time.process_time()
    upload, gets = asyncio.run(with_aiobotocore())
    record("aiobotocore", upload, gets, time.process_time() - cpu)
    return out


# -- the whole path: a standalone, the official client ----------------------------------------

TOPIC = "persistent://public/default/offload-perf"


def _disk_bytes(path: pathlib.Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def _rss_bytes(pid: int) -> int:
    """A process's resident set size now (0 once it is gone)."""
    try:
        for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


class _RssPeak:
    """The highest RSS of a process, sampled every 50 ms on a thread while in ``with``."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            self.peak = max(self.peak, _rss_bytes(self.pid))

    def __enter__(self) -> _RssPeak:
        self.peak = _rss_bytes(self.pid)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def _consume_rate(sa: StandaloneProcess, sub: str, expected: int) -> float:
    """Messages per second of one consumer reading the topic from its start."""
    import pulsar

    client = pulsar.Client(sa.service_url, operation_timeout_seconds=60, log_conf_file_path=None)
    consumer = client.subscribe(
        TOPIC,
        sub,
        initial_position=pulsar.InitialPosition.Earliest,
        receiver_queue_size=1000,
    )
    t0 = time.perf_counter()
    for _ in range(expected):
        consumer.acknowledge(consumer.receive(60_000))
    elapsed = time.perf_counter() - t0
    client.close()
    return expected / elapsed


def _publish_latencies(producer: Any, count: int, stop: Any = None) -> list[float]:
    """Milliseconds of ``count`` sends one at a time; with ``stop``, it is asked at most
    twice a second throughout (it is an admin call to the same broker: asked before every
    send it would load the broker between the sends it times), and sends go on past
    ``count`` until it says true."""
    out: list[float] = []
    body = b"p" * 256
    asked = time.perf_counter()
    stopped = stop is None
    while not (stopped and len(out) >= count):
        if stop is not None:
            now = time.perf_counter()
            if now - asked >= 0.5:
                asked = now
                stopped = bool(stop())
        t0 = time.perf_counter()
        producer.send(body)
        out.append((time.perf_counter() - t0) * 1000)
    return sorted(out)


def _interleaved(
    probe: Any, admin: OffloadAdmin
) -> tuple[list[float], list[float], float, list[dict[str, Any]]]:
    """The offload one ledger at a time (``PUT .../offload`` up to the next ledger's start),
    each followed by an idle phase of as many publishes as the offload phase before it took:
    idle and offloading phases alternate every few seconds, so the machine's drift between
    minutes falls on both alike. An offload phase lasts until the offload succeeded and the
    bookie copies of its ledgers are deleted (deletion lag 0: the deletion is part of what an
    offload costs, and would otherwise fall on the idle phase after it). Both kinds of phase
    ask the offload's status and the internal stats twice a second (the offloading one to
    know when it ends), so those admin calls load both alike. Returns the offloading and idle
    latencies, the seconds spent offloading, and per phase its p99s."""
    ledgers = [ledger["ledgerId"] for ledger in admin.sealed_ledgers()]
    busy: list[float] = []
    idle: list[float] = []
    phases: list[dict[str, Any]] = []
    offload_s = 0.0
    # every ledger but the newest sealed one; the last trigger (no position) takes the rest
    ends: list[dict[str, int] | None] = [
        {"ledgerId": ledger_id, "entryId": 0, "partitionIndex": -1} for ledger_id in ledgers[1:]
    ]

    def done(upto: int | None) -> bool:
        doc = admin.status()
        status = doc["status"]
        if status == "ERROR":
            raise AssertionError(f"offload failed: {doc}")
        ledgers = admin.sealed_ledgers()
        return status == "SUCCESS" and all(
            ledger.get("offloadContext", {}).get("bookkeeperDeleted", False)
            for ledger in ledgers
            if upto is None or ledger["ledgerId"] < upto
        )

    def asked() -> bool:  # the same admin calls as ``done``, for the idle phases
        admin.status()
        admin.sealed_ledgers()
        return True

    for until in [*ends, None]:
        t0 = time.perf_counter()
        admin.trigger(until)
        upto = None if until is None else until["ledgerId"]
        one = _publish_latencies(probe, 1, stop=functools.partial(done, upto))
        offload_s += time.perf_counter() - t0
        rest = _publish_latencies(probe, len(one), stop=asked)
        busy += one
        idle += rest
        phases.append(
            {
                "offloading_p99_ms": round(_percentile(one, 0.99), 2),
                "idle_p99_ms": round(_percentile(rest, 0.99), 2),
                "publishes": len(one),
                "seconds": round(time.perf_counter() - t0, 2),
            }
        )
    return sorted(busy), sorted(idle), offload_s, phases


def _broker_run(
    name: str,
    extra: dict[str, object],
    args: argparse.Namespace,
    flow_permits: int,
    worker: str,
    *,
    share: int | None = None,
) -> dict[str, Any]:
    import pulsar

    data_dir = pathlib.Path(tempfile.mkdtemp(prefix="offload-perf-broker-"))
    conf = broker_settings(entries_per_ledger=args.ledger_entries, **extra)
    conf["managedLedgerOffloadReadBufferSizeInBytes"] = args.block_bytes
    conf["managedLedgerOffloadFlowPermitsPerSecond"] = flow_permits
    conf["managedLedgerOffloadWorker"] = worker
    os.environ["MAGNETAR_BOOKIE_GC_INTERVAL_S"] = "1"
    if share is not None:  # the standalone's bookie children read it
        os.environ[SHARE_ENV] = str(share)
    sa = StandaloneProcess(data_dir / "sa", data_dir / "sa.log", config=conf)
    try:
        sa.start()
        count = max(1, args.backlog_mb * MIB // args.message_bytes)
        client = pulsar.Client(sa.service_url, log_conf_file_path=None)
        producer = client.create_producer(TOPIC, block_if_queue_full=True)
        body = random.Random(args.seed).randbytes(args.message_bytes)
        for _ in range(count):
            producer.send_async(body, None)
        producer.flush()
        client.close()
        bookie_dir = data_dir / "sa" / "bookie-0"
        disk_before = _disk_bytes(bookie_dir)
        sa.stop()
        sa.start()  # cold: what is read comes from the bookies
        bookie_rate = _consume_rate(sa, "from-bookies", count)

        client = pulsar.Client(sa.service_url, log_conf_file_path=None)
        probe = client.create_producer(TOPIC + "-probe", batching_enabled=False)
        _publish_latencies(probe, 200)  # warm-up (connection, first ledger): not timed
        idle = _publish_latencies(probe, args.probe_messages)
        admin = OffloadAdmin(sa.web_url, TOPIC)
        phases: list[dict[str, Any]] = []
        if args.interleave:
            busy, idle_between, offload_s, phases = _interleaved(probe, admin)
            idle = sorted(idle + idle_between)
        else:
            t0 = time.perf_counter()
            admin.trigger()
            busy = _publish_latencies(
                probe, args.probe_messages, stop=lambda: admin.status()["status"] != "RUNNING"
            )
            admin.wait_status("SUCCESS", timeout_s=3600)
            offload_s = time.perf_counter() - t0
        admin.wait_offloaded(bookie_deleted=True, timeout_s=600)
        idle_after = _publish_latencies(probe, args.probe_messages)
        offloaded = admin.stats()["offloadedStorageSize"]
        client.close()
        try:  # bookie GC reclaims dead entry logs in its own time
            wait_until(lambda: _disk_bytes(bookie_dir) < disk_before // 2, 30, "bookie GC")
        except AssertionError:
            pass
        disk_after = _disk_bytes(bookie_dir)
        sa.stop()
        sa.start()  # cold again: what is read comes from the object store
        assert sa.proc is not None
        rss_before_read = _rss_bytes(sa.proc.pid)
        with _RssPeak(sa.proc.pid) as rss:
            store_rate = _consume_rate(sa, "from-store", count)
    finally:
        sa.stop()
        os.environ.pop("MAGNETAR_BOOKIE_GC_INTERVAL_S", None)
        os.environ.pop(SHARE_ENV, None)
    target = 0.5 if name == "filesystem" else 0.25
    # idle before and after the offload (A B A): this machine's p99 drifts by several times
    # between minutes, so the offload's phase is compared with the mean of the two around it
    p99_idle = (_percentile(idle, 0.99) + _percentile(idle_after, 0.99)) / 2
    p99_busy = _percentile(busy, 0.99)
    return {
        "mode": "broker",
        "driver": name,
        "backlog_mb": args.backlog_mb,
        "messages": count,
        "message_bytes": args.message_bytes,
        "ledger_entries": args.ledger_entries,
        "flow_permits_per_second": flow_permits,
        "worker": worker,
        "bookie_background_read_share_percent": share,
        "offloaded_bytes": offloaded,
        "offload_mb_s": round(offloaded / MIB / offload_s, 1),
        "bookie_read_msgs_s": round(bookie_rate),
        "offloaded_read_msgs_s": round(store_rate),
        "offloaded_to_bookie_read_ratio": round(store_rate / bookie_rate, 2),
        "broker_rss_mb_before_store_read": round(rss_before_read / MIB),
        "broker_rss_mb_max_during_store_read": round(rss.peak / MIB),
        "ratio_target": target,
        "publish_p99_ms_idle_before": round(_percentile(idle, 0.99), 2),
        "publish_p99_ms_idle_after": round(_percentile(idle_after, 0.99), 2),
        "publish_p99_ms_idle": round(p99_idle, 2),
        "publish_p99_ms_offloading": round(p99_busy, 2),
        "publish_p99_increase_pct": round((p99_busy / max(p99_idle, 1e-9) - 1) * 100, 1),
        "publish_p99_increase_target_pct": 20,
        "bookie_disk_bytes_before": disk_before,
        "bookie_disk_bytes_after": disk_after,
        "interleaved": bool(args.interleave),
        "publishes_idle": len(idle) + len(idle_after),
        "publishes_offloading": len(busy),
        "phases": phases,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--driver", choices=["s3", "filesystem", "both"], default="both")
    p.add_argument("--ledger-mb", type=int, default=64)
    p.add_argument("--entry-bytes", type=int, default=1024)
    p.add_argument("--block-bytes", type=int, default=MIB, help="readBufferSizeInBytes")
    p.add_argument("--part-bytes", type=int, default=64 * MIB, help="maxBlockSizeInBytes")
    p.add_argument("--read-ahead-bytes", type=int, default=8 * MIB)
    p.add_argument("--batch", type=int, default=100, help="entries per sequential read")
    p.add_argument("--random-reads", type=int, default=100)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--compare-libraries", action="store_true")
    p.add_argument("--compare-mb", type=int, default=64)
    p.add_argument("--compare-gets", type=int, default=40)
    p.add_argument("--broker", action="store_true", help="the whole path (see above)")
    p.add_argument("--backlog-mb", type=int, default=256)
    p.add_argument("--message-bytes", type=int, default=1024)
    p.add_argument("--ledger-entries", type=int, default=500, help="entries (batches) a ledger")
    p.add_argument("--probe-messages", type=int, default=2000, help="publishes timed per phase")
    p.add_argument(
        "--flow-permits",
        type=int,
        nargs="+",
        default=[-1],
        help="managedLedgerOffloadFlowPermitsPerSecond (bytes/s, -1 unlimited); several: one\n"
        "run of each per driver, in this order",
    )
    p.add_argument(
        "--worker",
        choices=["idle", "normal", "off"],
        nargs="+",
        default=["idle"],
        help="managedLedgerOffloadWorker; several: one run of each per round, alternating",
    )
    p.add_argument(
        "--bookie-share",
        type=int,
        nargs="+",
        default=[None],
        help="the bookies' background_read_share_percent (default: theirs); several: one run\n"
        "of each per round, alternating",
    )
    p.add_argument("--rounds", type=int, default=1, help="--broker: repeat the runs (A B A B)")
    p.add_argument(
        "--interleave",
        action="store_true",
        help="--broker: offload one ledger at a time, each followed by an idle phase as long\n"
        "(idle and offloading alternate every few seconds within the run)",
    )
    args = p.parse_args()
    print("command:", shlex.join([sys.executable, *sys.argv]), flush=True)
    if args.broker:
        _main_broker(args)
        return

    results: list[dict[str, Any]] = []
    libraries: list[dict[str, Any]] = []
    server: S3Server | None = None
    try:
        if args.driver in ("s3", "both") or args.compare_libraries:
            server = S3Server()
            server.start()
        if args.driver in ("s3", "both"):
            assert server is not None
            bucket = S3Bucket(server, server.create_bucket())
            results.append(asyncio.run(_measure("s3 (moto)", _policies_s3(bucket, args), args)))
        if args.driver in ("filesystem", "both"):
            with tempfile.TemporaryDirectory(prefix="offload-perf-") as root:
                policies = _policies_fs(root, args)
                results.append(asyncio.run(_measure("filesystem", policies, args)))
        if args.compare_libraries:
            assert server is not None
            libraries = _compare_libraries(server, args)
    finally:
        if server is not None:
            server.close()
    for row in results + libraries:
        print(json.dumps(row), file=sys.stderr)
    print(
        json.dumps(
            {
                "bench": "offload_perf",
                "drivers": results,
                "libraries": libraries,
                "loadavg": [round(x, 2) for x in os.getloadavg()],
            }
        )
    )


def _main_broker(args: argparse.Namespace) -> None:
    results: list[dict[str, Any]] = []
    server: S3Server | None = None
    try:
        if args.driver in ("s3", "both"):
            server = S3Server()
            server.start()
        for _ in range(args.rounds):
            for worker, flow, share in itertools.product(
                args.worker, args.flow_permits, args.bookie_share
            ):
                if server is not None:
                    bucket = S3Bucket(server, server.create_bucket())
                    extra: dict[str, object] = {"bucket": bucket}
                    run = _broker_run("s3 (moto)", extra, args, flow, worker, share=share)
                    results.append(run)
                if args.driver in ("filesystem", "both"):
                    root = pathlib.Path(tempfile.mkdtemp(prefix="offload-perf-fs-"))
                    extra = {"directory": root}
                    run = _broker_run("filesystem", extra, args, flow, worker, share=share)
                    results.append(run)
    finally:
        if server is not None:
            server.close()
    for row in results:
        print(json.dumps(row), file=sys.stderr)
    # per driver, worker and rate: the median of the runs (this machine's p99 moves by
    # several times between minutes; compare the settings by their alternating runs)
    groups: dict[str, list[dict[str, Any]]] = {}
    for row in results:
        key = (
            f"{row['driver']} worker={row['worker']} flow={row['flow_permits_per_second']} "
            f"share={row['bookie_background_read_share_percent']}"
        )
        groups.setdefault(key, []).append(row)
    summary = {
        key: {
            "runs": len(rows),
            "publish_p99_increase_pct_median": statistics.median(
                r["publish_p99_increase_pct"] for r in rows
            ),
            "publish_p99_increase_pct_each": [r["publish_p99_increase_pct"] for r in rows],
            "offload_mb_s_median": statistics.median(r["offload_mb_s"] for r in rows),
        }
        for key, rows in groups.items()
    }
    print(
        json.dumps(
            {
                "bench": "offload_perf",
                "mode": "broker",
                "summary": summary,
                "drivers": results,
                "loadavg": [round(x, 2) for x in os.getloadavg()],
            }
        )
    )


if __name__ == "__main__":
    main()
