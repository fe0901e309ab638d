"""kubectl's label selectors over ``metadata.labels``.

Owns: ``parse_selector`` for ``k=v``, ``k==v``, ``k!=v``, ``k in (a,b)``, ``k notin (a)``,
``k`` (exists) and ``!k`` (absent), comma meaning AND; ``matches(selector, labels)``. Pure.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from magnetar.client.magctl.errors import UsageError

Requirement = Callable[[dict[str, str]], bool]
_SET = re.compile(r"^\s*([\w./-]+)\s+(in|notin)\s+\(([^)]*)\)\s*$")


def _split(text: str) -> list[str]:
    parts, depth, cur = [], 0, ""
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    return [p.strip() for p in parts if p.strip()]


def _requirement(term: str) -> Requirement:
    m = _SET.match(term)
    if m:
        key, op, vals = m.group(1), m.group(2), {v.strip() for v in m.group(3).split(",")}
        if op == "in":
            return lambda labels: labels.get(key) in vals
        return lambda labels: labels.get(key) not in vals
    for op in ("!=", "==", "="):
        if op in term:
            key, value = (s.strip() for s in term.split(op, 1))
            if not key:
                break
            if op == "!=":
                return lambda labels: labels.get(key) != value
            return lambda labels: labels.get(key) == value
    if term.startswith("!") and re.fullmatch(r"[\w./-]+", term[1:]):
        return lambda labels: term[1:] not in labels
    if re.fullmatch(r"[\w./-]+", term):
        return lambda labels: term in labels
    raise UsageError(f'unable to parse requirement: "{term}"')


def parse_selector(text: str) -> list[Requirement]:
    return [_requirement(t) for t in _split(text)]


def matches(selector: list[Requirement], labels: dict[str, str] | None) -> bool:
    return all(req(labels or {}) for req in selector)


__all__ = ["matches", "parse_selector"]
