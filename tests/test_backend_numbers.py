"""Hostile but valid numbers on the MIP/CP routes: counts stay counts, no warning escapes.

Every case is a valid instance (``chainpipe/instance.py`` rules: integers up to
2^31 - 1, finite positive rates, memories and bandwidths). Each route must answer
with a sane status -- a plan with a finite ``T`` and a bound in ``[0, T]``, a proven
``infeasible``, or a clean ``error`` with a short message -- under
``warnings.simplefilter("error")`` and a short time limit.
"""

from __future__ import annotations

import math
import warnings

import pytest

from chainpipe import Datacenter, DeviceGroup, Instance, Layer, Link, Model, Training
from chainpipe.solve import solve

ROUTES = [("ilp-assign", {}), ("ilp-path", {}), ("ilp-path", {"backend": "cbc"}), ("cpsat", {})]


def _instance(count=2, M=4, mem=1e9, bpp=16.0, rate=1e12, bw=1e9, flop=1e9, act=1e6, out=1e6):
    layers = tuple(Layer(f"l{i}", flop, 2 * flop, 1000, act, out) for i in range(3))
    dcs = (Datacenter("a", (DeviceGroup("g", count, rate, mem),), Link(bw, 1e-4)),
           Datacenter("b", (DeviceGroup("h", 2, 1e12, 1e9),), Link(1e10, 1e-4)))
    return Instance("hostile", Model("m", layers), Training(M, "1f1b", bpp), dcs,
                    (Link(bw, 1e-3),))


CASES = {
    "devices 2^31-1": dict(count=2**31 - 1),
    "microbatches 2^31-1": dict(M=2**31 - 1),
    "memory 2^64": dict(mem=float(2**64)),
    "memory 2^64 as a JSON integer": dict(mem=2**64),
    "rate 2^70 as a JSON integer": dict(rate=2**70),
    "memory 1e300": dict(mem=1e300),
    "rate 1e300": dict(rate=1e300),
    "bandwidth 1e300": dict(bw=1e300),
    "bandwidth 1e-300": dict(bw=1e-300),
    "flop 1e300": dict(flop=1e300),
    "output 1e300": dict(out=1e300),
    "bytes_per_param 1e300": dict(bpp=1e300),
    "activation 1e300": dict(act=1e300),
    "rate 1e-300": dict(rate=1e-300),
}


@pytest.mark.parametrize("kwargs", list(CASES.values()), ids=list(CASES))
@pytest.mark.parametrize("solver,options", ROUTES, ids=lambda x: str(x))
def test_hostile_numbers_give_a_sane_answer(kwargs, solver, options):
    inst = _instance(**kwargs)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        r = solve(inst, solver, time_limit=5, **options)
    assert r.status in ("optimal", "feasible", "no_solution", "infeasible", "error"), r.status
    assert r.message is None or len(r.message) <= 300, r.message
    if r.status == "error":
        assert "out of range" in r.message, r.message
        return
    if r.iteration_time is not None:
        assert math.isfinite(r.iteration_time) and r.iteration_time >= 0
    if r.lower_bound is not None:
        assert 0 <= r.lower_bound
        if r.iteration_time is not None:
            assert r.lower_bound <= r.iteration_time
    if r.status == "optimal":
        ref = solve(inst, "dp")
        assert ref.status == "optimal"
        assert r.iteration_time == pytest.approx(ref.iteration_time, rel=1e-6)


def test_greedy_heuristic_walks_groups_by_count():
    from chainpipe.formulations.greedy import greedy_plans
    from chainpipe.tables import CostTables

    plans = list(greedy_plans(CostTables(_instance(count=2**31 - 1))))
    assert plans and all(len(p) <= 3 for p in plans)


@pytest.mark.parametrize("scaled_bound", [-23.5, 1e9])
def test_a_reported_bound_is_clamped_to_zero_and_T(scaled_bound):
    # a backend bound below 0 (seen: -0.0235 s) or above the plan's T is never reported
    from chainpipe.deadline import Deadline
    from chainpipe.formulations.ilp_path import PathFormulation
    from chainpipe.solvers.highs import solve_highs
    from chainpipe.solvers.ilp import _options, _outcome
    from chainpipe.solvers.mip import MipAnswer
    from chainpipe.tables import CostTables
    from helpers import brute_force, random_instance

    inst = random_instance(11, max_layers=6)
    best, _ = brute_force(inst)
    assert math.isfinite(best)
    form = PathFormulation(CostTables(inst))
    form.build()
    model = form.matrix()
    answer = solve_highs(model, relax=False, deadline=Deadline(None))
    model.assign(answer.values)
    hostile = MipAnswer("stopped", scaled_bound, answer.values, "test")
    out = _outcome(form, hostile, _options("ilp-path", {}), {})
    assert out.plan is not None
    T = solve(inst, "dp").iteration_time
    assert 0 <= out.lower_bound <= T * (1 + 1e-9)
