"""Topics: persistent and non-persistent topics, their producers and subscriptions.

Owns: a topic's life on this broker: publish, subscribe, acks, seek, terminate; the ``Topic``
contract both kinds keep (``contract``), a SEND on its way in (``publish``), what topics read
from stored entries (``entries``).
Must not know: connections, HTTP, ZooKeeper ownership or load balancing; it stores through
the ``storage`` contract and hands entries to ``dispatch``.
"""

from magnetar.broker.topics.contract import (
    AppliedPolicies,
    LastMessageId,
    SubscriptionStats,
    Topic,
    TopicCounters,
    TopicSubscription,
)
from magnetar.broker.topics.nonpersistent import NonPersistentSubscription, NonPersistentTopic
from magnetar.broker.topics.persistent import PersistentTopic, TopicState
from magnetar.broker.topics.producer import (
    AccessMode,
    Admission,
    Deduplication,
    Producer,
    ProducerError,
    ProducerRegistry,
)
from magnetar.broker.topics.publish import PendingSend, PublishSink
from magnetar.broker.topics.subscription import Subscription, SubscriptionError

__all__ = [
    "AccessMode",
    "Admission",
    "AppliedPolicies",
    "Deduplication",
    "LastMessageId",
    "NonPersistentSubscription",
    "NonPersistentTopic",
    "PendingSend",
    "PersistentTopic",
    "Producer",
    "ProducerError",
    "ProducerRegistry",
    "PublishSink",
    "Subscription",
    "SubscriptionError",
    "SubscriptionStats",
    "Topic",
    "TopicCounters",
    "TopicState",
    "TopicSubscription",
]
