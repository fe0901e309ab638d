"""The binary protocol's listeners: the plain port (6650) and the TLS port (6651).

Owns: ``BinaryListener``: binding the ports (and telling the service which ones it got, for
its advertised URLs), one ``ServerConnection`` per accepted socket, the broker-wide budget of
partial-frame bytes those connections share, and stopping accepting at shutdown.
Must not know: topics or HTTP; the service owns what connections act on.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING

from magnetar.broker.protocol.connection import ServerConnection
from magnetar.broker.protocol.input_budget import InputBudget

if TYPE_CHECKING:
    from magnetar.broker.service import BrokerService


class BinaryListener:
    """Pulsar's binary listeners of one broker (``brokerServicePort`` and its TLS twin)."""

    def __init__(self, service: BrokerService) -> None:
        self.service = service
        config = service.config
        self.input_budget = InputBudget(config.max_buffered_partial_frames_size_in_mb << 20)
        self._server: asyncio.AbstractServer | None = None
        self._tls_server: asyncio.AbstractServer | None = None

    def _connection(self, *, tls: bool) -> ServerConnection:
        return ServerConnection(self.service, tls=tls, input_budget=self.input_budget)

    async def start(self) -> None:
        """Bind the configured ports (0 = any free port) and give the service the bound ones.
        Raises ``ValueError`` when neither port is configured."""
        config = self.service.config
        loop = asyncio.get_running_loop()
        port = port_tls = -1
        if config.broker_service_port >= 0:
            self._server = await loop.create_server(
                lambda: self._connection(tls=False),
                host=config.bind_address,
                port=config.broker_service_port,
                reuse_address=True,
            )
            port = self._server.sockets[0].getsockname()[1]
        tls = self.service.tls
        if tls is not None and config.broker_service_port_tls >= 0:
            self._tls_server = await loop.create_server(
                lambda: self._connection(tls=True),
                host=config.bind_address,
                port=config.broker_service_port_tls,
                reuse_address=True,
                ssl=tls.front,
            )
            port_tls = self._tls_server.sockets[0].getsockname()[1]
        if self._server is None and self._tls_server is None:
            raise ValueError("no broker service port: set broker_service_port or its TLS twin")
        self.service.bind_ports(port, port_tls, self.stop_accepting)

    def stop_accepting(self) -> None:
        for server in (self._server, self._tls_server):
            if server is not None:
                server.close()

    async def close(self) -> None:
        """Stop accepting and wait (bounded) for the servers to finish closing; the service
        closes the connections themselves."""
        self.stop_accepting()
        for server in (self._server, self._tls_server):
            if server is not None:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(server.wait_closed(), 2)


__all__ = ["BinaryListener"]
