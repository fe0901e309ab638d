"""The asyncio tasks a connection runs for its commands, and their order.

Owns: ``CommandTasks``: every task a connection's commands start (a failure is logged, never
raised; all are cancelled when the connection is lost), and ``CommandChains``: commands for
one producer id (or one consumer id) run in arrival order, each awaiting the previous (a
chain per id), while commands for different ids run concurrently.
Invariant: a chain's entry is its newest task, and is removed when that task is done.
Must not know: commands, frames, topics.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any

log = logging.getLogger(__name__)

Step = Callable[[], Coroutine[Any, Any, None]]
"""A command's work: called once its turn in its chain comes."""


class CommandTasks:
    """All tasks of one connection."""

    def __init__(self, loop: asyncio.AbstractEventLoop, peer: Callable[[], str]) -> None:
        self._loop = loop
        self._peer = peer
        self._tasks: set[asyncio.Task[Any]] = set()

    def __repr__(self) -> str:
        return f"<CommandTasks {self._peer()} running={len(self._tasks)}>"

    def __len__(self) -> int:
        return len(self._tasks)

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        task = self._loop.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("connection task failed on %s", self._peer(), exc_info=task.exception())

    def cancel_all(self) -> None:
        for task in list(self._tasks):
            task.cancel()


class CommandChains:
    """Arrival order for the commands of each id of one kind (producer or consumer ids)."""

    def __init__(self, tasks: CommandTasks) -> None:
        self._tasks = tasks
        self._chains: dict[int, asyncio.Task[None]] = {}

    def __repr__(self) -> str:
        return f"<CommandChains pending={sorted(self._chains)}>"

    def pending(self, key: int) -> bool:
        """A command of ``key`` has not finished yet."""
        return key in self._chains

    def last(self, key: int) -> asyncio.Task[None] | None:
        """The newest task of ``key``'s chain, if one is pending."""
        return self._chains.get(key)

    def run(self, key: int, step: Step) -> None:
        """Run ``step`` after every command of ``key`` that arrived before it."""
        prev = self._chains.get(key)

        async def run() -> None:
            if prev is not None and not prev.done():
                await asyncio.wait([prev])
            await step()

        task = self._tasks.spawn(run())
        self._chains[key] = task

        def done(t: asyncio.Task[None]) -> None:
            if self._chains.get(key) is t:
                del self._chains[key]

        task.add_done_callback(done)


__all__ = ["CommandChains", "CommandTasks", "Step"]
