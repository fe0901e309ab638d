"""A standalone's bookies serve BookKeeper-named metrics (``--bookie-http-port``), parsed
with ``prometheus_client.parser`` after traffic from the official client; the Grafana
dashboard in ``deploy/grafana/magnetar.json`` uses only names the broker and bookies export."""

from __future__ import annotations

import json
import pathlib
import re
import urllib.request

import pulsar
from support.metrics import families, sample
from support.net import free_port
from support.standalone import StandaloneProcess
from support.waiting import wait_until

BOOKKEEPER_NAMES = (
    "bookie_SERVER_STATUS",
    "bookie_WRITE_BYTES",
    "bookie_READ_BYTES",
    "bookie_ledgers_count",
    "bookie_journal_JOURNAL_WRITE_BYTES",
    "bookie_journal_JOURNAL_SYNC_count",
    "bookie_journal_JOURNAL_QUEUE_SIZE",
    "bookkeeper_server_ADD_ENTRY_count",
    "bookkeeper_server_READ_ENTRY_count",
)


DASHBOARD = pathlib.Path(__file__).parents[3] / "deploy" / "grafana" / "magnetar.json"
METRIC_NAME = re.compile(r"(?<![$\w])((?:pulsar|bookie|bookkeeper|process)_[A-Za-z0-9_]+)")


def _exposed_names(text: str) -> set[str]:
    """Sample names exactly as written in the exposition text (what PromQL selects), and the
    gauges declared without a sample yet (``pulsar_replication_*`` of a broker that
    replicates nothing: ``tests/integration/geo`` checks their samples)."""
    samples = {
        line.split("{")[0].split(" ")[0]
        for line in text.splitlines()
        if line and not line.startswith("#")
    }
    declared = {
        line.split()[2]
        for line in text.splitlines()
        if line.startswith("# TYPE ") and line.split()[2].startswith("pulsar_replication_")
    }
    return samples | declared


def _dashboard_names() -> set[str]:
    data = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in data["panels"] for t in p.get("targets", [])]
    exprs += [
        v["query"]["query"]
        for v in data["templating"]["list"]
        if "query" in v and isinstance(v["query"], dict)
    ]
    return {m for e in exprs for m in METRIC_NAME.findall(e)}


def test_bookie_metrics_of_a_standalone(tmp_path: pathlib.Path) -> None:
    http_port = free_port()
    proc = StandaloneProcess(
        tmp_path / "data", tmp_path / "log", extra_args=["--bookie-http-port", str(http_port)]
    )
    proc.start(timeout_s=90)
    try:
        client = pulsar.Client(proc.service_url, log_conf_file_path=None)
        consumer = client.subscribe("persistent://public/default/bk-metrics", "dash")
        producer = client.create_producer("persistent://public/default/bk-metrics")
        for i in range(10):
            producer.send(b"x" * 100 + str(i).encode())
        consumer.acknowledge(consumer.receive(timeout_millis=10_000))
        text = ""

        def written() -> bool:
            nonlocal text
            with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/metrics", timeout=10) as r:
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
        with urllib.request.urlopen(proc.web_url + "/metrics", timeout=10) as r:
            broker_text = r.read().decode()
        client.close()
        exposed = _exposed_names(text) | _exposed_names(broker_text)
        wanted = _dashboard_names()
        assert len(wanted) > 30
        assert wanted <= exposed, f"the dashboard uses names nobody exports: {wanted - exposed}"
    finally:
        proc.stop()
