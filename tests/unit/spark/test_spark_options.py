"""The ``magnetar`` data source's options and offsets, without Spark running: every option
parses to what it means, and unknown, malformed or conflicting options raise ``OptionError``
naming the option (the spark tier proves these surface at planning time)."""

from __future__ import annotations

import json

import pytest

from magnetar.client import AuthenticationToken, CompressionType
from magnetar.spark.options import OptionError, read_options, write_options
from magnetar.spark.positions import (
    Position,
    PositionError,
    Start,
    decode_offset,
    encode_offset,
    ends_by,
)

URL = {"service.url": "pulsar://127.0.0.1:6650"}
T0 = "persistent://public/default/t-partition-0"


def test_read_defaults_follow_pulsar_spark() -> None:
    batch = read_options({**URL, "topic": "t"}, streaming=False)
    assert batch.selection.topics == ("persistent://public/default/t",)
    assert batch.starting.keyword == "earliest" and batch.ending.keyword == "latest"
    assert batch.fail_on_data_loss and batch.poll_timeout_ms == 120_000
    assert not batch.wait_for_topics
    stream = read_options({**URL, "TOPICS": "a, my/ns/b"}, streaming=True)  # case-insensitive
    assert stream.starting.keyword == "latest"
    assert stream.selection.topics == ("persistent://public/default/a", "persistent://my/ns/b")


def test_every_read_option_is_parsed() -> None:
    opts = read_options(
        {
            **URL,
            "admin.url": "http://127.0.0.1:8080/",
            "topicsPattern": "ev-.*",
            "startingOffsets": json.dumps({T0: "12:5", "persistent://public/default/u": "3:4:2"}),
            "failOnDataLoss": "false",
            "maxRecordsPerTrigger": "100",
            "maxBytesPerTrigger": "4096",
            "subscriptionName": "progress",
            "pollTimeoutMs": "5000",
            "waitingForNonExistedTopic": "true",
            "pulsar.client.operationTimeoutMs": "7000",
            "pulsar.client.authParams": "token:abc",
            "pulsar.reader.receiverQueueSize": "500",
            "pulsar.reader.readCompacted": "true",
        },
        streaming=True,
    )
    assert opts.client.admin_url == "http://127.0.0.1:8080"
    assert opts.selection.pattern == "persistent://public/default/ev-.*"
    assert opts.starting.per_partition == {
        T0: Position(12, 5, -1),
        "persistent://public/default/u": Position(3, 4, 2),
    }
    assert not opts.fail_on_data_loss
    assert (opts.max_records_per_trigger, opts.max_bytes_per_trigger) == (100, 4096)
    assert opts.subscription_name == "progress" and opts.poll_timeout_ms == 5000
    assert opts.wait_for_topics
    assert opts.client.client_kwargs["operation_timeout_seconds"] == 7
    assert isinstance(opts.client.client_kwargs["authentication"], AuthenticationToken)
    assert opts.reader_kwargs == {"receiver_queue_size": 500, "is_read_compacted": True}
    times = read_options(
        {**URL, "topic": "t", "startingTime": "10", "endingTime": "20"}, streaming=False
    )
    assert (times.starting_time_ms, times.ending_time_ms) == (10, 20)


