"""The arc-flow path ILP (``ilp-path -O device_states=true``) under contract version 3:
the ``period`` objective (1F1B loops by node potentials, GPipe's two phase maxima) and
several pipelines (the outer enumeration around its one-pipeline models), against the
brute-force enumerator of ``tests/helpers.py`` on 64 random instances with both backends,
against ``dp`` on ``instances/v3/small``, and time-limited brackets."""

from __future__ import annotations

import dataclasses
import functools
import math
from pathlib import Path

import pytest
from test_ilp_flow import check_flow_proves_dp_optimum

from chainpipe import evaluate
from chainpipe.io import read
from chainpipe.solve import solve
from helpers import brute_force_v3, check_bracket, random_v3_instance

ROOT = Path(__file__).resolve().parents[1]
SMALL = sorted((ROOT / "instances" / "v3" / "small").glob("v3-small-*.json"))
FLOW = {"device_states": True}


@functools.cache
def _reference(seed: int):
    """``(instance, optimum)`` by enumeration."""
    inst = random_v3_instance(seed)
    return inst, min(v[0] for v in brute_force_v3(inst).values())


@pytest.mark.parametrize("seed", range(64))
def test_device_states_prove_the_v3_brute_force_optimum(seed):
    inst, T = _reference(seed)
    backend = ("highs", "cbc")[seed % 2]
    r = solve(inst, "ilp-path", time_limit=60, backend=backend, **FLOW)
    where = (seed, backend)
    if not math.isfinite(T):
        assert r.status == "infeasible", (where, r.status, r.message)
        return
    assert r.status == "optimal", (where, r.status, r.message)
    assert math.isclose(r.iteration_time, T, rel_tol=1e-6, abs_tol=1e-12), (where, T)
    ev = evaluate(inst, r.plan)
    assert ev.feasible and r.iteration_time == ev.iteration_time_s, where
    assert r.lower_bound <= T * (1 + 1e-9), where


@pytest.mark.parametrize("seed", [s for s in range(64) if s % 8 == 0])
def test_one_pipeline_v3_runs_with_the_other_backend(seed):
    """The one-pipeline models (the period alone) with the backend the seed did not get."""
    inst, _T = _reference(seed)
    one = dataclasses.replace(inst, training=dataclasses.replace(
        inst.training, parallelism=dataclasses.replace(inst.parallelism, pipelines=(1,))))
    ref = brute_force_v3(one).get(1, (math.inf,))[0]
    backend = ("cbc", "highs")[seed % 2]
    r = solve(one, "ilp-path", time_limit=60, backend=backend, **FLOW)
    if not math.isfinite(ref):
        assert r.status == "infeasible", (seed, r.status)
        return
    assert r.status == "optimal", (seed, r.status, r.message)
    assert math.isclose(r.iteration_time, ref, rel_tol=1e-6, abs_tol=1e-12), (seed, ref)


@pytest.mark.parametrize("path", SMALL, ids=lambda p: p.stem)
def test_device_states_match_the_dp_on_v3_small(path):
    check_flow_proves_dp_optimum(path)


@pytest.mark.parametrize("seed", range(4))
def test_time_limited_v3_device_state_runs_sandwich_the_optimum(seed):
    inst = read(SMALL[seed])
    ref = solve(inst, "dp")
    r = solve(inst, "ilp-path", time_limit=0.3, **FLOW)
    check_bracket(ref, r, f"seed {seed}", 1e-6)


def test_a_bound_proven_with_fewer_microbatches_prunes_entries():
    """``OuterSearch.grown``: a block's bound at ``M_p`` holds for every larger ``M_p``
    (``T_p`` never falls as microbatches are added), so entries are pruned without their
    sub-solves, and the run still proves the optimum."""
    inst = read(SMALL[1])
    ref = solve(inst, "dp")
    r = solve(inst, "ilp-path", time_limit=60, **FLOW)
    assert r.status == "optimal" and r.stats["pruned_by_growth"] >= 1, r.stats
    assert math.isclose(r.iteration_time, ref.iteration_time, rel_tol=1e-6)


@pytest.mark.parametrize("seed", range(0, 64, 4))
def test_a_blocks_optimum_never_falls_as_microbatches_grow(seed):
    """The fact :meth:`OuterSearch.grown` rests on, by brute force: the least ``T_p +
    max R`` of one block is non-decreasing in ``M_p``."""
    from chainpipe.formulations.pipelines import sub_instance

    inst, _T = _reference(seed)
    K, M = len(inst.datacenters), inst.microbatches
    for first in range(K):
        for last in range(first, K):
            values = []
            for m in range(1, M + 1):
                sub = sub_instance(inst, first, last, m)
                values.append(brute_force_v3(sub).get(1, (math.inf,))[0])
            assert all(a <= b * (1 + 1e-12) for a, b in zip(values, values[1:])), \
                (seed, first, last, values)


