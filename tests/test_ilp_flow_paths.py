"""The windows' least paths as plans (``formulations/flow_excess.py``, ``least_paths``):
on the random small 1F1B instances of ``test_ilp_flow_windows.py``, a walked-back path is
a source-to-sink chain of the window's columns whose fill is the sweep's least, each cap
on the synchronisation lowers its ``max R``, and the decoded plans are mostly feasible and
often the optimum."""

from __future__ import annotations

import math

import numpy as np
from test_ilp_flow_excess import _cover
from test_ilp_flow_windows import SEEDS, _case

from chainpipe import evaluate
from chainpipe.formulations import flow_excess
from chainpipe.formulations.ilp_flow import FlowFormulation
from chainpipe.tables import CostTables

#: the upper bound over the optimum: windows above the optimum's period stay open
LOOSE = 1.6


def _chain(ex, cols) -> bool:
    """Whether ``cols`` is a source-to-sink path of ``ex``'s kept columns."""
    return (int(ex.tails[cols[0]]) in set(ex.sources.tolist())
            and int(ex.heads[cols[-1]]) in set(ex.sinks.tolist())
            and bool(ex.ok[cols].all())
            and all(ex.heads[a] == ex.tails[b] for a, b in zip(cols, cols[1:])))


def _windows():
    """``(case, window network)`` of every window of the cases that the excess applies to."""
    for seed in SEEDS:
        case = _case(seed)
        if case is None:
            continue
        form = FlowFormulation(CostTables(case[0]), upper_bound=case[1] * LOOSE)
        if not form.n_arcs:
            continue
        for a, b in _cover(form):
            g = form.window(a, b)
            if g.n_arcs and flow_excess.applies(g):
                yield (seed, case), g


def test_the_least_path_is_a_chain_of_least_fill():
    """The walked-back path is a chain of the window's columns, from a source to a sink,
    and its fill is the forward sweep's least (fails when the walk takes a column whose
    value does not match, or stops short of a source)."""
    walked = 0
    for (seed, _), g in _windows():
        ex = flow_excess._Excess(g, g.period[1])
        cols, total = ex.least_path(ex.fill, np.ones(len(ex.fill), dtype=bool))
        least = float(ex.forward(ex.fill, False)[ex.sinks].min())
        if not math.isfinite(least):
            assert cols is None, seed
            continue
        assert cols is not None and _chain(ex, cols), (seed, cols)
        assert math.isclose(float(ex.fill[cols].sum()), least, rel_tol=1e-9), seed
        assert math.isclose(total, least, rel_tol=1e-12), seed
        walked += 1
    assert walked >= 200, walked


def test_the_plans_lower_their_sync_and_reach_the_optimum():
    """Each further path of :func:`least_paths` has a smaller ``max R`` than the last;
    the decoded plans are feasible on most windows (388 of 388 when written), none is
    below the brute-force optimum, and many are the optimum (285; not vacuous)."""
    feasible = tried = optimal = 0
    for (seed, (one, ref, _loop)), g in _windows():
        last = math.inf
        for plan in flow_excess.least_paths(g):
            tried += 1
            r = g.chosen_sync()
            assert r < last * (1 - 1e-12) or not g.count_sync, (seed, r, last)
            last = r
            ev = evaluate(one, plan)
            if ev.feasible:
                feasible += 1
                assert ev.iteration_time_s >= ref * (1 - 1e-9), (seed, ev.iteration_time_s)
                optimal += math.isclose(ev.iteration_time_s, ref, rel_tol=1e-9)
    assert tried >= 200 and feasible >= 0.9 * tried and optimal >= 50, (tried, feasible, optimal)
