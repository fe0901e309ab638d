"""The server processes print their effective configuration at start (INFO, secrets
masked), take MAGNETAR_* variables, and exit 0 on SIGTERM, also while still starting."""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
import threading
import urllib.request
import uuid
from collections.abc import Callable

from support.net import free_port
from support.waiting import wait_until
from support.zookeeper import ZooKeeperServer

from magnetar.broker.cli import SUBCOMMANDS, build_parser
from magnetar.broker.healthcheck import check_process


def _start(argv: list[str], env: dict[str, str]) -> tuple[subprocess.Popen[str], list[str]]:
    proc = subprocess.Popen(
        [sys.executable, "-m", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, **env},
    )
    lines: list[str] = []

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)

    threading.Thread(target=pump, daemon=True).start()
    return proc, lines


def _wait_for(
    lines: list[str], text: str, proc: subprocess.Popen[str], timeout_s: float = 60
) -> str:

    def seen() -> str | None:
        found = next((line for line in list(lines) if text in line), None)
        assert found is not None or proc.poll() is None, "".join(lines)[-3000:]
        return found

    return wait_until(seen, timeout_s, f"{text!r} in the output")


def _effective(line: str) -> dict[str, object]:
    start = line.index("effective configuration ") + len("effective configuration ")
    text = line[start:].strip()
    if text.startswith("{") and text.endswith('}"'):
        text = text[:-1]
    return dict(json.loads(text.replace('\\"', '"')))


def test_broker_prints_masked_effective_config_and_exits_0_on_sigterm(
    zookeeper_server: ZooKeeperServer,
) -> None:
    port, web = free_port(), free_port()
    metadata = f"{zookeeper_server.url}/settings-{uuid.uuid4().hex[:8]}"
    proc, lines = _start(
        ["magnetar.broker.cli", "broker"],
        {
            # a shared store: a broker refuses one private to its process
            "MAGNETAR_METADATA_STORE_URL": metadata,
            "MAGNETAR_BROKER_SERVICE_PORT": str(port),
            "MAGNETAR_WEB_SERVICE_PORT": str(web),
            "MAGNETAR_CLUSTER_NAME": "from-env",
        },
    )
    try:
        shown = _effective(_wait_for(lines, "effective configuration", proc))
        assert shown["broker_service_port"] == port
        assert shown["cluster_name"] == "from-env"
        _wait_for(lines, "Magnetar broker is ready", proc)
        # The image's HEALTHCHECK reads the process's command line and environment.
        ok, detail = check_process(proc.pid, {s.name for s in SUBCOMMANDS}, build_parser)
        assert ok, detail
        assert f":{web}/admin/v2/brokers/health: 200" in detail
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0, "".join(lines)[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()


def test_broker_stopped_while_waiting_for_zookeeper_exits_0() -> None:
    # Nothing listens on this port: the broker is still connecting when SIGTERM comes.
    proc, lines = _start(
        ["magnetar.broker.cli", "broker", "--metadata", f"zk://127.0.0.1:{free_port()}"],
        {
            "MAGNETAR_BROKER_SERVICE_PORT": str(free_port()),
            "MAGNETAR_WEB_SERVICE_PORT": str(free_port()),
        },
    )
    try:
        _wait_for(lines, "connecting to the metadata store", proc)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0, "".join(lines)[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()


def test_bookie_prints_masked_effective_config_and_exits_0_on_sigterm(
    tmp_path: pathlib.Path,
) -> None:
    proc, lines = _start(
        ["magnetar.bookie", "--storage", "memory", "--metadata", "none"],
        {
            "MAGNETAR_BOOKIE_PORT": str(free_port()),
            "MAGNETAR_BOOKIE_LOG_FORMAT": "json",
            "MAGNETAR_BOOKIE_DATA_DIR": str(tmp_path / "bookie"),
            "MAGNETAR_BOOKIE_HTTP_PORT": str(free_port()),
        },
    )
    try:
        line = _wait_for(lines, "effective configuration", proc)
        shown = json.loads(json.loads(line)["msg"].removeprefix("effective configuration "))
        assert shown["storage"] == "memory"
        assert shown["log_format"] == "json"
        _wait_for(lines, "bookie started", proc)
        ok, detail = check_process(proc.pid, {s.name for s in SUBCOMMANDS}, build_parser)
        assert ok and "/health: 200" in detail and '"serving": true' in detail, detail
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0, "".join(lines)[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()


def test_broker_stopped_after_losing_zookeeper_still_exits_0(
    zookeeper_server_factory: Callable[[], ZooKeeperServer],
) -> None:
    """``docker stop`` of a whole cluster stops ZooKeeper and brokers together: a broker
    that cannot release its bundles (the session goes with it anyway) still exits 0."""
    zk = zookeeper_server_factory()
    port, web = free_port(), free_port()
    proc, lines = _start(
        ["magnetar.broker.cli", "broker", "--metadata", zk.url],
        {"MAGNETAR_BROKER_SERVICE_PORT": str(port), "MAGNETAR_WEB_SERVICE_PORT": str(web)},
    )
    try:
        _wait_for(lines, "Magnetar broker is ready", proc)
        # Owning a bundle makes shutdown write to the metadata store.
        with urllib.request.urlopen(
            f"http://127.0.0.1:{web}/lookup/v2/topic/persistent/public/default/t", timeout=30
        ):
            pass
        zk.kill()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0, "".join(lines)[-3000:]
        assert "Traceback" not in "".join(lines)
    finally:
        if proc.poll() is None:
            proc.kill()
