"""The bookie process: ``magnetar bookie`` / ``python -m magnetar.bookie``.

Owns: configuration (flags over ``MAGNETAR_BOOKIE_*`` variables over a config file over
defaults; names in ``magnetar.settings``), structured logging, the process
lifecycle: lock the data dir, open metadata, check the cookie, open the storage engine, serve
gRPC, register, run GC wiring; on SIGTERM/SIGINT shut down gracefully (stop accepting adds,
let in-flight adds finish, final checkpoint, deregister) and exit 0.
Must not know: storage internals (it only opens and closes the engine), the broker.

Exit codes: 0 clean shutdown; 2 configuration error or refused start (cookie mismatch,
data dir locked); 1 unexpected failure.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import fcntl
import gc
import json
import logging
import os
import signal
import socket
import sys
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, Protocol

from magnetar import settings
from magnetar.bookie.api import BookieStorage
from magnetar.bookie.background import SHARE_PERCENT_DEFAULT
from magnetar.bookie.fast_add import FastAddServer
from magnetar.bookie.registration import (
    BookieRegistration,
    CookieError,
    LiveLedgerLister,
    RegistrationInfo,
    check_cookie,
)
from magnetar.bookie.server import ENTRY_BYTES_MAX, BookieServer, BookieService
from magnetar.bookie.tls import GrpcTls
from magnetar.zk.factory import open_metadata_store
from magnetar.zk.store import MetadataStore

if TYPE_CHECKING:
    from magnetar.bookie.core import Bookie
    from magnetar.bookie.metrics import MetricsServer

log = logging.getLogger(__name__)

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_REFUSED = 2


class StartRefused(Exception):
    """The bookie must not start (cookie, lock, configuration): message goes to stderr."""


@dataclass(slots=True)
class BookieConfig:
    data_dir: str = "data/bookie"
    journal_dir: str = ""
    """BookKeeper's ``journalDirectories`` (one directory); empty: ``<data_dir>/journal``."""
    ledger_dir: str = ""
    """BookKeeper's ``ledgerDirectories`` (one directory); empty: ``<data_dir>/ledgers``."""
    metadata: str = "none"  # zk://host:port[/chroot], embedded://host:port, memory://, none
    host: str = "127.0.0.1"
    port: int = 3181
    advertised_address: str | None = None
    bookie_id: str | None = None
    http_port: int | None = None
    http_server_enabled: bool = True
    """BookKeeper's ``httpServerEnabled``: false, no HTTP server even with ``http_port``."""
    fast_add_port: int = 0
    """Port of the fast add transport (``bookie/fast_add.py``: the Add stream over plain TCP,
    announced in the registration as ``fast_add_port``; brokers with
    ``bookkeeper_fast_add_enabled`` send adds there). 0: disabled, adds over gRPC only.
    Plaintext: refused together with TLS (``tls_certificate_path``)."""
    background_read_share_percent: int = SHARE_PERCENT_DEFAULT
    """Magnetar only: while the bookie takes adds, reads marked background (the offload
    worker's) use at most this share of its time, so they do not hold up the adds
    (``bookie/background.py``; docs/tiered-storage.md). With no add in the last second they
    run at full speed. 1..100; 100: never spaced."""
    storage: str = "disk"  # "disk" (the engine) or "memory" (testing; nothing durable)
    max_entry_bytes: int = ENTRY_BYTES_MAX
    journal_sync: bool = True
    journal_pre_alloc_size_mb: int = 16
    """BookKeeper's ``journalPreAllocSizeMB``: journal files are extended this many MB at a
    time ahead of their records, so a journal ``fdatasync`` has no file-size change to commit
    (docs/benchmarks.md: ~40 µs less per lone add at p50). 0: every record extends the file."""
    gc_interval_s: float = 60.0
    shutdown_grace_s: float = 5.0
    log_format: str = "kv"  # kv | json
    log_level: str = "INFO"
    engine: dict[str, Any] | None = None  # passed through to the storage engine
    zk_timeout_ms: int = 30_000
    """BookKeeper's ``zkTimeout``: the metadata session timeout (a dead bookie's registration
    disappears this long after it died; ZooKeeper caps it at 20 x its tickTime)."""
    bookie_rack: str | None = None
    """BookKeeper's ``bookieRack`` (e.g. ``/region-a/rack-1``), announced in the registration
    for rack-aware placement; none: the default rack."""
    # Auto-recovery (BookKeeper's names in camelCase; run by ``magnetar bookie``, which starts
    # the auditor/replication daemon beside the bookie; ``python -m magnetar.bookie`` is the
    # storage node alone and only warns when it is enabled).
    auto_recovery_daemon_enabled: bool = True
    """``autoRecoveryDaemonEnabled``."""
    lost_bookie_recovery_delay_s: int = 300
    """``lostBookieRecoveryDelay``: a bookie gone this long has its ledgers re-replicated."""
    auditor_periodic_check_interval_s: int = 604_800
    """``auditorPeriodicCheckInterval``: every closed ledger's fragments probed on their
    bookies (0: never)."""
    auditor_periodic_bookie_check_interval_s: int = 86_400
    """``auditorPeriodicBookieCheckInterval``: every ledger scanned for unregistered bookies
    (0: never)."""
    rereplication_entry_batch_size: int = 10
    """``rereplicationEntryBatchSize``: entries read and copied per step."""
    replication_rate_by_bytes: int = -1
    """``replicationRateByBytes``: bytes/s copied by one worker (-1: unlimited)."""
    open_ledger_rereplication_grace_period_ms: int = 30_000
    """``openLedgerRereplicationGracePeriod``: how long an open ledger's last fragment is
    left to its writer before the worker fences (recovers and closes) the ledger."""
    min_num_racks_per_write_quorum: int = 2
    """``minNumRacksPerWriteQuorum`` for the ensembles chosen by the replication worker."""
    enforce_min_num_racks_per_write_quorum: bool = False
    """``enforceMinNumRacksPerWriteQuorum``."""
    # gRPC over TLS (BookKeeper's tlsCertificatePath / tlsKeyStore / tlsTrustStore /
    # tlsClientAuthentication, as PEM files); no certificate = plain gRPC
    tls_certificate_path: str = ""
    tls_key_path: str = ""
    tls_trust_store_path: str = ""
    tls_client_authentication: bool = False
    authorized_roles: str = ""
    """``authorizedRoles`` (with BookKeeper's ``BookieAuthZFactory``): comma list of the
    roles (client certificate CNs) admitted; needs ``tls_client_authentication``. Empty:
    every client with a trusted certificate (or any client without TLS)."""

    @property
    def address(self) -> str:
        return self.advertised_address or f"{self.host}:{self.port}"

    def resolved_bookie_id(self) -> str:
        return self.bookie_id or self.address


