"""The admin REST calls magctl makes, with errors named after the resource they concern.

Owns: ``Api`` (wraps ``AdminHttp``; a 404 on a named resource becomes kubectl's
``topics "persistent://t/ns/x" not found``, a 409 on create ``... already exists``; other
errors carry the server's reason) and ``Scope`` (the namespace and topic a command works in).
Must not know: output formats, argparse.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from magnetar.client.magctl.errors import ServerError
from magnetar.client.magctl.http import AdminHttp, HttpError
from magnetar.client.magctl.resources import DEFAULT_NAMESPACE


@dataclass(frozen=True, slots=True)
class Scope:
    namespace: str = DEFAULT_NAMESPACE
    namespace_explicit: bool = False
    topic: str | None = None


class Api:
    def __init__(self, http: AdminHttp) -> None:
        self.http = http
        self._cluster: str | None = None

    def __repr__(self) -> str:
        return f"Api({self.http.base_url!r})"

    def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        what: tuple[str, str] | None = None,
        query: dict[str, Any] | None = None,
    ) -> Any:
        """One admin request. ``what`` = (plural, name) names the resource in errors."""
        try:
            return self.http.request(method, path, body, query=query)
        except HttpError as exc:
            raise self._error(exc, method, path, what) from None

    @staticmethod
    def _error(exc: HttpError, method: str, path: str, what: tuple[str, str] | None) -> ServerError:
        if exc.status in (404, 405) and _is_unknown_route(exc.reason):
            return ServerError(
                exc.status,
                f"the server does not implement {method} {path.split('?', maxsplit=1)[0]}",
                reason="NotFound" if exc.status == 404 else "MethodNotAllowed",
            )
        if what is not None:
            plural, name = what
            if exc.status == 404 and _is_absence(exc.reason):
                return ServerError(404, f'{plural} "{name}" not found')
            if exc.status == 409 and method == "PUT" and "exist" in exc.reason.lower():
                return ServerError(409, f'{plural} "{name}" already exists', reason="AlreadyExists")
            return ServerError(exc.status, f'{plural} "{name}": {exc.reason}')
        return ServerError(exc.status, exc.reason)

    def get(self, path: str, *, what: tuple[str, str] | None = None, **query: Any) -> Any:
        return self.call("GET", path, what=what, query=query or None)

    def put(
        self, path: str, body: Any = None, *, what: tuple[str, str] | None = None, **query: Any
    ) -> Any:
        return self.call("PUT", path, body, what=what, query=query or None)

    def post(
        self, path: str, body: Any = None, *, what: tuple[str, str] | None = None, **query: Any
    ) -> Any:
        return self.call("POST", path, body, what=what, query=query or None)

    def delete(self, path: str, *, what: tuple[str, str] | None = None, **query: Any) -> Any:
        return self.call("DELETE", path, what=what, query=query or None)

    def try_get(self, path: str, **query: Any) -> Any:
        """GET, or None when the server answers 404/405 (an endpoint or object missing)."""
        try:
            return self.http.request("GET", path, query=query or None)
        except HttpError as exc:
            if exc.status in (404, 405):
                return None
            raise self._error(exc, "GET", path, None) from None

    def cluster(self) -> str:
        """The cluster this admin API serves: its broker's ``clusterName`` (an instance's
        brokers list every cluster), else the only one it lists."""
        if self._cluster is None:
            runtime = self.try_get("/admin/v2/brokers/configuration/runtime")
            name = (
                runtime.get("cluster_name") or runtime.get("clusterName")
                if isinstance(runtime, dict)
                else None
            )
            if not name:
                clusters = self.get("/admin/v2/clusters") or []
                name = clusters[0] if clusters else "standalone"
            self._cluster = str(name)
        return self._cluster


def _is_unknown_route(reason: str) -> bool:
    """aiohttp's (and Jetty's) own answer for a path or method nobody serves."""
    low = reason.lower().strip()
    return low in (
        "404: not found",
        "not found",
        "405: method not allowed",
        "method not allowed",
        "http 404",
        "http 405",
    ) or low.startswith("unknown route")


def _is_absence(reason: str) -> bool:
    low = reason.lower()
    return any(w in low for w in ("not found", "does not exist", "doesn't exist", "not exist"))


__all__ = ["Api", "Scope"]
