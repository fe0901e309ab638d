"""Brokers authenticate to each other with their own role (Pulsar's ``brokerClient*``
settings): a real two-broker cluster (ZooKeeper, two bookie processes, two ``magnetar
broker`` processes) with token authentication and authorization on. The load manager's
leader splits bundles owned by the other broker through that broker's admin REST: with the
broker-client token (a superuser role) the splits happen; without it they are refused with a
clear log line, and both brokers keep serving."""

from __future__ import annotations

import json
import pathlib
import re
import subprocess
import urllib.error
import uuid
from collections.abc import Iterator

import pulsar
import pytest
from support.bookies import BookieFactory
from support.broker_process import BrokerProcess
from support.cluster import wait_until
from support.net import free_port
from support.security import TokenKit, issue, make_ca, make_token_kit
from support.zookeeper import ZooKeeperServer

pytestmark = pytest.mark.integration

SPLITS = (
    "metadata_store_session_timeout_millis=30000\n"
    "load_balancer_report_update_min_interval_millis=300\n"
    "load_balancer_split_interval_minutes=0.02\n"
    "load_balancer_shedding_enabled=false\n"
    "load_balancer_namespace_bundle_max_topics=1\n"
)


class SecuredCluster:
    def __init__(self, zk: ZooKeeperServer, bookies: BookieFactory, tmp: pathlib.Path) -> None:
        self.metadata = f"{zk.url}/broker-client-{uuid.uuid4().hex[:8]}"
        bookies.start_many(2, metadata=self.metadata)
        self.tmp = tmp
        self.kit: TokenKit = make_token_kit(tmp)
        self.admin_token = self.kit.token("admin")
        token_file = tmp / "broker.token"
        token_file.write_text(self.kit.token("broker-role") + "\n")
        self.token_file = token_file
        self.brokers: list[BrokerProcess] = []
        self.clients: list[pulsar.Client] = []

    def security(self) -> str:
        return (
            "authenticationEnabled=true\nauthenticationProviders=token\n"
            f"tokenSecretKey={self.kit.url}\n"
            "authorizationEnabled=true\nsuperUserRoles=admin,broker-role\n"
        )

    def broker_client(self) -> str:
        return (
            "brokerClientAuthenticationPlugin="
            "org.apache.pulsar.client.impl.auth.AuthenticationToken\n"
            f"brokerClientAuthenticationParameters=file://{self.token_file}\n"
        )

    def start_broker(self, extra: str, security: str | None = None) -> BrokerProcess:
        b = BrokerProcess(
            self.tmp,
            f"broker-{len(self.brokers) + 1}",
            self.metadata,
            extra_config=SPLITS + (security or self.security()) + extra,
            token=self.admin_token,
        )
        self.brokers.append(b)
        return b.start(timeout_s=60)

    def client(self, url: str) -> pulsar.Client:
        c = pulsar.Client(
            url,
            authentication=pulsar.AuthenticationToken(self.admin_token),
            operation_timeout_seconds=60,
        )
        self.clients.append(c)
        return c

    def close(self) -> None:
        for c in self.clients:
            c.close()
        for b in self.brokers:
            b.kill()


@pytest.fixture
def secured(
    zookeeper_server: ZooKeeperServer, bookie_factory: BookieFactory, tmp_path: pathlib.Path
) -> Iterator[SecuredCluster]:
    c = SecuredCluster(zookeeper_server, bookie_factory, tmp_path)
    try:
        yield c
    finally:
        c.close()


def _leader_and_other(c: SecuredCluster) -> tuple[BrokerProcess, BrokerProcess]:
    first = c.brokers[0]
    wait_until(
        lambda: len(json.loads(first.admin("GET", "/admin/v2/brokers/test"))) == 2,
        60,
        "two load reports",
    )
    lid = json.loads(first.admin("GET", "/admin/v2/brokers/leaderBroker"))["brokerId"]
    leader = next(b for b in c.brokers if lid == f"127.0.0.1:{b.web_port}")
    other = next(b for b in c.brokers if b is not leader)
    return leader, other


def _load_topics(c: SecuredCluster) -> None:
    """16 topics over 8 bundles of ``public/sec``, placed by the leader over both brokers."""
    c.brokers[0].admin("PUT", "/admin/v2/namespaces/public/sec", {"bundles": {"numBundles": 8}})
    client = c.client("pulsar://" + ",".join(f"127.0.0.1:{b.port}" for b in c.brokers))
    for i in range(16):
        producer = client.create_producer(f"persistent://public/sec/t{i}", batching_enabled=False)
        producer.send(b"x")


def _remote_splits(leader: BrokerProcess, other: BrokerProcess) -> list[str]:
    """Bundles the leader decided to split on the other broker."""
    other_id = f"127.0.0.1:{other.web_port}"
    pattern = rf"splitting bundle (public/sec/\S+) on {re.escape(other_id)}:"
    return re.findall(pattern, leader.log_text())


