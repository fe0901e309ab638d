"""Which fragments of a ledger lack a replica: BookKeeper's ledger checker.

Owns: ``ClusterView`` (registered, writable and draining bookies, read once), ``Fault`` (a
bookie of a fragment that must get its entries again, and why) and the checks:
- ``metadata_faults`` (pure): members that are not registered (LOST) or are draining;
- ``probe_faults``: registered members asked for the first and last entry they should hold
  in each fragment with a known end; a definite "no such entry/ledger" is MISSING (a disk
  that was wiped); an unreachable bookie proves nothing here and is not a fault.
The last fragment of a ledger that is not closed has no known end (``Fault.last is None``):
it belongs to its writer.
Must not know: how faults are repaired, where marks are kept.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass

from magnetar.bookie.api import BookieClientAPI
from magnetar.bookie.errors import BookieError, NoEntry, NoLedger
from magnetar.broker.bookkeeper.metadata import LedgerMetadata, write_set
from magnetar.zk import paths
from magnetar.zk.store import MetadataStore


class FaultKind(enum.Enum):
    LOST = "lost"
    DRAINING = "draining"
    MISSING = "missing"


@dataclass(frozen=True, slots=True)
class Fault:
    fragment_index: int
    first: int
    last: int | None
    """Last entry of the fragment; None: the open ledger's last fragment (the writer's)."""
    bookie: str
    kind: FaultKind


@dataclass(frozen=True, slots=True)
class ClusterView:
    writable: frozenset[str]
    read_only: frozenset[str]
    draining: frozenset[str]

    @property
    def registered(self) -> frozenset[str]:
        return self.writable | self.read_only

    @classmethod
    async def read(cls, store: MetadataStore) -> ClusterView:
        writable = {n for n in await store.children(paths.AVAILABLE_BOOKIES) if n != "readonly"}
        read_only = set(await store.children(paths.READONLY_BOOKIES))
        draining = set(await store.children(paths.DRAINING_BOOKIES))
        return cls(frozenset(writable), frozenset(read_only), frozenset(draining))


def held_entries(
    meta: LedgerMetadata, index: int, bookie: str, first: int, last: int
) -> range | list[int]:
    """Entry ids of ``first..last`` (inside fragment ``index``) that ``bookie`` holds."""
    ensemble = meta.ensembles[index][1]
    if len(ensemble) == meta.write_quorum:
        return range(first, last + 1)
    qw = meta.write_quorum
    return [e for e in range(first, last + 1) if bookie in write_set(ensemble, qw, e)]


def metadata_faults(meta: LedgerMetadata, view: ClusterView) -> list[Fault]:
    out: list[Fault] = []
    for index, (first, ensemble) in enumerate(meta.ensembles):
        last = meta.fragment_last_entry(index)
        for bookie in ensemble:
            if bookie in view.draining:
                out.append(Fault(index, first, last, bookie, FaultKind.DRAINING))
            elif bookie not in view.registered:
                out.append(Fault(index, first, last, bookie, FaultKind.LOST))
    return out


async def probe_faults(
    meta: LedgerMetadata,
    view: ClusterView,
    client_for: Callable[[str], BookieClientAPI],
    *,
    skip: set[tuple[int, str]] | None = None,
) -> list[Fault]:
    """MISSING faults of registered members (first and last held entry of each fragment)."""
    out: list[Fault] = []
    for index, (first, ensemble) in enumerate(meta.ensembles):
        last = meta.fragment_last_entry(index)
        if last is None or last < first:
            continue
        for bookie in ensemble:
            if bookie not in view.registered or (skip and (index, bookie) in skip):
                continue
            held = _first_and_last_held(meta, index, bookie, first, last)
            for entry_id in held:
                try:
                    await client_for(bookie).read_entry(meta.ledger_id, entry_id)
                except (NoEntry, NoLedger):
                    out.append(Fault(index, first, last, bookie, FaultKind.MISSING))
                    break
                except (BookieError, TimeoutError):
                    break  # unreachable: not evidence of a lost disk
    return out


def _first_and_last_held(
    meta: LedgerMetadata, index: int, bookie: str, first: int, last: int
) -> list[int]:
    ensemble = meta.ensembles[index][1]
    qw = meta.write_quorum
    span = len(ensemble)
    lo = next(
        (
            e
            for e in range(first, min(last, first + span - 1) + 1)
            if bookie in write_set(ensemble, qw, e)
        ),
        None,
    )
    hi = next(
        (
            e
            for e in range(last, max(first, last - span + 1) - 1, -1)
            if bookie in write_set(ensemble, qw, e)
        ),
        None,
    )
    return sorted({e for e in (lo, hi) if e is not None})


__all__ = [
    "ClusterView",
    "Fault",
    "FaultKind",
    "held_entries",
    "metadata_faults",
    "probe_faults",
]
