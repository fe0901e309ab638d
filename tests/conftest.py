"""Suite-wide wiring: tier markers by folder, shared fixtures, and the tier summary.

Every test lives in the folder of its tier (``tests/<tier>/``) and gets that tier's marker
automatically. ``make test`` runs every tier; the summary at the end says which tiers ran
and, for skipped ones, why.
"""

from __future__ import annotations

import collections
import logging
import pathlib

import pytest

TIERS = ("unit", "contract", "integration", "compat", "chaos", "spark", "deploy", "fuzz")

pytest_plugins = ["support.fixtures"]

_outcomes: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
_skip_reasons: dict[str, set[str]] = collections.defaultdict(set)


def _tier_of(path: pathlib.Path) -> str | None:
    parts = path.parts
    if "tests" in parts:
        idx = len(parts) - 1 - parts[::-1].index("tests")
        if idx + 1 < len(parts) and parts[idx + 1] in TIERS:
            return parts[idx + 1]
    return None


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        tier = _tier_of(pathlib.Path(str(item.fspath)))
        if tier is not None:
            item.add_marker(getattr(pytest.mark, tier))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    tier = _tier_of(pathlib.Path(report.fspath)) or "other"
    if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
        _outcomes[tier][report.outcome] += 1
        if report.skipped and isinstance(report.longrepr, tuple):
            _skip_reasons[tier].add(str(report.longrepr[2]).removeprefix("Skipped: "))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    tr = terminalreporter
    tr.section("Magnetar test tiers")
    for tier in (*TIERS, "other"):
        counts = _outcomes.get(tier)
        if not counts:
            if tier != "other":
                tr.write_line(f"{tier:12s} not run: no tests collected for this tier")
            continue
        ran = counts["passed"] + counts["failed"]
        if ran == 0 and counts["skipped"]:
            reasons = "; ".join(sorted(_skip_reasons[tier])) or "skipped"
            tr.write_line(f"{tier:12s} SKIPPED ({counts['skipped']} tests): {reasons}")
        else:
            line = f"{tier:12s} ran: {counts['passed']} passed, {counts['failed']} failed"
            if counts["skipped"]:
                reasons = "; ".join(sorted(_skip_reasons[tier]))
                line += f", {counts['skipped']} skipped ({reasons})"
            tr.write_line(line)


def pytest_unconfigure(config: pytest.Config) -> None:
    """Library threads and finalizers still running at exit (kazoo's reconnect loop, py4j's
    ``__del__``) may log after pytest closed the streams it captured: that is no failure,
    and its "--- Logging error ---" tracebacks only hide the tally."""
    logging.raiseExceptions = False