# -- configuration ------------------------------------------------------------------------


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    p = parser or argparse.ArgumentParser(prog="magnetar bookie", description="Run a bookie.")
    p.add_argument(
        "--config",
        help="YAML file with the same keys as the flags (a_b or a-b), or a key=value file "
        "(BookKeeper names such as bookiePort are accepted too)",
    )
    p.add_argument("--data-dir", help="journal, entry logs, index and cookie live here")
    p.add_argument(
        "--metadata",
        help="metadata URL: zk://host:port[/chroot], embedded://host:port, memory://, none",
    )
    p.add_argument("--host", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, help="gRPC port (default 3181; 0 picks a free one)")
    p.add_argument("--advertised-address", help="host:port published in the registration")
    p.add_argument("--bookie-id", help="stable identity (default: the advertised address)")
    p.add_argument(
        "--fast-add-port",
        type=int,
        help="port of the fast add transport (plain TCP beside gRPC; default 0: disabled)",
    )
    p.add_argument(
        "--http-port", type=int, help="HTTP port for /metrics and /health (default: none)"
    )
    p.add_argument(
        "--background-read-share-percent",
        type=int,
        help="share of the bookie's time background reads (offloads) may use while it takes "
        "adds (1..100, default 1; 100: never spaced)",
    )
    p.add_argument("--storage", choices=["disk", "memory"], help="storage engine")
    p.add_argument("--max-entry-bytes", type=int)
    p.add_argument(
        "--journal-sync",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="fdatasync the journal before acking (default on)",
    )
    p.add_argument(
        "--journal-pre-alloc-size-mb",
        type=int,
        help="reserve journal files this many MB ahead of their records (default 16; 0: off)",
    )
    p.add_argument("--gc-interval-s", type=float)
    p.add_argument("--shutdown-grace-s", type=float)
    p.add_argument("--log-format", choices=["kv", "json"])
    p.add_argument("--log-level")
    p.add_argument("--zk-timeout-ms", type=int, help="metadata session timeout (zkTimeout)")
    p.add_argument("--bookie-rack", help="rack announced for rack-aware placement (bookieRack)")
    p.add_argument(
        "--auto-recovery-daemon-enabled",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="run the auditor/replication daemon beside the bookie (magnetar bookie; default on)",
    )
    p.add_argument("--lost-bookie-recovery-delay-s", type=int)
    p.add_argument("--auditor-periodic-check-interval-s", type=int)
    p.add_argument("--auditor-periodic-bookie-check-interval-s", type=int)
    p.add_argument("--rereplication-entry-batch-size", type=int)
    p.add_argument("--replication-rate-by-bytes", type=int)
    p.add_argument("--open-ledger-rereplication-grace-period-ms", type=int)
    p.add_argument("--min-num-racks-per-write-quorum", type=int)
    p.add_argument(
        "--enforce-min-num-racks-per-write-quorum",
        action=argparse.BooleanOptionalAction,
        default=None,
    )
    return p


