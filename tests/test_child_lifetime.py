"""Children die with their parent (issue 28, item 10): a ``compare`` run outlived a
SIGKILLed ``compare`` by about 11 s (until its own limit); now the kernel
(``PR_SET_PDEATHSIG``) or the watcher thread ends it at once.

Every process a test starts is killed in its ``finally``, whatever the outcome.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from chainpipe.io import write
from helpers import random_instance

ROOT = Path(__file__).resolve().parents[1]
ENV = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "tests")]))
#: how soon a child must be gone once its parent is killed, seconds
GONE_WITHIN_S = 3.0

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")

_DRIVER = """
import sys
from chainpipe.solve import SOLVERS, SolverInfo
SOLVERS["fake-sleep"] = SolverInfo("fake-sleep", "fake_solvers:sleeper", False, "test solver")
from chainpipe.cli import main
sys.exit(main(sys.argv[1:]))
"""


def _children(pid: int) -> list[int]:
    """Live child processes of ``pid``, from /proc."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        if int(fields[1]) == pid and fields[0] != "Z":
            out.append(int(entry))
    return out


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2:].split()[0] != "Z"


def _wait_gone(pid: int, seconds: float) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if not _alive(pid):
            return True
        time.sleep(0.05)
    return not _alive(pid)


def _first_child(proc: subprocess.Popen, seconds: float = 30.0) -> int:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        kids = _children(proc.pid)
        if kids:
            return kids[0]
        time.sleep(0.05)
    pytest.fail("the child never started")


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def test_a_compare_run_dies_with_a_sigkilled_compare(tmp_path):
    inst = tmp_path / "r1.json"
    write(random_instance(1, max_layers=4, max_dcs=2), inst)
    proc = subprocess.Popen(
        [sys.executable, "-c", _DRIVER, "compare", str(inst), "--solvers", "fake-sleep",
         "--time-limit", "600", "--out", str(tmp_path / "out"), "--no-progress"],
        env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    child = None
    try:
        child = _first_child(proc)
        time.sleep(0.5)  # the run is under way (its solver sleeps for an hour)
        assert _alive(child)
        proc.kill()
        proc.wait(timeout=10)
        assert _wait_gone(child, GONE_WITHIN_S), "the run outlived its compare"
    finally:
        proc.kill()
        proc.wait()
        if child is not None:
            _kill(child)


def test_the_watcher_thread_kills_a_child_whose_parent_is_gone(tmp_path):
    """The fallback where ``prctl`` is missing, exercised on its own."""
    ready = tmp_path / "watching"
    code = ("import os, subprocess, sys, time\n"
            "child = subprocess.Popen([sys.executable, '-c', "
            "'import os, sys, time; from chainpipe.lifeline import watch_parent; "
            "watch_parent(int(sys.argv[1])); open(sys.argv[2], \"w\").close(); time.sleep(60)', "
            f"str(os.getpid()), {str(ready)!r}])\n"
            "print(child.pid, flush=True)\n"
            "time.sleep(60)\n")
    proc = subprocess.Popen([sys.executable, "-c", code], env=ENV, stdout=subprocess.PIPE,
                            text=True)
    child = None
    try:
        child = int(proc.stdout.readline())
        end = time.monotonic() + 30
        while not ready.exists() and time.monotonic() < end:
            time.sleep(0.05)
        assert ready.exists() and _alive(child)
        proc.kill()
        proc.wait(timeout=10)
        assert _wait_gone(child, GONE_WITHIN_S)
    finally:
        proc.kill()
        proc.wait()
        if child is not None:
            _kill(child)


def test_a_backend_program_dies_with_its_runner():
    """``solvers.child.run_child`` (CBC's runner) ties its program the same way."""
    code = ("import sys\n"
            "from chainpipe.deadline import Deadline\n"
            "from chainpipe.solvers.child import run_child\n"
            "run_child([sys.executable, '-c', 'import time; time.sleep(60)'], "
            "deadline=Deadline(600))\n")
    proc = subprocess.Popen([sys.executable, "-c", code], env=ENV)
    child = None
    try:
        child = _first_child(proc)
        time.sleep(0.3)
        proc.kill()
        proc.wait(timeout=10)
        assert _wait_gone(child, GONE_WITHIN_S)
    finally:
        proc.kill()
        proc.wait()
        if child is not None:
            _kill(child)
