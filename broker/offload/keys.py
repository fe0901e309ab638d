"""Object names of offloaded ledgers, as Pulsar's jcloud offloader names them.

One offload attempt of ledger L with UUID U writes two objects: the data object
``U-ledger-L`` and the index object ``U-ledger-L-index``. A new attempt has a new UUID, so
attempts never overwrite each other and a failed or crashed one leaves only objects under its
own UUID (orphans, which ``parse_key`` recognises for clean-up).

Owns: building and parsing these names. Pure. Must not know: stores, managed ledgers.
"""

from __future__ import annotations

import uuid as uuid_mod
from dataclasses import dataclass

INDEX_SUFFIX = "-index"
_LEDGER = "-ledger-"


def data_key(ledger_id: int, attempt: uuid_mod.UUID) -> str:
    return f"{attempt}{_LEDGER}{ledger_id}"


def index_key(ledger_id: int, attempt: uuid_mod.UUID) -> str:
    return data_key(ledger_id, attempt) + INDEX_SUFFIX


@dataclass(frozen=True, slots=True)
class AttemptKey:
    """What an object name says: whose attempt it belongs to, and which of its two objects."""

    ledger_id: int
    attempt: uuid_mod.UUID
    is_index: bool


def parse_key(name: str) -> AttemptKey | None:
    """The attempt an object belongs to, or None for a name that is not ours (a store prefix,
    if any, already removed)."""
    is_index = name.endswith(INDEX_SUFFIX)
    stem = name[: -len(INDEX_SUFFIX)] if is_index else name
    head, sep, tail = stem.rpartition(_LEDGER)
    if not sep or not tail.isdigit():
        return None
    try:
        attempt = uuid_mod.UUID(head)
    except ValueError:
        return None
    if str(attempt) != head:
        return None
    return AttemptKey(int(tail), attempt, is_index)


__all__ = ["INDEX_SUFFIX", "AttemptKey", "data_key", "index_key", "parse_key"]
