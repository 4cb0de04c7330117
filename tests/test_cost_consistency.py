"""Every solver's internal cost equals the one cost model's (``chainpipe.cost`` via ``evaluate``).

The terms of ``T`` are written once, in ``chainpipe/cost.py``; the tables vectorise
them and the searches assemble them. These tests catch a solver whose own
arithmetic drifts from ``evaluate``: the tables on random plans (feasible or
not), and the exact searches' own objective (``stats["objective_s"]``) of the
plan they return.
"""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from chainpipe import cost, evaluate, solve
from chainpipe.plan import Plan
from chainpipe.tables import CostTables
from helpers import random_instance


def _random_stages(inst, tables: CostTables, rng: random.Random):
    """Random chain-ordered ``(start, end, dc, g)`` stages on distinct devices (g flattened)."""
    L = inst.num_layers
    slots = [g for g, grp in enumerate(tables.groups) for _ in range(grp.count)]
    S = rng.randint(1, min(L, len(slots)))
    cuts = sorted(rng.sample(range(1, L), S - 1))
    bounds = [0, *cuts, L]
    chosen = sorted(rng.sample(slots, S), key=lambda g: (tables.groups[g].dc, g))
    return [(bounds[s], bounds[s + 1], tables.groups[g].dc, g) for s, g in enumerate(chosen)]


def _plan(tables: CostTables, stages) -> Plan:
    return Plan.from_tuples(tables.instance,
                            [(i, j, k, tables.groups[g].index) for i, j, k, g in stages])


@pytest.mark.parametrize("seed", range(60))
def test_table_plan_time_equals_evaluate_on_random_plans(seed):
    inst = random_instance(seed, max_layers=7, max_dcs=3, max_types=2, max_count=3)
    tables = CostTables(inst)
    rng = random.Random(1000 + seed)
    for _ in range(8):
        stages = _random_stages(inst, tables, rng)
        ev = evaluate(inst, _plan(tables, stages))
        T = tables.plan_time(stages)
        if ev.feasible:
            assert T == pytest.approx(ev.iteration_time_s, rel=1e-12, abs=1e-12)
        else:  # random plans are structurally valid: only memory can break
            assert all("needs" in v for v in ev.violations), ev.violations
            assert T == math.inf


@pytest.mark.parametrize("seed", range(20))
def test_boundary_tables_equal_the_per_boundary_terms(seed):
    inst = random_instance(seed, max_layers=6, max_dcs=4)
    t = CostTables(inst)
    for b in range(1, t.L):
        for k1 in range(t.K):
            for k2 in range(k1, t.K):
                bw, lat = cost.path(inst, k1, k2)
                u = cost.occupancy(inst.layers[b - 1].output_bytes, bw)
                assert t.boundary_occupancy[b, k1, k2] == t.occupancy(b, k1, k2) == u
                assert t.boundary_traversal[b, k1, k2] == t.traversal(b, k1, k2)
                assert t.traversal(b, k1, k2) == cost.traversal(lat, u)


def test_max_in_flight_is_the_inverse_of_the_memory_rule():
    rng = np.random.default_rng(0)
    params = rng.integers(0, 50, 200).astype(float)
    act = rng.choice([0.0, 1.0, 2.5, 7.0], 200)
    cap = rng.uniform(0, 200, 200)
    n = cost.max_in_flight(params, act, 2.0, cap, 16)
    for p, a, c, k in zip(params, act, cap, n):
        if k < 0:
            assert not cost.memory_fits(cost.memory_need(p, a, 0, 2.0), c)
            continue
        assert k <= 16 and cost.memory_fits(cost.memory_need(p, a, k, 2.0), c)
        if k < 16:
            assert not cost.memory_fits(cost.memory_need(p, a, k + 1, 2.0), c)


def test_memory_overflow_is_infinite_need_and_never_warns():
    with np.errstate(all="raise"):
        assert cost.memory_need(1e300, 0.0, 1, 1e300) == math.inf
        assert cost.max_in_flight(1e300, 1.0, 1e300, 1e9, 4) == -1
        assert cost.max_in_flight(0.0, 1e-300, 1.0, 1e300, 2**31 - 1) == 2**31 - 1


@pytest.mark.parametrize("seed", range(40))
def test_dp_objective_is_the_evaluated_time_of_its_plan(seed):
    inst = random_instance(seed, max_layers=6, max_dcs=3)
    res = solve(inst, "dp")
    if res.plan is None:
        return
    assert res.stats["objective_s"] == pytest.approx(res.iteration_time, rel=1e-12, abs=1e-12)


def test_extreme_but_valid_figures_give_inf_not_warnings_or_nan():
    with np.errstate(all="raise"):
        assert cost.compute_time(np.array([1e308]), np.array([5e-324]))[0] == math.inf
        assert cost.occupancy(np.array([1e308]), np.array([1e-300]))[0] == math.inf
        assert cost.iteration_time(math.inf, math.inf, 1) == math.inf  # no 0 * inf = nan
        assert cost.steady_state(1, np.array([math.inf])).tolist() == [0.0]


@pytest.mark.parametrize("seed", range(30))
def test_cdynp_estimate_is_the_evaluated_time_of_its_plan(seed):
    """Exact CDynP's chain-end estimate is its own T of the plan the agents assemble."""
    inst = random_instance(seed, max_layers=6, max_dcs=3)
    res = solve(inst, "cdynp")
    if res.plan is None:
        return
    assert res.stats["estimate_s"] == pytest.approx(res.iteration_time, rel=1e-12, abs=1e-12)


def test_memory_near_the_largest_double_never_fits_an_overflowed_need():
    """The slack on a capacity of ~1.8e308 stays finite: an infinite need never fits."""
    top = np.finfo(float).max
    with np.errstate(all="raise"):
        assert cost.memory_capacity(top) == top
        assert not cost.memory_fits(math.inf, top)
        assert cost.max_in_flight(0.0, math.inf, 1.0, top, 8) == 0
        assert cost.max_in_flight(1e300, 1.0, 1e300, top, 8) == -1


def test_reported_bounds_are_clamped_to_zero_and_t():
    """The facade keeps 0 <= bound <= T and voids a proof whose bound exceeds T."""
    from chainpipe.result import Outcome
    from chainpipe.solve import finish

    inst = random_instance(3, max_layers=4)
    plan = solve(inst, "dp").plan
    T = evaluate(inst, plan).iteration_time_s
    assert finish(inst, "x", Outcome("feasible", plan, -0.02), 0.0).lower_bound == 0.0
    assert finish(inst, "x", Outcome("feasible", plan, T * (1 + 1e-9)), 0.0).lower_bound == T
    assert finish(inst, "x", Outcome("optimal", plan, 2 * T), 0.0).status == "error"
    assert finish(inst, "x", Outcome("no_solution", None, -1.0), 0.0).lower_bound == 0.0
