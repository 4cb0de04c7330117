"""Baselines: contract (feasible plans, never better than the optimum, honest statuses),
the strategies they stand for, and the orderings their families imply."""

from __future__ import annotations

import dataclasses
import math
from functools import cache

import pytest

import chainpipe as cp
from chainpipe import Datacenter, DeviceGroup, Instance, Layer, Link, Model, Training
from chainpipe.solvers.baselines import FREE_BANDWIDTH, uniform_bounds
from chainpipe.tables import CostTables
from helpers import brute_force, random_instance

HEURISTIC = ["uniform", "greedy-fill", "proportional", "uniform-chain"]
DP_BASED = ["comm-unaware", "single-dc"]
SEEDS = range(60)
REL = 1e-9


@cache
def case(seed: int):
    inst = random_instance(seed)
    return inst, brute_force(inst)[0]


def check_contract(inst: Instance, optimum: float, res: cp.Result) -> None:
    assert res.status in ("feasible", "no_solution", "infeasible"), res.message
    assert res.lower_bound is None
    if res.status == "feasible":
        ev = cp.evaluate(inst, res.plan)
        assert ev.feasible, ev.violations
        assert res.iteration_time == pytest.approx(ev.iteration_time_s, rel=REL)
        assert res.iteration_time >= optimum * (1 - REL)
    else:
        assert res.plan is None and res.message
    if res.status == "infeasible":
        assert math.isinf(optimum)
    if math.isinf(optimum):
        assert res.status in ("no_solution", "infeasible")


@pytest.mark.parametrize("name", HEURISTIC + DP_BASED)
@pytest.mark.parametrize("seed", SEEDS)
def test_contract_against_brute_force(name, seed):
    inst, optimum = case(seed)
    check_contract(inst, optimum, cp.solve(inst, name))


@pytest.mark.parametrize("name", HEURISTIC + DP_BASED)
def test_infeasible_only_with_a_proof(name):
    seen = 0
    for seed in SEEDS:
        inst, _ = case(seed)
        res = cp.solve(inst, name)
        if res.status == "infeasible":
            seen += 1
            if name in HEURISTIC:
                assert res.message == CostTables(inst).infeasibility_reason()
    assert seen > 0  # the seeds include instances that cannot be solved at all


@pytest.mark.parametrize("name", HEURISTIC + DP_BASED)
def test_deterministic_whatever_the_seed(name):
    for seed in range(0, 60, 6):
        inst, _ = case(seed)
        a, b = cp.solve(inst, name, seed=1), cp.solve(inst, name, seed=7)
        assert a.status == b.status
        assert a.plan == b.plan


def test_families_are_nested():
    """greedy-fill's plans are among uniform's, and uniform's among uniform-chain's."""
    compared = 0
    for seed in SEEDS:
        inst, _ = case(seed)
        g, u, c = (cp.solve(inst, n) for n in ("greedy-fill", "uniform", "uniform-chain"))
        if g.status == "feasible":
            assert u.status == "feasible" and u.iteration_time <= g.iteration_time * (1 + REL)
        if u.status == "feasible":
            compared += 1
            assert c.status == "feasible" and c.iteration_time <= u.iteration_time * (1 + REL)
    assert compared > 30


def test_baselines_reach_the_optimum_often_but_not_always():
    """They are real strategies, not the optimum under another name."""
    hits = {n: 0 for n in HEURISTIC}
    worse = {n: 0 for n in HEURISTIC}
    for seed in SEEDS:
        inst, optimum = case(seed)
        if math.isinf(optimum):
            continue
        for n in HEURISTIC:
            res = cp.solve(inst, n)
            if res.status == "feasible":
                if res.iteration_time <= optimum * (1 + 1e-9):
                    hits[n] += 1
                else:
                    worse[n] += 1
    for n in HEURISTIC:
        assert hits[n] > 0 and worse[n] > 0, (n, hits[n], worse[n])


# --------------------------------------------------------------------------- strategies
def layer(flop=30.0, params=0, act=0.0, out=1.0, name="l"):
    return Layer(name, flop / 3, 2 * flop / 3, params, act, out)


def make(layers, dcs, links=(), M=4, schedule="1f1b", bpp=1.0):
    return Instance("t", Model("m", tuple(layers)), Training(M, schedule, bpp), tuple(dcs),
                    tuple(links))


def dc(name, *groups, bw=1e9, lat=0.0):
    return Datacenter(name, tuple(DeviceGroup(*g) for g in groups), Link(bw, lat))


def layer_counts(plan):
    return [s.end - s.start for s in plan.stages]


def test_uniform_bounds():
    assert uniform_bounds(10, 3) == [0, 3, 6, 10]
    assert uniform_bounds(4, 4) == [0, 1, 2, 3, 4]
    assert uniform_bounds(5, 1) == [0, 5]