def test_the_leader_splits_a_bundle_of_another_broker_with_its_own_role(
    secured: SecuredCluster,
) -> None:
    for _ in range(2):
        secured.start_broker(secured.broker_client())
    leader, other = _leader_and_other(secured)
    _load_topics(secured)
    wait_until(
        lambda: any(
            f"split bundle {b} at" in other.log_text() for b in _remote_splits(leader, other)
        ),
        180,
        "the other broker to split a bundle on the leader's request",
    )
    assert "refused with HTTP" not in leader.log_text()
    assert leader.running and other.running
    # the non-persistent listing asks each bundle's owner, with the broker's role too:
    # without it the other broker's answer is refused (401) and its topics are left out
    client = secured.client("pulsar://" + ",".join(f"127.0.0.1:{b.port}" for b in (leader, other)))
    np_topics = sorted(f"non-persistent://public/sec/np{i}" for i in range(8))
    producers = [client.create_producer(t) for t in np_topics]

    def listed_by_both() -> bool:
        return all(
            sorted(json.loads(b.admin("GET", "/admin/v2/non-persistent/public/sec"))) == np_topics
            for b in (leader, other)
        )

    wait_until(listed_by_both, 90, "both brokers to list every non-persistent topic")
    assert len(producers) == len(np_topics)
    # an HTTP lookup of an unowned bundle at the other broker is asked of the leader, with
    # the broker's role too
    url = other.lookup("persistent/public/default/looked-up-through-the-leader")
    assert url in (leader.service_url, other.service_url)


def test_over_https_the_leader_authenticates_with_its_certificate(
    secured: SecuredCluster,
) -> None:
    """``brokerClientTlsEnabled``: calls go to the owner's HTTPS URL (from the ownership data),
    where the TLS provider takes the role from the broker's client certificate; over plain
    HTTP that certificate could not be presented and the call would be refused."""
    tmp = secured.tmp
    ca, ca_path = make_ca(tmp, "cluster")
    server = issue(ca, ca_path, tmp, "server", "127.0.0.1", "localhost")
    me = issue(ca, ca_path, tmp, "broker-client", "broker-role", common_name="broker-role")
    tls_client = (
        "brokerClientAuthenticationPlugin=org.apache.pulsar.client.impl.auth.AuthenticationTls\n"
        f"brokerClientAuthenticationParameters=tlsCertFile:{me.cert},tlsKeyFile:{me.key}\n"
        "brokerClientTlsEnabled=true\n"
        f"brokerClientTrustCertsFilePath={ca_path}\n"
    )
    for _ in range(2):
        security = (
            secured.security().replace(
                "authenticationProviders=token", "authenticationProviders=token,tls"
            )
            + f"webServicePortTls={free_port()}\n"
            f"tlsCertificateFilePath={server.cert}\ntlsKeyFilePath={server.key}\n"
            f"tlsTrustCertsFilePath={ca_path}\n"
        )
        secured.start_broker(tls_client, security)
    leader, other = _leader_and_other(secured)
    _load_topics(secured)
    wait_until(
        lambda: any(
            f"split bundle {b} at" in other.log_text() for b in _remote_splits(leader, other)
        ),
        180,
        "the other broker to split a bundle on the leader's request over HTTPS",
    )
    assert "refused with HTTP" not in leader.log_text()


def test_without_broker_client_settings_the_split_is_refused_and_logged(
    secured: SecuredCluster,
) -> None:
    for _ in range(2):
        secured.start_broker("")
    leader, other = _leader_and_other(secured)
    _load_topics(secured)
    refused = re.compile(
        r"split of public/sec/\S+ failed: PUT \S+ refused with HTTP 401 .*"
        r"brokerClientAuthenticationPlugin"
    )
    wait_until(
        lambda: bool(_remote_splits(leader, other)) and refused.search(leader.log_text()),
        180,
        "the leader's split of a bundle on the other broker to be refused",
    )
    assert "split bundle public/sec/" not in other.log_text()
    # an HTTP lookup the other broker must ask of the leader: 503 (clients retry), and why
    with pytest.raises(urllib.error.HTTPError) as lookup:
        other.lookup("persistent/public/default/looked-up-through-the-leader")
    assert lookup.value.code == 503
    assert re.search(r"lookup through the leader \S+: HTTP 401 .*superUserRoles", other.log_text())
    assert "Traceback" not in leader.log_text() + other.log_text()
    assert leader.running and other.running
    # both keep serving
    client = secured.client(leader.service_url)
    producer = client.create_producer("persistent://public/sec/after", batching_enabled=False)
    producer.send(b"still serving")


def test_a_bad_broker_client_plugin_stops_the_start_with_a_clear_error(
    secured: SecuredCluster,
) -> None:
    b = BrokerProcess(
        secured.tmp,
        "bad",
        secured.metadata,
        extra_config=SPLITS + "brokerClientAuthenticationPlugin=kerberos\n",
    )
    done = subprocess.run(b.cmd, check=False, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "brokerClientAuthenticationPlugin 'kerberos' is not supported" in done.stderr
