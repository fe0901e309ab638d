"""Key_Shared: which consumer owns a key, and when a key may move (pure, sans-I/O).

Owns the decisions of a Key_Shared dispatcher, made synchronously and without I/O:

- ``KeySharedSelector``: slot (0..65535) -> consumer. A message's slot is Murmur3_32 of its
  sticky key (ordering key, else partition key, else ``NONE_KEY``) mod 65,536, read from a
  stored entry by the codec (``magnetar.client.protocol.entry_slot``); this module never
  hashes keys a second way (ring points use ``key_shared_slot``). ``select`` is memoised per
  slot until the consumers change.

  * ``AUTO_SPLIT`` (default): consistent hashing. Each consumer puts
    ``points_per_consumer`` (Pulsar: 100) points on a ring of 65,536 positions, point ``i``
    at ``key_shared_slot(name + "\\0" + name_index + "\\0" + i)`` where ``name_index``
    tells apart consumers sharing a name (Pulsar 4's ``ConsumerNameIndexTracker``). A slot
    goes to the owner of the first point at or after it (wrapping). Two points on the same
    position: the earlier-added consumer wins, the other takes over when it leaves.
  * ``STICKY``: each consumer declares inclusive ranges in 0..65535. Empty, reversed,
    out-of-range, self-overlapping ranges or ranges overlapping another consumer's are
    refused with ``ConsumerAssignError`` (wire code ``ConsumerAssignError``); a slot
    nobody declared has no consumer and its messages wait (covering the space is the
    user's job, as in Pulsar).

- ``KeyOrderingGuard``: Pulsar 4 "draining hashes" (PIP-379), made per entry. It counts the
  outstanding (sent, not yet acked nor returned) entries per (consumer, slot). Contract:
  **a slot has outstanding entries on at most one consumer at a time**. When the selector
  moves a slot to another consumer while the old one still holds entries of it, the slot
  is *draining*: its entries wait (they go back to the dispatcher's replay set) until the
  old consumer acks them, nacks them, or disconnects (then they are returned at once). Only
  that slot waits; every other key keeps flowing.
  It also remembers *parked* entries (read or returned, waiting in the replay set): a
  later entry of a slot never overtakes a parked earlier one, so per-key order survives
  returns and disconnects, not only joins. Nacked entries are parked too; they may reach
  their consumer after later ones it already holds (Pulsar's documented nack reorder), but
  never a different consumer while those are outstanding.
- ``plan_dispatch``: given a batch of entries in position order (replays first, then new
  reads), each with its slot and permit cost, and the available permits of each consumer,
  decide which consumer gets each entry and which must wait, and commit that decision to
  the guard (entries assigned are outstanding, entries waiting are parked). The caller
  sends the assignments and puts the waiting entries in its replay set, with no ``await``
  in between.
- ``replay_candidates``: which parked entries to read next, skipping slots that cannot go
  now (no permits, draining), so a replay set full of one stuck consumer's keys never
  hides the others' (Pulsar's "stuck on replays"). The parked set *is* the replay set:
  the dispatcher keeps them equal (every entry it puts back is parked here).
- ``KeySharedScheduler``: the facade a dispatcher holds (selector + guard + policy).

Batches: an entry carries one slot, that of its outer ``MessageMetadata``, which for a
batch is the first message's key (the client's KEY_BASED batching puts one key per batch;
with default batching the whole batch follows its first key), as Pulsar does.

``allow_out_of_order`` (Pulsar's ``allowOutOfOrderDelivery``): entries go to the selected
consumer at once, even if the slot is draining or has parked entries; counts are still kept
for statistics. The one-consumer contract then does not hold.

Invariants (``check_invariants``): outstanding counts equal the per-entry records; in
ordered mode each slot's outstanding entries sit on one consumer; an entry is never both
outstanding and parked; parked lists are sorted and match the per-entry records; the ring
is sorted and holds exactly ``points_per_consumer`` points per consumer; STICKY ranges are
disjoint.

Must not know: sockets, frames, cursors, the ``Consumer`` class (consumers are opaque
hashable objects), time.
"""

from __future__ import annotations

import bisect
import enum
import itertools
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, NamedTuple, Protocol, TypeVar

from magnetar.broker.errors import BrokerError, ServerError
from magnetar.client.protocol import KEY_SHARED_HASH_RANGE_SIZE, key_shared_slot

