"""The schema registry with the official ``pulsar-client`` on a real ``magnetar standalone``
(schemas in its bookie's ledgers, the index in its embedded metadata store).

Covers: Avro and JSON producers and consumers, ``Message.schema_version()`` (8-byte big-endian
version), evolution under each compatibility strategy (set through the namespace REST
policy), consumers reading messages of two versions (the official AvroSchema fetches each
writer schema with GET_SCHEMA), AUTO_CONSUME on the wire, the admin REST round trips,
malformed definitions (clear errors, the broker keeps serving), partitioned topics sharing
one schema, and topic deletion dropping the schemas.
"""

from __future__ import annotations

import json
import pathlib
import struct
from collections.abc import Iterator
from typing import Any

import pulsar
import pytest
from pulsar.schema import AvroSchema, Integer, JsonSchema, Record, String
from support.admin import http
from support.raw_client import RawClient
from support.standalone import StandaloneProcess
from support.waiting import wait_until

from magnetar.client.protocol.proto import pulsar_api_pb2 as pb

T = pb.BaseCommand
NS = "public/default"


class User(Record):
    name = String()
    age = Integer()


def record(name: str, *fields: dict[str, Any]) -> dict[str, Any]:
    return {"type": "record", "name": name, "fields": list(fields)}


NAME = {"name": "name", "type": "string"}
AGE_DEFAULT = {"name": "age", "type": "int", "default": 0}
AGE = {"name": "age", "type": "int"}
V1 = record("Person", NAME)
V2_COMPATIBLE = record("Person", NAME, AGE_DEFAULT)  # FULL-compatible with V1
V2_BACKWARD_ONLY = record("Person", AGE_DEFAULT)  # drops "name": old readers break
V2_FORWARD_ONLY = record("Person", NAME, AGE)  # no default: new readers break on V1 data


def version(n: int) -> bytes:
    return struct.pack(">q", n)


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProcess]:
    base = tmp_path_factory.mktemp("schema-standalone")
    proc = StandaloneProcess(base / "data", base / "standalone.log")
    proc.start(timeout_s=120)
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture(scope="module")
def client(standalone: StandaloneProcess) -> Iterator[pulsar.Client]:
    c = pulsar.Client(
        standalone.service_url, operation_timeout_seconds=120, log_conf_file_path=None
    )
    try:
        yield c
    finally:
        c.close()


def set_strategy(standalone: StandaloneProcess, ns: str, strategy: str) -> None:
    status, _ = http(
        standalone.web_url,
        "PUT",
        f"/admin/v2/namespaces/{ns}/schemaCompatibilityStrategy",
        strategy,
    )
    assert status == 204
    status, got = http(
        standalone.web_url, "GET", f"/admin/v2/namespaces/{ns}/schemaCompatibilityStrategy"
    )
    assert (status, got) == (200, strategy)


def new_namespace(standalone: StandaloneProcess, name: str) -> str:
    ns = f"public/{name}"
    status, _ = http(standalone.web_url, "PUT", f"/admin/v2/namespaces/{ns}", {})
    assert status == 204
    return ns


def test_avro_producer_and_consumer_see_version_zero(client: pulsar.Client) -> None:
    topic = f"persistent://{NS}/avro-users"
    consumer = client.subscribe(topic, "s", schema=AvroSchema(User))
    producer = client.create_producer(topic, schema=AvroSchema(User))
    producer.send(User(name="ada", age=36))
    msg = consumer.receive(30_000)
    assert msg.value().name == "ada" and msg.value().age == 36
    assert msg.schema_version().encode("latin-1") == version(0)
    consumer.acknowledge(msg)
    # the same schema again is the same version, on a second producer
    again = client.create_producer(topic, schema=AvroSchema(User))
    again.send(User(name="bob", age=1))
    assert consumer.receive(30_000).schema_version().encode("latin-1") == version(0)
    again.close()
    producer.close()
    consumer.close()


