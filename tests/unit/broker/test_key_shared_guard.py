"""Key_Shared ordering guard and planner: draining hashes, returns, parked order, permits."""

from __future__ import annotations

import pytest

from magnetar.broker.dispatch.key_shared import (
    KeySharedMode,
    KeySharedPolicy,
    KeySharedScheduler,
    PlanEntry,
    lookahead_limit,
)


class C:
    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"C({self.name})"


def sticky_sched(allow_out_of_order: bool = False) -> KeySharedScheduler[C, int]:
    return KeySharedScheduler(KeySharedPolicy(KeySharedMode.STICKY, allow_out_of_order))


def pe(entry: int, slot: int, cost: int = 1) -> PlanEntry[int]:
    return PlanEntry(entry, slot, cost)


# Slots used below: STICKY ranges make ownership explicit. a: 0..99, b: 100..199.


def test_plan_routes_by_slot_and_spends_permits_costing_batch_size() -> None:
    s = sticky_sched()
    a, b = C("a"), C("b")
    s.add_consumer(a, "a", hash_ranges=[(0, 99)])
    s.add_consumer(b, "b", hash_ranges=[(100, 199)])
    plan = s.plan([pe(1, 5, cost=3), pe(2, 150), pe(3, 5), pe(4, 6), pe(5, 500)], {a: 3, b: 10})
    # a had 3 permits: entry 1 (3 messages) takes them all; 3 and 4 wait; 500 has no owner
    assert plan.assignments == {a: [1], b: [2]}
    assert plan.waiting == [3, 4, 5]
    assert plan.blocked_slots == {5, 6, 500}
    assert s.guard.parked_count == 3
    s.check_invariants()
    # a negative balance is allowed (Java): 1 permit left, a 3-message entry still goes
    plan = s.plan([pe(3, 5, cost=3)], {a: 1})
    assert plan.assignments == {a: [3]}


def test_key_moves_only_after_old_consumer_acks_and_other_keys_flow() -> None:
    s: KeySharedScheduler[C, int] = KeySharedScheduler()
    a = C("a")
    s.add_consumer(a, "a")
    # pick slots that the newcomer b will take over, and one that stays with a
    b = C("b")
    probe: KeySharedScheduler[C, int] = KeySharedScheduler()
    probe.add_consumer(a, "a")
    probe.add_consumer(b, "b")
    moving = next(x for x in range(65536) if probe.select(x) is b)
    staying = next(x for x in range(65536) if probe.select(x) is a)

    plan = s.plan([pe(1, moving), pe(2, moving), pe(3, staying)], {a: 100})
    assert plan.assignments == {a: [1, 2, 3]}
    s.add_consumer(b, "b")
    assert s.select(moving) is b
    st = s.statistics()
    assert st.draining_hashes_count == 1 and st.draining_hashes_pending_messages == 2

    # new entries of the moving slot wait (draining); the staying key keeps flowing
    plan = s.plan([pe(4, moving), pe(5, staying), pe(6, moving)], {a: 100, b: 100})
    assert plan.assignments == {a: [5]}
    assert plan.waiting == [4, 6]
    assert not s.guard.can_dispatch(moving, b) and s.guard.can_dispatch(moving, a)
    s.check_invariants()

    assert s.on_acked([1]) is False  # one still outstanding on a: slot still draining
    assert s.plan([pe(4, moving), pe(6, moving)], {b: 100}).waiting == [4, 6]
    assert s.replay_candidates({a: 100, b: 100}, 10) == []  # draining: not worth reading
    assert s.on_acked([2]) is True  # drained: schedule a round
    assert s.replay_candidates({a: 100, b: 100}, 10) == [4, 6]
    assert s.statistics().draining_hashes_cleared_total == 1
    plan = s.plan([pe(4, moving), pe(6, moving)], {b: 100})
    assert plan.assignments == {b: [4, 6]} and not plan.waiting
    assert s.statistics().draining_hashes_count == 0
    s.check_invariants()
    assert s.on_acked([2]) is False  # duplicate acks are harmless


