"""Operator configuration: Pulsar/BookKeeper camelCase names, MAGNETAR_* variables, unknown
keys refused, the effective configuration printed with secrets masked (magnetar.settings)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import pathlib
import subprocess
import sys

import pytest

from magnetar import settings
from magnetar.bookie.main import BookieConfig, build_parser, load_config
from magnetar.broker.config import BrokerConfig

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _bookie_args(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(list(argv))


# -- the one table ---------------------------------------------------------------------------


def test_every_broker_setting_has_its_pulsar_name_in_the_table() -> None:
    named = {a.name for a in settings.BROKER_ALIASES}
    missing = [f.name for f in dataclasses.fields(BrokerConfig) if f.name not in named]
    assert missing == [], f"add these to settings.BROKER_ALIASES: {missing}"


def test_every_alias_names_an_existing_setting() -> None:
    broker = {f.name for f in dataclasses.fields(BrokerConfig)}
    bookie = {f.name for f in dataclasses.fields(BookieConfig)}
    assert {a.name for a in settings.BROKER_ALIASES} <= broker
    assert {a.name for a in settings.BOOKIE_ALIASES} <= bookie
    aliases = [a.alias for a in settings.BROKER_ALIASES]
    assert len(aliases) == len(set(aliases))


def test_the_operations_chapter_shows_the_current_table() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "settings_table.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


# -- Pulsar's broker.conf ----------------------------------------------------------------------


def test_a_pulsar_broker_conf_with_camel_case_names_loads(tmp_path: pathlib.Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text(
        "# Pulsar's broker.conf\n"
        "clusterName=prod\n"
        "metadataStoreUrl=zk:zk1:2181,zk2:2181/pulsar\n"
        "brokerServicePort=6651\n"
        "webServicePort=8081\n"
        "advertisedAddress=\n"  # empty: the default, as in Pulsar
        "managedLedgerDefaultEnsembleSize=3\n"
        "managedLedgerDefaultWriteQuorum=2\n"
        "managedLedgerCacheSizeMB=64\n"
        "brokerDeduplicationEnabled=true\n"
        "brokerDeduplicationEntriesInterval=250\n"
        "brokerServiceCompactionMonitorIntervalInSeconds=30\n"
    )
    config = BrokerConfig.load(conf)
    assert config.cluster_name == "prod"
    assert config.metadata_store_url == "zk://zk1:2181,zk2:2181/pulsar"
    assert config.broker_service_port == 6651
    assert config.web_service_port == 8081
    assert config.advertised_address == BrokerConfig().advertised_address
    assert config.managed_ledger_default_ensemble_size == 3
    assert config.managed_ledger_default_write_quorum == 2
    assert config.managed_ledger_cache_size_mb == 64
    assert config.broker_deduplication_enabled is True
    assert config.broker_deduplication_entries_interval == 250
    assert config.broker_service_compaction_monitor_interval_seconds == 30


def test_a_deduplication_snapshot_interval_below_one_is_refused(tmp_path: pathlib.Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text("brokerDeduplicationEntriesInterval=0\n")
    with pytest.raises(ValueError, match="brokerDeduplicationEntriesInterval"):
        BrokerConfig.load(conf)


def test_zookeeper_servers_maps_onto_the_metadata_store_url(tmp_path: pathlib.Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text("zookeeperServers=zk1:2181,zk2:2181\n")
    assert BrokerConfig.load(conf).metadata_store_url == "zk://zk1:2181,zk2:2181"


def test_snake_kebab_and_camel_names_mix_in_yaml(tmp_path: pathlib.Path) -> None:
    conf = tmp_path / "broker.yaml"
    conf.write_text("brokerServicePort: 7000\nweb-service-port: 7001\ncluster_name: y\n")
    config = BrokerConfig.load(conf)
    assert (config.broker_service_port, config.web_service_port, config.cluster_name) == (
        7000,
        7001,
        "y",
    )


def test_unknown_keys_are_refused_naming_each_with_a_suggestion(tmp_path: pathlib.Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text("brokerServicePort=6651\nbrokerServicePrt=1\nnoSuchSetting=2\n")
    with pytest.raises(settings.UnknownSettingError) as err:
        BrokerConfig.load(conf)
    message = str(err.value)
    assert "unknown broker configuration keys" in message
    assert str(conf) in message
    assert "brokerServicePrt (did you mean brokerServicePort?)" in message
    assert "noSuchSetting" in message


def test_a_bad_value_names_the_setting(tmp_path: pathlib.Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text("brokerServicePort=sixty\n")
    with pytest.raises(ValueError, match=r"broker_service_port: expected int, got 'sixty'"):
        BrokerConfig.load(conf)


# -- MAGNETAR_* environment variables ----------------------------------------------------------


def test_environment_overrides_the_file_and_flags_override_the_environment(
    tmp_path: pathlib.Path,
) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text("brokerServicePort=6651\nclusterName=from-file\n")
    env = {
        "MAGNETAR_BROKER_SERVICE_PORT": "6652",
        "MAGNETAR_CLUSTER_NAME": "from-env",
        "MAGNETAR_ALLOW_AUTO_TOPIC_CREATION": "false",
        "MAGNETAR_BOOKIE_PORT": "3999",  # the bookie's, ignored by the broker
        "PATH": "/bin",
    }
    config = BrokerConfig.load(conf, environ=env, broker_service_port=6653)
    assert config.broker_service_port == 6653
    assert config.cluster_name == "from-env"
    assert config.allow_auto_topic_creation is False
    assert BrokerConfig.load(conf, environ=env).broker_service_port == 6652


def test_every_broker_setting_is_reachable_through_the_environment() -> None:
    defaults = BrokerConfig()
    for f in dataclasses.fields(BrokerConfig):
        value = getattr(defaults, f.name)
        changed = (
            (not value)
            if isinstance(value, bool)
            else (f"{value}x" if isinstance(value, str) else 5 if value is None else value + 1)
        )
        if f.name == "broker_delete_inactive_topics_mode":  # one of two modes
            changed = "delete_when_subscriptions_caught_up"
        if f.name == "managed_ledger_offload_worker":  # one of three modes
            changed = "off"
        environ = {f"MAGNETAR_{f.name.upper()}": str(changed)}
        if f.name in ("advertised_listeners", "internal_listener_name"):  # checked at load
            changed = "x" if f.name == "internal_listener_name" else "x:pulsar://h:1"
            environ = {
                "MAGNETAR_ADVERTISED_LISTENERS": "x:pulsar://h:1",
                "MAGNETAR_INTERNAL_LISTENER_NAME": "x",
            }
        config = BrokerConfig.load(environ=environ)
        assert getattr(config, f.name) == changed, f.name


def test_unknown_environment_variables_are_refused() -> None:
    with pytest.raises(
        settings.UnknownSettingError,
        match=r"MAGNETAR_BROKER_SERVICE_PROT \(did you mean MAGNETAR_BROKER_SERVICE_PORT\?\)",
    ):
        BrokerConfig.load(environ={"MAGNETAR_BROKER_SERVICE_PROT": "1"})
    # Tools' and tests' own variables are not settings.
    BrokerConfig.load(environ={"MAGNETAR_CHAOS_SEED": "1", "MAGNETAR_LOG_LEVEL": "DEBUG"})


def test_bookie_reads_magnetar_bookie_variables_and_bookkeeper_names(
    tmp_path: pathlib.Path,
) -> None:
    conf = tmp_path / "bk_server.conf"
    conf.write_text(
        "bookiePort=3999\n"
        "metadataServiceUri=zk+hierarchical://zk1:2181;zk2:2181/ledgers\n"
        "gcWaitTime=30000\n"
        "journalSyncData=true\n"
    )
    env = {
        "MAGNETAR_BOOKIE_HTTP_PORT": "8010",
        "MAGNETAR_BOOKIE_ENGINE": '{"checkpoint_interval_ms": 5000}',
        "MAGNETAR_BROKER_SERVICE_PORT": "1",  # the broker's, ignored by the bookie
    }
    config = load_config(_bookie_args("--config", str(conf), "--host", "127.0.0.2"), env)
    assert config.port == 3999
    assert config.metadata == "zk://zk1:2181,zk2:2181"
    assert config.gc_interval_s == 30.0
    assert config.journal_sync is True
    assert config.http_port == 8010
    assert config.engine == {"checkpoint_interval_ms": 5000}
    assert config.host == "127.0.0.2"
    flagged = load_config(_bookie_args("--http-port", "8011"), env)
    assert flagged.http_port == 8011


def test_bookie_refuses_unknown_keys_and_variables(tmp_path: pathlib.Path) -> None:
    conf = tmp_path / "bookie.yaml"
    conf.write_text("data_dirr: /x\n")
    with pytest.raises(
        settings.UnknownSettingError, match=r"data_dirr \(did you mean data_dir\?\)"
    ):
        load_config(_bookie_args("--config", str(conf)), {})
    with pytest.raises(settings.UnknownSettingError, match="MAGNETAR_BOOKIE_PORTT"):
        load_config(_bookie_args(), {"MAGNETAR_BOOKIE_PORTT": "1"})


def test_bookie_process_exits_2_with_a_clear_message_on_an_unknown_variable() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "magnetar.bookie", "--storage", "memory"],
        capture_output=True,
        text=True,
        env={"MAGNETAR_BOOKIE_NO_SUCH": "1", "PATH": "/usr/bin:/bin"},
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert "unknown bookie environment variables: MAGNETAR_BOOKIE_NO_SUCH" in result.stderr
    assert "Traceback" not in result.stderr


def test_broker_process_exits_2_with_a_clear_message_on_an_unknown_key(
    tmp_path: pathlib.Path,
) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text("brokerServicePort=6651\nfoo=bar\n")
    result = subprocess.run(
        [sys.executable, "-m", "magnetar.broker.cli", "broker", "--config", str(conf)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert "unknown broker configuration keys" in result.stderr
    assert "Traceback" not in result.stderr


# -- the effective configuration, masked -------------------------------------------------------


def test_credentials_in_urls_and_secret_names_are_masked() -> None:
    config = BrokerConfig(metadata_store_url="zk://admin:hunter2@zk1:2181/pulsar")
    line = config.effective_config_line()
    assert "hunter2" not in line and "admin" not in line
    shown = json.loads(line.removeprefix("effective configuration "))
    assert shown["metadata_store_url"] == "zk://******@zk1:2181/pulsar"
    assert shown["broker_service_port"] == 6650
    assert set(shown) == {f.name for f in dataclasses.fields(BrokerConfig)}

    @dataclasses.dataclass
    class WithSecret:
        auth_token: str = "s3cr3t"
        engine: dict[str, str] = dataclasses.field(default_factory=lambda: {"password": "p"})

    masked = settings.masked(settings.BOOKIE, WithSecret())
    assert masked == {"auth_token": settings.MASK, "engine": {"password": settings.MASK}}
