"""The test kit's waits and virtual time (``support.waiting``, ``support.autojump``): a wait
returns the first truthy value and fails naming what it waited for; the autojump clock moves
only when the loop is idle, only to a pending timer, and never while nothing is pending."""

from __future__ import annotations

import asyncio
import itertools

import pytest
from support.autojump import AutojumpClock
from support.waiting import wait_for, wait_until


def test_wait_until_returns_the_value_and_names_what_timed_out() -> None:
    counter = itertools.count()
    assert wait_until(lambda: next(counter) >= 3 and "done", 5, interval_s=0.001) == "done"
    with pytest.raises(AssertionError, match="waiting for the impossible"):
        wait_until(lambda: False, 0.05, "the impossible", interval_s=0.01)


def test_wait_until_treats_ignored_errors_as_not_yet() -> None:
    calls = itertools.count()

    def flaky() -> bool:
        if next(calls) < 2:
            raise ConnectionRefusedError
        return True

    assert wait_until(flaky, 5, interval_s=0.001, ignore=(ConnectionRefusedError,))
    with pytest.raises(AssertionError, match="ConnectionRefusedError"):
        wait_until(_refused, 0.05, interval_s=0.01, ignore=(ConnectionRefusedError,))
    with pytest.raises(ConnectionRefusedError):  # not ignored: raised at once
        wait_until(_refused, 5)


def _refused() -> bool:
    raise ConnectionRefusedError


async def test_wait_for_takes_sync_and_async_predicates() -> None:
    flag = asyncio.Event()
    asyncio.get_running_loop().call_soon(flag.set)
    await wait_for(flag.is_set, what="the flag")

    async def ready() -> str:
        return "yes" if flag.is_set() else ""

    assert await wait_for(ready) == "yes"
    with pytest.raises(AssertionError, match="waiting for never"):
        await wait_for(lambda: False, 0.05, "never")


async def test_autojump_runs_timers_in_order_at_their_virtual_times() -> None:
    async with AutojumpClock() as clock:
        t0 = clock.now_ms()
        seen: list[tuple[str, int]] = []

        async def sleeper(name: str, s: float) -> None:
            await clock.sleep(s)
            seen.append((name, clock.now_ms() - t0))

        await asyncio.gather(sleeper("hour", 3600), sleeper("minute", 60), sleeper("day", 86400))
    assert seen == [("minute", 60_000), ("hour", 3_600_000), ("day", 86_400_000)]


async def test_autojump_waits_while_the_loop_has_work() -> None:
    """A chain of ready callbacks runs to its end before time jumps to a pending timer."""
    async with AutojumpClock() as clock:
        fired = asyncio.Event()
        clock.call_later(1.0, fired.set)
        for _ in range(200):  # busy: something is always ready
            await asyncio.sleep(0)
            assert not fired.is_set() and clock.jumps == 0
        before = clock.now_ms()
        await fired.wait()
        assert clock.now_ms() - before <= 1000


async def test_autojump_skips_cancelled_timers_and_stands_still_without_timers() -> None:
    async with AutojumpClock() as clock:
        t0 = clock.now_ms()
        cancelled = clock.call_later(10.0, lambda: None)
        cancelled.cancel()
        await clock.sleep(1.0)
        assert clock.now_ms() - t0 == 1000  # the cancelled 10 s timer was not jumped to
        jumps = clock.jumps
        for _ in range(50):
            await asyncio.sleep(0)
        assert clock.jumps == jumps and clock.now_ms() - t0 == 1000
