"""A plain-text progress bar with ETA on stderr (no dependency).

On a terminal it redraws one line; otherwise (CI logs, pipes) it prints one
line per finished run.
"""

from __future__ import annotations

import sys
import time


def _clock(seconds: float) -> str:
    seconds = max(0, round(seconds))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m:02d}:{s:02d}"


class Progress:
    def __init__(self, total: int, skipped: int = 0, stream=None, enabled: bool = True,
                 width: int = 28):
        self.total = total
        self.skipped = skipped
        self.done = 0
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = enabled and total > 0
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.width = width
        self.start = time.monotonic()
        if self.enabled and skipped:
            print(f"resuming: {skipped} run(s) already in results.jsonl, {total} to go",
                  file=self.stream, flush=True)

    def eta(self) -> float | None:
        if self.done == 0:
            return None
        elapsed = time.monotonic() - self.start
        return elapsed / self.done * (self.total - self.done)

    def line(self, rec: dict) -> str:
        elapsed = time.monotonic() - self.start
        eta = self.eta()
        frac = self.done / self.total
        filled = round(frac * self.width)
        bar = "#" * filled + "." * (self.width - filled)
        T = rec.get("iteration_time_s")
        what = (f"{rec['instance']} {rec['solver']}"
                + (f" seed {rec['seed']}" if rec.get("seed") else "")
                + f": {rec['status']}" + (f" T={T:.6g}s" if T is not None else "")
                + f" in {rec['solve_time_s']:.2f}s")
        return (f"[{bar}] {self.done}/{self.total} {100 * frac:3.0f}% "
                f"elapsed {_clock(elapsed)} ETA {_clock(eta) if eta is not None else '--:--'}"
                f"  {what}")

    def update(self, rec: dict) -> None:
        self.done += 1
        if not self.enabled:
            return
        if self.tty:
            text = self.line(rec)
            self.stream.write("\r\x1b[2K" + text[:200])
            if self.done == self.total:
                self.stream.write("\n")
        else:
            self.stream.write(self.line(rec) + "\n")
        self.stream.flush()

    def close(self) -> None:
        if self.enabled and self.tty and self.done < self.total:
            self.stream.write("\n")
            self.stream.flush()
