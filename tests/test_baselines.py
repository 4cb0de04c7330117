"""Baselines: contract (feasible plans, never better than the optimum, honest statuses),
the strategies they stand for, and the orderings their families imply."""

from __future__ import annotations

import dataclasses
import itertools
import math
import random
from functools import cache
from pathlib import Path

import pytest

import chainpipe as cp
from chainpipe import Datacenter, DeviceGroup, Instance, Layer, Link, Model, Training
from chainpipe.instance import Parallelism
from chainpipe.solvers.baselines import FREE_BANDWIDTH, uniform_bounds
from chainpipe.solvers.baselines.stage_costs import StageCosts
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


# --------------------------------------------------------------------------- version 2
# Hybrid parallelism: a stage on d x t devices. The optimum comes from a local enumerator
# of every plan (layer cuts, group and shape per stage, chain order, device counts),
# each costed by chainpipe.evaluate, the contract's cost model.
HYBRID = ["megatron", "metis", "sailor"]
ONE_DEVICE = HEURISTIC  # the baselines that run every stage on one device


def random_v2_instance(seed: int) -> Instance:
    """A small random v2 instance: 1-3 layers, 1-2 DCs of 1-2 groups, nodes of 1, 2 or 4,
    widths including 3, lists sometimes without 1, ZeRO on or off, tight memory often."""
    rng = random.Random(seed)
    L = rng.randint(1, 3)
    layers = tuple(
        Layer(f"l{i}", float(rng.choice([10, 30, 50, 80])), float(rng.choice([20, 60, 100])),
              rng.randint(0, 12), float(rng.randint(0, 4)), float(rng.choice([0, 2, 10, 40])),
              float(rng.choice([0, 4, 20, 80])))
        for i in range(L))
    M = rng.choice([1, 2, 4, 8])
    schedule = rng.choice(["1f1b", "gpipe"])
    widths = rng.sample([1, 2, 3, 4], rng.randint(1, 3))
    degrees = rng.sample([1, 2, 4], rng.randint(1, 2))
    if rng.random() < 0.5:  # half the lists allow one device per stage for sure
        widths, degrees = sorted({1, *widths}), sorted({1, *degrees})
    par = Parallelism(tuple(widths), tuple(degrees), rng.random() < 0.5)
    training = Training(M, schedule, 16.0, 2.0, float(rng.choice([0, 8, 12])), par)
    full = sum(16.0 * ly.params + M * ly.activation_bytes for ly in layers)
    dcs = []
    for k in range(rng.randint(1, 2)):
        groups = []
        for g in range(rng.randint(1, 2)):
            node = rng.choice([1, 2, 4])
            count = node * rng.choice([1, 2]) if node > 1 else rng.randint(1, 4)
            memory = max(1.0, round(full * rng.uniform(0.1, 0.7))) if rng.random() < 0.5 \
                else full + 100.0
            groups.append(DeviceGroup(f"t{g}", count, float(rng.choice([10, 20, 40])), memory,
                                      node, float(rng.choice([5, 50])) if node > 1 else None))
        dcs.append(Datacenter(f"dc{k}", tuple(groups),
                              Link(float(rng.choice([10, 100])), rng.choice([0.0, 0.1]))))
    links = tuple(Link(float(rng.choice([2, 20])), rng.choice([0.0, 0.5]))
                  for _ in range(len(dcs) - 1))
    return Instance(f"v2-{seed}", Model("m", layers), training, tuple(dcs), links)


def v2_plans(inst: Instance):
    """Every plan of the contract as ``(start, end, dc, group, d, t)`` tuples."""
    par = inst.parallelism
    groups = [(k, gi, grp) for k, dc in enumerate(inst.datacenters)
              for gi, grp in enumerate(dc.devices)]
    options = [(k, gi, grp, d, t) for k, gi, grp in groups for d in par.data_parallel
               for t in par.tensor_parallel if t <= grp.devices_per_node]

    def place(cuts, s, k_min, used):
        if s == len(cuts):
            yield []
            return
        for k, gi, grp, d, t in options:
            if k >= k_min and used.get((k, gi), 0) + d * t <= grp.count:
                used[(k, gi)] = used.get((k, gi), 0) + d * t
                for rest in place(cuts, s + 1, k, used):
                    yield [(*cuts[s], k, gi, d, t)] + rest
                used[(k, gi)] -= d * t

    L = inst.num_layers
    for mask in itertools.product((False, True), repeat=L - 1):
        b = [0] + [i + 1 for i, c in enumerate(mask) if c] + [L]
        yield from place(list(zip(b[:-1], b[1:])), 0, 0, {})


