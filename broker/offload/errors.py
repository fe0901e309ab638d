"""Typed errors of tiered storage (offloading sealed ledgers to an object store).

Owns: one exception tree with ``retriable`` flags. The object-store library's exceptions are
translated into these in ``store.py`` (the only module that imports it) and never escape the
package. Must not know: managed ledgers, topics, the protocol.
"""

from __future__ import annotations


class OffloadError(Exception):
    """Base of offload errors; ``retriable``: the same call may succeed later."""

    retriable: bool = False


class StoreUnavailable(OffloadError):
    """The object store could not be reached or answered with a server error (after the
    library's own retries); nothing is known to have changed."""

    retriable = True


class ObjectNotFound(OffloadError):
    """The object named does not exist (never written, deleted, or an attempt that crashed)."""


class StoreAccessDenied(OffloadError):
    """The store refused our credentials: a configuration problem, not a transient one."""


class OffloadCorrupt(OffloadError):
    """What the store returned does not match what was written: a block or index that does not
    parse, an entry whose checksum does not match, an object of the wrong length. Never
    retried into success: the reader raises this instead of returning wrong bytes."""


class LedgerNotSealed(OffloadError):
    """Only closed ledgers are offloaded (an open ledger may still grow)."""


class SourceMismatch(OffloadError):
    """The source ledger handed over something inconsistent (an entry id out of order, a
    cumulative length that does not add up to the ledger's length)."""


class EntryOutOfRange(OffloadError):
    """A read asked for entries outside 0..last entry id of the offloaded ledger."""


class InvalidOffloadPolicies(OffloadError, ValueError):
    """Offload policies that cannot work (unknown driver, missing bucket, block size too small,
    a value of the wrong type). The message names the field with its Pulsar JSON name."""


__all__ = [
    "EntryOutOfRange",
    "InvalidOffloadPolicies",
    "LedgerNotSealed",
    "ObjectNotFound",
    "OffloadCorrupt",
    "OffloadError",
    "SourceMismatch",
    "StoreAccessDenied",
    "StoreUnavailable",
]
