"""deploy/compose.yaml on the real engine with Debian's docker-compose (1.29, the compose
spec without ``name:``): validated by compose itself, brought up on free ports, used by the
official client, taken down with its volumes."""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import pulsar
import pytest
from support.containers import drain, free_ports
from support.waiting import wait_until

COMPOSE_FILE = pathlib.Path(__file__).resolve().parents[2] / "deploy" / "compose.yaml"


def _compose() -> list[str]:
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    pytest.skip("docker-compose is not installed (make test installs Debian's)")


def _run(cmd: list[str], env: dict[str, str], timeout: float = 600) -> str:
    result = subprocess.run(
        cmd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert result.returncode == 0, f"{' '.join(cmd)}:\n{result.stdout}\n{result.stderr}"
    return result.stdout


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return bool(r.status == 200)
    except OSError:
        return False


@pytest.fixture
def compose_env(images: dict[str, str]) -> Iterator[tuple[list[str], dict[str, str]]]:
    ports = free_ports(14)
    names = [
        "ZOOKEEPER_PORT", "BOOKIE_PORT_0", "BOOKIE_PORT_1", "BOOKIE_PORT_2",
        "BOOKIE_HTTP_PORT_0", "BOOKIE_HTTP_PORT_1", "BOOKIE_HTTP_PORT_2",
        "BOOKIE_FAST_ADD_PORT_0", "BOOKIE_FAST_ADD_PORT_1", "BOOKIE_FAST_ADD_PORT_2",
        "BROKER_PORT_0", "BROKER_PORT_1", "WEB_PORT_0", "WEB_PORT_1",
    ]  # fmt: skip
    env = {
        **os.environ,
        **{name: str(port) for name, port in zip(names, ports, strict=True)},
        "IMAGE": images["magnetar"],
        "ZOOKEEPER_IMAGE": images["zookeeper"],
    }
    cmd = [*_compose(), "-p", f"mc{uuid.uuid4().hex[:8]}", "-f", str(COMPOSE_FILE)]
    try:
        yield cmd, env
    finally:
        subprocess.run(
            [*cmd, "down", "-v", "-t", "30"], env=env, capture_output=True, timeout=300, check=False
        )


def test_compose_file_is_valid_for_compose(compose_env: tuple[list[str], dict[str, str]]) -> None:
    cmd, env = compose_env
    _run([*cmd, "config", "-q"], env)


def test_compose_cluster_serves_the_official_client(
    compose_env: tuple[list[str], dict[str, str]], engine: Any
) -> None:
    cmd, env = compose_env
    _run([*cmd, "up", "-d"], env)
    for port in (env["WEB_PORT_0"], env["WEB_PORT_1"]):
        wait_until(
            lambda p=port: _healthy(f"http://127.0.0.1:{p}/admin/v2/brokers/health"),
            240,
            f"broker on web port {port}",
        )
    init = [c for c in engine.containers.list(all=True) if c.name.endswith("_init_1")]
    project = cmd[cmd.index("-p") + 1]
    init = [c for c in init if c.name.startswith(project)]
    assert init and init[0].attrs["State"]["ExitCode"] == 0
    url = f"pulsar://127.0.0.1:{env['BROKER_PORT_0']},127.0.0.1:{env['BROKER_PORT_1']}"
    client = pulsar.Client(url, operation_timeout_seconds=60)
    try:
        topic = f"persistent://public/default/compose-{uuid.uuid4().hex[:8]}"
        consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
        producer = client.create_producer(topic)
        sent = [f"c-{i}".encode() for i in range(100)]
        for payload in sent:
            producer.send(payload)
        assert drain(consumer, sent, 60) == set()
    finally:
        client.close()
