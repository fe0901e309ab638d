"""Every ``python`` block of docs/client.md runs against a real in-process broker."""

from __future__ import annotations

import pathlib
import re
from collections.abc import Iterator

import pytest
from support.broker import InProcessBroker

DOC = pathlib.Path(__file__).resolve().parents[3] / "docs" / "client.md"
BLOCKS = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)


@pytest.fixture(scope="module")
def broker() -> Iterator[InProcessBroker]:
    b = InProcessBroker().start()
    try:
        yield b
    finally:
        b.stop()


def test_the_doc_has_examples() -> None:
    assert len(BLOCKS) >= 5


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_doc_example_runs(
    broker: InProcessBroker, index: int, capsys: pytest.CaptureFixture[str]
) -> None:
    code = BLOCKS[index].replace("pulsar://localhost:6650", broker.service_url)
    exec(compile(code, f"docs/client.md[{index}]", "exec"), {"__name__": "__main__"})
    assert capsys.readouterr().out  # every example prints what it got