def load_config(args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> BookieConfig:
    """Defaults, then ``--config`` (YAML, or BookKeeper-style ``key=value``; our names or
    BookKeeper's camelCase ones), then ``MAGNETAR_BOOKIE_*`` variables of ``environ``, then
    flags. Unknown keys raise ``UnknownSettingError``; names live in ``magnetar.settings``."""
    file_values = None
    if args.config:
        try:
            file_values = settings.read_config_file(args.config)
        except ValueError as exc:
            raise StartRefused(str(exc)) from exc
    known = {f.name for f in fields(BookieConfig)}
    flags = {name: getattr(args, name, None) for name in known}
    values = settings.resolve(
        settings.BOOKIE,
        BookieConfig,
        file_values=file_values,
        file_origin=str(args.config),
        environ=environ,
        overrides=flags,
    )
    config = BookieConfig(**values)
    if config.port == 0:
        config.port = _free_port(config.host)
    return config


def _one_directory(key: str, value: str) -> str:
    """A BookKeeper directory list naming one directory (Magnetar's bookie uses one)."""
    dirs = [d.strip() for d in value.split(",") if d.strip()]
    if len(dirs) > 1:
        raise StartRefused(f"{key}={value}: Magnetar's bookie uses one directory, not {len(dirs)}")
    return dirs[0] if dirs else ""


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


# -- logging ------------------------------------------------------------------------------


class _KeyValueFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        ts = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        msg = record.getMessage().replace('"', "'")
        line = (
            f"ts={ts}.{int(record.msecs):03d}Z level={record.levelname} "
            f'logger={record.name} pid={record.process} msg="{msg}"'
        )
        if record.exc_info:
            line += " exc=" + json.dumps(self.formatException(record.exc_info))
        return line


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        obj: dict[str, Any] = {
            "ts": record.created,
            "level": record.levelname,
            "logger": record.name,
            "pid": record.process,
            "msg": record.getMessage(),
        }
        if record.exc_info:
            obj["exc"] = self.formatException(record.exc_info)
        return json.dumps(obj)


def setup_logging(config: BookieConfig) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_JsonFormatter() if config.log_format == "json" else _KeyValueFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(config.log_level.upper())
    logging.getLogger("kazoo").setLevel(logging.WARNING)


# -- metadata and storage -----------------------------------------------------------------


async def open_metadata(url: str, session_timeout_ms: int | None = None) -> MetadataStore | None:
    """Open the metadata store named by ``url``; None for ``none``."""
    if url in ("", "none"):
        return None
    options: dict[str, Any] = {}
    if session_timeout_ms is not None and url.startswith(("zk://", "embedded://")):
        options["session_timeout_ms"] = session_timeout_ms
    try:
        return await open_metadata_store(url, **options)
    except ValueError as exc:
        raise StartRefused(str(exc)) from exc


@dataclass(slots=True)
class _Engine:
    """The storage engine as the process sees it: the ``BookieStorage`` it serves, and the
    disk engine when that is it (its close, GC and statistics)."""

    storage: BookieStorage
    disk: Bookie | None = None


async def open_engine(config: BookieConfig, bookie_id: str) -> _Engine:
    if config.storage == "memory":
        from magnetar.bookie.testing import MemoryBookieStorage

        log.warning("storage=memory: nothing is durable (testing only)")
        return _Engine(MemoryBookieStorage(bookie_id, max_entry_bytes=config.max_entry_bytes))
    disk = await _open_disk(config, bookie_id)
    return _Engine(disk, disk)


async def _open_disk(config: BookieConfig, bookie_id: str) -> Bookie:
    """``bookie/core.py``'s engine: journal and ledger dirs live in the data dir; keys of
    the config's ``engine`` mapping are ``core.BookieConfig`` fields."""
    try:
        from magnetar.bookie import core
    except ImportError as exc:
        raise StartRefused(f"the disk storage engine is not available: {exc}") from exc
    if not config.journal_sync:
        log.warning("journal_sync=false is not supported by the disk engine; syncing anyway")
    if config.journal_pre_alloc_size_mb < 0:
        raise StartRefused(
            f"journal_pre_alloc_size_mb must be 0 or more, not {config.journal_pre_alloc_size_mb}"
        )
    options = dict(config.engine or {})
    options.setdefault("journal_preallocate_bytes", config.journal_pre_alloc_size_mb << 20)
    engine_config = core.BookieConfig(
        journal_dir=_one_directory("journalDirectories", config.journal_dir)
        or os.path.join(config.data_dir, "journal"),
        ledger_dir=_one_directory("ledgerDirectories", config.ledger_dir)
        or os.path.join(config.data_dir, "ledgers"),
        bookie_id=bookie_id,
        entry_size_max=config.max_entry_bytes,
        **options,
    )
    bookie: Bookie = core.Bookie(engine_config)
    await bookie.start()
    return bookie


# -- the process --------------------------------------------------------------------------


class _DataDirLock:
    """An exclusive flock on ``<data_dir>/bookie.lock``: one process per data dir."""

    def __init__(self, data_dir: str) -> None:
        self.path = os.path.join(data_dir, "bookie.lock")
        self.fd = -1

    def acquire(self) -> None:
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self.fd)
            self.fd = -1
            raise StartRefused(f"data dir is in use by another process ({self.path})") from None
        os.ftruncate(self.fd, 0)
        os.write(self.fd, f"{os.getpid()}\n".encode())

    def release(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


async def _gc_loop(config: BookieConfig, lister: LiveLedgerLister, disk: Bookie) -> None:
    while True:
        await asyncio.sleep(config.gc_interval_s)
        try:
            # Local ledgers first: a ledger created after the metadata listing is never a
            # candidate, so it cannot be mistaken for a deleted one.
            candidates = disk.local_ledger_ids()
            live = await lister.live_ledgers()
            if live is None:
                continue
            result = await disk.collect_garbage(live, candidates)
            log.info("gc round done result=%s", result)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("gc round failed")


M_TRIM_THRESHOLD = -1
M_TOP_PAD = -2
M_MMAP_THRESHOLD = -3


def tune_malloc() -> bool:
    """glibc only: serve large buffers (gRPC messages of up to 32 MiB, payload copies) from
    the heap and keep freed memory for reuse, instead of an ``mmap`` per allocation and a
    ``munmap``/trim per free. Each fresh mapping page-faults on first touch (every 4 KiB of
    every message), which measured ~70 us of client CPU per 64 KiB add in
    ``bench/bookie_perf.py`` (130 -> 53 us with these settings). Memory stays bounded by the
    process's peak use, which the write cache and in-flight limits bound. Returns whether
    the settings were applied."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    ok = mallopt(M_MMAP_THRESHOLD, 32 * 1024 * 1024)
    ok &= mallopt(M_TRIM_THRESHOLD, 256 * 1024 * 1024)
    ok &= mallopt(M_TOP_PAD, 64 * 1024 * 1024)
    return bool(ok)


def tune_gc_for_serving() -> None:
    """Collect garbage rarely and never rescan start-up objects (the bookie process only).

    The add path makes a few short-lived objects per entry (headers, payload slices, cache
    tuples) and the write cache holds up to ~100,000 of them; with CPython's default
    thresholds a young collection ran every ~700 allocations, i.e. a few times per batch, and
    older generations rescanned the cache. Same settings as the broker's
    (``broker/runtime.py``), measured with ``bench/bookie_perf.py``.
    """
    gc.set_threshold(50_000, 20, 100)
    gc.freeze()


class Sidecar(Protocol):
    """A service started beside the bookie once it is registered, stopped before it
    deregisters (the auto-recovery daemon, started by the ``magnetar`` CLI layer)."""

    async def stop(self) -> None: ...


SidecarStarter = Callable[[BookieConfig, str], Awaitable[Sidecar | None]]
"""Starts a sidecar given the config and the bookie id; None: nothing to run."""


@dataclass(slots=True)
class _Process:
    """What a running bookie holds, in start order: ``start`` opens and serves, ``drain``
    stops taking adds and lets in-flight ones finish, ``stop`` undoes whatever started."""

    config: BookieConfig
    bookie_id: str
    store: MetadataStore | None = None
    engine: _Engine | None = None
    server: BookieServer | None = None
    fast_add: FastAddServer | None = None
    metrics: MetricsServer | None = None
    registration: BookieRegistration | None = None
    tasks: list[asyncio.Task[Any]] = field(default_factory=list)
    sidecar: Sidecar | None = None

    @property
    def http_port(self) -> int | None:
        """The metrics / health port served (``httpServerEnabled`` false: none)."""
        return self.config.http_port if self.config.http_server_enabled else None

    async def start(self, sidecar: SidecarStarter | None) -> BookieServer:
        """Open metadata (checking the cookie) and the storage, serve, register, then start
        the sidecar. Returns the gRPC server (serving)."""
        config = self.config
        self.store = await open_metadata(config.metadata, config.zk_timeout_ms)
        try:
            cookie = await check_cookie(self.store, self.bookie_id, [config.data_dir])
        except CookieError as exc:
            raise StartRefused(str(exc)) from exc
        if not 1 <= config.background_read_share_percent <= 100:
            raise StartRefused(
                "background_read_share_percent must be 1..100, not "
                f"{config.background_read_share_percent}"
            )
        self.engine = await open_engine(config, self.bookie_id)
        service = BookieService(
            self.engine.storage,
            background_read_share_percent=config.background_read_share_percent,
        )
        service.ready = False  # Health says serving once registered
        server = await self._serve(service)
        if self.store is not None:
            await self._register(self.store, cookie.instance_id)
        service.ready = True
        if sidecar is not None and self.store is not None:
            self.sidecar = await sidecar(config, self.bookie_id)
        elif config.auto_recovery_daemon_enabled and self.store is not None:
            log.warning(
                "auto_recovery_daemon_enabled is set but this entry point runs the storage "
                "node only: run the bookie as `magnetar bookie` or run `magnetar autorecovery`"
            )
        return server

    async def _serve(self, service: BookieService) -> BookieServer:
        """The gRPC server, the fast add port and the metrics endpoint, as configured."""
        config = self.config
        tls = _tls(config)
        if tls is not None and config.fast_add_port:
            raise StartRefused(
                "fast_add_port is a plaintext transport: it cannot be combined with TLS "
                "(tls_certificate_path); set fast_add_port=0 (brokers then add over gRPC/TLS)"
            )
        server = self.server = BookieServer(service, config.host, config.port, tls=tls)
        await server.start()
        if config.fast_add_port:
            self.fast_add = FastAddServer(service, config.host, config.fast_add_port)
            await self.fast_add.start()
        if self.http_port:
            from magnetar.bookie.metrics import MetricsServer

            assert self.engine is not None
            self.metrics = MetricsServer(
                service, self.engine.storage, config.host, self.http_port, engine=self.engine.disk
            )
            await self.metrics.start()
        return server

    async def _register(self, store: MetadataStore, instance_id: str) -> None:
        """The ephemeral registration (read-only as the storage says) and the GC loop."""
        config = self.config
        assert self.engine is not None
        info = RegistrationInfo(
            bookie_id=self.bookie_id,
            address=config.address,
            instance_id=instance_id,
            http_port=self.http_port,
            extra=registration_extra(config, self.fast_add),
        )

        async def reopen() -> MetadataStore:
            new = await open_metadata(config.metadata, config.zk_timeout_ms)
            assert new is not None
            return new

        storage = self.engine.storage
        self.registration = BookieRegistration(
            store, info, reopen=reopen, read_only=lambda: storage.info().read_only
        )
        await self.registration.start()
        if self.engine.disk is not None:
            self.tasks.append(
                asyncio.create_task(_gc_loop(config, LiveLedgerLister(store), self.engine.disk))
            )
        else:
            log.info("storage engine has no GC entry point; GC wiring idle")

    async def drain(self) -> None:
        """Stop taking new adds; in-flight batches finish (their acks are sent)."""
        grace_s = self.config.shutdown_grace_s
        if self.server is not None:
            self.server.service.begin_shutdown()
        if self.fast_add is not None:
            await self.fast_add.stop(grace_s)
            self.fast_add = None
        if self.server is not None:
            await self.server.stop(grace_s)
            self.server = None

    async def stop(self) -> None:
        """Undo what started, last first: the final checkpoint before deregistering."""
        if self.sidecar is not None:
            try:
                await self.sidecar.stop()
            except Exception:
                log.exception("sidecar stop failed")
        for task in self.tasks:
            task.cancel()
        if self.fast_add is not None:
            await self.fast_add.stop(0)
        if self.server is not None:
            await self.server.stop(0)
        if self.metrics is not None:
            await self.metrics.stop()
        disk = self.engine.disk if self.engine is not None else None
        if disk is not None:
            try:
                await disk.close()  # final checkpoint
            except Exception:
                log.exception("storage close failed")
        if self.registration is not None:
            await self.registration.stop()
        if self.store is not None:
            with contextlib.suppress(Exception):
                await self.store.close()


def _tls(config: BookieConfig) -> GrpcTls | None:
    """The gRPC server's TLS, when configured; refuses what cannot work (clearly, at start)."""
    if not config.tls_certificate_path:
        if config.authorized_roles.strip():
            raise StartRefused(
                "bookie authorized_roles needs TLS with client authentication "
                "(tls_certificate_path, tls_key_path, tls_trust_store_path, "
                "tls_client_authentication=true)"
            )
        return None
    tls = GrpcTls(
        config.tls_certificate_path,
        config.tls_key_path,
        config.tls_trust_store_path,
        config.tls_client_authentication,
        tuple(r.strip() for r in config.authorized_roles.split(",") if r.strip()),
    )
    try:
        tls.server_credentials()  # unreadable files refuse the start, clearly
    except ValueError as exc:
        raise StartRefused(str(exc)) from exc
    return tls


async def run(
    config: BookieConfig,
    ready: Callable[[str], None] | None = None,
    *,
    tune_gc: bool = False,
    sidecar: SidecarStarter | None = None,
) -> int:
    """Run a bookie until SIGTERM/SIGINT; ``ready(address)`` once it serves."""
    os.makedirs(config.data_dir, exist_ok=True)
    lock = _DataDirLock(config.data_dir)
    lock.acquire()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    process = _Process(config, config.resolved_bookie_id())
    try:
        server = await process.start(sidecar)
        if tune_gc:
            tune_gc_for_serving()
        log.info(
            "bookie started bookie_id=%s address=%s data_dir=%s metadata=%s storage=%s",
            process.bookie_id,
            config.address,
            config.data_dir,
            config.metadata,
            config.storage,
        )
        if ready is not None:
            ready(server.address)
        await stop.wait()
        log.info("shutting down bookie_id=%s", process.bookie_id)
        await process.drain()
        return EXIT_OK
    finally:
        await process.stop()
        lock.release()
        log.info("bookie stopped bookie_id=%s", process.bookie_id)


def registration_extra(config: BookieConfig, fast_add: FastAddServer | None) -> dict[str, Any]:
    """The registration's optional fields: ``rack``, and ``fast_add_port`` when the fast add
    transport is served (a broker that finds none adds over gRPC: older bookies announce none)."""
    extra: dict[str, Any] = {}
    if config.bookie_rack:
        extra["rack"] = config.bookie_rack
    if fast_add is not None:
        extra["fast_add_port"] = fast_add.port
    return extra


SWITCH_INTERVAL_S = 0.0005
"""GIL switch interval of the bookie process (Python's default is 5 ms)."""


def _install_uvloop() -> bool:
    try:
        import uvloop
    except ImportError:
        return False
    uvloop.install()
    return True


def _exit_0(signum: int, frame: object) -> None:
    raise SystemExit(EXIT_OK)


def main_with_args(args: argparse.Namespace, sidecar: SidecarStarter | None = None) -> int:
    try:
        config = load_config(args, environ=os.environ)
    except (StartRefused, TypeError, ValueError, OSError) as exc:
        print(f"magnetar bookie: configuration error: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    setup_logging(config)
    # The journal and flush threads need the GIL for a moment after each fdatasync/write;
    # with the default 5 ms switch interval a busy loop thread can hold them (and so every
    # ack) back for up to 5 ms. 0.5 ms bounds that wait.
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    uv = _install_uvloop()
    malloc_tuned = tune_malloc()
    log.info("%s", settings.effective_config_line(settings.BOOKIE, config))
    if args.config:  # the keys accepted without a setting of their own, and why
        values = settings.read_config_file(args.config)
        known = settings.field_types(BookieConfig)
        accepted = settings.accepted_keys(settings.BOOKIE, values, known)
        for line in settings.accepted_log_lines(settings.BOOKIE, accepted):
            log.info("%s", line)
    log.info("uvloop=%s malloc_tuned=%s", uv, malloc_tuned)
    # Until run() installs the loop's handlers, SIGTERM exits 0 (as a container's PID 1 an
    # unhandled SIGTERM would be ignored until the SIGKILL).
    signal.signal(signal.SIGTERM, _exit_0)
    try:
        return asyncio.run(run(config, tune_gc=True, sidecar=sidecar))
    except StartRefused as exc:
        log.error("refusing to start: %s", exc)
        print(f"magnetar bookie: refusing to start: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    except KeyboardInterrupt:
        return EXIT_OK
    except Exception:
        log.exception("bookie failed")
        return EXIT_FAILURE


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return main_with_args(args)


__all__ = [
    "BookieConfig",
    "Sidecar",
    "SidecarStarter",
    "StartRefused",
    "build_parser",
    "load_config",
    "main",
    "main_with_args",
    "open_metadata",
    "run",
]
