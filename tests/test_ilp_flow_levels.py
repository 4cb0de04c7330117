"""Levels of the arc-flow route's joint model of several pipelines solved by windows of
the period (``solvers/ilp.py:_level_windows``, ``LEVEL_WINDOWS``): a level's least
``T_p - max R`` under a cap on ``R`` against the enumeration from the contract, below it
no plan; and the joint model by levels with every level taken by windows against the
merged model of the pipelines."""

from __future__ import annotations

import math

import pytest

from chainpipe import evaluate
from chainpipe.deadline import Deadline
from chainpipe.formulations import flow_windows
from chainpipe.formulations.common import period_mode
from chainpipe.formulations.ilp_flow import FlowFormulation
from chainpipe.formulations.pipelines import sub_instance
from chainpipe.solvers import ilp
from chainpipe.tables import CostTables
from helpers import _v3_configurations, contract_pipeline, random_v3_instance

FLOW = {"device_states": True}


def _one_pipeline(seed: int):
    """``(instance of one pipeline over every DC, tables, [(T - max R, max R)] of its
    plans)`` for a random v3 instance whose period is 1F1B's with ``M > 1``, else ``None``."""
    inst = random_v3_instance(seed)
    one = sub_instance(inst, 0, len(inst.datacenters) - 1, inst.microbatches)
    tables = CostTables(one)
    if period_mode(tables) != "1f1b" or one.microbatches < 2:
        return None
    parts = [p for p in (contract_pipeline(one, one.microbatches, st)
                         for st in _v3_configurations(one)) if p is not None]
    return (one, tables, parts) if parts else None  # (T_p - max R, max R) each


def _level(one, tables, cap: float, below: float, target: float = 0.0) -> ilp._Level:
    form = FlowFormulation(tables, upper_bound=below, sync_cap=cap * (1 + 1e-12),
                           count_sync=False)
    if not form.n_arcs:
        return None
    opts = ilp._options("ilp-path", dict(FLOW))
    return ilp._level_windows(one, form, cap, below, target, 0.0, Deadline(60), opts, 0, 1,
                              None)


SEEDS = range(40)


def test_the_cases_are_not_vacuous():
    """Enough random instances are 1F1B with a plan (the level tests run on them)."""
    assert sum(_one_pipeline(s) is not None for s in SEEDS) >= 12


@pytest.mark.parametrize("seed", SEEDS)
def test_a_level_by_windows_is_exact(seed):
    """Per cap on ``R`` (every other value of the plans'): the windows prove the least
    ``T - max R`` of the plans under the cap (their plan's, by ``evaluate``, with its
    ``max R`` under the cap), the bound within it; pruned 1e-4 below it, no plan and
    every window closed at that bound; with a target 5 % above it, a plan no slower than
    the target and a bound at most the optimum."""
    case = _one_pipeline(seed)
    if case is None:
        return
    one, tables, parts = case
    for cap in sorted({R for _T, R in parts})[::2]:
        best = min(T for T, R in parts if R <= cap)
        where = (seed, cap, best)
        lv = _level(one, tables, cap, best * (1 + 1e-6) + 1e-12)
        assert lv is not None and lv.optimal and lv.plan is not None, where
        ev = evaluate(one, lv.plan)
        assert ev.feasible and ev.sync_s <= cap * (1 + 1e-9), where
        assert math.isclose(lv.T, ev.iteration_time_s - ev.sync_s, rel_tol=1e-12), where
        assert math.isclose(lv.T, best, rel_tol=1e-6), (where, lv.T)
        assert math.isclose(lv.sync, ev.sync_s, rel_tol=1e-9) and lv.R <= cap * (1 + 1e-9)
        assert best * (1 - 1e-6) <= lv.lb <= best * (1 + 1e-9), (where, lv.lb)
        below = best * (1 - 1e-4)
        lv = _level(one, tables, cap, below)
        if lv is not None:
            assert lv.plan is None and lv.optimal, where
            assert below * (1 - 1e-6) <= lv.lb <= below, (where, lv.lb)
        lv = _level(one, tables, cap, best * 1.5 + 1e-12, target=best * 1.05)
        assert lv is not None and lv.plan is not None and lv.T <= best * 1.05 * (1 + 1e-9)
        assert lv.lb <= best * (1 + 1e-9), (where, lv.lb)


