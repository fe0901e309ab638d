"""Which bookies exist and how to reach them: registration, placement, client pool.

Owns: reading the registered writable bookies (children of ``zk.paths.AVAILABLE_BOOKIES``,
whose value is JSON carrying the bookie's address and rack, or the address itself), choosing
ensembles among healthy ones, a short quarantine of bookies that just failed (a SIGKILLed
bookie's ephemeral registration lingers until its session expires), and one
``BookieClientAPI`` per address, made by the injected factory. ``BookieRegistry`` is the
``replicas.BookieReplicas`` of a client with a metadata store.

Placement (BookKeeper's RackawareEnsemblePlacementPolicy, falling back to the default random
policy when no bookie announces a rack): every write set (Qw consecutive members of the
ensemble ring) should span at least ``min(min_num_racks_per_write_quorum, Qw)`` racks; with
``enforce_min_num_racks_per_write_quorum`` an ensemble that cannot is refused
(``NotEnoughBookies``), otherwise the most rack-diverse one found is used. Read-only bookies
(registered under ``readonly/``) and draining ones (``zk.paths.draining_bookie``, being
decommissioned) are never chosen; ``draining`` is kept current by a watch so that writers
can move their open fragments off a draining bookie.
Must not know: ledgers' contents, gRPC.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from magnetar.bookie.api import BookieClientAPI
from magnetar.broker.bookkeeper.errors import NotEnoughBookies
from magnetar.broker.bookkeeper.metadata import write_sets
from magnetar.broker.bookkeeper.replicas import ReadSuspects
from magnetar.clock import Clock
from magnetar.zk import paths
from magnetar.zk.errors import MetadataError
from magnetar.zk.store import MetadataStore, Notification

if TYPE_CHECKING:
    from magnetar.bookie.client import AddEntryLike

log = logging.getLogger(__name__)


class LedgerBookieClient(BookieClientAPI, Protocol):
    """``BookieClientAPI`` plus the batch add the write path uses (``BookieClient``,
    ``testing.FakeBookieClient``): one future for many entries of one ledger."""

    def add_batch(
        self,
        ledger_id: int,
        master_key: bytes,
        entries: Sequence[AddEntryLike],
        *,
        recovery: bool = False,
    ) -> asyncio.Future[None]: ...

    def set_add_address(self, add_address: str | None) -> None:
        """The bookie announced another fast add address (None: none): adds go there from
        the next Add stream on (a client without a fast add transport ignores it)."""
        ...

    async def health(self, timeout_ms: int | None = None) -> bool:
        """Whether the bookie answers its health check (within ``timeout_ms``)."""
        ...


BookieClientFactory = Callable[[str], LedgerBookieClient]
"""Makes a client for one bookie, given its address (``host:port``)."""


HEALTH_PROBE_MS = 1_000
"""How long a quarantined bookie has to answer the health check that lets it back in."""

DEFAULT_RACK = "/default-rack"
"""BookKeeper's rack of a bookie that announces none."""

PLACEMENT_ATTEMPTS = 64
"""Random ensembles tried before settling for the most rack-diverse one."""


def rack_of_registration(value: bytes) -> str:
    """The rack announced in a registration node's JSON (``rack``), else ``DEFAULT_RACK``."""
    try:
        doc = json.loads(value) if value else None
    except ValueError:
        return DEFAULT_RACK
    if isinstance(doc, dict) and isinstance(doc.get("rack"), str) and doc["rack"]:
        return str(doc["rack"])
    return DEFAULT_RACK


def write_quorum_racks(ensemble: Sequence[str], racks: Mapping[str, str], write_quorum: int) -> int:
    """The fewest distinct racks spanned by any write set of ``ensemble``."""
    return min(
        len({racks.get(b, DEFAULT_RACK) for b in ws})
        for ws in write_sets(tuple(ensemble), write_quorum)
    )


