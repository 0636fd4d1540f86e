"""Progress for big batches: a callback, or a tqdm-like bar on stderr when
stderr is a terminal (no third-party packages)."""
from __future__ import annotations

import sys
import time
from typing import Callable, Optional, TextIO, Union

ProgressCallback = Callable[[int, int], None]
ProgressArg = Union[None, bool, ProgressCallback]


class Bar:
    """A one-line progress bar: ``create rollout  120/1000 |####    | 12% 3.1s``.

    Writes only when ``stream`` is a terminal (unless ``force``); redraws at
    most every 0.1 s; ``close()`` ends the line."""

    def __init__(self, label: str, total: int, stream: Optional[TextIO] = None, force: bool = False,
                 width: int = 30) -> None:
        self.label = label
        self.total = max(total, 0)
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = force or bool(getattr(self.stream, "isatty", lambda: False)())
        self.width = width
        self.t0 = time.monotonic()
        self.last_draw = 0.0
        self.done = 0
        self.closed = False

    def __call__(self, done: int, total: int) -> None:
        self.update(done, total)

    def update(self, done: int, total: Optional[int] = None) -> None:
        if total is not None:
            self.total = total
        self.done = done
        now = time.monotonic()
        if now - self.last_draw >= 0.1 or done >= self.total:
            self.last_draw = now
            self._draw(now)

    def _draw(self, now: float) -> None:
        if not self.enabled or self.closed:
            return
        frac = (self.done / self.total) if self.total else 1.0
        frac = min(max(frac, 0.0), 1.0)
        fill = int(frac * self.width)
        bar = "#" * fill + " " * (self.width - fill)
        self.stream.write(f"\r{self.label} {self.done:>{len(str(self.total))}}/{self.total} "
                          f"|{bar}| {frac * 100:3.0f}% {now - self.t0:.1f}s")
        self.stream.flush()

    def close(self) -> None:
        if self.closed:
            return
        self._draw(time.monotonic())
        self.closed = True
        if self.enabled:
            self.stream.write("\n")
            self.stream.flush()


def make_reporter(progress: ProgressArg, label: str, total: int) -> Optional[ProgressCallback]:
    """``progress``: None/False (nothing), True (a bar on stderr when it is a
    terminal), or a callable ``f(done, total)``."""
    if progress is None or progress is False:
        return None
    if progress is True:
        return Bar(label, total)
    if callable(progress):
        return progress
    raise TypeError("progress must be None, a bool or a callable f(done, total)")
