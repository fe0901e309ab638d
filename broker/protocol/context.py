"""What the command handlers of an area use of their connection (``ServerConnection`` is the
one implementation): a small Protocol, so the area modules and the connection do not import
each other.

Owns: ``ConnectionContext`` and ``Handler`` (one command's handler, as the connection routes
it).
Must not know: anything of an area.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from magnetar.broker.errors import ServerError
from magnetar.broker.protocol.connection_security import ConnectionSecurity
from magnetar.broker.protocol.tasks import CommandTasks
from magnetar.client.protocol import Connection, pb
from magnetar.clock import Clock

if TYPE_CHECKING:
    from magnetar.broker.service import BrokerService

Handler = Callable[[pb.BaseCommand], None]
"""Handles one command (its work may continue in a task: ``CommandTasks``)."""


class ConnectionContext(Protocol):
    """One client connection, as the handlers of its commands see it."""

    service: BrokerService
    security: ConnectionSecurity
    codec: Connection
    tasks: CommandTasks
    clock: Clock
    peer: str
    closed: bool
    write_paused: bool
    """The transport's buffer is over its high-water mark: no dispatch to this connection."""

    @property
    def protocol_version(self) -> int: ...

    @property
    def client_version(self) -> str: ...

    @property
    def cpp_core_client(self) -> bool:
        """The client is built on the C++ client core (C++, Python, Node.js)."""
        ...

    def write(self, data: bytes) -> None: ...

    def write_frames(self, frames: list[bytes]) -> None: ...

    def write_command(self, cmd: pb.BaseCommand) -> None: ...

    def error_response(self, request_id: int, code: ServerError, message: str) -> None: ...

    def success(self, request_id: int) -> None: ...

    def pause_reads(self, reason: str) -> bool: ...

    def resume_reads(self, reason: str) -> None: ...

    def ping_barrier(self) -> asyncio.Future[None]: ...


__all__ = ["ConnectionContext", "Handler"]
