"""Compatibility strategies decided by Avro schema resolution, and definition validation."""

from __future__ import annotations

import json
import struct

import pytest

from magnetar.broker.schema.compatibility import check, check_reader
from magnetar.broker.schema.model import (
    CompatibilityStrategy as S,
)
from magnetar.broker.schema.model import (
    IncompatibleSchema,
    InvalidSchemaData,
    SchemaData,
    SchemaType,
)
from magnetar.broker.schema.validation import validate


def avro(*fields: dict[str, object], name: str = "User") -> SchemaData:
    doc = {"type": "record", "name": name, "fields": list(fields)}
    return SchemaData(SchemaType.AVRO, json.dumps(doc).encode())


NAME = {"name": "name", "type": "string"}
AGE = {"name": "age", "type": "int"}
AGE_DEFAULT = {"name": "age", "type": "int", "default": 0}
EMAIL = {"name": "email", "type": "string"}

V1 = avro(NAME)
ADD_WITH_DEFAULT = avro(NAME, AGE_DEFAULT)  # BACKWARD and FORWARD compatible with V1
ADD_NO_DEFAULT = avro(NAME, AGE)  # FORWARD only: new readers cannot fill "age" from V1 data
DROP_NAME = avro(AGE_DEFAULT)  # BACKWARD only: V1 readers need "name" (no default)


@pytest.mark.parametrize(
    ("strategy", "new", "ok"),
    [
        (S.BACKWARD, ADD_WITH_DEFAULT, True),
        (S.BACKWARD, ADD_NO_DEFAULT, False),
        (S.BACKWARD, DROP_NAME, True),
        (S.FORWARD, ADD_NO_DEFAULT, True),
        (S.FORWARD, DROP_NAME, False),
        (S.FULL, ADD_WITH_DEFAULT, True),
        (S.FULL, ADD_NO_DEFAULT, False),
        (S.FULL, DROP_NAME, False),
        (S.ALWAYS_COMPATIBLE, avro(EMAIL, name="Other"), True),
        (S.ALWAYS_INCOMPATIBLE, ADD_WITH_DEFAULT, False),
        (S.ALWAYS_INCOMPATIBLE, V1, True),  # an identical definition is no change
    ],
)
def test_strategy_against_the_latest(strategy: S, new: SchemaData, ok: bool) -> None:
    if ok:
        check([V1], new, strategy)
    else:
        with pytest.raises(IncompatibleSchema):
            check([V1], new, strategy)


def test_transitive_strategies_check_every_version_not_only_the_latest() -> None:
    # v0 has "email" without a default; v1 dropped it (BACKWARD ok); v2 adds it back without
    # a default: it reads v1 data? no ("email" missing there); so use a FORWARD chain instead.
    v0 = avro(NAME, EMAIL)
    v1 = avro(NAME)  # readers of v1 ignore email: FORWARD from v0 is fine
    v2 = avro(NAME, AGE)  # v1 can read v2 data (ignores age); v0 cannot ("email" missing)
    check([v0, v1], v2, S.FORWARD)
    with pytest.raises(IncompatibleSchema):
        check([v0, v1], v2, S.FORWARD_TRANSITIVE)


def test_incompatible_message_names_the_resolution_failure() -> None:
    with pytest.raises(IncompatibleSchema) as err:
        check([V1], ADD_NO_DEFAULT, S.BACKWARD)
    assert "reader_field_missing_default_value" in err.value.message
    assert err.value.code.name == "IncompatibleSchema"


def test_a_type_change_is_refused_except_always_compatible() -> None:
    json_v1 = SchemaData(SchemaType.JSON, V1.data)
    with pytest.raises(IncompatibleSchema, match="exists schema type AVRO, new schema type JSON"):
        check([V1], json_v1, S.FULL)
    string = SchemaData(SchemaType.STRING, b"")
    with pytest.raises(IncompatibleSchema):
        check([string], SchemaData(SchemaType.INT32, b""), S.FULL)
    check([string], SchemaData(SchemaType.INT32, b""), S.ALWAYS_COMPATIBLE)
    check([string], string, S.ALWAYS_INCOMPATIBLE)


def kv(key: SchemaData, value: SchemaData) -> SchemaData:
    data = struct.pack(">i", len(key.data)) + key.data + struct.pack(">i", len(value.data))
    data += value.data
    props = (("key.schema.type", key.type.name), ("value.schema.type", value.type.name))
    return SchemaData(SchemaType.KEY_VALUE, data, props)


def test_key_value_halves_are_checked_separately() -> None:
    string = SchemaData(SchemaType.STRING, b"")
    old = kv(string, V1)
    check([old], kv(string, ADD_WITH_DEFAULT), S.FULL)
    with pytest.raises(IncompatibleSchema):
        check([old], kv(string, ADD_NO_DEFAULT), S.FULL)


def test_reader_rules() -> None:
    # an identical stored definition always reads; otherwise BACKWARD against the writers
    check_reader([V1, ADD_WITH_DEFAULT], V1, S.ALWAYS_INCOMPATIBLE)
    check_reader([V1], ADD_WITH_DEFAULT, S.FULL)
    with pytest.raises(IncompatibleSchema):
        check_reader([V1], ADD_NO_DEFAULT, S.FORWARD)
    with pytest.raises(IncompatibleSchema, match="subscribe"):
        check_reader([], V1, S.FULL)


