"""CDynP with one process per DC under faults: a dead, hung or lying agent is named,
the run ends in time, and nothing outlives it (processes or files).

Faults are injected through the agents' test hook (``session.FAULT_ENV``), never an option.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from chainpipe.solvers.cdynp.runner import GRACE_S
from chainpipe.solvers.cdynp.session import FAULT_ENV
from helpers import sigint_at_default

ROOT = Path(__file__).resolve().parents[1]
INSTANCE = ROOT / "instances" / "small" / "small-08-three-dc.json"  # dc1, dc2, dc3
#: what starting the interpreter and the agents may take on a loaded machine (6 s failed
#: now and then at load 6-7 on 2 cores; at load 1.5 the slowest case takes 2.4 s of it)
STARTUP_S = 10.0


def _env(tmp_path: Path, fault: str | None) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    env["TMPDIR"] = str(tmp_path / "tmp")
    (tmp_path / "tmp").mkdir(exist_ok=True)
    env.pop(FAULT_ENV, None)
    if fault:
        env[FAULT_ENV] = fault
    return env


def _solve(tmp_path, fault, *args, timeout=40.0):
    cmd = [sys.executable, "-m", "chainpipe", "solve", str(INSTANCE), "--solver", "cdynp",
           "-O", "processes=true", "--format", "json", *args]
    t0 = time.monotonic()
    proc = subprocess.run(cmd, env=_env(tmp_path, fault), capture_output=True, text=True,
                          timeout=timeout)
    return proc, time.monotonic() - t0


@pytest.mark.parametrize("fault,dc", [("kill:dc2", "dc2"), ("kill:dc3", "dc3"),
                                      ("kill:dc2@forward", "dc2"), ("kill:dc1@forward", "dc1")])
def test_a_killed_agent_is_named_without_a_time_limit(tmp_path, fault, dc):
    proc, elapsed = _solve(tmp_path, fault)
    assert proc.returncode == 1, proc.stderr
    res = json.loads(proc.stdout)
    assert res["status"] == "error"
    assert res["message"] == f"cdynp: the agent of DC '{dc}' died (killed by SIGKILL)"
    assert elapsed < STARTUP_S + 3


@pytest.mark.parametrize("fault,dc", [("hang:dc3", "dc3"), ("hang:dc2@forward", "dc2")])
def test_a_hung_agent_is_named_by_the_time_limit(tmp_path, fault, dc):
    # above a fresh agent's start on a loaded machine (2.2 s seen at load 4-5): a limit
    # that ends before every healthy agent has started names no hung one
    limit = 5.0
    proc, elapsed = _solve(tmp_path, fault, "--time-limit", str(limit))
    res = json.loads(proc.stdout)
    assert res["status"] == "error", res
    assert f"DC '{dc}'" in res["message"] and "hung" in res["message"]
    assert limit + GRACE_S <= elapsed < limit + GRACE_S + STARTUP_S


def test_a_hung_agent_is_named_after_the_message_timeout_without_a_limit(tmp_path):
    proc, elapsed = _solve(tmp_path, "hang:dc2", "-O", "message_timeout=5")
    res = json.loads(proc.stdout)
    assert res["status"] == "error", res
    assert res["message"].startswith("cdynp: the agent of DC 'dc2' sent nothing for 5 s")
    assert elapsed < 5 + STARTUP_S


def test_a_forged_summary_is_named(tmp_path):
    proc, _ = _solve(tmp_path, "forge:dc3")
    res = json.loads(proc.stdout)
    assert res["status"] == "error" and res["plan"] is None
    assert res["message"].startswith("cdynp: DC 'dc3' sent a forged summary")


def test_the_fault_hook_is_not_an_option():
    from chainpipe.solve import solver_options

    assert not any("fault" in name for name in solver_options("cdynp"))


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL],
                         ids=lambda s: s.name)
def test_nothing_outlives_a_signalled_solve(tmp_path, sig):
    """The last DC hangs, so the solve is mid-run when the signal comes: afterwards no
    agent lives on and nothing is left in the temporary directory."""
    cmd = [sys.executable, "-m", "chainpipe", "solve", str(INSTANCE), "--solver", "cdynp",
           "-O", "processes=true"]
    # as from a terminal (three full runs with the notebooks saw the solve ignore SIGINT
    # and run on to the hang check, and passed with this)
    proc = subprocess.Popen(cmd, env=_env(tmp_path, "hang:dc3"), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=sigint_at_default)
    try:
        parent = psutil.Process(proc.pid)
        t0 = time.monotonic()
        children = []
        while len(children) < 3 and time.monotonic() - t0 < 30:
            time.sleep(0.1)
            children = parent.children(recursive=True)
        assert len(children) >= 3, "the agents did not start"
        time.sleep(1.0)  # let them get to work
        assert proc.poll() is None, proc.communicate()
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=60)  # generous: a loaded CI machine is slow
    finally:
        if proc.poll() is None:
            proc.kill()
    expected = {signal.SIGTERM: -signal.SIGTERM, signal.SIGINT: 130,
                signal.SIGKILL: -signal.SIGKILL}
    assert proc.returncode == expected[sig], (out, err)
    if sig == signal.SIGINT:
        assert err.strip().splitlines()[-1] == "interrupted"
    _, alive = psutil.wait_procs(children, timeout=5)
    alive = [p for p in alive if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert not alive, alive
    assert list((tmp_path / "tmp").iterdir()) == []
