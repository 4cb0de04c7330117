"""The exact chain DP against the brute-force enumerator and on the committed sets."""

from __future__ import annotations

from pathlib import Path

import pytest

import chainpipe as cp
from chainpipe.instance import Datacenter, DeviceGroup, Instance, Layer, Link, Model, Training
from helpers import brute_force, random_instance

ROOT = Path(__file__).resolve().parents[1]


def _check(inst):
    T, plan = brute_force(inst)
    res = cp.solve(inst, "dp")
    if plan is None:
        assert res.status == "infeasible", (inst.name, res)
        assert res.message
    else:
        assert res.status == "optimal", (inst.name, res.status, res.message)
        assert res.iteration_time == pytest.approx(T, rel=1e-9), inst.name
        assert res.lower_bound == pytest.approx(res.iteration_time, rel=1e-12)
        assert cp.evaluate(inst, res.plan).feasible


@pytest.mark.parametrize("chunk", range(6))
def test_dp_equals_brute_force_on_random_instances(chunk):
    # 6 x 50 = 300 instances: 1-3 DCs, 1-2 types, tight and loose memory, both schedules
    for seed in range(chunk * 50, chunk * 50 + 50):
        _check(random_instance(seed))


@pytest.mark.parametrize("chunk", range(2))
def test_dp_equals_brute_force_more_dcs_and_types(chunk):
    # 4 DCs, 3 device types per DC, M from 1 to 64, forced schedules
    for s in range(chunk * 60, chunk * 60 + 60):
        inst = random_instance(10_000 + s, max_layers=5, max_dcs=4, max_types=3, max_count=2,
                               microbatches=[1, 2, 5, 64][s % 4],
                               schedule=["1f1b", "gpipe"][s % 2])
        _check(inst)


def _layer(i, act=1.0):
    return Layer(f"l{i}", 10.0, 20.0, 1, act, 4.0)


def test_a_model_of_no_flop_is_solved_not_called_infeasible():
    """The lower bound is 0 (no FLOP, nothing crosses a link): every finite trial is the
    same bound, and the last one is unbounded; the plan of T = 0 is proven optimal.
    (Found by a cross-check: dp said 'infeasible' where cdynp, the ILP and CP-SAT found
    it, since the trials were 0, ..., 0 and 0 * inf = nan.)"""
    inst = Instance(
        "noflop", Model("m", (Layer("l0", 0.0, 0.0, 0, 4.0, 5.0),)),
        Training(1, "gpipe", 1.0),
        (Datacenter("dc0", (DeviceGroup("t0", 1, 40.0, 108.0),), Link(10.0, 0.5)),
         Datacenter("dc1", (DeviceGroup("t0", 1, 20.0, 108.0),), Link(10.0, 0.0))),
        (Link(1.0, 1.0),))
    res = cp.solve(inst, "dp")
    assert res.status == "optimal" and res.iteration_time == 0.0
    assert brute_force(inst)[0] == 0.0
    assert cp.solve(inst, "cdynp").iteration_time == 0.0


def test_infeasible_reason_names_the_layer():
    layers = (_layer(0), Layer("huge", 1.0, 1.0, 1000, 0.0, 1.0))
    inst = Instance("inf", Model("m", layers), Training(4, "1f1b", 1.0),
                    (Datacenter("a", (DeviceGroup("g", 2, 1.0, 100.0),), Link(1.0, 0.0)),), ())
    res = cp.solve(inst, "dp")
    assert res.status == "infeasible"
    assert "huge" in res.message and res.plan is None


def test_infeasible_by_device_count():
    # every layer fits alone but no device holds two: 3 layers, 2 devices
    layers = tuple(Layer(f"l{i}", 1.0, 1.0, 6, 0.0, 1.0) for i in range(3))
    inst = Instance("count", Model("m", layers), Training(1, "gpipe", 1.0),
                    (Datacenter("a", (DeviceGroup("g", 2, 1.0, 10.0),), Link(1.0, 0.0)),), ())
    res = cp.solve(inst, "dp")
    assert res.status == "infeasible"


def test_one_f_one_b_position_matters():
    # the first of two stages holds 2 microbatches, the last 1: only the light layer goes first
    layers = (Layer("light", 1.0, 1.0, 0, 1.0, 1.0), Layer("heavy", 1.0, 1.0, 0, 3.0, 1.0))
    dc = Datacenter("a", (DeviceGroup("g", 2, 1.0, 3.0),), Link(100.0, 0.0))
    inst = Instance("pos", Model("m", layers), Training(2, "1f1b", 1.0), (dc,), ())
    res = cp.solve(inst, "dp")
    assert res.status == "optimal"
    assert [(s.start, s.end) for s in res.plan.stages] == [(0, 1), (1, 2)]
    gp = Instance("pos-g", Model("m", layers), Training(2, "gpipe", 1.0), (dc,), ())
    assert cp.solve(gp, "dp").status == "infeasible"


