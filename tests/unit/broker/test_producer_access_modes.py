"""Producer access modes as Pulsar's ``AbstractTopic.incrementTopicEpochIfNeeded`` decides
them: which refusal is ProducerFenced and which ProducerBusy, waiting exclusive producers
seen by shared ones, and the topic epoch (pure)."""

from __future__ import annotations

import itertools

import pytest

from magnetar.broker.topics.producer import (
    AccessMode,
    Admission,
    Producer,
    ProducerError,
    ProducerRegistry,
)

_ids = itertools.count(1)


def make(mode: AccessMode, name: str = "", epoch: int | None = None) -> Producer:
    pid = next(_ids)
    return Producer(pid, name or f"p{pid}", mode, topic_epoch=epoch)


def refusal(reg: ProducerRegistry, producer: Producer) -> tuple[str, str]:
    with pytest.raises(ProducerError) as err:
        reg.admit(producer)
    reg.check_invariants()
    return err.value.code.name, err.value.message


def test_second_exclusive_is_fenced_not_busy() -> None:
    reg = ProducerRegistry()
    reg.admit(make(AccessMode.EXCLUSIVE, "first"))
    code, message = refusal(reg, make(AccessMode.EXCLUSIVE))
    assert code == "ProducerFenced"
    assert message == "Topic has an existing exclusive producer: first"


def test_exclusive_after_shared_is_fenced() -> None:
    reg = ProducerRegistry()
    reg.admit(make(AccessMode.SHARED))
    assert refusal(reg, make(AccessMode.EXCLUSIVE)) == (
        "ProducerFenced",
        "Topic has existing shared producers",
    )


def test_shared_after_exclusive_is_busy() -> None:
    reg = ProducerRegistry()
    reg.admit(make(AccessMode.EXCLUSIVE, "x"))
    assert refusal(reg, make(AccessMode.SHARED)) == (
        "ProducerBusy",
        "Topic has an existing exclusive producer: x",
    )


def test_shared_and_exclusive_see_a_waiting_exclusive_producer() -> None:
    reg = ProducerRegistry()
    shared = make(AccessMode.SHARED)
    reg.admit(shared)
    waiter = make(AccessMode.WAIT_FOR_EXCLUSIVE)
    assert reg.admit(waiter) is Admission.QUEUED
    assert refusal(reg, make(AccessMode.SHARED))[0] == "ProducerBusy"
    assert refusal(reg, make(AccessMode.EXCLUSIVE))[0] == "ProducerFenced"
    assert reg.remove(shared) == [waiter]
    assert reg.exclusive is waiter
    reg.check_invariants()


def test_epochs_start_at_zero_and_move_with_each_exclusive_holder() -> None:
    reg = ProducerRegistry()
    assert reg.topic_epoch is None
    reg.admit(make(AccessMode.SHARED))
    assert reg.topic_epoch is None  # shared producers need no epoch
    reg = ProducerRegistry()
    first = make(AccessMode.EXCLUSIVE)
    reg.admit(first)
    assert reg.topic_epoch == 0
    reg.remove(first)
    reg.admit(make(AccessMode.WAIT_FOR_EXCLUSIVE))
    assert reg.topic_epoch == 1


def test_reconnect_keeps_its_epoch_and_an_older_one_is_fenced() -> None:
    reg = ProducerRegistry(topic_epoch=4)  # e.g. restored from the topic's storage
    assert refusal(reg, make(AccessMode.EXCLUSIVE, epoch=3)) == (
        "ProducerFenced",
        "Topic epoch has already moved. Current epoch: 4, Producer epoch: 3",
    )
    assert refusal(reg, make(AccessMode.WAIT_FOR_EXCLUSIVE, epoch=3))[0] == "ProducerFenced"
    assert refusal(reg, make(AccessMode.EXCLUSIVE_WITH_FENCING, epoch=3))[0] == "ProducerFenced"
    holder = make(AccessMode.EXCLUSIVE, epoch=4)
    assert reg.admit(holder) is Admission.ADMITTED
    assert reg.topic_epoch == 4


def test_fencing_evicts_shared_exclusive_and_waiting_producers() -> None:
    reg = ProducerRegistry()
    holder = make(AccessMode.EXCLUSIVE)
    reg.admit(holder)
    waiter = make(AccessMode.WAIT_FOR_EXCLUSIVE)
    reg.admit(waiter)
    fencer = make(AccessMode.EXCLUSIVE_WITH_FENCING)
    assert reg.admit(fencer) is Admission.ADMITTED
    assert reg.take_fenced() == [holder, waiter]
    assert holder.closed and waiter.closed
    assert reg.exclusive is fencer and reg.topic_epoch == 1
    assert reg.remove(holder) == []  # a late close of the evicted producer changes nothing
    assert reg.exclusive is fencer
    reg.check_invariants()


def test_every_mode_against_every_holder() -> None:
    """The whole table: (holder on the topic, newcomer) -> admitted, queued or the error."""
    S, E, W, F = (
        AccessMode.SHARED,
        AccessMode.EXCLUSIVE,
        AccessMode.WAIT_FOR_EXCLUSIVE,
        AccessMode.EXCLUSIVE_WITH_FENCING,
    )
    expected = {
        (None, S): "admitted", (None, E): "admitted", (None, W): "admitted", (None, F): "admitted",
        (S, S): "admitted", (S, E): "ProducerFenced", (S, W): "queued", (S, F): "admitted",
        (E, S): "ProducerBusy", (E, E): "ProducerFenced", (E, W): "queued", (E, F): "admitted",
        (W, S): "ProducerBusy", (W, E): "ProducerFenced", (W, W): "queued", (W, F): "admitted",
        (F, S): "ProducerBusy", (F, E): "ProducerFenced", (F, W): "queued", (F, F): "admitted",
    }  # fmt: skip
    for (holder, newcomer), outcome in expected.items():
        reg = ProducerRegistry()
        if holder is not None:
            assert reg.admit(make(holder)) is Admission.ADMITTED
        try:
            got = reg.admit(make(newcomer)).value
        except ProducerError as exc:
            got = exc.code.name
        reg.check_invariants()
        assert got == outcome, (holder, newcomer)


def test_pulsar_names_of_the_modes() -> None:
    assert [m.pulsar_name for m in AccessMode] == [
        "Shared",
        "Exclusive",
        "WaitForExclusive",
        "ExclusiveWithFencing",
    ]


def test_an_epoch_not_stored_is_reverted_unless_another_holder_came() -> None:
    reg = ProducerRegistry(topic_epoch=3)
    fencer = make(AccessMode.EXCLUSIVE_WITH_FENCING)
    reg.admit(fencer)
    assert reg.topic_epoch == 4
    reg.remove(fencer)  # storing epoch 4 failed: the producer is gone
    reg.revert_epoch(3)
    assert reg.topic_epoch == 3
    assert reg.admit(make(AccessMode.EXCLUSIVE, epoch=3)) is Admission.ADMITTED
    reg.revert_epoch(None)  # a holder is there: its epoch stays
    assert reg.topic_epoch == 3
