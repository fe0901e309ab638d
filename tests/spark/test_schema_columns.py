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


def test_writing_to_avro_and_json_topics_encodes_rows_with_their_schema(
    spark: Any, standalone: StandaloneProcess
) -> None:
    """The sink encodes each row's data columns with the target topic's AVRO / JSON record
    schema and announces that schema, so the official client's typed consumers read the
    values (not JSON text); a column the schema lacks fails the write, naming it."""
    avro_topic = "persistent://public/default/typed-write-avro"
    json_topic = "persistent://public/default/typed-write-json"
    client = pulsar.Client(standalone.service_url, log_conf_file_path=None)
    try:
        avro_sub = client.subscribe(
            avro_topic, "check", schema=AvroSchema(None, schema_definition=V2)
        )
        json_sub = client.subscribe(json_topic, "check", schema=JsonSchema(Event))
        df = spark.createDataFrame(
            [("a", 1, ["x"], "k1"), ("b", None, [], "k2")],
            "name STRING, n BIGINT, tags ARRAY<STRING>, __key STRING",
        )
        for topic in (avro_topic, json_topic):
            df.write.format("magnetar").options(**_opts(standalone, topic)).mode("append").save()
        got = [avro_sub.receive(10_000) for _ in range(2)]
        assert sorted((m.value()["name"], m.value()["n"], m.value()["tags"]) for m in got) == [
            ("a", 1, ["x"]),
            ("b", None, []),
        ]
        assert sorted(m.partition_key() for m in got) == ["k1", "k2"]
        events = [json_sub.receive(10_000).value() for _ in range(2)]
        assert sorted((e.name, e.n, e.tags) for e in events) == [("a", 1, ["x"]), ("b", None, [])]

        # read back through Spark: the same columns
        back = spark.read.format("magnetar").options(**_opts(standalone, avro_topic)).load()
        assert sorted((r["name"], r["n"]) for r in back.select("name", "n").collect()) == [
            ("a", 1),
            ("b", None),
        ]

        bad = spark.createDataFrame([("c", "oops")], "name STRING, bogus STRING")
        try:
            bad.write.format("magnetar").options(**_opts(standalone, avro_topic)).mode(
                "append"
            ).save()
        except Exception as exc:  # Spark wraps the task's error
            assert "'bogus' are not fields of the topic's AVRO schema" in str(exc)
        else:
            raise AssertionError("a column the schema lacks was written")
        try:
            avro_sub.receive(500)
        except pulsar.Timeout:
            pass
        else:
            raise AssertionError("the refused write sent something")
    finally:
        client.close()
