"""CP-SAT's joint model of several pipelines by levels of the synchronisation
(``solvers/cpsat.py:_joint_by_levels``: the arc-flow route's levels, each solved by a
CP-SAT model of one pipeline on the level network's options) against its merged joint
model (``solvers/cpsat.py:_joint``), on two-block cuts of random v3 instances."""

from __future__ import annotations

import math

import pytest

from chainpipe.deadline import Deadline
from chainpipe.formulations.pipelines import sub_instance
from chainpipe.plan import evaluate
from chainpipe.solve import solve
from chainpipe.solvers import cpsat
from chainpipe.solvers.ilp import _SyncCache
from helpers import brute_force_v3, random_v3_instance


def _joint_value(subs, plans) -> float:
    """``max_p (T_p - R_p) + max_p R_p`` of one plan per sub-instance."""
    evs = [evaluate(sub, plan) for sub, plan in zip(subs, plans)]
    assert all(ev.feasible for ev in evs)
    return max(ev.iteration_time_s - ev.sync_s for ev in evs) + max(ev.sync_s for ev in evs)


def _cache() -> _SyncCache:
    features = frozenset(cpsat.FEATURES | {"sync_levels"})
    return _SyncCache(level=cpsat._level_solver(0, 1, None, features))


@pytest.mark.parametrize("seed", range(32))
def test_the_joint_model_by_levels_equals_the_merged_one(seed):
    """Both prove the same joint optimum and the levels' bound is within it; under an
    upper bound below the optimum no plan comes back and the bound is that upper bound.
    Fails when a level's objective misses a time term or its bound is taken as ``below``
    whatever CP-SAT proved."""
    inst = random_v3_instance(seed)
    K, M = len(inst.datacenters), inst.microbatches
    if K < 2:
        pytest.skip("one DC")
    cache, checked = _cache(), 0
    for cut in range(1, K):
        for m0 in sorted({1, M // 2, M - 1} - {0, M}):
            subs = [sub_instance(inst, 0, cut - 1, m0), sub_instance(inst, cut, K - 1, M - m0)]
            refs = [solve(sub, "dp") for sub in subs]
            if any(r.plan is None for r in refs):
                continue
            upper = 2.0 * max(r.iteration_time for r in refs) * (1 + 1e-6) + 1e-9
            merged, _ = cpsat._joint(subs, upper, Deadline(60), 0, 1, None,
                                     frozenset(cpsat.FEATURES))
            plans, bound = cpsat._joint_by_levels(subs, upper, Deadline(60), cache)
            where = (seed, cut, m0)
            assert merged is not None and plans is not None, where
            opt = _joint_value(subs, merged)
            assert math.isclose(_joint_value(subs, plans), opt, rel_tol=1e-6), where
            assert opt * (1 - 1e-6) <= bound <= opt * (1 + 1e-9), where
            low, low_bound = cpsat._joint_by_levels(subs, opt * (1 - 1e-3), Deadline(60), cache)
            assert low is None and math.isclose(low_bound, opt * (1 - 1e-3)), where
            checked += 1
    if not checked:
        pytest.skip("no cut with a plan on both blocks")


def test_the_levels_are_an_option():
    """``features=...,sync_levels`` takes the levels (off by default, measured slower on
    ``v3-medium-02``); the answer is the brute force's."""
    assert "sync_levels" in cpsat.ALL_FEATURES and "sync_levels" not in cpsat.FEATURES
    calls = []
    real = cpsat._joint_by_levels

    def spy(*args):
        calls.append(1)
        return real(*args)

    for seed in range(8):
        inst = random_v3_instance(seed)
        best = min(v[0] for v in brute_force_v3(inst).values())
        cpsat._joint_by_levels = spy
        try:
            r = solve(inst, "cpsat", features=sorted(cpsat.FEATURES | {"sync_levels"}))
        finally:
            cpsat._joint_by_levels = real
        if math.isinf(best):
            assert r.status == "infeasible", seed
        else:
            assert r.status == "optimal" and math.isclose(r.iteration_time, best,
                                                          rel_tol=1e-6), seed
    assert calls
