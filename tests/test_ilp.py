"""The two ILP formulations (``ilp-assign``, ``ilp-path``) with both backends.

Cross-checked against the brute-force enumerator of ``tests/helpers.py`` on random
small instances, against the exact DP on the committed ``instances/small`` set and
on larger random instances under a time limit (bound sandwich).
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from chainpipe import Datacenter, DeviceGroup, Instance, Layer, Link, Model, Training
from chainpipe.formulations.common import (
    candidate_options,
    max_stages,
    position_classes,
)
from chainpipe.io import read
from chainpipe.solve import solve
from chainpipe.tables import CostTables
from helpers import brute_force, check_bracket, random_instance

COMBOS = [(s, b) for s in ("ilp-assign", "ilp-path") for b in ("highs", "cbc")]
RTOL = 1e-6
SMALL = Path(__file__).resolve().parent.parent / "instances" / "small"


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= RTOL * max(abs(a), abs(b)) + 1e-12


@pytest.mark.parametrize("seed", range(64))
def test_both_formulations_both_backends_prove_brute_force_optimum(seed):
    inst = random_instance(seed, max_layers=5)
    best, _ = brute_force(inst)
    for solver, backend in COMBOS:
        r = solve(inst, solver, backend=backend)
        where = f"{solver}/{backend} seed {seed}"
        if math.isinf(best):
            assert r.status == "infeasible", where
            assert r.plan is None and r.message, where
            continue
        assert r.status == "optimal", (where, r.status, r.message)
        assert _close(r.iteration_time, best), (where, r.iteration_time, best)
        assert r.lower_bound is not None and r.lower_bound <= best * (1 + 1e-9), where
        assert r.gap is not None and r.gap <= RTOL, where


@pytest.mark.parametrize("seed", range(12))
def test_lp_relaxation_bound_is_below_optimum(seed):
    inst = random_instance(1000 + seed, max_layers=5)
    best, _ = brute_force(inst)
    for solver, backend in COMBOS:
        r = solve(inst, solver, backend=backend, relax=True)
        where = f"{solver}/{backend} seed {seed}"
        if math.isinf(best):
            assert r.status in ("infeasible", "no_solution"), where
            continue
        assert r.status == "no_solution" and r.plan is None, where
        assert r.lower_bound is not None and r.lower_bound == r.stats["lp_bound_s"], where
        assert 0 <= r.lower_bound <= best * (1 + 1e-9), (where, r.lower_bound, best)


@pytest.mark.parametrize("seed", range(4))
def test_time_limited_runs_sandwich_the_dp_optimum(seed):
    inst = random_instance(500 + seed, max_layers=22, max_dcs=4, max_types=3, max_count=5,
                           schedule="1f1b" if seed % 2 else "gpipe")
    ref = solve(inst, "dp")
    assert ref.status in ("optimal", "infeasible")
    for solver, backend in COMBOS:
        r = solve(inst, solver, backend=backend, time_limit=0.4)
        where = f"{solver}/{backend} seed {seed}"
        check_bracket(ref, r, where, RTOL)
        if ref.status != "infeasible" and r.status != "optimal":
            assert r.message, where


def _instance(layers, groups_per_dc, M=4, schedule="1f1b", links=None):
    dcs = tuple(
        Datacenter(f"dc{k}", tuple(groups), Link(100.0, 0.0)) for k, groups in enumerate(groups_per_dc)
    )
    links = links or tuple(Link(10.0, 0.1) for _ in range(len(dcs) - 1))
    return Instance("t", Model("m", tuple(layers)), Training(M, schedule, 1.0), dcs, links)


def _layer(i, params=4, act=1.0):
    return Layer(f"l{i}", 10.0, 20.0, params, act, 5.0)


def test_infeasible_by_device_count_is_proved_by_the_solvers():
    # each layer fits a device alone, no two together, and there is one device
    inst = _instance([_layer(0), _layer(1)], [[DeviceGroup("g", 1, 10.0, 6.0)]], M=1)
    assert CostTables(inst).infeasibility_reason() is None
    assert math.isinf(brute_force(inst)[0])
    for solver, backend in COMBOS:
        r = solve(inst, solver, backend=backend)
        assert r.status == "infeasible", (solver, backend, r.status)
        assert r.message


def test_infeasible_by_1f1b_position_is_proved():
    # the first of two stages stashes 2 microbatches and fits nowhere; one stage does not fit
    g = DeviceGroup("g", 2, 10.0, 5.5)
    inst = _instance([_layer(0, params=4, act=1.0), _layer(1, params=4, act=1.0)], [[g]], M=4)
    assert CostTables(inst).infeasibility_reason() is None
    assert math.isinf(brute_force(inst)[0])
    for solver, backend in COMBOS:
        assert solve(inst, solver, backend=backend).status == "infeasible", (solver, backend)


def test_obvious_infeasibility_reports_the_tables_reason():
    inst = _instance([_layer(0, params=100)], [[DeviceGroup("g", 2, 10.0, 6.0)]])
    reason = CostTables(inst).infeasibility_reason()
    for solver in ("ilp-assign", "ilp-path"):
        r = solve(inst, solver)
        assert r.status == "infeasible" and r.message == reason


def test_worked_example_of_the_contract():
    layers = [Layer(f"l{i}", 100.0, 200.0, 0, 0.0, 20.0) for i in range(3)]
    inst = Instance("ex", Model("m", tuple(layers)), Training(4, "gpipe", 16.0),
                    (Datacenter("a", (DeviceGroup("g", 2, 100.0, 1e9),), Link(10.0, 0.5)),), ())
    for solver, backend in COMBOS:
        r = solve(inst, solver, backend=backend)
        assert r.status == "optimal" and _close(r.iteration_time, 32.0), (solver, backend)


def test_skipped_datacenter_uses_path_min_bandwidth_and_summed_latency():
    # the middle DC has no useful device; the best plan spans dc0 -> dc2
    fast = DeviceGroup("f", 1, 100.0, 1e6)
    slow = DeviceGroup("s", 1, 0.01, 1e6)
    layers = [Layer(f"l{i}", 100.0, 100.0, 1, 0.0, 50.0) for i in range(4)]
    inst = _instance(layers, [[fast], [slow], [fast]], M=8,
                     links=(Link(20.0, 1.0), Link(5.0, 2.0)))
    best, _ = brute_force(inst)
    for solver, backend in COMBOS:
        r = solve(inst, solver, backend=backend)
        assert r.status == "optimal" and _close(r.iteration_time, best), (solver, backend)


def test_stats_report_model_size_backend_and_times():
    inst = random_instance(3, max_layers=5)
    for solver, backend in COMBOS:
        st = solve(inst, solver, backend=backend).stats
        for key in ("variables", "constraints", "nonzeros", "build_time_s", "solve_time_s",
                    "solver_status"):
            assert key in st, (solver, key)
        assert st["backend"] == backend and st["variables"] > 0 and st["nonzeros"] > 0
    st = solve(inst, "ilp-path").stats
    assert 0 < st["stage_arcs"] <= st["stage_arcs_after_filter"] <= st["stage_arcs_total"]


def test_bad_options_are_errors():
    inst = random_instance(3, max_layers=3)
    with pytest.raises(ValueError, match="unknown backend"):
        solve(inst, "ilp-path", backend="gurobi")
    with pytest.raises(ValueError, match="unknown option 'bottleneck' for ilp-assign"):
        solve(inst, "ilp-assign", bottleneck="node")
    with pytest.raises(ValueError, match="unknown option"):
        solve(inst, "ilp-path", nonsense=1)


@pytest.mark.parametrize("rows", ["layer", "node"])
def test_path_bottleneck_row_variants_agree(rows):
    for seed in (7, 8, 9, 11):
        inst = random_instance(seed, max_layers=5)
        best, _ = brute_force(inst)
        r = solve(inst, "ilp-path", bottleneck=rows)
        assert r.stats.get("bottleneck_rows", rows) == rows
        if math.isinf(best):
            assert r.status == "infeasible"
        else:
            assert r.status == "optimal" and _close(r.iteration_time, best)


def test_position_classes_and_candidate_filter():
    g = DeviceGroup("g", 8, 10.0, 1e9)
    layers = [_layer(i) for i in range(6)]
    t = CostTables(_instance(layers, [[g]], M=3))
    pos = position_classes(t)
    assert (pos.count, pos.saturating) == (3, True)  # positions >= 3 all stash M = 3
    assert pos.successors(3) == (3, 2) and pos.successors(1) == ()
    t = CostTables(_instance(layers, [[g]], M=3, schedule="gpipe"))
    assert (position_classes(t).count, position_classes(t).saturating) == (1, True)
    # memory: at most 2 microbatches fit anywhere, so under 1F1B at most 2 stages
    tight = DeviceGroup("g", 8, 10.0, 4 + 2 * 1.0 + 0.5)
    t = CostTables(_instance([_layer(i) for i in range(4)], [[tight]], M=8))
    assert max_stages(t) == 2
    cand = candidate_options(t)
    assert len(cand) < cand.total
    for g_, i, j, c in zip(cand.group, cand.start, cand.end, cand.cls):
        assert t.fits(g_, i, j, c)
        assert (j == t.L) == (c == 1)


@pytest.mark.parametrize("name", ["small-03-mem-1f1b", "small-04-mem-gpipe", "small-06-one-dc",
                                  "small-08-three-dc", "small-infeasible"])
def test_committed_small_instances_match_the_dp(name):
    path = SMALL / f"{name}.json"
    if not path.exists():
        pytest.skip(f"{path} not committed")
    inst = read(path)
    ref = solve(inst, "dp")
    for solver in ("ilp-assign", "ilp-path"):
        r = solve(inst, solver, time_limit=60)
        assert r.status == ref.status, (name, solver, r.status, r.message)
        if ref.status == "optimal":
            assert _close(r.iteration_time, ref.iteration_time), (name, solver)


def test_a_backend_that_cannot_start_is_an_error_status(monkeypatch):
    """A missing CBC binary (or a model HiGHS refuses) is status error with one line."""
    import chainpipe.solvers.cbc as cbc
    from chainpipe.solvers.child import ChildFailed

    def broken(*args, **kwargs):
        raise ChildFailed("cannot start /nonexistent/cbc: No such file or directory")

    monkeypatch.setattr(cbc, "solve_cbc", broken)
    inst = random_instance(5, max_layers=3)
    res = solve(inst, "ilp-path", backend="cbc")
    if res.status != "infeasible":  # an instance the tables prove infeasible never builds
        assert res.status == "error" and "cannot start" in res.message
