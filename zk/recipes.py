"""Coordination recipes over any ``MetadataStore``: leader election, ownership lock, id blocks.

Owns:
- ``LeaderElection``: each contender creates an ephemeral sequential node under the election
  path; the lowest sequence leads; every other contender watches only its predecessor (no
  herd on a change). Leadership is dropped on SUSPENDED (we cannot know whether the session
  survives; Curator's LeaderLatch does the same), re-checked on RECONNECTED, and lost for
  good on LOST.
- ``OwnershipLock``: one ephemeral node holding the owner's value (Pulsar's ResourceLock,
  e.g. bundle ownership). ``acquire`` raises ``LockBusy`` when another session holds it; the
  lock is released on ``release``/close and lost with the session; after a reconnect it is
  revalidated and re-created if it vanished while still ours.
- ``IdAllocator``: unique 64-bit ids across processes by claiming blocks with a
  compare-and-set on one counter node (``paths.LEDGER_IDGEN`` by default). Ids are not
  ordered across processes (each hands out its own block), but ``next_id(min_id)`` returns
  an id above ``min_id``, skipping to a fresh block when needed: a caller that must see its
  ids increase (a managed ledger's ledgers) passes the largest id it knows.
Must not know: who competes, what the ids name.

Invariants: at most one contender of an election observes ``is_leader`` while its node is
the lowest; an ``IdAllocator`` never returns an id twice, and no two allocators on one
counter return the same id (blocks are disjoint by CAS); the counter is above every id
returned; ``next_id(min_id) > min_id``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass

from magnetar.zk import paths
from magnetar.zk.errors import (
    AlreadyExists,
    BadVersion,
    ConnectionLoss,
    LockBusy,
    MetadataError,
    NotFound,
    OperationTimeout,
    SessionLost,
    StoreClosed,
)
from magnetar.zk.store import (
    CREATE_ONLY,
    MetadataStore,
    Notification,
    NotificationType,
    SessionEvent,
    name_of,
)

log = logging.getLogger(__name__)

_CANDIDATE_PREFIX = "n_"


def _sequence_of(name: str) -> int:
    digits = name[-10:]
    return int(digits) if digits.isdigit() else -1


class LeaderElection:
    """One contender in the election at ``path``. ``await start()`` to join."""

    def __init__(
        self,
        store: MetadataStore,
        path: str,
        value: bytes = b"",
        *,
        on_change: Callable[[bool], None] | None = None,
    ) -> None:
        self._store = store
        self._path = path.rstrip("/")
        self._value = value
        self._on_change = on_change
        self._node: str | None = None
        self._predecessor: str | None = None
        self._leader = False
        self._leader_event = asyncio.Event()
        self._wake = asyncio.Event()
        self._connected = asyncio.Event()
        self._connected.set()
        self._task: asyncio.Task[None] | None = None
        self._stopped = False

    def __repr__(self) -> str:
        role = "leader" if self._leader else "follower"
        return f"<LeaderElection {self._path} node={self._node} {role}>"

    @property
    def is_leader(self) -> bool:
        return self._leader

    @property
    def node(self) -> str | None:
        """This contender's node, e.g. ``/loadbalance/leader/n_0000000003``."""
        return self._node

    async def start(self) -> None:
        if self._task is not None:
            return
        self._stopped = False
        self._store.add_listener(self._on_notification)
        self._store.add_session_listener(self._on_session)
        await self._create_node()
        self._task = asyncio.create_task(self._run(), name=f"leader-election:{self._path}")

    async def wait_for_leadership(self, timeout_s: float | None = None) -> None:
        """Return once this contender leads; ``TimeoutError`` after ``timeout_s``."""
        async with asyncio.timeout(timeout_s):
            await self._leader_event.wait()

    async def leader_value(self) -> bytes | None:
        """The value written by the current leader (None: no contender)."""
        current = await self.current_leader()
        return None if current is None else current[1]

    async def current_leader(self) -> tuple[str, bytes, int] | None:
        """(node path, value, version) of the current leader's node (None: no contender).
        Deleting that node (by version) makes the next contender the leader: how another
        process deposes a leader it knows to be dead before its session expires."""
        for name in await self._candidates():
            path = f"{self._path}/{name}"
            got = await self._store.get(path)
            if got is not None:
                return path, got.value, got.stat.version
        return None

    async def resign(self) -> None:
        """Leave the election (the next contender takes over). ``start`` joins again."""
        self._stopped = True
        self._store.remove_listener(self._on_notification)
        self._store.remove_session_listener(self._on_session)
        task, self._task = self._task, None
        if task is not None:
            # Wake it as well as cancel it: the run loop ends on _stopped even if a
            # cancellation is swallowed by a racing completion somewhere below.
            self._wake.set()
            self._connected.set()
            task.cancel()
            await asyncio.wait({task})
        node, self._node = self._node, None
        self._set_leader(False)
        if node is not None:
            with contextlib.suppress(NotFound, SessionLost, StoreClosed, ConnectionLoss):
                await self._store.delete(node)

    close = resign

    # -- internals --------------------------------------------------------------------------
    async def _create_node(self) -> None:
        result = await self._store.put(
            f"{self._path}/{_CANDIDATE_PREFIX}", self._value, ephemeral=True, sequential=True
        )
        self._node = result.path

    async def _candidates(self) -> list[str]:
        names = [
            n for n in await self._store.children(self._path) if n.startswith(_CANDIDATE_PREFIX)
        ]
        return sorted(names, key=_sequence_of)

    async def _run(self) -> None:
        while not self._stopped:
            self._wake.clear()
            try:
                await self._check()
            except (ConnectionLoss, OperationTimeout):
                self._set_leader(False)
                await asyncio.sleep(0.05)  # retry backoff: the SUSPENDED event may lag the error
                await self._connected.wait()
                continue
            except (SessionLost, StoreClosed):
                self._set_leader(False)
                return
            except Exception:
                log.exception("leader election %s: check failed", self._path)
                self._set_leader(False)
            if self._stopped:
                return
            await self._wake.wait()

    async def _check(self) -> None:
        while True:
            candidates = await self._candidates()
            assert self._node is not None
            mine = name_of(self._node)
            if mine not in candidates:
                # Our node vanished (deleted by an operator?): join again at the back.
                self._set_leader(False)
                await self._create_node()
                continue
            index = candidates.index(mine)
            if index == 0:
                self._predecessor = None
                # Watch our own node: another process may delete it (a follower deposing a
                # leader it found unresponsive); a leader that comes back must then follow.
                if await self._store.exists(self._node) is None:
                    continue
                self._set_leader(True)
                return
            self._set_leader(False)
            self._predecessor = f"{self._path}/{candidates[index - 1]}"
            if await self._store.exists(self._predecessor) is not None:
                return  # watching it now; a change wakes us
            # It went between listing and watching: look again.

    def _on_notification(self, notification: Notification) -> None:
        if notification.path in (self._predecessor, self._node) and notification.type in (
            NotificationType.DELETED,
            NotificationType.CREATED,
        ):
            self._wake.set()

    def _on_session(self, event: SessionEvent) -> None:
        if event is SessionEvent.SUSPENDED:
            self._connected.clear()
            self._set_leader(False)
        elif event in (SessionEvent.RECONNECTED, SessionEvent.CONNECTED):
            self._connected.set()
            self._wake.set()
        elif event is SessionEvent.LOST:
            self._stopped = True
            self._set_leader(False)
            self._connected.set()
            self._wake.set()

    def _set_leader(self, leader: bool) -> None:
        if leader == self._leader:
            return
        self._leader = leader
        if leader:
            self._leader_event.set()
        else:
            self._leader_event.clear()
        log.info("leader election %s: %s is %s", self._path, self._node, leader and "leader")
        if self._on_change is not None:
            try:
                self._on_change(leader)
            except Exception:
                log.exception("leader election %s: on_change failed", self._path)