def test_uniform_takes_equal_layers_in_chain_order_fastest_first():
    # DC a: one slow and two fast devices; DC b: a faster one. Chain order beats speed.
    inst = make([layer() for _ in range(6)],
                [dc("a", ("slow", 1, 1.0, 1e9), ("fast", 2, 3.0, 1e9)), dc("b", ("top", 1, 9.0, 1e9))],
                [Link(1e9, 0.0)], M=8)
    res = cp.solve(inst, "uniform")
    counts = layer_counts(res.plan)
    assert max(counts) - min(counts) <= 1
    devices = [s.device for s in res.plan.stages]
    order = ["a/fast/0", "a/fast/1", "a/slow/0", "b/top/0"]
    assert devices == order[: len(devices)]


def test_greedy_fill_uses_whole_datacenters():
    # the model does not fit DC a's two devices; greedy-fill takes all of b as well
    inst = make([layer(params=10) for _ in range(8)],
                [dc("a", ("g", 2, 1.0, 30.0)), dc("b", ("g", 3, 1.0, 30.0))], [Link(1e9, 0.0)])
    res = cp.solve(inst, "greedy-fill")
    assert res.status == "feasible"
    assert res.plan.num_stages == 5
    assert res.stats["datacenters"] == 2


def test_proportional_splits_by_rate():
    # 8 equal layers, rates 1 and 3: a two-stage plan gives 2 and 6 layers
    inst = make([layer() for _ in range(8)], [dc("a", ("fast", 1, 3.0, 1e9), ("slow", 1, 1.0, 1e9))],
                M=64)
    res = cp.solve(inst, "proportional")
    assert res.plan.num_stages == 2
    by_device = {s.device: s.end - s.start for s in res.plan.stages}
    assert by_device == {"a/fast/0": 6, "a/slow/0": 2}


def test_proportional_repairs_memory():
    # the fast device would take 6 of 8 layers but holds only 4: layers move to the slow one
    inst = make([layer(params=1) for _ in range(8)],
                [dc("a", ("fast", 1, 3.0, 4.0), ("slow", 1, 1.0, 100.0))], M=64)
    res = cp.solve(inst, "proportional")
    assert res.status == "feasible"
    assert cp.evaluate(inst, res.plan).feasible
    by_device = {s.device: s.end - s.start for s in res.plan.stages}
    assert by_device == {"a/fast/0": 4, "a/slow/0": 4}


def test_uniform_chain_can_skip_a_slow_first_datacenter():
    # DC a is slow and close to nothing useful; uniform must start there, uniform-chain need not
    inst = make([layer() for _ in range(4)],
                [dc("a", ("slow", 4, 0.1, 1e9)), dc("b", ("fast", 4, 10.0, 1e9))],
                [Link(1e9, 0.0)], M=8)
    u, c = cp.solve(inst, "uniform"), cp.solve(inst, "uniform-chain")
    assert all(s.device.startswith("b/") for s in c.plan.stages)
    assert c.iteration_time < u.iteration_time


def test_uniform_chain_stops_at_its_time_limit():
    inst = make([layer() for _ in range(64)],
                [dc(f"d{k}", ("g", 16, 1.0 + k, 1e9), ("h", 8, 2.0, 1e9)) for k in range(4)],
                [Link(1.0, 0.01)] * 3, M=16)
    res = cp.solve(inst, "uniform-chain", time_limit=0.0)
    assert res.status == "feasible"
    assert res.stats["complete"] is False
    assert cp.evaluate(inst, res.plan).feasible


def test_no_solution_says_why():
    # every layer fits one device, but equal stages never do: the first layer is huge
    inst = make([layer(params=9)] + [layer(params=1) for _ in range(5)],
                [dc("a", ("g", 2, 1.0, 10.0))], M=1)
    assert CostTables(inst).infeasibility_reason() is None
    res = cp.solve(inst, "uniform")
    assert res.status == "no_solution"
    assert "fits memory" in res.message and "stage 0" in res.message
    assert cp.solve(inst, "dp").status == "optimal"


# --------------------------------------------------------------------------- DP-based
def test_single_dc_is_the_best_datacenter_alone():
    for seed in range(0, 60, 3):
        inst, _ = case(seed)
        res = cp.solve(inst, "single-dc")
        alone = min(brute_force(Instance("x", inst.model, inst.training, (d,), ()))[0]
                    for d in inst.datacenters)
        if math.isinf(alone):
            assert res.status in ("no_solution", "infeasible")
        else:
            assert res.iteration_time == pytest.approx(alone, rel=REL)
            assert len({inst.locate(s.device).dc for s in res.plan.stages}) == 1


def test_comm_unaware_is_optimal_without_links_and_pays_for_them():
    paid = 0
    for seed in range(0, 60, 3):
        inst, optimum = case(seed)
        res = cp.solve(inst, "comm-unaware")
        if res.status != "feasible":
            continue
        free = Link(FREE_BANDWIDTH, 0.0)
        blind = dataclasses.replace(
            inst, datacenters=tuple(dataclasses.replace(d, link=free) for d in inst.datacenters),
            links=tuple(free for _ in inst.links))
        blind_opt = brute_force(blind)[0]
        assert cp.evaluate(blind, res.plan).iteration_time_s == pytest.approx(blind_opt, rel=1e-6)
        paid += res.iteration_time > optimum * (1 + 1e-6)
    assert paid > 0  # ignoring the network costs something on some instances
