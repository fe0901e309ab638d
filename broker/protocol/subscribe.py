"""SUBSCRIBE: the checks Pulsar makes before a consumer joins, the consumer, its attachment.

Owns: ``subscription_target`` (subscription name, permission, the topic, auto-creation of
subscriptions, read_compacted, the consumer's schema), ``new_consumer`` (type, priority,
Key_Shared metadata, the connection's dispatch pause) and ``attach`` (the subscription made
or joined from the requested start). Every refusal is a ``BrokerError`` carrying its code.
Knows: topics' subscribe API and the dispatcher's ``Consumer`` (a SUBSCRIBE makes one).
Must not know: frames, the consumer's later commands (``consumers``).
"""

from __future__ import annotations

import datetime
import logging
from typing import TYPE_CHECKING

from magnetar.broker.dispatch.consumer import Consumer, ConsumerSink, SubType
from magnetar.broker.errors import BrokerError, CodedError, ServerError
from magnetar.broker.protocol.context import ConnectionContext
from magnetar.broker.protocol.message_ids import start_of
from magnetar.broker.protocol.topic_loading import load_topic
from magnetar.broker.schema import protocol as schema_protocol
from magnetar.broker.validation import check_subscription_name
from magnetar.client.protocol import pb

if TYPE_CHECKING:
    from magnetar.broker.topics.contract import Topic, TopicSubscription

log = logging.getLogger(__name__)


async def subscription_target(cnx: ConnectionContext, req: pb.CommandSubscribe) -> Topic | None:
    """The topic a SUBSCRIBE may attach to, after the checks Pulsar makes; raises the
    refusal, or returns None when the connection closed meanwhile."""
    check_subscription_name(req.subscription)
    denied = await cnx.security.denied_consume(req.topic, req.subscription)
    if denied is not None:
        raise CodedError(ServerError.AuthorizationError, denied)
    topic = await load_topic(cnx.service, req.topic, "subscribe")
    if cnx.closed:
        return None
    if (
        not cnx.service.config.allow_auto_subscription_creation
        and req.durable
        and topic.name.persistent
        and req.subscription not in topic.subscriptions
    ):
        raise CodedError(ServerError.SubscriptionNotFound, "Subscription does not exist")
    if req.read_compacted and not topic.name.persistent:
        raise CodedError(
            ServerError.NotAllowedError, "readCompacted is only supported on persistent topics"
        )
    await schema_protocol.check_consumer(cnx.service.schemas, topic, req)
    if cnx.closed:
        return None
    if req.HasField("schema") and topic.closed:  # unloaded meanwhile
        raise CodedError(ServerError.ServiceNotReady, f"Topic {req.topic} is being unloaded")
    return topic


def new_consumer(
    cnx: ConnectionContext, req: pb.CommandSubscribe, topic: Topic, sink: ConsumerSink
) -> Consumer:
    """The consumer a SUBSCRIBE describes, dispatched to through ``sink``."""
    consumer = Consumer(
        req.consumer_id,
        req.consumer_name or f"consumer-{req.consumer_id}",
        SubType(req.subType),
        priority=req.priority_level,
        sink=sink,
        max_unacked=cnx.service.config.max_unacked_messages_per_consumer,
        address=cnx.peer,
        is_reader=not req.durable,
        partition_index=topic.name.partition_index,
    )
    consumer.paused = cnx.write_paused
    now_ms = cnx.clock.now_ms()
    consumer.connected_since = (
        datetime.datetime.fromtimestamp(now_ms / 1000, datetime.UTC)
        .isoformat(timespec="milliseconds")
        .replace("+00:00", "Z")
    )
    if req.HasField("keySharedMeta"):
        meta = req.keySharedMeta
        consumer.key_shared_mode = int(meta.keySharedMode)
        consumer.hash_ranges = [(r.start, r.end) for r in meta.hashRanges]
        consumer.allow_out_of_order = bool(meta.allowOutOfOrderDelivery)
    return consumer


async def attach(
    cnx: ConnectionContext, req: pb.CommandSubscribe, topic: Topic, consumer: Consumer
) -> TopicSubscription:
    """Attach ``consumer`` to its subscription (created if needed) from the requested
    start; a storage failure is ServiceNotReady (the client retries)."""
    start = start_of(req.start_message_id) if req.HasField("start_message_id") else None
    cnx.service.policies.check_consumer(topic, consumer)  # max consumers, unacked
    extra = {"read_compacted": True} if req.read_compacted else {}
    if req.replicate_subscription_state:
        extra["replicated"] = True
    try:
        return await topic.subscribe(
            consumer,
            req.subscription,
            durable=req.durable,
            initial_earliest=req.initialPosition == pb.CommandSubscribe.Earliest,
            start=start,
            **extra,
        )
    except BrokerError:
        raise
    except Exception as exc:  # storage trouble: retryable for the client
        log.exception("subscribe %s on %s failed", req.subscription, req.topic)
        raise CodedError(ServerError.ServiceNotReady, f"cannot subscribe: {exc}") from None


__all__ = ["attach", "new_consumer", "subscription_target"]