@cache
def v2_case(seed: int):
    inst = random_v2_instance(seed)
    times = [cp.evaluate(inst, cp.Plan.from_tuples(inst, p)) for p in v2_plans(inst)]
    return inst, min((e.iteration_time_s for e in times if e.feasible), default=math.inf)


V2_SEEDS = range(40)


@pytest.mark.parametrize("name", HEURISTIC + HYBRID)
@pytest.mark.parametrize("seed", V2_SEEDS)
def test_v2_contract_against_enumeration(name, seed):
    inst, optimum = v2_case(seed)
    res = cp.solve(inst, name)
    check_contract(inst, optimum, res)
    if name in ONE_DEVICE and res.status == "feasible":
        assert all(s.width == 1 for s in res.plan.stages)


def test_v2_cases_cover_what_matters():
    """The random v2 instances include lists without 1, infeasible ones, and optima that
    need d > 1 or t > 1."""
    without_one = infeasible = hybrid = 0
    for seed in V2_SEEDS:
        inst, optimum = v2_case(seed)
        par = inst.parallelism
        without_one += 1 not in par.data_parallel or 1 not in par.tensor_parallel
        infeasible += math.isinf(optimum)
        res = cp.solve(inst, "metis")
        hybrid += res.status == "feasible" and any(s.width > 1 for s in res.plan.stages)
    assert without_one >= 5 and infeasible >= 3 and hybrid >= 5, (without_one, infeasible, hybrid)


def test_v2_hybrid_baselines_often_reach_the_optimum():
    hits = {n: 0 for n in HYBRID}
    for seed in V2_SEEDS:
        inst, optimum = v2_case(seed)
        for n in HYBRID:
            res = cp.solve(inst, n)
            hits[n] += res.status == "feasible" and res.iteration_time <= optimum * (1 + REL)
    assert all(h >= 10 for h in hits.values()), hits


def test_stage_costs_agree_with_evaluate():
    """The ranker the baselines search with gives evaluate's time (inf where evaluate
    finds the plan infeasible), on every plan of the small instances."""
    checked = {True: 0, False: 0}
    for seed in V2_SEEDS:
        inst = random_v2_instance(seed)
        c = StageCosts(inst)
        flat = {(g.dc, g.index): f for f, g in enumerate(c.tables.groups)}
        for p in v2_plans(inst):
            ev = cp.evaluate(inst, cp.Plan.from_tuples(inst, p))
            T = c.plan_time([(i, j, k, flat[k, gi], d, t) for i, j, k, gi, d, t in p])
            if ev.feasible:
                assert T == pytest.approx(ev.iteration_time_s, rel=1e-12)
            else:
                assert math.isinf(T), ev.violations
            checked[ev.feasible] += 1
    assert checked[True] > 300 and checked[False] > 300, checked


def test_one_device_baselines_refuse_lists_without_one():
    for seed in V2_SEEDS:
        inst, _ = v2_case(seed)
        par = inst.parallelism
        if 1 in par.data_parallel and 1 in par.tensor_parallel:
            continue
        for name in ONE_DEVICE:
            res = cp.solve(inst, name)
            assert res.status == "no_solution" and res.plan is None
            assert "d = t = 1" in res.message and "\n" not in res.message


def test_one_device_baselines_claim_infeasible_only_with_a_v2_proof():
    # the layer fits no single device, but fits two tensor-parallel halves: a plan exists
    par = Parallelism((1,), (1, 2))
    inst = Instance("t", Model("m", (layer(params=10),)), Training(1, "gpipe", 1.0,
                    parallelism=par), (dc("a", ("g", 2, 1.0, 6.0, 2, 10.0)),), ())
    assert CostTables(inst).infeasibility_reason() is None  # the tables see the halves too
    for name in ONE_DEVICE:
        res = cp.solve(inst, name)
        assert res.status == "no_solution", (name, res.message)
    for name in HYBRID:
        res = cp.solve(inst, name)
        assert res.status == "feasible" and res.plan.stages[0].tensor_parallel == 2


