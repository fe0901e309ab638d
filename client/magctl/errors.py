"""magctl's errors: what a failure prints (kubectl's wording) and the exit code it gives.

Owns: ``MagctlError`` and its kinds. Exit codes: 0 ok, 1 server or operation error, 2 usage
error (bad flag, unknown resource type, bad manifest). ``render()`` is the one line printed
on stderr. Must not know: HTTP or argparse; the boundaries translate into these.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2

_REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    409: "Conflict",
    412: "Invalid",
    415: "UnsupportedMediaType",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


def reason_of(status: int) -> str:
    """kubectl's status reason for an HTTP status (``NotFound`` for 404)."""
    return _REASONS.get(status, "InternalError" if status >= 500 else "BadRequest")


class MagctlError(Exception):
    """A failure to report: ``render()`` on stderr, then exit with ``exit_code``."""

    exit_code = EXIT_FAILED

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def render(self) -> str:
        return f"error: {self.message}"


class UsageError(MagctlError):
    """The command line or a manifest is wrong (exit 2)."""

    exit_code = EXIT_USAGE


class UnknownFlag(UsageError):
    def __init__(self, flag: str) -> None:
        super().__init__(f"unknown flag: {flag}")


class ServerError(MagctlError):
    """The admin API answered an error: ``Error from server (NotFound): ...``."""

    def __init__(self, status: int, message: str, reason: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason or reason_of(status)

    def render(self) -> str:
        return f"Error from server ({self.reason}): {self.message}"


class ConnectionFailed(MagctlError):
    """The admin API could not be reached at all."""


__all__ = [
    "EXIT_FAILED",
    "EXIT_OK",
    "EXIT_USAGE",
    "ConnectionFailed",
    "MagctlError",
    "ServerError",
    "UnknownFlag",
    "UsageError",
    "reason_of",
]
