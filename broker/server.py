"""Running the broker's event loop: uvloop when it is installed, plain asyncio otherwise.

Owns: ``run(main)`` (what the ``magnetar broker`` / ``standalone`` entry points call) and
``new_event_loop()`` (for tests or embedders that drive a loop themselves). The protocol
server itself is started by ``BrokerService.start()``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

R = TypeVar("R")


def uvloop_available() -> bool:
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return False
    return True


def new_event_loop() -> asyncio.AbstractEventLoop:
    if uvloop_available():
        import uvloop

        return uvloop.new_event_loop()
    return asyncio.new_event_loop()


def run(main: Coroutine[Any, Any, R]) -> R:
    """Run ``main`` to completion on a fresh (uv)loop."""
    with asyncio.Runner(loop_factory=new_event_loop) as runner:
        return runner.run(main)


__all__ = ["new_event_loop", "run", "uvloop_available"]
