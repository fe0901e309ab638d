"""Offloads run in the broker's offload worker process, at idle CPU priority
(``managedLedgerOffloadWorker``), with real processes: a ``magnetar standalone`` (broker and
bookie processes), the official client, the filesystem driver or a real S3 server (moto).

The worker is a child of the broker in the ``SCHED_IDLE`` class (every thread of it); with
the setting ``off`` no such child exists and the broker's loop offloads; a SIGKILLed worker
fails the attempt it was doing (the ledger stays on the bookies) and the next offload starts
a new worker and succeeds, with no object left that the metadata does not record; the
worker's reads keep to the broker's ``managedLedgerOffloadFlowPermitsPerSecond``.
"""

from __future__ import annotations

import os
import pathlib
import signal
import time
import urllib.request

from prometheus_client.parser import text_string_to_metric_families
from support.net import free_port
from support.offload import OffloadAdmin, broker_settings, payloads, publish, read_all
from support.s3 import S3Bucket, S3Server
from support.standalone import StandaloneFactory, StandaloneProcess
from support.waiting import wait_until

TOPIC = "persistent://public/default/offload-worker"
WORKER_MODULE = b"magnetar.broker.offload.worker"


def _worker_pids(parent: int) -> list[int]:
    """Processes whose parent is ``parent`` running the offload worker module."""
    found = []
    for entry in pathlib.Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == parent and WORKER_MODULE in cmdline:
            found.append(int(entry.name))
    return found


def _publish(sa: StandaloneProcess, data: list[bytes]) -> None:
    publish(sa.service_url, TOPIC, data)


def _read_all(sa: StandaloneProcess, n: int) -> list[bytes]:
    return read_all(sa.service_url, TOPIC, n)


def _worker_metrics(sa: StandaloneProcess) -> dict[str, float]:
    """The broker's ``magnetar_offload_worker_*`` series (counters without ``_total``)."""
    with urllib.request.urlopen(sa.web_url + "/metrics", timeout=10) as resp:
        text = resp.read().decode()
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        if family.name.startswith("magnetar_offload_worker"):
            for sample in family.samples:
                if not sample.name.endswith("_created"):
                    out[sample.name.removesuffix("_total")] = sample.value
    return out


def _background_reads(http_port: int) -> float:
    """The bookie's ``bookie_background_READ_count``: reads marked background."""
    with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            # the parser adds OpenMetrics' _total to a counter's sample; the bookie writes none
            if sample.name.removesuffix("_total") == "bookie_background_READ_count":
                return sample.value
    raise AssertionError("no bookie_background_READ_count on the bookie's /metrics")


def _broker_pid(sa: StandaloneProcess) -> int:
    assert sa.proc is not None
    return sa.proc.pid


def test_offloads_run_in_an_idle_priority_child_process_of_the_broker(
    standalone_factory: StandaloneFactory, tmp_path: pathlib.Path
) -> None:
    conf = broker_settings(directory=tmp_path / "offloaded")
    bookie_http = free_port()
    sa = standalone_factory.create(
        config=conf, extra_args=["--bookie-http-port", str(bookie_http)]
    ).start()
    data = payloads(130, 2_000)
    _publish(sa, data)
    assert _worker_pids(_broker_pid(sa)) == []  # started on the first offload, not before
    assert _background_reads(bookie_http) == 0
    admin = OffloadAdmin(sa.web_url, TOPIC)
    admin.trigger()
    admin.wait_status("SUCCESS")
    admin.wait_offloaded(bookie_deleted=True)
    (worker,) = _worker_pids(_broker_pid(sa))
    threads = [int(t.name) for t in pathlib.Path(f"/proc/{worker}/task").iterdir()]
    assert len(threads) > 1  # the library's and gRPC's threads too
    assert {os.sched_getscheduler(t) for t in threads} == {os.SCHED_IDLE}
    assert os.sched_getscheduler(_broker_pid(sa)) == os.SCHED_OTHER
    # the worker's bookie reads are marked background: a bookie taking adds spaces them
    assert _background_reads(bookie_http) > 0
    assert _read_all(sa, len(data)) == data  # read back from the store
    sa.stop()
    wait_until(lambda: not pathlib.Path(f"/proc/{worker}").exists(), 10, "the worker ends")