@pytest.mark.parametrize("states", [False, True])
def test_a_cutoff_proves_no_plan_faster_or_finds_the_optimum(states):
    """``-O cutoff=c`` (what the outer enumeration passes its sub-solves): below the
    optimum the answer is a proof that nothing is faster than ``c`` (bound ``c``, never
    ``optimal``); far below it the pruned network is empty and says the same; above it,
    the optimum itself."""
    from chainpipe.formulations.pipelines import sub_instance

    inst = read(SMALL[2])
    one = sub_instance(inst, 0, len(inst.datacenters) - 1, inst.microbatches)
    T = solve(one, "dp").iteration_time
    for cutoff in (0.999 * T, 0.5 * T):
        r = solve(one, "ilp-path", time_limit=60, cutoff=cutoff, device_states=states)
        assert r.status != "optimal" and math.isclose(r.lower_bound, cutoff, rel_tol=1e-9), \
            (cutoff, r.status, r.lower_bound)
        assert r.plan is None or r.iteration_time >= T * (1 - 1e-9)
    r = solve(one, "ilp-path", time_limit=60, cutoff=1.01 * T, device_states=states)
    assert r.status == "optimal" and math.isclose(r.iteration_time, T, rel_tol=1e-6)


def test_seeds_split_the_microbatches_by_flop_rate():
    """The seeds' split of ``M`` over blocks (no bound rests on it): every share at least
    1, the shares add up to ``M``, a faster block never gets fewer."""
    from chainpipe.formulations.pipelines import _partitions, rate_split

    inst, _T = _reference(3)
    K = len(inst.datacenters)
    rates = [sum(g.count * g.flop_per_s for g in dc.devices) for dc in inst.datacenters]
    for P in range(1, min(K, inst.microbatches) + 1):
        for blocks in _partitions(0, K - 1, P):
            split = rate_split(inst, blocks)
            assert sum(split) == inst.microbatches and min(split) >= 1, (blocks, split)
            r = [sum(rates[a:b + 1]) for a, b in blocks]
            assert all(split[i] >= split[j] for i in range(P) for j in range(P)
                       if r[i] > r[j]), (blocks, split, r)


def _one_pipeline(inst):
    return dataclasses.replace(inst, training=dataclasses.replace(
        inst.training, parallelism=dataclasses.replace(inst.parallelism, pipelines=(1,))))


@pytest.mark.parametrize("seed", [s for s in range(64) if s % 2 == 0])
def test_flow_weighted_loop_rows_are_exact_and_their_lp_a_bound(seed):
    """The flow-weighted 1F1B loop rows (``FlowFormulation.build(flow_loops=True)``, the
    LP-first bound): the MIP with them proves the brute-force optimum (they cut off no
    plan, and with the potentials the model stays exact), and their LP relaxation is at
    most that optimum, with the optimum as the model's upper bound (which sets the
    per-column period caps)."""
    from chainpipe.deadline import Deadline
    from chainpipe.formulations.ilp_flow import FlowFormulation
    from chainpipe.solvers.highs import solve_highs
    from chainpipe.tables import CostTables

    inst, _T = _reference(seed)
    one = _one_pipeline(inst)
    ref = brute_force_v3(one).get(1, (math.inf,))[0]
    if not math.isfinite(ref):
        return
    for exits in (True, False):
        form = FlowFormulation(CostTables(one), upper_bound=ref * (1 + 1e-9), exits=exits)
        if not form.n_arcs:
            continue
        model = form.build(flow_loops=True)
        lp = solve_highs(model, relax=True, deadline=Deadline(30))
        assert lp.bound * form.scale <= ref * (1 + 1e-7), (seed, exits, lp.bound, ref)
        mip = solve_highs(model, relax=False, deadline=Deadline(30))
        assert mip.status == "optimal", (seed, exits, mip.text)
        model.assign(mip.values)
        T = evaluate(one, form.decode()).iteration_time_s
        assert math.isclose(T, ref, rel_tol=1e-6), (seed, exits, T, ref)


