"""Contexts: a kubeconfig-shaped YAML file naming clusters, users and contexts.

Owns: ``ConfigFile`` (load, merge, save) and ``Connection`` (what one invocation talks to).
The file is ``$MAGCTL_CONFIG`` (a ``:``-separated list, merged, the first file defining a
name winning, as KUBECONFIG) or ``~/.config/magctl/config``::

    apiVersion: v1
    kind: Config
    current-context: prod
    clusters:
    - name: prod
      cluster: {admin-url: https://pulsar.example:8443, service-url: pulsar+ssl://...,
                certificate-authority: /path/ca.pem, insecure-skip-tls-verify: false}
    users:
    - name: ops
      user: {token: ..., token-file: /path/token}
    contexts:
    - name: prod
      context: {cluster: prod, user: ops, namespace: acme/orders}

Precedence: ``--admin-url``/``--token``/``-n`` over ``--context`` over ``current-context``
over the defaults (``http://localhost:8080``, namespace ``public/default``). Also imports a
Pulsar ``client.conf``. Must not know: HTTP, verbs.
"""

from __future__ import annotations

import json
import os
import pathlib
from dataclasses import dataclass
from typing import Any

from magnetar.client.magctl.errors import MagctlError, UsageError
from magnetar.client.magctl.resources import DEFAULT_NAMESPACE

DEFAULT_ADMIN_URL = "http://localhost:8080"


def config_paths() -> list[pathlib.Path]:
    env = os.environ.get("MAGCTL_CONFIG")
    if env:
        return [pathlib.Path(p).expanduser() for p in env.split(os.pathsep) if p]
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return [pathlib.Path(base) / "magctl" / "config"]


def _named(items: Any, what: str, path: pathlib.Path) -> list[dict[str, Any]]:
    if items is None:
        return []
    if not isinstance(items, list) or not all(
        isinstance(i, dict) and isinstance(i.get("name"), str) for i in items
    ):
        raise UsageError(f"{path}: {what} must be a list of entries with a name")
    return items


@dataclass(frozen=True, slots=True)
class Connection:
    admin_url: str
    service_url: str | None
    token: str | None
    namespace: str
    namespace_explicit: bool
    context: str | None
    tls_insecure: bool = False
    tls_ca_file: str | None = None
    basic: tuple[str, str] | None = None
    """User and password for basic authentication (when no token is given)."""


