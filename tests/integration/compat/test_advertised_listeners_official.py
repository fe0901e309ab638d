"""Advertised listeners on a real standalone (Pulsar's ``advertisedListeners`` /
``internalListenerName``): the official client's ``listener_name`` gets that listener's URL
from the lookup and works through it; the HTTP lookup answers per ``listenerName`` /
``X-Pulsar-ListenerName``; a listener the broker does not have fails as Pulsar's lookup
does (ServiceNotReady "the broker do not have X listener"; HTTP 500 with that reason); a
setting Pulsar refuses stops the server with a configuration error."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator

import pulsar
import pytest
from support.net import free_port
from support.raw_client import RawClient
from support.standalone import StandaloneProcess
from support.tcp_forwarder import TcpForwarder

from magnetar.client.protocol.proto import pulsar_api_pb2 as pb

T = pb.BaseCommand


@pytest.fixture(scope="module")
def forwarder() -> Iterator[TcpForwarder]:
    """The "external" address: a forwarder to the broker, as a NAT in front of it."""
    fwd = TcpForwarder(free_port(), ("127.0.0.1", 1))  # upstream set once the broker is known
    try:
        yield fwd
    finally:
        fwd.close()


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, forwarder: TcpForwarder
) -> Iterator[StandaloneProcess]:
    base = tmp_path_factory.mktemp("listeners")
    proc = StandaloneProcess(base / "data", base / "standalone.log")
    forwarder.upstream = ("127.0.0.1", proc.port)
    proc.config = {
        "advertisedListeners": (
            f"internal:pulsar://127.0.0.1:{proc.port},external:pulsar://127.0.0.1:{forwarder.port}"
        ),
        "internalListenerName": "internal",
    }
    try:
        yield proc.start()
    finally:
        proc.stop()


def _topic() -> str:
    return f"persistent://public/default/ln-{uuid.uuid4().hex[:8]}"


def _client(server: StandaloneProcess, listener: str, timeout_s: int = 30) -> pulsar.Client:
    return pulsar.Client(
        server.service_url,
        operation_timeout_seconds=timeout_s,
        listener_name=listener,
        log_conf_file_path=None,
    )


def test_official_client_goes_through_the_named_listener(
    server: StandaloneProcess, forwarder: TcpForwarder
) -> None:
    topic = _topic()
    before = forwarder.accepted
    c = _client(server, "external")
    try:
        consumer = c.subscribe(topic, "s")
        c.create_producer(topic).send(b"via external")
        assert consumer.receive(30_000).data() == b"via external"
    finally:
        c.close()
    assert forwarder.accepted > before  # the lookup sent it to the external address


def test_default_client_does_not_use_the_external_listener(
    server: StandaloneProcess, forwarder: TcpForwarder
) -> None:
    topic = _topic()
    before = forwarder.accepted
    c = pulsar.Client(server.service_url, operation_timeout_seconds=30, log_conf_file_path=None)
    try:
        c.create_producer(topic).send(b"direct")
    finally:
        c.close()
    assert forwarder.accepted == before


def test_unknown_listener_fails_the_official_client(server: StandaloneProcess) -> None:
    c = _client(server, "nope", timeout_s=5)
    try:  # Pulsar's lookup error is retriable: the client retries until its timeout
        with pytest.raises((pulsar.ServiceUnitNotReady, pulsar.Timeout)):
            c.create_producer(_topic())
    finally:
        c.close()


def test_binary_lookup_answers_per_listener(
    server: StandaloneProcess, forwarder: TcpForwarder
) -> None:
    topic = _topic()
    raw = RawClient(server.port)
    try:
        raw.connect()
        answers = {}
        for rid, name in enumerate(("external", "internal", "", "nope"), start=1):
            req = pb.CommandLookupTopic(topic=topic, request_id=rid)
            if name:
                req.advertised_listener_name = name
            raw.send(T(type=T.LOOKUP, lookupTopic=req))
            answers[name] = raw.recv().lookupTopicResponse
    finally:
        raw.sock.close()
    assert answers["external"].brokerServiceUrl == f"pulsar://127.0.0.1:{forwarder.port}"
    assert answers["internal"].brokerServiceUrl == f"pulsar://127.0.0.1:{server.port}"
    assert answers[""].brokerServiceUrl == f"pulsar://127.0.0.1:{server.port}"
    failed = answers["nope"]
    assert failed.response == pb.CommandLookupTopicResponse.Failed
    assert failed.error == pb.ServiceNotReady
    assert failed.message == "the broker do not have nope listener"


def _http_lookup(server: StandaloneProcess, topic: str, query: str = "", header: str = ""):  # type: ignore[no-untyped-def]
    path = topic.replace("://", "/")
    req = urllib.request.Request(f"{server.web_url}/lookup/v2/topic/{path}{query}")
    if header:
        req.add_header("X-Pulsar-ListenerName", header)
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null")


def test_http_lookup_answers_per_listener(
    server: StandaloneProcess, forwarder: TcpForwarder
) -> None:
    topic = _topic()
    external = f"pulsar://127.0.0.1:{forwarder.port}"
    status, body = _http_lookup(server, topic, "?listenerName=external")
    assert status == 200 and body["brokerUrl"] == external and body["nativeUrl"] == external
    status, body = _http_lookup(server, topic, header="external")
    assert status == 200 and body["brokerUrl"] == external
    status, body = _http_lookup(server, topic)
    assert status == 200 and body["brokerUrl"] == f"pulsar://127.0.0.1:{server.port}"
    status, body = _http_lookup(server, topic, "?listenerName=nope")
    assert status == 500 and body["reason"] == "the broker do not have nope listener"


@pytest.mark.parametrize(
    ("conf", "message"),
    [
        ("advertisedListeners=a:pulsar://h:1\ninternalListenerName=b\n", "internalListenerName"),
        ("advertisedListeners=a:pulsar://h:1,b:pulsar://h:1\n", "to different listener"),
    ],
)
def test_a_setting_pulsar_refuses_stops_the_server(
    tmp_path: pathlib.Path, conf: str, message: str
) -> None:
    path = tmp_path / "broker.conf"
    path.write_text(conf)
    cmd = [sys.executable, "-m", "magnetar.broker.cli", "standalone"]
    cmd += ["--data-dir", str(tmp_path / "data"), "--config", str(path)]
    done = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert "configuration error" in done.stderr and message in done.stderr
    assert "Traceback" not in done.stderr
