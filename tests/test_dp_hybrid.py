"""The exact DP under contract version 2 (data-parallel width, tensor parallelism, ZeRO-1,
gradient synchronisation) against the brute-force enumerator of ``tests/helpers.py``."""

from __future__ import annotations

import dataclasses
import math
import random

import pytest

from chainpipe import Parallelism, Plan, evaluate
from chainpipe.io import read
from chainpipe.solve import solve
from chainpipe.solvers.labels import shifted_pareto
from chainpipe.tables import CostTables
from helpers import brute_force_hybrid, random_hybrid_instance

DATA = __import__("pathlib").Path(__file__).parent / "data" / "valid"


def _check(inst, ref=None):
    """dp's answer equals the brute force's (``ref``: its ``(T, stages)`` if made)."""
    T, stages = brute_force_hybrid(inst) if ref is None else ref
    res = solve(inst, "dp", time_limit=60)
    if stages is None:
        assert res.status == "infeasible", (inst.name, res.status, res.iteration_time)
        assert res.message
        return None
    assert res.status == "optimal", (inst.name, res.status, res.message)
    assert math.isclose(res.iteration_time, T, rel_tol=1e-9, abs_tol=1e-12), (inst.name, T)
    ev = evaluate(inst, res.plan)
    assert ev.feasible, ev.violations
    assert math.isclose(res.stats["objective_s"], ev.iteration_time_s, rel_tol=1e-12)
    return res


@pytest.mark.parametrize("block", range(8))
def test_dp_equals_brute_force_on_random_hybrid_instances(block):
    """360 random small v2 instances: 1-3 DCs, nodes of 1/2/4, widths with 3 and without
    1, ZeRO on and off, both schedules, a third memory-tight. On each solvable one the
    static lower bound and the DP's granularity bound hold against the brute-force
    optimum (:func:`_bounds_hold`, on the optimum already enumerated)."""
    feasible = capacity = 0
    for seed in range(block * 45, (block + 1) * 45):
        inst = random_hybrid_instance(seed, max_layers=5)
        T, stages = brute_force_hybrid(inst)
        feasible += _check(inst, (T, stages)) is not None
        capacity += stages is not None and _bounds_hold(inst, T, stages)
    assert feasible >= 30  # the generator mostly draws solvable instances
    assert capacity >= 10  # (most use more than one device)


def _bounds_hold(inst, T: float, stages) -> bool:
    """The lower bound of the tables is below the optimum ``T``, and the granularity
    bound of the DP (``LayerCapacity``) too: the devices an optimal plan uses hold its
    FLOP under its own largest compute time, so the bottleneck the bound asks for is
    never above that. Whether the second applied (not on one device)."""
    from chainpipe.solvers.dp import LayerCapacity, usage_caps

    tables = CostTables(inst)
    assert tables.lower_bound <= T * (1 + 1e-12), (inst.name, tables.lower_bound, T)
    if inst.parallelism.single_device:
        return False
    capacity = LayerCapacity(tables, usage_caps(tables))
    ev = evaluate(inst, Plan.from_tuples(inst, stages))
    worst = max(st.compute_time_s for st in ev.stages)
    total = float(tables.flop_prefix[-1])
    needed = float(capacity.needed(capacity.curve(list(range(tables.G)), []), total))
    assert needed <= worst * (1 + 1e-9), (inst.name, needed, worst)
    return True


def test_the_random_instances_cover_what_the_issue_lists():
    insts = [random_hybrid_instance(seed, max_layers=5) for seed in range(360)]
    pars = [i.parallelism for i in insts]
    assert any(3 in p.data_parallel for p in pars)
    assert any(1 not in p.data_parallel for p in pars)
    assert any(p.zero for p in pars) and any(not p.zero for p in pars)
    assert {i.training.schedule for i in insts} == {"1f1b", "gpipe"}
    assert {g.devices_per_node for i in insts for dc in i.datacenters
            for g in dc.devices} == {1, 2, 4}
    assert {i.num_datacenters for i in insts} == {1, 2, 3}


def test_worked_example_v2_optimum_is_16():
    inst = read(DATA / "worked_example_v2.json")
    res = solve(inst, "dp")
    assert res.status == "optimal" and res.iteration_time == pytest.approx(16.0)
    assert [(s.data_parallel, s.tensor_parallel) for s in res.plan.stages] == [(2, 1), (2, 1)]
    ev = evaluate(inst, res.plan)
    assert ev.paced_by == "link" and ev.sync_s == pytest.approx(2.5)