def test_json_producer_and_consumer(client: pulsar.Client) -> None:
    topic = f"persistent://{NS}/json-users"
    consumer = client.subscribe(topic, "s", schema=JsonSchema(User))
    producer = client.create_producer(topic, schema=JsonSchema(User))
    producer.send(User(name="cy", age=7))
    msg = consumer.receive(30_000)
    assert (msg.value().name, msg.value().age) == ("cy", 7)
    assert msg.schema_version().encode("latin-1") == version(0)
    # an AVRO consumer of a JSON topic is another schema type: refused
    with pytest.raises(pulsar.IncompatibleSchema):
        client.subscribe(topic, "avro-reader", schema=AvroSchema(User))
    producer.close()
    consumer.close()


@pytest.mark.parametrize(
    ("strategy", "compatible", "incompatible"),
    [
        ("FULL", V2_COMPATIBLE, V2_BACKWARD_ONLY),
        ("BACKWARD", V2_BACKWARD_ONLY, V2_FORWARD_ONLY),
        ("FORWARD", V2_FORWARD_ONLY, V2_BACKWARD_ONLY),
        ("BACKWARD_TRANSITIVE", V2_BACKWARD_ONLY, V2_FORWARD_ONLY),
        ("FORWARD_TRANSITIVE", V2_FORWARD_ONLY, V2_BACKWARD_ONLY),
        # compatible with the latest (V2_COMPATIBLE) both ways, not with V1: FULL would take it
        ("FULL_TRANSITIVE", V2_COMPATIBLE, V2_FORWARD_ONLY),
        ("ALWAYS_COMPATIBLE", record("Other", {"name": "x", "type": "long"}), None),
        ("ALWAYS_INCOMPATIBLE", None, V2_COMPATIBLE),
    ],
)
def test_evolution_under_each_strategy(
    standalone: StandaloneProcess,
    client: pulsar.Client,
    strategy: str,
    compatible: dict[str, Any] | None,
    incompatible: dict[str, Any] | None,
) -> None:
    ns = new_namespace(standalone, f"evolve-{strategy.lower().replace('_', '-')}")
    set_strategy(standalone, ns, strategy)
    topic = f"persistent://{ns}/people"
    first = client.create_producer(topic, schema=AvroSchema(None, schema_definition=V1))
    first.send({"name": "v1"})
    if compatible is not None:
        second = client.create_producer(
            topic, schema=AvroSchema(None, schema_definition=compatible)
        )
        second.send({"name": "v2", "age": 2} if "age" in json.dumps(compatible) else {"x": 1})
        second.close()
        status, got = http(standalone.web_url, "GET", f"/admin/v2/schemas/{ns}/people/schema")
        assert status == 200 and got["version"] == 1
    if incompatible is not None:
        with pytest.raises(pulsar.IncompatibleSchema):
            client.create_producer(topic, schema=AvroSchema(None, schema_definition=incompatible))
    status, got = http(standalone.web_url, "GET", f"/admin/v2/schemas/{ns}/people/schemas")
    assert status == 200
    assert len(got["getSchemaResponses"]) == (2 if compatible is not None else 1)
    first.close()


