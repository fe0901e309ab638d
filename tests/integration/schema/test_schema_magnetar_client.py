"""``magnetar.client.schema`` against the broker's registry and the official client: the same
record class describes the same definition (one schema version for both clients), values
round-trip both ways in Avro and JSON, and an incompatible schema is refused with
``IncompatibleSchema``. Our side uses the sync facade."""

from __future__ import annotations

import enum
import json
import struct
import uuid
from typing import Any

import pulsar
import pulsar.schema as official_schema
import pytest
from support.broker import InProcessBroker

from magnetar.client import IncompatibleSchema, InitialPosition
from magnetar.client.schema import (
    Array,
    AvroSchema,
    CustomEnum,
    Double,
    Integer,
    JsonSchema,
    Map,
    Record,
    String,
    StringSchema,
)
from magnetar.client.sync import Client


class User(Record):
    name = String()
    age = Integer()
    tags = Array(String())
    scores = Map(Double())


class OfficialUser(official_schema.Record):
    _sorted_fields = False
    name = official_schema.String()
    age = official_schema.Integer()
    tags = official_schema.Array(official_schema.String())
    scores = official_schema.Map(official_schema.Double())


OfficialUser.__name__ = "User"  # the record name is part of the definition


class Color(enum.Enum):
    red = 1
    green = 2
    blue = 3


class Paint(Record):
    name = String()
    color = Color  # an Enum class as a field
    shade = CustomEnum(Color, required=True)


class OfficialPaint(official_schema.Record):
    _sorted_fields = False
    name = official_schema.String()
    color = Color
    shade = official_schema.CustomEnum(Color, required=True)


OfficialPaint.__name__ = "Paint"


def _topic(prefix: str) -> str:
    return f"persistent://public/default/{prefix}-{uuid.uuid4().hex[:8]}"


def test_record_definitions_match_the_official_clients() -> None:
    assert User.schema() == OfficialUser.schema()
    assert AvroSchema(User).definition() == json.dumps(OfficialUser.schema(), indent=True).encode()


def _cross(
    ours: Client,
    official: pulsar.Client,
    kind: str,
    records: tuple[type[Record], type[official_schema.Record]],
    values: tuple[Record, official_schema.Record],
) -> tuple[pulsar.Message, list[Any]]:
    """On a fresh topic with ``kind`` schemas of the two record classes, our producer sends
    ``values[0]``, then the official one ``values[1]``: what the official consumer got
    first, and both messages our consumer got, in order."""
    topic = _topic(f"{kind}-{records[0].__name__.lower()}")
    avro = kind == "avro"
    mine = AvroSchema(records[0]) if avro else JsonSchema(records[0])
    theirs = (
        official_schema.AvroSchema(records[1]) if avro else official_schema.JsonSchema(records[1])
    )
    their_consumer = official.subscribe(topic, "official", schema=theirs)
    our_consumer = ours.subscribe(
        topic, "ours", schema=mine, initial_position=InitialPosition.Earliest
    )
    ours.create_producer(topic, schema=mine).send(values[0])
    their_producer = official.create_producer(topic, schema=theirs)
    their_producer.send(values[1])
    got = their_consumer.receive(10_000)
    mine_got = [our_consumer.receive(10_000) for _ in range(2)]
    their_producer.close()
    their_consumer.close()
    return got, mine_got


@pytest.mark.parametrize("kind", ["avro", "json"])
def test_values_cross_between_the_clients_under_one_version(
    ours: Client, official: pulsar.Client, kind: str
) -> None:
    got, (first, second) = _cross(
        ours,
        official,
        kind,
        (User, OfficialUser),
        (
            User(name="ada", age=36, tags=["x"], scores={"a": 1.5}),
            OfficialUser(name="bob", age=7, tags=[], scores={}),
        ),
    )
    assert (got.value().name, got.value().age, got.value().tags) == ("ada", 36, ["x"])
    assert got.schema_version().encode("latin-1") == struct.pack(">q", 0)
    assert first.value() == User(name="ada", age=36, tags=["x"], scores={"a": 1.5})
    assert second.value() == User(name="bob", age=7, tags=[], scores={})
    assert second.schema_version() == struct.pack(">q", 0)  # the same version for both


