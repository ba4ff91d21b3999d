"""The participant's terminal: a line for everything the peer starts or finishes, under its name.

A participant who pasted the join line sees at once that it is registering, benchmarking, downloading
(with a bar), serving and training; the words come from `peer/progress.py`. Only the lines go to
stdout; diagnostics stay in `logging` (stderr).
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

from .progress import progress_bar, transfer_rate

QUARTERS = 4
"""A bar that cannot be redrawn in place (output to a file or pipe) is printed at each quarter."""


class Console:
    def __init__(self, name: str, stream: TextIO | None = None) -> None:
        self.name = name
        self._stream = stream

    @property
    def stream(self) -> TextIO:
        # Looked up when used: tests and launchers replace sys.stdout after the console is built.
        return self._stream or sys.stdout

    def say(self, text: str) -> None:
        print(f"[{self.name}] {text}", file=self.stream, flush=True)

    def download(self, what: str, total: int | None) -> Download:
        """A progress bar for `total` bytes (None: unknown) of `what`."""
        return Download(self, what, total)


class Download:
    """Redrawn in place on a terminal; elsewhere a line at each quarter, so logs stay short. The rate
    counts the bytes after the first batch, from its arrival: waiting for the other side to start
    (a peer encoding a state) is not the link's speed, nor is a first batch that arrived all at once."""

    def __init__(self, console: Console, what: str, total: int | None) -> None:
        self._console = console
        self._what = what
        self._total = total
        self._done = 0
        self._shown_quarter = -1
        self._live = console.stream.isatty()
        self._first: tuple[float, int] | None = None

    def advance(self, n: int) -> None:
        if self._first is None:
            self._first = (time.monotonic(), n)
        self._done += n
        if self._live:
            print(f"\r[{self._console.name}] {self._line()}", end="", file=self._console.stream, flush=True)
            return
        quarter = QUARTERS * self._done // self._total if self._total else 0
        if quarter > self._shown_quarter:
            self._shown_quarter = quarter
            self._console.say(self._line())

    def finish(self) -> None:
        if self._live:
            print(file=self._console.stream, flush=True)
        elif self._shown_quarter < QUARTERS:
            self._console.say(self._line())

    def _line(self) -> str:
        rate = None
        if self._first is not None:
            started, first = self._first
            rate = transfer_rate(self._done - first, time.monotonic() - started)
        return f"{self._what} {progress_bar(self._done, self._total, rate=rate)}"
