"""Topic lifecycle as data: every (state, event) pair is either in the table or refused."""

from __future__ import annotations

import itertools

import pytest

from magnetar.broker.topics.persistent import (
    TOPIC_TRANSITIONS,
    InvalidTopicTransition,
    TopicEvent,
    TopicState,
    next_topic_state,
)


@pytest.mark.parametrize(
    ("state", "event"), list(itertools.product(TopicState, TopicEvent)), ids=str
)
def test_every_pair(state: TopicState, event: TopicEvent) -> None:
    expected = TOPIC_TRANSITIONS.get((state, event))
    if expected is None:
        with pytest.raises(InvalidTopicTransition):
            next_topic_state(state, event)
    else:
        assert next_topic_state(state, event) is expected


def test_closed_is_terminal_and_reachable_from_fenced() -> None:
    s = next_topic_state(TopicState.ACTIVE, TopicEvent.FENCE)
    s = next_topic_state(s, TopicEvent.CLOSE)
    assert next_topic_state(s, TopicEvent.CLOSED) is TopicState.CLOSED
    assert {e for (st, e) in TOPIC_TRANSITIONS if st is TopicState.CLOSED} == {TopicEvent.FENCE}