def test_disconnect_returns_pending_at_once_and_order_is_kept_behind_them() -> None:
    s = sticky_sched()
    a = C("a")
    s.add_consumer(a, "a", hash_ranges=[(0, 199)])
    s.plan([pe(1, 5), pe(2, 5), pe(3, 7)], {a: 10})
    returned = s.remove_consumer(a)
    assert returned == [1, 2, 3]
    assert s.guard.parked_count == 3 and s.statistics().outstanding_entries == 0
    b = C("b")
    s.add_consumer(b, "b", hash_ranges=[(0, 199)])
    # a new entry of slot 5 offered alone must not overtake the returned 1 and 2
    plan = s.plan([pe(4, 5), pe(9, 8)], {b: 10})
    assert plan.assignments == {b: [9]} and plan.waiting == [4]
    # the replay set (1, 2, 3, 4) in order: all go, in order
    plan = s.plan([pe(1, 5), pe(2, 5), pe(3, 7), pe(4, 5)], {b: 10})
    assert plan.assignments == {b: [1, 2, 3, 4]}
    s.check_invariants()


def test_partial_replay_take_cannot_reorder_a_slot() -> None:
    s = sticky_sched()
    a = C("a")
    s.add_consumer(a, "a", hash_ranges=[(0, 99)])
    s.plan([pe(1, 5), pe(2, 5)], {})  # no permits: both parked
    assert s.guard.parked_count == 2
    plan = s.plan([pe(2, 5)], {a: 10})  # 2 offered without 1: waits
    assert plan.waiting == [2] and not plan.assignments
    plan = s.plan([pe(1, 5), pe(2, 5)], {a: 1})  # 1 goes, 2 has no permits left
    assert plan.assignments == {a: [1]} and plan.waiting == [2]
    s.check_invariants()


def test_nack_parks_entries_and_they_may_only_go_back_to_the_holder() -> None:
    s: KeySharedScheduler[C, int] = KeySharedScheduler()
    a = C("a")
    s.add_consumer(a, "a")
    s.plan([pe(1, 42), pe(2, 42)], {a: 10})
    assert s.on_redelivered(a, [1, 77]) == [1]  # 77 unknown: ignored
    b = C("b")
    s.add_consumer(b, "b")
    if s.select(42) is b:
        # slot 42 now belongs to b, but 2 is still outstanding on a: 1 waits
        assert s.plan([pe(1, 42)], {a: 10, b: 10}).waiting == [1]
        s.on_acked([2])
        assert s.plan([pe(1, 42)], {a: 10, b: 10}).assignments == {b: [1]}
    else:
        assert s.plan([pe(1, 42)], {a: 10, b: 10}).assignments == {a: [1]}
    s.check_invariants()
    assert s.on_redelivered(a, None) == s.guard.outstanding_of(a) == []


def test_a_consumer_that_stops_acking_blocks_only_its_own_slots() -> None:
    s = sticky_sched()
    slow, fast = C("slow"), C("fast")
    s.add_consumer(slow, "slow", hash_ranges=[(0, 99)])
    s.add_consumer(fast, "fast", hash_ranges=[(100, 199)])
    s.plan([pe(i, 10) for i in range(5)], {slow: 5})  # slow holds 5, no permits left
    delivered: list[int] = []
    for round_ in range(20):
        batch = [pe(100 + 2 * round_, 10), pe(101 + 2 * round_, 150)]
        parked = [pe(e, 10) for e in sorted(s.guard._parked)]
        plan = s.plan(parked + batch, {fast: 5})
        delivered += plan.assignments.get(fast, [])
        s.on_acked(plan.assignments.get(fast, []))
    assert delivered == [101 + 2 * r for r in range(20)]
    assert s.guard.parked_count == 20  # slot 10's new entries wait, bounded by look-ahead
    assert lookahead_limit(2) == 4000 and lookahead_limit(50) == 20_000
    st = s.statistics()
    assert st.pending_per_consumer == {slow: 5}
    s.check_invariants()


