"""``bench/perf.py`` functional smoke runs (no timing asserted): the side-by-side mode over
several clients with ``magnetar.client``'s throughput API (``send_batch``, ``receive_batch``,
acknowledging whole batches), and the sequential synchronous-publish latency mode."""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys

PERF = pathlib.Path(__file__).resolve().parents[2] / "bench" / "perf.py"


def _run(args: list[str], timeout_s: float) -> tuple[dict[str, object], str]:
    proc = subprocess.Popen(
        [sys.executable, str(PERF), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # on timeout the bench, its workers and standalone die together
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
    return json.loads(lines[-1]), text


def test_side_by_side_runs_each_client_with_the_batch_api() -> None:
    report, text = _run(
        ["--client", "magnetar,raw", "--seconds", "1", "--warmup-seconds", "0.5"], 240
    )
    assert set(report["side_by_side"]) == {"magnetar", "raw"}  # type: ignore[arg-type]
    runs = report["runs"]
    assert [r["client"] for r in runs] == ["magnetar", "raw"]  # type: ignore[index, union-attr]
    for run in runs:  # type: ignore[union-attr]
        assert run["missing"] == 0, text
        assert run["publish_errors"] == 0, text
        assert run["consumer_errors"] == 0, text
        assert run["received_total"] == run["sent_total"] > 0, text
    assert runs[0]["magnetar_api"] == "batch"  # type: ignore[index]


def test_sync_publishes_report_one_latency_per_publish() -> None:
    report, text = _run(
        ["--client", "magnetar", "--sync-publishes", "50", "--seconds", "2", "--consumers", "1"],
        180,
    )
    assert report["publish_latency_samples"] == 50, text
    assert report["batching"] is False
    assert report["missing"] == 0, text