#: Slots are 0 .. KEY_SHARED_SLOTS - 1.
KEY_SHARED_SLOTS = KEY_SHARED_HASH_RANGE_SIZE
#: Pulsar's subscriptionKeySharedConsistentHashingReplicaPoints.
DEFAULT_POINTS_PER_CONSUMER = 100
#: Pulsar's keySharedLookAheadMsgInReplayThresholdPerConsumer / ...PerSubscription.
LOOKAHEAD_PER_CONSUMER = 2000
LOOKAHEAD_MAX = 20_000
#: Slots whose owner a selector remembers between consumer changes.
SELECT_MEMO_MAX = 8192


class _Ordered(Protocol):
    def __lt__(self, other: Any, /) -> bool: ...

    def __hash__(self) -> int: ...


C = TypeVar("C", bound=Hashable)  # a consumer: any hashable object
E = TypeVar("E", bound=_Ordered)  # an entry id (the broker's Position): hashable, ordered


class KeySharedMode(enum.IntEnum):
    """Wire values of ``KeySharedMode``."""

    AUTO_SPLIT = 0
    STICKY = 1


class KeySharedError(BrokerError):
    """Refusal of a Key_Shared consumer, answered with ``code``."""

    code = ServerError.ConsumerAssignError
    retriable = False


class ConsumerAssignError(KeySharedError, ValueError):
    """Bad STICKY ranges (Java ``ConsumerAssignException``)."""

    code = ServerError.ConsumerAssignError


class KeySharedPolicyMismatch(KeySharedError, ValueError):
    """The consumer's mode / out-of-order flag differs from the attached consumers'."""

    code = ServerError.ConsumerBusy


@dataclass(frozen=True, slots=True, order=True)
class HashRange:
    """Inclusive slot range."""

    start: int
    end: int

    def __str__(self) -> str:
        return f"[{self.start}, {self.end}]"

    def overlaps(self, other: HashRange) -> bool:
        return self.start <= other.end and other.start <= self.end


@dataclass(frozen=True, slots=True)
class KeySharedPolicy:
    mode: KeySharedMode = KeySharedMode.AUTO_SPLIT
    allow_out_of_order: bool = False


def lookahead_limit(consumers: int) -> int:
    """How many entries may wait (parked) before the dispatcher stops reading new ones."""
    return min(LOOKAHEAD_MAX, LOOKAHEAD_PER_CONSUMER * max(1, consumers))


def validate_sticky_ranges(
    ranges: Iterable[tuple[int, int] | HashRange],
    taken: Iterable[tuple[HashRange, str]] = (),
) -> list[HashRange]:
    """Check a STICKY consumer's ranges against the space and the ranges already taken
    (``(range, consumer name)`` pairs); returns them sorted, or raises ConsumerAssignError."""
    out = [r if isinstance(r, HashRange) else HashRange(int(r[0]), int(r[1])) for r in ranges]
    if not out:
        raise ConsumerAssignError("Ranges for KeyShared policy must not be empty.")
    for r in out:
        if r.start > r.end:
            raise ConsumerAssignError(f"Fixed hash range start > end: {r}")
        if r.start < 0 or r.end >= KEY_SHARED_SLOTS:
            raise ConsumerAssignError(
                f"Fixed hash range {r} is out of the hash space [0, {KEY_SHARED_SLOTS - 1}]"
            )
    out.sort()
    for a, b in itertools.pairwise(out):
        if a.overlaps(b):
            raise ConsumerAssignError(f"Fixed hash ranges {a} and {b} of the consumer overlap")
    for r in out:
        for other, name in taken:
            if r.overlaps(other):
                raise ConsumerAssignError(
                    f"Range conflict with consumer {name}: {r} overlaps its range {other}"
                )
    return out


# ---------------------------------------------------------------------------- selector


