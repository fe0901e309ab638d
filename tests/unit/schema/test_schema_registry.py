"""The registry's versions over both storages (memory; ledgers on fake bookies with the index
in metadata), policy resolution, and the protocol answers."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import pytest
from support.ledger_fakes import fake_bookies, make_client, meta_server  # noqa: F401

from magnetar.broker.bookkeeper.testing import FakeBookieCluster
from magnetar.broker.config import BrokerConfig
from magnetar.broker.naming import TopicName
from magnetar.broker.schema import protocol as schema_protocol
from magnetar.broker.schema.model import (
    CompatibilityStrategy,
    IncompatibleSchema,
    InvalidSchemaData,
    SchemaData,
    SchemaType,
    version_bytes,
)
from magnetar.broker.schema.registry import SchemaRegistry
from magnetar.broker.schema.storage import (
    LedgerSchemaStorage,
    MemorySchemaStorage,
    SchemaStorage,
    index_path,
)
from magnetar.broker.schema.topics import (
    NO_SCHEMA_PRODUCER,
    TopicSchemas,
    resolve_policy,
    schema_id,
)
from magnetar.client.protocol.proto import pulsar_api_pb2 as pb
from magnetar.zk.memory import MemoryMetadataServer

FULL = CompatibilityStrategy.FULL


def avro(*names: str, default: bool = True) -> SchemaData:
    fields = [{"name": n, "type": "string", **({"default": ""} if default else {})} for n in names]
    return SchemaData(
        SchemaType.AVRO,
        json.dumps({"type": "record", "name": "R", "fields": fields}).encode(),
    )


@pytest.fixture(params=["memory", "ledgers"])
async def storage(
    request: pytest.FixtureRequest,
    meta_server: MemoryMetadataServer,  # noqa: F811
    fake_bookies: FakeBookieCluster,  # noqa: F811
) -> AsyncIterator[SchemaStorage]:
    if request.param == "memory":
        yield MemorySchemaStorage()
        return
    client = make_client(meta_server, fake_bookies, ensemble_size=2, write_quorum=2, ack_quorum=2)
    yield LedgerSchemaStorage(client.store, client)
    await client.close()


async def test_versions_count_from_zero_and_identical_definitions_share_one(
    storage: SchemaStorage,
) -> None:
    reg = SchemaRegistry(storage, now_ms=lambda: 42)
    assert await reg.put_if_absent("t/ns/a", avro("x"), FULL) == 0
    assert await reg.put_if_absent("t/ns/a", avro("x"), FULL) == 0
    assert await reg.put_if_absent("t/ns/a", avro("x", "y"), FULL) == 1
    latest = await reg.get("t/ns/a")
    assert latest is not None and latest.version == 1 and latest.schema.timestamp_ms == 42
    first = await reg.get("t/ns/a", 0)
    assert first is not None and first.schema.data == avro("x").data
    assert await reg.find_version("t/ns/a", avro("x")) == 0
    assert await reg.get("t/ns/other") is None


async def test_incompatible_and_malformed_schemas_store_nothing(storage: SchemaStorage) -> None:
    reg = SchemaRegistry(storage)
    await reg.put_if_absent("t/ns/a", avro("x"), FULL)
    with pytest.raises(IncompatibleSchema):
        await reg.put_if_absent("t/ns/a", avro("x", "y", default=False), FULL)
    with pytest.raises(InvalidSchemaData):
        await reg.put_if_absent("t/ns/a", SchemaData(SchemaType.AVRO, b"{"), FULL)
    assert [v.version for v in await reg.all_versions("t/ns/a")] == [0]


async def test_auto_update_disabled_refuses_new_versions_but_matches_old_ones(
    storage: SchemaStorage,
) -> None:
    reg = SchemaRegistry(storage)
    await reg.put_if_absent("t/ns/a", avro("x"), FULL)
    assert await reg.put_if_absent("t/ns/a", avro("x"), FULL, allow_auto_update=False) == 0
    with pytest.raises(IncompatibleSchema, match="auto updating is disabled"):
        await reg.put_if_absent("t/ns/a", avro("x", "y"), FULL, allow_auto_update=False)


async def test_soft_delete_starts_a_new_history_and_hard_delete_removes_all(
    storage: SchemaStorage,
) -> None:
    reg = SchemaRegistry(storage)
    await reg.put_if_absent("t/ns/a", avro("x"), FULL)
    assert await reg.delete("t/ns/a") == 1
    assert await reg.get("t/ns/a") is None
    assert await reg.delete("t/ns/a") is None  # nothing left to delete
    # after a delete, an unrelated schema is no longer checked against the old one
    other = SchemaData(SchemaType.JSON, avro("z", default=False).data)
    assert await reg.put_if_absent("t/ns/a", other, FULL) == 2
    assert [v.version for v in await reg.live_versions("t/ns/a")] == [2]
    assert await reg.delete_storage("t/ns/a")
    assert await reg.all_versions("t/ns/a") == []
    assert await reg.put_if_absent("t/ns/a", avro("x"), FULL) == 0


async def test_concurrent_puts_get_distinct_versions(storage: SchemaStorage) -> None:
    reg = SchemaRegistry(storage)
    schemas = [avro(*[f"f{j}" for j in range(i + 1)]) for i in range(5)]
    got = await asyncio.gather(
        *(reg.put_if_absent("t/ns/a", s, CompatibilityStrategy.ALWAYS_COMPATIBLE) for s in schemas)
    )
    assert sorted(got) == [0, 1, 2, 3, 4]


async def test_two_registries_on_one_ledger_store_never_reuse_a_version(
    meta_server: MemoryMetadataServer,  # noqa: F811
    fake_bookies: FakeBookieCluster,  # noqa: F811
) -> None:
    """Two brokers: the index's compare-and-set orders them."""
    a = make_client(meta_server, fake_bookies, ensemble_size=2, write_quorum=2, ack_quorum=2)
    b = make_client(meta_server, fake_bookies, ensemble_size=2, write_quorum=2, ack_quorum=2)
    ra = SchemaRegistry(LedgerSchemaStorage(a.store, a))
    rb = SchemaRegistry(LedgerSchemaStorage(b.store, b))
    anything = CompatibilityStrategy.ALWAYS_COMPATIBLE
    got = await asyncio.gather(
        *((ra if i % 2 else rb).put_if_absent("t/ns/a", avro(f"f{i}"), anything) for i in range(6))
    )
    assert sorted(got) == list(range(6))
    stored = await a.store.get(index_path("t/ns/a"))
    assert stored is not None
    assert [e["version"] for e in json.loads(stored.value)["index"]] == list(range(6))
    # a third broker, fresh cache, reads every definition back from the ledgers
    c = make_client(meta_server, fake_bookies)
    versions = await SchemaRegistry(LedgerSchemaStorage(c.store, c)).all_versions("t/ns/a")
    assert [v.schema.data for v in versions] == [
        dict(zip(got, [avro(f"f{i}").data for i in range(6)], strict=True))[v] for v in range(6)
    ]


