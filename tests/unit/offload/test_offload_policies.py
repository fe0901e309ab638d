"""Offload policies with Pulsar's names, defaults, precedence and validation; the driver
mapping to the object-store library's configuration (GCS and Azure are proven here only: no
real Google or Azure service is reachable from this machine)."""

from __future__ import annotations

import pathlib

import pytest

from magnetar.broker.offload import (
    Driver,
    InvalidOffloadPolicies,
    OffloadPolicies,
    ReadPriority,
    StoreKind,
    create_offloader,
    open_blob_store,
    store_spec,
)
from magnetar.broker.offload.policies import JSON_NAMES

PULSAR_JSON_NAMES = {
    "offloadersDirectory",
    "managedLedgerOffloadDriver",
    "managedLedgerOffloadMaxThreads",
    "managedLedgerOffloadPrefetchRounds",
    "managedLedgerOffloadThresholdInBytes",
    "managedLedgerOffloadThresholdInSeconds",
    "managedLedgerOffloadDeletionLagInMillis",
    "managedLedgerOffloadedReadPriority",
    "s3ManagedLedgerOffloadRegion",
    "s3ManagedLedgerOffloadBucket",
    "s3ManagedLedgerOffloadServiceEndpoint",
    "s3ManagedLedgerOffloadMaxBlockSizeInBytes",
    "s3ManagedLedgerOffloadReadBufferSizeInBytes",
    "s3ManagedLedgerOffloadCredentialId",
    "s3ManagedLedgerOffloadCredentialSecret",
    "s3ManagedLedgerOffloadRole",
    "s3ManagedLedgerOffloadRoleSessionName",
    "gcsManagedLedgerOffloadRegion",
    "gcsManagedLedgerOffloadBucket",
    "gcsManagedLedgerOffloadMaxBlockSizeInBytes",
    "gcsManagedLedgerOffloadReadBufferSizeInBytes",
    "gcsManagedLedgerOffloadServiceAccountKeyFile",
    "fileSystemProfilePath",
    "fileSystemURI",
    "managedLedgerOffloadBucket",
    "managedLedgerOffloadRegion",
    "managedLedgerOffloadServiceEndpoint",
    "managedLedgerOffloadMaxBlockSizeInBytes",
    "managedLedgerOffloadReadBufferSizeInBytes",
}

S3 = {
    "managedLedgerOffloadDriver": "aws-s3",
    "s3ManagedLedgerOffloadBucket": "b",
    "s3ManagedLedgerOffloadRegion": "eu-west-1",
}


def test_the_json_names_are_pulsars_offload_policies() -> None:
    assert set(JSON_NAMES) == PULSAR_JSON_NAMES
    every = dict.fromkeys(PULSAR_JSON_NAMES)
    assert OffloadPolicies.from_json(every) == OffloadPolicies()


def test_json_round_trip_keeps_only_what_was_set() -> None:
    doc = {**S3, "managedLedgerOffloadThresholdInBytes": 10, "offloadersDirectory": "./o"}
    policies = OffloadPolicies.from_json(doc)
    assert policies.to_json() == doc
    assert OffloadPolicies.from_json(policies.to_json()) == policies


@pytest.mark.parametrize(
    ("doc", "named"),
    [
        ({"nope": 1}, "nope"),
        ({"managedLedgerOffloadThresholdInBytes": "10"}, "managedLedgerOffloadThresholdInBytes"),
        ({"managedLedgerOffloadThresholdInBytes": True}, "managedLedgerOffloadThresholdInBytes"),
        ({"s3ManagedLedgerOffloadBucket": 3}, "s3ManagedLedgerOffloadBucket"),
    ],
)
def test_bad_json_is_refused_naming_the_field(doc: dict[str, object], named: str) -> None:
    with pytest.raises(InvalidOffloadPolicies, match=named):
        OffloadPolicies.from_json(doc)


def test_secrets_stay_out_of_repr() -> None:
    policies = OffloadPolicies.from_json(
        {
            **S3,
            "s3ManagedLedgerOffloadCredentialId": "AKIA",
            "s3ManagedLedgerOffloadCredentialSecret": "shh",
        }
    )
    assert "shh" not in repr(policies) and "AKIA" not in repr(policies)
    resolved = policies.resolve()
    assert resolved is not None and "shh" not in repr(resolved)


