"""The loop-feasible least paths of a period window (``formulations/flow_excess.py``):
on random small 1F1B instances, the window holding the optimum's period keeps the
optimum's plan (its network not empty, its key at most the optimum) under the tightest
upper bound, and the windows below it are closed by the excess where they hold no plan."""

from __future__ import annotations

import math

import pytest
from test_ilp_flow_windows import SEEDS, _case

from chainpipe import evaluate
from chainpipe.formulations import flow_excess
from chainpipe.formulations.ilp_flow import FlowFormulation
from chainpipe.tables import CostTables

#: windows per cover of the period's range
N_WINDOWS = 12


def _cover(form):
    lo, hi = form.period_range()
    return [(lo * (hi / lo) ** (n / N_WINDOWS), lo * (hi / lo) ** ((n + 1) / N_WINDOWS))
            for n in range(N_WINDOWS)]


@pytest.mark.parametrize("grid", [flow_excess.GRID, 3])
def test_the_window_of_the_optimum_keeps_it(grid, monkeypatch):
    """Under an upper bound a hair above the optimum, the window whose range holds the
    optimum's period, and the one topped at it, are not emptied and its key stays at most the optimum, with the
    default grid and a coarse one; the excess applies on many cases and raises keys or
    empties windows on some (not vacuous)."""
    from chainpipe.solve import solve

    monkeypatch.setattr(flow_excess, "GRID", grid)
    applied = raised = 0
    for seed in SEEDS:
        case = _case(seed)
        if case is None:
            continue
        one, ref, _loop = case
        lam = evaluate(one, solve(one, "dp").plan).bottleneck_s
        form = FlowFormulation(CostTables(one), upper_bound=ref * (1 + 1e-6))
        if not form.n_arcs:
            continue
        for a, b in _cover(form):
            g = form.window(a, b)
            before = _without_excess(form, a, b, monkeypatch)
            if flow_excess.applies(before):
                applied += 1
                raised += g.cheap_bound > before.cheap_bound * (1 + 1e-9) or (
                    before.n_arcs and not g.n_arcs)
            if a * (1 - 1e-9) <= lam <= b * (1 + 1e-9):
                assert g.n_arcs, (seed, a, b, lam)
                assert g.cheap_bound <= ref * (1 + 1e-9), (seed, g.cheap_bound, ref)
        # the window topped at the optimum's period: a loop of the optimum is tight there
        g = form.window(lam * (1 - 1e-3), lam)
        assert g.n_arcs and g.cheap_bound <= ref * (1 + 1e-9), (seed, lam, g.cheap_bound, ref)
    assert applied >= 40 and raised >= 2, (applied, raised)


def _without_excess(form, a, b, monkeypatch):
    with monkeypatch.context() as m:
        m.setattr(flow_excess, "excess_prune", lambda g, grid=None: None)
        return form.window(a, b)


def test_an_excess_over_the_period_empties_the_window():
    """Not a no-op: somewhere below the optimum's period a window the whole-path and
    loop-over-all-stages pruning keep is emptied by the excess (its loops cannot hold)."""
    emptied = 0
    for seed in SEEDS:
        case = _case(seed)
        if case is None or not case[2]:
            continue
        one, ref, _loop = case
        form = FlowFormulation(CostTables(one), upper_bound=ref * 1.6)
        for a, b in _cover(form):
            g = form.window(a, b)
            emptied += bool(not g.n_arcs and math.isinf(g.cheap_bound))
    assert emptied >= 1
