"""A real ZooKeeper server for tests, started from the Debian package's jars.

Owns: ``ZooKeeperServer`` (one standalone ZooKeeper JVM on 127.0.0.1, a free port and a
temporary data dir; ``start``/``stop``/``restart`` on the same port/``kill``) and the
session-scoped ``zookeeper_server`` fixture (registered in ``support/fixtures.py``).
Readiness is a polled ``ruok`` four-letter command, never a sleep.

Every process started here is killed at teardown. Tests that stop or restart the server
must use their own ``ZooKeeperServer`` (the ``zookeeper_server_factory`` fixture), not the
shared session one.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import shutil
import signal
import socket
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from support.net import free_port
from support.waiting import wait_until

_JAR_CANDIDATES = (
    "/usr/share/zookeeper/zookeeper.jar",
    "/usr/share/java/zookeeper.jar",
)
_CONF_DIR = "/etc/zookeeper/conf"


def find_zookeeper_jar() -> str | None:
    for jar in _JAR_CANDIDATES:
        if os.path.exists(jar):
            return jar
    return None


def zookeeper_missing_reason() -> str | None:
    """None when a ZooKeeper server can be started here, else why not."""
    if find_zookeeper_jar() is None:
        return (
            "ZooKeeper jar not found (apt-get install zookeeper; looked in "
            + ", ".join(_JAR_CANDIDATES)
            + ")"
        )
    if shutil.which("java") is None:
        return "java not found (apt-get install default-jre-headless)"
    return None


def _die_with_parent_prefix() -> list[str]:
    """A command prefix that SIGKILLs the child when the thread that started it dies, so a
    test run killed hard (SIGKILL, os._exit) leaves no orphan JVM. Start servers from the
    main thread or a long-lived one (an executor thread of ``asyncio.to_thread`` is fine).
    ``setpriv`` (util-linux) sets it; without it, no prefix."""
    setpriv = shutil.which("setpriv")
    return [setpriv, "--pdeathsig", "KILL", "--"] if setpriv else []


def four_letter(host: str, port: int, command: str, timeout_s: float = 1.0) -> str:
    """Send a ZooKeeper four-letter command; return the reply ('' when unreachable)."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as sock:
            sock.sendall(command.encode())
            chunks = []
            while True:
                data = sock.recv(4096)
                if not data:
                    break
                chunks.append(data)
            return b"".join(chunks).decode(errors="replace")
    except OSError:
        return ""