def test_defaults_are_pulsars() -> None:
    resolved = OffloadPolicies.from_json(S3).resolve()
    assert resolved is not None
    assert resolved.driver is Driver.AWS_S3
    assert resolved.max_block_size_bytes == 64 * 1024 * 1024
    assert resolved.read_buffer_size_bytes == 1024 * 1024
    assert resolved.deletion_lag_ms == 4 * 3600 * 1000
    assert resolved.max_threads == 2 and resolved.prefetch_rounds == 1
    assert resolved.threshold_bytes is None and resolved.threshold_seconds is None
    assert resolved.read_priority is ReadPriority.TIERED_STORAGE_FIRST
    assert resolved.s3_role_session_name == "pulsar-s3-offload"
    assert resolved.driver_metadata() == {
        "managedLedgerOffloadDriver": "aws-s3",
        "bucket": "b",
        "region": "eu-west-1",
        "serviceEndpoint": "",
    }


def test_no_driver_means_offloading_is_off() -> None:
    assert OffloadPolicies().resolve() is None
    assert OffloadPolicies.from_json({"managedLedgerOffloadThresholdInBytes": 5}).resolve() is None


def test_driver_names_match_case_insensitively() -> None:
    for name, driver in [
        ("s3", Driver.S3),
        ("AWS-S3", Driver.AWS_S3),
        ("AzureBlob", Driver.AZURE),
        ("google-cloud-storage", Driver.GCS),
        ("FileSystem", Driver.FILESYSTEM),
    ]:
        assert Driver.parse(name) is driver
    with pytest.raises(InvalidOffloadPolicies, match="aliyun-oss"):
        Driver.parse("aliyun-oss")
    with pytest.raises(InvalidOffloadPolicies, match="unknown"):
        Driver.parse("tape")


def test_merge_takes_topic_then_namespace_then_broker_field_by_field() -> None:
    broker = OffloadPolicies.from_json({**S3, "managedLedgerOffloadDeletionLagInMillis": 1})
    namespace = OffloadPolicies.from_json(
        {"s3ManagedLedgerOffloadBucket": "ns-bucket", "managedLedgerOffloadThresholdInBytes": 100}
    )
    topic = OffloadPolicies.from_json({"managedLedgerOffloadThresholdInBytes": 7})
    merged = OffloadPolicies.merge(topic, namespace, broker)
    assert merged.threshold_bytes == 7
    assert merged.s3_bucket == "ns-bucket"
    assert merged.deletion_lag_ms == 1 and merged.driver == "aws-s3"
    assert OffloadPolicies.merge(None, None, broker) == broker


def test_driver_specific_names_win_over_the_universal_ones_as_in_pulsar() -> None:
    resolved = OffloadPolicies.from_json(
        {
            **S3,
            "managedLedgerOffloadBucket": "universal",
            "managedLedgerOffloadReadBufferSizeInBytes": 4096,
            "s3ManagedLedgerOffloadReadBufferSizeInBytes": 8192,
        }
    ).resolve()
    assert (
        resolved is not None and resolved.bucket == "b" and resolved.read_buffer_size_bytes == 8192
    )
    universal = OffloadPolicies.from_json(
        {
            "managedLedgerOffloadDriver": "S3",
            "managedLedgerOffloadBucket": "u",
            "managedLedgerOffloadServiceEndpoint": "http://127.0.0.1:9000",
        }
    ).resolve()
    assert universal is not None and universal.bucket == "u"


@pytest.mark.parametrize(
    ("doc", "named"),
    [
        (
            {"managedLedgerOffloadDriver": "aws-s3", "s3ManagedLedgerOffloadRegion": "r"},
            "s3ManagedLedgerOffloadBucket",
        ),
        (
            {"managedLedgerOffloadDriver": "aws-s3", "s3ManagedLedgerOffloadBucket": "b"},
            "s3ManagedLedgerOffloadServiceEndpoint",
        ),
        (
            {**S3, "s3ManagedLedgerOffloadMaxBlockSizeInBytes": 1024},
            "s3ManagedLedgerOffloadMaxBlockSizeInBytes",
        ),
        (
            {**S3, "s3ManagedLedgerOffloadReadBufferSizeInBytes": 10},
            "s3ManagedLedgerOffloadReadBufferSizeInBytes",
        ),
        (
            {**S3, "managedLedgerOffloadedReadPriority": "soonest"},
            "managedLedgerOffloadedReadPriority",
        ),
        ({**S3, "managedLedgerOffloadPrefetchRounds": 0}, "managedLedgerOffloadPrefetchRounds"),
        (
            {**S3, "s3ManagedLedgerOffloadCredentialId": "id"},
            "s3ManagedLedgerOffloadCredentialSecret",
        ),
        ({"managedLedgerOffloadDriver": "google-cloud-storage"}, "gcsManagedLedgerOffloadBucket"),
        ({"managedLedgerOffloadDriver": "azureblob"}, "managedLedgerOffloadBucket"),
        ({"managedLedgerOffloadDriver": "filesystem"}, "fileSystemURI"),
        (
            {"managedLedgerOffloadDriver": "filesystem", "fileSystemURI": "hdfs://nn:9000/x"},
            "fileSystemURI",
        ),
        (
            {"managedLedgerOffloadDriver": "filesystem", "fileSystemURI": "relative/dir"},
            "fileSystemURI",
        ),
    ],
)
def test_unworkable_policies_are_refused_naming_the_field(
    doc: dict[str, object], named: str
) -> None:
    with pytest.raises(InvalidOffloadPolicies, match=named):
        OffloadPolicies.from_json(doc).resolve()