class OwnershipLock:
    """An ephemeral node at ``path`` holding ``value`` while this session owns it."""

    def __init__(
        self,
        store: MetadataStore,
        path: str,
        value: bytes,
        *,
        on_lost: Callable[[], None] | None = None,
    ) -> None:
        self._store = store
        self._path = path
        self._value = value
        self._on_lost = on_lost
        self._held = False
        self._listening = False
        self._revalidating: asyncio.Task[None] | None = None

    def __repr__(self) -> str:
        return f"<OwnershipLock {self._path} {'held' if self._held else 'free'}>"

    @property
    def path(self) -> str:
        return self._path

    @property
    def value(self) -> bytes:
        return self._value

    @property
    def is_held(self) -> bool:
        return self._held

    async def acquire(self) -> None:
        """Take the lock; ``LockBusy`` (an ``AlreadyExists``) if another session holds it."""
        await self._take()
        self._held = True
        if not self._listening:
            self._listening = True
            self._store.add_listener(self._on_notification)
            self._store.add_session_listener(self._on_session)

    async def _take(self) -> None:
        for _ in range(5):
            try:
                await self._store.put(
                    self._path, self._value, expected_version=CREATE_ONLY, ephemeral=True
                )
            except AlreadyExists:
                got = await self._store.get(self._path)
                if got is None:
                    continue  # released in between: try again
                if got.stat.ephemeral_owner != self._store.session_id:
                    raise LockBusy(
                        "lock held by another session", path=self._path, owner_value=got.value
                    ) from None
                if got.value != self._value:  # ours (an earlier ambiguous create)
                    await self._store.put(
                        self._path, self._value, expected_version=got.stat.version
                    )
            else:
                await self._store.exists(self._path)  # watch it
            return
        raise LockBusy("lock keeps changing hands", path=self._path)

    async def release(self) -> None:
        """Delete the node if it is still ours. Idempotent."""
        was_held, self._held = self._held, False
        if self._listening:
            self._listening = False
            self._store.remove_listener(self._on_notification)
            self._store.remove_session_listener(self._on_session)
        if self._revalidating is not None:
            self._revalidating.cancel()
        if not was_held:
            return
        try:
            got = await self._store.get(self._path)
            if got is not None and got.stat.ephemeral_owner == self._store.session_id:
                await self._store.delete(self._path, expected_version=got.stat.version)
        except (NotFound, BadVersion, SessionLost, StoreClosed, ConnectionLoss):
            pass

    close = release

    def _lost(self) -> None:
        if not self._held:
            return
        self._held = False
        log.warning("ownership lock %s lost", self._path)
        if self._on_lost is not None:
            try:
                self._on_lost()
            except Exception:
                log.exception("ownership lock %s: on_lost failed", self._path)

    def _on_notification(self, notification: Notification) -> None:
        if (
            self._held
            and notification.path == self._path
            and notification.type is NotificationType.DELETED
        ):
            self._revalidate()

    def _on_session(self, event: SessionEvent) -> None:
        if event is SessionEvent.LOST:
            self._lost()
        elif event is SessionEvent.RECONNECTED and self._held:
            self._revalidate()

    def _revalidate(self) -> None:
        if self._revalidating is not None and not self._revalidating.done():
            return
        self._revalidating = asyncio.get_running_loop().create_task(self._do_revalidate())

    async def _do_revalidate(self) -> None:
        try:
            await self._take()
        except LockBusy:
            self._lost()
        except (SessionLost, StoreClosed):
            self._lost()
        except MetadataError:
            log.warning("ownership lock %s: revalidation failed", self._path, exc_info=True)


