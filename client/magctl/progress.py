"""Progress of long operations, drawn on a terminal: ``[3/40] deleting persistent://t/ns/x``.

Owns: one status line on a stream (stderr, as kubectl and docker draw theirs), redrawn in
place with ``\\r`` and erase-to-end-of-line. It is drawn only when that stream is a terminal
(``isatty()``) and ``TERM`` is not ``dumb``; when the stream is a pipe or a file nothing at all
is written, so scripts and logs see results only. Result lines go through ``echo``, which
clears the status line, writes and flushes the result, then redraws: stdout and stderr
sharing a terminal never garble each other. ``done`` (also on leaving a ``with`` block, on an
error too) erases the line, so an error message starts on a clean line.

Every long verb uses this one class: ``apply -f`` (per manifest), ``delete`` (per object,
and per topic for ``delete ns --force``), ``compact --wait`` (per partition, with the
compaction's state while it runs) and the per-partition operations (``unload``, ``seek``,
``clear``, ``expire``) on partitioned topics. Must not know: what the steps are.
"""

from __future__ import annotations

import os
from types import TracebackType
from typing import IO

CLEAR_LINE = "\r\033[K"


def is_terminal(stream: IO[str]) -> bool:
    """Whether progress may be drawn on ``stream``: a terminal that is not ``TERM=dumb``."""
    try:
        tty = bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False
    return tty and os.environ.get("TERM") != "dumb"


class Progress:
    """``[n/total] what detail`` on ``stream`` when it is a terminal; silent otherwise."""

    def __init__(self, stream: IO[str], total: int, what: str) -> None:
        self.stream, self.total, self.what = stream, total, what
        self.n = 0
        self.detail = ""
        self.enabled = total > 0 and is_terminal(stream)
        self._drawn = False

    def __repr__(self) -> str:
        return f"Progress({self.what!r}, {self.n}/{self.total}, enabled={self.enabled})"

    def __enter__(self) -> Progress:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.done()

    def advance(self, detail: str = "") -> None:
        """The next step starts (``detail``: what it works on)."""
        self.n = min(self.n + 1, self.total)
        self.detail = detail
        self._draw()

    def status(self, detail: str) -> None:
        """Redraw the current step with a new ``detail`` (e.g. a state while waiting)."""
        self.detail = detail
        self._draw()

    def echo(self, out: IO[str], line: str) -> None:
        """Write a result line to ``out`` without garbling the status line."""
        if not self.enabled:
            out.write(line)
            return
        self._clear()
        out.write(line)
        out.flush()
        self._draw()

    def done(self) -> None:
        """Erase the status line (idempotent)."""
        self._clear()

    def _draw(self) -> None:
        if not self.enabled:
            return
        text = f"[{self.n}/{self.total}] {self.what}"
        if self.detail:
            text += f" {self.detail}"
        self.stream.write(CLEAR_LINE + text)
        self.stream.flush()
        self._drawn = True

    def _clear(self) -> None:
        if self._drawn:
            self.stream.write(CLEAR_LINE)
            self.stream.flush()
            self._drawn = False


__all__ = ["CLEAR_LINE", "Progress", "is_terminal"]