def test_broker_properties_with_pulsars_conf_file_names() -> None:
    props = {
        "managedLedgerOffloadDriver": "aws-s3",
        "s3ManagedLedgerOffloadBucket": "b",
        "s3ManagedLedgerOffloadRegion": "r",
        "managedLedgerOffloadAutoTriggerSizeThresholdBytes": "-1",
        "managedLedgerOffloadThresholdInSeconds": "3600",
        "managedLedgerOffloadDeletionLagMs": "60000",
        "managedLedgerDataReadPriority": "bookkeeper-first",
        "s3ManagedLedgerOffloadMaxBlockSizeInBytes": " 67108864 ",
        "unrelatedSetting": "x",
    }
    policies = OffloadPolicies.from_properties(props)
    assert policies.threshold_bytes is None  # -1 is Pulsar's "off"
    assert policies.threshold_seconds == 3600
    assert policies.deletion_lag_ms == 60000
    resolved = policies.resolve()
    assert resolved is not None and resolved.read_priority is ReadPriority.BOOKKEEPER_FIRST
    with pytest.raises(InvalidOffloadPolicies, match="managedLedgerOffloadDeletionLagMs"):
        OffloadPolicies.from_properties({"managedLedgerOffloadDeletionLagMs": "4h"})
    json_name_wins = OffloadPolicies.from_properties(
        {
            "managedLedgerOffloadThresholdInBytes": "5",
            "managedLedgerOffloadAutoTriggerSizeThresholdBytes": "9",
        }
    )
    assert json_name_wins.threshold_bytes == 5


def test_filesystem_uri_and_the_hadoop_profile(tmp_path: pathlib.Path) -> None:
    profile = tmp_path / "filesystem_offload_core_site.xml"
    profile.write_text(
        "<configuration>"
        "<property><name>fs.defaultFS</name><value>file:///srv/offload</value></property>"
        "<property><name>hadoop.tmp.dir</name><value>pulsar</value></property>"
        "</configuration>"
    )
    base = {"managedLedgerOffloadDriver": "filesystem"}
    plain = OffloadPolicies.from_json({**base, "fileSystemURI": "file:///data/tier"}).resolve()
    assert plain is not None and plain.file_system_root == "/data/tier"
    with_profile = OffloadPolicies.from_json(
        {**base, "fileSystemURI": "/data/tier", "fileSystemProfilePath": str(profile)}
    ).resolve()
    assert with_profile is not None and with_profile.file_system_root == "/data/tier/pulsar"
    from_profile = OffloadPolicies.from_json(
        {**base, "fileSystemProfilePath": str(profile)}
    ).resolve()
    assert from_profile is not None and from_profile.file_system_root == "/srv/offload/pulsar"
    with pytest.raises(InvalidOffloadPolicies, match="fileSystemProfilePath"):
        OffloadPolicies.from_json(
            {**base, "fileSystemProfilePath": str(tmp_path / "missing.xml")}
        ).resolve()


# -- the driver mapping (store configuration) --------------------------------------------------


def test_s3_mapping() -> None:
    resolved = OffloadPolicies.from_json(
        {
            "managedLedgerOffloadDriver": "S3",
            "s3ManagedLedgerOffloadBucket": "b",
            "s3ManagedLedgerOffloadServiceEndpoint": "http://minio:9000",
            "s3ManagedLedgerOffloadCredentialId": "id",
            "s3ManagedLedgerOffloadCredentialSecret": "sk",
            "s3ManagedLedgerOffloadRole": "arn:aws:iam::1:role/r",
        }
    ).resolve()
    assert resolved is not None
    spec = store_spec(resolved)
    assert spec.kind is StoreKind.S3 and spec.location == "b" and spec.allow_http
    assert dict(spec.config) == {
        "endpoint": "http://minio:9000",
        "virtual_hosted_style_request": False,
        "access_key_id": "id",
        "secret_access_key": "sk",
        "role_arn": "arn:aws:iam::1:role/r",
        "role_session_name": "pulsar-s3-offload",
    }
    aws = OffloadPolicies.from_json(S3).resolve()
    assert aws is not None
    aws_spec = store_spec(aws)
    assert dict(aws_spec.config) == {"region": "eu-west-1"} and not aws_spec.allow_http


