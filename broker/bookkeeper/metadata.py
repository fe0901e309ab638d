"""Ledger metadata: what the metadata store holds for one ledger, and its codec.

Owns: ``LedgerMetadata`` (state, quorums, ensembles keyed by first entry id, last entry id,
length, master-key digest) and its JSON encoding at ``zk.paths.ledger_metadata(id)``
(``to_bytes``; ``to_dict`` is the same document unencoded, for APIs that hand it out), plus
the write-set rule (entry e goes to bookies e mod E .. (e+Qw-1) mod E of its fragment).
Invariants: ``E >= Qw >= Qa >= 1``; fragments are sorted by first entry id and the first
starts at 0; every fragment has at least Qw bookies (an ensemble may shrink, never below
Qw); ``last_entry_id``/``length`` are meaningful only when CLOSED.
Changed only by compare-and-set (callers pass the version they read).
Must not know: bookies' transport, managed ledgers.
"""

from __future__ import annotations

import bisect
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from magnetar.broker.bookkeeper.states import LEDGER_FSM, LedgerEvent, LedgerState

FORMAT_VERSION = 1


def master_key_for(password: bytes) -> bytes:
    """BookKeeper's master key: SHA-1 of b"ledger" followed by the password."""
    return hashlib.sha1(b"ledger" + password).digest()


