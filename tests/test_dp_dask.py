"""``dp -O scheduler=ADDRESS``: the trial bounds searched as tasks of a Dask cluster
(:mod:`chainpipe.solvers.dp_dask`) give the optimum the sequential walk gives, stop every
task they no longer need, keep to the time limit, and refuse what they cannot use."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time
from pathlib import Path

import pytest

from chainpipe.instances import generate
from chainpipe.io import read
from chainpipe.result import OptionError
from chainpipe.solve import solve
from helpers import check_hybrid_optimum, random_hybrid_instance

distributed = pytest.importorskip("distributed")

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def cluster():
    """A cluster of one worker with two threads, in this process, over TCP (so that a
    command in a child process can reach it too)."""
    with distributed.LocalCluster(n_workers=1, threads_per_worker=2, processes=False,
                                  protocol="tcp", dashboard_address=":0") as c:
        # one client for the module's looks at the cluster, open throughout: the worker
        # lives in this process and takes the process's client as its own
        with distributed.Client(c, timeout="10s") as client:
            c.looker = client
            yield c


def _ours_running(cluster) -> list:
    """The keys of this module's trial tasks the cluster still processes."""
    return [k for keys in cluster.looker.processing().values() for k in keys
            if str(k).startswith("chainpipe-dp-")]


def _idle_soon(cluster, within: float = 3.0) -> list:
    """Wait up to ``within`` seconds for no trial task to be running; what is left."""
    end = time.monotonic() + within
    while True:
        left = _ours_running(cluster)
        if not left or time.monotonic() > end:
            return left
        time.sleep(0.1)


@pytest.mark.parametrize("seed", range(8))
def test_cluster_equals_brute_force(seed, cluster):
    inst = random_hybrid_instance(7100 + seed)
    check_hybrid_optimum(inst, solve(inst, "dp", time_limit=60,
                                     scheduler=cluster.scheduler_address))


@pytest.mark.parametrize("path", ["instances/hybrid/medium/hybrid-medium-01.json",
                                  "instances/hybrid/medium/hybrid-medium-04-degraded.json",
                                  "instances/v3/small/v3-small-02-two-pipelines.json"])
def test_cluster_equals_one_process(path, cluster):
    inst = read(ROOT / path)
    here = solve(inst, "dp", time_limit=120)
    there = solve(inst, "dp", time_limit=120, scheduler=cluster.scheduler_address)
    assert here.status == there.status == "optimal"
    assert math.isclose(here.iteration_time, there.iteration_time, rel_tol=1e-12)
    assert not _idle_soon(cluster)


def test_every_trial_runs_as_a_task_and_none_outlives_the_run(cluster):
    inst = generate("hybrid", seed=1)
    lines = []
    res = solve(inst, "dp", time_limit=120, scheduler=cluster.scheduler_address,
                log=lines.append)
    assert res.status == "optimal"
    assert res.stats["cluster"] is True
    trials = res.stats["trials"]
    assert trials and trials[-1]["found"] and all(not t["found"] for t in trials[:-1])
    assert len(lines) == len(trials)
    assert not _idle_soon(cluster)
    one = solve(inst, "dp", time_limit=120)
    assert math.isclose(one.iteration_time, res.iteration_time, rel_tol=1e-12)


def test_time_limit_covers_the_tasks(cluster):
    inst = read(ROOT / "instances/hybrid/large/hybrid-large-01.json")
    start = time.monotonic()
    res = solve(inst, "dp", time_limit=1.0, scheduler=cluster.scheduler_address)
    took = time.monotonic() - start
    assert res.status in ("no_solution", "feasible", "optimal")
    assert took < 1.0 + 1.5, took
    # every task of the run sees its stop event (or its own limit) within a poll
    assert not _idle_soon(cluster, within=2.0)


def test_bad_address_is_refused_before_anything_runs():
    inst = read(ROOT / "instances/hybrid/medium/hybrid-medium-01.json")
    with pytest.raises(OptionError, match="-O scheduler: expected an address"):
        solve(inst, "dp", scheduler="tcp://no host:99")


def test_unreachable_scheduler_is_an_error_within_the_limit():
    inst = read(ROOT / "instances/hybrid/medium/hybrid-medium-01.json")
    start = time.monotonic()
    res = solve(inst, "dp", time_limit=1.0, scheduler="tcp://127.0.0.1:9")
    assert time.monotonic() - start < 1.0 + 1.5
    assert res.status == "error"
    assert "no Dask scheduler answered at tcp://127.0.0.1:9" in res.message


