"""Printers for ``-o``: table (default), wide, json, yaml, name, jsonpath=, custom-columns=.

Owns: ``OutputFormat.parse`` (the ``-o`` value; unknown formats are usage errors),
``print_objects`` and kubectl's table layout (upper-case headers, columns padded to the
widest cell plus three spaces, ``<none>`` for missing values). A list prints as a
``List``; one object asked for by name prints alone, as kubectl does. PyYAML is imported only
for ``-o yaml``. Must not know: HTTP, resources beyond the columns a kind declares.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import IO, Any

from magnetar.client.magctl.errors import UsageError
from magnetar.client.magctl.resources import API_VERSION

FORMATS = ("table", "wide", "json", "yaml", "name", "jsonpath", "custom-columns")


@dataclass(frozen=True, slots=True)
class OutputFormat:
    kind: str
    arg: str = ""

    @classmethod
    def parse(cls, value: str | None) -> OutputFormat:
        if not value:
            return cls("table")
        name, sep, arg = value.partition("=")
        if name in ("jsonpath", "custom-columns"):
            if not sep or not arg:
                raise UsageError(f"{name} format specified but no {name} template given")
            return cls(name, arg)
        if name in ("jsonpath-as-json",):
            return cls("jsonpath", arg)
        if name in ("table", "wide", "json", "yaml", "name") and not sep:
            return cls(name)
        raise UsageError(
            f'unable to match a printer suitable for the output format "{value}", allowed '
            "formats are: custom-columns,json,jsonpath,name,wide,yaml"
        )

    def check(self) -> None:
        """Raise ``UsageError`` now for a template that could only fail after the requests."""
        if self.kind == "jsonpath":
            from magnetar.client.magctl.jsonpath import check

            check(self.arg)
        elif self.kind == "custom-columns":
            custom_columns(self.arg)

    @property
    def needs_full(self) -> bool:
        """Machine formats show spec.policies, which costs more requests than a table."""
        return self.kind in ("json", "yaml", "jsonpath", "custom-columns")


def as_list(items: list[dict[str, Any]]) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": "List", "items": items}


def dump_yaml(data: Any) -> str:
    import yaml

    return str(yaml.safe_dump(data, sort_keys=False, default_flow_style=False))


def cell(v: Any) -> str:
    if v is None or v == "":
        return "<none>"
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, (dict, list)):
        return json.dumps(v, separators=(",", ":"))
    return str(v)


def table(headers: list[str], rows: list[list[str]], *, no_headers: bool = False) -> str:
    shown = rows if no_headers else [headers, *rows]
    if not shown:
        return ""
    widths = [max(len(r[i]) for r in shown) for i in range(len(headers))]
    lines = []
    for r in shown:
        lines.append("   ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
    return "\n".join(lines) + "\n"


def custom_columns(spec: str) -> list[tuple[str, Any]]:
    from magnetar.client.magctl.jsonpath import compile_expr

    out = []
    for part in spec.split(","):
        header, sep, expr = part.partition(":")
        if not sep or not header or not expr:
            raise UsageError(f'custom-columns format: expected HEADER:JSONPATH, got "{part}"')
        out.append((header, compile_expr(expr)))
    return out


def print_objects(
    out: IO[str],
    objects: list[dict[str, Any]],
    fmt: OutputFormat,
    *,
    columns: list[tuple[str, Any]],
    name_of: Any,
    singular: str,
    single: bool,
    no_headers: bool = False,
) -> None:
    data: Any = objects[0] if single and len(objects) == 1 else as_list(objects)
    if fmt.kind == "json":
        out.write(json.dumps(data, indent=4) + "\n")
    elif fmt.kind == "yaml":
        out.write(dump_yaml(data))
    elif fmt.kind == "name":
        for o in objects:
            out.write(f"{singular}/{name_of(o)}\n")
    elif fmt.kind == "jsonpath":
        from magnetar.client.magctl.jsonpath import render

        out.write(render(fmt.arg, data))
    elif fmt.kind == "custom-columns":
        from magnetar.client.magctl.jsonpath import values

        cols = custom_columns(fmt.arg)
        rows = []
        for o in objects:
            row = []
            for _, expr in cols:
                found = values(expr, o)
                row.append(",".join(cell(v) for v in found) if found else "<none>")
            rows.append(row)
        out.write(table([h for h, _ in cols], rows, no_headers=no_headers))
    else:
        headers = [h for h, _ in columns]
        rows = [[cell(get(o)) for _, get in columns] for o in objects]
        out.write(table(headers, rows, no_headers=no_headers))


def sort_objects(objects: list[dict[str, Any]], expr_text: str) -> list[dict[str, Any]]:
    from magnetar.client.magctl.jsonpath import compile_expr, values

    expr = compile_expr(expr_text)

    def key(o: dict[str, Any]) -> tuple[int, Any]:
        found = values(expr, o)
        if not found:
            return (0, "")
        v = found[0]
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return (1, v)
        return (2, str(v))

    try:
        return sorted(objects, key=key)
    except TypeError:
        return sorted(objects, key=lambda o: str(key(o)))


def describe(obj: dict[str, Any]) -> str:
    """kubectl describe's layout: ``Key:  value`` lines, nested maps indented."""
    lines: list[str] = []
    meta = obj.get("metadata") or {}
    top = [
        ("Name", meta.get("name")),
        ("Namespace", meta.get("namespace")),
        ("Kind", obj.get("kind")),
        ("Labels", meta.get("labels") or "<none>"),
    ]
    for k, v in top:
        if v is None:
            continue
        _emit(lines, k, v, 0)
    for section in ("spec", "status"):
        if section in obj:
            _emit(lines, section.title(), obj[section], 0)
    for k, v in obj.items():
        if k not in ("apiVersion", "kind", "metadata", "spec", "status"):
            _emit(lines, k[:1].upper() + k[1:], v, 0)
    return "\n".join(lines) + "\n"


def _emit(lines: list[str], key: str, value: Any, depth: int) -> None:
    pad = "  " * depth
    if isinstance(value, dict):
        if not value:
            lines.append(f"{pad}{key}:".ljust(20) + "<none>")
            return
        lines.append(f"{pad}{key}:")
        for k, v in value.items():
            _emit(lines, str(k), v, depth + 1)
    elif isinstance(value, list) and value and any(isinstance(v, dict) for v in value):
        lines.append(f"{pad}{key}:")
        for item in value:
            if isinstance(item, dict):
                first = True
                for k, v in item.items():
                    sub: list[str] = []
                    _emit(sub, str(k), v, depth + 2)
                    if first and sub:
                        sub[0] = pad + "  - " + sub[0].lstrip()
                        first = False
                    lines += sub
            else:
                lines.append(f"{pad}  - {cell(item)}")
    else:
        text = ", ".join(cell(v) for v in value) if isinstance(value, list) else cell(value)
        lines.append(f"{pad}{key}:".ljust(max(20, len(pad) + len(key) + 2)) + text)


__all__ = [
    "FORMATS",
    "OutputFormat",
    "as_list",
    "describe",
    "dump_yaml",
    "print_objects",
    "sort_objects",
    "table",
]