@pytest.mark.parametrize("kind", ["avro", "json"])
def test_enum_fields_match_and_cross_between_the_clients(
    ours: Client, official: pulsar.Client, kind: str
) -> None:
    """Enum fields (an ``enum.Enum`` class, or ``CustomEnum``): the same definition as the
    official client's (one schema version), values given as members, names or values, and
    decoded back to members on both sides."""
    assert Paint.schema() == OfficialPaint.schema()
    assert Paint(name="x", color="blue", shade=2) == Paint(
        name="x", color=Color.blue, shade=Color.green
    )
    with pytest.raises(TypeError, match="not one of red, green, blue"):
        Paint(name="x", shade="purple")
    got, (first, second) = _cross(
        ours,
        official,
        kind,
        (Paint, OfficialPaint),
        (
            Paint(name="sky", color=Color.blue, shade="red"),
            OfficialPaint(name="leaf", color=Color.green, shade=Color.green),
        ),
    )
    value = got.value()
    assert (value.name, value.color, value.shade) == ("sky", Color.blue, Color.red)
    assert first.value() == Paint(name="sky", color=Color.blue, shade=Color.red)
    assert second.value() == Paint(name="leaf", color=Color.green, shade=Color.green)
    assert second.schema_version() == struct.pack(">q", 0)  # one version for both clients


def test_definition_dicts_and_an_incompatible_schema(ours: Client) -> None:
    topic = _topic("dicts")
    v1 = {"type": "record", "name": "P", "fields": [{"name": "name", "type": "string"}]}
    breaking = {"type": "record", "name": "P", "fields": [{"name": "n", "type": "int"}]}
    producer = ours.create_producer(topic, schema=AvroSchema(None, schema_definition=v1))
    consumer = ours.subscribe(
        topic,
        "s",
        schema=AvroSchema(None, schema_definition=v1),
        initial_position=InitialPosition.Earliest,
    )
    producer.send({"name": "plain"})
    assert consumer.receive(10_000).value() == {"name": "plain"}
    with pytest.raises(IncompatibleSchema):
        ours.create_producer(topic, schema=AvroSchema(None, schema_definition=breaking))
    with pytest.raises(TypeError):
        producer.send(b"raw bytes are not a record")


def test_string_schema(ours: Client, official: pulsar.Client) -> None:
    topic = _topic("strings")
    theirs = official.subscribe(topic, "s", schema=official_schema.StringSchema())
    producer = ours.create_producer(topic, schema=StringSchema())
    producer.send("héllo")
    assert theirs.receive(10_000).value() == "héllo"
    theirs.close()


V1 = {"type": "record", "name": "P", "fields": [{"name": "name", "type": "string"}]}
V2 = {
    "type": "record",
    "name": "P",
    "fields": [{"name": "name", "type": "string"}, {"name": "n", "type": "int", "default": 0}],
}


@pytest.mark.parametrize("lookup", ["binary", "http"])
def test_readers_decode_every_version_with_its_writer_schema(
    interop_broker: InProcessBroker, official: pulsar.Client, lookup: str
) -> None:
    """AvroSchema resolves old data to the reader's schema; AutoConsumeSchema reads whatever
    each version wrote. Writer schemas come from GET_SCHEMA, or from the schema REST path
    when the client's service URL is HTTP."""
    from support.admin import Admin

    from magnetar.client.schema import AutoConsumeSchema

    admin = Admin(interop_broker) if lookup == "http" else None
    c = Client(
        admin.url if admin is not None else interop_broker.service_url, operation_timeout_seconds=60
    )
    try:
        topic = _topic(f"writers-{lookup}")
        old = official.create_producer(
            topic, schema=official_schema.AvroSchema(None, schema_definition=V1)
        )
        new = official.create_producer(
            topic, schema=official_schema.AvroSchema(None, schema_definition=V2)
        )
        old.send({"name": "old"})
        new.send({"name": "new", "n": 5})
        early = InitialPosition.Earliest
        typed = c.subscribe(topic, "typed", schema=AvroSchema(None, V2), initial_position=early)
        assert [typed.receive(10_000).value() for _ in range(2)] == [
            {"name": "old", "n": 0},
            {"name": "new", "n": 5},
        ]
        auto = c.subscribe(topic, "auto", schema=AutoConsumeSchema(), initial_position=early)
        assert [auto.receive(10_000).value() for _ in range(2)] == [
            {"name": "old"},
            {"name": "new", "n": 5},
        ]
        old.close()
        new.close()
    finally:
        c.close()
        if admin is not None:
            admin.close()


def test_auto_consume_of_strings_json_and_bytes(ours: Client, official: pulsar.Client) -> None:
    from magnetar.client.schema import AutoConsumeSchema

    strings, records, raw = _topic("auto-str"), _topic("auto-json"), _topic("auto-raw")
    official.create_producer(strings, schema=official_schema.StringSchema()).send("s")
    official.create_producer(records, schema=official_schema.JsonSchema(OfficialUser)).send(
        OfficialUser(name="j", age=1, tags=[], scores={})
    )
    official.create_producer(raw).send(b"\x00raw")
    early = InitialPosition.Earliest
    got = [
        ours.subscribe(t, "a", schema=AutoConsumeSchema(), initial_position=early)
        .receive(10_000)
        .value()
        for t in (strings, records, raw)
    ]
    assert got[0] == "s" and got[1]["name"] == "j" and got[2] == b"\x00raw"
