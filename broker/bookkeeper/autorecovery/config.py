"""Auto-recovery settings (BookKeeper's names, snake_case with units, as in bookie config).

Owns: ``AutoRecoveryConfig``. The same fields exist on the bookie's config (``bookie/main.py``
``BookieConfig``) so one YAML file configures a bookie and its auto-recovery daemon;
``from_object`` copies them over. Must not know: where they come from.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any


@dataclass(frozen=True, slots=True)
class AutoRecoveryConfig:
    lost_bookie_recovery_delay_s: int = 300
    """``lostBookieRecoveryDelay``: a bookie unregistered this long has its ledgers marked
    under-replicated (a second bookie lost meanwhile triggers the audit at once)."""
    auditor_periodic_check_interval_s: int = 604_800
    """``auditorPeriodicCheckInterval``: every closed ledger's fragments are probed on their
    bookies (first and last entry each should hold); 0 disables it."""
    auditor_periodic_bookie_check_interval_s: int = 86_400
    """``auditorPeriodicBookieCheckInterval``: every ledger is scanned for bookies that are
    not registered (or are draining), marked at once; 0 disables it."""
    rereplication_entry_batch_size: int = 10
    """``rereplicationEntryBatchSize``: entries read, copied and verified per step."""
    replication_rate_by_bytes: int = -1
    """``replicationRateByBytes``: bytes per second one worker copies (-1: unlimited)."""
    open_ledger_rereplication_grace_period_ms: int = 30_000
    """``openLedgerRereplicationGracePeriod``: an open ledger's last fragment is left to its
    writer this long after the ledger was marked; then the worker fences the ledger (open
    with recovery, which closes it) and repairs it."""
    min_num_racks_per_write_quorum: int = 2
    """``minNumRacksPerWriteQuorum`` for replacement bookies."""
    enforce_min_num_racks_per_write_quorum: bool = False
    """``enforceMinNumRacksPerWriteQuorum`` for replacement bookies."""

    def __post_init__(self) -> None:
        if self.rereplication_entry_batch_size < 1:
            raise ValueError("rereplication_entry_batch_size must be >= 1")
        if self.lost_bookie_recovery_delay_s < 0:
            raise ValueError("lost_bookie_recovery_delay_s must be >= 0")
        if self.replication_rate_by_bytes == 0 or self.replication_rate_by_bytes < -1:
            raise ValueError("replication_rate_by_bytes must be > 0 or -1 (unlimited)")

    @classmethod
    def from_object(cls, source: Any) -> AutoRecoveryConfig:
        """The fields of this class read from any object having them (a ``BookieConfig``)."""
        return cls(
            **{f.name: getattr(source, f.name) for f in fields(cls) if hasattr(source, f.name)}
        )


__all__ = ["AutoRecoveryConfig"]