@dataclass(frozen=True, slots=True)
class RackPolicy:
    """``minNumRacksPerWriteQuorum`` / ``enforceMinNumRacksPerWriteQuorum``."""

    min_num_racks_per_write_quorum: int = 2
    enforce_min_num_racks_per_write_quorum: bool = False

    def target(self, write_quorum: int) -> int:
        return max(1, min(self.min_num_racks_per_write_quorum, write_quorum))

    def choose(
        self,
        candidates: Sequence[str],
        racks: Mapping[str, str],
        size: int,
        write_quorum: int,
        rng: random.Random,
    ) -> tuple[str, ...]:
        """An ensemble of ``size`` among ``candidates`` (pure: no I/O)."""
        pool = sorted(candidates)
        if len(pool) < size:
            raise NotEnoughBookies(f"need {size} bookies, {len(pool)} healthy: {pool}")
        if all(racks.get(b, DEFAULT_RACK) == DEFAULT_RACK for b in pool):
            return tuple(rng.sample(pool, size))  # no racks configured: the default policy
        target = self.target(write_quorum)
        best: tuple[str, ...] = ()
        best_score = -1
        for attempt in range(PLACEMENT_ATTEMPTS):
            ensemble = (
                _rack_round_robin(pool, racks, size, rng)
                if attempt % 2 == 0
                else tuple(rng.sample(pool, size))
            )
            score = write_quorum_racks(ensemble, racks, write_quorum)
            if score >= target:
                return ensemble
            if score > best_score:
                best, best_score = ensemble, score
        if self.enforce_min_num_racks_per_write_quorum:
            raise NotEnoughBookies(
                f"no ensemble of {size} with every write quorum of {write_quorum} in "
                f">= {target} racks among {[(b, racks.get(b, DEFAULT_RACK)) for b in pool]}"
            )
        return best

    def replace(
        self,
        ensemble: Sequence[str],
        bad: Iterable[str],
        candidates: Sequence[str],
        racks: Mapping[str, str],
        write_quorum: int,
        *,
        rng: random.Random,
    ) -> tuple[str, ...]:
        """``ensemble`` with every ``bad`` member replaced by a candidate (not already a
        member), keeping members' positions (pure: no I/O)."""
        bad_set = set(bad)
        result = list(ensemble)
        pool = [c for c in sorted(candidates) if c not in result]
        rng.shuffle(pool)
        use_racks = any(racks.get(b, DEFAULT_RACK) != DEFAULT_RACK for b in (*pool, *result))
        target = self.target(write_quorum)
        for index, member in enumerate(ensemble):
            if member not in bad_set:
                continue
            if not pool:
                raise NotEnoughBookies(
                    f"no replacement for {member} in {list(ensemble)}: no spare bookie"
                )
            pick = pool[0]
            if use_racks:
                best_score = -1
                for candidate in pool:
                    trial = [*result[:index], candidate, *result[index + 1 :]]
                    score = write_quorum_racks(trial, racks, write_quorum)
                    if score > best_score:
                        pick, best_score = candidate, score
                    if score >= target:
                        break
                if best_score < target and self.enforce_min_num_racks_per_write_quorum:
                    raise NotEnoughBookies(
                        f"no replacement for {member} keeps every write quorum in >= {target} racks"
                    )
            pool.remove(pick)
            result[index] = pick
        return tuple(result)


def _rack_round_robin(
    pool: Sequence[str], racks: Mapping[str, str], size: int, rng: random.Random
) -> tuple[str, ...]:
    """Members taken from the racks in turn (random rack order, random member per rack)."""
    by_rack: dict[str, list[str]] = {}
    for b in pool:
        by_rack.setdefault(racks.get(b, DEFAULT_RACK), []).append(b)
    groups = list(by_rack.values())
    for group in groups:
        rng.shuffle(group)
    rng.shuffle(groups)
    out: list[str] = []
    while len(out) < size:
        for group in groups:
            if group and len(out) < size:
                out.append(group.pop())
    return tuple(out)


def parse_registration(bookie_id: str, value: bytes) -> str:
    """The address announced in a registration node (JSON or plain text), else the id."""
    if value:
        try:
            doc = json.loads(value)
        except ValueError:
            text = value.decode(errors="replace").strip()
            return text or bookie_id
        if isinstance(doc, dict):
            for key in ("address", "grpc_address", "endpoint", "rpc_address"):
                if isinstance(doc.get(key), str):
                    return str(doc[key])
        elif isinstance(doc, str):
            return doc
    return bookie_id


def fast_add_address_of_registration(value: bytes) -> str | None:
    """``host:fast_add_port`` announced in a registration node's JSON (the bookie's fast add
    transport, ``bookie/fast_add.py``), else None: that bookie takes adds over gRPC only."""
    try:
        doc = json.loads(value)
    except ValueError:
        return None
    if not isinstance(doc, dict):
        return None
    port = doc.get("fast_add_port")
    if not isinstance(port, int) or isinstance(port, bool) or not 0 < port < 65536:
        return None
    host = doc.get("host")
    if not isinstance(host, str) or not host:
        address = doc.get("address")
        if not isinstance(address, str) or ":" not in address:
            return None
        host = address.rpartition(":")[0]
    return f"{host}:{port}"