@dataclass(frozen=True, slots=True)
class LedgerMetadata:
    ledger_id: int
    ensemble_size: int
    write_quorum: int
    ack_quorum: int
    state: LedgerState
    ensembles: tuple[tuple[int, tuple[str, ...]], ...]
    master_key: bytes
    last_entry_id: int = -1
    length: int = 0
    ctime_ms: int = 0
    custom: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if not self.ensemble_size >= self.write_quorum >= self.ack_quorum >= 1:
            raise ValueError(
                f"need E >= Qw >= Qa >= 1, got {self.ensemble_size}/"
                f"{self.write_quorum}/{self.ack_quorum}"
            )
        if not self.ensembles or self.ensembles[0][0] != 0:
            raise ValueError("the first fragment must start at entry 0")
        firsts = [first for first, _ in self.ensembles]
        if firsts != sorted(set(firsts)):
            raise ValueError(f"fragments out of order: {firsts}")
        for _, ensemble in self.ensembles:
            if len(ensemble) < self.write_quorum or len(set(ensemble)) != len(ensemble):
                raise ValueError(f"bad ensemble {ensemble} for Qw={self.write_quorum}")

    # -- fragments ----------------------------------------------------------------------------
    def fragment_index(self, entry_id: int) -> int:
        if entry_id >= self.ensembles[-1][0]:
            return len(self.ensembles) - 1
        firsts = [first for first, _ in self.ensembles]
        return max(0, bisect.bisect_right(firsts, entry_id) - 1)

    def ensemble_for(self, entry_id: int) -> tuple[str, ...]:
        return self.ensembles[self.fragment_index(entry_id)][1]

    @property
    def last_ensemble(self) -> tuple[str, ...]:
        return self.ensembles[-1][1]

    @property
    def last_fragment_first_entry(self) -> int:
        return self.ensembles[-1][0]

    def write_set(self, entry_id: int) -> tuple[str, ...]:
        return write_set(self.ensemble_for(entry_id), self.write_quorum, entry_id)

    @property
    def all_bookies(self) -> set[str]:
        return {b for _, ensemble in self.ensembles for b in ensemble}

    # -- changes (pure: they return a new value) ----------------------------------------------
    def with_ensemble(self, first_entry_id: int, ensemble: tuple[str, ...]) -> LedgerMetadata:
        LEDGER_FSM.next(self.state, LedgerEvent.ENSEMBLE_CHANGE)
        if first_entry_id < self.last_fragment_first_entry:
            raise ValueError("a new fragment cannot start before the last one")
        kept = [f for f in self.ensembles if f[0] < first_entry_id]
        return replace(self, ensembles=(*kept, (first_entry_id, tuple(ensemble))))

    def with_replaced_bookies(self, replacements: dict[int, dict[str, str]]) -> LedgerMetadata:
        """Re-replication (any state): in the fragment starting at each key, swap members
        old -> new (positions kept, so write sets keep their order). Every swap is applied
        in one value: callers CAS it once, never a half-swapped ensemble."""
        firsts = {first for first, _ in self.ensembles}
        unknown = set(replacements) - firsts
        if unknown:
            raise ValueError(f"no fragment starts at {sorted(unknown)}")
        ensembles = tuple(
            (first, tuple(replacements.get(first, {}).get(b, b) for b in ensemble))
            for first, ensemble in self.ensembles
        )
        return replace(self, ensembles=ensembles)

    def fragment_last_entry(self, index: int) -> int | None:
        """Last entry id of fragment ``index``; None for the last fragment of a ledger that
        is not closed (its end belongs to the writer)."""
        if index + 1 < len(self.ensembles):
            return self.ensembles[index + 1][0] - 1
        if self.state is LedgerState.CLOSED:
            return self.last_entry_id
        return None

    def closed(self, last_entry_id: int, length: int) -> LedgerMetadata:
        state = LEDGER_FSM.next(self.state, LedgerEvent.CLOSE)
        return replace(self, state=state, last_entry_id=last_entry_id, length=length)

    def in_recovery(self) -> LedgerMetadata:
        return replace(self, state=LEDGER_FSM.next(self.state, LedgerEvent.BEGIN_RECOVERY))

    def recovered(self, last_entry_id: int, length: int) -> LedgerMetadata:
        state = LEDGER_FSM.next(self.state, LedgerEvent.FINISH_RECOVERY)
        return replace(self, state=state, last_entry_id=last_entry_id, length=length)

    # -- codec ----------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """The stored JSON document (also what an API that hands metadata out returns)."""
        return {
            "format": FORMAT_VERSION,
            "ledger_id": self.ledger_id,
            "ensemble_size": self.ensemble_size,
            "write_quorum": self.write_quorum,
            "ack_quorum": self.ack_quorum,
            "state": self.state.value,
            "last_entry_id": self.last_entry_id,
            "length": self.length,
            "ensembles": [[first, list(ens)] for first, ens in self.ensembles],
            "master_key": self.master_key.hex(),
            "ctime_ms": self.ctime_ms,
            "custom": dict(self.custom),
            "digest": "CRC32C",
        }

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> LedgerMetadata:
        """The inverse of ``to_dict``; ``ValueError`` (or ``KeyError``/``TypeError`` for a
        document missing fields) when it is not a ledger's metadata."""
        if doc.get("format") != FORMAT_VERSION:
            raise ValueError(f"unknown ledger metadata format {doc.get('format')}")
        return cls(
            ledger_id=int(doc["ledger_id"]),
            ensemble_size=int(doc["ensemble_size"]),
            write_quorum=int(doc["write_quorum"]),
            ack_quorum=int(doc["ack_quorum"]),
            state=LedgerState(doc["state"]),
            ensembles=tuple((int(f), tuple(e)) for f, e in doc["ensembles"]),
            master_key=bytes.fromhex(doc["master_key"]),
            last_entry_id=int(doc["last_entry_id"]),
            length=int(doc["length"]),
            ctime_ms=int(doc.get("ctime_ms", 0)),
            custom=tuple(sorted(doc.get("custom", {}).items())),
        )

    def to_bytes(self) -> bytes:
        return json.dumps(self.to_dict(), separators=(",", ":"), sort_keys=True).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> LedgerMetadata:
        return cls.from_dict(json.loads(data))


def write_set(ensemble: tuple[str, ...], write_quorum: int, entry_id: int) -> tuple[str, ...]:
    """Bookies holding ``entry_id``: Qw consecutive members from ``entry_id mod len``."""
    n = len(ensemble)
    start = entry_id % n
    return tuple(ensemble[(start + i) % n] for i in range(write_quorum))


def write_sets(ensemble: tuple[str, ...], write_quorum: int) -> list[tuple[str, ...]]:
    """The distinct write sets of an ensemble (one per start index)."""
    return [write_set(ensemble, write_quorum, i) for i in range(len(ensemble))]


__all__ = ["LedgerMetadata", "master_key_for", "write_set", "write_sets"]
