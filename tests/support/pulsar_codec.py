"""Test helpers for the Pulsar protocol codec (``magnetar.client.protocol``)."""

from __future__ import annotations

from magnetar.client.protocol import Connection, Role, commands


def connected_pair(max_frame_size: int | None = None) -> tuple[Connection, Connection]:
    """(client, broker) codec connections that completed CONNECT/CONNECTED with each other."""
    kwargs = {} if max_frame_size is None else {"max_frame_size": max_frame_size}
    client = Connection(Role.CLIENT, **kwargs)
    broker = Connection(Role.BROKER, **kwargs)
    broker.receive_data(client.send(commands.connect("Pulsar-CPP-v4.2.0")))
    broker.next_event()
    client.receive_data(broker.send(commands.connected("Magnetar", 20)))
    client.next_event()
    return client, broker
