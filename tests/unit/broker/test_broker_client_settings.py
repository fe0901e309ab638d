"""The broker-client settings (Pulsar's ``brokerClient*``): every spelling of the token and
TLS parameters Pulsar takes, the errors for unusable ones, the token file read per call, the
HTTPS URL choice, and the parameters masked in the effective-configuration line."""

from __future__ import annotations

import base64
import json
import pathlib

import pytest
import trustme

from magnetar.broker.config import BrokerConfig
from magnetar.broker.security.broker_client import BrokerClientAuth, BrokerClientConfigError

TOKEN_CLASS = "org.apache.pulsar.client.impl.auth.AuthenticationToken"


def _auth(**settings: object) -> BrokerClientAuth:
    return BrokerClientAuth.from_config(BrokerConfig(**settings))


def test_no_settings_send_no_credentials() -> None:
    assert _auth().request_options() == {"headers": {}, "ssl": True}


@pytest.mark.parametrize(
    ("plugin", "params"),
    [
        ("token", "token:abc.def.ghi"),
        (TOKEN_CLASS, "token:abc.def.ghi"),
        ("AuthenticationToken", json.dumps({"token": "abc.def.ghi"})),
        ("token", "abc.def.ghi"),
    ],
)
def test_token_spellings(plugin: str, params: str) -> None:
    auth = _auth(
        broker_client_authentication_plugin=plugin,
        broker_client_authentication_parameters=params,
    )
    assert auth.headers() == {"Authorization": "Bearer abc.def.ghi"}
    assert "abc.def.ghi" not in repr(auth)


@pytest.mark.parametrize(
    ("plugin", "params"),
    [
        (
            "org.apache.pulsar.client.impl.auth.AuthenticationBasic",
            '{"userId": "broker", "password": "p:w"}',
        ),
        ("basic", "userId:broker,password:p:w"),
    ],
)
def test_basic_spellings(plugin: str, params: str) -> None:
    auth = _auth(
        broker_client_authentication_plugin=plugin,
        broker_client_authentication_parameters=params,
    )
    assert auth.headers() == {"Authorization": "Basic " + base64.b64encode(b"broker:p:w").decode()}
    assert "p:w" not in repr(auth) and "basic" in repr(auth)


def test_a_token_file_is_read_for_every_call(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "broker.token"
    path.write_text("first\n")
    auth = _auth(
        broker_client_authentication_plugin=TOKEN_CLASS,
        broker_client_authentication_parameters=f"file://{path}",
    )
    assert auth.headers()["Authorization"] == "Bearer first"
    path.write_text("rotated\n")
    assert auth.headers()["Authorization"] == "Bearer rotated"


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"broker_client_authentication_plugin": "kerberos"}, "'kerberos' is not supported"),
        ({"broker_client_authentication_plugin": "token"}, "needs brokerClientAuthentication"),
        ({"broker_client_authentication_plugin": "tls"}, "needs a certificate and key"),
        ({"broker_client_authentication_plugin": "basic"}, "needs brokerClientAuthentication"),
        (
            {
                "broker_client_authentication_plugin": "token",
                "broker_client_authentication_parameters": "file:///no/such/token",
            },
            "cannot read the broker client token file",
        ),
        (
            {"broker_client_tls_enabled": True, "broker_client_trust_certs_file_path": "/nope"},
            "broker client TLS files",
        ),
    ],
)
def test_unusable_settings_are_refused_at_start(settings: dict[str, object], message: str) -> None:
    with pytest.raises(BrokerClientConfigError, match=message):
        _auth(**settings)


def test_tls_authentication_and_https(tmp_path: pathlib.Path) -> None:
    ca = trustme.CA()
    ca_path = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_path))
    cert = ca.issue_cert("broker", common_name="broker")
    cert_path, key_path = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert.cert_chain_pems[0].write_to_path(str(cert_path))
    cert.private_key_pem.write_to_path(str(key_path))
    auth = _auth(
        broker_client_authentication_plugin="org.apache.pulsar.client.impl.auth.AuthenticationTls",
        broker_client_authentication_parameters=f"tlsCertFile:{cert_path},tlsKeyFile:{key_path}",
        broker_client_tls_enabled=True,
        broker_client_trust_certs_file_path=str(ca_path),
    )
    options = auth.request_options()
    assert options["headers"] == {}
    assert options["ssl"] is not True  # a context with the CA and the client certificate
    assert auth.pick_url("http://b:8080", "https://b:8443") == "https://b:8443"
    assert auth.pick_url("http://b:8080", "") == "http://b:8080"
    assert _auth().pick_url("http://b:8080", "https://b:8443") == "http://b:8080"


def test_the_parameters_are_masked_in_the_effective_configuration() -> None:
    config = BrokerConfig.load(
        None,
        broker_client_authentication_plugin="token",
        broker_client_authentication_parameters="token:secret-jwt",
    )
    assert "secret-jwt" not in config.effective_config_line()


def test_pulsar_names_are_read_from_broker_conf(tmp_path: pathlib.Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text(
        f"brokerClientAuthenticationPlugin={TOKEN_CLASS}\n"
        "brokerClientAuthenticationParameters=token:xyz\n"
        "brokerClientTlsEnabled=true\n"
        "brokerClientTrustCertsFilePath=/ca.pem\n"
        "brokerClientCertificateFilePath=/c.pem\n"
        "brokerClientKeyFilePath=/k.pem\n"
    )
    c = BrokerConfig.load(conf)
    assert c.broker_client_authentication_plugin == TOKEN_CLASS
    assert c.broker_client_authentication_parameters == "token:xyz"
    assert c.broker_client_tls_enabled is True
    assert (
        c.broker_client_trust_certs_file_path,
        c.broker_client_certificate_file_path,
        c.broker_client_key_file_path,
    ) == ("/ca.pem", "/c.pem", "/k.pem")