@pytest.mark.parametrize(
    ("extra", "streaming", "message"),
    [
        ({"topic": "t", "statringOffsets": "earliest"}, False, "unknown option 'statringoffsets'"),
        ({"topic": "t", "topics": "a"}, False, "exactly one of the options"),
        ({}, True, "exactly one of the options 'topic', 'topics', 'topicsPattern' is required"),
        ({"topic": "a,b"}, False, "option 'topic' takes one topic"),
        ({"topicsPattern": "(("}, True, "option 'topicsPattern'"),
        ({"topic": "t", "startingOffsets": "latest"}, False, "not allowed in batch"),
        ({"topic": "t", "startingOffsets": "soon"}, True, "option 'startingOffsets'"),
        ({"topic": "t", "startingOffsets": "{bad"}, True, "option 'startingOffsets': not valid"),
        ({"topic": "t", "startingOffsets": '{"t": "1:x"}'}, True, "option 'startingOffsets'"),
        ({"topic": "t", "startingOffsets": '{"t": 5}'}, True, "must be a string"),
        ({"topic": "t", "endingOffsets": "latest"}, True, "applies to batch reads only"),
        ({"topic": "t", "endingTime": "5"}, True, "applies to batch reads only"),
        ({"topic": "t", "endingOffsets": "earliest"}, False, "option 'endingOffsets'"),
        ({"topic": "t", "startingTime": "1", "startingOffsets": "earliest"}, False, "conflict"),
        ({"topic": "t", "endingTime": "1", "endingOffsets": "latest"}, False, "conflict"),
        ({"topic": "t", "startingTime": "5", "endingTime": "1"}, False, "before 'startingTime'"),
        ({"topic": "t", "startingTime": "yesterday"}, False, "option 'startingTime'"),
        ({"topic": "t", "maxRecordsPerTrigger": "5"}, False, "applies to readStream only"),
        ({"topic": "t", "subscriptionName": "s"}, False, "applies to readStream only"),
        ({"topic": "t", "maxRecordsPerTrigger": "0"}, True, "must be positive"),
        ({"topic": "t", "maxBytesPerTrigger": "x"}, True, "option 'maxBytesPerTrigger'"),
        ({"topic": "t", "failOnDataLoss": "maybe"}, True, "option 'failOnDataLoss'"),
        ({"topic": "t", "waitingForNonExistedTopic": "y"}, True, "'waitingForNonExistedTopic'"),
        ({"topic": "t", "filterPushdown": "true"}, True, "applies to batch reads only"),
        ({"topic": "t", "filterPushdown": "y"}, False, "option 'filterPushdown'"),
        ({"topic": "t", "pulsar.reader.bogus": "1"}, True, "option 'pulsar.reader.bogus'"),
        ({"topic": "t", "pulsar.producer.sendTimeoutMs": "1"}, True, "do not apply here"),
        ({"topic": "t", "pulsar.reader.receiverQueueSize": "x"}, True, "receiverqueuesize"),
        ({"topic": "t", "admin.url": "ftp://x"}, True, "option 'admin.url'"),
    ],
)
def test_bad_read_options_name_the_option(
    extra: dict[str, str], streaming: bool, message: str
) -> None:
    with pytest.raises(OptionError, match=None) as info:
        read_options({**URL, **extra}, streaming=streaming)
    assert message in str(info.value)


def test_service_url_is_required_and_checked() -> None:
    with pytest.raises(OptionError, match=r"'service\.url' is required"):
        read_options({"topic": "t"}, streaming=True)
    with pytest.raises(OptionError, match=r"'service\.url'"):
        read_options({"topic": "t", "service.url": "localhost:6650"}, streaming=True)


def test_write_options() -> None:
    opts = write_options(
        {
            **URL,
            "admin.url": "http://a:8080",
            "topic": "out",
            "pulsar.producer.compressionType": "lz4",
            "pulsar.producer.sendTimeoutMs": "1000",
            "checkpointLocation": "/tmp/x",  # Spark passes its own keys along
        }
    )
    assert opts.topic == "persistent://public/default/out" and opts.exactly_once
    assert opts.producer_kwargs == {
        "compression_type": CompressionType.LZ4,
        "send_timeout_millis": 1000,
    }
    loose = write_options({**URL, "exactlyOnce": "false", "pulsar.producer.batchingEnabled": "1"})
    assert not loose.exactly_once and loose.topic is None
    assert loose.producer_kwargs == {"batching_enabled": True}


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"topic": "t"}, "exactlyOnce=true needs option 'admin.url'"),
        (
            {"topic": "t", "admin.url": "http://a", "pulsar.producer.batchingMaxMessages": "0"},
            "option 'pulsar.producer.batchingMaxMessages' must be positive",
        ),
        (
            {
                "topic": "t",
                "exactlyOnce": "false",
                "pulsar.producer.batchingMaxPublishDelayMs": "5",
            },
            "cuts batches by count and size only",
        ),
        (
            {"topic": "t", "admin.url": "http://a", "pulsar.producer.chunkingEnabled": "true"},
            "conflicts with exactlyOnce=true",
        ),
        ({"topic": "t", "exactlyOnce": "sure"}, "option 'exactlyOnce'"),
        ({"topic": "a,b", "exactlyOnce": "false"}, "option 'topic' takes one topic"),
        ({"topic": "t", "exactlyOnce": "false", "startingOffsets": "x"}, "unknown option"),
        (
            {"topic": "t", "exactlyOnce": "false", "pulsar.reader.readerName": "x"},
            "do not apply here",
        ),
        (
            {"topic": "t", "exactlyOnce": "false", "pulsar.producer.compressionType": "gzip"},
            "option 'pulsar.producer.compressiontype'",
        ),
    ],
)
def test_bad_write_options_name_the_option(extra: dict[str, str], message: str) -> None:
    with pytest.raises(OptionError) as info:
        write_options({**URL, **extra})
    assert message in str(info.value)