def test_policy_resolution_topic_over_namespace_over_broker() -> None:
    config = BrokerConfig()
    assert resolve_policy(config, {}, {}).strategy is FULL
    ns = {"schema_compatibility_strategy": "BACKWARD", "is_allow_auto_update_schema": False}
    got = resolve_policy(config, ns, {})
    assert got.strategy is CompatibilityStrategy.BACKWARD and not got.allow_auto_update
    topic = {"schema_compatibility_strategy": "FORWARD_TRANSITIVE"}
    assert resolve_policy(config, ns, topic).strategy is CompatibilityStrategy.FORWARD_TRANSITIVE
    assert resolve_policy(config, {"schema_compatibility_strategy": "UNDEFINED"}, {}).strategy is (
        FULL
    )
    enforced = BrokerConfig(is_schema_validation_enforced=True)
    assert resolve_policy(enforced, {}, {}).validation_enforced
    assert resolve_policy(config, {"schema_validation_enforced": True}, {}).validation_enforced
    with pytest.raises(InvalidSchemaData, match="ALWAYS_INCOMPATIBLE"):
        TopicSchemas(
            SchemaRegistry(MemorySchemaStorage()),
            BrokerConfig(schema_compatibility_strategy="SOMETIMES"),
            lambda t: None,  # type: ignore[arg-type,return-value]
        )


def test_partitions_share_the_schema_id_of_their_topic() -> None:
    base = TopicName.parse("persistent://t/ns/orders")
    assert schema_id(base) == "t/ns/orders"
    assert schema_id(base.partition(3)) == "t/ns/orders"
    assert schema_id(TopicName.parse("non-persistent://t/ns/orders-partition-1")) == "t/ns/orders"
    assert schema_id(TopicName.parse("persistent://t/ns/a-partition-x")) == "t/ns/a-partition-x"


def topic_schemas(policies: dict[str, object] | None = None) -> TopicSchemas:
    async def source(topic: TopicName) -> tuple[dict[str, object], dict[str, object]]:
        return dict(policies or {}), {}

    return TopicSchemas(SchemaRegistry(MemorySchemaStorage()), BrokerConfig(), source)


