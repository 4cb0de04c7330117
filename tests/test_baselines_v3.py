"""Baselines under contract version 3 (issue 30, item 6): ``replicate-per-dc``,
``classic-optimum``, and every baseline costed by the one cost model under ``period``
and with several pipelines allowed."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

import chainpipe as cp
from chainpipe import evaluate, read
from chainpipe.solve import SOLVERS
from chainpipe.solvers.baselines.replicate import (
    classic_copy,
    dc_groups,
    largest_remainder,
    replica_count,
)
from helpers import random_v3_instance

VALID = Path(__file__).resolve().parent / "data" / "valid"
NEW = ("replicate-per-dc", "classic-optimum")
BASELINES = [name for name, info in SOLVERS.items() if not info.exact]
SEEDS = range(120)


def _with(inst, **training):
    return dataclasses.replace(inst, training=dataclasses.replace(inst.training, **training))


def _check(inst, r):
    """A baseline's result: never a proof, its plan feasible and its T the cost model's."""
    assert r.status in ("feasible", "no_solution"), (inst.name, r.solver, r.status, r.message)
    assert r.lower_bound is None
    if r.plan is not None:
        ev = evaluate(inst, r.plan)
        assert ev.feasible, ev.violations
        assert r.iteration_time == ev.iteration_time_s
    else:
        assert r.message


@pytest.mark.parametrize("seed", SEEDS)
def test_the_new_baselines_return_feasible_plans_evaluate_accepts(seed):
    inst = random_v3_instance(seed)
    for name in NEW:
        _check(inst, cp.solve(inst, name))


def test_the_random_instances_exercise_both_baselines():
    found = {name: 0 for name in NEW}
    several = 0
    for seed in SEEDS:
        inst = random_v3_instance(seed)
        for name in NEW:
            r = cp.solve(inst, name)
            found[name] += r.plan is not None
            several += r.plan is not None and r.plan.num_pipelines > 1
    assert min(found.values()) >= 60 and several >= 30, (found, several)


@pytest.mark.parametrize("seed", SEEDS)
def test_replicate_per_dc_shares_the_microbatches_by_speed(seed):
    inst = random_v3_instance(seed)
    r = cp.solve(inst, "replicate-per-dc")
    if r.plan is None:
        return
    P, K, M = r.stats["pipelines"], len(inst.datacenters), inst.microbatches
    assert P == (K if K in inst.parallelism.pipelines else
                 max(p for p in inst.parallelism.pipelines if p <= K))
    assert r.plan.num_pipelines == P
    shares, periods = r.stats["microbatches"], r.stats["periods_s"]
    assert sum(shares) == M and min(shares) >= 1
    if P > 1:
        assert [p.microbatches for p in r.plan.pipelines] == shares
    speeds = [1 / x for x in periods]
    quotas = [1 + (M - P) * v / sum(speeds) for v in speeds]
    assert all(abs(m - q) < 1 for m, q in zip(shares, quotas))
    for a in range(P):  # a faster pipeline never gets fewer microbatches
        for b in range(P):
            if periods[a] < periods[b]:
                assert shares[a] >= shares[b]
    for pipe, dcs in zip(r.plan.pipelines, r.stats["datacenters"]):  # each inside its range
        assert {inst.locate(st.devices[0]).dc for st in pipe.stages} <= \
            {k for k, dc in enumerate(inst.datacenters) if dc.name in dcs}


@pytest.mark.parametrize("seed", SEEDS)
def test_classic_optimum_is_dps_classic_optimum(seed):
    inst = random_v3_instance(seed)
    r = cp.solve(inst, "classic-optimum")
    if 1 not in inst.parallelism.pipelines:
        assert r.status == "no_solution" and "1 is not an allowed pipeline count" in r.message
        return
    ref = cp.solve(classic_copy(inst), "dp")
    assert (r.plan is None) == (ref.plan is None)
    if r.plan is None:
        return
    assert ref.status == "optimal"
    assert evaluate(classic_copy(inst), r.plan).iteration_time_s == \
        pytest.approx(ref.iteration_time, rel=1e-9)
    assert r.stats["classic_time_s"] == pytest.approx(ref.iteration_time, rel=1e-9)
    assert r.iteration_time == evaluate(inst, r.plan).iteration_time_s


def test_classic_optimum_on_the_1f1b_worked_example_costs_its_loop():
    """Classic picks the two stages (21 s); under ``period`` they take 30 s (the optimum,
    one stage, is 24 s)."""
    inst = read(VALID / "worked_example_v3_1f1b.json")
    r = cp.solve(inst, "classic-optimum")
    assert (r.status, r.iteration_time, r.stats["classic_time_s"]) == ("feasible", 30.0, 21.0)
    assert len(r.plan.stages) == 2


@pytest.mark.parametrize(("H", "T"), [(1, 9.0), (3, 7.0)])
def test_replicate_per_dc_on_the_two_pipelines_example(H, T):
    inst = _with(read(VALID / "worked_example_v3_pipelines.json"), pipeline_sync_period=H)
    r = cp.solve(inst, "replicate-per-dc")
    assert (r.status, r.iteration_time) == ("feasible", T)
    assert [p.microbatches for p in r.plan.pipelines] == [2, 2]
    assert r.stats["datacenters"] == [["a"], ["b"]]


def test_every_baseline_runs_under_period_with_several_pipelines_allowed():
    """Costed by ``evaluate`` under ``period``; a one-pipeline baseline returns one pipeline
    (``replicate-per-dc`` two here, and ``comm-unaware`` what the DP plans with free links:
    two); with 1 not allowed its plan is refused in one line."""
    inst = _with(read(VALID / "worked_example_v3_pipelines.json"), schedule="1f1b")
    several = ("replicate-per-dc", "comm-unaware")
    for name in BASELINES:
        r = cp.solve(inst, name)
        _check(inst, r)
        assert r.plan is not None, (name, r.message)
        assert r.plan.num_pipelines == (2 if name in several else 1), name
    two = _with(inst, parallelism=dataclasses.replace(inst.parallelism, pipelines=(2,)))
    for name in BASELINES:
        r = cp.solve(two, name)
        if name in several:
            assert r.status == "feasible" and r.plan.num_pipelines == 2
        elif r.status != "no_solution":
            assert r.status == "error", name
            assert r.message == ("solver returned an infeasible plan: stages: a plan of one "
                                 "pipeline, but 1 is not an allowed pipeline count [2] "
                                 "(training.parallelism.pipelines)"), name


def test_one_pipeline_baselines_rank_their_candidates_by_the_instances_objective():
    """``uniform`` sweeps the stage count: under ``classic`` two stages (21 s) win, under
    ``period`` one stage (24 s; two stages take 30 s)."""
    inst = read(VALID / "worked_example_v3_1f1b.json")
    r = cp.solve(inst, "uniform")
    assert (r.iteration_time, len(r.plan.stages)) == (24.0, 1)
    r = cp.solve(_with(inst, objective="classic"), "uniform")
    assert (r.iteration_time, len(r.plan.stages)) == (21.0, 2)


def test_replica_count_and_dc_groups():
    inst = random_v3_instance(0)
    K = len(inst.datacenters)
    assert replica_count(inst) in (*inst.parallelism.pipelines, None)
    assert dc_groups(5, 2) == [range(0, 3), range(3, 5)]
    assert dc_groups(4, 4) == [range(k, k + 1) for k in range(4)]
    assert dc_groups(K, 1) == [range(0, K)]


def test_largest_remainder():
    assert largest_remainder(4, [1.0, 1.0]) == [2, 2]
    assert largest_remainder(10, [3.0, 1.0]) == [7, 3]  # 1 + 8 * 3/4, 1 + 8 * 1/4
    assert largest_remainder(3, [1000.0, 1.0, 1.0]) == [1, 1, 1]
    assert largest_remainder(7, [1.0, 1.0, 1.0]) == [3, 2, 2]  # ties to the earlier part
    parts = largest_remainder(64, [5.0, 3.0, 1.5, 0.2])
    assert sum(parts) == 64 and min(parts) >= 1 and parts == sorted(parts, reverse=True)


def test_solve_prints_a_plan_of_several_pipelines():
    """``chainpipe solve`` reports replicate-per-dc's plan (devices counted over every
    pipeline: ``Result.devices_used`` read one pipeline's stages and raised)."""
    import json
    import subprocess
    import sys

    args = [sys.executable, "-m", "chainpipe", "solve",
            str(VALID / "worked_example_v3_pipelines.json"), "--solver", "replicate-per-dc"]
    r = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "devices used    2 of 2" in r.stdout and "iteration time  9 s" in r.stdout
    r = subprocess.run(args + ["--format", "json"], capture_output=True, text=True, timeout=300)
    doc = json.loads(r.stdout)
    assert doc["status"] == "feasible" and doc["iteration_time_s"] == 9.0
    assert [p["microbatches"] for p in doc["plan"]["pipelines"]] == [2, 2]