def test_split_and_read_path_options() -> None:
    opts = read_options(
        {
            **URL,
            "admin.url": "http://a:8080",
            "topic": "t",
            "readPath": "Storage",
            "minPartitions": "8",
            "maxRecordsPerPartition": "100000",
        },
        streaming=False,
    )
    assert (opts.read_path, opts.min_partitions, opts.max_records_per_partition) == (
        "storage",
        8,
        100_000,
    )
    stream = read_options({**URL, "topic": "t", "readPath": "broker"}, streaming=True)
    assert stream.read_path == "broker" and stream.min_partitions is None
    assert read_options({**URL, "topic": "t"}, streaming=False).read_path is None


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"readPath": "bookies"}, "option 'readPath': 'bookies' is neither 'storage'"),
        ({"readPath": "storage"}, "option 'readPath' = 'storage' needs option 'admin.url'"),
        (
            {"readPath": "storage", "admin.url": "http://a", "pulsar.reader.readCompacted": "1"},
            "'pulsar.reader.readCompacted' conflict",
        ),
        ({"minPartitions": "0"}, "option 'minPartitions' must be positive"),
        ({"maxRecordsPerPartition": "many"}, "option 'maxRecordsPerPartition': 'many' is not"),
    ],
)
def test_bad_split_options_name_the_option(extra: dict[str, str], message: str) -> None:
    with pytest.raises(OptionError) as info:
        read_options({**URL, "topic": "t", **extra}, streaming=False)
    assert message in str(info.value)


def test_offload_settings_are_pulsar_s_names() -> None:
    opts = read_options(
        {
            **URL,
            "topic": "t",
            "pulsar.offload.s3ManagedLedgerOffloadCredentialId": "id",
            "PULSAR.OFFLOAD.S3MANAGEDLEDGEROFFLOADCREDENTIALSECRET": "secret",
            "pulsar.offload.s3managedledgeroffloadserviceendpoint": "http://s3:9000",
            "pulsar.offload.fileSystemURI": "file:///mnt/offload",
        },
        streaming=False,
    )
    assert opts.offload == {
        "s3ManagedLedgerOffloadCredentialId": "id",
        "s3ManagedLedgerOffloadCredentialSecret": "secret",
        "s3ManagedLedgerOffloadServiceEndpoint": "http://s3:9000",
        "fileSystemURI": "file:///mnt/offload",
    }
    with pytest.raises(OptionError) as info:
        read_options(
            {**URL, "topic": "t", "pulsar.offload.s3ManagedLedgerOffloadBucket": "b"},
            streaming=False,
        )
    assert "s3ManagedLedgerOffloadCredentialId" in str(info.value)  # what is supported
    with pytest.raises(OptionError, match="do not apply here"):
        write_options({**URL, "exactlyOnce": "false", "pulsar.offload.fileSystemURI": "/x"})


def test_a_bound_without_batch_index_stands_for_its_whole_entry() -> None:
    """A user's ``"ledger:entry"``, and the last message id older brokers give for a
    one-message batch (``L:E:-1``)."""
    whole = Position(5, 7, -1)
    assert Start.after(whole).includes(Position(5, 8, 0))
    assert not Start.after(whole).includes(Position(5, 7, 0))
    assert Start.at(whole).includes(Position(5, 7, 0))
    assert Start.after(Position(5, 7, 2)).includes(Position(5, 7, 3))
    assert ends_by(Position(5, 7, 9), whole) and not ends_by(Position(5, 8, -1), whole)
    assert not ends_by(Position(5, 7, 3), Position(5, 7, 2))
    assert not Start.after(whole).is_before_or_at(whole)
    assert Start.after(Position(5, 7, 0)).is_before_or_at(whole)  # more members, maybe
    assert Start.at(Position(5, 7, 4)).is_before_or_at(whole)
    assert not Start.after(Position(5, 7, 4)).is_before_or_at(Position(5, 7, 4))


