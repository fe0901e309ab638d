"""Durations and sizes as people write them (``3h``, ``7d``, ``10G``), both ways.

Owns: ``parse_duration_s`` / ``format_duration_s`` and ``parse_size_bytes`` /
``format_size_bytes`` (binary units, as pulsar-admin: ``10M`` = 10 MiB). Formatting picks the
largest unit that divides the value exactly, so ``format(parse(x))`` is a canonical form that
``apply`` and ``diff`` compare. Pure.
"""

from __future__ import annotations

import re

from magnetar.client.magctl.errors import UsageError

_DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_SIZE_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
_NUMBER_UNIT = re.compile(r"^\s*(-?\d+)\s*([A-Za-z]*)\s*$")


def parse_duration_s(value: object, what: str = "duration") -> int:
    """Seconds of ``value``: an int (seconds) or ``<n>s|m|h|d|w``; -1 stays -1 (infinite)."""
    if isinstance(value, bool):
        raise UsageError(f"{what}: expected a duration such as 30s, 5m, 3h or 7d, got {value}")
    if isinstance(value, int):
        return value
    m = _NUMBER_UNIT.match(str(value))
    unit = m.group(2).lower() if m else ""
    if m is None or (unit and unit not in _DURATION_UNITS):
        raise UsageError(f"{what}: expected a duration such as 30s, 5m, 3h or 7d, got {value!r}")
    n = int(m.group(1))
    return n * _DURATION_UNITS[unit or "s"] if n >= 0 else n


def format_duration_s(seconds: int) -> str | int:
    if seconds <= 0:
        return seconds
    for unit in ("w", "d", "h", "m"):
        size = _DURATION_UNITS[unit]
        if seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def parse_size_bytes(value: object, what: str = "size") -> int:
    """Bytes of ``value``: an int (bytes) or ``<n>K|M|G|T`` (binary); -1 stays -1."""
    if isinstance(value, bool):
        raise UsageError(f"{what}: expected a size such as 512M or 10G, got {value}")
    if isinstance(value, int):
        return value
    m = _NUMBER_UNIT.match(str(value))
    unit = m.group(2).upper().rstrip("B").rstrip("I") if m else ""
    if m is None or unit not in _SIZE_UNITS:
        raise UsageError(f"{what}: expected a size such as 512M or 10G, got {value!r}")
    n = int(m.group(1))
    return n * _SIZE_UNITS[unit] if n >= 0 else n


def format_size_bytes(n: int) -> str | int:
    if n <= 0:
        return n
    for unit in ("T", "G", "M", "K"):
        size = _SIZE_UNITS[unit]
        if n % size == 0:
            return f"{n // size}{unit}"
    return n


def human_bytes(n: float) -> str:
    """For tables: ``1.5Mi`` style, rounded."""
    for unit in ("", "Ki", "Mi", "Gi", "Ti"):
        if abs(n) < 1024 or unit == "Ti":
            return f"{n:.0f}{unit}" if unit == "" else f"{n:.1f}{unit}"
        n /= 1024
    return str(n)


__all__ = [
    "format_duration_s",
    "format_size_bytes",
    "human_bytes",
    "parse_duration_s",
    "parse_size_bytes",
]
