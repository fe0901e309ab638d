"""The storage contract topics are written against, and its implementations: in memory (for
the fast unit tier) and over the managed ledger.

Owns: the narrow interface between topics and ledgers.
Must not know: topics, dispatch, policies or the protocol.
"""