def test_a_width_list_without_one_forces_every_stage_wide():
    inst = read(DATA / "worked_example_v2.json")
    forced = dataclasses.replace(inst, training=dataclasses.replace(
        inst.training, parallelism=Parallelism((2,), (2,), False)))
    res = _check(forced)
    assert res is not None and res.iteration_time == pytest.approx(24.5)
    assert [(s.data_parallel, s.tensor_parallel) for s in res.plan.stages] == [(2, 2)]


def test_tensor_parallel_groups_are_packed_into_whole_nodes():
    """Stages of t = 1 and t = 2 on one group of nodes of 2: the t = 2 blocks come first,
    aligned, whatever the stage order."""
    inst = read(DATA / "worked_example_v2.json")
    plan = Plan.from_tuples(inst, [(0, 1, 0, 0, 1, 1), (1, 2, 0, 0, 1, 2)])
    assert plan.stages[1].devices == ("a/g/0", "a/g/1")
    assert plan.stages[0].devices == ("a/g/2",)
    assert evaluate(inst, plan).feasible


def test_infeasible_hybrid_instance_says_why():
    inst = read(DATA / "worked_example_v2.json")
    tiny = dataclasses.replace(inst, datacenters=tuple(
        dataclasses.replace(dc, devices=tuple(dataclasses.replace(g, memory_bytes=10.0)
                                              for g in dc.devices))
        for dc in inst.datacenters))
    res = solve(tiny, "dp")
    assert res.status == "infeasible"
    assert "layer 0" in res.message and "no allowed width or degree" in res.message


def test_no_pair_fits_any_group_is_infeasible_with_a_reason():
    inst = read(DATA / "worked_example_v2.json")
    wide = dataclasses.replace(inst, training=dataclasses.replace(
        inst.training, parallelism=Parallelism((8,), (1,), False)))
    res = solve(wide, "dp")
    assert res.status == "infeasible" and "no device group can run" in res.message


def _dominates(a, b, M):
    return (a[2] <= b[2] and a[1] + (M - 1) * max(a[0] - b[0], 0) + max(a[3] - b[3], 0)
            <= b[1])


@pytest.mark.parametrize("seed", range(30))
def test_shifted_pareto_keeps_a_dominator_of_every_label(seed):
    """Every dropped label is dominated by a kept one, so every completion of it is
    matched or beaten (the exactness argument of docs/dp.md)."""
    rng = random.Random(seed)
    M = rng.choice([1, 2, 8, 128])
    labels = [(rng.choice([0.1, 0.2, 0.3, 0.5]), rng.choice([1.0, 1.5, 2.0, 3.0, 30.0]),
               rng.randint(0, 2), rng.choice([0.0, 0.5, 1.0]), i) for i in range(rng.randint(2, 40))]
    kept = shifted_pareto(list(labels), M)
    assert kept
    for lab in labels:
        assert any(_dominates(k, lab, M) for k in kept)
    # no kept label beats another kept one strictly
    for a in kept:
        for b in kept:
            if a is not b:
                assert not (_dominates(a, b, M) and not _dominates(b, a, M))


def test_shifted_pareto_numpy_and_python_paths_agree():
    rng = random.Random(7)
    labels = [(rng.random(), rng.random() * 10, rng.randint(0, 3), rng.random(), i)
              for i in range(30)]
    big = shifted_pareto(list(labels), 16)  # 30 labels: the numpy path
    small = [lab for lab in labels
             if lab in shifted_pareto([lab2 for lab2 in labels if lab2 in big or lab2 is lab], 16)]
    assert sorted(x[4] for x in big) == sorted(x[4] for x in small)


def test_feasibility_search_agrees_with_brute_force():
    """``dp.feasible`` (every cost zero, one move per earlier datacenter from the state
    of least ``p``) says a plan exists exactly when the enumeration finds one."""
    from chainpipe.deadline import Deadline
    from chainpipe.solvers import dp

    seen = set()
    for seed in range(120):
        inst = random_hybrid_instance(seed, max_layers=5)
        T, stages = brute_force_hybrid(inst)
        got = dp.feasible(CostTables(inst), Deadline.of(60))
        assert got == (stages is not None), (seed, inst.name)
        seen.add(got)
    assert seen == {True, False}


@pytest.mark.parametrize("block", range(2))
def test_dp_with_the_feasibility_check_after_every_first_trial(block, monkeypatch):
    """The check asked after the first failed trial: the same optima, and ``infeasible``
    where the enumeration finds nothing."""
    from chainpipe.solvers import dp

    monkeypatch.setattr(dp, "FEASIBILITY_AFTER_S", -1.0)
    asked = 0
    for seed in range(400 + block * 40, 400 + (block + 1) * 40):
        res = _check(random_hybrid_instance(seed, max_layers=5))
        asked += res is not None and "feasibility" in res.stats
    assert asked > 0
