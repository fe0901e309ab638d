"""Every key of Pulsar's shipped ``broker.conf`` / ``standalone.conf`` (and the
``standalone-ssl.conf`` Pulsar's Python client tests with) and of BookKeeper's
``bk_server.conf`` is known: implemented, accepted because its value is what Magnetar does
anyway, or refused naming the key, the value and what fits (tests/support/pulsar_conf.py)."""

from __future__ import annotations

import pathlib
import tempfile

import pytest
from support import pulsar_conf

from magnetar import settings
from magnetar.bookie.main import BookieConfig
from magnetar.broker.config import BrokerConfig
from magnetar.broker.policies.offload import broker_level

pytestmark = pytest.mark.unit

DATA = pulsar_conf.materialize(pathlib.Path(tempfile.mkdtemp(prefix="pulsar-conf-")))
BROKER_FILES = ("broker.conf", "standalone.conf", "standalone-ssl.conf")


def _classify(component: settings.Component, cls: type, name: str) -> settings.Classified:
    values = settings.read_config_file(DATA / name)
    return settings.classify(component, values, settings.field_types(cls))


@pytest.mark.parametrize("name", BROKER_FILES)
def test_every_key_of_a_pulsar_broker_file_is_implemented_or_accepted(name: str) -> None:
    got = _classify(settings.BROKER, BrokerConfig, name)
    assert got.refused == []
    assert got.unknown == []  # the cursor-ledger rollover keys are implemented too
    values = settings.read_config_file(DATA / name)
    implemented_keys = {
        k for k in values if k in settings.BROKER.alias_map() or k in BrokerConfig.__slots__
    }
    accepted_keys = {a.key for a in got.accepted}
    assert implemented_keys | accepted_keys | set(got.unknown) == set(values)


def test_every_key_of_bk_server_conf_is_implemented_or_accepted() -> None:
    got = _classify(settings.BOOKIE, BookieConfig, "bk_server.conf")
    assert (got.refused, got.unknown) == ([], [])
    assert got.implemented["journal_dir"] == "/tmp/bk-txn"
    assert got.implemented["metadata"] == "zk://localhost:2181"


def test_the_shipped_files_load_and_their_values_land() -> None:
    standalone = _load("standalone.conf")
    assert standalone.backlog_quota_default_limit_bytes == 10 << 30  # backlogQuotaDefaultLimitGB
    assert standalone.cluster_name == "standalone"
    assert standalone.load_balancer_enabled is False
    broker = _load("broker.conf")
    assert broker.managed_ledger_default_ensemble_size == 2
    assert broker.backlog_quota_default_limit_bytes == -1  # GB=-1 does not override Bytes
    assert broker.broker_delete_inactive_topics_enabled is True
    ssl = _load("standalone-ssl.conf")
    assert ssl.topic_level_policies_enabled is False
    assert ssl.load_balancer_split_interval_minutes == 15  # the 2.x name of the interval
    assert ssl.anonymous_user_role == "anonymous"


def _load(name: str) -> BrokerConfig:
    return BrokerConfig.load(DATA / name)


def test_no_key_is_both_implemented_and_accepted() -> None:
    for component in (settings.BROKER, settings.BOOKIE):
        both = set(component.alias_map()) & set(component.accepted_map())
        assert both == set(), f"{component.name}: remove the accepted rows of {both}"
        keys = [row.key for row in component.accepted]
        assert len(keys) == len(set(keys))


def test_every_accepted_row_fits_the_shipped_values() -> None:
    """The values Pulsar ships are accepted: a row that refuses its own default is wrong."""
    for name in BROKER_FILES:
        for key, value in settings.read_config_file(DATA / name).items():
            row = settings.BROKER.accepted_map().get(key)
            if row is not None and value:
                assert row.fits(value), (name, key, value)


@pytest.mark.parametrize(
    ("line", "words"),
    [
        (
            "subscriptionTypesEnabled=Exclusive",
            ["subscriptionTypesEnabled=Exclusive", "Key_Shared"],
        ),
        ("maxSubscriptionsPerTopic=5", ["maxSubscriptionsPerTopic=5", "0 (no limit)"]),
        ("transactionCoordinatorEnabled=true", ["transactionCoordinatorEnabled=true", "'false'"]),
        ("functionsWorkerEnabled=true", ["functionsWorkerEnabled=true", "'false'"]),
        ("enableNonPersistentTopics=false", ["enableNonPersistentTopics=false", "'true'"]),
        ("brokerMaxConnections=many", ["brokerMaxConnections=many", "0 (no limit)"]),
        ("httpMaxRequestSize=1000", ["httpMaxRequestSize=1000", "8388608 or more"]),
    ],
)
def test_a_value_asking_for_what_magnetar_does_not_do_is_refused(
    tmp_path: pathlib.Path, line: str, words: list[str]
) -> None:
    path = tmp_path / "broker.conf"
    path.write_text(line + "\n")
    with pytest.raises(settings.RefusedSettingError) as info:
        BrokerConfig.load(path)
    for word in words:
        assert word in str(info.value)


