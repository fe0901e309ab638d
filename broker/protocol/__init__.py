"""The Pulsar binary protocol, server side: the listener, one connection per client
(Pulsar's ``ServerCnx``) and the handling of its commands by area, its security checks, the
checks of what a client sends, and the broker-wide input budget.

Public API: ``BinaryListener`` (binds the ports, one ``ServerConnection`` per socket),
``ServerConnection``, ``InputBudget``. Modules: ``connection`` (the codec's broker-side
wrapper: transport, handshake, keep-alive, routing), ``producers`` and ``publish``
(PRODUCER, CLOSE_PRODUCER, SEND), ``consumers``, ``subscribe`` and ``acks`` (SUBSCRIBE and
the commands naming a consumer), ``lookups`` (LOOKUP, PARTITIONED_METADATA,
GET_TOPICS_OF_NAMESPACE), ``admin_commands`` (CONSUMER_STATS, schemas), ``message_ids``
(wire ids as positions), ``topic_loading``, ``tasks`` (command order),
``connection_security``, ``input_budget``, ``listener``.
Owns: turning frames into calls on the service and topics, and results into frames.
Must not know: HTTP administration (``admin/``); the wire format itself lives in the
sans-I/O codec ``magnetar.client.protocol``.
"""

from __future__ import annotations

from magnetar.broker.protocol.connection import ServerConnection
from magnetar.broker.protocol.input_budget import InputBudget, InputBudgetStatistics
from magnetar.broker.protocol.listener import BinaryListener

__all__ = ["BinaryListener", "InputBudget", "InputBudgetStatistics", "ServerConnection"]
