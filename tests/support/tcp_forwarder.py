"""A TCP forwarder for tests: what a NAT or load balancer in front of a broker is, so a test
can tell that a client really went through an advertised address.

Owns: ``TcpForwarder`` (listens on 127.0.0.1:``port``, pipes each accepted connection to
``upstream``; counts the connections it accepted and, in ``used``, those that sent bytes, so
a bare connect-and-close probe is told apart from a client; ``close()`` stops everything it
started).
"""

from __future__ import annotations

import socket
import threading


class TcpForwarder:
    def __init__(self, port: int, upstream: tuple[str, int]) -> None:
        self.port = port
        self.upstream = upstream
        self.accepted = 0
        self.used = 0
        self._server = socket.create_server(("127.0.0.1", port))
        self._server.settimeout(0.2)
        self._closed = threading.Event()
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._accept_loop, daemon=True)
        self._thread.start()

    def _accept_loop(self) -> None:
        while not self._closed.is_set():
            try:
                conn, _ = self._server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            try:
                up = socket.create_connection(self.upstream, timeout=10)
            except OSError:
                conn.close()
                continue
            up.settimeout(None)
            with self._lock:
                self.accepted += 1
                self._sockets += [conn, up]
            for a, b, inbound in ((conn, up, True), (up, conn, False)):
                threading.Thread(target=self._pump, args=(a, b, inbound), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, inbound: bool) -> None:
        first = inbound
        try:
            while data := src.recv(65536):
                if first:
                    first = False
                    with self._lock:
                        self.used += 1
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        self._closed.set()
        self._server.close()
        self._thread.join(5)
        with self._lock:
            for s in self._sockets:
                s.close()