@dataclass(frozen=True, slots=True)
class IdAllocatorStatistics:
    ids_returned: int
    blocks_claimed: int
    cas_conflicts: int


class IdAllocator:
    """Unique 64-bit ids across processes, claimed in blocks by CAS on one counter node.

    The node holds the next unclaimed id as ASCII decimal. Ids of a block not used before a
    restart are skipped, never reused.
    """

    ID_MAX = (1 << 63) - 1

    def __init__(
        self,
        store: MetadataStore,
        path: str = paths.LEDGER_IDGEN,
        *,
        block_size: int = 1000,
        first_id: int = 0,
        cas_attempts_max: int = 1000,
    ) -> None:
        if block_size < 1:
            raise ValueError("block_size must be >= 1")
        self._store = store
        self._path = path
        self._block_size = block_size
        self._first_id = first_id
        self._cas_attempts_max = cas_attempts_max
        self._next = 0
        self._end = 0  # exclusive end of the current block
        self._lock = asyncio.Lock()
        self._returned = 0
        self._blocks = 0
        self._conflicts = 0

    def __repr__(self) -> str:
        return f"<IdAllocator {self._path} block=[{self._next},{self._end})>"

    def statistics(self) -> IdAllocatorStatistics:
        return IdAllocatorStatistics(self._returned, self._blocks, self._conflicts)

    async def next_id(self, min_id: int = -1) -> int:
        """A new id, greater than ``min_id``.

        Ids come from this allocator's block while it has one above ``min_id``; otherwise a
        new block is claimed, starting at the counter (above every id any allocator on the
        counter has returned) or above ``min_id``, whichever is larger, and the rest of the
        old block is skipped. So a caller that passes the largest id it has seen gets an id
        larger than every id it has seen, whichever process allocated those.
        """
        if min_id >= self.ID_MAX:
            raise MetadataError(f"no 64-bit id above {min_id}", path=self._path)
        while True:
            if self._next >= self._end or self._next <= min_id:
                async with self._lock:
                    if self._next >= self._end or self._next <= min_id:
                        self._next, self._end = await self._claim_block(min_id + 1)
            # No await between the check above and taking the id; another task may have
            # taken the last id of the block (or a lower block) while we waited: look again.
            if self._next < self._end and self._next > min_id:
                value = self._next
                self._next += 1
                self._returned += 1
                return value

    async def _claim_block(self, floor: int = 0) -> tuple[int, int]:
        for _ in range(self._cas_attempts_max):
            got = await self._store.get(self._path)
            start = self._first_id if got is None else int(got.value.decode() or "0")
            start = max(start, floor)
            end = start + self._block_size
            if end > self.ID_MAX:
                raise MetadataError("64-bit id space exhausted", path=self._path)
            try:
                if got is None:
                    await self._store.put(
                        self._path, str(end).encode(), expected_version=CREATE_ONLY
                    )
                else:
                    await self._store.put(
                        self._path, str(end).encode(), expected_version=got.stat.version
                    )
            except (BadVersion, AlreadyExists, NotFound):
                self._conflicts += 1
                continue
            self._blocks += 1
            return start, end
        raise MetadataError("could not claim an id block (too much contention)", path=self._path)


__all__ = [
    "IdAllocator",
    "IdAllocatorStatistics",
    "LeaderElection",
    "OwnershipLock",
]
