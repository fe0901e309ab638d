"""Process entry points of auto-recovery: ``magnetar autorecovery``, the daemon started
beside ``magnetar bookie`` (``auto_recovery_daemon_enabled``), and ``magnetar bookie
decommission|recover <id>``.

Owns: turning flags / a YAML file into ``AutoRecoveryConfig``, opening the metadata session
and real ``BookieClient``s, printing progress. The bookie package never imports this: the
``magnetar`` CLI hands ``bookie_sidecar`` to the bookie's ``run`` as its sidecar.
Must not know: how recovery works (``broker/bookkeeper/autorecovery``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import sys
from dataclasses import fields
from typing import Any

from magnetar.bookie.client import BookieClient
from magnetar.bookie.main import BookieConfig
from magnetar.broker.bookkeeper.autorecovery import (
    AutoRecovery,
    AutoRecoveryConfig,
    BookieActionError,
    Progress,
    ReplicationWorker,
    decommission_bookie,
    ledger_client_for,
    recover_bookie,
)
from magnetar.zk.factory import open_metadata_store
from magnetar.zk.store import MetadataStore, SessionEvent

log = logging.getLogger(__name__)

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2


def bookie_client_factory(address: str) -> BookieClient:
    return BookieClient(address, timeout_ms=5_000, add_timeout_ms=10_000, fast_add=False)


async def open_store(url: str, zk_timeout_ms: int) -> MetadataStore:
    options: dict[str, Any] = {}
    if url.startswith(("zk://", "embedded://")):
        options["session_timeout_ms"] = zk_timeout_ms
    return await open_metadata_store(url, **options)


RESTART_BACKOFF_S = 1.0


class Supervisor:
    """Runs an ``AutoRecovery`` on its own metadata session and, when that session is lost
    (its locks and election vote are gone with it), starts a new one on a new session."""

    def __init__(
        self, url: str, zk_timeout_ms: int, config: AutoRecoveryConfig, node_id: str
    ) -> None:
        self.url = url
        self.zk_timeout_ms = zk_timeout_ms
        self.config = config
        self.node_id = node_id
        self.daemon: AutoRecovery | None = None
        self.restarts = 0
        self._stop = asyncio.Event()
        self._started = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="autorecovery-supervisor")
        started = asyncio.ensure_future(self._started.wait())
        await asyncio.wait({started, self._task}, return_when=asyncio.FIRST_COMPLETED)
        started.cancel()
        if self._task.done():
            self._task.result()  # raises what ended it

    async def _run(self) -> None:
        while not self._stop.is_set():
            try:
                store = await open_store(self.url, self.zk_timeout_ms)
            except ValueError:
                raise  # a bad URL: a configuration error, not an outage
            except Exception as exc:  # metadata unreachable: try again
                log.warning("auto-recovery: cannot open the metadata store: %r", exc)
                await _wait_or(self._stop, RESTART_BACKOFF_S)
                continue
            lost = asyncio.Event()

            def on_session(event: SessionEvent, lost: asyncio.Event = lost) -> None:
                if event is SessionEvent.LOST:
                    lost.set()

            store.add_session_listener(on_session)
            daemon = AutoRecovery(store, bookie_client_factory, self.config, node_id=self.node_id)
            try:
                await daemon.start()
                self.daemon = daemon
                self._started.set()
                stopper = asyncio.ensure_future(self._stop.wait())
                loser = asyncio.ensure_future(lost.wait())
                try:
                    await asyncio.wait({stopper, loser}, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    stopper.cancel()
                    loser.cancel()
            except Exception:
                log.exception("auto-recovery failed; restarting it")
            finally:
                with contextlib.suppress(Exception):
                    await daemon.stop()
                with contextlib.suppress(Exception):
                    await store.close()
            if not self._stop.is_set():
                self.restarts += 1
                log.warning("auto-recovery: metadata session lost; starting again")
                await _wait_or(self._stop, RESTART_BACKOFF_S)

    async def stop(self) -> None:
        self._stop.set()
        if self._task is not None:
            with contextlib.suppress(Exception):  # start() already reported how it ended
                await self._task


async def _wait_or(event: asyncio.Event, timeout_s: float) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(event.wait(), timeout_s)


async def bookie_sidecar(config: BookieConfig, bookie_id: str) -> Supervisor | None:
    """The auto-recovery daemon inside a bookie process (its own metadata session)."""
    if not config.auto_recovery_daemon_enabled:
        return None
    supervisor = Supervisor(
        config.metadata, config.zk_timeout_ms, AutoRecoveryConfig.from_object(config), bookie_id
    )
    await supervisor.start()
    return supervisor


# -- magnetar autorecovery -------------------------------------------------------------------


def add_autorecovery_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--metadata", help="metadata URL, e.g. zk://127.0.0.1:2181/chroot")
    parser.add_argument("--config", help="YAML file with the settings below (a_b or a-b keys)")
    parser.add_argument("--node-id", help="name in the auditor election and the locks")
    parser.add_argument("--zk-timeout-ms", type=int, help="metadata session timeout (zkTimeout)")
    parser.add_argument("--log-level", default="INFO")
    for f in fields(AutoRecoveryConfig):
        flag = "--" + f.name.replace("_", "-")
        if f.type in ("bool", bool):
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=None)
        else:
            parser.add_argument(flag, type=int)


def autorecovery_config(args: argparse.Namespace) -> tuple[AutoRecoveryConfig, dict[str, Any]]:
    """(settings, process options: metadata, zk_timeout_ms) from the YAML file and flags."""
    known = {f.name for f in fields(AutoRecoveryConfig)}
    process = {"metadata": None, "zk_timeout_ms": 30_000}
    values: dict[str, Any] = {}
    if getattr(args, "config", None):
        import yaml

        with open(args.config) as f:
            loaded = yaml.safe_load(f) or {}
        if not isinstance(loaded, dict):
            raise ValueError(f"config file {args.config} is not a mapping")
        for key, value in loaded.items():
            name = str(key).replace("-", "_")
            if name in known:
                values[name] = value
            elif name in process:
                process[name] = value
            elif name not in {f.name for f in fields(BookieConfig)}:
                raise ValueError(f"unknown key {key!r} in {args.config}")
    for name in known:
        flag = getattr(args, name, None)
        if flag is not None:
            values[name] = flag
    for name in process:
        flag = getattr(args, name, None)
        if flag is not None:
            process[name] = flag
    if not process["metadata"]:
        raise ValueError("--metadata (or metadata in --config) is required")
    return AutoRecoveryConfig(**values), process


async def run_autorecovery(args: argparse.Namespace) -> int:
    try:
        config, process = autorecovery_config(args)
    except (ValueError, TypeError, OSError) as exc:
        print(f"magnetar autorecovery: configuration error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    node_id = args.node_id or f"autorecovery-{os.getpid()}"
    supervisor = Supervisor(process["metadata"], int(process["zk_timeout_ms"]), config, node_id)
    try:
        try:
            await supervisor.start()
        except ValueError as exc:
            print(f"magnetar autorecovery: configuration error: {exc}", file=sys.stderr)
            return EXIT_USAGE
        print(f"autorecovery {node_id} running", flush=True)
        await stop.wait()
    finally:
        await supervisor.stop()
    return EXIT_OK


# -- magnetar bookie decommission|recover <id> ---------------------------------------------


def add_bookie_action_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "action",
        nargs="?",
        choices=["decommission", "recover"],
        help="instead of running a bookie: move every ledger off a live bookie "
        "(decommission) or re-replicate a dead one's (recover)",
    )
    parser.add_argument("target_bookie_id", nargs="?", metavar="BOOKIE_ID")
    parser.add_argument(
        "--timeout-s", type=float, default=3600.0, help="give up after this (actions only)"
    )


async def run_bookie_action(args: argparse.Namespace) -> int:
    if not args.target_bookie_id:
        print(f"magnetar bookie {args.action}: a bookie id is required", file=sys.stderr)
        return EXIT_USAGE
    try:
        config = BookieConfig(**_bookie_values(args))
        settings = AutoRecoveryConfig.from_object(config)
    except (ValueError, TypeError, OSError) as exc:
        print(f"magnetar bookie {args.action}: configuration error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if config.metadata in ("", "none"):
        print(f"magnetar bookie {args.action}: --metadata is required", file=sys.stderr)
        return EXIT_USAGE
    try:
        store = await open_store(config.metadata, config.zk_timeout_ms)
    except ValueError as exc:
        print(f"magnetar bookie {args.action}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    ledgers = ledger_client_for(store, bookie_client_factory, settings)
    worker = ReplicationWorker(ledgers, settings, worker_id=f"{args.action}-{os.getpid()}")

    def show(p: Progress) -> None:
        print(p.line(), flush=True)

    action = decommission_bookie if args.action == "decommission" else recover_bookie
    try:
        result = await action(
            worker, args.target_bookie_id, progress=show, timeout_s=args.timeout_s
        )
    except BookieActionError as exc:
        print(f"magnetar bookie {args.action}: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    finally:
        await ledgers.close()
        await store.close()
    verb = "decommissioned" if args.action == "decommission" else "recovered"
    print(f"{args.target_bookie_id} {verb}: {result.line()}", flush=True)
    return EXIT_OK


def _bookie_values(args: argparse.Namespace) -> dict[str, Any]:
    from magnetar.bookie.main import load_config

    return {f.name: getattr(load_config(args), f.name) for f in fields(BookieConfig)}


__all__ = [
    "Supervisor",
    "add_autorecovery_arguments",
    "add_bookie_action_arguments",
    "autorecovery_config",
    "bookie_sidecar",
    "run_autorecovery",
    "run_bookie_action",
]
