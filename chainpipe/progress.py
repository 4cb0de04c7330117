"""A live progress line for a long search: elapsed time, incumbent, bound and gap.

The MIP and CP routes can run for their whole time limit; on a terminal,
``chainpipe solve`` shows where they are, on one line of stderr rewritten in place::

    cpsat  12.4 s  incumbent 1.58716 s  bound 1.53021 s  gap 3.59%

A solver calls :func:`report` wherever it learns a better plan or bound (in any
thread); it does nothing unless a :class:`ProgressLine` is showing. Times are
iteration times in seconds, the gap the one definition ``(T - bound) / T``.
"""

from __future__ import annotations

import math
import threading
import time
from typing import TextIO

#: the line showing now (one solve per command), or None
_active: ProgressLine | None = None


def report(incumbent_s: float | None = None, bound_s: float | None = None) -> None:
    """Tell the progress line (if one is showing) of a plan's ``T`` or a proven bound."""
    line = _active
    if line is not None:
        line.update(incumbent_s, bound_s)


class ProgressLine:
    """One line on a terminal, rewritten every ``interval`` seconds until closed.

    Parameters
    ----------
    stream : text stream
        A terminal (stderr).
    label : str
        The solver's name, first on the line.
    interval : float, default 0.5
        Seconds between two redraws.
    delay : float, default 1.0
        Nothing is drawn before this many seconds: a quick solve leaves no trace.

    Examples
    --------
    >>> import io
    >>> with ProgressLine(io.StringIO(), "cpsat", delay=0) as line:
    ...     report(2.0, 1.5)
    ...     line.text(elapsed=3.0)
    'cpsat  3.0 s  incumbent 2 s  bound 1.5 s  gap 25.00%'
    """

    def __init__(self, stream: TextIO, label: str, interval: float = 0.5, delay: float = 1.0):
        self.stream, self.label, self.interval, self.delay = stream, label, interval, delay
        self.start = time.monotonic()
        self.incumbent, self.bound = math.inf, -math.inf
        self.lock = threading.Lock()
        self.done = threading.Event()
        self.drawn = False
        self.thread = threading.Thread(target=self._tick, name="progress", daemon=True)

    def update(self, incumbent_s: float | None, bound_s: float | None) -> None:
        """Keep the least incumbent and the largest bound seen (non-finite ones ignored)."""
        with self.lock:
            if incumbent_s is not None and math.isfinite(incumbent_s):
                self.incumbent = min(self.incumbent, incumbent_s)
            if bound_s is not None and math.isfinite(bound_s):
                self.bound = max(self.bound, bound_s)

    def text(self, elapsed: float | None = None) -> str:
        """The line as drawn now (``elapsed`` seconds since the start, default: the clock)."""
        elapsed = time.monotonic() - self.start if elapsed is None else elapsed
        with self.lock:
            inc, bound = self.incumbent, self.bound
        parts = [self.label, f"{elapsed:.1f} s"]
        parts.append(f"incumbent {inc:.6g} s" if math.isfinite(inc) else "no plan yet")
        if math.isfinite(bound):
            parts.append(f"bound {bound:.6g} s")
        if math.isfinite(inc) and math.isfinite(bound) and inc > 0:
            parts.append(f"gap {100 * max(0.0, (inc - bound) / inc):.2f}%")
        return "  ".join(parts)

    def _tick(self) -> None:
        if self.done.wait(self.delay):
            return
        while True:
            self.stream.write("\r\x1b[K" + self.text())
            self.stream.flush()
            self.drawn = True
            if self.done.wait(self.interval):
                return

    def __enter__(self) -> ProgressLine:
        global _active
        _active = self
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        global _active
        _active = None
        self.done.set()
        self.thread.join()
        if self.drawn:  # leave the terminal as it was
            self.stream.write("\r\x1b[K")
            self.stream.flush()


__all__ = ["ProgressLine", "report"]