def test_offsets_round_trip_through_json() -> None:
    starts = {
        T0: Start.after(Position(12, 5, -1)),
        "persistent://public/default/t-partition-1": Start.earliest(),
        "persistent://public/default/u": Start.at(Position(3, 4, 2)),
    }
    encoded = encode_offset(starts)
    assert json.loads(json.dumps(encoded)) == encoded
    assert encoded[T0] == "after:12:5:-1"
    assert decode_offset(json.loads(json.dumps(encoded))) == starts
    with pytest.raises(PositionError):
        decode_offset({T0: "later:1:2"})
    with pytest.raises(PositionError):
        Position.parse("1")


def test_a_start_knows_whether_a_last_message_is_still_to_be_read() -> None:
    last = Position(5, 10, -1)
    assert Start.earliest().is_before_or_at(last)
    assert not Start.earliest().is_before_or_at(None)
    assert Start.after(Position(5, 9)).is_before_or_at(last)
    assert not Start.after(last).is_before_or_at(last)
    assert Start.at(last).is_before_or_at(last)
    batched = Position(5, 10, 3)
    assert Start.after(Position(5, 10, 2)).is_before_or_at(batched)


def test_spark_discovers_the_source_through_a_pyspark_module() -> None:
    """Spark 4 registers ``DefaultSource`` of every top-level ``pyspark_*`` module it finds
    (``pyspark.sql.worker.lookup_data_sources``): ours names the ``magnetar`` format."""
    import importlib
    import pkgutil

    from pyspark.sql.datasource import DataSource

    assert "pyspark_magnetar" in {
        m.name for m in pkgutil.iter_modules() if m.name.startswith("pyspark_")
    }
    source = importlib.import_module("pyspark_magnetar").DefaultSource
    assert issubclass(source, DataSource) and source.name() == "magnetar"


def test_token_files_and_the_token_plugin_name(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """``authParams`` takes ``file:`` paths as the official clients do (read at every
    connection: a rotated token is picked up); ``authPluginClassName`` may name the token
    plugin, as pulsar-spark jobs set it, and nothing else."""
    token_file = tmp_path / "token"
    token_file.write_text("first.jwt\n")
    for form in (f"file:{token_file}", f"file://{token_file}"):
        opts = read_options(
            {
                **URL,
                "topic": "t",
                "pulsar.client.authPluginClassName": (
                    "org.apache.pulsar.client.impl.auth.AuthenticationToken"
                ),
                "pulsar.client.authParams": form,
            },
            streaming=False,
        )
        auth = opts.client.client_kwargs["authentication"]
        assert "_auth_plugin" not in opts.client.client_kwargs
        token_file.write_text("first.jwt\n")
        assert auth.auth_data() == b"first.jwt"
        token_file.write_text("rotated.jwt")
        assert auth.auth_data() == b"rotated.jwt"
    plugin = "pulsar.client.authPluginClassName"
    token_plugin = "org.apache.pulsar.client.impl.auth.AuthenticationToken"
    oauth2 = "org.apache.pulsar.client.impl.auth.oauth2.AuthenticationOAuth2"
    bad = [
        (
            {"pulsar.client.authParams": f"file:{tmp_path / 'missing'}"},
            "cannot read the token file",
        ),
        ({"pulsar.client.authParams": f"file:{tmp_path}/empty"}, "cannot read"),
        (
            {plugin: oauth2},
            "token and basic authentication are supported",
        ),
        (
            {plugin: token_plugin},
            "'pulsar.client.authParams' is missing",
        ),
        (
            {
                plugin: "org.apache.pulsar.client.impl.auth.AuthenticationBasic",
                "pulsar.client.authParams": "alice:secret",
            },
            'expected {"userId"',
        ),
    ]
    (tmp_path / "blank").write_text("  \n")
    bad.append(({"pulsar.client.authParams": f"file:{tmp_path / 'blank'}"}, "is empty"))
    for extra, message in bad:
        with pytest.raises(OptionError, match=None) as refused:
            read_options({**URL, "topic": "t", **extra}, streaming=False)
        assert message in str(refused.value)
    basic = read_options(
        {
            **URL,
            "topic": "t",
            plugin: "org.apache.pulsar.client.impl.auth.AuthenticationBasic",
            "pulsar.client.authParams": '{"userId": "alice", "password": "s:ecret"}',
        },
        streaming=False,
    )
    auth = basic.client.client_kwargs["authentication"]
    assert auth.auth_method_name == "basic" and auth.auth_data() == b"alice:s:ecret"