async def test_producer_and_consumer_rules() -> None:
    ts = topic_schemas({"schema_validation_enforced": True})
    t = TopicName.parse("persistent://t/ns/a")
    assert await ts.for_producer(t, None) is None  # no schema yet: anyone may produce
    assert await ts.for_producer(t.partition(1), avro("x")) == 0
    with pytest.raises(IncompatibleSchema, match=NO_SCHEMA_PRODUCER):
        await ts.for_producer(t, None)
    # consumers: AUTO_CONSUME is never checked; an incompatible reader is refused
    await ts.for_consumer(t, SchemaData(SchemaType.AUTO_CONSUME, b""), idle=False)
    with pytest.raises(IncompatibleSchema):
        await ts.for_consumer(t, avro("x", "y", default=False), idle=False)
    await ts.for_consumer(t, avro("x", "y"), idle=False)
    # an idle topic without a schema takes the consumer's as version 0
    other = TopicName.parse("persistent://t/ns/b")
    await ts.for_consumer(other, avro("q"), idle=True)
    assert (await ts.get(other, None)).version == 0
    # a busy one without a schema cannot check it
    busy = TopicName.parse("persistent://t/ns/c")
    with pytest.raises(IncompatibleSchema, match="does not have schema"):
        await ts.for_consumer(busy, avro("q"), idle=False)


async def test_get_schema_answers_version_bytes_or_its_own_error() -> None:
    ts = topic_schemas()
    t = TopicName.parse("persistent://t/ns/a")
    req = pb.CommandGetSchema(request_id=7, topic=str(t))
    missing = (await schema_protocol.get_schema_response(ts, req)).getSchemaResponse
    assert missing.error_message == "Schema not found" and missing.request_id == 7
    await ts.for_producer(t, avro("x"))
    await ts.for_producer(t, avro("x", "y"))
    got = (await schema_protocol.get_schema_response(ts, req)).getSchemaResponse
    assert got.schema_version == version_bytes(1) == b"\x00" * 7 + b"\x01"
    assert got.schema.type == pb.Schema.Avro and got.schema.name == "t/ns/a"
    req.schema_version = version_bytes(0)
    got = (await schema_protocol.get_schema_response(ts, req)).getSchemaResponse
    assert got.schema.schema_data == avro("x").data
    req.schema_version = b"\x01"  # not 8 bytes
    bad = (await schema_protocol.get_schema_response(ts, req)).getSchemaResponse
    assert bad.HasField("error_code") and "8 expected" in bad.error_message
    bad_topic = pb.CommandGetSchema(request_id=8, topic="persistent://")
    bad = (await schema_protocol.get_schema_response(ts, bad_topic)).getSchemaResponse
    assert bad.error_code == pb.InvalidTopicName


async def test_get_or_create_schema() -> None:
    ts = topic_schemas()
    schema = schema_protocol.to_wire("x", avro("x"))
    req = pb.CommandGetOrCreateSchema(request_id=3, topic="persistent://t/ns/a", schema=schema)
    resp = (await schema_protocol.get_or_create_response(ts, req)).getOrCreateSchemaResponse
    assert resp.schema_version == version_bytes(0) and not resp.HasField("error_code")
    req.schema.schema_data = b"{broken"
    resp = (await schema_protocol.get_or_create_response(ts, req)).getOrCreateSchemaResponse
    assert resp.error_code == pb.IncompatibleSchema and "Invalid AVRO" in resp.error_message
    req.schema.type = pb.Schema.External  # a type the registry does not store
    resp = (await schema_protocol.get_or_create_response(ts, req)).getOrCreateSchemaResponse
    assert "Unknown schema type 22" in resp.error_message


async def test_corrupt_index_entries_and_definitions_are_storage_errors(
    meta_server: MemoryMetadataServer,  # noqa: F811
    fake_bookies: FakeBookieCluster,  # noqa: F811
) -> None:
    from magnetar.broker.schema.model import SchemaStorageError
    from magnetar.broker.schema.storage import decode

    client = make_client(meta_server, fake_bookies, ensemble_size=2, write_quorum=2, ack_quorum=2)
    storage = LedgerSchemaStorage(client.store, client)
    reg = SchemaRegistry(storage)
    await reg.put_if_absent("t/ns/a", avro("x"), FULL)
    stored = await client.store.get(index_path("t/ns/a"))
    assert stored is not None
    index = json.loads(stored.value)
    index["index"][0]["hash"] = "0" * 64  # the entry no longer matches its hash
    await client.store.put(index_path("t/ns/a"), json.dumps(index).encode())
    fresh = SchemaRegistry(LedgerSchemaStorage(client.store, client))  # nothing cached
    with pytest.raises(SchemaStorageError, match="does not match its hash"):
        await fresh.get("t/ns/a")
    await client.store.put(index_path("t/ns/a"), b"{not json")
    with pytest.raises(SchemaStorageError, match="corrupt schema index"):
        await fresh.get("t/ns/a")
    with pytest.raises(SchemaStorageError, match="corrupt stored schema"):
        decode(b'{"type": "NOPE"}')
    await client.close()
