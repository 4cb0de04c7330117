"""Issue 33, fourteenth round: the arc-flow route's windows of the period first on models
of several datacenters (``solvers/ilp.py:_windows_first``), then the whole MIP, against
the brute-force enumerator; and the outer enumeration's sub-solve slices, the loop LP's
and the floor probes' shares in CPU seconds under a CPU-time limit
(``formulations/pipelines.py:share``)."""

from __future__ import annotations

import dataclasses
import functools
import math
import time

import pytest

from chainpipe.deadline import Deadline
from chainpipe.formulations import flow_windows
from chainpipe.formulations.common import period_mode
from chainpipe.formulations.pipelines import SUB_SHARE, CpuPhase, OuterSearch, share
from chainpipe.plan import evaluate
from chainpipe.solve import solve
from chainpipe.tables import CostTables
from helpers import brute_force_v3, random_v3_instance

FLOW = {"device_states": True}


@functools.cache
def _case(seed: int):
    """``(one-pipeline instance, optimum)`` of random instance ``seed`` when it has two
    DCs or more, its period is 1F1B's and some plan exists, else ``None``."""
    inst = random_v3_instance(seed)
    if len(inst.datacenters) < 2:
        return None
    one = dataclasses.replace(inst, training=dataclasses.replace(
        inst.training, parallelism=dataclasses.replace(inst.parallelism, pipelines=(1,))))
    if period_mode(CostTables(one)) != "1f1b":
        return None
    ref = brute_force_v3(one).get(1, (math.inf,))[0]
    return (one, ref) if math.isfinite(ref) else None


def _first_windows_on_every_model(monkeypatch, part: float) -> None:
    """Every 1F1B model of two DCs or more takes the windows first (after the root LP,
    or before the loop LP where their excess applies), for ``part`` of the time left (one DC stays with the whole MIP: ``WINDOW_DCS`` 0)."""
    monkeypatch.setattr(flow_windows, "WINDOW_COLUMNS", 0)
    monkeypatch.setattr(flow_windows, "WINDOW_DCS", 0)
    monkeypatch.setattr(flow_windows, "FIRST_WINDOW_DCS", 2)
    monkeypatch.setattr(flow_windows, "WINDOW_GAP", -1.0)  # whatever the root LP says
    monkeypatch.setattr(flow_windows, "FIRST_WINDOW_SHARE", part)
    monkeypatch.setattr(flow_windows, "EXCESS_WINDOW_SHARE", part)


@pytest.mark.parametrize("seed", range(0, 64, 3))
def test_windows_first_then_the_whole_mip_agree_with_the_brute_force(seed, monkeypatch):
    """With all the time the windows prove the brute-force optimum alone; with none
    (stopped at once, their bound and plan kept) the whole MIP after them does; under a
    cutoff 1 % below the optimum never ``optimal`` and the bound at most the cutoff.
    Fails if the windows' outcome is returned when they stopped before closing."""
    case = _case(seed)
    if case is None:
        return
    one, ref = case
    for part in (1.0, 1e-12):
        _first_windows_on_every_model(monkeypatch, part)
        r = solve(one, "ilp-path", time_limit=60, **FLOW)
        assert r.status == "optimal" and math.isclose(r.iteration_time, ref, rel_tol=1e-6), \
            (seed, part, r.status, r.iteration_time, ref, r.message)
        assert r.lower_bound <= ref * (1 + 1e-9), (seed, part, r.lower_bound)
        if "root_lp" in r.stats:  # a model was built and its windows taken first
            assert "period_windows" in r.stats, (seed, r.stats)
            closed = r.stats["period_windows"]["closed"]
            assert ("windows_first" in r.stats) != closed, (seed, part)
            assert closed or part < 1, (seed, part)
        r = solve(one, "ilp-path", time_limit=60, cutoff=0.99 * ref, **FLOW)
        assert r.status != "optimal" and r.lower_bound <= 0.99 * ref * (1 + 1e-9), \
            (seed, part, r.status, r.lower_bound)


