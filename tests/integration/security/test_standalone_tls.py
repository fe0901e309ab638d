"""``magnetar standalone`` with TLS from a config file, end to end: ``bench/perf.py --tls``
(a short functional run at a low fixed rate, no timing assertion) starts it with a fresh
test CA and both official-client workers produce and consume over ``pulsar+ssl://``."""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys

import pytest

pytestmark = pytest.mark.integration
PERF = pathlib.Path(__file__).resolve().parents[3] / "bench" / "perf.py"


def test_perf_tls_runs_over_pulsar_ssl(tmp_path: pathlib.Path) -> None:
    cmd = [
        sys.executable,
        str(PERF),
        "--tls",
        "--seconds",
        "2",
        "--rate",
        "200",
        "--warmup-seconds",
        "0.5",
        "--drain-seconds",
        "20",
        "--data-dir",
        str(tmp_path / "standalone"),
    ]
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
    assert "pulsar+ssl://127.0.0.1:" in text  # the clients were given the TLS URL
    report = json.loads([line for line in text.splitlines() if line.strip()][-1])
    assert report["tls"] is True
    assert report["sent_total"] > 0
    assert report["received_total"] == report["sent_total"]
    assert report["publish_errors"] == 0