def test_hybrid_baselines_say_infeasible_when_no_shape_fits():
    par = Parallelism((1, 2), (1, 2))
    inst = Instance("t", Model("m", (layer(params=10),)), Training(1, "gpipe", 1.0,
                    parallelism=par), (dc("a", ("g", 2, 1.0, 4.0, 2, 10.0)),), ())
    for name in HYBRID + ONE_DEVICE:
        res = cp.solve(inst, name)
        assert res.status == "infeasible" and "layer 0" in res.message, (name, res.message)


def node_degree(inst: Instance, device: str) -> int:
    grp = inst.group(inst.locate(device))
    return max(t for t in inst.parallelism.tensor_parallel if t <= grp.devices_per_node)


def feasible_v2_plans(name: str) -> list[tuple[Instance, cp.Plan]]:
    """The random v2 instances on which baseline ``name`` finds a plan, with the plan."""
    results = [(v2_case(seed)[0], cp.solve(v2_case(seed)[0], name)) for seed in V2_SEEDS]
    found = [(inst, res.plan) for inst, res in results if res.status == "feasible"]
    assert len(found) >= 10, (name, len(found))
    return found


def assert_equal_layers(plan) -> None:
    """Layer counts differ by at most one, the larger stages last."""
    counts = layer_counts(plan)
    assert counts == sorted(counts) and counts[-1] - counts[0] <= 1