def test_time_limit_gives_a_valid_bound():
    inst = random_instance(7, max_layers=6)
    T, plan = brute_force(inst)
    res = cp.solve(inst, "dp", time_limit=0.0)
    assert res.status in ("no_solution", "optimal")
    if res.lower_bound is not None and plan is not None:
        assert res.lower_bound <= T * (1 + 1e-9)


def test_upper_bound_option_gives_the_same_optimum():
    for seed in range(20):
        inst = random_instance(500 + seed)
        base = cp.solve(inst, "dp")
        if base.status != "optimal":
            continue
        again = cp.solve(inst, "dp", upper_bound=base.iteration_time * 1.5)
        assert again.iteration_time == pytest.approx(base.iteration_time, rel=1e-12)


def test_unknown_option_is_refused():
    with pytest.raises(ValueError, match="unknown option"):
        cp.solve(random_instance(1), "dp", colour="blue")


SMALL = sorted(p for p in (ROOT / "instances" / "small").glob("*.json")
               if p.name != "manifest.json")


def test_small_set_is_there():
    assert len(SMALL) >= 8


@pytest.mark.parametrize("path", SMALL, ids=lambda p: p.name)
def test_dp_on_small_set(path):
    inst = cp.read(path)
    res = cp.solve(inst, "dp")
    if "infeasible" in path.stem:
        assert res.status == "infeasible"
    else:
        assert res.status == "optimal"
        assert cp.evaluate(inst, res.plan).feasible


@pytest.mark.parametrize("seed", range(12))
def test_huge_microbatch_count_is_a_number_not_a_structure(seed):
    """M = 2^31 - 1: the DP's position cap stays <= L, so it solves as fast as with small M."""
    inst = random_instance(seed, max_layers=5, microbatches=2**31 - 1, schedule="1f1b")
    T_opt, plan = brute_force(inst)
    res = cp.solve(inst, "dp", time_limit=20)
    if plan is None:
        assert res.status == "infeasible"
    else:
        assert res.status == "optimal"
        assert res.iteration_time == pytest.approx(T_opt, rel=1e-9)
    assert res.solve_time < 5


def test_an_upper_bound_below_the_optimum_is_no_solution_not_infeasible():
    """A caller's bound only limits the search: nothing below it proves nothing more."""
    inst = cp.read(Path(__file__).resolve().parents[1] / "instances/small/small-03-mem-1f1b.json")
    T = cp.solve(inst, "dp").iteration_time
    res = cp.solve(inst, "dp", upper_bound=0.9 * T)
    assert res.status == "no_solution" and res.plan is None
    assert 0 < res.lower_bound <= 0.9 * T


def test_feasibility_search_agrees_with_brute_force_v1():
    """``dp.feasible`` on version-1 instances (a third memory-tight): a plan exists exactly
    when the enumeration finds one."""
    from chainpipe.deadline import Deadline
    from chainpipe.solvers import dp
    from chainpipe.tables import CostTables

    seen = set()
    for s in range(120):
        inst = random_instance(20_000 + s, max_layers=5, max_dcs=4, max_types=3, max_count=2,
                               microbatches=[1, 2, 5, 64][s % 4],
                               schedule=["1f1b", "gpipe"][s % 2])
        _, plan = brute_force(inst)
        got = dp.feasible(CostTables(inst), Deadline.of(60))
        assert got == (plan is not None), (s, inst.name)
        seen.add(got)
    assert seen == {True, False}


def test_an_instance_with_no_plan_is_proven_by_the_feasibility_check(monkeypatch):
    """Once the run has taken ``FEASIBILITY_AFTER_S``, an instance with no plan ends after
    the check instead of its remaining trials, with or without a caller's bound."""
    from chainpipe.solvers import dp

    monkeypatch.setattr(dp, "FEASIBILITY_AFTER_S", -1.0)
    inst = next(i for i in (random_instance(s) for s in range(200))
                if brute_force(i)[1] is None and cp.solve(i, "dp").stats.get("trials"))
    res = cp.solve(inst, "dp")
    assert res.status == "infeasible" and res.message
    assert res.stats["feasibility"]["feasible"] is False
    assert len(res.stats["trials"]) == 1
    bounded = cp.solve(inst, "dp", upper_bound=1.0)
    assert bounded.status == "no_solution" and bounded.lower_bound == pytest.approx(1.0)