@pytest.mark.parametrize("seed", range(16))
def test_the_joint_model_with_levels_by_windows_equals_the_merged_one(seed, monkeypatch):
    """Every level that has a model taken by windows (``WINDOW_COLUMNS`` 0, any DCs, any
    root gap): the joint model by levels proves the merged model's optimum, and below
    it gives no plan and the upper bound; the windows ran."""
    from test_ilp_flow_v3 import joint_by_levels_checked

    monkeypatch.setattr(flow_windows, "WINDOW_COLUMNS", 0)
    monkeypatch.setattr(flow_windows, "WINDOW_DCS", 99)
    monkeypatch.setattr(flow_windows, "WINDOW_GAP", -1.0)
    calls = []
    real = ilp._level_windows

    def counted(*args, **kw):
        calls.append(args[2])
        return real(*args, **kw)

    monkeypatch.setattr(ilp, "_level_windows", counted)
    inst = random_v3_instance(seed)
    K, M = len(inst.datacenters), inst.microbatches
    if K < 2 or period_mode(CostTables(inst)) != "1f1b":
        return
    opts = ilp._options("ilp-path", dict(FLOW))
    cache = ilp._SyncCache()
    for cut in range(1, K):
        for m0 in sorted({1, M // 2, M - 1} - {0, M}):
            subs = [sub_instance(inst, 0, cut - 1, m0), sub_instance(inst, cut, K - 1, M - m0)]
            opt = joint_by_levels_checked(subs, opts, cache, (seed, cut, m0))
            if opt is None:
                continue
            low, low_bound = ilp._joint("ilp-path", subs, opt * (1 - 1e-3), Deadline(60),
                                        opts, 0, 1, None, levels=ilp._SyncCache())
            assert low is None and math.isclose(low_bound, opt * (1 - 1e-3)), (seed, cut)
    assert calls or not cache.levels, seed


def _permuted_twin(seed: int):
    """A random v3 instance cut to its first DC, if that has two device groups or more,
    followed by a copy of it under another name with its groups in reverse order and a
    slower own link (as fresh ``v3-medium-02``-like seed 4's DCs 0 and 2); pipelines
    ``[2]``; else ``None``."""
    import dataclasses

    inst = random_v3_instance(seed)
    dc = inst.datacenters[0]
    if len(inst.datacenters) < 2 or len(dc.devices) < 2:
        return None
    lat = dc.link.latency_s * 1.5 + 0.05 * (1 + seed % 3)
    twin = dataclasses.replace(dc, name=dc.name + "x", devices=tuple(reversed(dc.devices)),
                               link=dataclasses.replace(dc.link, latency_s=lat))
    par = dataclasses.replace(inst.training.parallelism, pipelines=(2,))
    return dataclasses.replace(inst, datacenters=(dc, twin), links=inst.links[:1],
                               training=dataclasses.replace(inst.training, parallelism=par))


def test_a_dc_with_its_groups_in_another_order_is_a_sibling_and_twin():
    """Two single-DC pipelines whose DCs differ in the order of their device groups (and
    the second's slower own link): the second's twin is the first (found only when the
    groups are compared up to their order), and the joint model by levels, answering
    levels from it, proves the merged model's optimum on every split."""
    from test_ilp_flow_v3 import every_split_checked

    opts = ilp._options("ilp-path", dict(FLOW))
    found = checked = 0
    for seed in range(60):
        inst = _permuted_twin(seed)
        if inst is None:
            continue
        cache, n = every_split_checked(inst, opts, seed)
        checked += n
        slow = [k for k in cache.twins if k[0] == (inst.datacenters[1].name,)]
        found += sum(cache.twins[k] is not None for k in slow)
        assert all(cache.twins[k] is None or cache.twins[k][1] == inst.datacenters[0].name
                   for k in slow), seed
    assert checked >= 8 and found >= 4, (checked, found)
