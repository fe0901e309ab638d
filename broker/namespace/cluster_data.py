"""A cluster's registration (Pulsar's ``ClusterData``): how other clusters reach it.

Owns: ``check_cluster_data`` (a ``PUT``/``POST /admin/v2/clusters/{c}`` body, checked as
Pulsar's ``ClusterDataImpl.checkPropertiesIfPresent`` does, plus the refusals of what
Magnetar does not do: a proxy between clusters, Java key stores) and ``ClusterData``, the
typed view a replicator uses to reach a remote cluster (its URLs, the credentials it
presents, the TLS trust it applies). Field names are Pulsar's, so ``pulsar-admin clusters
create`` and Pulsar's JSON work unchanged; unknown fields are kept as given (Pulsar's mapper
ignores them), every known field is type-checked.

Invariants: a stored document passed ``check_cluster_data``; ``ClusterData.from_json`` of
such a document never fails. Must not know: HTTP, the metadata store, the client.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from magnetar.broker.errors import InvalidResource, PreconditionFailed

CLUSTER_DATA_BYTES_MAX = 64 * 1024

_URLS: dict[str, tuple[tuple[str, ...], str]] = {
    "serviceUrl": (("http",), "Illegal service url, example: http://pulsar.example.com:8080"),
    "serviceUrlTls": (
        ("https",),
        "Illegal service tls url, example: https://pulsar.example.com:8443",
    ),
    "brokerServiceUrl": (
        ("pulsar",),
        "Illegal broker service url, example: pulsar://pulsar.example.com:6650",
    ),
    "brokerServiceUrlTls": (
        ("pulsar+ssl",),
        "Illegal broker service tls url, example: pulsar+ssl://pulsar.example.com:6651",
    ),
    "proxyServiceUrl": (
        ("pulsar", "pulsar+ssl"),
        "Illegal proxy service url, example: pulsar+ssl://ats-proxy.example.com:4443 "
        "or pulsar://ats-proxy.example.com:4080",
    ),
}
"""Each URL field, when present, must have its scheme (``pulsar://b1:6650,b2:6650`` lists
several hosts, as Pulsar's)."""

_STRINGS = (
    "authenticationPlugin",
    "authenticationParameters",
    "brokerClientTlsTrustStoreType",
    "brokerClientTlsTrustStore",
    "brokerClientTlsTrustStorePassword",
    "brokerClientTlsKeyStoreType",
    "brokerClientTlsKeyStore",
    "brokerClientTlsKeyStorePassword",
    "brokerClientTrustCertsFilePath",
    "brokerClientCertificateFilePath",
    "brokerClientKeyFilePath",
    "listenerName",
    "proxyProtocol",
)
_BOOLEANS = (
    "brokerClientTlsEnabled",
    "tlsAllowInsecureConnection",
    "brokerClientTlsEnabledWithKeyStore",
)

UNSUPPORTED_PROXY = (
    "proxyServiceUrl is not supported: Magnetar's replicators connect to the remote "
    "cluster's brokerServiceUrl / brokerServiceUrlTls directly (leave it empty)"
)
UNSUPPORTED_KEYSTORE = (
    "Java key stores are not supported (brokerClientTlsEnabledWithKeyStore, "
    "brokerClientTlsTrustStore, brokerClientTlsKeyStore): give PEM files in "
    "brokerClientTrustCertsFilePath, brokerClientCertificateFilePath and "
    "brokerClientKeyFilePath"
)


def check_cluster_data(data: Any) -> dict[str, Any]:
    """A ``ClusterData`` body as it will be stored; ``InvalidResource`` (400) for a wrong
    shape or URL, ``PreconditionFailed`` (412) for what Magnetar does not support."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise InvalidResource("Cluster data must be a JSON object")
    if len(json.dumps(data)) > CLUSTER_DATA_BYTES_MAX:
        raise InvalidResource(f"Cluster data is larger than {CLUSTER_DATA_BYTES_MAX} bytes")
    for key, (schemes, message) in _URLS.items():
        value = data.get(key)
        if value is None or value == "":
            continue
        if not isinstance(value, str):
            raise InvalidResource(message)
        scheme, sep, rest = value.strip().partition("://")
        if not sep or scheme not in schemes or not rest.split("/")[0]:
            raise InvalidResource(message)
    for key in _STRINGS:
        if data.get(key) is not None and not isinstance(data[key], str):
            raise InvalidResource(f"{key} must be a string")
    for key in _BOOLEANS:
        if data.get(key) is not None and not isinstance(data[key], bool):
            raise InvalidResource(f"{key} must be a boolean")
    peers = data.get("peerClusterNames")
    if peers is not None and (
        not isinstance(peers, list) or not all(isinstance(p, str) for p in peers)
    ):
        raise InvalidResource("peerClusterNames must be a list of cluster names")
    if data.get("proxyServiceUrl") or data.get("proxyProtocol"):
        raise PreconditionFailed(UNSUPPORTED_PROXY)
    if (
        data.get("brokerClientTlsEnabledWithKeyStore")
        or data.get("brokerClientTlsTrustStore")
        or data.get("brokerClientTlsKeyStore")
    ):
        raise PreconditionFailed(UNSUPPORTED_KEYSTORE)
    return data


@dataclass(frozen=True, slots=True)
class ClusterData:
    """What a broker needs to reach a cluster, from its stored registration."""

    name: str
    service_url: str = ""
    service_url_tls: str = ""
    broker_service_url: str = ""
    broker_service_url_tls: str = ""
    authentication_plugin: str = ""
    authentication_parameters: str = field(default="", repr=False)
    broker_client_tls_enabled: bool = False
    tls_allow_insecure_connection: bool = False
    trust_certs_file_path: str = ""
    certificate_file_path: str = ""
    key_file_path: str = ""
    listener_name: str = ""
    peer_cluster_names: tuple[str, ...] = ()

    @classmethod
    def from_json(cls, name: str, data: dict[str, Any]) -> ClusterData:
        def text(key: str) -> str:
            value = data.get(key)
            return value if isinstance(value, str) else ""

        return cls(
            name,
            service_url=text("serviceUrl"),
            service_url_tls=text("serviceUrlTls"),
            broker_service_url=text("brokerServiceUrl"),
            broker_service_url_tls=text("brokerServiceUrlTls"),
            authentication_plugin=text("authenticationPlugin"),
            authentication_parameters=text("authenticationParameters"),
            broker_client_tls_enabled=data.get("brokerClientTlsEnabled") is True,
            tls_allow_insecure_connection=data.get("tlsAllowInsecureConnection") is True,
            trust_certs_file_path=text("brokerClientTrustCertsFilePath"),
            certificate_file_path=text("brokerClientCertificateFilePath"),
            key_file_path=text("brokerClientKeyFilePath"),
            listener_name=text("listenerName"),
            peer_cluster_names=tuple(
                p for p in data.get("peerClusterNames") or () if isinstance(p, str)
            ),
        )

    @property
    def uses_tls(self) -> bool:
        """Pulsar's rule: TLS when ``brokerClientTlsEnabled`` and a TLS URL is given, or when
        only a TLS URL is given."""
        if self.broker_client_tls_enabled and self.broker_service_url_tls:
            return True
        return not self.broker_service_url and bool(self.broker_service_url_tls)

    @property
    def replication_service_url(self) -> str:
        """The binary-protocol URL a replicator's client connects to ("" if none)."""
        return self.broker_service_url_tls if self.uses_tls else self.broker_service_url

    @property
    def admin_url(self) -> str:
        """The HTTP(S) admin URL of the cluster ("" if none)."""
        if self.uses_tls and self.service_url_tls:
            return self.service_url_tls
        return self.service_url or self.service_url_tls


__all__ = [
    "CLUSTER_DATA_BYTES_MAX",
    "UNSUPPORTED_KEYSTORE",
    "UNSUPPORTED_PROXY",
    "ClusterData",
    "check_cluster_data",
]