class KeySharedSelector(Generic[C]):
    """Slot -> consumer, AUTO_SPLIT (consistent-hash ring) or STICKY (declared ranges)."""

    def __init__(
        self,
        mode: KeySharedMode = KeySharedMode.AUTO_SPLIT,
        *,
        points_per_consumer: int = DEFAULT_POINTS_PER_CONSUMER,
    ) -> None:
        if points_per_consumer < 1:
            raise ValueError("points_per_consumer must be >= 1")
        self.mode = mode
        self.points_per_consumer = points_per_consumer
        self._names: dict[C, tuple[str, int]] = {}  # consumer -> (name, name index)
        self._seq: dict[C, int] = {}  # arrival order (ring collision tie-break)
        self._next_seq = 0
        # AUTO_SPLIT ring, sorted by (point, arrival): parallel arrays for bisect
        self._ring: list[tuple[int, int, C]] = []
        self._points: list[int] = []
        # STICKY: disjoint ranges sorted by start, parallel starts for bisect
        self._ranges: list[tuple[HashRange, C]] = []
        self._starts: list[int] = []
        # slot -> owner, a memo of ``select`` (cleared on every consumer change, bounded)
        self._memo: dict[int, C | None] = {}

    def __repr__(self) -> str:
        return f"<KeySharedSelector {self.mode.name} consumers={len(self._names)}>"

    def __len__(self) -> int:
        return len(self._names)

    def __contains__(self, consumer: object) -> bool:
        return consumer in self._names

    @property
    def consumers(self) -> list[C]:
        return list(self._names)

    def add_consumer(
        self,
        consumer: C,
        name: str,
        hash_ranges: Iterable[tuple[int, int] | HashRange] = (),
    ) -> None:
        """Add a consumer; STICKY validates its ranges first (nothing changes on error)."""
        if consumer in self._names:
            raise ValueError(f"consumer {name!r} already added")
        if self.mode is KeySharedMode.STICKY:
            taken = [(r, self._names[c][0]) for r, c in self._ranges]
            ranges = validate_sticky_ranges(hash_ranges, taken)
            self._register(consumer, name)
            self._ranges.extend((r, consumer) for r in ranges)
            self._ranges.sort(key=lambda rc: rc[0].start)
            self._starts = [r.start for r, _ in self._ranges]
            self._memo.clear()
            return
        self._register(consumer, name)
        _, index = self._names[consumer]
        seq = self._seq[consumer]
        for i in range(self.points_per_consumer):
            point = key_shared_slot(f"{name}\0{index}\0{i}")
            self._ring.append((point, seq, consumer))
        self._ring.sort(key=lambda p: (p[0], p[1]))
        self._points = [p[0] for p in self._ring]
        self._memo.clear()

    def _register(self, consumer: C, name: str) -> None:
        used = {i for n, i in self._names.values() if n == name}
        index = 0
        while index in used:
            index += 1
        self._names[consumer] = (name, index)
        self._seq[consumer] = self._next_seq
        self._next_seq += 1

    def remove_consumer(self, consumer: C) -> bool:
        if consumer not in self._names:
            return False
        del self._names[consumer]
        del self._seq[consumer]
        self._memo.clear()
        if self._ring:
            self._ring = [p for p in self._ring if p[2] != consumer]
            self._points = [p[0] for p in self._ring]
        if self._ranges:
            self._ranges = [rc for rc in self._ranges if rc[1] != consumer]
            self._starts = [r.start for r, _ in self._ranges]
        return True

    def select(self, slot: int) -> C | None:
        """The consumer owning ``slot`` now (None: no consumer, or an undeclared slot).
        Memoised per slot until the consumers change (a dispatcher asks once per entry
        sent and once per entry acked)."""
        memo = self._memo
        if slot in memo:
            return memo[slot]
        if len(memo) >= SELECT_MEMO_MAX:
            memo.clear()
        owner = memo[slot] = self._select(slot)
        return owner

    def _select(self, slot: int) -> C | None:
        if self.mode is KeySharedMode.STICKY:
            i = bisect.bisect_right(self._starts, slot) - 1
            if i >= 0:
                r, consumer = self._ranges[i]
                if slot <= r.end:
                    return consumer
            return None
        if not self._ring:
            return None
        i = bisect.bisect_left(self._points, slot)
        if i == len(self._points):
            i = 0
        return self._ring[i][2]

    def hash_ranges(self) -> dict[C, list[HashRange]]:
        """Each consumer's slots as merged inclusive ranges (admin stats ``keyHashRanges``)."""
        out: dict[C, list[HashRange]] = {c: [] for c in self._names}
        if self.mode is KeySharedMode.STICKY:
            for r, c in self._ranges:
                out[c].append(r)
            return out
        if not self._ring:
            return out
        # owner of each distinct point = first (earliest-added) entry at that point
        owners: list[tuple[int, C]] = []
        for point, _, c in self._ring:
            if not owners or owners[-1][0] != point:
                owners.append((point, c))
        last_point, wrap_owner = owners[-1][0], owners[0][1]
        pieces: list[tuple[HashRange, C]] = []
        prev = -1
        for point, c in owners:
            pieces.append((HashRange(prev + 1, point), c))
            prev = point
        if last_point < KEY_SHARED_SLOTS - 1:
            pieces.append((HashRange(last_point + 1, KEY_SHARED_SLOTS - 1), wrap_owner))
        for r, c in pieces:
            lst = out[c]
            if lst and lst[-1].end + 1 == r.start:
                lst[-1] = HashRange(lst[-1].start, r.end)
            else:
                lst.append(r)
        return out

    def check_invariants(self) -> None:
        assert len(self._seq) == len(self._names)
        assert len(self._memo) <= SELECT_MEMO_MAX
        for slot, owner in self._memo.items():
            assert self._select(slot) is owner, (slot, owner)
        if self.mode is KeySharedMode.STICKY:
            assert not self._ring
            assert self._starts == [r.start for r, _ in self._ranges]
            for (a, _), (b, _) in itertools.pairwise(self._ranges):
                assert a.end < b.start, (a, b)
            for r, c in self._ranges:
                assert c in self._names and 0 <= r.start <= r.end < KEY_SHARED_SLOTS
        else:
            assert not self._ranges
            assert len(self._ring) == self.points_per_consumer * len(self._names)
            assert self._points == sorted(self._points)
            assert self._points == [p[0] for p in self._ring]
            for _, _, c in self._ring:
                assert c in self._names


