"""The arc-flow route's decomposition on the period (``chainpipe/formulations/flow_windows.py``):
windows of ``lambda`` with fixed-period flow-weighted loop rows, best first, against the
brute-force enumerator of ``tests/helpers.py`` on random small one-pipeline 1F1B instances
(many paced by a loop), with both backends; time-limited brackets; a solve gone on with."""

from __future__ import annotations

import dataclasses
import functools
import math

import pytest

from chainpipe import evaluate
from chainpipe.deadline import Deadline
from chainpipe.formulations import flow_windows
from chainpipe.formulations.common import period_mode
from chainpipe.formulations.flow_windows import PeriodWindows
from chainpipe.formulations.ilp_flow import FlowFormulation
from chainpipe.solve import solve
from chainpipe.tables import CostTables
from helpers import brute_force_v3, random_v3_instance

FLOW = {"device_states": True}
#: a loose incumbent: the windows' model holds every plan up to this many times the optimum
LOOSE = 1.6


@functools.cache
def _case(seed: int):
    """``(one-pipeline instance, optimum, whether a loop paces the optimum)`` of random
    instance ``seed`` when its period is 1F1B's and some plan exists, else ``None``."""
    inst = random_v3_instance(seed)
    one = dataclasses.replace(inst, training=dataclasses.replace(
        inst.training, parallelism=dataclasses.replace(inst.parallelism, pipelines=(1,))))
    if period_mode(CostTables(one)) != "1f1b":
        return None
    ref = brute_force_v3(one).get(1, (math.inf,))[0]
    if not math.isfinite(ref):
        return None
    r = solve(one, "dp")
    loop = evaluate(one, r.plan).bottleneck.startswith("loop")
    return one, ref, loop


def _solver(backend: str):
    """A window's MIP on ``backend``, HiGHS told the incumbent as the route tells it."""
    from chainpipe.solvers.highs import solve_highs
    from chainpipe.solvers.ilp import PROOF_OPTIONS

    def run(model, g, best, dl):
        if backend == "highs":
            model.highs_options = dict(model.highs_options, **PROOF_OPTIONS,
                                       objective_bound=best / g.scale * (1 + 1e-7))
            return solve_highs(model, relax=False, deadline=dl)
        from chainpipe.solvers.cbc import solve_cbc

        return solve_cbc(model, relax=False, deadline=dl)

    return run


def _windows(one, ref: float, backend: str, limit: float = 60.0, **kw) -> PeriodWindows:
    form = FlowFormulation(CostTables(one), upper_bound=LOOSE * ref)
    return PeriodWindows(form, _solver(backend), Deadline(limit), **kw)


SEEDS = range(64)


def test_the_random_cases_have_loops_binding():
    """Not vacuous: many of the cases' optima are paced by a 1F1B loop."""
    cases = [_case(s) for s in SEEDS]
    loops = sum(1 for c in cases if c is not None and c[2])
    assert sum(c is not None for c in cases) >= 24 and loops >= 8, loops


@pytest.mark.parametrize("seed", SEEDS)
def test_windows_prove_the_brute_force_optimum(seed):
    """From a loose incumbent (``LOOSE`` times the optimum: many windows open, MIPs
    run, windows split), every window closed, the optimum's plan found, the bound at it."""
    case = _case(seed)
    if case is None:
        return
    one, ref, _loop = case
    for backend in (("highs", "cbc") if seed % 4 == 0 else (("highs", "cbc")[seed % 2],)):
        res = _windows(one, ref, backend, width=0.05, min_width=0.01, slice_s=5.0).run()
        where = (seed, backend, res.stats)
        assert res.closed and res.plan is not None, where
        assert math.isclose(res.T, ref, rel_tol=1e-6), (where, res.T, ref)
        assert evaluate(one, res.plan).iteration_time_s == res.T, where
        assert ref * (1 - 1e-6) <= res.bound <= ref * (1 + 1e-9), (where, res.bound)


