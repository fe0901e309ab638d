"""Dispatch: consumers and dispatchers (which consumer gets which entry), Key_Shared.

Owns: permits, pending entries, redelivery and key ownership between consumers.
Must not know: topics, connections or policies; it reads entries through the ``storage``
contract.
"""
