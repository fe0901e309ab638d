"""The Pulsar binary protocol, server side: the listener, one connection per client
(Pulsar's ``ServerCnx``), its security checks, the checks of what a client sends, and the
broker-wide input budget.

Owns: turning frames into calls on the service and topics, and results into frames.
Must not know: HTTP administration (``admin/``); the wire format itself lives in the
sans-I/O codec ``magnetar.client.protocol``.
"""