@pytest.mark.parametrize("seed", [s for s in SEEDS if s % 3 == 0])
def test_time_limited_windows_bracket_the_optimum(seed):
    """Stopped early (tiny slices, a short deadline): ``bound <= optimum <= T``, and
    the windows left open go on to the optimum when resumed."""
    case = _case(seed)
    if case is None:
        return
    one, ref, _loop = case
    w = _windows(one, ref, "highs", limit=0.05, width=0.02, min_width=0.005, slice_s=0.01)
    res = w.run()
    assert res.bound <= ref * (1 + 1e-9) and res.T >= ref * (1 - 1e-9), (seed, res.bound, res.T)
    res = w.resume(_solver("highs"), Deadline(60), LOOSE * ref).run()
    assert res.closed and math.isclose(res.T, ref, rel_tol=1e-6), (seed, res.T, ref)


@pytest.mark.parametrize("seed", [s for s in SEEDS if s % 4 == 1])
def test_windows_resumed_under_a_cutoff_below_the_optimum_prove_it(seed):
    """A resumed solve under a cutoff below the optimum: no plan, every window closed,
    the bound is the cutoff (no plan faster)."""
    case = _case(seed)
    if case is None:
        return
    one, ref, _loop = case
    w = _windows(one, ref, "highs", limit=0.05, slice_s=0.01)
    w.run()
    res = w.resume(_solver("highs"), Deadline(60), 0.97 * ref).run()
    assert res.closed and res.plan is None, (seed, res.stats)
    assert math.isclose(res.bound, 0.97 * ref, rel_tol=1e-6), (seed, res.bound)


@pytest.mark.parametrize("seed", [s for s in SEEDS if s % 2 == 0])
def test_the_windowed_route_agrees_with_the_brute_force(seed, monkeypatch):
    """``ilp-path -O device_states=true`` with the windows on every 1F1B model
    (``WINDOW_COLUMNS`` 0, any number of DCs, any root gap), both backends: the optimum proven; under a cutoff below it
    the status never ``optimal`` and the bound at most the cutoff."""
    monkeypatch.setattr(flow_windows, "WINDOW_COLUMNS", 0)
    monkeypatch.setattr(flow_windows, "WINDOW_DCS", 99)
    monkeypatch.setattr(flow_windows, "WINDOW_GAP", -1.0)  # whatever the root LP says
    case = _case(seed)
    if case is None:
        return
    one, ref, _loop = case
    backend = ("highs", "cbc")[(seed // 2) % 2]
    r = solve(one, "ilp-path", time_limit=60, backend=backend, **FLOW)
    assert r.status == "optimal" and math.isclose(r.iteration_time, ref, rel_tol=1e-6), \
        (seed, backend, r.status, r.iteration_time, ref)
    assert r.lower_bound <= ref * (1 + 1e-9)
    if "root_lp" in r.stats:  # a model was built (not pruned empty by the heuristic plan)
        assert r.stats["root_lp"]["windows"] and "period_windows" in r.stats, r.stats
    r = solve(one, "ilp-path", time_limit=60, backend=backend, cutoff=0.99 * ref, **FLOW)
    assert r.status != "optimal" and r.lower_bound <= 0.99 * ref * (1 + 1e-9), (seed, r.status)


def test_a_window_keeps_exactly_the_plans_of_its_period():
    """``FlowFormulation.window``: a window's plan has its period at most the window's
    top and ``T`` at most the model's value (plans below the window are costed at its
    floor), and the least window value over a cover of the period's range is the
    optimum (each MIP solved alone, no incumbent)."""
    from chainpipe.solvers.highs import solve_highs

    for seed in SEEDS:
        case = _case(seed)
        if case is None or not case[2]:
            continue
        one, ref, _loop = case
        form = FlowFormulation(CostTables(one), upper_bound=LOOSE * ref)
        lo, hi = form.period_range()
        edges = [lo * (hi / lo) ** (n / 6) for n in range(7)]
        values = []
        for a, b in zip(edges[:-1], edges[1:]):
            g = form.window(a, b)
            if not g.n_arcs:
                continue
            assert g.cheap_bound >= form.cheap_bound
            model = g.build(flow_loops=True)
            ans = solve_highs(model, relax=False, deadline=Deadline(30))
            if ans.status == "optimal":
                model.assign(ans.values)
                ev = evaluate(one, g.decode())
                assert ev.bottleneck_s <= b * (1 + 1e-9), (seed, a, b, ev)
                assert ev.iteration_time_s <= ans.bound * g.scale * (1 + 1e-6)
                values.append(ev.iteration_time_s)
        assert values and math.isclose(min(values), ref, rel_tol=1e-6), (seed, values, ref)