def test_max_entries_caps_a_plan_and_the_rest_wait_in_order() -> None:
    s = sticky_sched()
    a = C("a")
    s.add_consumer(a, "a", hash_ranges=[(0, 99)])
    plan = s.plan([pe(1, 1), pe(2, 2), pe(3, 1)], {a: 10}, max_entries=1)
    assert plan.assignments == {a: [1]} and plan.waiting == [2, 3]
    plan = s.plan([pe(2, 2), pe(3, 1), pe(1, 1)], {a: 10})
    assert plan.assignments == {a: [2, 3]} and plan.skipped == [1]


def test_allow_out_of_order_sends_to_the_new_owner_at_once() -> None:
    s = sticky_sched(allow_out_of_order=True)
    a = C("a")
    s.add_consumer(a, "a", hash_ranges=[(0, 99)])
    s.plan([pe(1, 5)], {a: 10})
    s.remove_consumer(a)  # 1 returned and parked
    b = C("b")
    s.add_consumer(b, "b", hash_ranges=[(0, 99)])
    plan = s.plan([pe(2, 5)], {b: 10})
    assert plan.assignments == {b: [2]}  # overtakes the parked 1: allowed in this mode
    s.check_invariants()


def test_reset_forgets_everything_and_plan_rejects_double_send() -> None:
    s = sticky_sched()
    a = C("a")
    s.add_consumer(a, "a", hash_ranges=[(0, 99)])
    s.plan([pe(1, 5), pe(2, 6)], {a: 1})
    with pytest.raises(ValueError, match="outstanding"):
        s.guard.on_sent(1, 5, a)
    with pytest.raises(ValueError, match="cannot park"):
        s.guard.park(1, 5)
    s.reset()
    st = s.statistics()
    assert st.outstanding_entries == 0 and st.parked_entries == 0
    assert s.plan([pe(1, 5)], {a: 1}).assignments == {a: [1]}
    s.check_invariants()


def test_replay_candidates_skip_blocked_slots_and_keep_each_slot_in_order() -> None:
    s = sticky_sched()
    slow, fast = C("slow"), C("fast")
    s.add_consumer(slow, "slow", hash_ranges=[(0, 99)])
    s.add_consumer(fast, "fast", hash_ranges=[(100, 199)])
    # 30 entries of slow's slot 10 parked first, then 3 of fast's slot 150, 1 unowned
    s.plan([pe(i, 10) for i in range(30)] + [pe(40, 150), pe(41, 150), pe(42, 150)], {})
    s.plan([pe(50, 900)], {fast: 5})
    # slow has no permits: a head-of-replay window of 20 would find nothing to send
    assert s.replay_candidates({fast: 5}, 20) == [40, 41, 42]
    assert s.replay_candidates({fast: 2}, 20) == [40, 41]  # bounded by permits, in order
    assert s.replay_candidates({fast: 5, slow: 4}, 5) == [0, 1, 2, 3, 40]  # oldest first
    assert s.replay_candidates({}, 20) == []
    # draining slots are skipped too
    s2: KeySharedScheduler[C, int] = KeySharedScheduler()
    a = C("a")
    s2.add_consumer(a, "a")
    s2.plan([pe(1, 7)], {a: 1})
    s2.plan([pe(2, 7)], {})  # parked
    s2.remove_consumer(a)  # 1 returned: parked ahead of 2
    b = C("b")
    s2.add_consumer(b, "b")
    assert s2.replay_candidates({b: 10}, 10) == [1, 2]
    s.check_invariants()
    s2.check_invariants()


def test_an_entry_parked_from_outside_is_offered_and_orders_its_slot() -> None:
    s = sticky_sched()
    a = C("a")
    s.add_consumer(a, "a", hash_ranges=[(0, 99)])
    s.park(3, 9)  # e.g. a delayed entry that became due
    assert s.parked_count == 1
    assert s.plan([pe(4, 9)], {a: 5}).waiting == [4]  # waits behind it
    assert s.replay_candidates({a: 5}, 10) == [3, 4]
    assert s.plan([pe(3, 9), pe(4, 9)], {a: 5}).assignments == {a: [3, 4]}
    assert s.remove_consumer(a) == [3, 4]
    assert s.statistics().draining_hashes_cleared_total == 0  # removal is not draining