# ---------------------------------------------------------------------------- guard


@dataclass(frozen=True, slots=True)
class KeyOrderingStats:
    outstanding_entries: int  # sent and neither acked nor returned
    parked_entries: int  # waiting in the replay set, ordered per slot
    slots_held: int  # slots with outstanding entries
    draining_hashes_count: int  # held slots whose selected consumer is another one
    draining_hashes_pending_messages: int  # outstanding entries of those slots
    draining_hashes_cleared_total: int  # draining slots that became free
    pending_per_consumer: Mapping[Any, int]


class KeyOrderingGuard(Generic[C, E]):
    """Per-slot ownership of outstanding entries, plus the order of parked entries."""

    def __init__(self, *, allow_out_of_order: bool = False) -> None:
        self.allow_out_of_order = allow_out_of_order
        self._outstanding: dict[E, tuple[C, int]] = {}  # entry -> (consumer, slot)
        self._held: dict[int, dict[C, int]] = {}  # slot -> consumer -> outstanding count
        self._per_consumer: dict[C, int] = {}  # consumer -> outstanding count
        self._parked: dict[E, int] = {}  # entry -> slot
        self._parked_per_slot: dict[int, list[E]] = {}  # slot -> sorted parked entries
        self.draining_cleared_total = 0

    def __repr__(self) -> str:
        return (
            f"<KeyOrderingGuard outstanding={len(self._outstanding)} "
            f"parked={len(self._parked)} slots_held={len(self._held)}>"
        )

    # -- queries
    def holders(self, slot: int) -> list[C]:
        return list(self._held.get(slot, ()))

    def is_outstanding(self, entry: E) -> bool:
        return entry in self._outstanding

    def is_parked(self, entry: E) -> bool:
        return entry in self._parked

    def outstanding_of(self, consumer: C) -> list[E]:
        return sorted(e for e, (c, _) in self._outstanding.items() if c == consumer)

    @property
    def parked_count(self) -> int:
        return len(self._parked)

    def can_dispatch(self, slot: int, consumer: C) -> bool:
        """May an entry of ``slot`` go to ``consumer`` (ignoring parked order)?"""
        if self.allow_out_of_order:
            return True
        held = self._held.get(slot)
        return not held or (len(held) == 1 and consumer in held)

    # -- transitions
    def on_sent(self, entry: E, slot: int, consumer: C) -> None:
        """``entry`` was handed to ``consumer`` (unparks it)."""
        if entry in self._outstanding:
            raise ValueError(f"entry {entry} is already outstanding")
        self._unpark(entry)
        self._outstanding[entry] = (consumer, slot)
        per = self._held.setdefault(slot, {})
        per[consumer] = per.get(consumer, 0) + 1
        self._per_consumer[consumer] = self._per_consumer.get(consumer, 0) + 1

    def park(self, entry: E, slot: int) -> None:
        """``entry`` waits in the replay set; later entries of its slot wait behind it."""
        if entry in self._outstanding:
            raise ValueError(f"entry {entry} is outstanding, cannot park it")
        if entry in self._parked:
            return
        self._parked[entry] = slot
        bisect.insort(self._parked_per_slot.setdefault(slot, []), entry)

    def _unpark(self, entry: E) -> bool:
        slot = self._parked.pop(entry, None)
        if slot is None:
            return False
        lst = self._parked_per_slot[slot]
        i = bisect.bisect_left(lst, entry)
        del lst[i]
        if not lst:
            del self._parked_per_slot[slot]
        return True

    def _release(
        self, entry: E, selector: KeySharedSelector[C] | None = None
    ) -> tuple[C, int] | None:
        rec = self._outstanding.pop(entry, None)
        if rec is None:
            return None
        consumer, slot = rec
        per = self._held[slot]
        n = per[consumer] - 1
        if n:
            per[consumer] = n
        else:
            del per[consumer]
            if not per:
                del self._held[slot]
            if selector is not None and selector.select(slot) != consumer:
                self.draining_cleared_total += 1  # a draining slot is free to move
        m = self._per_consumer[consumer] - 1
        if m:
            self._per_consumer[consumer] = m
        else:
            del self._per_consumer[consumer]
        return rec

    def on_acked(self, entries: Iterable[E], selector: KeySharedSelector[C] | None = None) -> bool:
        """Entries acked (or gone: trimmed, skipped, expired). Idempotent. True if a slot
        became free or a parked entry went away: the dispatcher should run a round."""
        changed = False
        for entry in entries:
            rec = self._release(entry, selector)
            if rec is not None and rec[0] not in self._held.get(rec[1], ()):
                changed = True  # the consumer no longer holds this slot
            if self._unpark(entry):
                changed = True
        return changed

    def on_acked_one(self, entry: E, selector: KeySharedSelector[C] | None = None) -> bool:
        """``on_acked([entry])`` without the list: the path of every individual ack."""
        changed = False
        rec = self._release(entry, selector)
        if rec is not None and rec[0] not in self._held.get(rec[1], ()):
            changed = True
        if self._parked and self._unpark(entry):
            changed = True
        return changed

    def parked_slot(self, entry: E) -> int | None:
        """The slot ``entry`` was parked with (None: not parked)."""
        return self._parked.get(entry)

    def on_redelivered(
        self,
        consumer: C,
        entries: Iterable[E] | None,
        selector: KeySharedSelector[C] | None = None,
    ) -> list[E]:
        """Redeliver request (nack / ack timeout) from ``consumer``: its outstanding entries
        among ``entries`` (all of them if None) are returned and parked. Returns those, sorted."""
        if entries is None:
            chosen = self.outstanding_of(consumer)
        else:
            chosen = sorted(
                {e for e in entries if (rec := self._outstanding.get(e)) and rec[0] == consumer}
            )
        for entry in chosen:
            rec = self._release(entry, selector)
            assert rec is not None
            self.park(entry, rec[1])
        return chosen

    def on_returned(self, consumer: C, selector: KeySharedSelector[C] | None = None) -> list[E]:
        """``consumer`` closed or disconnected: all its outstanding entries are returned at
        once and parked (the caller puts them in its replay set). Returns them, sorted."""
        return self.on_redelivered(consumer, None, selector)

    def forget(self, entries: Iterable[E]) -> bool:
        """Entries no longer to dispatch (acked while parked, or unreadable)."""
        return self.on_acked(entries)

    def replay_candidates(
        self, selector: KeySharedSelector[C], permits: Mapping[C, int], max_entries: int
    ) -> list[E]:
        """Parked entries worth reading for the next plan, oldest first, at most
        ``max_entries``: those of slots whose selected consumer has permits and may take
        them (not draining elsewhere), each slot's from its first parked entry on, at most
        as many per consumer as it has permits. Entries of blocked slots are skipped, so a
        replay set full of one slow consumer's keys never hides the others' (Pulsar's
        "stuck on replays"); they stay parked. Cost: one pass over the parked slots."""
        left = {c: n for c, n in permits.items() if n > 0}
        out: list[E] = []
        if max_entries <= 0 or not left:
            return out
        for slot, lst in self._parked_per_slot.items():
            target = selector.select(slot)
            if target is None:
                continue
            n = left.get(target, 0)
            if n <= 0 or not self.can_dispatch(slot, target):
                continue
            take = lst[: min(n, max_entries)]
            left[target] = n - len(take)
            out.extend(take)
        out.sort()
        del out[max_entries:]
        return out

    def reset(self) -> None:
        """Seek / cursor reset: nothing is outstanding or parked any more."""
        self._outstanding.clear()
        self._held.clear()
        self._per_consumer.clear()
        self._parked.clear()
        self._parked_per_slot.clear()

    # -- observability
    def statistics(self, selector: KeySharedSelector[C] | None = None) -> KeyOrderingStats:
        draining = 0
        draining_pending = 0
        if selector is not None:
            for slot, per in self._held.items():
                target = selector.select(slot)
                if any(c != target for c in per):
                    draining += 1
                    draining_pending += sum(n for c, n in per.items() if c != target)
        return KeyOrderingStats(
            len(self._outstanding),
            len(self._parked),
            len(self._held),
            draining,
            draining_pending,
            self.draining_cleared_total,
            dict(self._per_consumer),
        )

    def check_invariants(self) -> None:
        held: dict[int, dict[C, int]] = {}
        per_consumer: dict[C, int] = {}
        for consumer, slot in self._outstanding.values():
            per = held.setdefault(slot, {})
            per[consumer] = per.get(consumer, 0) + 1
            per_consumer[consumer] = per_consumer.get(consumer, 0) + 1
        assert held == self._held, (held, self._held)
        assert per_consumer == self._per_consumer
        if not self.allow_out_of_order:
            for slot, per in self._held.items():
                assert len(per) == 1, f"slot {slot} outstanding on {len(per)} consumers"
        assert not (self._parked.keys() & self._outstanding.keys())
        n = 0
        for slot, lst in self._parked_per_slot.items():
            assert lst and lst == sorted(lst)
            for e in lst:
                assert self._parked[e] == slot
            n += len(lst)
        assert n == len(self._parked)