class BookieRegistry:
    """Registered bookies, their addresses, health and clients."""

    def __init__(
        self,
        store: MetadataStore,
        client_factory: BookieClientFactory,
        clock: Clock,
        *,
        quarantine_ms: int = 30_000,
        rng: random.Random | None = None,
        rack_policy: RackPolicy | None = None,
    ) -> None:
        self._store = store
        self.rack_policy = rack_policy or RackPolicy()
        self._racks: dict[str, str] = {}
        self.draining: frozenset[str] = frozenset()
        """Bookies being decommissioned, as last read (kept current by a watch once read):
        writers move their open fragments off them."""
        self._draining_refresh: asyncio.Future[None] | None = None
        store.add_listener(self._on_notification)
        self._factory = client_factory
        self._clock = clock
        self._quarantine_ms = quarantine_ms
        self._rng = rng or random.Random()
        self._addresses: dict[str, str] = {}
        self._add_addresses: dict[str, str] = {}
        """gRPC address -> fast add address, for bookies that announce one."""
        self._stale: set[str] = set()
        """Bookies whose registration changed or went since it was read (a restart): read
        again by the next ``available``, which may bring a new fast add port."""
        self._clients: dict[str, LedgerBookieClient] = {}
        self._quarantined_until: dict[str, float] = {}
        self._read_suspects = ReadSuspects(clock)

    def __repr__(self) -> str:
        return f"<BookieRegistry known={sorted(self._addresses)} clients={len(self._clients)}>"

    async def available(self) -> list[str]:
        """Writable registered bookies that are not draining (refreshing their addresses)."""
        names = [n for n in await self._store.children(paths.AVAILABLE_BOOKIES) if n != "readonly"]
        draining = await self._read_draining()
        for name in names:
            if name not in self._addresses or name not in self._racks or name in self._stale:
                self._stale.discard(name)
                got = await self._store.get(paths.bookie_registration(name))
                if got is not None:
                    self._learn(name, got.value)
                    self._racks[name] = rack_of_registration(got.value)
        return [n for n in names if n not in draining]

    async def _read_draining(self) -> frozenset[str]:
        self.draining = frozenset(await self._store.children(paths.DRAINING_BOOKIES))
        return self.draining

    def _on_notification(self, notification: Notification) -> None:
        if notification.path.startswith(paths.AVAILABLE_BOOKIES + "/"):
            # a registration read before changed or went (the bookie restarted or died)
            self._stale.add(notification.path[len(paths.AVAILABLE_BOOKIES) + 1 :])
            return
        if notification.path != paths.DRAINING_BOOKIES:
            return
        if self._draining_refresh is None or self._draining_refresh.done():
            self._draining_refresh = asyncio.ensure_future(self._refresh_draining())

    async def _refresh_draining(self) -> None:
        try:
            await self._read_draining()  # and watch again
        except MetadataError as exc:
            log.debug("reading draining bookies failed: %r", exc)

    def rack(self, bookie_id: str) -> str:
        return self._racks.get(bookie_id, DEFAULT_RACK)

    async def resolve(self, bookie_ids: Iterable[str]) -> None:
        """Learn the addresses of bookies named in ledger metadata (registered or not)."""
        for bookie_id in bookie_ids:
            if bookie_id in self._addresses:
                continue
            got = await self._store.get(paths.bookie_registration(bookie_id))
            if got is None:
                self._addresses[bookie_id] = bookie_id
            else:
                self._learn(bookie_id, got.value)

    async def addresses(self, bookie_ids: Iterable[str]) -> dict[str, str]:
        """``host:port`` of each of ``bookie_ids`` (what a process without the metadata
        store needs to reach a ledger's bookies: the offload worker)."""
        ids = list(bookie_ids)
        await self.resolve(ids)
        return {b: self._addresses.get(b, b) for b in ids}

    def _learn(self, bookie_id: str, value: bytes) -> None:
        address = self._addresses[bookie_id] = parse_registration(bookie_id, value)
        fast = fast_add_address_of_registration(value)
        if fast == self._add_addresses.get(address):
            return
        if fast is None:
            self._add_addresses.pop(address, None)
        else:
            self._add_addresses[address] = fast
        client = self._clients.get(bookie_id)
        if client is not None:  # a client made before: it adds there from now on
            log.info("bookie %s announces fast add address %s", bookie_id, fast)
            client.set_add_address(fast)

    def add_address(self, address: str) -> str | None:
        """The fast add address announced by the bookie at ``address`` (its gRPC address),
        if any: a client factory uses it for adds (``bookkeeper_fast_add_enabled``)."""
        return self._add_addresses.get(address)

    def client(self, bookie_id: str) -> LedgerBookieClient:
        client = self._clients.get(bookie_id)
        if client is None:
            address = self._addresses.get(bookie_id, bookie_id)
            client = self._factory(address)
            self._clients[bookie_id] = client
        return client

    def quarantine(self, bookie_id: str) -> None:
        self._quarantined_until[bookie_id] = self._clock.monotonic_ms() + self._quarantine_ms

    def read_failed(self, bookie_id: str) -> None:
        """A read of this bookie's failed or timed out: reads ask it last for a while
        (placement is not affected: a bookie restarting must not block new ledgers)."""
        self._read_suspects.failed(bookie_id)

    def read_last(self, bookie_id: str) -> bool:
        """Whether reads should ask this bookie after the others: quarantined, or a read
        of its failed within ``replicas.READ_SUSPECT_MS``."""
        return self._read_suspects.suspect(bookie_id) or self.is_quarantined(bookie_id)

    def is_quarantined(self, bookie_id: str) -> bool:
        until = self._quarantined_until.get(bookie_id)
        if until is None:
            return False
        if self._clock.monotonic_ms() >= until:
            del self._quarantined_until[bookie_id]
            return False
        return True

    async def healthy(self, exclude: Iterable[str] = ()) -> list[str]:
        excluded = set(exclude)
        return [
            b for b in await self.available() if b not in excluded and not self.is_quarantined(b)
        ]

    async def choose_ensemble(
        self, size: int, exclude: Iterable[str] = (), *, write_quorum: int | None = None
    ) -> tuple[str, ...]:
        candidates = await self.healthy(exclude)
        if len(candidates) < size:
            candidates += await self._back_from_quarantine(exclude)
        if len(candidates) < size:
            raise NotEnoughBookies(f"need {size} bookies, {len(candidates)} healthy: {candidates}")
        return self.rack_policy.choose(
            candidates, self._racks, size, write_quorum or size, self._rng
        )

    async def _back_from_quarantine(self, exclude: Iterable[str]) -> list[str]:
        """Quarantined bookies that answer a health check now, out of quarantine: when the
        others are too few for an ensemble (BookKeeper then uses quarantined bookies too), a
        bookie back from a blip need not wait out its quarantine for new ledgers, and one
        still down (its registration lingering) is not chosen."""
        excluded = set(exclude)
        suspects = [
            b for b in await self.available() if b not in excluded and self.is_quarantined(b)
        ]
        if not suspects:
            return []
        answers = await asyncio.gather(*(self._answers(b) for b in suspects))
        back = [b for b, ok in zip(suspects, answers, strict=True) if ok]
        for b in back:
            self._quarantined_until.pop(b, None)
            log.info("bookie %s answers again: out of quarantine", b)
        return back

    async def _answers(self, bookie_id: str) -> bool:
        try:
            return await self.client(bookie_id).health(timeout_ms=HEALTH_PROBE_MS)
        except Exception:  # a probe that fails in any way is a bookie not back yet
            return False

    async def replace_bookies(
        self,
        ensemble: Sequence[str],
        bad: Iterable[str],
        write_quorum: int,
        exclude: Iterable[str] = (),
    ) -> tuple[str, ...]:
        """``ensemble`` with the ``bad`` members replaced by healthy bookies (rack-aware)."""
        candidates = await self.healthy({*exclude, *ensemble})
        return self.rack_policy.replace(
            ensemble, bad, candidates, self._racks, write_quorum, rng=self._rng
        )

    async def close(self) -> None:
        self._store.remove_listener(self._on_notification)
        if self._draining_refresh is not None:
            self._draining_refresh.cancel()
        clients, self._clients = self._clients, {}
        for client in clients.values():
            try:
                await client.close()
            except Exception:  # closing a dead client must not stop closing the others
                log.debug("closing bookie client failed", exc_info=True)


__all__ = [
    "DEFAULT_RACK",
    "BookieClientFactory",
    "BookieRegistry",
    "LedgerBookieClient",
    "RackPolicy",
    "fast_add_address_of_registration",
    "parse_registration",
    "rack_of_registration",
    "write_quorum_racks",
]
