"""The ``magnetar`` command's answers to common mistakes (issue 12 §5).

- ``magnetar --version`` prints the version.
- ``magnetar broker`` without a shared metadata store refuses to start, saying what to pass.
- A second ``magnetar standalone`` on a data dir in use says so, with the holder's pid.
- ``--log-level`` reaches the standalone's bookie child.
- A broker whose cluster has no bookie answers producers with the cause, logged as one line.
"""

from __future__ import annotations

import pathlib
import subprocess
import sys
import uuid

import pytest
from support.broker_process import BrokerProcess
from support.standalone import StandaloneFactory, StandaloneProcess
from support.zookeeper import ZooKeeperServer

import magnetar
from magnetar.client import PulsarException
from magnetar.client import sync as magnetar_client

MAGNETAR = [sys.executable, "-m", "magnetar.broker.cli"]


def _run(*args: str, timeout_s: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*MAGNETAR, *args], capture_output=True, text=True, timeout=timeout_s, check=False
    )


def test_version() -> None:
    got = _run("--version")
    assert got.returncode == 0, got.stderr
    assert got.stdout.strip() == f"magnetar {magnetar.__version__}"


@pytest.mark.parametrize("metadata", [None, "memory://x", "embedded-file:///tmp/x"])
def test_broker_without_a_shared_metadata_store_refuses_to_start(metadata: str | None) -> None:
    args = ["broker", "--port", "0", "--web-port", "0"]
    if metadata is not None:
        args += ["--metadata", metadata]
    got = _run(*args)
    assert got.returncode == 2
    assert "ready" not in got.stdout
    assert "--metadata zk://" in got.stderr or "needs zk://" in got.stderr
    assert "Traceback" not in got.stderr


def test_second_standalone_on_the_same_data_dir_says_it_is_in_use(
    standalone_factory: StandaloneFactory, tmp_path: pathlib.Path
) -> None:
    first = standalone_factory.create("sa").start()
    assert first.proc is not None
    second = StandaloneProcess(first.data_dir, tmp_path / "second.log")
    with pytest.raises(RuntimeError) as failed:
        second.start(timeout_s=60)
    assert second.proc is not None and second.proc.returncode == 1
    message = str(failed.value)
    assert f"data dir {first.data_dir} is in use by pid {first.proc.pid}" in message
    assert "Traceback" not in message and "LOCK" not in message
    assert first.healthy()


def test_log_level_reaches_the_standalone_bookie(standalone_factory: StandaloneFactory) -> None:
    sa = standalone_factory.create(extra_args=["--log-level", "WARNING"]).start()
    assert sa.stop() == 0
    log = sa.log_path.read_text(errors="replace")
    assert "Magnetar standalone is ready" in log
    assert "level=INFO" not in log, [line for line in log.splitlines() if "level=INFO" in line]


def test_producer_on_a_cluster_without_bookies_gets_the_cause(
    zookeeper_server: ZooKeeperServer,
    broker_processes: list[BrokerProcess],
    tmp_path: pathlib.Path,
) -> None:
    metadata = f"{zookeeper_server.url}/no-bookies-{uuid.uuid4().hex[:8]}"
    broker = BrokerProcess(tmp_path, "broker", metadata).start()
    broker_processes.append(broker)
    client = magnetar_client.Client(broker.service_url, operation_timeout_seconds=5)
    with client, pytest.raises(PulsarException) as failed:
        client.create_producer("persistent://public/default/nowhere")
    assert "NotEnoughBookies" in str(failed.value)
    log = broker.log_text()
    assert "NotEnoughBookies" in log
    assert "Traceback" not in log
