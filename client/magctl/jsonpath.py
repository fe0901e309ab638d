"""kubectl's JSONPath templates over jsonpath-ng.

Owns: ``render(template, data)`` for ``-o jsonpath='{.items[*].metadata.name}'``: text
outside braces is printed as is; inside braces, ``.a.b[*].c`` (kubectl's relative form,
``$`` optional), ``range EXPR`` ... ``end`` loops, and ``"\\n"``-style string literals.
Several matches of one expression print separated by spaces, as kubectl does.
``compile_expr`` serves ``--sort-by`` and ``custom-columns``. jsonpath-ng is imported here
only, and only when a template is used. Must not know: resources.
"""

from __future__ import annotations

import json
import re
from typing import Any

from magnetar.client.magctl.errors import UsageError

_TOKEN = re.compile(r"\{((?:[^{}\"]|\"(?:[^\"\\]|\\.)*\")*)\}")


def compile_expr(expr: str) -> Any:
    """A jsonpath-ng expression for kubectl's ``.a.b[*]`` (braces and ``$`` optional)."""
    from jsonpath_ng.exceptions import JsonPathLexerError, JsonPathParserError
    from jsonpath_ng.ext import parse

    text = expr.strip()
    if text.startswith("{") and text.endswith("}"):
        text = text[1:-1].strip()
    if text.startswith("$"):
        text = text[1:]
    if not text.startswith(".") and not text.startswith("["):
        text = "." + text
    text = "$" + text if text != "." else "$"
    try:
        return parse(text)
    except (JsonPathLexerError, JsonPathParserError, Exception) as exc:
        raise UsageError(f"error parsing jsonpath {expr}: {exc}") from None


def values(expr: Any, data: Any) -> list[Any]:
    return [m.value for m in expr.find(data)]


def _text(v: Any) -> str:
    if isinstance(v, (dict, list)):
        return json.dumps(v)
    if isinstance(v, bool):
        return str(v).lower()
    return "" if v is None else str(v)


def _literal(body: str) -> str:
    try:
        value = json.loads(body)
    except ValueError:
        raise UsageError(f"error parsing jsonpath literal {body}") from None
    return str(value)


def _parse(template: str) -> list[tuple[str, str]]:
    """Tokens: ("text", s), ("expr", e), ("range", e), ("end", "")."""
    out: list[tuple[str, str]] = []
    pos = 0
    for m in _TOKEN.finditer(template):
        if m.start() > pos:
            out.append(("text", template[pos : m.start()]))
        body = m.group(1).strip()
        if body.startswith('"'):
            out.append(("text", _literal(body)))
        elif body == "end":
            out.append(("end", ""))
        elif body.startswith("range "):
            out.append(("range", body[len("range ") :].strip()))
        else:
            out.append(("expr", body))
        pos = m.end()
    if pos < len(template):
        tail = template[pos:]
        if "{" in tail or "}" in tail:
            raise UsageError(f"error parsing jsonpath {template}: unclosed brace")
        out.append(("text", tail))
    return out


def _run(tokens: list[tuple[str, str]], data: Any, out: list[str]) -> None:
    i = 0
    while i < len(tokens):
        kind, body = tokens[i]
        if kind == "text":
            out.append(body)
        elif kind == "expr":
            out.append(" ".join(_text(v) for v in values(compile_expr(body), data)))
        elif kind == "range":
            depth, j = 1, i + 1
            while j < len(tokens) and depth:
                if tokens[j][0] == "range":
                    depth += 1
                elif tokens[j][0] == "end":
                    depth -= 1
                j += 1
            if depth:
                raise UsageError("error parsing jsonpath: {range} without {end}")
            inner = tokens[i + 1 : j - 1]
            for item in values(compile_expr(body), data):
                _run(inner, item, out)
            i = j
            continue
        else:
            raise UsageError("error parsing jsonpath: {end} without {range}")
        i += 1


def render(template: str, data: Any) -> str:
    tokens = _parse(template)
    if not any(k != "text" for k, _ in tokens):
        tokens = [("expr", template)]  # kubectl also takes a bare expression
    out: list[str] = []
    _run(tokens, data, out)
    return "".join(out)


def check(template: str) -> None:
    """Raise ``UsageError`` for a template that cannot render (before any request is sent);
    missing keys are not errors, so rendering it over nothing checks exactly the syntax."""
    render(template, {})


__all__ = ["check", "compile_expr", "render", "values"]
