"""The broker's error tree: one root, every refusal carrying the wire code it is answered with.

Owns: ``BrokerError`` (``code``: the ``ServerError`` a binary-protocol client gets;
``http_status``: what the admin REST API answers) and the admin-level ``ResourceError``
family. Codes are ``ServerError`` members, never strings, so a misspelt code fails at import
(and in mypy) instead of reaching a client as ``UnknownError``. The refusals of one concept
(``ServiceError``, ``ProducerError``, ``SubscriptionError``, Key_Shared's, validation's,
authentication's) subclass it in their own modules.
Must not know: connections, HTTP handlers or topics.
"""

from __future__ import annotations

from magnetar.client.protocol import ServerError


class BrokerError(Exception):
    """Root of the broker's refusals: ``message`` for the client, ``code`` on the wire,
    ``http_status`` over REST."""

    code: ServerError = ServerError.UnknownError
    http_status: int = 500

    def __init__(self, message: str, *, code: ServerError | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code


class CodedError(BrokerError):
    """A refusal made with its code first, as the protocol handlers answer it:
    ``CodedError(ServerError.TopicNotFound, "Topic not found")``."""

    def __init__(self, code: ServerError, message: str) -> None:
        super().__init__(message, code=code)


class ResourceError(BrokerError):
    """An admin-level error on metadata resources; ``http_status`` is what Pulsar's REST API
    answers."""

    code = ServerError.MetadataError

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class ResourceNotFound(ResourceError):
    http_status = 404


class ResourceForbidden(ResourceError):
    http_status = 403


class ResourceConflict(ResourceError):
    http_status = 409


class PreconditionFailed(ResourceError):
    http_status = 412


class InvalidResource(ResourceError):
    http_status = 400


class OwnedElsewhere(ResourceError):
    """``topic``'s bundle is another broker's: the admin API redirects (307) a request for
    that topic there, as Pulsar's topic-ownership validation does. ``http_url`` /
    ``http_url_tls``: the owner's web service URLs (plain, TLS)."""

    http_status = 307

    def __init__(self, reason: str, topic: str, http_url: str, http_url_tls: str = "") -> None:
        super().__init__(reason)
        self.topic = topic
        self.http_url = http_url
        self.http_url_tls = http_url_tls

    def location(self, path_and_query: str, *, secure: bool) -> str:
        """Where the same request goes: the owner's HTTPS URL for a request that came over
        HTTPS (when the owner has one), else its HTTP URL."""
        base = self.http_url_tls if secure and self.http_url_tls else self.http_url
        return base.rstrip("/") + path_and_query


__all__ = [
    "BrokerError",
    "CodedError",
    "InvalidResource",
    "OwnedElsewhere",
    "PreconditionFailed",
    "ResourceConflict",
    "ResourceError",
    "ResourceForbidden",
    "ResourceNotFound",
    "ServerError",
]
