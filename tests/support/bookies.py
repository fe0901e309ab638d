"""Real bookie processes for tests: start, stop, SIGKILL, SIGSTOP, restart.

Owns: ``BookieProcess`` (one ``python -m magnetar.bookie`` child on 127.0.0.1 with its own
data dir and a fixed free port, so restarts keep the same address and bookie id) and the
``bookie_factory`` fixture (registered in ``support/fixtures.py``) that kills every process it
started at teardown. Readiness is the Health RPC answering ``serving``, polled with a
deadline, never a sleep.

Multi-bookie tests::

    def test_x(zookeeper_server, bookie_factory):
        bookies = bookie_factory.start_many(3, metadata=zookeeper_server.url)
        addresses = [b.address for b in bookies]

Each process writes its log to ``<base>/<name>.log`` (outside the data dir, which must hold
only the bookie's files); ``log_tail()`` shows it in assertion messages.
"""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys
from collections.abc import Iterator, Sequence

import grpc
import pytest

from magnetar.bookie.proto import bookie_pb2 as pb
from magnetar.bookie.proto import bookie_pb2_grpc as pb_grpc
from support.net import free_port
from support.waiting import wait_until


def health(address: str, timeout_s: float = 1.0) -> pb.HealthResponse | None:
    """The bookie's Health answer, or None if it does not answer (blocking, no asyncio)."""
    try:
        with grpc.insecure_channel(address) as channel:
            return pb_grpc.BookieStub(channel).Health(pb.HealthRequest(), timeout=timeout_s)
    except grpc.RpcError:
        return None


class BookieProcess:
    """One bookie child process. ``start``/``stop``/``kill``/``restart`` keep the data dir."""

    def __init__(
        self,
        base_dir: pathlib.Path,
        name: str,
        *,
        metadata: str = "none",
        host: str = "127.0.0.1",
        port: int | None = None,
        bookie_id: str | None = None,
        storage: str = "disk",
        extra_args: Sequence[str] = (),
        data_dir: pathlib.Path | None = None,
        env: dict[str, str] | None = None,
        cli: bool = False,
    ) -> None:
        self.name = name
        self.cli = cli
        """Run as ``magnetar bookie`` (with the auto-recovery daemon beside the bookie)
        instead of ``python -m magnetar.bookie`` (the storage node alone)."""
        self.base_dir = base_dir
        self.data_dir = data_dir or base_dir / name / "data"
        self.log_path = base_dir / f"{name}.log"
        self.metadata = metadata
        self.host = host
        self.port = port or free_port(host)
        self.bookie_id = bookie_id or f"{host}:{self.port}"
        self.storage = storage
        self.extra_args = list(extra_args)
        self.env = env
        self._process: subprocess.Popen[bytes] | None = None
        self.returncode: int | None = None

    def __repr__(self) -> str:
        return f"<BookieProcess {self.name} {self.address} pid={self.pid} {self.state}>"

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    @property
    def state(self) -> str:
        return "running" if self.running else f"stopped rc={self.returncode}"

    def command(self) -> list[str]:
        entry = ["magnetar.broker.cli", "bookie"] if self.cli else ["magnetar.bookie"]
        return [
            sys.executable,
            "-m",
            *entry,
            "--data-dir",
            str(self.data_dir),
            "--metadata",
            self.metadata,
            "--host",
            self.host,
            "--port",
            str(self.port),
            "--bookie-id",
            self.bookie_id,
            "--storage",
            self.storage,
            *self.extra_args,
        ]

    def spawn(self) -> None:
        """Start the process without waiting for it to be healthy."""
        if self.running:
            raise RuntimeError(f"{self} already running")
        self.data_dir.parent.mkdir(parents=True, exist_ok=True)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ)
        if self.env:
            env.update(self.env)
        with self.log_path.open("ab") as log:
            log.write(f"--- start {' '.join(self.command())}\n".encode())
            log.flush()
            self._process = subprocess.Popen(
                self.command(),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env=env,
            )
        self.returncode = None

    def start(self, timeout_s: float = 30.0) -> BookieProcess:
        self.spawn()
        self.wait_healthy(timeout_s)
        return self

    def wait_healthy(self, timeout_s: float = 30.0) -> None:
        def serving() -> bool:
            proc = self._process
            if proc is not None and proc.poll() is not None:
                self.returncode = proc.returncode
                raise RuntimeError(
                    f"bookie {self.name} exited with {proc.returncode}; log:\n{self.log_tail()}"
                )
            resp = health(self.address, 0.5)
            return resp is not None and resp.serving

        wait_until(serving, timeout_s, lambda: f"bookie {self.name} healthy:\n{self.log_tail()}")

    def wait_exit(self, timeout_s: float = 30.0) -> int:
        assert self._process is not None
        self.returncode = self._process.wait(timeout_s)
        return self.returncode

    def stop(self, timeout_s: float = 20.0) -> int | None:
        """SIGTERM (graceful); SIGKILL if it does not exit in time. Returns the exit code."""
        proc = self._process
        if proc is None or proc.poll() is not None:
            return self.returncode if proc is None else proc.returncode
        proc.send_signal(signal.SIGTERM)
        try:
            self.returncode = proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            self.returncode = proc.wait(10)
        return self.returncode

    def kill(self) -> None:
        """SIGKILL: no shutdown code runs."""
        proc = self._process
        if proc is not None and proc.poll() is None:
            proc.kill()
            self.returncode = proc.wait(10)

    def pause(self) -> None:
        if self._process is not None:
            self._process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        if self._process is not None:
            self._process.send_signal(signal.SIGCONT)

    def restart(self, timeout_s: float = 30.0, *, kill: bool = False) -> BookieProcess:
        if kill:
            self.kill()
        else:
            self.stop()
        return self.start(timeout_s)

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:]) or "<no log>"

    def close(self) -> None:
        """Teardown: make sure the process is gone (SIGCONT first in case it is stopped)."""
        proc = self._process
        if proc is not None and proc.poll() is None:
            try:
                proc.send_signal(signal.SIGCONT)
            except ProcessLookupError:
                pass
            proc.kill()
            proc.wait(10)


class BookieFactory:
    """Creates bookie processes under one base dir and kills them all at ``close``."""

    def __init__(self, base_dir: pathlib.Path) -> None:
        self.base_dir = base_dir
        self.bookies: list[BookieProcess] = []

    def create(self, name: str | None = None, **kwargs: object) -> BookieProcess:
        name = name or f"bookie-{len(self.bookies)}"
        bookie = BookieProcess(self.base_dir, name, **kwargs)  # type: ignore[arg-type]
        self.bookies.append(bookie)
        return bookie

    def start(self, name: str | None = None, **kwargs: object) -> BookieProcess:
        return self.create(name, **kwargs).start()

    def start_many(
        self, n: int, *, metadata: str = "none", **kwargs: object
    ) -> list[BookieProcess]:
        """Start ``n`` bookies concurrently (spawn all, then wait for each)."""
        bookies = [self.create(metadata=metadata, **kwargs) for _ in range(n)]
        for b in bookies:
            b.spawn()
        for b in bookies:
            b.wait_healthy()
        return bookies

    def close(self) -> None:
        for b in self.bookies:
            b.close()


@pytest.fixture
def bookie_factory(tmp_path: pathlib.Path) -> Iterator[BookieFactory]:
    factory = BookieFactory(tmp_path / "bookies")
    try:
        yield factory
    finally:
        factory.close()