# ---------------------------------------------------------------------------- planning


class PlanEntry(NamedTuple, Generic[E]):
    """One entry offered to the planner: its id, slot and permit cost (messages in it).
    A tuple: one is built per entry per round."""

    entry: E
    slot: int
    cost: int = 1


@dataclass(frozen=True, slots=True)
class DispatchPlan(Generic[C, E]):
    """What to send now (per consumer, in offer order) and what waits (replay set)."""

    assignments: dict[C, list[E]] = field(default_factory=dict)
    waiting: list[E] = field(default_factory=list)
    #: entries offered while already outstanding (a caller bug; neither sent nor parked)
    skipped: list[E] = field(default_factory=list)
    #: slots that could not progress in this plan (no consumer, no permits, draining, order)
    blocked_slots: frozenset[int] = frozenset()
    #: for each consumer, the offer index of each assigned entry (parallel to
    #: ``assignments``): the caller finds its entry objects without a lookup by id
    indices: dict[C, list[int]] = field(default_factory=dict)

    @property
    def assigned_count(self) -> int:
        return sum(len(v) for v in self.assignments.values())


def plan_dispatch(
    selector: KeySharedSelector[C],
    guard: KeyOrderingGuard[C, E],
    entries: Sequence[PlanEntry[E]],
    permits: Mapping[C, int],
    *,
    max_entries: int | None = None,
) -> DispatchPlan[C, E]:
    """Decide, for entries offered in position order (replays first, then new reads), who
    gets each one now, and commit it to ``guard``: assigned entries become outstanding,
    the others are parked and must go back to the caller's replay set.

    ``permits``: available permits of each consumer that may receive now (absent or <= 0:
    none; a consumer blocked on its unacked limit or paused should be left out). An entry
    goes to a consumer with permits > 0 and then costs ``cost`` permits (which may go
    negative, as Java). ``max_entries``: at most this many assignments (the subscription's
    unacked limit); the rest wait. An entry waits when its slot has no consumer, the
    consumer has no permits, the slot is draining from another consumer, an earlier entry
    of the slot is parked and not offered before it, or an earlier entry of the slot waits
    in this plan. Other slots are never held up by a waiting one.

    This runs once per entry dispatched, so the ordered case works on the guard's tables
    directly (the same transitions as ``on_sent``: ``check_invariants`` holds after it).
    """
    if guard.allow_out_of_order:
        return _plan_out_of_order(selector, guard, entries, permits, max_entries)
    left = {c: n for c, n in permits.items() if n > 0}
    budget = max_entries if max_entries is not None else len(entries)
    assignments: dict[C, list[E]] = {}
    indices: dict[C, list[int]] = {}
    waiting: list[E] = []
    skipped: list[E] = []
    stuck: set[int] = set()
    outstanding = guard._outstanding
    held_by_slot = guard._held
    per_consumer = guard._per_consumer
    parked = guard._parked
    parked_per_slot = guard._parked_per_slot
    select = selector.select
    for i, (entry, slot, cost) in enumerate(entries):
        if entry in outstanding:
            skipped.append(entry)
            continue
        target: C | None = None
        lst = parked_per_slot.get(slot)
        held = None
        if budget > 0 and slot not in stuck and (lst is None or lst[0] == entry):
            target = select(slot)
            if target is not None:
                held = held_by_slot.get(slot)
                if left.get(target, 0) <= 0 or (
                    held is not None and (len(held) != 1 or target not in held)
                ):
                    target = None
        if target is None:
            stuck.add(slot)
            guard.park(entry, slot)
            waiting.append(entry)
            continue
        # guard.on_sent(entry, slot, target), inlined
        if lst is not None:  # the entry is this slot's first parked one
            del lst[0]
            if not lst:
                del parked_per_slot[slot]
            del parked[entry]
        elif parked and entry in parked:  # parked under another slot: a caller bug
            guard._unpark(entry)
        outstanding[entry] = (target, slot)
        if held is None:
            held_by_slot[slot] = {target: 1}
        else:
            held[target] += 1
        per_consumer[target] = per_consumer.get(target, 0) + 1
        left[target] -= cost if cost > 1 else 1
        budget -= 1
        got = assignments.get(target)
        if got is None:
            assignments[target] = [entry]
            indices[target] = [i]
        else:
            got.append(entry)
            indices[target].append(i)
    return DispatchPlan(assignments, waiting, skipped, frozenset(stuck), indices)


