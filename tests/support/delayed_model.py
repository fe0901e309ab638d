"""A model topic + dispatcher driving a ``DelayedDeliveryIndex`` like the Shared dispatcher.

``DelayedHarness`` publishes entries (position order) with due times, "reads" them the way
the dispatcher does (``add``; dispatch at once when it answers False), pops due entries on a
``VirtualClock``, acknowledges every delivered entry, and can "crash" the index (abandon it
without I/O, open a new one on the same storage, re-read every unacknowledged entry).
It records every delivery with its virtual time so tests can assert: nothing early, nothing
lost, nothing twice.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from magnetar.broker.delayed import DelayedDeliveryIndex
from magnetar.broker.ledger.position import Position
from magnetar.clock import VirtualClock


@dataclass
class DelayedHarness:
    clock: VirtualClock
    index: DelayedDeliveryIndex
    reopen: Callable[[], Awaitable[DelayedDeliveryIndex]]
    ledger_id: int = 7
    next_entry: int = 0
    due: dict[Position, int] = field(default_factory=dict)
    unread: list[Position] = field(default_factory=list)
    acked: set[Position] = field(default_factory=set)
    deliveries: list[tuple[Position, int]] = field(default_factory=list)

    def publish(self, delay_ms: int) -> Position:
        pos = Position(self.ledger_id, self.next_entry)
        self.next_entry += 1
        self.due[pos] = self.clock.now_ms() + delay_ms
        self.unread.append(pos)
        return pos

    def _deliver(self, pos: Position) -> None:
        if pos in self.acked:  # the dispatcher's replay read skips acknowledged entries
            return
        self.deliveries.append((pos, self.clock.now_ms()))
        self.acked.add(pos)

    def read(self) -> None:
        """The dispatcher reads new entries from the cursor."""
        for pos in self.unread:
            if not self.index.add(pos, self.due[pos]):
                self._deliver(pos)
        self.unread.clear()

    def pop(self) -> int:
        got = self.index.pop_due(self.clock.now_ms(), 10_000)
        for pos in got:
            self._deliver(pos)
        return len(got)

    async def run_until(self, end_ms: int) -> None:
        """Advance virtual time to each next due time (and to ``end_ms``), popping."""
        while True:
            await self.index.wait_idle()
            self.pop()
            nd = self.index.next_due_ms()
            now = self.clock.now_ms()
            if nd is None or nd > end_ms:
                if end_ms > now:
                    self.clock.advance((end_ms - now) / 1000.0)
                    await self.index.wait_idle()
                    self.pop()
                return
            if nd > now:
                self.clock.advance((nd - now) / 1000.0)

    async def crash_and_recover(self, downtime_ms: int = 0) -> None:
        """The broker dies (no flush); ``downtime_ms`` later a new owner recovers and re-reads
        every unacknowledged entry."""
        self.index.abandon()
        if downtime_ms:
            self.clock.advance(downtime_ms / 1000.0)
        self.index = await self.reopen()
        self.unread = sorted(p for p in self.due if p not in self.acked)

    def check(self, *, max_lateness_ms: int = 1_000) -> None:
        delivered = [p for p, _ in self.deliveries]
        assert len(delivered) == len(set(delivered)), "an entry was delivered twice"
        for pos, at in self.deliveries:
            assert at >= self.due[pos], f"{pos} delivered {self.due[pos] - at} ms early"
            assert at - self.due[pos] <= max_lateness_ms, f"{pos} {at - self.due[pos]} ms late"

    def undelivered(self) -> list[Position]:
        return sorted(set(self.due) - {p for p, _ in self.deliveries})
