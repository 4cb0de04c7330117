"""The CP-SAT solver: exact optima, valid bounds despite integer scaling, honest statuses."""

from __future__ import annotations

import math

import numpy as np
import pytest

from chainpipe import solve
from chainpipe.formulations.cpsat import SCALE_UNITS, CpsatModel, greedy_plans, scaled_floor
from chainpipe.instances.sets import SETS
from chainpipe.plan import Plan, evaluate
from chainpipe.tables import CostTables
from helpers import brute_force, random_instance

pytest.importorskip("ortools")

RTOL = 1e-4  # the tolerance the tests demand; the solver's own is chainpipe.numeric.OPTIMALITY_RTOL
SEEDS = range(70)


def _bound_ok(bound, optimum):
    return bound is None or bound <= optimum * (1 + 1e-12) + 1e-15


@pytest.mark.parametrize("seed", SEEDS)
def test_matches_brute_force(seed):
    inst = random_instance(seed)
    opt, _ = brute_force(inst)
    r = solve(inst, "cpsat", seed=seed)
    if math.isinf(opt):
        assert r.status == "infeasible", r.message
        assert r.message
        return
    assert r.status == "optimal", (r.status, r.message)
    assert r.iteration_time == pytest.approx(opt, rel=RTOL, abs=1e-12)
    assert _bound_ok(r.lower_bound, opt)
    assert r.iteration_time - r.lower_bound <= RTOL * r.iteration_time


@pytest.mark.parametrize("seed", range(100, 112))
def test_bound_sandwich_on_tiny_time_limits(seed):
    inst = random_instance(seed, max_layers=7, max_dcs=3, max_count=3)
    opt, _ = brute_force(inst)
    r = solve(inst, "cpsat", time_limit=0.005, seed=seed)
    assert r.status in ("optimal", "feasible", "no_solution", "infeasible"), r.message
    if math.isinf(opt):
        assert r.status in ("infeasible", "no_solution")
        return
    assert r.status != "infeasible"
    assert _bound_ok(r.lower_bound, opt)
    if r.iteration_time is not None:
        assert r.lower_bound <= opt * (1 + 1e-12) <= r.iteration_time * (1 + 2e-12)


@pytest.mark.parametrize("seed", [3, 17, 42, 60])
def test_trace_is_monotone_and_in_true_seconds(seed):
    inst = random_instance(seed, max_layers=6, microbatches=16)
    opt, _ = brute_force(inst)
    r = solve(inst, "cpsat", seed=seed)
    if r.status == "infeasible" and math.isinf(opt):
        pytest.skip("infeasible instance: no search, no trace")
    trace = r.stats["trace"]
    assert trace, "the trace records at least the starting bound"
    times = [t for t, _, _ in trace]
    assert times == sorted(times)
    incumbents = [x for _, x, _ in trace if x is not None]
    bounds = [b for _, _, b in trace if b is not None]
    assert all(a >= b for a, b in zip(incumbents, incumbents[1:]))
    assert all(a <= b for a, b in zip(bounds, bounds[1:]))
    if math.isfinite(opt):
        assert all(x >= opt * (1 - 1e-12) for x in incumbents)
        assert all(_bound_ok(b, opt) for b in bounds)
        assert incumbents[-1] == pytest.approx(r.iteration_time, rel=1e-12)


def test_infeasible_by_reason_and_by_search():
    # a layer that fits no device: the tables give the reason without search
    inst = next(random_instance(s) for s in range(500)
                if CostTables(random_instance(s)).infeasibility_reason())
    r = solve(inst, "cpsat")
    assert r.status == "infeasible" and "layer" in r.message
    # infeasible only through search (device counts / 1F1B positions): CP-SAT must prove it
    found = 0
    for s in range(400):
        inst = random_instance(s)
        if CostTables(inst).infeasibility_reason() is None and math.isinf(brute_force(inst)[0]):
            r = solve(inst, "cpsat")
            assert r.status == "infeasible", (s, r.status, r.message)
            found += 1
            if found == 3:
                break
    assert found, "no search-infeasible instance among the seeds"


def test_worked_example():
    from chainpipe import Datacenter, DeviceGroup, Instance, Layer, Link, Model, Training

    ly = Layer("l", 100.0, 200.0, 0, 0.0, 20.0)
    inst = Instance("ex", Model("m", (ly, ly, ly)), Training(4, "gpipe", 16.0),
                    (Datacenter("a", (DeviceGroup("g", 2, 100.0, 1e9),), Link(10.0, 0.5)),), ())
    r = solve(inst, "cpsat")
    assert r.status == "optimal" and r.iteration_time == pytest.approx(32.0)
    assert r.lower_bound <= 32.0


def test_scaled_coefficients_never_exceed_true_costs():
    inst = random_instance(7, max_layers=6)
    t = CostTables(inst)
    ub = min(evaluate(inst, Plan.from_tuples(inst, p)).iteration_time_s for p in greedy_plans(t))
    m = CpsatModel.build(t, ub)
    true_c = t.compute_time[m.arcs.group, m.arcs.start, m.arcs.end]
    assert np.all(m.x_cost * m.unit <= true_c)
    assert np.all(true_c - m.x_cost * m.unit < m.unit * (1 + 1e-9))
    assert m.objective_cap < 2**31 and int(m.x_cost.max(initial=0)) < 2**31
    assert m.unit == pytest.approx(ub / SCALE_UNITS)
    # float division may round up; the shaved floor never does
    assert int(scaled_floor([3.0], 1.0)[0]) == 2
    assert int(scaled_floor([3.0 + 1e-9], 1.0)[0]) == 3


def test_hint_is_off_by_default_and_recorded_when_used():
    inst = random_instance(11, max_layers=6)
    opt, plan = brute_force(inst)
    assert plan is not None
    plain = solve(inst, "cpsat")
    assert "hint" not in plain.stats
    hinted = solve(inst, "cpsat", hint=plan)
    assert hinted.stats["hint"]["source"] == "plan"
    assert hinted.stats["hint"]["accepted"] is True
    assert hinted.iteration_time == pytest.approx(opt, rel=RTOL)
    with pytest.raises(ValueError):
        solve(inst, "cpsat", hint="nonsense")
    with pytest.raises(ValueError):
        solve(inst, "cpsat", no_such_option=1)


def test_parameters_are_recorded():
    inst = random_instance(5)
    r = solve(inst, "cpsat", seed=3, threads=2)
    if r.status == "infeasible" and "layer" in (r.message or ""):
        pytest.skip("instance infeasible before search")
    assert r.stats["num_workers"] == 2 and r.stats["seed"] == 3
    rnd = r.stats["rounds"][0]
    assert rnd["stage_arcs"] > 0 and rnd["unit_s"] > 0
    assert rnd["max_rounding_error_s"] == pytest.approx(rnd["rounded_terms"] * rnd["unit_s"])


@pytest.mark.parametrize("entry", SETS["small"], ids=lambda e: e.stem)
def test_agrees_with_dp_on_small_set(entry):
    pytest.importorskip("chainpipe.solvers.dp")
    inst = entry.instance()
    d = solve(inst, "dp")
    r = solve(inst, "cpsat", time_limit=60)
    if d.status == "infeasible":
        assert r.status == "infeasible"
        return
    assert d.status == "optimal"
    assert r.status == "optimal", r.message
    assert r.iteration_time == pytest.approx(d.iteration_time, rel=RTOL)
    assert _bound_ok(r.lower_bound, d.iteration_time)
