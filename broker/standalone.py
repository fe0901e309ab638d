"""``magnetar standalone``: a whole Magnetar in one command, with no external service.

Owns: the layout of the standalone data dir (``metadata/``, ``bookie-<i>/``), the embedded
metadata server (in this process, persisted, also serving sessions to child processes over
``embedded://127.0.0.1:PORT``), N bookie child processes (so a second core is used; each
dies with its parent through ``PR_SET_PDEATHSIG``), waiting until they are registered, and
the broker runtime in this process. Shutdown runs in reverse: broker, bookies (SIGTERM,
then SIGKILL after a grace period), metadata.
Must not know: broker or bookie internals.

Bookies keep a stable id and port across restarts (``--bookie-port``, default 3181 + i),
because ledger metadata names the bookies holding each ledger. With ``--bookie-http-port``
they serve their BookKeeper-named ``/metrics`` on that port + i.

One standalone per data dir: ``start`` takes an exclusive ``flock`` on
``<data-dir>/standalone.lock`` (holding this process's pid) before opening anything, so a
second one says the directory is in use, and by which pid, instead of failing inside
RocksDB. The lock dies with the process, SIGKILL included.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import fcntl
import logging
import os
import pathlib
import signal
import socket
import subprocess
import sys
import time

from magnetar.broker.config import BrokerConfig
from magnetar.broker.runtime import (
    BrokerRuntime,
    tune_gc_for_serving,
    with_configuration_store,
)
from magnetar.zk import paths
from magnetar.zk.embedded import EmbeddedMetadataServer
from magnetar.zk.store import MetadataStore

log = logging.getLogger(__name__)

_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:  # pragma: no cover - runs in the child before exec
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except OSError:
        pass


class StandaloneError(Exception):
    """Standalone could not start (a bookie failed, ports busy, ...)."""


def _free_port() -> int:
    """A port free on 127.0.0.1 now (the bookie binds it right after)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Standalone:
    def __init__(
        self,
        data_dir: str | os.PathLike[str],
        config: BrokerConfig,
        *,
        num_bookies: int = 1,
        bookie_port: int = 3181,
        bookie_start_timeout_s: float = 30.0,
        log_level: str = "INFO",
        bookie_http_port: int = 0,
        bookie_fast_add_port: int | None = None,
    ) -> None:
        if num_bookies < 1:
            raise ValueError("standalone needs at least one bookie")
        self.data_dir = pathlib.Path(data_dir).absolute()
        ensemble = min(config.managed_ledger_default_ensemble_size, num_bookies)
        write_quorum = min(config.managed_ledger_default_write_quorum, ensemble)
        self.config = config.replace(
            managed_ledger_default_ensemble_size=ensemble,
            managed_ledger_default_write_quorum=write_quorum,
            managed_ledger_default_ack_quorum=min(
                config.managed_ledger_default_ack_quorum, write_quorum
            ),
        )
        self.num_bookies = num_bookies
        self.bookie_port = bookie_port
        self.bookie_http_port = bookie_http_port
        """First bookie's /metrics port (then +1 each); 0 = the bookies serve no HTTP."""
        self.bookie_fast_add_port = bookie_fast_add_port
        """First bookie's fast add port (then +1 each); 0 = none; None = a free port per
        bookie when the broker sends adds there (``bookkeeper_fast_add_enabled``)."""
        self.bookie_start_timeout_s = bookie_start_timeout_s
        self.log_level = log_level
        self._lock_fd: int | None = None
        self.metadata: EmbeddedMetadataServer | None = None
        self.metadata_url = ""
        self.bookies: list[subprocess.Popen[bytes]] = []
        self.runtime: BrokerRuntime | None = None
        self.store: MetadataStore | None = None

    @property
    def service_url(self) -> str:
        assert self.runtime is not None
        return self.runtime.service.namespaces.service_url

    @property
    def web_service_url(self) -> str:
        assert self.runtime is not None
        return f"http://{self.config.advertised_address}:{self.runtime.web_port}"

    async def start(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._lock_fd = _lock_data_dir(self.data_dir)
        self.metadata = EmbeddedMetadataServer(self.data_dir / "metadata")
        self.metadata_url = await self.metadata.start_serving("127.0.0.1", 0)
        store: MetadataStore = self.metadata.connect()
        try:
            for i in range(self.num_bookies):
                self.bookies.append(self._spawn_bookie(i))
            await self._wait_for_bookies(store)
            # with configuration_metadata_store_url: clusters, tenants and policies there
            store = self.store = await with_configuration_store(self.config, store)
            self.runtime = BrokerRuntime(self.config, store)
            await self.runtime.start()
        except BaseException:
            await self.close()
            raise

    def _spawn_bookie(self, index: int) -> subprocess.Popen[bytes]:
        port = self.bookie_port + index
        address = f"127.0.0.1:{port}"
        bookie_dir = self.data_dir / f"bookie-{index}"
        cmd = [
            sys.executable,
            "-m",
            "magnetar.bookie",
            "--metadata",
            self.metadata_url,
            "--data-dir",
            str(bookie_dir),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--bookie-id",
            address,
            "--log-level",
            self.log_level,
            # the storage node only: standalone's bookies share one disk, so re-replicating
            # between them protects nothing
            "--no-auto-recovery-daemon-enabled",
        ]
        if self.bookie_http_port:
            cmd += ["--http-port", str(self.bookie_http_port + index)]
        fast_add_port = self.bookie_fast_add_port
        if fast_add_port is None:
            fast_add_port = _free_port() if self.config.bookkeeper_fast_add_enabled else 0
        elif fast_add_port:
            fast_add_port += index
        if fast_add_port:
            cmd += ["--fast-add-port", str(fast_add_port)]
        log.info("starting bookie %d: %s", index, " ".join(cmd))
        return subprocess.Popen(cmd, preexec_fn=_die_with_parent)  # noqa: PLW1509

    async def _wait_for_bookies(self, store: object) -> None:
        assert self.metadata is not None
        session = self.metadata.connect()
        deadline = time.monotonic() + self.bookie_start_timeout_s
        try:
            while True:
                for i, proc in enumerate(self.bookies):
                    code = proc.poll()
                    if code is not None:
                        raise StandaloneError(
                            f"bookie {i} exited with code {code} during start (see its log above)"
                        )
                registered = [
                    c for c in await session.children(paths.AVAILABLE_BOOKIES) if c != "readonly"
                ]
                if len(registered) >= self.num_bookies:
                    log.info("bookies registered: %s", ", ".join(registered))
                    return
                if time.monotonic() > deadline:
                    raise StandaloneError(
                        f"only {len(registered)} of {self.num_bookies} bookies registered "
                        f"within {self.bookie_start_timeout_s:.0f} s"
                    )
                await asyncio.sleep(0.05)
        finally:
            await session.close()

    async def close(self) -> None:
        if self.runtime is not None:
            with contextlib.suppress(Exception):
                await self.runtime.close()
            self.runtime = None
        for proc in self.bookies:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.bookies:
            try:
                await asyncio.to_thread(proc.wait, 15)
            except subprocess.TimeoutExpired:
                log.warning("bookie pid %d did not stop in 15 s: killing it", proc.pid)
                proc.kill()
                await asyncio.to_thread(proc.wait)
        self.bookies.clear()
        if self.store is not None:
            with contextlib.suppress(Exception):
                await self.store.close()
            self.store = None
        if self.metadata is not None:
            await self.metadata.close()
            self.metadata = None
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # releases the flock
            self._lock_fd = None


def _lock_data_dir(data_dir: pathlib.Path) -> int:
    """Take the data dir's exclusive lock (a file descriptor holding it); ``StandaloneError``
    naming the holder's pid when another process has it."""
    path = data_dir / "standalone.lock"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.read(fd, 32).decode(errors="replace").strip()
        os.close(fd)
        by = f" by pid {holder}" if holder.isdigit() else ""
        raise StandaloneError(
            f"data dir {data_dir} is in use{by} (another magnetar standalone): stop it, "
            "or give this one another --data-dir"
        ) from None
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    return fd


async def run_standalone(
    data_dir: str,
    config: BrokerConfig,
    *,
    num_bookies: int = 1,
    bookie_port: int = 3181,
    log_level: str = "INFO",
    bookie_http_port: int = 0,
    bookie_fast_add_port: int | None = None,
) -> int:
    standalone = Standalone(
        data_dir,
        config,
        num_bookies=num_bookies,
        bookie_port=bookie_port,
        log_level=log_level,
        bookie_http_port=bookie_http_port,
        bookie_fast_add_port=bookie_fast_add_port,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await standalone.start()
    except (StandaloneError, OSError, ValueError) as exc:  # ValueError: unusable settings
        log.error("standalone failed to start: %s", exc)
        print(f"magnetar standalone: failed to start: {exc}", file=sys.stderr)
        return 1
    assert standalone.runtime is not None
    freezer = tune_gc_for_serving(standalone.runtime.service)
    service = standalone.runtime.service
    tls = ""
    if service.namespaces.service_url_tls:
        tls += f"\n  TLS service URL: {service.namespaces.service_url_tls}"
    if service.namespaces.web_service_url_tls:
        tls += f"\n  HTTPS admin URL: {service.namespaces.web_service_url_tls}"
    print(
        f"Magnetar standalone is ready\n"
        f"  service URL: {standalone.service_url}\n"
        f"  admin URL:   {standalone.web_service_url}{tls}\n"
        f"  data dir:    {standalone.data_dir}",
        flush=True,
    )
    await stop.wait()
    log.info("shutting down")
    if freezer is not None:
        freezer.close()
    await standalone.close()
    return 0


__all__ = ["Standalone", "StandaloneError", "run_standalone"]
