"""CP-SAT's windows of the period and its path pruning under every period (issue 33,
fourteenth round; ``docs/cpsat.md``, "Windows of the period")."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest

from chainpipe import evaluate
from chainpipe.formulations.cpsat import CpsatModel, loop_pruned, stage_arcs
from chainpipe.formulations.ilp_flow import FlowFormulation
from chainpipe.formulations.pipelines import sub_instance
from chainpipe.io import read
from chainpipe.solve import solve
from chainpipe.solvers import cpsat
from chainpipe.tables import CostTables
from helpers import brute_force_v3, random_v3_instance

ROOT = Path(__file__).resolve().parents[1]
MEDIUM = ROOT / "instances" / "v3" / "medium"


def _one_pipeline(inst):
    """``inst`` with one pipeline allowed (the windows apply to one-pipeline models)."""
    par = dataclasses.replace(inst.training.parallelism, pipelines=(1,))
    return dataclasses.replace(inst, training=dataclasses.replace(inst.training,
                                                                  parallelism=par))


def _windowed_seeds(count: int) -> list[int]:
    """Seeds of :func:`random_v3_instance` whose one-pipeline instance the windows take:
    1F1B's period, ``M > 1``, at least two DCs."""
    out = []
    for seed in range(400):
        inst = random_v3_instance(seed)
        t = inst.training
        if t.schedule == "1f1b" and t.objective == "period" and len(inst.datacenters) >= 2:
            out.append(seed)
        if len(out) == count:
            return out
    return out


WINDOW_SEEDS = _windowed_seeds(24)


@pytest.mark.parametrize("seed", WINDOW_SEEDS)
def test_windows_equal_the_brute_force_on_random_one_pipeline_instances(seed):
    """One pipeline of 2-3 DCs under 1F1B's loops: solved by windows of the period (the
    statistics say so whenever a heuristic plan sets the upper bound), the optimum is
    the enumerator's and the bound never above it."""
    inst = _one_pipeline(random_v3_instance(seed))
    T = brute_force_v3(inst)[1][0]
    r = solve(inst, "cpsat", time_limit=60)
    if not math.isfinite(T):
        assert r.status == "infeasible", (seed, r.status, r.message)
        return
    assert r.status == "optimal", (seed, r.status, r.message)
    assert math.isclose(r.iteration_time, T, rel_tol=1e-6, abs_tol=1e-12), (seed, T)
    assert r.lower_bound <= T * (1 + 1e-9)
    assert evaluate(inst, r.plan).feasible
    if r.stats.get("upper_bound_source") in ("greedy", "metis"):
        assert "period_windows" in r.stats, seed


def test_the_random_seeds_reach_windows_that_cpsat_solves(monkeypatch):
    """Over the seeds above, CP-SAT solves windows (not all are closed by their keys)
    when the windows' least paths are not offered as plans; with them (the default) the
    windows need fewer CP-SAT solves."""
    from chainpipe.formulations import flow_windows

    def solves() -> int:
        out = 0
        for seed in WINDOW_SEEDS[:12]:
            r = solve(_one_pipeline(random_v3_instance(seed)), "cpsat", time_limit=60)
            out += r.stats.get("period_windows", {}).get("cpsat_solves", 0)
        return out

    with_paths = solves()
    monkeypatch.setattr(flow_windows, "PATH_PLANS", False)
    solved = solves()
    assert solved >= 3 and with_paths < solved, (solved, with_paths)


@pytest.mark.parametrize("seed", WINDOW_SEEDS[:12])
def test_a_window_model_holds_every_plan_of_its_period(seed):
    """Four windows covering the whole period range, each a CP-SAT model: the least over
    windows of their optima is the optimum and the least of their bounds at most it
    (every plan is in the window of its period, costed at most at its ``T``)."""
    inst = _one_pipeline(random_v3_instance(seed))
    T = brute_force_v3(inst)[1][0]
    if not math.isfinite(T) or inst.training.microbatches < 2:
        pytest.skip("no plan, or no period")
    tables = CostTables(inst)
    upper = T * 1.05 + 1e-9
    form = FlowFormulation(tables, upper_bound=upper, exits=False)
    lo, hi = form.period_range()
    edges = np.geomspace(lo, hi, 5) if lo > 0 else np.linspace(lo, hi, 5)
    best, bound = math.inf, math.inf
    for a, b in zip(edges[:-1].tolist(), edges[1:].tolist()):
        g = form.window(a, b, upper)
        if not g.n_arcs:
            continue
        built = CpsatModel.build(tables, upper, window=g)
        if not len(built.x_vars):
            continue
        from ortools.sat.python import cp_model

        s = cp_model.CpSolver()
        s.parameters.num_workers = 1
        s.parameters.presolve_inclusion_work_limit = 0
        s.parameters.max_time_in_seconds = 60.0
        status = s.solve(built.model)
        if s.status_name(status) == "OPTIMAL":
            bound = min(bound, built.true_bound(s.best_objective_bound))
            plan = built.decode(list(s.response_proto.solution))
            best = min(best, float(evaluate(inst, plan).iteration_time_s))
    assert bound <= T * (1 + 1e-9), (seed, bound, T)
    assert math.isclose(best, T, rel_tol=1e-6, abs_tol=1e-12), (seed, best, T)


def test_path_pruning_applies_under_gpipe():
    """GPipe's period: the arc-flow network's whole-path bounds (both phase maxima) prune
    the options of ``v3-medium-04``'s one-pipeline entry to a handful under the
    heuristic plan's ``T`` (once only 1F1B's models were pruned so)."""
    inst = sub_instance(read(MEDIUM / "v3-medium-04-gpipe.json"), 0, 3, 64)
    tables = CostTables(inst)
    upper = 1.2105
    arcs = stage_arcs(tables, upper)
    kept = loop_pruned(tables, arcs, upper)
    assert len(kept) < len(arcs) / 100, (len(kept), len(arcs))


def test_gpipe_one_pipeline_entry_proven():
    """The same entry is proven optimal by CP-SAT within 60 s (it stopped at the tables'
    bound, 14 % below, before the path pruning)."""
    inst = sub_instance(read(MEDIUM / "v3-medium-04-gpipe.json"), 0, 3, 64)
    ref = solve(inst, "dp")
    r = solve(inst, "cpsat", time_limit=60)
    assert r.status == "optimal", (r.status, r.lower_bound, r.iteration_time)
    assert math.isclose(r.iteration_time, ref.iteration_time, rel_tol=1e-6)


def test_windows_switch_off_with_the_feature():
    """``features`` without ``windows`` solves the whole model in rounds, as before."""
    seed = WINDOW_SEEDS[0]
    inst = _one_pipeline(random_v3_instance(seed))
    names = sorted(cpsat.FEATURES - {"windows"})
    r = solve(inst, "cpsat", time_limit=60, features=names)
    assert "period_windows" not in r.stats
    assert r.stats["rounds"]