def test_gcs_mapping_and_a_bad_key_file_is_a_clear_error(tmp_path: pathlib.Path) -> None:
    resolved = OffloadPolicies.from_json(
        {
            "managedLedgerOffloadDriver": "google-cloud-storage",
            "gcsManagedLedgerOffloadBucket": "gb",
            "gcsManagedLedgerOffloadRegion": "europe-west3",
            "gcsManagedLedgerOffloadMaxBlockSizeInBytes": 16 * 1024 * 1024,
            "gcsManagedLedgerOffloadServiceAccountKeyFile": str(tmp_path / "missing.json"),
        }
    ).resolve()
    assert resolved is not None and resolved.max_block_size_bytes == 16 * 1024 * 1024
    spec = store_spec(resolved)
    assert spec.kind is StoreKind.GCS and spec.location == "gb"
    assert dict(spec.config) == {"service_account": str(tmp_path / "missing.json")}
    with pytest.raises(InvalidOffloadPolicies, match="service account"):
        open_blob_store(spec)
    without_key = OffloadPolicies.from_json(
        {
            "managedLedgerOffloadDriver": "google-cloud-storage",
            "gcsManagedLedgerOffloadBucket": "gb",
        }
    ).resolve()
    assert without_key is not None
    assert open_blob_store(store_spec(without_key)).describe() == "gcs:gb"  # Google's environment


def test_azure_mapping_reads_pulsars_environment_variables() -> None:
    resolved = OffloadPolicies.from_json(
        {
            "managedLedgerOffloadDriver": "azureblob",
            "managedLedgerOffloadBucket": "container",
            "managedLedgerOffloadServiceEndpoint": "http://127.0.0.1:10000/acct",
        }
    ).resolve()
    assert resolved is not None
    spec = store_spec(
        resolved, {"AZURE_STORAGE_ACCOUNT": "acct", "AZURE_STORAGE_ACCESS_KEY": "a2V5"}
    )
    assert spec.kind is StoreKind.AZURE and spec.location == "container" and spec.allow_http
    assert dict(spec.config) == {
        "account_name": "acct",
        "account_key": "a2V5",
        "endpoint": "http://127.0.0.1:10000/acct",
    }
    offloader = create_offloader(resolved, spec=spec)  # no request is made yet
    assert offloader.driver_name == "azureblob"
    with pytest.raises(InvalidOffloadPolicies, match="AZURE_STORAGE_ACCOUNT"):
        store_spec(resolved, {})


def test_filesystem_mapping(tmp_path: pathlib.Path) -> None:
    resolved = OffloadPolicies.from_json(
        {"managedLedgerOffloadDriver": "filesystem", "fileSystemURI": f"file://{tmp_path}/tier"}
    ).resolve()
    assert resolved is not None
    spec = store_spec(resolved)
    assert spec.kind is StoreKind.LOCAL and spec.location == f"{tmp_path}/tier"
    assert not spec.supports_attributes
    assert resolved.driver_metadata()["bucket"] == f"{tmp_path}/tier"


def test_a_negative_threshold_disables_automatic_offload_over_a_lower_level() -> None:
    """Pulsar: a threshold < 0 disables automatic offloading; set at the namespace it
    overrides the broker's threshold (unset would fall back to it)."""
    broker = OffloadPolicies.from_json({**S3, "managedLedgerOffloadThresholdInBytes": 0})
    namespace = OffloadPolicies(threshold_bytes=-1)
    resolved = OffloadPolicies.merge(None, namespace, broker).resolve()
    assert resolved is not None and resolved.threshold_bytes is None
    assert OffloadPolicies.merge(None, None, broker).resolve().threshold_bytes == 0  # type: ignore[union-attr]


def test_namespace_level_reads_offload_policies_and_the_older_fields_as_pulsar() -> None:
    assert OffloadPolicies.from_namespace_policies({}) is None
    # Pulsar's defaults of the older fields mean "not set"
    assert (
        OffloadPolicies.from_namespace_policies(
            {"offload_threshold": -1, "offload_threshold_in_seconds": -1}
        )
        is None
    )
    older = OffloadPolicies.from_namespace_policies(
        {"offload_threshold": 10, "offload_deletion_lag_ms": 5}
    )
    assert older == OffloadPolicies(threshold_bytes=10, deletion_lag_ms=5)
    both = OffloadPolicies.from_namespace_policies(
        {
            "offload_policies": {**S3, "managedLedgerOffloadThresholdInBytes": 7},
            "offload_threshold": 10,
            "offload_threshold_in_seconds": 60,
        }
    )
    assert both is not None
    assert both.threshold_bytes == 7  # offload_policies' own value wins
    assert both.threshold_seconds == 60  # the older field fills what it leaves unset
    assert both.driver == S3["managedLedgerOffloadDriver"]