@pytest.mark.parametrize("seed", [s for s in range(64) if s % 4 == 1])
def test_the_loop_lp_first_keeps_answers_right(seed, monkeypatch):
    """``_loop_lp_first`` switched on for every 1F1B model (it runs on models of 3
    datacenters and 2000 columns or more): the one-pipeline optimum still proven; under a
    cutoff below it, the bound is the cutoff and the status never ``optimal``."""
    from chainpipe.solvers import ilp

    monkeypatch.setattr(ilp, "LOOP_LP_DCS", 1)
    monkeypatch.setattr(ilp, "LOOP_LP_COLUMNS", 0)
    inst, _T = _reference(seed)
    one = _one_pipeline(inst)
    ref = brute_force_v3(one).get(1, (math.inf,))[0]
    if not math.isfinite(ref):
        return
    r = solve(one, "ilp-path", time_limit=60, **FLOW)
    assert r.status == "optimal" and math.isclose(r.iteration_time, ref, rel_tol=1e-6), \
        (seed, r.status, r.iteration_time, ref, r.stats.get("loop_lp"))
    r = solve(one, "ilp-path", time_limit=60, cutoff=0.99 * ref, **FLOW)
    assert r.status != "optimal" and r.lower_bound <= 0.99 * ref * (1 + 1e-9), (seed, r.status)
    assert r.plan is None or r.iteration_time >= ref * (1 - 1e-9)


def _joint_value(subs, plans) -> float:
    """``max_p (T_p - R_p) + max_p R_p`` of one plan per sub-instance."""
    evs = [evaluate(sub, plan) for sub, plan in zip(subs, plans)]
    assert all(ev.feasible for ev in evs)
    return max(ev.iteration_time_s - ev.sync_s for ev in evs) + max(ev.sync_s for ev in evs)


def joint_by_levels_checked(subs, opts, cache, where):
    """Solve the pipelines ``subs`` jointly, merged and by levels of the synchronisation
    (``cache``), under twice the dp's worst ``T_p``; both must prove the same optimum, the
    levels' bound within it. Returns it (``None``: a sub-instance has no plan)."""
    from chainpipe.deadline import Deadline
    from chainpipe.solvers import ilp

    refs = [solve(sub, "dp") for sub in subs]
    if any(r.plan is None for r in refs):
        return None
    upper = 2.0 * max(r.iteration_time for r in refs) * (1 + 1e-6) + 1e-9
    args = (subs, upper, Deadline(60), opts, 0, 1, None)
    merged, _bound = ilp._joint("ilp-path", *args, by_sync=False)
    plans, bound = ilp._joint("ilp-path", *args, levels=cache)
    assert merged is not None and plans is not None, where
    opt = _joint_value(subs, merged)
    assert math.isclose(_joint_value(subs, plans), opt, rel_tol=1e-6), where
    assert opt * (1 - 1e-6) <= bound <= opt * (1 + 1e-9), where
    return opt


def every_split_checked(inst, opts, where):
    """:func:`joint_by_levels_checked` of the two single-DC pipelines of a two-DC
    instance at every split of its microbatches, with one level cache: ``(cache, how
    many splits had plans on both DCs)``."""
    from chainpipe.formulations.pipelines import sub_instance
    from chainpipe.solvers import ilp

    M = inst.microbatches
    cache, checked = ilp._SyncCache(), 0
    for m0 in range(1, M):
        subs = [sub_instance(inst, 0, 0, m0), sub_instance(inst, 1, 1, M - m0)]
        if joint_by_levels_checked(subs, opts, cache, (where, m0)) is not None:
            checked += 1
    return cache, checked


