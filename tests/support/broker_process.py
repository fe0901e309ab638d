"""Real ``magnetar broker`` processes for tests: start, SIGTERM, SIGKILL, restart, admin calls.

Owns: ``BrokerProcess`` (one ``python -m magnetar.broker.cli broker`` child on 127.0.0.1 with
fixed free ports, so a restart keeps its service URL) and the ``broker_processes`` fixture
(registered in ``support/fixtures.py``) that kills every process it started at teardown.
Readiness is the health endpoint answering, polled with a deadline, never a sleep.

Each process appends its output to ``<base>/<name>.log``; ``log_text()`` reads it back for
assertion messages and for checks on what the broker logged.
"""

from __future__ import annotations

import json
import pathlib
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

from support.net import free_port
from support.waiting import wait_until

DEFAULT_CONFIG = (
    "cluster_name=test\n"
    "managed_ledger_default_ensemble_size=2\n"
    "managed_ledger_default_write_quorum=2\n"
    "managed_ledger_default_ack_quorum=2\n"
    "metadata_store_session_timeout_millis=6000\n"
)


class BrokerProcess:
    """One broker child process; ``start``/``stop``/``kill``/``restart`` keep its ports."""

    def __init__(
        self,
        base: pathlib.Path,
        name: str,
        metadata: str,
        *,
        extra_config: str = "",
        token: str | None = None,
    ) -> None:
        self.name = name
        self.token = token  # sent as "Authorization: Bearer" by the admin helpers
        self.port = free_port()
        self.web_port = free_port()
        self.log_path = base / f"{name}.log"
        config = base / f"{name}.conf"
        config.write_text(DEFAULT_CONFIG + extra_config)
        self.cmd = [
            sys.executable, "-m", "magnetar.broker.cli", "broker",
            "--metadata", metadata, "--config", str(config),
            "--port", str(self.port), "--web-port", str(self.web_port),
            "--advertised-address", "127.0.0.1",
        ]  # fmt: skip
        self.proc: subprocess.Popen[bytes] | None = None

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"<BrokerProcess {self.name} :{self.port} {state}>"

    @property
    def service_url(self) -> str:
        return f"pulsar://127.0.0.1:{self.port}"

    @property
    def web_url(self) -> str:
        return f"http://127.0.0.1:{self.web_port}"

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self, timeout_s: float = 30) -> BrokerProcess:
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                self.cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
        proc = self.proc

        def healthy() -> bool:
            assert proc.poll() is None, self.log_text()[-3000:]
            health = urllib.request.Request(
                f"{self.web_url}/admin/v2/brokers/health", headers=self._auth()
            )
            with urllib.request.urlopen(health, timeout=1):
                return True

        wait_until(
            healthy,
            timeout_s,
            lambda: f"the broker healthy:\n{self.log_text()[-3000:]}",
            interval_s=0.1,
            ignore=(OSError,),
        )
        return self

    def lookup(self, topic_path: str) -> str:
        """The owner's service URL for ``persistent/tenant/ns/topic`` (taking it if unowned)."""
        request = urllib.request.Request(
            f"{self.web_url}/lookup/v2/topic/{topic_path}", headers=self._auth()
        )
        with urllib.request.urlopen(request, timeout=10) as r:
            return str(json.loads(r.read())["brokerUrl"])

    def admin(self, method: str, path: str, body: object = None, timeout_s: float = 30) -> bytes:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            f"{self.web_url}{path}",
            data=data,
            method=method,
            headers={"Content-Type": "application/json", **self._auth()},
        )
        with urllib.request.urlopen(request, timeout=timeout_s) as r:
            return bytes(r.read())

    def _auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    def stop(self, timeout_s: float = 30) -> int:
        """SIGTERM (graceful shutdown: bundles released); the exit code."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout_s)

    def kill(self) -> None:
        """SIGKILL: nothing released; its metadata session expires later."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def restart(self, *, kill: bool = False, timeout_s: float = 30) -> BrokerProcess:
        if kill:
            self.kill()
        elif self.running:
            self.stop()
        return self.start(timeout_s)

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""


@pytest.fixture
def broker_processes() -> Iterator[list[BrokerProcess]]:
    """Append the ``BrokerProcess`` objects a test makes; each is killed at teardown."""
    made: list[BrokerProcess] = []
    yield made
    for b in made:
        b.kill()


__all__ = ["BrokerProcess", "broker_processes"]
