"""The parts of a managed ledger that its rollover, trimming and offloading all read.

Owns: ``LedgerParts``, the Protocol of those parts (name, config, clock, ledger list,
ledger client); each part's own host Protocol extends it with what only that part needs.
Must not know: any part's logic.
"""

from __future__ import annotations

from typing import Protocol

from magnetar.broker.bookkeeper.client import LedgerClient
from magnetar.broker.ledger.config import ManagedLedgerConfig
from magnetar.broker.ledger.ledger_list import LedgerList
from magnetar.clock import Clock


class LedgerParts(Protocol):
    """What every part of a managed ledger reads of it (``ManagedLedger`` is one)."""

    @property
    def name(self) -> str: ...

    @property
    def config(self) -> ManagedLedgerConfig: ...

    @property
    def clock(self) -> Clock: ...

    @property
    def ledgers(self) -> LedgerList: ...

    @property
    def ledger_client(self) -> LedgerClient: ...


__all__ = ["LedgerParts"]