@pytest.mark.parametrize("seed", range(24))
def test_the_joint_model_by_sync_levels_equals_the_merged_one(seed):
    """``solvers/ilp.py:_joint_by_sync`` (levels of the synchronisation, one MIP per
    pipeline and level, solves shared through the cache) proves the same joint optimum
    as the merged model of the pipelines, on every two-block cut and three splits of
    random v3 instances of two or three DCs; below the optimum, the bound is the upper
    bound and no plan comes back."""
    from chainpipe.deadline import Deadline
    from chainpipe.formulations.pipelines import sub_instance
    from chainpipe.solvers import ilp

    inst, _T = _reference(seed)
    K, M = len(inst.datacenters), inst.microbatches
    if K < 2:
        pytest.skip("one DC")
    opts = ilp._options("ilp-path", dict(FLOW))
    cache = ilp._SyncCache()
    checked = 0
    for cut in range(1, K):
        for m0 in sorted({1, M // 2, M - 1}):
            subs = [sub_instance(inst, 0, cut - 1, m0), sub_instance(inst, cut, K - 1, M - m0)]
            opt = joint_by_levels_checked(subs, opts, cache, (seed, cut, m0))
            if opt is None:
                continue
            low, low_bound = ilp._joint("ilp-path", subs, opt * (1 - 1e-3), Deadline(60),
                                        opts, 0, 1, None, levels=cache)
            assert low is None and math.isclose(low_bound, opt * (1 - 1e-3)), (seed, cut, m0)
            checked += 1
    if not checked:
        pytest.skip("no cut with a plan on both blocks")


def test_the_first_pass_ends_on_cpu_time_not_wall_time():
    """``OuterSearch.phase`` (the single-DC first pass) counts this process's CPU seconds:
    time spent asleep (a loaded machine's other processes) does not end it, work does,
    and the whole solve's deadline still ends it. Fails if the phase reads the wall clock."""
    import time

    from chainpipe.deadline import Deadline
    from chainpipe.formulations.pipelines import CpuPhase

    parent = Deadline(30.0)
    phase = CpuPhase(parent, 0.05)
    time.sleep(0.15)  # no CPU: the phase goes on
    assert not phase.expired() and phase.remaining() > 0
    t0 = time.process_time()
    while time.process_time() - t0 < 0.08:
        pass
    assert phase.expired() and phase.remaining() == 0.0
    assert not parent.expired()
    phase = CpuPhase(Deadline(0.01), 100.0)
    time.sleep(0.02)
    assert phase.expired()  # the solve's own end
    assert CpuPhase(Deadline(None), 1.0).remaining() <= 1.0


def test_the_enumeration_sub_solves_run_without_root_heuristics():
    """The arc-flow sub-solves under a cutoff get :data:`PROOF_OPTIONS` (HiGHS's root
    heuristics off); the one-pipeline solve without a cutoff and the plain path ILP keep
    HiGHS's defaults. Fails if the options are not set, or set everywhere."""
    from types import SimpleNamespace

    from chainpipe.solvers import ilp

    def options(**kw):
        model = SimpleNamespace(highs_options={"mip_allow_restart": False}, offset=0.0)
        stats = {"cutoff_applied": True} if kw.get("cutoff") is not None else {}
        ilp._objective_bound(model, SimpleNamespace(scale=1.0),
                             ilp._options("ilp-path", kw), stats)
        return model.highs_options

    sub = options(device_states=True, cutoff=2.0)
    assert all(sub[k] == v for k, v in ilp.PROOF_OPTIONS.items())
    assert sub["objective_bound"] > 2.0 and sub["mip_allow_restart"] is False
    assert not set(ilp.PROOF_OPTIONS) & set(options(device_states=True))
    assert not set(ilp.PROOF_OPTIONS) & set(options(cutoff=2.0))


@pytest.mark.parametrize("seed", range(0, 64, 4))
def test_a_sync_capped_level_model_is_exact(seed):
    """The model of one level of the joint model by synchronisation levels
    (``FlowFormulation(sync_cap=r, count_sync=False)``, pruned by what the level must
    beat) has for optimum the least ``T - max R`` over the plans whose every ``R`` is at
    most ``r``, by enumeration from the contract; pruned just below that optimum it holds
    no plan."""
    from chainpipe.deadline import Deadline
    from chainpipe.formulations.ilp_flow import FlowFormulation
    from chainpipe.formulations.pipelines import sub_instance
    from chainpipe.solvers.highs import solve_highs
    from chainpipe.tables import CostTables
    from helpers import _v3_configurations, contract_pipeline

    inst, _T = _reference(seed)
    one = sub_instance(inst, 0, len(inst.datacenters) - 1, inst.microbatches)
    parts = [p for p in (contract_pipeline(one, one.microbatches, st)
                         for st in _v3_configurations(one)) if p is not None]
    if not parts:
        pytest.skip("no plan")
    tables = CostTables(one)
    for cap in sorted({p[1] for p in parts})[::2]:
        best = min(p[0] for p in parts if p[1] <= cap)
        for below, holds in ((best * (1 + 1e-6) + 1e-12, True), (best * (1 - 1e-4), False)):
            form = FlowFormulation(tables, upper_bound=below, sync_cap=cap * (1 + 1e-12),
                                   count_sync=False)
            if not form.n_arcs:
                assert not holds, (seed, cap, best)
                continue
            model = form.build()
            answer = solve_highs(model, relax=False, deadline=Deadline(30))
            if not holds:
                assert answer.status == "infeasible" or \
                    float(model.cost @ answer.values) * form.scale >= below, (seed, cap)
                continue
            assert answer.status == "optimal", (seed, cap, answer.text)
            model.assign(answer.values)
            ev = evaluate(one, form.decode())
            assert ev.feasible and ev.sync_s <= cap * (1 + 1e-9), (seed, cap)
            assert math.isclose(ev.iteration_time_s - ev.sync_s, best, rel_tol=1e-6), \
                (seed, cap, ev.iteration_time_s - ev.sync_s, best)