def test_megatron_one_shape_tp_over_the_node_equal_layers_widest_dp():
    for inst, plan in feasible_v2_plans("megatron"):
        stages = plan.stages
        d, t = stages[0].data_parallel, stages[0].tensor_parallel
        assert all((s.data_parallel, s.tensor_parallel) == (d, t) for s in stages)
        assert all(node_degree(inst, s.device) == t for s in stages)
        assert_equal_layers(plan)
        # no wider allowed d would give every stage its devices on the same groups
        eligible = [grp for dc_ in inst.datacenters for grp in dc_.devices
                    if max((x for x in inst.parallelism.tensor_parallel
                            if x <= grp.devices_per_node), default=0) == t]
        for wider in (x for x in inst.parallelism.data_parallel if x > d):
            assert sum(grp.count // (wider * t) for grp in eligible) < len(stages)


def test_sailor_one_shape_uniform_layers_contiguous_datacenters():
    for inst, plan in feasible_v2_plans("sailor"):
        assert len({(s.data_parallel, s.tensor_parallel) for s in plan.stages}) == 1
        assert_equal_layers(plan)
        dcs = [inst.locate(s.device).dc for s in plan.stages]
        assert set(dcs) == set(range(dcs[0], dcs[-1] + 1))


def test_sailor_contains_uniform_chain():
    """uniform-chain is sailor with d = t = 1: sailor is never worse when 1 is allowed."""
    compared = 0
    for seed in V2_SEEDS:
        inst, _ = v2_case(seed)
        u, s = cp.solve(inst, "uniform-chain"), cp.solve(inst, "sailor")
        if u.status == "feasible":
            compared += 1
            assert s.status == "feasible"
            assert s.iteration_time <= u.iteration_time * (1 + REL)
    assert compared >= 10


def test_metis_one_shape_per_device_type():
    for inst, plan in feasible_v2_plans("metis"):
        shapes = {}
        for s in plan.stages:
            kind = inst.group(inst.locate(s.device)).type
            assert shapes.setdefault(kind, (s.data_parallel, s.tensor_parallel)) == \
                (s.data_parallel, s.tensor_parallel)


def test_metis_balances_layers_by_effective_throughput():
    # 16 equal layers; 4 fast devices (rate 3) in a node whose tensor-parallel all-reduce
    # is very slow, and 2 slow devices (rate 1). Metis runs the fast type at d = 4 (12 FLOP/s)
    # and the slow one at d = 2 (2 FLOP/s), and cuts the layers 12 : 2 -> 14 and 2
    par = Parallelism((1, 2, 4), (1, 4))
    layers = tuple(Layer(f"l{i}", 10.0, 20.0, 0, 0.0, 0.0, 10.0) for i in range(16))
    inst = Instance("t", Model("m", layers), Training(64, "1f1b", 1.0, parallelism=par),
                    (dc("a", ("fast", 4, 3.0, 1e9, 4, 1e-3), ("slow", 2, 1.0, 1e9)),), ())
    res = cp.solve(inst, "metis")
    shapes = [(inst.group(inst.locate(s.device)).type, s.end - s.start, s.data_parallel,
               s.tensor_parallel) for s in res.plan.stages]
    assert shapes == [("fast", 14, 4, 1), ("slow", 2, 2, 1)]
    # better than any single shape for every stage (sailor's family) here
    assert res.iteration_time < cp.solve(inst, "sailor").iteration_time


def test_metis_coordinate_search_is_valid_and_no_better_than_exhaustive(monkeypatch):
    from chainpipe.solvers.baselines import balanced

    exhaustive = {seed: cp.solve(v2_case(seed)[0], "metis") for seed in V2_SEEDS}
    monkeypatch.setattr(balanced, "EXHAUSTIVE_CONFIGURATIONS", 1)
    for seed in V2_SEEDS:
        inst, optimum = v2_case(seed)
        res = cp.solve(inst, "metis")
        check_contract(inst, optimum, res)
        if res.status == "feasible":
            assert res.stats["search"] == "coordinate" or res.stats["configurations"] <= 1
            assert exhaustive[seed].iteration_time <= res.iteration_time * (1 + REL)


def test_metis_stops_at_its_time_limit():
    inst, _ = v2_case(next(s for s in V2_SEEDS if math.isfinite(v2_case(s)[1])))
    res = cp.solve(inst, "metis", time_limit=0.0)
    assert res.status == "no_solution" and "time limit" in res.message


#: what each baseline gives on the worked example of the contract (optimum T = 16),
#: worked by hand from section 7: one device per stage at best two stages (19.5); megatron
#: takes t = 2 (the node) and then d = 2 for one stage (24.5); metis and sailor find the
#: optimum, two stages of d = 2, t = 1
WORKED_V2 = {"uniform": 19.5, "greedy-fill": 19.5, "proportional": 19.5, "uniform-chain": 19.5,
             "megatron": 24.5, "metis": 16.0, "sailor": 16.0}


@pytest.mark.parametrize("name", sorted(WORKED_V2))
def test_worked_example_v2(name):
    inst = cp.read(Path(__file__).parent / "data" / "valid" / "worked_example_v2.json")
    res = cp.solve(inst, name)
    assert res.status == "feasible"
    assert res.iteration_time == pytest.approx(WORKED_V2[name], rel=REL)


def test_sailor_pruning_loses_nothing(monkeypatch):
    """The bound and the dominance of labels only cut what cannot be strictly better:
    the search without them finds the same time (v1 and v2 instances)."""
    from chainpipe.solvers.baselines import chain_search

    cases = [v2_case(seed)[0] for seed in V2_SEEDS] + [case(seed)[0] for seed in range(0, 60, 2)]
    pruned = [(cp.solve(inst, "sailor"), cp.solve(inst, "uniform-chain")) for inst in cases]
    monkeypatch.setattr(chain_search._UniformChain, "promising", lambda self, bound: True)
    monkeypatch.setattr(chain_search._UniformChain, "dominated", lambda self, key, label: False)
    for inst, results in zip(cases, pruned):
        for name, res in zip(("sailor", "uniform-chain"), results):
            full = cp.solve(inst, name)
            assert full.status == res.status
            if res.status == "feasible":
                assert res.iteration_time == full.iteration_time


@pytest.mark.parametrize("rates", [[0.0, 0.0, 0.0], [1e308, 1e308, 1e308]])
def test_proportional_shares_survive_rates_whose_sum_is_not_finite_and_positive(rates):
    """Rates that underflow to 0 or overflow to inf in their sum give equal shares, with
    no nan and no warning (metis used to warn with nan shares on extreme rates)."""
    import warnings

    from chainpipe.solvers.baselines.balanced import proportional_bounds
    from chainpipe.solvers.baselines.stage_costs import StageCosts

    inst = random_instance(3, max_layers=6)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        b = proportional_bounds(StageCosts(inst), rates)
    assert b[0] == 0 and b[-1] == inst.num_layers and b == sorted(b) and len(b) == 4