@pytest.mark.parametrize(
    ("schema", "words"),
    [
        (SchemaData(SchemaType.AVRO, b"{not json"), "Invalid AVRO schema definition"),
        (SchemaData(SchemaType.AVRO, b'"int"'), "a record is expected"),
        (SchemaData(SchemaType.JSON, b'{"type": "record"}'), "Invalid JSON schema definition"),
        (SchemaData(SchemaType.AVRO, b"\xff\xfe"), "not UTF-8"),
        (SchemaData(SchemaType.STRING, b"abc"), "Invalid schema definition data for string"),
        (SchemaData(SchemaType.INT64, b"null"), "length of schema data should be zero"),
        (SchemaData(SchemaType.PROTOBUF_NATIVE, b"{}"), "fileDescriptorSet"),
        (
            SchemaData(
                SchemaType.PROTOBUF_NATIVE,
                b'{"fileDescriptorSet": "!!", "rootMessageTypeName": "X"}',
            ),
            "does not parse",
        ),
        (SchemaData(SchemaType.KEY_VALUE, b"\x00\x00"), "truncated"),
        (SchemaData(SchemaType.AUTO_CONSUME, b""), "AUTO_CONSUME"),
        (
            SchemaData(SchemaType.AVRO, b"[" * 5000 + b"]" * 5000),
            "Invalid AVRO schema definition",
        ),
    ],
)
def test_malformed_definitions_are_refused_with_a_clear_message(
    schema: SchemaData, words: str
) -> None:
    with pytest.raises(InvalidSchemaData) as err:
        validate(schema)
    assert words in err.value.message


def test_valid_definitions_pass() -> None:
    validate(V1)
    validate(SchemaData(SchemaType.STRING, b""))
    validate(SchemaData(SchemaType.STRING, b"null"))  # what the official Python client sends
    validate(kv(SchemaData(SchemaType.STRING, b""), V1))


async def test_schema_rest_paths_need_lookup_to_read_and_tenant_admin_to_change() -> None:
    from magnetar.broker.config import BrokerConfig
    from magnetar.broker.namespace.resources import Resources, TenantInfo
    from magnetar.broker.security.authorization import AuthorizationService
    from magnetar.zk.memory import MemoryMetadataServer

    resources = Resources(MemoryMetadataServer().connect(), "standalone")
    await resources.create_tenant("acme", TenantInfo(["boss"], ["standalone"]))
    await resources.create_namespace("acme", "ns")
    authz = AuthorizationService(
        BrokerConfig(authorization_enabled=True, superuser_roles="root"), resources
    )
    path = "/admin/v2/schemas/acme/ns/t/schema"
    assert await authz.http_denial("GET", path, "app") is not None
    await authz.grant_namespace("acme", "ns", "app", ["consume"])
    assert await authz.http_denial("GET", path, "app") is None
    assert await authz.http_denial("POST", path, "app") is not None
    assert await authz.http_denial("POST", path, "boss") is None
    assert await authz.http_denial("DELETE", path, "root") is None


def protobuf_native(message: type) -> SchemaData:
    """The definition the official client's ProtobufNativeSchema sends for ``message``."""
    import base64

    from google.protobuf import descriptor_pb2

    files = descriptor_pb2.FileDescriptorSet()
    message.DESCRIPTOR.file.CopyToProto(files.file.add())  # type: ignore[attr-defined]
    doc = {
        "fileDescriptorSet": base64.b64encode(files.SerializeToString()).decode(),
        "rootMessageTypeName": message.DESCRIPTOR.full_name,  # type: ignore[attr-defined]
        "rootFileDescriptorName": message.DESCRIPTOR.file.name,  # type: ignore[attr-defined]
    }
    return SchemaData(SchemaType.PROTOBUF_NATIVE, json.dumps(doc).encode())


def test_protobuf_native_keeps_its_root_message() -> None:
    from magnetar.client.protocol.proto import pulsar_api_pb2 as pb

    key_value, schema = protobuf_native(pb.KeyValue), protobuf_native(pb.Schema)
    validate(key_value)
    nested = json.loads(key_value.data)
    nested["rootMessageTypeName"] = "pulsar.proto.Schema.Nope"
    with pytest.raises(InvalidSchemaData, match="no message"):
        validate(SchemaData(SchemaType.PROTOBUF_NATIVE, json.dumps(nested).encode()))
    same_root = json.loads(key_value.data)
    same_root["rootFileDescriptorName"] = "renamed.proto"
    check(
        [key_value], SchemaData(SchemaType.PROTOBUF_NATIVE, json.dumps(same_root).encode()), S.FULL
    )
    with pytest.raises(IncompatibleSchema, match="root message"):
        check([key_value], schema, S.BACKWARD)


def test_a_renamed_record_resolves_by_its_fields_as_pulsar() -> None:
    """Pulsar's Avro validator (``SchemaValidatorBuilder`` -> ``ResolvingGrammarGenerator``)
    does not compare record names: the official client's ``User1`` -> ``User2``."""
    name = {"name": "name", "type": ["null", "string"]}
    user1 = avro(name, {"name": "age", "type": ["null", "int"]}, name="User1")
    user2 = avro({"name": "age", "type": "int"}, name, name="User2")
    check([user1], user2, S.FORWARD)
    with pytest.raises(IncompatibleSchema):  # the fields still decide
        check([user1], avro(name, {"name": "age", "type": "boolean"}, name="User3"), S.FORWARD)


def test_an_enum_still_needs_its_name() -> None:
    def color(enum_name: str) -> SchemaData:
        kind = {"type": "enum", "name": enum_name, "symbols": ["RED"]}
        return avro({"name": "c", "type": kind})

    check([color("Color")], color("Color"), S.FULL)
    with pytest.raises(IncompatibleSchema):
        check([color("Color")], color("Colour"), S.FULL)