def test_with_the_worker_off_the_broker_offloads_itself(
    standalone_factory: StandaloneFactory, tmp_path: pathlib.Path
) -> None:
    conf = broker_settings(directory=tmp_path / "offloaded", managedLedgerOffloadWorker="off")
    bookie_http = free_port()
    sa = standalone_factory.create(
        config=conf, extra_args=["--bookie-http-port", str(bookie_http)]
    ).start()
    data = payloads(130, 2_000)
    _publish(sa, data)
    admin = OffloadAdmin(sa.web_url, TOPIC)
    admin.trigger()
    admin.wait_status("SUCCESS")
    admin.wait_offloaded(bookie_deleted=True)
    assert _worker_pids(_broker_pid(sa)) == []
    assert _background_reads(bookie_http) == 0  # the broker's own reads are not background
    assert _worker_metrics(sa) == {
        "magnetar_offload_worker_running": 0,
        "magnetar_offload_worker_starts": 0,
        "magnetar_offload_worker_jobs": 0,
        "magnetar_offload_worker_jobs_failed": 0,
    }
    assert _read_all(sa, len(data)) == data


def test_a_killed_worker_fails_its_attempt_and_the_next_offload_succeeds(
    standalone_factory: StandaloneFactory, private_s3_server: S3Server
) -> None:
    server = private_s3_server
    bucket = S3Bucket(server, server.create_bucket())
    conf = broker_settings(bucket=bucket, entries_per_ledger=50)
    sa = standalone_factory.create(config=conf).start()
    data = payloads(160, 20_000)  # three sealed ledgers of about 1 MB
    _publish(sa, data)
    admin = OffloadAdmin(sa.web_url, TOPIC)
    server.pause()  # the worker's first upload hangs, so it is killed mid-attempt
    try:
        admin.trigger()
        wait_until(lambda: _worker_pids(_broker_pid(sa)), 60, "the offload worker")
        (worker,) = _worker_pids(_broker_pid(sa))
        os.kill(worker, signal.SIGKILL)
        status = admin.wait_status("ERROR")
    finally:
        server.resume()
    assert "offload worker" in str(status)
    for ledger in admin.sealed_ledgers():  # nothing counts as offloaded, all on bookies
        assert not ledger["offloaded"]
    assert _read_all(sa, len(data)) == data
    admin.trigger()
    admin.wait_status("SUCCESS", timeout_s=120)
    admin.wait_offloaded(bookie_deleted=True)
    (again,) = _worker_pids(_broker_pid(sa))
    assert again != worker
    metrics = _worker_metrics(sa)  # the kill and the new worker, as /metrics shows them
    assert metrics["magnetar_offload_worker_running"] == 1
    assert metrics["magnetar_offload_worker_starts"] == 2
    assert metrics["magnetar_offload_worker_jobs_failed"] >= 1
    assert (
        metrics["magnetar_offload_worker_jobs"]
        >= metrics["magnetar_offload_worker_jobs_failed"] + 3
    )
    listed = bucket.server.client().list_objects_v2(Bucket=bucket.name).get("Contents", [])
    records = [ledger["offloadContext"]["record"] for ledger in admin.sealed_ledgers()]
    recorded = {r["dataKey"] for r in records} | {r["indexKey"] for r in records}
    assert {o["Key"] for o in listed} == recorded  # the killed attempt's objects are gone
    assert _read_all(sa, len(data)) == data


def test_the_worker_keeps_to_the_broker_s_offload_flow_permits(
    standalone_factory: StandaloneFactory, tmp_path: pathlib.Path
) -> None:
    """At 100 KB/s (one second's burst free) about 1 MB of ledgers cannot be read in less
    than about 9 s: the worker asks the broker's permits before each read. (A lower bound
    only: a slow machine makes it longer, never shorter.)"""
    rate = 100_000
    conf = broker_settings(
        directory=tmp_path / "offloaded",
        entries_per_ledger=25,
        managedLedgerOffloadFlowPermitsPerSecond=rate,
    )
    sa = standalone_factory.create(config=conf).start()
    data = payloads(110, 10_000)  # four sealed ledgers of 250 KB, 1 MB in all
    _publish(sa, data)
    admin = OffloadAdmin(sa.web_url, TOPIC)
    started = time.monotonic()
    admin.trigger()
    admin.wait_status("SUCCESS", timeout_s=120)
    elapsed = time.monotonic() - started
    offloaded = sum(ledger["size"] for ledger in admin.sealed_ledgers())
    assert offloaded >= 1_000_000
    assert _worker_pids(_broker_pid(sa))
    assert elapsed >= (offloaded - 2 * rate) / rate
