"""Basic authentication on a real standalone configured with Pulsar's names
(``authenticationProviders=...AuthenticationProviderBasic``, ``basicAuthConf`` = an htpasswd
file): the official client's ``AuthenticationBasic`` produces and consumes, a wrong password
is refused with an authentication error, and the admin REST API takes ``Authorization:
Basic``."""

from __future__ import annotations

import base64
import io
import pathlib
from collections.abc import Iterator

import pulsar
import pytest
from passlib.hash import apr_md5_crypt, des_crypt
from support.admin import http
from support.standalone import StandaloneProcess

from magnetar.client import AuthenticationBasic
from magnetar.client.magctl.cli import run
from magnetar.client.sync import Client as MagnetarClient

pytestmark = pytest.mark.compat


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProcess]:
    base = tmp_path_factory.mktemp("basic")
    htpasswd = base / ".htpasswd"
    htpasswd.write_text(
        f"alice:{apr_md5_crypt.hash('wonderland')}\nbob:{des_crypt.hash('builder')}\n"
    )
    sa = StandaloneProcess(
        base / "data",
        base / "standalone.log",
        config={
            "authenticationEnabled": "true",
            "authenticationProviders": (
                "org.apache.pulsar.broker.authentication.AuthenticationProviderBasic"
            ),
            "basicAuthConf": str(htpasswd),
        },
        authorization=basic("alice", "wonderland"),
    ).start()
    try:
        yield sa
    finally:
        sa.stop()


def client(sa: StandaloneProcess, user: str, password: str, timeout_s: int = 10) -> pulsar.Client:
    return pulsar.Client(
        sa.service_url,
        authentication=pulsar.AuthenticationBasic(user, password),
        operation_timeout_seconds=timeout_s,
        log_conf_file_path=None,
    )


def test_the_official_client_authenticates_with_a_user_and_password(
    server: StandaloneProcess,
) -> None:
    topic = "persistent://public/default/basic-auth"
    with_alice = client(server, "alice", "wonderland")
    with_bob = client(server, "bob", "builder")
    try:
        consumer = with_bob.subscribe(topic, "s")
        with_alice.create_producer(topic).send(b"hello")
        assert consumer.receive(10_000).data() == b"hello"
    finally:
        with_alice.close()
        with_bob.close()
    # magnetar.client's AuthenticationBasic, the same credentials
    with MagnetarClient(
        server.service_url, authentication=AuthenticationBasic("bob", "builder")
    ) as ours:
        consumer = ours.subscribe(topic, "m")
        ours.create_producer(topic).send(b"from magnetar.client")
        assert consumer.receive(10_000).data() == b"from magnetar.client"


def test_a_wrong_password_is_refused(server: StandaloneProcess) -> None:
    """The broker answers ERROR(AuthenticationError) and closes, as Pulsar; this C++ client
    retries until its operation timeout, so the refusal is read from the broker's log."""
    wrong = client(server, "alice", "looking-glass", timeout_s=3)
    try:
        with pytest.raises((pulsar.AuthenticationError, pulsar.Timeout, pulsar.ConnectError)):
            wrong.create_producer("persistent://public/default/basic-refused")
    finally:
        wrong.close()
    assert "unknown user or invalid password for 'alice'" in server.log_path.read_text()


def test_the_admin_api_takes_basic_credentials(server: StandaloneProcess) -> None:
    path = "/admin/v2/clusters"
    status, body = http(
        server.web_url, "GET", path, headers={"Authorization": basic("bob", "builder")}
    )
    assert status == 200 and body == ["standalone"]
    status, _ = http(server.web_url, "GET", path, headers={"Authorization": basic("bob", "nope")})
    assert status == 401
    status, _ = http(server.web_url, "GET", path)
    assert status == 401


def test_magctl_with_a_user_and_password(
    server: StandaloneProcess, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``magctl --username/--password``, a context made with ``config set-context
    --username/--password`` (its password hidden by ``config view``), and a Pulsar
    ``client.conf`` with ``AuthenticationBasic`` imported as a context."""
    monkeypatch.setenv("MAGCTL_CONFIG", str(tmp_path / "magctl-config"))

    def magctl(*argv: str) -> tuple[int, str, str]:
        out, err = io.StringIO(), io.StringIO()
        code = run(list(argv), out=out, err=err)
        return code, out.getvalue(), err.getvalue()

    url = server.web_url
    code, out, _ = magctl(
        "get", "clusters", "-s", url, "--username", "bob", "--password", "builder"
    )
    assert code == 0 and "standalone" in out
    code, _, err = magctl("get", "clusters", "-s", url, "--username", "bob", "--password", "no")
    assert code != 0 and "Traceback" not in err and err.strip()
    code, _, err = magctl("get", "clusters", "-s", url, "--username", "bob")
    assert code != 0 and "--username and --password go together" in err
    assert (
        magctl(
            "config",
            "set-context",
            "lab",
            "--admin-url",
            url,
            "--username",
            "alice",
            "--password",
            "wonderland",
        )[0]
        == 0
    )
    assert magctl("config", "use-context", "lab")[0] == 0
    code, out, err = magctl("get", "clusters")
    assert code == 0 and "standalone" in out, err
    code, out, _ = magctl("config", "view")
    assert "wonderland" not in out and "REDACTED" in out
    conf = tmp_path / "client.conf"
    conf.write_text(
        f"webServiceUrl={url}\n"
        "authPlugin=org.apache.pulsar.client.impl.auth.AuthenticationBasic\n"
        'authParams={"userId":"bob","password":"builder"}\n'
    )
    assert magctl("config", "import", str(conf), "--name", "imported")[0] == 0
    code, out, err = magctl("get", "clusters", "--context", "imported")
    assert code == 0 and "standalone" in out, err
