"""One object-store server process of the tests (moto's S3, Azurite's Azure Blob Storage).

Owns: ``StoreServer``, the life of such a process: a free port on 127.0.0.1, a private
directory with its log, ``spawn`` (in its own session, killed with the test process through
``setpriv --pdeathsig``), ``wait_ready`` (a readiness check polled until it passes, failing at
once with the log when the process exits: never a sleep), ``pause``/``resume`` (SIGSTOP and
SIGCONT: a store that stops answering and comes back with its data), ``kill`` and ``close``.
Must not know: which store it is or how to talk to it (``s3.py``, ``azurite.py``).
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Callable, Mapping, Sequence

from support.net import free_port
from support.waiting import wait_until
from support.zookeeper import _die_with_parent_prefix


class StoreServer:
    name = "store server"

    def __init__(self, command: list[str] | None, missing: str, host: str = "127.0.0.1") -> None:
        """``command``: how to start the server, None when it is not installed (then
        ``missing`` says how to install it)."""
        if command is None:
            raise RuntimeError(missing)
        self.command = command
        self.host = host
        self.port = free_port(host)
        self._dir = pathlib.Path(tempfile.mkdtemp(prefix=f"magnetar-{self.name.split()[0]}-"))
        self.log_path = self._dir / "server.log"
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    def spawn(self, command: Sequence[str], env: Mapping[str, str] | None = None) -> None:
        log = self.log_path.open("ab")
        try:
            self._process = subprocess.Popen(
                [*_die_with_parent_prefix(), *command],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env={**os.environ, **(env or {})},
            )
        finally:
            log.close()

    def wait_ready(self, check: Callable[[], object], timeout_s: float) -> None:
        """Until ``check()`` returns without raising; at once if the process exits."""

        def ready() -> bool:
            if self._process is not None and self._process.poll() is not None:
                raise RuntimeError(f"{self.name} exited; log:\n{self.log_tail()}")
            try:
                check()
            except Exception:  # not answering yet
                return False
            return True

        wait_until(ready, timeout_s, lambda: f"{self.name} ready; log:\n{self.log_tail()}")

    def pause(self) -> None:
        """SIGSTOP: connections are accepted by the kernel but nothing answers."""
        assert self._process is not None
        os.killpg(self._process.pid, signal.SIGSTOP)

    def resume(self) -> None:
        assert self._process is not None
        os.killpg(self._process.pid, signal.SIGCONT)

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "<no log>"

    def kill(self) -> None:
        proc = self._process
        if proc is None:
            return
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGCONT)  # a paused server dies too
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
        self._process = None

    def close(self) -> None:
        self.kill()
        shutil.rmtree(self._dir, ignore_errors=True)


__all__ = ["StoreServer"]