def _plan_out_of_order(
    selector: KeySharedSelector[C],
    guard: KeyOrderingGuard[C, E],
    entries: Sequence[PlanEntry[E]],
    permits: Mapping[C, int],
    max_entries: int | None,
) -> DispatchPlan[C, E]:
    """``plan_dispatch`` with ``allow_out_of_order``: neither draining nor parked order
    holds an entry back; only a missing consumer, permits or the budget do."""
    left = {c: n for c, n in permits.items() if n > 0}
    budget = max_entries if max_entries is not None else len(entries)
    assignments: dict[C, list[E]] = {}
    indices: dict[C, list[int]] = {}
    waiting: list[E] = []
    skipped: list[E] = []
    stuck: set[int] = set()
    for i, (entry, slot, cost) in enumerate(entries):
        if guard.is_outstanding(entry):
            skipped.append(entry)
            continue
        target: C | None = None
        if budget > 0:
            target = selector.select(slot)
            if target is not None and left.get(target, 0) <= 0:
                target = None
        if target is None:
            stuck.add(slot)
            guard.park(entry, slot)
            waiting.append(entry)
            continue
        guard.on_sent(entry, slot, target)
        left[target] -= max(cost, 1)
        budget -= 1
        assignments.setdefault(target, []).append(entry)
        indices.setdefault(target, []).append(i)
    return DispatchPlan(assignments, waiting, skipped, frozenset(stuck), indices)


