"""A fault-injecting ``MetadataStore`` wrapper for tests of everything built on the store.

Owns: ``FaultInjectingStore(inner)``, which forwards every call to ``inner`` except when a
scheduled fault matches: fail the next op(s) on a path (prefix or regex, optionally only
some operations) with a given error, before or after the inner call took effect; add
latency to every op; drop the session (LOST to session listeners, ``SessionLost`` from then
on, and the inner store is closed so its ephemeral nodes vanish, as after a real expiry).
Must not know: the inner implementation.

Invariant: a fault fires at most ``count`` times; faults are checked in the order added.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar, cast

from magnetar.zk.errors import MetadataError, SessionLost, StoreClosed
from magnetar.zk.store import (
    GetResult,
    Listener,
    MetadataStore,
    PutResult,
    SessionEvent,
    SessionListener,
    Stat,
)

log = logging.getLogger(__name__)

T = TypeVar("T")

OPERATIONS = frozenset({"get", "exists", "children", "put", "delete"})


@dataclass(slots=True)
class Fault:
    """One scheduled failure. ``after=True``: the op takes effect, then the error is raised
    (a reply lost on the way back, the classic ambiguous ``ConnectionLoss``)."""

    matcher: Callable[[str], bool]
    error: Callable[[str], BaseException]
    operations: frozenset[str]
    remaining: int
    after: bool = False

    def matches(self, operation: str, path: str) -> bool:
        return self.remaining > 0 and operation in self.operations and self.matcher(path)


@dataclass(frozen=True, slots=True)
class FaultStatistics:
    operations: int
    injected_failures: int
    pending_faults: int
    session_dropped: bool


class FaultInjectingStore(MetadataStore):
    """Wraps a store; see the module docstring."""

    def __init__(self, inner: MetadataStore) -> None:
        self._inner = inner
        self._faults: list[Fault] = []
        self._latency_s = 0.0
        self._dropped = False
        self._closed = False
        self._operations = 0
        self._injected = 0
        self._listeners: list[Listener] = []
        self._session_listeners: list[SessionListener] = []
        inner.add_listener(self._forward)
        inner.add_session_listener(self._forward_session)

    def __repr__(self) -> str:
        return f"<FaultInjectingStore {self._inner!r} faults={len(self._faults)}>"

    @property
    def inner(self) -> MetadataStore:
        return self._inner

    @property
    def session_id(self) -> int:
        return self._inner.session_id

    @property
    def connected(self) -> bool:
        return not self._dropped and not self._closed and self._inner.connected

    # -- fault control ----------------------------------------------------------------------
    def fail_next(
        self,
        path: str | re.Pattern[str],
        error: type[BaseException] | BaseException | Callable[[str], BaseException],
        *,
        operations: str | frozenset[str] | set[str] | None = None,
        count: int = 1,
        after: bool = False,
    ) -> Fault:
        """Fail the next ``count`` ops on paths starting with ``path`` (str) or matching it
        (compiled regex, ``search``). ``error`` is an exception class (built with the path),
        an instance, or a factory ``path -> exception``."""
        if isinstance(path, re.Pattern):
            pattern = path

            def matcher(p: str) -> bool:
                return pattern.search(p) is not None
        else:
            prefix = path

            def matcher(p: str) -> bool:
                return p == prefix or p.startswith(prefix.rstrip("/") + "/") or prefix == "/"

        factory = _error_factory(error)
        ops = (
            OPERATIONS
            if operations is None
            else frozenset({operations} if isinstance(operations, str) else operations)
        )
        unknown = ops - OPERATIONS
        if unknown:
            raise ValueError(f"unknown operations {sorted(unknown)}")
        fault = Fault(matcher, factory, ops, count, after)
        self._faults.append(fault)
        return fault

    def set_latency(self, seconds: float) -> None:
        """Delay every following operation by ``seconds`` (0 turns it off)."""
        if seconds < 0:
            raise ValueError("latency must be >= 0")
        self._latency_s = seconds

    async def drop_session(self) -> None:
        """Lose the session: emit LOST, fail further ops, close the inner store."""
        if self._dropped:
            return
        self._dropped = True
        await self._inner.close()
        self._emit_session(SessionEvent.LOST)

    def statistics(self) -> FaultStatistics:
        return FaultStatistics(
            operations=self._operations,
            injected_failures=self._injected,
            pending_faults=sum(1 for f in self._faults if f.remaining > 0),
            session_dropped=self._dropped,
        )

    # -- plumbing ---------------------------------------------------------------------------
    async def _run(self, operation: str, path: str, call: Callable[[], Awaitable[T]]) -> T:
        if self._dropped:
            raise SessionLost("session dropped by fault injection", path=path)
        if self._closed:
            raise StoreClosed("store is closed", path=path)
        self._operations += 1
        fault = next((f for f in self._faults if f.matches(operation, path)), None)
        if fault is not None:
            fault.remaining -= 1
            self._faults = [f for f in self._faults if f.remaining > 0]
        if self._latency_s:
            await asyncio.sleep(self._latency_s)
        if fault is not None and not fault.after:
            self._injected += 1
            raise fault.error(path)
        result = await call()
        if fault is not None:
            self._injected += 1
            raise fault.error(path)
        return result

    def _forward(self, notification: object) -> None:
        if self._dropped:
            return
        for listener in list(self._listeners):
            listener(notification)  # type: ignore[arg-type]

    def _forward_session(self, event: SessionEvent) -> None:
        if self._dropped:
            return  # LOST was already reported by drop_session
        self._emit_session(event)

    def _emit_session(self, event: SessionEvent) -> None:
        for listener in list(self._session_listeners):
            try:
                listener(event)
            except Exception:
                log.exception("session listener failed on %s", event)

    # -- MetadataStore ------------------------------------------------------------------------
    async def get(self, path: str) -> GetResult | None:
        return await self._run("get", path, lambda: self._inner.get(path))

    async def exists(self, path: str) -> Stat | None:
        return await self._run("exists", path, lambda: self._inner.exists(path))

    async def children(self, path: str) -> list[str]:
        return await self._run("children", path, lambda: self._inner.children(path))

    async def put(
        self,
        path: str,
        value: bytes,
        *,
        expected_version: int | None = None,
        ephemeral: bool = False,
        sequential: bool = False,
    ) -> PutResult:
        return await self._run(
            "put",
            path,
            lambda: self._inner.put(
                path,
                value,
                expected_version=expected_version,
                ephemeral=ephemeral,
                sequential=sequential,
            ),
        )

    async def delete(self, path: str, *, expected_version: int | None = None) -> None:
        await self._run(
            "delete", path, lambda: self._inner.delete(path, expected_version=expected_version)
        )

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if not self._dropped:
            await self._inner.close()


def _error_factory(
    error: type[BaseException] | BaseException | Callable[[str], BaseException],
) -> Callable[[str], BaseException]:
    if isinstance(error, BaseException):
        instance = error
        return lambda _path: instance
    if isinstance(error, type) and issubclass(error, MetadataError):
        cls = error
        return lambda path: cls("injected fault", path=path)
    if isinstance(error, type) and issubclass(error, BaseException):
        plain = error
        return lambda path: plain(f"injected fault [{path}]")
    return cast("Callable[[str], BaseException]", error)


__all__ = ["Fault", "FaultInjectingStore", "FaultStatistics"]