def test_a_consumer_reads_two_versions_and_knows_which_is_which(
    standalone: StandaloneProcess, client: pulsar.Client
) -> None:
    topic = f"persistent://{NS}/two-versions"
    reader_schema = AvroSchema(None, schema_definition=V2_COMPATIBLE)
    consumer = client.subscribe(topic, "s", schema=reader_schema)  # idle topic: version 0
    old = client.create_producer(topic, schema=AvroSchema(None, schema_definition=V1))
    new = client.create_producer(topic, schema=AvroSchema(None, schema_definition=V2_COMPATIBLE))
    old.send({"name": "old"})
    new.send({"name": "new", "age": 5})
    got = [consumer.receive(30_000) for _ in range(2)]
    # V2 registered first (by the consumer): V1 is version 1
    assert [m.schema_version().encode("latin-1") for m in got] == [version(1), version(0)]
    # the official AvroSchema resolves each message with its writer's schema (GET_SCHEMA)
    assert [m.value() for m in got] == [{"name": "old", "age": 0}, {"name": "new", "age": 5}]
    # AUTO_CONSUME's way: a schema-less consumer fetches each version's definition
    raw = client.subscribe(topic, "raw", initial_position=pulsar.InitialPosition.Earliest)
    for expected in (V1, V2_COMPATIBLE):
        msg = raw.receive(30_000)
        number = struct.unpack(">q", msg.schema_version().encode("latin-1"))[0]
        info = client._client.get_schema_info(topic, number)
        assert json.loads(info.schema()) == expected
    raw.close()
    old.close()
    new.close()
    consumer.close()


def raw_connect(standalone: StandaloneProcess) -> RawClient:
    rc = RawClient(standalone.port)
    rc.connect()
    return rc


def test_auto_consume_subscribe_is_never_checked_and_get_schema_on_the_wire(
    standalone: StandaloneProcess, client: pulsar.Client
) -> None:
    topic = f"persistent://{NS}/auto-consume"
    producer = client.create_producer(topic, schema=AvroSchema(User))
    rc = raw_connect(standalone)
    try:
        auto = pb.Schema(name="auto", schema_data=b"", type=pb.Schema.AutoConsume)
        rc.send(
            T(
                type=T.SUBSCRIBE,
                subscribe=pb.CommandSubscribe(
                    topic=topic,
                    subscription="auto",
                    subType=pb.CommandSubscribe.Shared,
                    consumer_id=1,
                    request_id=1,
                    schema=auto,
                ),
            )
        )
        assert rc.recv().type == T.SUCCESS
        wrong = pb.Schema(
            name="x", schema_data=json.dumps(record("Z", AGE)).encode(), type=pb.Schema.Avro
        )
        rc.send(
            T(
                type=T.SUBSCRIBE,
                subscribe=pb.CommandSubscribe(
                    topic=topic,
                    subscription="typed",
                    subType=pb.CommandSubscribe.Shared,
                    consumer_id=2,
                    request_id=2,
                    schema=wrong,
                ),
            )
        )
        err = rc.recv()
        assert err.type == T.ERROR and err.error.error == pb.IncompatibleSchema
        rc.send(T(type=T.GET_SCHEMA, getSchema=pb.CommandGetSchema(request_id=3, topic=topic)))
        got = rc.recv().getSchemaResponse
        assert got.schema_version == version(0) and got.schema.type == pb.Schema.Avro
        assert json.loads(got.schema.schema_data) == User.schema()
        rc.send(
            T(
                type=T.GET_OR_CREATE_SCHEMA,
                getOrCreateSchema=pb.CommandGetOrCreateSchema(
                    request_id=4, topic=topic, schema=got.schema
                ),
            )
        )
        assert rc.recv().getOrCreateSchemaResponse.schema_version == version(0)
    finally:
        rc.close()
        producer.close()


