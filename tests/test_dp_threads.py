"""``dp`` with ``threads > 1``: the trial bounds searched in forked processes
(:mod:`chainpipe.solvers.dp_parallel`) give the optimum the sequential walk gives,
stop at the time limit with a valid bound, and leave no process behind."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psutil
import pytest

from chainpipe.instances import generate
from chainpipe.solve import solve
from chainpipe.solvers import dp_parallel
from helpers import check_hybrid_optimum, random_hybrid_instance

pytestmark = pytest.mark.skipif(not dp_parallel.available(), reason="needs fork")


@pytest.fixture
def left_behind():
    """A callable listing the processes started under this test (children of this one,
    recursively) still alive. Those alive before it are not counted: another test of the
    same worker may keep processes of its own (a clean-clone run once had a python
    child of the worker sleeping through every test of this file)."""
    me = psutil.Process(os.getpid())
    before = {c.pid for c in me.children(recursive=True)}

    def alive() -> list:
        return [c for c in me.children(recursive=True) if c.pid not in before
                and c.is_running() and c.status() != psutil.STATUS_ZOMBIE]

    return alive


@pytest.mark.parametrize("seed", range(12))
def test_two_processes_equal_brute_force(seed, left_behind):
    inst = random_hybrid_instance(7000 + seed)
    check_hybrid_optimum(inst, solve(inst, "dp", time_limit=60, threads=2))
    assert not left_behind()


def test_trials_run_side_by_side_and_match_one_process(monkeypatch, left_behind):
    from chainpipe.solvers import dp

    monkeypatch.setattr(dp, "PARALLEL_AFTER_S", 0.0)  # side by side from the second trial
    inst = generate("hybrid", seed=1)
    one = solve(inst, "dp", time_limit=120, threads=1)
    two = solve(inst, "dp", time_limit=120, threads=2)
    assert one.status == two.status == "optimal"
    assert two.iteration_time == one.iteration_time
    assert two.stats["processes"] == 2
    # every failed trial is below the optimum, the one that found it above
    for trial in two.stats["trials"]:
        assert trial["found"] == (trial["upper_bound"] > two.iteration_time)
    assert not left_behind()


def test_time_limit_gives_a_valid_bound_and_no_process_left(left_behind):
    inst = generate("hybrid-large", seed=2)
    start = time.monotonic()
    res = solve(inst, "dp", time_limit=1.5, threads=2)
    assert time.monotonic() - start < 1.5 + 3.0
    assert res.status in ("no_solution", "optimal")
    if res.status == "no_solution":
        assert res.lower_bound is None or res.lower_bound <= 143.84459146865225 * (1 + 1e-9)
    assert not left_behind()


def test_children_die_with_the_command(tmp_path):
    """A ``solve --threads 2`` killed by SIGKILL leaves no trial process running."""
    src = tmp_path / "inst.json"
    proc = subprocess.run([sys.executable, "-m", "chainpipe", "generate", "--preset",
                           "hybrid-large", "--seed", "2", "--objective", "classic", "-o",
                           str(src)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    cmd = subprocess.Popen([sys.executable, "-m", "chainpipe", "solve", str(src), "--solver",
                            "dp", "--threads", "2", "--time-limit", "60"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    parent = psutil.Process(cmd.pid)
    children: list = []
    for _ in range(1200):  # until the trials run (set-up takes seconds on a loaded machine)
        children = parent.children(recursive=True)
        if len(children) >= 2 or cmd.poll() is not None:
            break
        time.sleep(0.05)
    assert children, "no trial process started"
    cmd.kill()
    cmd.wait()
    _, alive = psutil.wait_procs(children, timeout=5)
    assert not [p for p in alive if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


def test_an_instance_with_no_plan_ends_at_the_feasibility_check(monkeypatch, left_behind):
    """Beside the forked trials the parent runs the feasibility check: an instance with no
    plan is ``infeasible`` without waiting for the trials, and none is left running."""
    from chainpipe.solvers import dp
    from helpers import brute_force_hybrid

    monkeypatch.setattr(dp, "PARALLEL_AFTER_S", -1.0)  # side by side from the first trial
    inst = next(i for i in (random_hybrid_instance(s, max_layers=5) for s in range(100))
                if brute_force_hybrid(i)[1] is None and dp.run(i).stats.get("trials"))
    res = solve(inst, "dp", time_limit=60, threads=2)
    assert res.status == "infeasible" and res.message
    assert res.stats["feasibility"]["feasible"] is False
    assert not left_behind()
