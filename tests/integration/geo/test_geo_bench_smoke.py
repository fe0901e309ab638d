"""Smoke test of ``bench/geo_perf.py``: a short run on its own two standalones prints its
command, then one JSON line with the documented figures; every message arrived once. No
timing assertion (figures belong to ``make bench``)."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

GEO_PERF = pathlib.Path(__file__).resolve().parents[3] / "bench" / "geo_perf.py"
FIGURES = {
    "lag_p50_ms",
    "lag_p99_ms",
    "lag_max_ms",
    "publish_rate",
    "replication_rate",
    "replication_vs_local",
    "catch_up_rate",
    "catch_up_transfer_rate",
    "reconnect_s",
    "backlog_entries_in_east",
}


def test_geo_perf_smoke() -> None:
    done = subprocess.run(
        [sys.executable, str(GEO_PERF), "--rate", "300", "--seconds", "1", "--backlog", "3000"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    assert lines[0].startswith("command: ") and "geo_perf.py" in lines[0]
    report = json.loads(lines[-1])
    assert report.keys() >= FIGURES
    assert report["messages"] == 300 and report["duplicates"] == 0
    assert report["catch_up_exactly_once"] and report["catch_up_stored"] == 3000
    assert report["backlog_entries_in_east"] > 0  # kept for west while it was down