class ConfigFile:
    def __init__(self, paths: list[pathlib.Path] | None = None) -> None:
        self.paths = paths or config_paths()
        self.data: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [],
            "users": [],
            "contexts": [],
            "current-context": "",
        }
        first = True
        for path in self.paths:
            if not path.exists():
                continue
            import yaml

            try:
                loaded = yaml.safe_load(path.read_text()) or {}
            except (OSError, yaml.YAMLError) as exc:
                raise UsageError(f"cannot read config {path}: {exc}") from None
            if not isinstance(loaded, dict):
                raise UsageError(f"config {path}: expected a mapping")
            for section in ("clusters", "users", "contexts"):
                have = {i["name"] for i in self.data[section]}
                for item in _named(loaded.get(section), section, path):
                    if item["name"] not in have:
                        self.data[section].append(item)
            if first and loaded.get("current-context"):
                self.data["current-context"] = str(loaded["current-context"])
            first = False

    def entry(self, section: str, name: str) -> dict[str, Any] | None:
        for item in self.data[section]:
            if item["name"] == name:
                value = item.get(section[:-1]) or {}
                return value if isinstance(value, dict) else {}
        return None

    def set_entry(self, section: str, name: str, values: dict[str, Any]) -> None:
        key = section[:-1]
        for item in self.data[section]:
            if item["name"] == name:
                item.setdefault(key, {}).update(values)
                return
        self.data[section].append({"name": name, key: dict(values)})

    @property
    def current(self) -> str:
        return str(self.data.get("current-context") or "")

    def save(self) -> pathlib.Path:
        import yaml

        path = self.paths[0]
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(yaml.safe_dump(self.data, sort_keys=False))
        os.chmod(tmp, 0o600)  # it may hold tokens
        tmp.replace(path)
        return path

    def connection(
        self,
        *,
        context: str | None,
        admin_url: str | None,
        token: str | None,
        namespace: str | None,
        username: str | None = None,
        password: str | None = None,
    ) -> Connection:
        name = context or self.current or None
        ctx: dict[str, Any] = {}
        if name:
            found = self.entry("contexts", name)
            if found is None:
                if context:
                    raise MagctlError(f'context "{name}" does not exist')
            else:
                ctx = found
        cluster = self.entry("clusters", str(ctx.get("cluster", ""))) or {}
        user = self.entry("users", str(ctx.get("user", ""))) or {}
        tok = token or user.get("token")
        if not tok and user.get("token-file"):
            try:
                tok = pathlib.Path(str(user["token-file"])).expanduser().read_text().strip()
            except OSError as exc:
                raise MagctlError(f"cannot read token file {user['token-file']}: {exc}") from None
        basic = None
        if username or password:
            if not (username and password is not None):
                raise UsageError("--username and --password go together")
            basic = (username, password)
            tok = token
        elif not tok and user.get("username"):
            basic = (str(user["username"]), str(user.get("password", "")))
        return Connection(
            admin_url=admin_url or str(cluster.get("admin-url") or DEFAULT_ADMIN_URL),
            service_url=cluster.get("service-url"),
            token=tok or None,
            namespace=namespace or str(ctx.get("namespace") or DEFAULT_NAMESPACE),
            namespace_explicit=namespace is not None,
            context=name,
            tls_insecure=bool(cluster.get("insecure-skip-tls-verify", False)),
            tls_ca_file=cluster.get("certificate-authority"),
            basic=basic,
        )


def parse_client_conf(text: str) -> dict[str, str]:
    """A Java properties file (Pulsar's ``client.conf``): ``key=value`` lines."""
    out: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        sep = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
        if sep < 0:
            continue
        out[line[:sep].strip()] = line[sep + 1 :].strip()
    return out


def import_client_conf(cfg: ConfigFile, text: str, name: str) -> None:
    """Add cluster, user and context ``name`` from a Pulsar ``client.conf``."""
    props = parse_client_conf(text)
    admin = props.get("webServiceUrl") or props.get("serviceHttpUrl")
    if not admin:
        raise UsageError("client.conf has no webServiceUrl")
    cluster: dict[str, Any] = {"admin-url": admin}
    if props.get("brokerServiceUrl"):
        cluster["service-url"] = props["brokerServiceUrl"]
    if props.get("tlsTrustCertsFilePath"):
        cluster["certificate-authority"] = props["tlsTrustCertsFilePath"]
    if props.get("tlsAllowInsecureConnection", "").lower() == "true":
        cluster["insecure-skip-tls-verify"] = True
    cfg.set_entry("clusters", name, cluster)
    user: dict[str, Any] = {}
    params = props.get("authParams", "")
    if "AuthenticationBasic" in props.get("authPlugin", "") and params:
        bad = 'client.conf authParams: expected {"userId": ..., "password": ...}'
        try:
            doc = json.loads(params)
        except ValueError:
            raise UsageError(bad) from None
        if not isinstance(doc, dict) or not doc.get("userId"):
            raise UsageError(bad)
        user["username"] = str(doc["userId"])
        user["password"] = str(doc.get("password", ""))
    if "AuthenticationToken" in props.get("authPlugin", "") and params:
        if params.startswith("token:"):
            user["token"] = params[len("token:") :]
        elif params.startswith("file:"):
            user["token-file"] = params[len("file:") :].removeprefix("//")
        else:
            user["token"] = params
    cfg.set_entry("users", name, user)
    cfg.set_entry("contexts", name, {"cluster": name, "user": name})


__all__ = [
    "DEFAULT_ADMIN_URL",
    "ConfigFile",
    "Connection",
    "config_paths",
    "import_client_conf",
    "parse_client_conf",
]
