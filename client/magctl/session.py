"""A command's connection: the context resolved into an ``Api`` and a ``Scope``.

Owns: ``open_session``, which reads the config file (``MAGCTL_CONFIG``, ``--context``), lets
``--admin-url``, ``--token``, ``-n`` and ``--request-timeout`` override it, and builds the HTTP
transport. Every verb that talks to a server starts here; ``version --client``, ``--help``,
``completion`` and ``explain`` never load it. Must not know: verbs, REST paths.
"""

from __future__ import annotations

import argparse
from typing import NamedTuple

from magnetar.client.magctl.api import Api, Scope
from magnetar.client.magctl.config import ConfigFile, Connection
from magnetar.client.magctl.http import AdminHttp


class Session(NamedTuple):
    api: Api
    scope: Scope
    connection: Connection


def open_session(args: argparse.Namespace) -> Session:
    conn = ConfigFile().connection(
        context=getattr(args, "context", None),
        admin_url=getattr(args, "admin_url", None),
        token=getattr(args, "token", None),
        namespace=getattr(args, "namespace", None),
        username=getattr(args, "username", None),
        password=getattr(args, "password", None),
    )
    http = AdminHttp(
        conn.admin_url,
        token=conn.token,
        basic=conn.basic,
        timeout_s=getattr(args, "request_timeout", 30.0),
        tls_insecure=conn.tls_insecure,
        tls_ca_file=conn.tls_ca_file,
    )
    scope = Scope(conn.namespace, conn.namespace_explicit, getattr(args, "topic", None))
    return Session(Api(http), scope, conn)


__all__ = ["Session", "open_session"]
