"""The fuzz tier: one real ``magnetar standalone`` per module, fed hostile input for a bounded
time, then probed: healthy, RSS and open fds back near their baseline, no traceback in its log.

Seeded: ``MAGNETAR_FUZZ_SEED=<n>`` replays a run; without it a seed is drawn and printed, and
a failing test's report names it. ``MAGNETAR_FUZZ_SECONDS`` scales each test's budget (the
default keeps the whole tier near a minute on a loaded two-core machine).
"""

from __future__ import annotations

import os
import pathlib
import random
from collections.abc import Iterator

import pytest
from support.fuzz import BrokerWatch
from support.standalone import StandaloneProcess

SEED = int(os.environ.get("MAGNETAR_FUZZ_SEED") or random.SystemRandom().randrange(1 << 32))
SECONDS = float(os.environ.get("MAGNETAR_FUZZ_SECONDS") or 12)


def pytest_report_header() -> str:
    return f"fuzz seed: {SEED} (replay with MAGNETAR_FUZZ_SEED={SEED})"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    outcome = yield
    report = outcome.get_result()
    if report.failed and "tests/fuzz" in str(item.fspath).replace(os.sep, "/"):
        report.sections.append(
            ("fuzz seed", f"seed {SEED}: replay with MAGNETAR_FUZZ_SEED={SEED} {item.nodeid}")
        )


@pytest.fixture
def rng(request: pytest.FixtureRequest) -> random.Random:
    """A generator seeded from the run's seed and the test's name (each test replays alone)."""
    return random.Random(f"{SEED}:{request.node.name}")


@pytest.fixture
def fuzz_seconds() -> float:
    """Each fuzz test's budget in seconds (``MAGNETAR_FUZZ_SECONDS``)."""
    return SECONDS


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProcess]:
    base: pathlib.Path = tmp_path_factory.mktemp("fuzz")
    proc = StandaloneProcess(
        base / "data",
        base / "standalone.log",
        config={"keep_alive_interval_seconds": 2, "max_buffered_partial_frames_size_in_mb": 32},
    )
    try:
        proc.start(timeout_s=120)
        yield proc
    finally:
        if proc.proc is not None and proc.proc.poll() is None:
            proc.stop()


@pytest.fixture
def watch(standalone: StandaloneProcess) -> BrokerWatch:
    assert standalone.proc is not None
    w = BrokerWatch(standalone.proc.pid, standalone.log_path)
    w.mark()
    return w