def test_malformed_definitions_get_a_clear_error_and_the_broker_keeps_serving(
    standalone: StandaloneProcess, client: pulsar.Client
) -> None:
    topic = f"persistent://{NS}/malformed"
    rc = raw_connect(standalone)
    try:
        for i, (kind, data) in enumerate(
            [
                (pb.Schema.Avro, b"{not json"),
                (pb.Schema.Json, b'"int"'),
                (pb.Schema.String, b"unexpected"),
                (pb.Schema.ProtobufNative, b"[]"),
                (pb.Schema.KeyValue, b"\x00"),
            ]
        ):
            rc.send(
                T(
                    type=T.PRODUCER,
                    producer=pb.CommandProducer(
                        topic=topic,
                        producer_id=i,
                        request_id=i,
                        schema=pb.Schema(name="bad", schema_data=data, type=kind),
                    ),
                )
            )
            err = rc.recv()
            assert err.type == T.ERROR and err.error.error == pb.IncompatibleSchema
            assert "schema" in err.error.message.lower()
        rc.ping_pong()  # the connection is still fine
    finally:
        rc.close()
    web = standalone.web_url
    status, body = http(
        web, "POST", f"/admin/v2/schemas/{NS}/malformed/schema", {"type": "AVRO", "schema": "{"}
    )
    assert status == 422 and "Invalid AVRO schema definition" in body["reason"]
    status, body = http(web, "POST", f"/admin/v2/schemas/{NS}/malformed/schema", ["not", "a"])
    assert status == 422 and "PostSchemaPayload" in body["reason"]
    status, body = http(web, "POST", f"/admin/v2/schemas/{NS}/malformed/schema", {"type": "NOPE"})
    assert status == 422 and "Unknown schema type" in body["reason"]
    # nothing was stored, and the broker still serves typed producers
    assert http(web, "GET", f"/admin/v2/schemas/{NS}/malformed/schema")[0] == 404
    producer = client.create_producer(topic, schema=AvroSchema(User))
    producer.send(User(name="ok", age=1))
    producer.close()


def test_admin_rest_round_trip(standalone: StandaloneProcess) -> None:
    web = standalone.web_url
    base = f"/admin/v2/schemas/{NS}/rest-topic"
    payload = {"type": "AVRO", "schema": json.dumps(V1), "properties": {"team": "core"}}
    assert http(web, "GET", base + "/schema") == (404, {"reason": "Schema not found"})
    assert http(web, "POST", base + "/schema", payload) == (200, {"version": {"version": 0}})
    status, got = http(web, "GET", base + "/schema")
    assert status == 200
    assert got["version"] == 0 and got["type"] == "AVRO" and got["timestamp"] > 0
    assert json.loads(got["data"]) == V1 and got["properties"] == {"team": "core"}
    assert http(web, "GET", base + "/schema/0")[1] == got
    assert http(web, "GET", base + "/schema/7")[0] == 404
    assert http(web, "POST", base + "/version", payload) == (200, {"version": 0})
    incompatible = {"type": "AVRO", "schema": json.dumps(V2_FORWARD_ONLY)}
    compatible = {"type": "AVRO", "schema": json.dumps(V2_COMPATIBLE)}
    assert http(web, "POST", base + "/compatibility", incompatible) == (
        200,
        {"isCompatibility": False, "schemaCompatibilityStrategy": "FULL"},
    )
    assert http(web, "POST", base + "/compatibility", compatible)[1]["isCompatibility"] is True
    status, body = http(web, "POST", base + "/schema", incompatible)
    assert status == 409 and "Unable to read schema" in body["reason"]
    assert http(web, "POST", base + "/schema", compatible) == (200, {"version": {"version": 1}})
    versions = http(web, "GET", base + "/schemas")[1]["getSchemaResponses"]
    assert [v["version"] for v in versions] == [0, 1]
    assert http(web, "DELETE", base + "/schema") == (200, {"version": 2})
    assert http(web, "GET", base + "/schema")[0] == 404
    assert http(web, "GET", base + "/schemas")[1] == {"getSchemaResponses": []}
    # after a delete any schema may start again (nothing to be compatible with)
    other = {"type": "JSON", "schema": json.dumps(record("Q", AGE))}
    assert http(web, "POST", base + "/schema", other) == (200, {"version": {"version": 3}})
    assert http(web, "DELETE", base + "/schema?force=true") == (200, {"version": 3})
    assert http(web, "GET", base + "/schema/0")[0] == 404
    # namespace policies: Pulsar's paths and bodies
    ns = f"/admin/v2/namespaces/{NS}"
    assert http(web, "GET", ns + "/schemaValidationEnforced") == (200, False)
    assert http(web, "POST", ns + "/isAllowAutoUpdateSchema", False)[0] == 204
    assert http(web, "GET", ns + "/isAllowAutoUpdateSchema") == (200, False)
    assert http(web, "POST", ns + "/isAllowAutoUpdateSchema", True)[0] == 204
    status, body = http(web, "PUT", ns + "/schemaCompatibilityStrategy", "SOMETIMES")
    assert status in (400, 412) and "schemaCompatibilityStrategy" in body["reason"]


