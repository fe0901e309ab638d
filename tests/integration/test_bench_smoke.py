"""Smoke tests of the benches: short runs, report shapes, no timing assertion (performance
belongs in ``make bench``).

- ``bench/perf.py``: a low fixed rate against the standalone it starts itself, with the
  official client; the last line is one JSON object with the documented figures and every
  produced message was consumed.
- ``bench/keyshared_perf.py``: one Shared and one Key_Shared run on its own standalone, all
  messages received in both, the ratio computed from the two rates.
- ``bench/cache_memory.py``: a few topics of unread backlog through a small entry cache
  budget on its own standalone; the report's figures and that the broker stayed within it.
- ``bench/reclaim_perf.py``: 2 MB through TTL and through retention on ZooKeeper + a bookie
  process; each run brings the bookie's entry-log bytes down to 10% of the peak.
- ``bench/backlog_drain.py``: a small backlog past the cache's age drained in order while
  another process publishes to the topic.
"""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys

import pytest
from support.zookeeper import zookeeper_missing_reason

PERF = pathlib.Path(__file__).resolve().parents[2] / "bench" / "perf.py"
EXPECTED_KEYS = {
    "msgs_per_s",
    "mb_per_s",
    "publish_p50_ms",
    "publish_p99_ms",
    "e2e_p99_ms",
    "rate",
    "size",
    "producers",
    "consumers",
    "subscription_type",
    "batching",
    "seconds",
    "client",
    "cpu_cores",
}


def test_perf_smoke_prints_json_report(tmp_path: pathlib.Path) -> None:
    cmd = [
        sys.executable,
        str(PERF),
        "--seconds",
        "2",
        "--rate",
        "500",
        "--warmup-seconds",
        "0.5",
        "--drain-seconds",
        "20",
        "--data-dir",
        str(tmp_path / "standalone"),
    ]
    # Own process group: on timeout the bench, its workers and its standalone die together.
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
    )
    try:
        out, _ = proc.communicate(timeout=150)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
    text = out.decode(errors="replace")
    assert proc.returncode == 0, text
    lines = [line for line in text.splitlines() if line.strip()]
    report = json.loads(lines[-1])
    assert report.keys() >= EXPECTED_KEYS, sorted(EXPECTED_KEYS - report.keys())
    assert report["rate"] == 500
    assert report["client"] == "official"
    assert report["sent_total"] > 0
    assert report["received_total"] == report["sent_total"]
    assert report["missing"] == 0
    assert report["publish_errors"] == 0
    assert report["publish_latency_samples"] > 0
    assert set(report["cpu_cores"]) == {"producer", "consumer", "broker", "bookie"}


def _run_bench(script: str, args: list[str], timeout_s: float) -> dict[str, object]:
    """Run ``bench/<script>`` in its own process group; its last line as JSON."""
    cmd = [sys.executable, str(PERF.parent / script), *args]
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
    )
    try:
        out, _ = proc.communicate(timeout=timeout_s)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
    text = out.decode(errors="replace")
    assert proc.returncode == 0, text
    lines = [line for line in text.splitlines() if line.strip()]
    report: dict[str, object] = json.loads(lines[-1])
    return report


def test_keyshared_perf_smoke_compares_both_subscription_types(tmp_path: pathlib.Path) -> None:
    report = _run_bench(
        "keyshared_perf.py",
        [
            "--seconds",
            "1",
            "--warmup-seconds",
            "0.3",
            "--rate",
            "500",
            "--keys",
            "50",
            "--drain-seconds",
            "20",
            "--data-dir",
            str(tmp_path / "standalone"),
        ],
        timeout_s=150,
    )
    assert {"keyshared_msgs_per_s", "shared_msgs_per_s", "ratio", "runs"} <= report.keys()
    assert report["consumers"] == 4 and report["keys"] == 50
    runs = report["runs"]
    assert isinstance(runs, dict) and set(runs) == {"Shared", "Key_Shared"}
    for sub_type, results in runs.items():
        (run,) = results
        assert run["subscription_type"] == sub_type
        assert run["sent_total"] > 0 and run["received_total"] == run["sent_total"], run
        assert run["missing"] == 0 and run["consumer_errors"] == 0
    shared, keyed = report["shared_msgs_per_s"], report["keyshared_msgs_per_s"]
    assert isinstance(shared, float) and isinstance(keyed, float) and shared > 0
    assert report["ratio"] == round(keyed / shared, 3)


def test_reclaim_perf_smoke_ttl_frees_the_bookie_entry_logs() -> None:
    reason = zookeeper_missing_reason()
    if reason is not None:
        pytest.skip(reason)
    report = _run_bench(
        "reclaim_perf.py",
        ["--mb", "2", "--entries-per-ledger", "50", "--timeout-s", "20", "--settle-s", "0.5"],
        timeout_s=150,
    )
    scenarios = report["scenarios"]
    assert isinstance(scenarios, dict) and set(scenarios) == {"ttl", "retention"}
    ttl = scenarios["ttl"]
    assert ttl["ledgers_peak"] > 1
    assert ttl["t_backlog_zero_s"] is not None  # the TTL expired everything
    assert ttl["t_reclaimed_s"] is not None, ttl  # and the entry logs went down
    assert ttl["end"]["entry_logs"] <= 0.1 * ttl["peak"]["entry_logs"]
    retention = scenarios["retention"]
    assert retention["t_backlog_zero_s"] is not None
    assert retention["ledgers_end"] < retention["ledgers_peak"]  # consumed ledgers trimmed
    assert retention["t_reclaimed_s"] is not None, retention  # and their bytes reclaimed
    assert retention["end"]["entry_logs"] <= 0.1 * retention["peak"]["entry_logs"]


def test_cache_memory_smoke_reports_rss_against_the_budget(tmp_path: pathlib.Path) -> None:
    report = _run_bench(
        "cache_memory.py",
        [
            "--topics",
            "4",
            "--mb-per-topic",
            "4",
            "--budget-mb",
            "4",
            "--settle-s",
            "0.2",
            "--data-dir",
            str(tmp_path / "standalone"),
        ],
        timeout_s=150,
    )
    assert report["topics"] == 4 and report["topics_with_idle_subscription"] == 2
    assert report["publish_errors"] == 0 and report["messages"] == 4 * (4 * 2**20 // 10_000)
    assert report["unread_backlog_mb"] > report["budget_mb"]
    assert report["within_budget"] is True, report
    assert report["rss_peak_mb"] >= report["rss_before_mb"] > 0


def test_backlog_drain_smoke_drains_in_order_while_publishing() -> None:
    report = _run_bench(
        "backlog_drain.py",
        ["--messages", "3000", "--idle-s", "1.5", "--publish-during"],
        timeout_s=150,
    )
    assert report["messages"] == 3000 and report["publish_errors"] == 0
    assert report["out_of_order"] == 0
    assert isinstance(report["published_during_drain"], int)
    assert report["published_during_drain"] >= 0, report
    assert report["drain_msgs_per_s"] > 0