class ZooKeeperServer:
    """One standalone ZooKeeper on ``127.0.0.1:<port>``."""

    def __init__(
        self,
        *,
        port: int | None = None,
        data_dir: pathlib.Path | None = None,
        tick_time_ms: int = 1000,
        max_session_timeout_ms: int | None = None,
        host: str = "127.0.0.1",
    ) -> None:
        reason = zookeeper_missing_reason()
        if reason is not None:
            raise RuntimeError(reason)
        self.host = host
        self.port = port or free_port(host)
        self.tick_time_ms = tick_time_ms
        # ZooKeeper's own default is 20 ticks; a restart test raises it to outlast a slow JVM.
        self.max_session_timeout_ms = max_session_timeout_ms or 20 * tick_time_ms
        self._own_dir = data_dir is None
        self.base_dir = (
            pathlib.Path(tempfile.mkdtemp(prefix="magnetar-zk-")) if data_dir is None else data_dir
        )
        self.data_dir = self.base_dir / "data"
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.config_path = self.base_dir / "zoo.cfg"
        self.log_path = self.base_dir / "zookeeper.log"
        self._process: subprocess.Popen[bytes] | None = None
        self._write_config()

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"<ZooKeeperServer {self.host}:{self.port} {state}>"

    @property
    def connect_string(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def url(self) -> str:
        """The metadata URL for ``open_metadata_store``."""
        return f"zk://{self.host}:{self.port}"

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    def _write_config(self) -> None:
        # Minimum session timeout is 2 x tickTime: 1000 ms ticks allow 2 s sessions in tests.
        self.config_path.write_text(
            "\n".join(
                [
                    f"tickTime={self.tick_time_ms}",
                    f"maxSessionTimeout={self.max_session_timeout_ms}",
                    f"dataDir={self.data_dir}",
                    f"clientPort={self.port}",
                    f"clientPortAddress={self.host}",
                    "admin.enableServer=false",
                    "4lw.commands.whitelist=ruok,srvr,stat,cons",
                    "maxClientCnxns=200",
                    "autopurge.purgeInterval=0",
                    "",
                ]
            )
        )

    def start(self, timeout_s: float = 30.0) -> None:
        if self.running:
            return
        jar = find_zookeeper_jar()
        assert jar is not None
        classpath = f"{jar}:/usr/share/java/*:{_CONF_DIR}"
        cmd = [
            *_die_with_parent_prefix(),
            "java",
            "-Xmx256m",
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            "-Dzookeeper.admin.enableServer=false",
            "-cp",
            classpath,
            "org.apache.zookeeper.server.quorum.QuorumPeerMain",
            str(self.config_path),
        ]
        log = self.log_path.open("ab")
        try:
            self._process = subprocess.Popen(
                cmd,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        finally:
            log.close()
        self.wait_ready(timeout_s)

    def wait_ready(self, timeout_s: float = 30.0) -> None:
        def ready() -> bool:
            if self._process is not None and self._process.poll() is not None:
                raise RuntimeError(
                    f"ZooKeeper exited with {self._process.returncode}; log:\n{self.log_tail()}"
                )
            # ruok answers before the server accepts sessions; srvr needs it serving.
            return four_letter(self.host, self.port, "ruok", 0.5) == "imok" and "Mode:" in (
                four_letter(self.host, self.port, "srvr", 0.5)
            )

        wait_until(ready, timeout_s, lambda: f"ZooKeeper ready; log:\n{self.log_tail()}")

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "<no log>"

    def stop(self, timeout_s: float = 10.0) -> None:
        """Graceful stop (SIGTERM, then SIGKILL); the data dir is kept."""
        self._terminate(signal.SIGTERM, timeout_s)

    def kill(self) -> None:
        """SIGKILL the server; the data dir is kept (its log may be mid-write)."""
        self._terminate(signal.SIGKILL, 10.0)

    def _terminate(self, sig: signal.Signals, timeout_s: float) -> None:
        proc = self._process
        if proc is None:
            return
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, sig)
            try:
                proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout_s)
        self._process = None
        # The port must be free again before a restart binds it.
        wait_until(
            lambda: not four_letter(self.host, self.port, "ruok", 0.2), timeout_s, "the port free"
        )

    def restart(self, timeout_s: float = 30.0) -> None:
        """Stop, then start again on the same port with the same data."""
        self.stop()
        self.start(timeout_s)

    def close(self) -> None:
        """Kill the server and remove its directory when this object created it (kept when
        ``MAGNETAR_KEEP_ZK_DIR`` is set, for post-mortems)."""
        self.kill()
        if self._own_dir and not os.environ.get("MAGNETAR_KEEP_ZK_DIR"):
            shutil.rmtree(self.base_dir, ignore_errors=True)

    def __enter__(self) -> ZooKeeperServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@pytest.fixture(scope="session")
def zookeeper_server() -> Iterator[ZooKeeperServer]:
    """One real ZooKeeper for the whole test run (shared: do not stop it in a test).

    Tests isolate themselves by using a unique chroot, e.g.
    ``open_metadata_store(f"{zookeeper_server.url}/{uuid}")``.
    """
    reason = zookeeper_missing_reason()
    if reason is not None:
        pytest.skip(reason)
    server = ZooKeeperServer()
    try:
        server.start()
        yield server
    finally:
        server.close()


@pytest.fixture
def zookeeper_server_factory() -> Iterator[Callable[..., ZooKeeperServer]]:
    """Start private ZooKeeper servers (for tests that stop/kill them); all killed at teardown.
    Keyword arguments go to ``ZooKeeperServer``."""
    reason = zookeeper_missing_reason()
    if reason is not None:
        pytest.skip(reason)
    servers: list[ZooKeeperServer] = []

    def make(**options: Any) -> ZooKeeperServer:
        server = ZooKeeperServer(**options)
        servers.append(server)
        server.start()
        return server

    try:
        yield make
    finally:
        for server in servers:
            server.close()
