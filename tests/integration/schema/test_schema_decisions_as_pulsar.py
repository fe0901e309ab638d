"""Two schema decisions made as Apache Pulsar makes them, with the official client on a real
standalone: the cases of ``test_avro_required_default`` and ``test_schema_evolve`` of
apache/pulsar-client-python's ``tests/schema_test.py``, which Pulsar accepts.

In both the new version is another Python class, so its Avro record has another name
(``Example`` -> ``ExampleRequiredDefault``, ``User1`` -> ``User2``). Pulsar validates with
Avro's ``SchemaValidatorBuilder``, whose resolution does not compare record names; Magnetar
decides the same (``broker/schema/compatibility.py``). A change of a field's type that does
not resolve is still refused, so the check is not switched off.
"""

from __future__ import annotations

from collections.abc import Iterator

import pulsar
import pytest
from pulsar.schema import (
    Array,
    AvroSchema,
    Boolean,
    Bytes,
    Double,
    Float,
    Integer,
    Long,
    Map,
    Record,
    String,
)
from support.admin import http
from support.standalone import StandaloneProcess

pytestmark = pytest.mark.compat


class MySubRecord(Record):
    _sorted_fields = True
    x = Integer()
    y = Long()
    z = String()


class Example(Record):
    a = Integer()
    b = Boolean(required=True)
    c = Long()
    d = Float()
    e = Double()
    f = String()
    g = Bytes()
    h = Array(String())
    i = Map(String())
    j = MySubRecord()


class ExampleRequiredDefault(Record):
    _sorted_fields = True
    a = Integer(required_default=True)
    b = Boolean(required=True, required_default=True)
    c = Long(required_default=True)
    d = Float(required_default=True)
    e = Double(required_default=True)
    f = String(required_default=True)
    g = Bytes(required_default=True)
    h = Array(String(), required_default=True)
    i = Map(String(), required_default=True)
    j = MySubRecord(required_default=True)


class User1(Record):
    name = String()
    age = Integer()


class User2(Record):
    _sorted_fields = True
    name = String()
    age = Integer(required=True)


class User3(Record):
    name = String()
    age = Boolean(required=True)  # int data cannot be read as a boolean


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProcess]:
    base = tmp_path_factory.mktemp("schema-decisions")
    proc = StandaloneProcess(base / "data", base / "standalone.log").start(timeout_s=120)
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture
def client(standalone: StandaloneProcess) -> Iterator[pulsar.Client]:
    c = pulsar.Client(standalone.service_url, operation_timeout_seconds=30, log_conf_file_path=None)
    try:
        yield c
    finally:
        c.close()


def test_avro_required_default_under_the_default_strategy(client: pulsar.Client) -> None:
    """The namespace's default strategy (FULL, Pulsar's broker default): a record renamed,
    its fields given defaults, is accepted."""
    topic = "persistent://public/default/avro-required-default"
    producer = client.create_producer(topic, schema=AvroSchema(Example))
    producer_default = client.create_producer(topic, schema=AvroSchema(ExampleRequiredDefault))
    producer.close()
    producer_default.close()


def test_schema_evolve_under_forward(standalone: StandaloneProcess, client: pulsar.Client) -> None:
    ns = "public/evolve"
    status, _ = http(standalone.web_url, "PUT", f"/admin/v2/namespaces/{ns}", {})
    assert status == 204
    status, _ = http(
        standalone.web_url,
        "PUT",
        f"/admin/v2/namespaces/{ns}/schemaCompatibilityStrategy",
        "FORWARD",
    )
    assert status == 204
    topic = f"persistent://{ns}/schema-evolve"
    producer1 = client.create_producer(topic, schema=AvroSchema(User1))
    consumer = client.subscribe(topic, "sub", schema=AvroSchema(User1))
    reader = client.create_reader(
        topic, schema=AvroSchema(User1), start_message_id=pulsar.MessageId.earliest
    )
    producer2 = client.create_producer(topic, schema=AvroSchema(User2))
    for i in range(5):
        producer1.send(User1(age=i + 100, name=f"User1 {i}"))
        producer2.send(User2(age=i + 200, name=f"User2 {i}"))
    want = [(f"User{1 + n % 2} {n // 2}", (100 if n % 2 == 0 else 200) + n // 2) for n in range(10)]
    got = [(m.value().name, m.value().age) for m in (consumer.receive(10_000) for _ in range(10))]
    read = [(m.value().name, m.value().age) for m in (reader.read_next(10_000) for _ in range(10))]
    assert got == want and read == want
    with pytest.raises(pulsar.IncompatibleSchema):
        client.create_producer(topic, schema=AvroSchema(User3))
