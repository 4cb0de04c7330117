"""The arc-flow path ILP (``ilp-path -O device_states=true``,
:mod:`chainpipe.formulations.ilp_flow`): the brute-force optimum with both backends,
agreement with the DP on ``instances/hybrid/small``, time-limited brackets, LP bounds
below the optimum, and its option errors."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from chainpipe import read
from chainpipe.formulations.ilp_flow import FlowFormulation, ModelTooLarge, reachable_usage
from chainpipe.plan import evaluate
from chainpipe.result import OptionError
from chainpipe.solve import solve
from chainpipe.tables import CostTables
from helpers import brute_force_hybrid, check_bracket, close, random_hybrid_instance

RTOL = 1e-6
ROOT = Path(__file__).resolve().parent.parent
HYBRID_SMALL = sorted((ROOT / "instances" / "hybrid" / "small").glob("hybrid-small-*.json"))
FLOW = {"device_states": True}


@pytest.mark.parametrize("seed", range(64))
def test_device_states_prove_the_hybrid_brute_force_optimum_with_both_backends(seed):
    inst = random_hybrid_instance(seed)
    best, _ = brute_force_hybrid(inst)
    for backend in ("highs", "cbc"):
        r = solve(inst, "ilp-path", backend=backend, **FLOW)
        where = f"{backend} seed {seed}"
        if math.isinf(best):
            assert r.status == "infeasible" and r.plan is None, (where, r.status)
            continue
        assert r.status == "optimal", (where, r.status, r.message)
        assert close(r.iteration_time, best), (where, r.iteration_time, best)
        assert r.iteration_time == evaluate(inst, r.plan).iteration_time_s, where
        assert r.lower_bound is not None and r.lower_bound <= best * (1 + 1e-9), where


@pytest.mark.parametrize("seed", range(16))
def test_device_states_without_pruning_prove_the_optimum(seed):
    """No heuristic plan (``prune`` and ``start`` off): every arc stays."""
    inst = random_hybrid_instance(100 + seed)
    best, _ = brute_force_hybrid(inst)
    r = solve(inst, "ilp-path", prune=False, start=False, **FLOW)
    if math.isinf(best):
        assert r.status == "infeasible", (seed, r.status)
        return
    assert r.status == "optimal" and close(r.iteration_time, best), (seed, r.status)


def check_flow_proves_dp_optimum(path: Path) -> None:
    """The arc-flow form proves the instance file's optimum, the DP's (``close``)."""
    inst = read(path)
    ref = solve(inst, "dp")
    r = solve(inst, "ilp-path", time_limit=60, **FLOW)
    assert r.status == "optimal", (path.stem, r.status, r.message)
    assert close(r.iteration_time, ref.iteration_time), path.stem


@pytest.mark.parametrize("path", HYBRID_SMALL, ids=lambda p: p.stem)
def test_device_states_match_the_dp_on_hybrid_small(path):
    check_flow_proves_dp_optimum(path)


@pytest.mark.parametrize("seed", range(4))
def test_time_limited_device_state_runs_sandwich_the_dp_optimum(seed):
    inst = random_hybrid_instance(700 + seed, max_layers=14, max_dcs=3)
    ref = solve(inst, "dp")
    for backend in ("highs", "cbc"):
        r = solve(inst, "ilp-path", backend=backend, time_limit=0.3, **FLOW)
        check_bracket(ref, r, f"{backend} seed {seed}", RTOL)


@pytest.mark.parametrize("seed", range(8))
def test_device_state_lp_bound_is_below_the_optimum(seed):
    inst = random_hybrid_instance(300 + seed)
    best, _ = brute_force_hybrid(inst)
    r = solve(inst, "ilp-path", relax=True, **FLOW)
    if math.isinf(best):
        assert r.status in ("infeasible", "no_solution")
        return
    assert r.status == "no_solution" and 0 <= r.lower_bound <= best * (1 + 1e-9), seed


def test_reachable_usage_is_the_sums_of_widths():
    assert reachable_usage([2, 4], 9).tolist() == [0, 2, 4, 6, 8]
    assert reachable_usage([3, 4], 8).tolist() == [0, 3, 4, 6, 7, 8]
    assert reachable_usage([], 4).tolist() == [0]
    assert reachable_usage([16], 8).tolist() == [0]


def test_every_state_copy_fits_the_group():
    """A stage column never takes a group past its count, and states start at zero."""
    form = FlowFormulation(CostTables(read(HYBRID_SMALL[-1])))
    assert len(set(form.col_arc.tolist())) < len(form.col_arc)  # some arcs have copies
    a, t = form.arcs, form.tables
    S = len(form.states)
    for n, tail, head in zip(form.col_arc, form.col_tail, form.col_head):
        k = int(t.group_dc[a.group[n]])
        pos = form.dc_groups[k].index(int(a.group[n]))
        (k1, u), (k2, v) = form.states[tail % S], form.states[head % S]
        assert k1 == k2 == k and v[pos] == u[pos] + a.width[n] <= t.count[a.group[n]]
        assert sum(v) - sum(u) == a.width[n]
        if a.start[n] == 0:
            assert not any(u)


def test_too_large_a_network_is_refused():
    tables = CostTables(read(HYBRID_SMALL[0]))
    n = len(FlowFormulation(tables).col_arc)
    assert n >= 2
    with pytest.raises(ModelTooLarge):
        FlowFormulation(tables, max_columns=n - 1)


def test_device_states_option_errors(tmp_path):
    inst = random_hybrid_instance(3)
    with pytest.raises(OptionError, match="device_states"):
        solve(inst, "ilp-assign", **FLOW)
    with pytest.raises(OptionError, match="write_model"):
        solve(inst, "ilp-path", write_model=str(tmp_path / "m.lp"), **FLOW)


def _flow_and_dp(inst):
    """The arc-flow run of ``inst`` checked against ``dp`` (the same optimum, or no plan
    either), and the evaluation of ``dp``'s optimal plan (``None`` without one)."""
    ref = solve(inst, "dp")
    r = solve(inst, "ilp-path", **FLOW)
    if ref.status != "optimal":
        assert r.status in ("infeasible", "no_solution"), r.status
        return r, None
    assert r.status == "optimal" and close(r.iteration_time, ref.iteration_time)
    return r, evaluate(inst, ref.plan)