def test_command_line(cluster, tmp_path):
    path = ROOT / "instances/hybrid/medium/hybrid-medium-02-man100.json"
    run = subprocess.run(
        [sys.executable, "-m", "chainpipe", "solve", str(path), "--solver", "dp", "-q",
         "--format", "json", "-O", f"scheduler={cluster.scheduler_address}"],
        capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    got = json.loads(run.stdout)
    here = solve(read(path), "dp", time_limit=120)
    assert got["status"] == "optimal"
    assert math.isclose(got["iteration_time_s"], here.iteration_time, rel_tol=1e-12)
    bad = subprocess.run(
        [sys.executable, "-m", "chainpipe", "solve", str(path), "--solver", "dp", "-q",
         "-O", "scheduler=tcp://127.0.0.1:99999"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2
    assert bad.stderr.strip().count("\n") == 0 and "-O scheduler" in bad.stderr
    assert "Traceback" not in bad.stderr


def test_a_running_trial_stops_at_its_event(cluster):
    """A task has no time limit here; only its stop event ends it (within a poll)."""
    from chainpipe.solvers import dp_dask

    inst = read(ROOT / "instances/hybrid/large/hybrid-large-01.json")
    client = cluster.looker
    name = "chainpipe-dp-test-stop"
    fut = client.submit(dp_dask.trial_task, inst, math.inf, None, name, pure=False,
                        key="chainpipe-dp-test-task")
    time.sleep(1.0)
    assert not fut.done()  # the unbounded trial of a 256-GPU chain is far from done
    start = time.monotonic()
    distributed.Event(name, client=client).set()
    kind, found, _ = fut.result(timeout=30)
    assert (kind, found) == ("timeout", None)
    assert time.monotonic() - start < dp_dask.POLL_S + 1.0


def test_compare_hands_dp_trials_to_the_cluster(cluster, tmp_path):
    """``compare -O dp.scheduler=ADDRESS``: each dp run's trials go to the cluster (the
    runs themselves still run here); the results equal a plain sweep's."""
    from chainpipe.compare import run_sweep

    paths = [str(ROOT / "instances/hybrid/medium/hybrid-medium-01.json"),
             str(ROOT / "instances/hybrid/medium/hybrid-medium-03-man400.json")]
    there = run_sweep(paths, ["dp"], 60, tmp_path / "there", progress=False, figures=False,
                      solver_options={"dp": {"scheduler": cluster.scheduler_address}})
    here = run_sweep(paths, ["dp"], 60, tmp_path / "here", progress=False, figures=False)
    assert [r["status"] for r in there] == ["optimal", "optimal"]
    assert [r["iteration_time_s"] for r in there] == [r["iteration_time_s"] for r in here]
    assert all(r["options"] == {"scheduler": cluster.scheduler_address} for r in there)


@pytest.mark.parametrize("option, message", [
    ("scheduler=tcp://h:1", "expected SOLVER.KEY=VALUE"),
    ("cpsat.workers=2", "cpsat is not among the sweep's solvers"),
    ("dp.nonsense=1", "-O dp.nonsense:"),
])
def test_compare_options_are_checked_before_anything_runs(option, message, tmp_path):
    path = ROOT / "instances/hybrid/medium/hybrid-medium-01.json"
    run = subprocess.run(
        [sys.executable, "-m", "chainpipe", "compare", str(path), "--solvers", "dp",
         "--out", str(tmp_path / "out"), "-O", option], capture_output=True, text=True,
        timeout=120)
    assert run.returncode == 2
    assert message in run.stderr and "Traceback" not in run.stderr
    assert not (tmp_path / "out").exists()


def test_a_shared_setup_checks_the_running_tasks_deadline():
    """A worker keeps one instance's set-up for the run's trials; its option capacity
    calls the deadline check it was built with, which must be the running task's own,
    not the first task's (stopped by then, it would stop every later trial)."""
    from chainpipe.deadline import Deadline, TimeUp
    from chainpipe.solvers import dp_dask

    inst = read(ROOT / "instances/hybrid/medium/hybrid-medium-01.json")
    setup = dp_dask._setup(inst, Deadline(None))
    capacity = setup[1]
    assert capacity is not None
    assert dp_dask._setup(inst, Deadline(0.0)) is setup  # the same instance: kept
    with pytest.raises(TimeUp):
        capacity.check()
    assert dp_dask._setup(inst, Deadline(None)) is setup
    capacity.check()  # the running task's deadline has time left


def test_two_runs_of_one_instance_on_one_cluster(cluster):
    inst = generate("hybrid", seed=2)
    first = solve(inst, "dp", time_limit=120, scheduler=cluster.scheduler_address)
    again = solve(inst, "dp", time_limit=120, scheduler=cluster.scheduler_address)
    assert first.status == again.status == "optimal"
    assert first.iteration_time == again.iteration_time


def test_an_instance_with_no_plan_ends_at_the_feasibility_check(cluster):
    """While the cluster runs the trials, this process asks whether any plan exists: an
    instance with none is ``infeasible`` without waiting for the tasks, none left."""
    from chainpipe.solvers import dp
    from helpers import brute_force_hybrid

    inst = next(i for i in (random_hybrid_instance(s, max_layers=5) for s in range(100))
                if brute_force_hybrid(i)[1] is None and dp.run(i).stats.get("trials"))
    res = solve(inst, "dp", time_limit=60, scheduler=cluster.scheduler_address)
    assert res.status == "infeasible" and res.message
    assert res.stats["feasibility"]["feasible"] is False
    assert not _idle_soon(cluster)
