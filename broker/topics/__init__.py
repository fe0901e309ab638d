"""Topics: persistent and non-persistent topics, their producers and subscriptions.

Owns: a topic's life on this broker: publish, subscribe, acks, seek, terminate.
Must not know: connections, HTTP, ZooKeeper ownership or load balancing; it stores through
the ``storage`` contract and hands entries to ``dispatch``.
"""