def test_the_windows_plan_and_bound_reach_the_mip_outcome():
    """:func:`_with_windows`: the windows' plan replaces a slower one of the MIP, and
    their bound raises the MIP's (``optimal`` once it meets the plan's ``T``). Fails
    when either is dropped."""
    from types import SimpleNamespace

    from chainpipe.result import Outcome
    from chainpipe.solvers import ilp
    from chainpipe.solvers.incumbent import heuristic_plan

    for seed in range(64):
        case = _case(seed)
        if case is None:
            continue
        one, ref = case
        slow, T_h, _name = heuristic_plan(one, Deadline(10))
        if slow is None or T_h <= ref * (1 + 1e-6):
            continue
        fast = solve(one, "dp").plan
        form = SimpleNamespace(windows_plan=fast)
        out = ilp._with_windows(Outcome("feasible", plan=slow, lower_bound=0.5 * ref),
                                form, {"windows_first": {"bound_s": ref}}, one)
        assert out.status.value == "optimal" and out.plan is fast, (seed, out)
        assert math.isclose(out.lower_bound, ref), (seed, out.lower_bound)
        form.windows_plan = None
        out = ilp._with_windows(Outcome("feasible", plan=slow, lower_bound=0.5 * ref),
                                form, {"windows_first": {"bound_s": 0.9 * ref}}, one)
        assert out.status.value == "feasible" and out.plan is slow
        assert math.isclose(out.lower_bound, 0.9 * ref)
        return
    pytest.skip("no instance whose heuristic plan is slower than its optimum")


def test_a_sub_solve_slice_counts_cpu_seconds_under_a_cpu_limit():
    """Under a CPU-time limit a sub-solve's slice (:meth:`OuterSearch.slice`) is
    :data:`SUB_SHARE` of the CPU seconds left: time asleep (other processes on a loaded
    machine) does not end it, work does; its length for the rounds' comparison is in CPU
    seconds. Under a wall-clock limit it stays a wall-clock share. Fails if the slice
    reads the wall clock under a CPU limit."""
    from chainpipe.formulations.pipelines import _seconds

    search = OuterSearch(None, CpuPhase(Deadline(30.0), 0.4), None, None)
    budget = search.slice()
    assert isinstance(budget, CpuPhase)
    assert math.isclose(_seconds(budget), SUB_SHARE * 0.4, rel_tol=0.05)
    time.sleep(0.3)  # past the slice on the wall clock, no CPU used
    assert not budget.expired() and budget.remaining() > 0.1
    t0 = time.process_time()
    while time.process_time() - t0 < 0.25:
        pass
    assert budget.expired()
    wall = OuterSearch(None, Deadline(2.0), None, None).slice()
    assert not isinstance(wall, CpuPhase) and wall.limit <= SUB_SHARE * 2.0
    assert OuterSearch(None, Deadline(None), None, None).slice().unlimited


def test_shares_follow_the_deadline_they_belong_to():
    """:func:`share` (the loop LP's and the floor probes' parts): CPU seconds within a
    CPU-time deadline (ending no later than it), wall-clock seconds within a wall-clock
    one, no limit for ``inf``."""
    outer = CpuPhase(Deadline(30.0), 0.05)
    part = share(outer, 10.0)
    assert isinstance(part, CpuPhase) and part.cpu_end() <= outer.cpu_end()
    wall = share(Deadline(30.0), 1.0)
    assert not isinstance(wall, CpuPhase) and wall.limit == 1.0
    assert share(Deadline(30.0), math.inf).unlimited


def test_windows_first_left_open_are_gone_on_with_by_a_later_solve(monkeypatch):
    """The windows first, stopped at once, keep their open windows in the outer
    enumeration's ``resume`` (``stats["resumable"]``); a later solve of the same block
    goes on with them (``resumed``) and proves the brute-force optimum. Fails when
    :func:`_windows_first` drops them (the enumeration's rounds then stop where the first
    solve did: fresh ``-02``-like seed 8)."""
    from chainpipe.solvers import ilp

    checked = 0
    for seed in range(0, 64, 3):
        case = _case(seed)
        if case is None:
            continue
        one, ref = case
        _first_windows_on_every_model(monkeypatch, 1e-12)
        resume = {}
        first = ilp._run("ilp-path", one, Deadline(60), 0, 1, None, dict(FLOW), resume)
        if "windows_first" not in first.stats:
            continue  # no model built (settled by the bounds), or the windows closed
        assert first.stats.get("resumable") and len(resume) == 1, (seed, first.stats)
        _first_windows_on_every_model(monkeypatch, 1.0)
        again = ilp._run("ilp-path", one, Deadline(60), 0, 1, None, dict(FLOW), resume)
        assert again.stats["period_windows"].get("resumed") == 1, (seed, again.stats)
        T = float(evaluate(one, again.plan).iteration_time_s)
        assert again.status.value == "optimal" and math.isclose(T, ref, rel_tol=1e-6), \
            (seed, again.status, T, ref)
        checked += 1
    assert checked >= 3, checked