# ---------------------------------------------------------------------------- facade


@dataclass(frozen=True, slots=True)
class KeySharedStats:
    mode: str
    allow_out_of_order: bool
    consumers: int
    outstanding_entries: int
    parked_entries: int
    draining_hashes_count: int
    draining_hashes_pending_messages: int
    draining_hashes_cleared_total: int
    pending_per_consumer: Mapping[Any, int]


class KeySharedScheduler(Generic[C, E]):
    """What a Key_Shared dispatcher holds: the policy (fixed by the first consumer), the
    selector and the ordering guard. Every method is synchronous and does no I/O."""

    def __init__(
        self,
        policy: KeySharedPolicy = KeySharedPolicy(),
        *,
        points_per_consumer: int = DEFAULT_POINTS_PER_CONSUMER,
    ) -> None:
        self.policy = policy
        self.selector: KeySharedSelector[C] = KeySharedSelector(
            policy.mode, points_per_consumer=points_per_consumer
        )
        self.guard: KeyOrderingGuard[C, E] = KeyOrderingGuard(
            allow_out_of_order=policy.allow_out_of_order
        )

    def __repr__(self) -> str:
        return f"<KeySharedScheduler {self.policy.mode.name} {self.selector!r} {self.guard!r}>"

    def check_policy(self, policy: KeySharedPolicy) -> None:
        """A joining consumer must use the subscription's mode and out-of-order flag."""
        if policy != self.policy:
            raise KeySharedPolicyMismatch(
                "Subscription is of different type: Key_Shared "
                f"{self.policy.mode.name} allow_out_of_order={self.policy.allow_out_of_order}"
                f", consumer asked {policy.mode.name} "
                f"allow_out_of_order={policy.allow_out_of_order}"
            )

    def add_consumer(
        self,
        consumer: C,
        name: str,
        *,
        policy: KeySharedPolicy | None = None,
        hash_ranges: Iterable[tuple[int, int] | HashRange] = (),
    ) -> None:
        """Raises KeySharedPolicyMismatch / ConsumerAssignError (nothing changes then).
        Slots that move away from consumers holding their entries start draining."""
        if policy is not None:
            self.check_policy(policy)
        self.selector.add_consumer(consumer, name, hash_ranges)

    def remove_consumer(self, consumer: C) -> list[E]:
        """Close or disconnect: the consumer's outstanding entries, returned and parked at
        once; the caller must put exactly these in its replay set."""
        self.selector.remove_consumer(consumer)
        return self.guard.on_returned(consumer)  # not "draining": the slots just move

    def plan(
        self,
        entries: Sequence[PlanEntry[E]],
        permits: Mapping[C, int],
        *,
        max_entries: int | None = None,
    ) -> DispatchPlan[C, E]:
        return plan_dispatch(self.selector, self.guard, entries, permits, max_entries=max_entries)

    def park(self, entry: E, slot: int) -> None:
        """An entry enters the replay set by another path (e.g. a delayed entry now due):
        it must be parked here too, or ``replay_candidates`` never offers it."""
        self.guard.park(entry, slot)

    @property
    def parked_count(self) -> int:
        return self.guard.parked_count

    def replay_candidates(self, permits: Mapping[C, int], max_entries: int) -> list[E]:
        """Which entries of the replay set to read for the next plan (see the guard)."""
        return self.guard.replay_candidates(self.selector, permits, max_entries)

    def on_acked(self, entries: Iterable[E]) -> bool:
        """Acked entries (idempotent). True: a slot or parked entry was freed, so the
        dispatcher should run a round even if no consumer got unblocked."""
        return self.guard.on_acked(entries, self.selector)

    def on_redelivered(self, consumer: C, entries: Iterable[E] | None) -> list[E]:
        """Nack / ack-timeout redelivery (None: all of the consumer's): the entries to put
        in the replay set (they are parked); count a redelivery for each."""
        return self.guard.on_redelivered(consumer, entries, self.selector)

    def on_acked_one(self, entry: E) -> bool:
        """``on_acked`` of one entry (the per-ack path)."""
        return self.guard.on_acked_one(entry, self.selector)

    def forget(self, entries: Iterable[E]) -> bool:
        return self.guard.on_acked(entries, self.selector)

    def reset(self) -> None:
        self.guard.reset()

    def lookahead_limit(self) -> int:
        return lookahead_limit(len(self.selector))

    def select(self, slot: int) -> C | None:
        return self.selector.select(slot)

    def statistics(self) -> KeySharedStats:
        g = self.guard.statistics(self.selector)
        return KeySharedStats(
            self.policy.mode.name,
            self.policy.allow_out_of_order,
            len(self.selector),
            g.outstanding_entries,
            g.parked_entries,
            g.draining_hashes_count,
            g.draining_hashes_pending_messages,
            g.draining_hashes_cleared_total,
            g.pending_per_consumer,
        )

    def check_invariants(self) -> None:
        self.selector.check_invariants()
        self.guard.check_invariants()
        for consumer in self.guard.statistics(self.selector).pending_per_consumer:
            # a removed consumer never keeps outstanding entries
            assert consumer in self.selector, consumer


__all__ = [
    "DEFAULT_POINTS_PER_CONSUMER",
    "KEY_SHARED_SLOTS",
    "LOOKAHEAD_MAX",
    "LOOKAHEAD_PER_CONSUMER",
    "ConsumerAssignError",
    "DispatchPlan",
    "HashRange",
    "KeyOrderingGuard",
    "KeyOrderingStats",
    "KeySharedError",
    "KeySharedMode",
    "KeySharedPolicy",
    "KeySharedPolicyMismatch",
    "KeySharedScheduler",
    "KeySharedSelector",
    "KeySharedStats",
    "PlanEntry",
    "lookahead_limit",
    "plan_dispatch",
    "validate_sticky_ranges",
]