def test_auto_update_off_and_validation_enforced(
    standalone: StandaloneProcess, client: pulsar.Client
) -> None:
    web = standalone.web_url
    ns = new_namespace(standalone, "enforced")
    topic = f"persistent://{ns}/typed"
    producer = client.create_producer(topic, schema=AvroSchema(None, schema_definition=V1))
    assert http(web, "POST", f"/admin/v2/namespaces/{ns}/isAllowAutoUpdateSchema", False)[0] == 204
    with pytest.raises(pulsar.IncompatibleSchema):
        client.create_producer(topic, schema=AvroSchema(None, schema_definition=V2_COMPATIBLE))
    # a producer without a schema: allowed until validation is enforced
    client.create_producer(topic).close()
    assert http(web, "POST", f"/admin/v2/namespaces/{ns}/schemaValidationEnforced", True)[0] == 204
    with pytest.raises(pulsar.IncompatibleSchema):
        client.create_producer(topic)
    producer.close()


def test_partitions_share_one_schema_and_deleting_the_topic_deletes_it(
    standalone: StandaloneProcess, client: pulsar.Client
) -> None:
    web = standalone.web_url
    assert http(web, "PUT", f"/admin/v2/persistent/{NS}/parts/partitions", 3)[0] == 204
    topic = f"persistent://{NS}/parts"
    producer = client.create_producer(topic, schema=AvroSchema(User))
    consumer = client.subscribe(topic, "s", schema=AvroSchema(User))
    for i in range(6):
        producer.send(User(name=f"u{i}", age=i), partition_key=f"k{i}")
    got = [consumer.receive(30_000) for _ in range(6)]
    assert {m.schema_version().encode("latin-1") for m in got} == {version(0)}
    assert http(web, "GET", f"/admin/v2/schemas/{NS}/parts/schema")[1]["version"] == 0
    producer.close()
    consumer.close()
    assert http(web, "DELETE", f"/admin/v2/persistent/{NS}/parts/partitions?force=true")[0] == 204
    assert http(web, "GET", f"/admin/v2/schemas/{NS}/parts/schema")[0] == 404
    # a non-partitioned topic too
    single = client.create_producer(f"persistent://{NS}/single", schema=AvroSchema(User))
    single.close()
    assert http(web, "GET", f"/admin/v2/schemas/{NS}/single/schema")[0] == 200
    assert http(web, "DELETE", f"/admin/v2/persistent/{NS}/single?force=true")[0] == 204
    wait_until(
        lambda: http(web, "GET", f"/admin/v2/schemas/{NS}/single/schema")[0] == 404,
        30,
        "schema of the deleted topic gone",
    )


