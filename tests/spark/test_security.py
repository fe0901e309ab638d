"""The data source against a broker with TLS, token authentication and authorization on: a
local Spark session reads a topic over ``pulsar+ssl://`` with a token for a role that may only
consume (``pulsar.client.useTls``/``tlsTrustCertsFilePath``/``authParams``), and the same read
without the token fails instead of reading anything; an exactly-once write whose admin calls
(deduplication on, stats) go to the HTTPS admin URL with the same token and CA; and the same
write and read with basic authentication (user and password, ``AuthenticationBasic``)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from passlib.hash import apr_md5_crypt
from pyspark.sql import functions as F
from support.admin import http
from support.net import free_port
from support.security import TlsFiles, TokenKit, issue, make_ca, make_token_kit
from support.standalone import StandaloneProcess

from magnetar.client import AuthenticationToken
from magnetar.client import Client as AsyncClient


class Secured:
    def __init__(
        self, sa: StandaloneProcess, tls: TlsFiles, kit: TokenKit, tls_port: int, web_tls: int
    ) -> None:
        self.sa = sa
        self.tls = tls
        self.kit = kit
        self.tls_url = f"pulsar+ssl://127.0.0.1:{tls_port}"
        self.https_url = f"https://127.0.0.1:{web_tls}"


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    base = tmp_path_factory.mktemp("secured")
    ca, ca_path = make_ca(base, "spark")
    tls = issue(ca, ca_path, base, "broker", "localhost", "127.0.0.1")
    kit = make_token_kit(base)
    tls_port, web_tls = free_port(), free_port()
    htpasswd = base / ".htpasswd"
    htpasswd.write_text(f"admin:{apr_md5_crypt.hash('admin-password')}\n")
    sa = StandaloneProcess(
        base / "data",
        base / "standalone.log",
        config={
            "brokerServicePortTls": tls_port,
            "webServicePortTls": web_tls,
            "tlsCertificateFilePath": tls.cert,
            "tlsKeyFilePath": tls.key,
            "authenticationEnabled": "true",
            "authenticationProviders": "token,basic",
            "tokenSecretKey": kit.url,
            "basicAuthConf": str(htpasswd),
            "authorizationEnabled": "true",
            "superUserRoles": "admin",
        },
        token=kit.token("admin"),
    ).start()
    try:
        yield Secured(sa, tls, kit, tls_port, web_tls)
    finally:
        sa.stop()


def _publish(s: Secured, topic: str, payloads: list[bytes]) -> None:
    async def go() -> None:
        async with AsyncClient(
            s.tls_url,
            authentication=AuthenticationToken(s.kit.token("admin")),
            tls_trust_certs_file_path=s.tls.ca,
        ) as client:
            producer = await client.create_producer(topic, batching_enabled=False)
            for p in payloads:
                await producer.send(p)

    asyncio.run(go())


def test_a_batch_read_over_tls_with_a_token(spark: Any, secured: Secured) -> None:
    topic = "persistent://public/default/secured-read"
    _publish(secured, topic, [f"s{i}".encode() for i in range(20)])
    admin = {"Authorization": f"Bearer {secured.kit.token('admin')}"}
    status, body = http(
        secured.sa.web_url,
        "POST",
        "/admin/v2/namespaces/public/default/permissions/reader",
        ["consume"],
        headers=admin,
    )
    assert status in (200, 204), body
    opts = {
        "service.url": secured.tls_url,
        "topic": topic,
        "pulsar.client.tlsTrustCertsFilePath": secured.tls.ca,
        "pulsar.client.operationTimeoutMs": "20000",
    }
    token = f"token:{secured.kit.token('reader')}"
    df = spark.read.format("magnetar").options(**opts, **{"pulsar.client.authParams": token})
    rows = df.load().select(F.col("value").cast("string").alias("v")).collect()
    assert sorted(r.v for r in rows) == sorted(f"s{i}" for i in range(20))

    # the same token from a file, with the plugin named as pulsar-spark jobs do
    token_file = secured.tls.ca.rsplit("/", 1)[0] + "/reader.token"
    with open(token_file, "w") as f:
        f.write(secured.kit.token("reader") + "\n")
    from_file = spark.read.format("magnetar").options(
        **opts,
        **{
            "pulsar.client.authPluginClassName": (
                "org.apache.pulsar.client.impl.auth.AuthenticationToken"
            ),
            "pulsar.client.authParams": f"file://{token_file}",
        },
    )
    assert from_file.load().count() == 20

    # without the token the read fails: nothing is read anonymously
    with pytest.raises(Exception, match=r"(?i)authentic|unable to authenticate"):
        spark.read.format("magnetar").options(**opts).load().collect()


BASIC_PLUGIN = "org.apache.pulsar.client.impl.auth.AuthenticationBasic"


@pytest.mark.parametrize("auth", ["token", "basic"])
def test_an_exactly_once_write_over_tls(spark: Any, secured: Secured, auth: str) -> None:
    """The binary client and the admin calls (``Authorization: Bearer`` / ``Basic``) carry the
    credentials: a token, or the basic plugin with ``{"userId", "password"}`` as pulsar-spark
    jobs set them (and with a wrong password nothing is written)."""
    topic = f"persistent://public/default/secured-write-{auth}"

    def credentials(password: str = "admin-password") -> dict[str, str]:
        if auth == "token":
            return {"pulsar.client.authParams": f"token:{secured.kit.token('admin')}"}
        return {
            "pulsar.client.authPluginClassName": BASIC_PLUGIN,
            "pulsar.client.authParams": f'{{"userId": "admin", "password": "{password}"}}',
        }

    opts = {
        "service.url": secured.tls_url,
        "admin.url": secured.https_url,
        "topic": topic,
        "pulsar.client.tlsTrustCertsFilePath": secured.tls.ca,
        "pulsar.client.operationTimeoutMs": "20000",
    }
    df = spark.range(50).select(F.concat(F.lit("w-"), F.col("id").cast("string")).alias("value"))
    writer = df.write.format("magnetar").mode("append")
    writer.options(**opts, **credentials()).save()  # exactlyOnce by default: admin calls
    back = spark.read.format("magnetar").options(**opts, **credentials()).load()
    rows = back.select(F.col("value").cast("string").alias("v")).collect()
    assert sorted(r.v for r in rows) == sorted(f"w-{i}" for i in range(50))
    if auth == "basic":
        with pytest.raises(Exception, match=r"(?i)authentic|unable to authenticate|401"):
            writer.options(**opts, **credentials("nope")).save()
