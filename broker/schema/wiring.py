"""How a broker gets its schema registry: storage chosen from the topic storage, policies read
through ``Resources``.

Owns: ``topic_schemas_for`` (the ``TopicSchemas`` a ``BrokerService`` holds). Schemas live
in the ledgers when topics do (``LedgerSchemaStorage``), in memory otherwise.
Must not know: frames, HTTP.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from magnetar.broker.config import BrokerConfig
from magnetar.broker.naming import TopicName
from magnetar.broker.schema.registry import SchemaRegistry
from magnetar.broker.schema.storage import storage_for
from magnetar.broker.schema.topics import TopicSchemas
from magnetar.zk.store import MetadataStore

if TYPE_CHECKING:
    from magnetar.broker.namespace.resources import Resources


def topic_schemas_for(
    config: BrokerConfig, store: MetadataStore, topic_storage: object, resources: Resources
) -> TopicSchemas:
    from magnetar.broker.namespace.resources import ResourceNotFound

    async def policies(topic: TopicName) -> tuple[dict[str, Any], dict[str, Any]]:
        try:
            ns = await resources.get_policies(topic.tenant, topic.namespace)
        except ResourceNotFound:
            ns = {}
        base = topic.partitioned_base
        own = await resources.get_topic_policies(
            base.tenant, base.namespace, base.domain, base.local
        )
        return ns, own

    registry = SchemaRegistry(storage_for(store, topic_storage))
    return TopicSchemas(registry, config, policies)


__all__ = ["topic_schemas_for"]
