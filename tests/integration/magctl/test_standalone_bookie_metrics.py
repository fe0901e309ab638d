"""A standalone's bookies serve BookKeeper-named metrics (``--bookie-http-port``), parsed
with ``prometheus_client.parser`` after traffic from the official client."""

from __future__ import annotations

import pathlib
import urllib.request

import pulsar
from support.admin import wait_until
from support.metrics import families, sample
from support.net import free_port
from support.standalone import StandaloneProcess

BOOKKEEPER_NAMES = (
    "bookie_SERVER_STATUS", "bookie_WRITE_BYTES", "bookie_READ_BYTES", "bookie_ledgers_count",
    "bookie_journal_JOURNAL_WRITE_BYTES", "bookie_journal_JOURNAL_SYNC_count",
    "bookie_journal_JOURNAL_QUEUE_SIZE", "bookkeeper_server_ADD_ENTRY_count",
    "bookkeeper_server_READ_ENTRY_count",
)


def test_bookie_metrics_of_a_standalone(tmp_path: pathlib.Path) -> None:
    http_port = free_port()
    proc = StandaloneProcess(tmp_path / "data", tmp_path / "log",
                             extra_args=["--bookie-http-port", str(http_port)])
    proc.start(timeout_s=90)
    try:
        client = pulsar.Client(proc.service_url, log_conf_file_path=None)
        producer = client.create_producer("persistent://public/default/bk-metrics")
        for i in range(10):
            producer.send(b"x" * 100 + str(i).encode())
        client.close()
        text = ""

        def written() -> bool:
            nonlocal text
            with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/metrics",
                                        timeout=10) as r:
                text = r.read().decode()
            return (sample(text, "bookie_WRITE_BYTES") or 0) >= 1000

        wait_until(written, 30, "bookie_WRITE_BYTES counts the entries written")
        fams = families(text)
        for name in BOOKKEEPER_NAMES:
            assert name in fams, name
            assert fams[name].documentation, name
        assert fams["bookie_WRITE_BYTES"].type == "counter"
        assert sample(text, "bookie_SERVER_STATUS") == 1
        assert (sample(text, "bookie_journal_JOURNAL_SYNC_count") or 0) >= 1
    finally:
        proc.stop()
