"""The producers and consumers of a connection, as records.

Owns: ``ProducerSession`` (a producer id, from its PRODUCER to its close: the topic's
``Producer``, its topic, the PRODUCER's request id, the schema version of its
PRODUCER_SUCCESS) and ``ConsumerSession`` (a consumer id, from
its SUBSCRIBE to its close: the dispatcher's ``Consumer``, its subscription, its topic).
Invariant: a session never changes; a connection holds at most one per id.
Must not know: commands, frames.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from magnetar.broker.dispatch.consumer import Consumer
    from magnetar.broker.topics.contract import Topic, TopicSubscription
    from magnetar.broker.topics.producer import Producer


@dataclass(frozen=True, slots=True)
class ProducerSession:
    producer: Producer
    topic: Topic
    request_id: int
    """The PRODUCER's request id: a queued producer is answered on it again when admitted."""
    schema_version: bytes | None
    """PRODUCER_SUCCESS.schema_version (None: the producer has no schema)."""


@dataclass(frozen=True, slots=True)
class ConsumerSession:
    consumer: Consumer
    subscription: TopicSubscription
    topic: Topic


__all__ = ["ConsumerSession", "ProducerSession"]
