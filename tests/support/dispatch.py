"""Waiting for dispatch in the broker's unit tiers, where consumers send into a recording sink.

Owns: ``dispatched(*subs)``, which returns once every subscription's dispatcher has no round
under way or scheduled (``Dispatcher.running`` is False). Flow, acks, redelivery and consumer
changes schedule a round synchronously, so after such a call this is the condition "every
message that call makes deliverable has been handed to the sink", and "nothing more arrives"
can be asserted right after it. Timers (the failover delay, delayed delivery) are not rounds:
tests drive them with an injected ``VirtualClock``. Must not know: what the test expects.
"""

from __future__ import annotations

from magnetar.broker.topics.subscription import Subscription
from support.waiting import wait_for


async def dispatched(*subs: Subscription, timeout_s: float = 30.0) -> None:
    def idle() -> bool:
        return all(s.dispatcher is None or not s.dispatcher.running for s in subs)

    await wait_for(idle, timeout_s, "dispatch rounds done")


__all__ = ["dispatched"]
