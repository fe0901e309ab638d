"""Schemas as topics see them: policy resolution and the producer / consumer rules.

Owns: ``resolve_policy`` (topic policies over namespace policies over the broker settings:
``schemaCompatibilityStrategy`` / ``schema_compatibility_strategy`` (UNDEFINED falls
through), ``isAllowAutoUpdateSchemaEnabled`` / ``is_allow_auto_update_schema``,
``isSchemaValidationEnforced`` OR ``schema_validation_enforced``), and ``TopicSchemas``, what
the protocol and REST layers call:

- ``for_producer``: a producer's schema is registered or matched (Pulsar's ``addSchema``);
  a producer without one is refused on a topic that has a schema only when validation is
  enforced (``tryAddSchema``);
- ``for_consumer``: AUTO_CONSUME and schema-less consumers are never checked; otherwise an
  idle topic (no schema, no producers, no consumers, no data) takes the consumer's schema as
  its first version, and a busy one checks it (``addSchemaIfIdleOrCheckCompatible``);
- lookups by topic (``get``, ``get_or_create``) and ``delete_for_topic`` (deleting a
  non-partitioned topic, or a whole partitioned topic, deletes its schemas; deleting one
  partition does not, as Pulsar).

All partitions of a partitioned topic, persistent or not, share one schema id.
Must not know: frames, HTTP, how topics store messages.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from magnetar.broker.config import BrokerConfig
from magnetar.broker.naming import PARTITION_SUFFIX, TopicName
from magnetar.broker.schema.model import (
    CompatibilityStrategy,
    IncompatibleSchema,
    SchemaData,
    SchemaNotFound,
    SchemaPolicy,
    SchemaType,
    VersionedSchema,
    schema_id_of,
)
from magnetar.broker.schema.registry import SchemaRegistry
from magnetar.broker.topics.contract import Topic

PolicySource = Callable[[TopicName], Awaitable[tuple[dict[str, Any], dict[str, Any]]]]
"""(namespace policies, topic policies) of a topic."""

NS_STRATEGY = "schema_compatibility_strategy"
NS_AUTO_UPDATE = "is_allow_auto_update_schema"
NS_VALIDATION = "schema_validation_enforced"

NO_SCHEMA_PRODUCER = (
    "Producers cannot connect or send message without a schema to topics with a schema"
)


def broker_strategy(config: BrokerConfig) -> CompatibilityStrategy:
    strategy = CompatibilityStrategy.parse(config.schema_compatibility_strategy)
    if strategy is CompatibilityStrategy.UNDEFINED:
        return CompatibilityStrategy.FULL
    return strategy


def resolve_policy(config: BrokerConfig, ns: dict[str, Any], topic: dict[str, Any]) -> SchemaPolicy:
    strategy = broker_strategy(config)
    for level in (ns, topic):
        raw = level.get(NS_STRATEGY)
        if isinstance(raw, str) and raw in CompatibilityStrategy.__members__:
            chosen = CompatibilityStrategy[raw]
            if chosen is not CompatibilityStrategy.UNDEFINED:
                strategy = chosen
    auto_update = config.is_allow_auto_update_schema_enabled
    enforced_level = False
    for level in (ns, topic):
        if isinstance(level.get(NS_AUTO_UPDATE), bool):
            auto_update = level[NS_AUTO_UPDATE]
        if isinstance(level.get(NS_VALIDATION), bool):
            enforced_level = level[NS_VALIDATION]
    return SchemaPolicy(
        strategy=strategy,
        allow_auto_update=auto_update,
        validation_enforced=config.is_schema_validation_enforced or enforced_level,
    )


def schema_id(topic: TopicName) -> str:
    return schema_id_of(topic.tenant, topic.namespace, topic.local, PARTITION_SUFFIX)


def topic_is_idle(topic: Topic) -> bool:
    """No producers, no consumers (other than AUTO_CONSUME ones), no stored data."""
    return topic.is_idle()


class TopicSchemas:
    def __init__(
        self, registry: SchemaRegistry, config: BrokerConfig, policies: PolicySource
    ) -> None:
        self.registry = registry
        self.config = config
        self._policies = policies
        broker_strategy(config)  # a bad setting fails at start, with its name

    def __repr__(self) -> str:
        return f"<TopicSchemas {self.registry!r}>"

    async def policy(self, topic: TopicName) -> SchemaPolicy:
        ns, own = await self._policies(topic)
        return resolve_policy(self.config, ns, own)

    async def for_producer(self, topic: TopicName, schema: SchemaData | None) -> int | None:
        """The version the producer's messages carry (None: no schema)."""
        sid = schema_id(topic)
        policy = await self.policy(topic)
        if schema is None:
            if policy.validation_enforced and await self.registry.get(sid) is not None:
                raise IncompatibleSchema(NO_SCHEMA_PRODUCER)
            return None
        return await self.registry.put_if_absent(
            sid, schema, policy.strategy, allow_auto_update=policy.allow_auto_update
        )

    async def for_consumer(self, topic: TopicName, schema: SchemaData | None, idle: bool) -> None:
        if schema is None or schema.type is SchemaType.AUTO_CONSUME:
            return
        sid = schema_id(topic)
        policy = await self.policy(topic)
        if idle and await self.registry.get(sid) is None:
            await self.registry.put_if_absent(
                sid, schema, policy.strategy, allow_auto_update=policy.allow_auto_update
            )
            return
        await self.registry.check_reader(sid, schema, policy.strategy)

    async def get(self, topic: TopicName, version: int | None) -> VersionedSchema:
        found = await self.registry.get(schema_id(topic), version)
        if found is None or found.schema.deleted:
            raise SchemaNotFound("Schema not found")
        return found

    async def get_or_create(self, topic: TopicName, schema: SchemaData) -> int:
        got = await self.for_producer(topic, schema)
        assert got is not None
        return got

    async def delete_for_topic(self, topic: TopicName) -> bool:
        """Drop the schemas of a deleted topic (not when ``topic`` is one partition)."""
        if topic.partition_index >= 0:
            return False
        return await self.registry.delete_storage(schema_id(topic))


__all__ = [
    "NO_SCHEMA_PRODUCER",
    "TopicSchemas",
    "resolve_policy",
    "schema_id",
    "topic_is_idle",
]