def test_an_unknown_key_is_refused_even_when_empty(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "broker.conf"
    path.write_text("notAPulsarKey=\nclusterName=\n")
    with pytest.raises(settings.UnknownSettingError, match="notAPulsarKey"):
        BrokerConfig.load(path)


def test_an_empty_value_keeps_the_default(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "broker.conf"
    path.write_text("clusterName=\nbrokerServicePortTls=\nnumIOThreads=\n")
    config = BrokerConfig.load(path)
    assert (config.cluster_name, config.broker_service_port_tls) == ("standalone", -1)


def test_accepted_keys_are_logged_with_their_reason(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "broker.conf"
    path.write_text("numIOThreads=8\nwebSocketServiceEnabled=true\nclusterName=c1\n")
    values = settings.read_config_file(path)
    accepted = settings.accepted_keys(settings.BROKER, values, settings.field_types(BrokerConfig))
    assert [(a.key, a.row.warn) for a in accepted] == [
        ("numIOThreads", False),
        ("webSocketServiceEnabled", True),
    ]
    lines = settings.accepted_log_lines(settings.BROKER, accepted)
    assert lines[0].startswith("numIOThreads=8 accepted")
    assert "event loop" in lines[0]


def test_an_inactive_topic_mode_pulsar_lacks_is_refused(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "broker.conf"
    path.write_text("brokerDeleteInactiveTopicsMode=delete_always\n")
    with pytest.raises(ValueError, match="brokerDeleteInactiveTopicsMode"):
        BrokerConfig.load(path)


def test_a_bookie_with_two_journal_directories_is_refused(tmp_path: pathlib.Path) -> None:
    from magnetar.bookie.main import StartRefused, _one_directory

    assert _one_directory("journalDirectories", "/a") == "/a"
    with pytest.raises(StartRefused, match="one directory"):
        _one_directory("journalDirectories", "/a,/b")


def test_deprecated_unset_values_leave_the_current_setting(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "broker.conf"
    path.write_text(
        "metadataStoreSessionTimeoutMillis=12000\nzooKeeperSessionTimeoutMillis=-1\n"
        "backlogQuotaDefaultLimitBytes=5000\nbacklogQuotaDefaultLimitGB=-1\n"
    )
    config = BrokerConfig.load(path)
    assert config.metadata_store_session_timeout_millis == 12000
    assert config.backlog_quota_default_limit_bytes == 5000


def test_the_offload_keys_configure_the_brokers_offload_policies(tmp_path: pathlib.Path) -> None:
    """Pulsar's broker.conf offload keys are implemented: they make the broker level of the
    offload policies; a driver without what it needs stops the broker at start."""
    path = tmp_path / "broker.conf"
    path.write_text("managedLedgerOffloadDriver=aws-s3\n")
    with pytest.raises(ValueError, match="s3ManagedLedgerOffloadBucket"):
        broker_level(BrokerConfig.load(path)).resolve()
    path.write_text(
        "managedLedgerOffloadDriver=aws-s3\n"
        "s3ManagedLedgerOffloadBucket=b\n"
        "s3ManagedLedgerOffloadRegion=eu-west-1\n"
        "managedLedgerOffloadAutoTriggerSizeThresholdBytes=1048576\n"
        "managedLedgerOffloadDeletionLagMs=0\n"
        "managedLedgerOffloadMaxBlockSizeInBytes=10485760\n"
        "fileSystemProfilePath=conf/filesystem_offload_core_site.xml\n"
    )
    resolved = broker_level(BrokerConfig.load(path)).resolve()
    assert resolved is not None
    assert (resolved.bucket, resolved.region) == ("b", "eu-west-1")
    assert resolved.threshold_bytes == 1 << 20 and resolved.deletion_lag_ms == 0
    assert resolved.max_block_size_bytes == 10 << 20  # the universal name, none more specific
    assert broker_level(BrokerConfig()).resolve() is None  # Pulsar's default: no driver