@pytest.mark.parametrize("seed", range(24))
def test_probed_floors_are_below_the_optimal_plans_maxima(seed):
    """The LP-probe floors on ``B`` and ``S`` never exceed the bottleneck and the
    synchronisation of the DP's optimal plan (every plan in the network has maxima at
    least the floors, and an optimal one survives the pruning)."""
    inst = random_hybrid_instance(500 + seed, max_layers=8)
    r, ev = _flow_and_dp(inst)
    if ev is None:
        return
    floors = r.stats.get("floor_phase", {})
    for which, value in (("B", ev.bottleneck_s), ("S", ev.sync_s)):
        floor = floors.get(which, {}).get("floor_s")
        assert floor is None or floor <= value * (1 + 1e-9), (seed, which, floor, value)


@pytest.mark.parametrize("seed", range(24))
def test_path_floors_are_below_the_optimal_plans_maxima(seed):
    """The bottleneck-shortest-path floors on ``B`` and ``S`` of the device-state network
    (:meth:`FlowFormulation._path_bounds`) never exceed the maxima of an optimal plan, and
    pruning by whole-path bounds keeps an optimal plan (the run proves the optimum)."""
    inst = random_hybrid_instance(900 + seed, max_layers=8)
    r, ev = _flow_and_dp(inst)
    if ev is None:
        return
    for key, value in (("path_floor_B_s", ev.bottleneck_s if inst.training.microbatches > 1
                        else 0.0), ("path_floor_S_s", ev.sync_s)):
        assert r.stats[key] <= value * (1 + 1e-9), (seed, key, r.stats[key], value)


def test_path_bounds_prune_and_prove_hybrid_medium_04():
    """``hybrid-medium-04-degraded``: the whole-path bounds drop most of the 35,101 stage
    columns and the floor on ``B`` reaches the link's occupancy, so the run proves the
    optimum well inside 60 s (before them HiGHS did not finish the root LP)."""
    inst = read(ROOT / "instances" / "hybrid" / "medium" / "hybrid-medium-04-degraded.json")
    r = solve(inst, "ilp-path", time_limit=60, **FLOW)
    assert r.status == "optimal", (r.status, r.message)
    assert close(r.iteration_time, 1.2277779367288644)
    assert r.stats["path_pruned_columns"] > r.stats["stage_columns"]
    assert r.stats["path_floor_B_s"] <= evaluate(inst, r.plan).bottleneck_s * (1 + 1e-9)


@pytest.mark.parametrize("seed", range(16))
def test_the_mip_start_is_a_feasible_point_no_slower_than_the_heuristic_plan(seed):
    """:meth:`FlowFormulation.start` maps the heuristic plan onto the columns: every row
    and column bound holds, and its objective is at most the plan's ``T``."""
    import numpy as np
    import scipy.sparse as sp

    from chainpipe.solvers.incumbent import heuristic_plan

    inst = random_hybrid_instance(1200 + seed, max_layers=8)
    plan, T, _src = heuristic_plan(inst)
    if plan is None:
        return
    form = FlowFormulation(CostTables(inst), upper_bound=T)
    m = form.build()
    v = form.start(plan)
    assert v is not None, seed
    A = sp.csr_matrix((m.value, m.index, m.starts), shape=(m.num_rows, m.num_cols))
    act = A @ v
    tol = 1e-9 * max(1.0, float(np.abs(act).max()))
    assert (act >= m.row_lower - tol).all() and (act <= m.row_upper + tol).all(), seed
    assert (v >= m.col_lower - tol).all() and (v <= m.col_upper + tol).all(), seed
    assert float(m.cost @ v) * form.scale <= T * (1 + 1e-9), seed
    assert solve(inst, "ilp-path", **FLOW).stats["mip_start"] is True, seed
