"""``CompactionMonitor``: automatic compaction over the ``compactionThreshold`` policy.

Owns: the periodic check (every ``interval_s``, on the injected ``Clock``) that compacts each
loaded persistent topic whose bytes not yet compacted exceed its threshold (resolved
``compaction_threshold``; 0 = off).

Invariants: a timer tick while the previous check still runs starts no second one; a
topic already compacting, closing or closed is skipped; after ``close()`` nothing is armed.
Must not know: how a compaction runs or how views are stored (a topic's ``TopicCompaction``
is asked whether it runs and how much is not compacted, and told to start), topics beyond
``MonitoredTopic``, policies (the threshold comes from ``threshold_of``), sockets, frames,
dispatch.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from typing import Any, Generic, Protocol, TypeVar

from magnetar.broker.compaction.compactor import TopicCompaction
from magnetar.clock import Clock, SystemClock


class MonitoredTopic(Protocol):
    """What the monitor reads of a loaded persistent topic."""

    @property
    def closed(self) -> bool: ...

    @property
    def compaction(self) -> TopicCompaction | None: ...


T = TypeVar("T", bound=MonitoredTopic)


class CompactionMonitor(Generic[T]):
    """Every ``interval_s``: compact each loaded persistent topic whose bytes not yet
    compacted exceed its threshold (resolved ``compaction_threshold``; 0 = off)."""

    def __init__(
        self,
        topics: Callable[[], Iterable[T]],
        threshold_of: Callable[[T], int],
        interval_s: float,
        clock: Clock | None = None,
    ) -> None:
        self.topics = topics
        self.threshold_of = threshold_of
        self.interval_s = interval_s
        self.clock: Clock = clock or SystemClock()
        self._timer: Any = None
        self._task: asyncio.Task[int] | None = None
        self.checks = 0
        self.triggered = 0
        self.closed = False

    def __repr__(self) -> str:
        return f"<CompactionMonitor every {self.interval_s}s triggered={self.triggered}>"

    def start(self) -> None:
        if self.interval_s > 0:
            self._arm()

    def _arm(self) -> None:
        if not self.closed:
            self._timer = self.clock.call_later(self.interval_s, self._fire)

    def _fire(self) -> None:
        if self.closed:
            return
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self.check_now())
        self._arm()

    def close(self) -> None:
        self.closed = True
        if self._timer is not None:
            self._timer.cancel()
        if self._task is not None and not self._task.done():
            self._task.cancel()

    async def check_now(self) -> int:
        """One pass; returns how many compactions it started."""
        self.checks += 1
        started = 0
        for topic in list(self.topics()):
            comp = topic.compaction
            if comp is None or comp.running or comp.closed or topic.closed:
                continue
            threshold = self.threshold_of(topic)
            if threshold <= 0:
                continue
            try:
                pending = await comp.uncompacted_bytes(topic)
            except Exception:
                continue
            if pending > threshold and not comp.running:
                comp.trigger(topic)
                started += 1
        self.triggered += started
        return started


__all__ = ["CompactionMonitor", "MonitoredTopic"]
