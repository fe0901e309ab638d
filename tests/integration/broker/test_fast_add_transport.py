"""The broker's adds travel over the transport configured, end to end: a standalone (real
bookie process on disk, managed ledgers) with the official client publishing and consuming,
once with the bookies' fast add port (the default) and once with gRPC only
(``bookkeeper_fast_add_enabled=false``). The bookie's per-transport batch counter
(``bookie_fast_add_BATCH_count`` against ``bookkeeper_server_ADD_BATCH_count``) shows which one
carried them: the fast run fails if the broker silently fell back to gRPC."""

from __future__ import annotations

import pathlib
import urllib.request

import pulsar
import pytest
from support.metrics import sample
from support.net import free_port
from support.standalone import StandaloneProcess
from support.waiting import wait_until


@pytest.mark.parametrize("fast", [True, False], ids=["fast-add", "grpc"])
def test_publishes_travel_over_the_configured_add_transport(
    tmp_path: pathlib.Path, fast: bool
) -> None:
    http_port = free_port()
    proc = StandaloneProcess(
        tmp_path / "data",
        tmp_path / "log",
        extra_args=["--bookie-http-port", str(http_port)],
        config={"bookkeeper_fast_add_enabled": "true" if fast else "false"},
    )
    proc.start(timeout_s=90)
    try:
        topic = f"persistent://public/default/fast-add-{fast}"
        client = pulsar.Client(proc.service_url, log_conf_file_path=None)
        consumer = client.subscribe(topic, "sub")
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(50):
            producer.send(f"m{i}".encode())  # each one awaited: a lone add per message
        got = [consumer.receive(timeout_millis=10_000).data() for _ in range(50)]
        assert got == [f"m{i}".encode() for i in range(50)]
        client.close()
        text = ""

        def counted() -> bool:
            nonlocal text
            with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/metrics", timeout=10) as r:
                text = r.read().decode()
            return (sample(text, "bookkeeper_server_ADD_BATCH_count") or 0) >= 50

        wait_until(counted, 30, "the bookie counts the batches added")
        batches = sample(text, "bookkeeper_server_ADD_BATCH_count") or 0
        fast_batches = sample(text, "bookie_fast_add_BATCH_count") or 0
        if fast:
            # the managed ledger's adds (topic and cursor ledgers) all took the fast port
            assert fast_batches == batches, (fast_batches, batches)
        else:
            assert fast_batches == 0
    finally:
        proc.stop()
