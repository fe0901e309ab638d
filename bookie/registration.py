"""A bookie's identity in metadata: its cookie and its ephemeral registration.

Owns:
- the **cookie** (BookKeeper's guard against wiped or swapped disks): a JSON file ``COOKIE``
  in the data dir and a node ``zk.paths.bookie_cookie(id)``, both holding the bookie id, an
  instance id created on first start, and the data dirs. ``check_cookie`` runs before the
  storage engine opens: a first start writes both; a data dir without a cookie while metadata
  has one for this bookie id (the disk was wiped: this bookie would answer "no entry" for
  entries it acknowledged) or any mismatch raises ``CookieError`` and the bookie refuses to start;
- the **registration**: an ephemeral node ``zk.paths.bookie_registration(id)`` (or the
  read-only path while the bookie is read-only) whose value is JSON with the address,
  ports and rack. ``BookieRegistration`` keeps it present: re-checks after reconnects, reopens
  the store and re-registers after session loss, moves it when read-only mode changes; once
  its cookie node, seen before, is gone (the bookie was decommissioned) it deletes the node
  and never registers again;
- **GC wiring**: ``LiveLedgerLister`` lists live ledger ids from ``LEDGER_META_ROOT``.
Must not know: how storage works, gRPC.

Invariant: at most one live registration node per bookie id is ours; a stale node left by a
previous incarnation of this same bookie (same instance id, older session) is replaced, a
node of another instance is never deleted: its deletion (its session expiring) is watched and
ours is created at once, so the id is not seen missing between.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from magnetar.clock import Clock, SystemClock
from magnetar.zk import paths
from magnetar.zk.errors import AlreadyExists, MetadataError, NotFound
from magnetar.zk.store import (
    CREATE_ONLY,
    MetadataStore,
    Notification,
    NotificationType,
    SessionEvent,
)

log = logging.getLogger(__name__)

COOKIE_FILE = "COOKIE"
COOKIE_LAYOUT_VERSION = 1


class CookieError(Exception):
    """The data dir and the metadata disagree about who this bookie is: refuse to start."""


@dataclass(frozen=True, slots=True)
class Cookie:
    bookie_id: str
    instance_id: str
    data_dirs: tuple[str, ...]
    layout_version: int = COOKIE_LAYOUT_VERSION

    def encode(self) -> bytes:
        return json.dumps(
            {
                "bookie_id": self.bookie_id,
                "instance_id": self.instance_id,
                "data_dirs": list(self.data_dirs),
                "layout_version": self.layout_version,
            },
            sort_keys=True,
        ).encode()

    @classmethod
    def decode(cls, data: bytes) -> Cookie:
        try:
            obj = json.loads(data)
            return cls(
                bookie_id=str(obj["bookie_id"]),
                instance_id=str(obj["instance_id"]),
                data_dirs=tuple(str(d) for d in obj["data_dirs"]),
                layout_version=int(obj.get("layout_version", COOKIE_LAYOUT_VERSION)),
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise CookieError(f"unreadable cookie: {exc}") from exc


def read_local_cookie(data_dir: str) -> Cookie | None:
    path = os.path.join(data_dir, COOKIE_FILE)
    try:
        with open(path, "rb") as f:
            return Cookie.decode(f.read())
    except FileNotFoundError:
        return None


def write_local_cookie(data_dir: str, cookie: Cookie) -> None:
    """Atomic replace: temp file, fsync, rename, fsync of the directory."""
    path = os.path.join(data_dir, COOKIE_FILE)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(cookie.encode())
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fd = os.open(data_dir, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _dir_has_data(data_dir: str) -> bool:
    try:
        return any(name not in (COOKIE_FILE, "bookie.lock") for name in os.listdir(data_dir))
    except FileNotFoundError:
        return False


async def check_cookie(store: MetadataStore | None, bookie_id: str, data_dirs: list[str]) -> Cookie:
    """Verify (or, on first start, create) the cookie; raise ``CookieError`` to refuse."""
    primary = data_dirs[0]
    dirs = tuple(os.path.abspath(d) for d in data_dirs)  # noqa: ASYNC240 (no I/O)
    local = read_local_cookie(primary)
    remote: Cookie | None = None
    remote_version = -1
    if store is not None:
        got = await store.get(paths.bookie_cookie(bookie_id))
        if got is not None:
            remote = Cookie.decode(got.value)
            remote_version = got.stat.version
    if local is None and remote is not None:
        raise CookieError(
            f"bookie {bookie_id}: data dir {primary} has no cookie but metadata has one "
            f"(instance {remote.instance_id}, {paths.bookie_cookie(bookie_id)}). The data dir "
            "was wiped or replaced; starting would lose acknowledged entries. Restore the "
            "data, or decommission the bookie (delete its cookie node) before reusing the id."
        )
    if local is None:
        if _dir_has_data(primary):
            raise CookieError(
                f"bookie {bookie_id}: data dir {primary} holds data but no cookie; refusing "
                "to adopt a directory of unknown origin"
            )
        cookie = Cookie(bookie_id, uuid.uuid4().hex, dirs)
        write_local_cookie(primary, cookie)
        if store is not None:
            await store.put(
                paths.bookie_cookie(bookie_id), cookie.encode(), expected_version=CREATE_ONLY
            )
        log.info("new bookie cookie bookie_id=%s instance_id=%s", bookie_id, cookie.instance_id)
        return cookie
    if local.bookie_id != bookie_id:
        raise CookieError(
            f"data dir {primary} belongs to bookie {local.bookie_id}, not {bookie_id} "
            "(swapped disk or wrong --bookie-id)"
        )
    if local.data_dirs != dirs:
        raise CookieError(
            f"bookie {bookie_id}: data dirs changed from {list(local.data_dirs)} to {list(dirs)}"
        )
    if remote is not None and remote != local:
        raise CookieError(
            f"bookie {bookie_id}: local cookie (instance {local.instance_id}) does not match "
            f"the metadata cookie (instance {remote.instance_id}); another disk or another "
            "bookie owns this id"
        )
    if store is not None and remote is None:
        log.warning("metadata has no cookie for bookie %s; writing it from the data dir", bookie_id)
        with contextlib.suppress(AlreadyExists):
            await store.put(
                paths.bookie_cookie(bookie_id), local.encode(), expected_version=CREATE_ONLY
            )
    del remote_version
    return local


@dataclass(slots=True)
class RegistrationInfo:
    """The JSON value of the registration node."""

    bookie_id: str
    address: str  # host:port of the gRPC service
    instance_id: str
    http_port: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def encode(self, read_only: bool) -> bytes:
        host, _, port = self.address.rpartition(":")
        return json.dumps(
            {
                "bookie_id": self.bookie_id,
                "address": self.address,
                "host": host,
                "grpc_port": int(port),
                "http_port": self.http_port,
                "instance_id": self.instance_id,
                "read_only": read_only,
                **self.extra,
            },
            sort_keys=True,
        ).encode()


StoreOpener = Callable[[], Awaitable[MetadataStore]]


class BookieRegistration:
    """Keeps this bookie's ephemeral registration node present and on the right path."""

    def __init__(
        self,
        store: MetadataStore,
        info: RegistrationInfo,
        *,
        reopen: StoreOpener | None = None,
        read_only: Callable[[], bool] = lambda: False,
        check_interval_s: float = 1.0,
        clock: Clock | None = None,
    ) -> None:
        self.store = store
        self.info = info
        self._reopen = reopen
        self._read_only = read_only
        self._check_interval_s = check_interval_s
        self._clock: Clock = clock or SystemClock()
        self._registered_path: str | None = None
        self._registered_read_only = False
        self._kick = asyncio.Event()
        self._lost = False
        self._task: asyncio.Task[None] | None = None
        self._stopped = False
        self.registrations = 0
        self.decommissioned = False
        self._cookie_seen = False  # a cookie seen and then gone means decommissioned

    async def start(self) -> None:
        self.store.add_session_listener(self._on_session)
        self.store.add_listener(self._on_change)
        await self._ensure()
        self._task = asyncio.create_task(self._run(), name="bookie-registration")

    def _on_session(self, event: SessionEvent) -> None:
        if event is SessionEvent.LOST:
            log.warning("metadata session lost; registration will be recreated")
            self._lost = True
            self._registered_path = None
        if event in (SessionEvent.LOST, SessionEvent.RECONNECTED):
            self._kick.set()

    def _on_change(self, event: Notification) -> None:
        """Our node deleted (a previous incarnation's expiring, or by hand): register again
        at once, not at the next check (the auditor would see this bookie missing between)."""
        if event.type is NotificationType.DELETED and event.path in (
            self._path(False),
            self._path(True),
        ):
            self._kick.set()

    async def _run(self) -> None:
        while not self._stopped:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._kick.wait(), self._check_interval_s)
            self._kick.clear()
            if self._stopped:
                return
            try:
                if self._lost:
                    await self._reopen_store()
                await self._ensure()
            except MetadataError as exc:
                log.warning("registration check failed: %r", exc)
            except Exception:
                log.exception("registration check failed")

    async def _reopen_store(self) -> None:
        if self._reopen is None:
            return
        old = self.store
        with contextlib.suppress(Exception):
            await old.close()
        self.store = await self._reopen()
        self.store.add_session_listener(self._on_session)
        self.store.add_listener(self._on_change)
        self._lost = False
        log.info("metadata store reopened session=0x%x", self.store.session_id)

    def _path(self, read_only: bool) -> str:
        if read_only:
            return paths.readonly_bookie_registration(self.info.bookie_id)
        return paths.bookie_registration(self.info.bookie_id)

    async def _ensure(self) -> None:
        """Create the node if missing; move it when read-only mode changed."""
        read_only = bool(self._read_only())
        path = self._path(read_only)
        store = self.store
        if self._registered_path is not None and self._registered_path != path:
            with contextlib.suppress(NotFound):
                await store.delete(self._registered_path)
            log.info("bookie mode changed read_only=%s", read_only)
            self._registered_path = None
        if await store.exists(paths.bookie_cookie(self.info.bookie_id)) is not None:
            self._cookie_seen = True
        elif self._cookie_seen:
            # Decommissioned (``magnetar bookie decommission`` deleted the cookie after moving
            # every ledger away): never announce this bookie again.
            if not self.decommissioned:
                log.warning(
                    "bookie %s has no cookie in metadata: decommissioned, not registering",
                    self.info.bookie_id,
                )
            self.decommissioned = True
            if self._registered_path is not None:
                with contextlib.suppress(NotFound):
                    await store.delete(self._registered_path)
                self._registered_path = None
            return
        stat = await store.exists(path)
        if stat is not None and stat.ephemeral_owner == store.session_id:
            self._registered_path = path
            return
        if stat is not None:
            got = await store.get(path)
            old = json.loads(got.value) if got is not None else {}
            if old.get("instance_id") != self.info.instance_id:
                log.warning(
                    "registration %s is held by another instance %s; waiting for it to expire",
                    path,
                    old.get("instance_id"),
                )
                return
            log.info("replacing stale registration of a previous incarnation path=%s", path)
            with contextlib.suppress(NotFound):
                await store.delete(path)
        try:
            await store.put(
                path, self.info.encode(read_only), expected_version=CREATE_ONLY, ephemeral=True
            )
        except AlreadyExists:
            return  # raced with the previous incarnation's expiry; next check settles it
        self._registered_path = path
        self._registered_read_only = read_only
        self.registrations += 1
        log.info("bookie registered path=%s address=%s", path, self.info.address)

    async def stop(self) -> None:
        """Delete the registration node (graceful shutdown). The store stays open."""
        self._stopped = True
        self._kick.set()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._registered_path is not None:
            with contextlib.suppress(MetadataError):
                await self.store.delete(self._registered_path)
            log.info("bookie deregistered path=%s", self._registered_path)
            self._registered_path = None


class LiveLedgerLister:
    """Lists the ledger ids that exist in metadata, for the storage engine's GC."""

    def __init__(self, store: MetadataStore) -> None:
        self.store = store

    async def live_ledgers(self) -> set[int] | None:
        """Ledger ids under ``LEDGER_META_ROOT``; None when the root does not exist (then GC
        must not run: an empty answer would look like 'every ledger was deleted')."""
        if await self.store.exists(paths.LEDGER_META_ROOT) is None:
            return None
        out: set[int] = set()
        for name in await self.store.children(paths.LEDGER_META_ROOT):
            lid = paths.ledger_id_of(name)
            if lid is not None:
                out.add(lid)
        return out


__all__ = [
    "COOKIE_FILE",
    "BookieRegistration",
    "Cookie",
    "CookieError",
    "LiveLedgerLister",
    "RegistrationInfo",
    "check_cookie",
    "read_local_cookie",
    "write_local_cookie",
]
