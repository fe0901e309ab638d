"""Producer access modes and broker-side deduplication (pure)."""

from __future__ import annotations

import pytest

from magnetar.broker.topics.producer import (
    AccessMode,
    Admission,
    Deduplication,
    Producer,
    ProducerError,
    ProducerRegistry,
)
from magnetar.client.protocol import ServerError


def p(pid: int, mode: AccessMode = AccessMode.SHARED, name: str = "") -> Producer:
    return Producer(pid, name or f"p{pid}", mode)


def test_shared_producers_coexist_but_names_are_unique() -> None:
    reg = ProducerRegistry()
    assert reg.admit(p(1)) is Admission.ADMITTED
    assert reg.admit(p(2)) is Admission.ADMITTED
    with pytest.raises(ProducerError) as err:
        reg.admit(p(3, name="p1"))
    assert err.value.code == ServerError.ProducerBusy


def test_exclusive_refused_when_busy_and_blocks_others() -> None:
    reg = ProducerRegistry()
    reg.admit(p(1))
    with pytest.raises(ProducerError):
        reg.admit(p(2, AccessMode.EXCLUSIVE))
    reg2 = ProducerRegistry()
    ex = p(1, AccessMode.EXCLUSIVE)
    assert reg2.admit(ex) is Admission.ADMITTED
    assert reg2.topic_epoch == 0
    with pytest.raises(ProducerError):
        reg2.admit(p(2))
    reg2.remove(ex)
    assert reg2.admit(p(3)) is Admission.ADMITTED


def test_wait_for_exclusive_is_queued_then_admitted_in_order() -> None:
    reg = ProducerRegistry()
    first = p(1, AccessMode.EXCLUSIVE)
    reg.admit(first)
    w1, w2 = p(2, AccessMode.WAIT_FOR_EXCLUSIVE), p(3, AccessMode.WAIT_FOR_EXCLUSIVE)
    assert reg.admit(w1) is Admission.QUEUED
    assert reg.admit(w2) is Admission.QUEUED
    assert reg.remove(first) == [w1]
    assert reg.exclusive is w1 and reg.topic_epoch == 1
    assert reg.remove(w1) == [w2]
    assert reg.remove(w2) == []


def test_dedup_drops_sequence_ids_not_above_the_last() -> None:
    d = Deduplication(enabled=True)
    assert d.last_sequence_id("a") == -1
    assert not d.is_duplicate("a", 0, 0)
    assert not d.is_duplicate("a", 1, 5)  # a batch 1..5
    assert d.is_duplicate("a", 3, 3)
    assert not d.is_duplicate("b", 0, 0)  # per producer name
    d.persisted("a", 5)
    assert d.last_sequence_id("a") == 5
    assert not d.is_duplicate("a", 6, 6)
    d.failed("a")  # 6 was not written: a resend must be accepted
    assert not d.is_duplicate("a", 6, 6)


def test_dedup_disabled_accepts_everything() -> None:
    d = Deduplication(enabled=False)
    assert not d.is_duplicate("a", 0, 0)
    assert not d.is_duplicate("a", 0, 0)
    assert d.last_sequence_id("a") == -1


def test_exclusive_with_fencing_evicts_everyone_and_refuses_old_epochs() -> None:
    reg = ProducerRegistry()
    old = p(1, AccessMode.EXCLUSIVE)
    reg.admit(old)
    old_epoch = reg.topic_epoch
    waiting = p(2, AccessMode.WAIT_FOR_EXCLUSIVE)
    reg.admit(waiting)
    fencer = p(3, AccessMode.EXCLUSIVE_WITH_FENCING)
    assert reg.admit(fencer) is Admission.ADMITTED
    assert reg.take_fenced() == [old, waiting]
    assert reg.take_fenced() == []
    assert reg.exclusive is fencer and reg.topic_epoch == old_epoch + 1
    reg.remove(fencer)
    stale = Producer(4, "p1", AccessMode.EXCLUSIVE, topic_epoch=old_epoch)
    with pytest.raises(ProducerError) as err:
        reg.admit(stale)
    assert err.value.code == ServerError.ProducerFenced
    holder = Producer(5, "p3", AccessMode.EXCLUSIVE, topic_epoch=reg.topic_epoch)
    assert reg.admit(holder) is Admission.ADMITTED  # the current holder may reconnect
