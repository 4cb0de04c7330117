"""The progress line of a long search: on a terminal only, off with --quiet and --log."""

from __future__ import annotations

import io
import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

from chainpipe import progress
from chainpipe.io import read
from chainpipe.progress import ProgressLine
from chainpipe.solve import solve

ROOT = Path(__file__).resolve().parents[1]
HYBRID = ROOT / "instances" / "hybrid" / "medium" / "hybrid-medium-01.json"


def test_the_line_keeps_the_best_incumbent_and_bound():
    out = io.StringIO()
    with ProgressLine(out, "ilp-path", delay=0) as line:
        progress.report(3.0, None)
        progress.report(2.0, 1.0)
        progress.report(2.5, 0.5)  # worse on both: kept as it was
        progress.report(float("inf"), float("nan"))
        assert line.text(elapsed=1.25) == ("ilp-path  1.2 s  incumbent 2 s  bound 1 s  "
                                           "gap 50.00%")
    assert progress._active is None
    progress.report(1.0, 1.0)  # nothing showing: a no-op
    assert ProgressLine(io.StringIO(), "cpsat").text(elapsed=0) == "cpsat  0.0 s  no plan yet"


@pytest.mark.parametrize("solver, options", [("cpsat", {}), ("ilp-path", {}),
                                             ("ilp-path", {"backend": "cbc"})])
def test_each_search_reports_plans_and_bounds_in_seconds(solver, options):
    inst = read(HYBRID)
    seen = []
    line = ProgressLine(io.StringIO(), solver, delay=1e9)
    line.update = lambda inc, bound: seen.append((inc, bound))
    with line:
        res = solve(inst, solver, time_limit=8, **options)
    incumbents = [i for i, _ in seen if i is not None]
    bounds = [b for _, b in seen if b is not None]
    assert incumbents, seen
    # in seconds (not the model's scaled objective): each incumbent is a plan's T
    assert min(incumbents) == pytest.approx(res.iteration_time, rel=1e-6) or \
        min(incumbents) >= res.iteration_time * (1 - 1e-6)
    if bounds:
        assert max(bounds) <= res.iteration_time * (1 + 1e-6)


def _on_a_terminal(*args: str, timeout: float = 60) -> str:
    """Run the CLI with stderr on a pseudo-terminal; what the terminal showed."""
    main, secondary = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "chainpipe", *args], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=secondary, stdin=subprocess.DEVNULL)
    os.close(secondary)
    shown = b""
    until = time.monotonic() + timeout
    while time.monotonic() < until:
        ready, _, _ = select.select([main], [], [], 0.5)
        if ready:
            try:
                chunk = os.read(main, 4096)
            except OSError:
                break
            if not chunk:
                break
            shown += chunk
        elif proc.poll() is not None:
            break
    proc.wait(timeout=10)
    os.close(main)
    return shown.decode("utf-8", "replace")


def test_a_terminal_shows_the_line_and_quiet_or_a_pipe_does_not(tmp_path):
    args = ["solve", str(HYBRID), "--solver", "cpsat", "--time-limit", "3", "--format", "json"]
    shown = _on_a_terminal(*args)
    # the line, with what the search has (on a loaded machine CP-SAT may find no plan
    # in 3 s: the line then says so; its incumbents are checked by the test above)
    assert "\r\x1b[Kcpsat  " in shown
    assert "incumbent " in shown or "no plan yet  bound " in shown
    assert shown.endswith("\r\x1b[K") or "\r\x1b[K" in shown.splitlines()[-1]
    assert "cpsat  " not in _on_a_terminal(*args, "--quiet")
    piped = subprocess.run([sys.executable, "-m", "chainpipe", *args], cwd=ROOT,
                           capture_output=True, text=True, timeout=60)
    assert "\x1b[K" not in piped.stderr and "incumbent" not in piped.stderr
