"""magctl's admin transport follows a 307/308 for every method (a broker that does not own
the topic sends the request to the one that does, as Pulsar's brokers do): the same method,
body and ``Authorization`` reach the new address; a redirect loop ends with a clear error.
A real HTTP server on 127.0.0.1 (stdlib), no broker."""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator

import pytest

from magnetar.client.magctl.http import REDIRECTS_MAX, AdminHttp, HttpError


class _Handler(http.server.BaseHTTPRequestHandler):
    seen: list[tuple[str, str, str | None, bytes]] = []

    def _any(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        self.seen.append((self.command, self.path, self.headers.get("Authorization"), body))
        if self.path.startswith("/loop"):
            self.send_response(307)
            self.send_header("Location", "/loop")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if self.path.startswith("/elsewhere"):
            port = self.server.server_address[1]
            self.send_response(307)
            self.send_header("Location", f"http://127.0.0.1:{port}/owner{self.path[10:]}")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        answer = json.dumps({"path": self.path, "body": body.decode()}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    do_GET = do_PUT = do_POST = do_DELETE = _any

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[http.server.ThreadingHTTPServer]:
    _Handler.seen = []
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    try:
        yield srv
    finally:
        srv.shutdown()
        srv.server_close()


@pytest.mark.parametrize("method", ["GET", "PUT", "POST", "DELETE"])
def test_a_redirect_is_followed_with_the_same_method_body_and_token(
    server: http.server.ThreadingHTTPServer, method: str
) -> None:
    admin = AdminHttp(f"http://127.0.0.1:{server.server_address[1]}", token="t0k")
    body = None if method in ("GET", "DELETE") else {"x": 1}
    got = admin.request(method, "/elsewhere/admin/v2/persistent/a/b/c/stats", body, query={"q": 1})
    assert got["path"] == "/owner/admin/v2/persistent/a/b/c/stats?q=1"
    assert got["body"] == ("" if body is None else '{"x": 1}')
    (first, second) = _Handler.seen
    assert first[0] == second[0] == method
    assert first[2] == second[2] == "Bearer t0k"


def test_a_redirect_loop_ends_with_the_redirect_as_an_error(
    server: http.server.ThreadingHTTPServer,
) -> None:
    admin = AdminHttp(f"http://127.0.0.1:{server.server_address[1]}")
    with pytest.raises(HttpError) as err:
        admin.request("PUT", "/loop", {"x": 1})
    assert err.value.status == 307
    assert len(_Handler.seen) == REDIRECTS_MAX + 1
