"""``/metrics`` is built without holding the loop: ``join_yielding`` gives the loop a turn
between chunks once a slice is used up, so other work on the loop (a client's request) runs
while a big exposition text is being built. Structure, not timing: a fake clock decides
when a slice is over."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterator

from magnetar.broker.admin.http_api import join_yielding


async def test_other_work_on_the_loop_runs_while_the_text_is_built() -> None:
    events: list[str] = []

    def chunks() -> Iterator[str]:
        for i in range(50):
            events.append(f"chunk {i}")
            yield f'm{{topic="t{i}"}} {i}\n'

    async def client_request() -> None:
        events.append("client served")

    ticks = itertools.count()  # each clock reading is one "ms"; a slice is 10 of them
    task = asyncio.ensure_future(join_yielding(chunks(), slice_s=10, clock=lambda: next(ticks)))
    other = asyncio.ensure_future(client_request())
    text = await task
    await other
    assert text == "".join(f'm{{topic="t{i}"}} {i}\n' for i in range(50))
    served = events.index("client served")
    assert 0 < served < len(events) - 1, "the client was served in the middle of the build"


async def test_a_build_within_one_slice_does_not_yield() -> None:
    events: list[str] = []

    def chunks() -> Iterator[str]:
        for i in range(5):
            events.append(f"chunk {i}")
            yield f"{i}\n"

    async def client_request() -> None:
        events.append("client served")

    task = asyncio.ensure_future(join_yielding(chunks(), slice_s=10, clock=lambda: 0.0))
    other = asyncio.ensure_future(client_request())
    assert await task == "0\n1\n2\n3\n4\n"
    await other
    assert events[-1] == "client served", "small texts are built in one go"
