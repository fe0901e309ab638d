"""``magnetar healthcheck``: is this container's server process healthy?

Owns: reading the server's command line and environment (``/proc/<pid>/cmdline`` and
``environ``, PID 1 in a container), resolving its settings exactly as the server did (flags,
its ``MAGNETAR_*`` environment, config file) and asking the right endpoint: a broker's or
standalone's ``/admin/v2/brokers/health`` on its web port, a bookie's ``/health`` on its
HTTP port (or a TCP connect to its gRPC port when it has none). Other roles
(``zookeeper-init``) are healthy while they run. Used by the image's ``HEALTHCHECK``.
Must not know: broker or bookie internals.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import socket
import urllib.error
import urllib.request
from collections.abc import Callable

_ROLES_WITH_WEB = ("broker", "standalone")


def _command_line(pid: int) -> list[str]:
    raw = pathlib.Path(f"/proc/{pid}/cmdline").read_bytes()
    return [part.decode() for part in raw.split(b"\0") if part]


def _environment(pid: int) -> dict[str, str]:
    """The server's own environment (its MAGNETAR_* settings), not the checker's."""
    raw = pathlib.Path(f"/proc/{pid}/environ").read_bytes()
    pairs = (part.decode(errors="replace").partition("=") for part in raw.split(b"\0") if part)
    return {key: value for key, _, value in pairs}


def _role_and_args(argv: list[str], roles: set[str]) -> tuple[str, list[str]] | None:
    """``magnetar ROLE ...`` / ``python -m magnetar.broker.cli ROLE ...`` or
    ``python -m magnetar.bookie ...``."""
    for i, arg in enumerate(argv):
        if arg == "magnetar.bookie" and i > 0 and argv[i - 1] == "-m":
            return "bookie", argv[i + 1 :]
        if arg in roles:
            return arg, argv[i + 1 :]
    return None


def _local(host: str) -> str:
    return "127.0.0.1" if host in ("", "0.0.0.0", "::") else host


def _http_ok(url: str, timeout_s: float) -> tuple[bool, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            body = response.read(4096).decode(errors="replace").strip()
            return response.status == 200, f"{url}: {response.status} {body}"
    except (urllib.error.URLError, OSError) as exc:
        return False, f"{url}: {exc}"


def check_process(
    pid: int,
    roles: set[str],
    parser: Callable[[], argparse.ArgumentParser],
    *,
    timeout_s: float = 5.0,
) -> tuple[bool, str]:
    """(healthy, what was checked): ``roles`` are the server subcommands, ``parser`` builds
    the ``magnetar`` command's parser (to read the process's own arguments)."""
    try:
        argv = _command_line(pid)
        environ = _environment(pid)
    except OSError as exc:
        return False, f"no process {pid}: {exc}"
    found = _role_and_args(argv, roles)
    if found is None:
        return False, f"process {pid} is not a magnetar server: {' '.join(argv)[:200]}"
    role, rest = found
    args = parser().parse_args([role, *rest])
    if role in _ROLES_WITH_WEB:
        from magnetar.broker.config import BrokerConfig

        extra = (
            {"metadata_store_url": args.metadata, "cluster_name": args.cluster_name}
            if role == "broker"
            else {}
        )
        config = BrokerConfig.load(
            args.config,
            environ=environ,
            broker_service_port=args.port,
            web_service_port=args.web_port,
            bind_address=args.bind_address,
            **extra,
        )
        url = f"http://{_local(config.bind_address)}:{config.web_service_port}"
        return _http_ok(f"{url}/admin/v2/brokers/health", timeout_s)
    if role == "bookie":
        from magnetar.bookie.main import load_config

        bookie = load_config(args, environ=environ)
        host = _local(bookie.host)
        if bookie.http_port:
            ok, detail = _http_ok(f"http://{host}:{bookie.http_port}/health", timeout_s)
            if ok:
                try:
                    state = json.loads(detail.split(" ", 2)[2])
                except (IndexError, ValueError):
                    state = {}
                ok = isinstance(state, dict) and bool(state.get("serving"))
            return ok, detail
        try:
            with socket.create_connection((host, bookie.port), timeout=timeout_s):
                return True, f"bookie gRPC port {host}:{bookie.port} accepts connections"
        except OSError as exc:
            return False, f"bookie gRPC port {host}:{bookie.port}: {exc}"
    return True, f"{role}: running"


__all__ = ["check_process"]
