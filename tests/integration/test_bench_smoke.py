"""Smoke test of ``bench/perf.py``: a short run at a low fixed rate against the standalone
it starts itself, with the official client. It checks the report's shape (the last line is one
JSON object with the documented figures) and that every produced message was consumed; it
makes no timing assertion (performance belongs in ``make bench``).
"""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys

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
