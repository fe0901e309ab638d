"""Schema'd topics read into columns (pulsar-spark's layout): each Avro / JSON record field is a
top-level column, a STRING topic has a string ``value``; messages of an older schema version
land in the latest version's columns (Avro resolution); topics without a schema keep
``value BINARY``. A real standalone, the official client as producer, a local Spark."""

from __future__ import annotations

from typing import Any

import pulsar
from pulsar.schema import Array, AvroSchema, JsonSchema, Long, Record, String, StringSchema
from support.standalone import StandaloneProcess

V1 = {"type": "record", "name": "P", "fields": [{"name": "name", "type": "string"}]}
V2 = {
    "type": "record",
    "name": "P",
    "fields": [
        {"name": "name", "type": "string"},
        {"name": "n", "type": ["null", "long"], "default": None},
        {"name": "tags", "type": {"type": "array", "items": "string"}, "default": []},
    ],
}


class Event(Record):
    name = String()
    n = Long()
    tags = Array(String())


def _opts(sa: StandaloneProcess, topic: str) -> dict[str, str]:
    return {"service.url": sa.service_url, "admin.url": sa.web_url, "topic": topic}


def test_avro_json_and_string_topics_read_into_columns(
    spark: Any, standalone: StandaloneProcess
) -> None:
    avro_topic = "persistent://public/default/typed-avro"
    json_topic = "persistent://public/default/typed-json"
    str_topic = "persistent://public/default/typed-str"
    client = pulsar.Client(standalone.service_url, log_conf_file_path=None)
    try:
        old = client.create_producer(avro_topic, schema=AvroSchema(None, schema_definition=V1))
        old.send({"name": "a"})
        new = client.create_producer(avro_topic, schema=AvroSchema(None, schema_definition=V2))
        new.send({"name": "b", "n": 2, "tags": ["x", "y"]}, partition_key="k")
        client.create_producer(json_topic, schema=JsonSchema(Event)).send(
            Event(name="j", n=7, tags=[])
        )
        client.create_producer(str_topic, schema=StringSchema()).send("hello")
    finally:
        client.close()

    df = spark.read.format("magnetar").options(**_opts(standalone, avro_topic)).load()
    assert df.columns[:3] == ["name", "n", "tags"] and "value" not in df.columns
    assert dict(df.dtypes)["n"] == "bigint" and dict(df.dtypes)["tags"] == "array<string>"
    rows = sorted(df.select("name", "n", "tags", "__key").collect(), key=lambda r: r["name"])
    assert [(r["name"], r["n"], r["tags"]) for r in rows] == [("a", None, []), ("b", 2, ["x", "y"])]
    assert rows[1]["__key"] == b"k"

    js = spark.read.format("magnetar").options(**_opts(standalone, json_topic)).load()
    assert [(r["name"], r["n"]) for r in js.select("name", "n").collect()] == [("j", 7)]

    strings = spark.read.format("magnetar").options(**_opts(standalone, str_topic)).load()
    assert dict(strings.dtypes)["value"] == "string"
    assert [r["value"] for r in strings.select("value").collect()] == ["hello"]


def test_a_stream_of_a_schemad_topic_has_the_same_columns(
    spark: Any, standalone: StandaloneProcess
) -> None:
    topic = "persistent://public/default/typed-stream"
    client = pulsar.Client(standalone.service_url, log_conf_file_path=None)
    try:
        old = client.create_producer(topic, schema=AvroSchema(None, schema_definition=V1))
        new = client.create_producer(topic, schema=AvroSchema(None, schema_definition=V2))
        for i in range(3):
            old.send({"name": f"old-{i}"})
            new.send({"name": f"new-{i}", "n": i, "tags": []})
    finally:
        client.close()
    stream = (
        spark.readStream.format("magnetar")
        .options(**_opts(standalone, topic), startingOffsets="earliest")
        .load()
    )
    assert stream.columns[:3] == ["name", "n", "tags"]
    query = (
        stream.select("name", "n")
        .writeStream.format("memory")
        .queryName("typed_stream_sink")
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(300)
    rows = spark.sql("SELECT name, n FROM typed_stream_sink").collect()
    assert sorted((r["name"], r["n"]) for r in rows) == sorted(
        [(f"old-{i}", None) for i in range(3)] + [(f"new-{i}", i) for i in range(3)]
    )
