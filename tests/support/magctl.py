"""magctl test kit: a real ``magnetar standalone`` per module, an isolated config.

Owns: ``server`` (a module-scoped standalone process, killed at the end), ``magctl``
(``main()`` in-process with captured output: fast, for the bulk of the tests), ``magctl_proc``
(the CLI as a subprocess: for exit codes, stderr and "no traceback" checks),
``magctl_term`` (the subprocess with stderr on a pseudo-terminal, or on a pipe: what progress
draws, and that nothing is drawn when piped) and ``config_file`` (``MAGCTL_CONFIG`` pointing
at an empty file of the test's own).
"""

from __future__ import annotations

import io
import os
import pathlib
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest

from magnetar.client.magctl.cli import run
from support.standalone import StandaloneProcess


@dataclass(frozen=True)
class Result:
    code: int
    out: str
    err: str


Magctl = Callable[..., Result]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProcess]:
    base = tmp_path_factory.mktemp("magctl-standalone")
    proc = StandaloneProcess(base / "data", base / "standalone.log")
    try:
        proc.start(timeout_s=90)
        yield proc
    finally:
        proc.stop()


@pytest.fixture
def config_file(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> pathlib.Path:
    path = tmp_path / "magctl-config"
    monkeypatch.setenv("MAGCTL_CONFIG", str(path))
    return path


@pytest.fixture
def magctl(config_file: pathlib.Path) -> Magctl:
    """``magctl(*args, admin_url=...)``: main() in-process; admin_url None = no -s flag."""

    def call(*args: str, admin_url: str | None = None, stdin: str | None = None) -> Result:
        out, err = io.StringIO(), io.StringIO()
        argv = list(args) + (["-s", admin_url] if admin_url else [])
        old_stdin = sys.stdin
        if stdin is not None:
            sys.stdin = io.StringIO(stdin)
        try:
            code = run(argv, out=out, err=err)
        finally:
            sys.stdin = old_stdin
        return Result(code, out.getvalue(), err.getvalue())

    return call


@pytest.fixture
def magctl_proc(config_file: pathlib.Path) -> Magctl:
    def call(*args: str, admin_url: str | None = None, stdin: str | None = None) -> Result:
        argv = list(args) + (["-s", admin_url] if admin_url else [])
        done = subprocess.run(
            [sys.executable, "-m", "magnetar.client.magctl", *argv],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "MAGCTL_CONFIG": str(config_file)},
            check=False,
        )
        return Result(done.returncode, done.stdout, done.stderr)

    return call


def _read_all(fd: int, into: list[bytes]) -> None:
    """Read a pty master until every slave end is closed (EIO on Linux)."""
    while True:
        try:
            chunk = os.read(fd, 65536)
        except OSError:
            return
        if not chunk:
            return
        into.append(chunk)


@pytest.fixture
def magctl_term(config_file: pathlib.Path) -> Magctl:
    """``magctl_term(*args, admin_url=..., tty=True|False)``: the CLI as a subprocess, its
    stdout a pipe and its stderr a pseudo-terminal (``tty=True``) or a pipe. ``err`` is every
    byte written to stderr, as written (the terminal's ``\n`` -> ``\r\n`` undone)."""

    def call(*args: str, admin_url: str | None = None, tty: bool = True) -> Result:
        argv = list(args) + (["-s", admin_url] if admin_url else [])
        cmd = [sys.executable, "-m", "magnetar.client.magctl", *argv]
        env = {**os.environ, "MAGCTL_CONFIG": str(config_file), "TERM": "xterm"}
        if not tty:
            done = subprocess.run(
                cmd, capture_output=True, text=True, timeout=120, env=env, check=False
            )
            return Result(done.returncode, done.stdout, done.stderr)
        master, slave = os.openpty()
        try:
            proc = subprocess.Popen(
                cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=slave, env=env
            )
        finally:
            os.close(slave)
        chunks: list[bytes] = []
        reader = threading.Thread(target=_read_all, args=(master, chunks), daemon=True)
        reader.start()
        try:
            out, _ = proc.communicate(timeout=120)
            reader.join(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
            os.close(master)
        err = b"".join(chunks).decode().replace("\r\n", "\n")
        return Result(proc.returncode, out.decode(), err)

    return call
