"""Where a backend's log lines go: the caller's ``log`` callable, or standard error.

Nothing a solver prints may reach standard output (``--format json`` prints one JSON
object there), so a backend's log is split into lines and handed to ``log``.
"""

from __future__ import annotations

import sys


def line_logger(log):
    """A function feeding each non-empty line of a text chunk to ``log``."""
    def feed(text: str) -> None:
        for line in text.splitlines():
            if line.strip():
                log(line)
    return feed


def stderr_log(line: str) -> None:
    """A ``log`` that writes each line to standard error."""
    print(line, file=sys.stderr, flush=True)