def test_schemas_survive_a_restart_and_an_unload(tmp_path: pathlib.Path) -> None:
    proc = StandaloneProcess(tmp_path / "data", tmp_path / "restart.log")
    proc.start(timeout_s=120)
    try:
        topic = f"persistent://{NS}/durable"
        c = pulsar.Client(proc.service_url, operation_timeout_seconds=120, log_conf_file_path=None)
        p = c.create_producer(topic, schema=AvroSchema(None, schema_definition=V1))
        p.send({"name": "before"})
        p2 = c.create_producer(topic, schema=AvroSchema(None, schema_definition=V2_COMPATIBLE))
        p2.send({"name": "before", "age": 1})
        assert http(proc.web_url, "PUT", f"/admin/v2/persistent/{NS}/durable/unload")[0] == 204
        # after the unload the producers reconnect with the same versions
        p2.send({"name": "after-unload", "age": 2})
        c.close()
        proc.stop()
        proc.start(timeout_s=120)
        status, got = http(proc.web_url, "GET", f"/admin/v2/schemas/{NS}/durable/schema")
        assert status == 200 and got["version"] == 1 and json.loads(got["data"]) == V2_COMPATIBLE
        c = pulsar.Client(proc.service_url, operation_timeout_seconds=120, log_conf_file_path=None)
        with pytest.raises(pulsar.IncompatibleSchema):
            c.create_producer(topic, schema=AvroSchema(None, schema_definition=V2_BACKWARD_ONLY))
        consumer = c.subscribe(
            topic,
            "after-restart",
            schema=AvroSchema(None, schema_definition=V2_COMPATIBLE),
            initial_position=pulsar.InitialPosition.Earliest,
        )
        got_versions = [
            consumer.receive(30_000).schema_version().encode("latin-1") for _ in range(3)
        ]
        assert got_versions == [version(0), version(1), version(1)]
        c.close()
    finally:
        proc.stop()


def test_protobuf_native_schemas(client: pulsar.Client) -> None:
    from pulsar.schema import ProtobufNativeSchema

    topic = f"persistent://{NS}/protobuf-native"
    consumer = client.subscribe(topic, "s", schema=ProtobufNativeSchema(pb.KeyValue))
    producer = client.create_producer(topic, schema=ProtobufNativeSchema(pb.KeyValue))
    producer.send(pb.KeyValue(key="k", value="v"))
    msg = consumer.receive(30_000)
    assert (msg.value().key, msg.value().value) == ("k", "v")
    assert msg.schema_version().encode("latin-1") == version(0)
    with pytest.raises(pulsar.IncompatibleSchema):  # another root message
        client.create_producer(topic, schema=ProtobufNativeSchema(pb.Schema))
    producer.close()
    consumer.close()


def test_key_value_schemas_use_pulsars_json_form_over_rest(standalone: StandaloneProcess) -> None:
    """A KEY_VALUE schema is posted and shown as ``{"key": ..., "value": ...}`` ("" for a
    primitive half) and stored in the binary layout producers send: a producer declaring the
    same schema on the wire gets the version the REST call created."""
    web = standalone.web_url
    base = f"/admin/v2/schemas/{NS}/kv-rest"
    props = {"key.schema.type": "STRING", "value.schema.type": "AVRO", "kv.encoding.type": "INLINE"}
    payload = {
        "type": "KEY_VALUE",
        "schema": json.dumps({"key": "", "value": V1}),
        "properties": props,
    }
    assert http(web, "POST", base + "/schema", payload) == (200, {"version": {"version": 0}})
    status, got = http(web, "GET", base + "/schema")
    assert status == 200 and got["type"] == "KEY_VALUE" and got["properties"] == props
    assert json.loads(got["data"]) == {"key": "", "value": V1}
    bad = {"type": "KEY_VALUE", "schema": "not json", "properties": props}
    status, body = http(web, "POST", f"/admin/v2/schemas/{NS}/kv-bad/schema", bad)
    assert status == 422 and '{"key": ..., "value": ...}' in body["reason"]

    value = json.dumps(V1).encode()
    binary = struct.pack(">i", 0) + struct.pack(">i", len(value)) + value
    rc = raw_connect(standalone)
    try:
        rc.send(
            T(
                type=T.PRODUCER,
                producer=pb.CommandProducer(
                    topic=f"persistent://{NS}/kv-rest",
                    producer_id=1,
                    request_id=1,
                    schema=pb.Schema(
                        name="kv",
                        schema_data=binary,
                        type=pb.Schema.KeyValue,
                        properties=[pb.KeyValue(key=k, value=v) for k, v in sorted(props.items())],
                    ),
                ),
            )
        )
        reply = rc.recv()
        assert reply.type == T.PRODUCER_SUCCESS, reply
        assert reply.producer_success.schema_version == version(0)
    finally:
        rc.close()
