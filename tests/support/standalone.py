"""A real ``magnetar standalone`` process for tests: start, SIGKILL, restart on the same data.

Owns: ``StandaloneProcess`` (free ports chosen once, so a restart keeps the service URL and
the bookie identity) and the ``standalone_factory`` fixture, which kills every process it
started. Readiness = the HTTP health check answering ``ok``, polled with a deadline.
"""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from support.net import free_port
from support.waiting import wait_until


class StandaloneProcess:
    def __init__(
        self,
        data_dir: pathlib.Path,
        log_path: pathlib.Path,
        *,
        bookies: int = 1,
        extra_args: Sequence[str] = (),
        config: dict[str, object] | None = None,
        token: str | None = None,
        authorization: str | None = None,
        environ: dict[str, str] | None = None,
    ) -> None:
        self.data_dir = data_dir
        self.environ = dict(environ or {})
        """Environment variables the standalone gets beside this process's."""
        self.token = token  # for the health check when authentication is on
        self.authorization = authorization  # ... or this Authorization header (Basic)
        self.extra_args = list(extra_args)
        self.config = config or {}
        """Broker settings (broker.conf names), written to a ``--config`` file."""
        self.log_path = log_path
        self.port = free_port()
        self.web_port = free_port()
        self.bookie_port = free_port()
        self.bookies = bookies
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def service_url(self) -> str:
        return f"pulsar://127.0.0.1:{self.port}"

    @property
    def web_url(self) -> str:
        return f"http://127.0.0.1:{self.web_port}"

    def start(self, timeout_s: float = 60.0) -> StandaloneProcess:
        cmd = [
            sys.executable,
            "-m",
            "magnetar.broker.cli",
            "standalone",
            "--data-dir",
            str(self.data_dir),
            "--port",
            str(self.port),
            "--web-port",
            str(self.web_port),
            "--bookie-port",
            str(self.bookie_port),
            "--bookies",
            str(self.bookies),
            "--advertised-address",
            "127.0.0.1",
            *self.extra_args,
        ]
        if self.config:
            conf = self.log_path.with_suffix(".conf")
            conf.write_text("".join(f"{k}={v}\n" for k, v in self.config.items()))
            cmd += ["--config", str(conf)]
        log = open(self.log_path, "ab")  # noqa: SIM115 - owned by the child for its lifetime
        env = {**os.environ, **self.environ} if self.environ else None
        self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
        log.close()
        proc = self.proc

        def healthy() -> bool:
            if proc.poll() is not None:
                raise RuntimeError(f"standalone exited with {proc.returncode}:\n{self.log_tail()}")
            return self.healthy()

        wait_until(
            healthy, timeout_s, lambda: f"standalone healthy:\n{self.log_tail()}", interval_s=0.1
        )
        return self

    def healthy(self) -> bool:
        try:
            header = f"Bearer {self.token}" if self.token else self.authorization
            auth = {"Authorization": header} if header else {}
            req = urllib.request.Request(f"{self.web_url}/admin/v2/brokers/health", headers=auth)
            with urllib.request.urlopen(req, timeout=1) as r:
                return bool(r.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def kill(self) -> None:
        """SIGKILL the standalone process; its bookie children die with it (PDEATHSIG)."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        self._wait_bookie_port_free()

    def stop(self) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._wait_bookie_port_free()
        return self.proc.returncode

    def _wait_bookie_port_free(self, timeout_s: float = 15.0) -> None:
        """The bookie child dies asynchronously after its parent; wait until it is gone."""
        import socket

        def port_free() -> bool:
            with socket.socket() as s:
                return s.connect_ex(("127.0.0.1", self.bookie_port)) != 0

        wait_until(port_free, timeout_s, "the standalone's bookie child gone")

    def log_tail(self, lines: int = 60) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


class StandaloneFactory:
    def __init__(self, base: pathlib.Path) -> None:
        self.base = base
        self.started: list[StandaloneProcess] = []

    def create(self, name: str = "standalone", **kwargs: Any) -> StandaloneProcess:
        proc = StandaloneProcess(self.base / name, self.base / f"{name}.log", **kwargs)
        self.started.append(proc)
        return proc

    def close(self) -> None:
        for proc in self.started:
            if proc.proc is not None and proc.proc.poll() is None:
                proc.proc.kill()
                proc.proc.wait(10)


@pytest.fixture
def standalone_factory(tmp_path: pathlib.Path) -> Iterator[StandaloneFactory]:
    factory = StandaloneFactory(tmp_path)
    yield factory
    factory.close()
