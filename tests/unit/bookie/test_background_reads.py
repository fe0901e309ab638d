"""Background reads are spaced to their share of the bookie's time while adds come in."""

from __future__ import annotations

import asyncio

import pytest

from magnetar.bookie.background import (
    ADDS_RECENT_S,
    CALL_COST_S,
    MIB_COST_S,
    WAIT_MAX_S,
    BackgroundReads,
)
from magnetar.clock import VirtualClock

pytestmark = pytest.mark.unit


ANSWER = b"e" * (1 << 20)  # a 1 MiB answer
COST_MS = (CALL_COST_S + MIB_COST_S) * 1000
"""What the model charges for one read of ``ANSWER``."""


def _read(clock: VirtualClock, took_s: float, log: list[float]):  # type: ignore[no-untyped-def]
    """A read that starts (logging the time), takes ``took_s`` of the clock, answers 1 MiB."""

    async def run() -> bytes:
        log.append(clock.monotonic_ms())
        clock.advance(took_s)
        return ANSWER

    return run


async def _serve(gate: BackgroundReads, clock: VirtualClock, took_s: float, log: list[float]):  # type: ignore[no-untyped-def]
    return await gate.run(_read(clock, took_s, log), len)


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_with_no_recent_add_background_reads_run_at_once() -> None:
    clock = VirtualClock()
    gate = BackgroundReads(5, clock)
    starts: list[float] = []
    for _ in range(3):
        assert await _serve(gate, clock, 0.01, starts) == ANSWER
    assert starts == [starts[0], starts[0] + 10, starts[0] + 20]  # back to back
    assert gate.statistics().paced == 0
    assert gate.statistics().reads == 3


async def test_while_adds_come_in_the_next_read_waits_for_the_share() -> None:
    clock = VirtualClock()
    gate = BackgroundReads(5, clock)
    starts: list[float] = []
    gate.note_add()
    await _serve(gate, clock, 0.003, starts)  # charged by the model, not its 3 ms
    second = asyncio.create_task(_serve(gate, clock, 0.003, starts))
    await _settle()
    assert len(starts) == 1  # waiting for its turn
    clock.advance(COST_MS * 19 / 1000 - 0.0005)
    gate.note_add()
    await _settle()
    assert len(starts) == 1
    clock.advance(0.001)
    await _settle()
    assert await second == ANSWER
    # 5 % of the time: the read's modelled cost one part, the wait after it 19 parts.
    assert starts[1] - starts[0] == pytest.approx(3 + COST_MS * 19, abs=1)
    stats = gate.statistics()
    assert stats.paced == 1
    assert stats.wait_s == pytest.approx(COST_MS * 19 / 1000, abs=0.001)


async def test_once_adds_stop_waiting_reads_need_not_wait() -> None:
    clock = VirtualClock()
    gate = BackgroundReads(1, clock)
    starts: list[float] = []
    gate.note_add()
    await _serve(gate, clock, 0.05, starts)
    clock.advance(ADDS_RECENT_S + 0.001)  # no add for a second
    await _serve(gate, clock, 0.05, starts)
    assert starts[1] - starts[0] == pytest.approx(50 + (ADDS_RECENT_S + 0.001) * 1000)
    assert gate.statistics().paced == 0


async def test_a_wait_is_bounded() -> None:
    clock = VirtualClock()
    gate = BackgroundReads(1, clock)
    starts: list[float] = []
    gate.note_add()
    big = b"e" * (100 << 20)  # 100 MiB: the model asks for minutes of waiting
    await gate.run(_read(clock, 1.0, starts), lambda _: len(big))
    pending = asyncio.create_task(_serve(gate, clock, 0.001, starts))
    await _settle()
    gate.note_add()
    clock.advance(WAIT_MAX_S)
    await _settle()
    await pending
    assert starts[1] - starts[0] == pytest.approx(1000 + WAIT_MAX_S * 1000)


async def test_share_100_never_waits_and_bad_shares_are_refused() -> None:
    clock = VirtualClock()
    gate = BackgroundReads(100, clock)
    starts: list[float] = []
    gate.note_add()
    for _ in range(3):
        await _serve(gate, clock, 0.01, starts)
    assert gate.statistics().paced == 0
    for bad in (0, 101, -5):
        with pytest.raises(ValueError, match=r"share_percent must be 1\.\.100"):
            BackgroundReads(bad, clock)


async def test_a_cancelled_waiting_read_is_never_started() -> None:
    clock = VirtualClock()
    gate = BackgroundReads(5, clock)
    starts: list[float] = []
    gate.note_add()
    await _serve(gate, clock, 0.01, starts)
    waiting = asyncio.create_task(_serve(gate, clock, 0.01, starts))
    await _settle()
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert len(starts) == 1
