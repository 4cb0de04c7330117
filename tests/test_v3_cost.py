"""Contract version 3, cost: the worked examples of section 7, every rule a plan of
several pipelines can break, one consistency test per new term of ``T`` against the
contract's own arithmetic (``helpers.contract_*``), and the brute force over pipelines,
splits of ``M``, objectives and schedules."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest

import chainpipe as cp
from chainpipe import cost
from chainpipe.io import read, read_plan
from chainpipe.plan import Pipeline, Plan, Stage, evaluate
from chainpipe.schedule import one_f_one_b_cycle
from helpers import (
    brute_force_hybrid,
    brute_force_v3,
    contract_cross_sync,
    contract_pipeline,
    contract_time,
    plan_of_spec,
    random_hybrid_instance,
    random_instance,
    random_v3_instance,
)

VALID = Path(__file__).resolve().parent / "data" / "valid"
EXAMPLE_1F1B = VALID / "worked_example_v3_1f1b.json"
EXAMPLE_GPIPE = VALID / "worked_example_v3_gpipe.json"
EXAMPLE_PIPES = VALID / "worked_example_v3_pipelines.json"


def _with(inst, **training):
    return dataclasses.replace(inst, training=dataclasses.replace(inst.training, **training))


def _T(inst, plan_file):
    ev = evaluate(inst, read_plan(VALID / plan_file))
    assert ev.feasible, ev.violations
    return ev


# --------------------------------------------------------------------------- section 7
def test_worked_example_the_1f1b_period():
    inst = read(EXAMPLE_1F1B)
    one = _T(inst, "worked_example_v3_1f1b.one_stage.plan.json")
    assert (one.iteration_time_s, one.paced_by) == (24.0, "device")
    (c,) = one.stages
    assert (c.forward_time_s, c.backward_time_s, c.compute_time_s) == (2.0, 4.0, 6.0)
    two = _T(inst, "worked_example_v3_1f1b.plan.json")
    assert [s.in_flight for s in two.stages] == [2, 1]
    assert (two.boundaries[0].occupancy_s, two.boundaries[0].traversal_s) == (1.0, 6.0)
    assert (two.bottleneck_s, two.iteration_time_s) == (6.0, 30.0)  # loop W = 12 over 2
    assert two.paced_by == "loop"
    assert two.bottleneck == ("loop s0..s1 (2 microbatches per round trip): 50% compute, "
                              "50% in-DC round trips")
    # classic: the two stages would look faster (21) and be chosen
    classic = evaluate(_with(inst, objective="classic"),
                       read_plan(VALID / "worked_example_v3_1f1b.plan.json"))
    assert (classic.iteration_time_s, classic.paced_by) == (21.0, "device")


def test_worked_example_the_gpipe_period():
    inst = read(EXAMPLE_GPIPE)
    assert _T(inst, "worked_example_v3_gpipe.one_stage.plan.json").iteration_time_s == 24.0
    two = _T(inst, "worked_example_v3_gpipe.plan.json")
    assert [(s.forward_time_s, s.backward_time_s) for s in two.stages] == [(1, 2), (2, 1)]
    assert (two.bottleneck_s, two.iteration_time_s) == (4.0, 21.0)
    assert two.bottleneck == "forward: stage 1 on a/g/1; backward: stage 0 on a/g/0"
    classic = evaluate(_with(inst, objective="classic"),
                       read_plan(VALID / "worked_example_v3_gpipe.plan.json"))
    assert classic.iteration_time_s == 18.0


def test_worked_example_two_pipelines():
    inst = read(EXAMPLE_PIPES)
    assert _T(inst, "worked_example_v3_pipelines.one.plan.json").iteration_time_s == 12.0
    even = _T(inst, "worked_example_v3_pipelines.plan.json")
    assert [p.time_s for p in even.pipelines] == [6.0, 6.0]
    assert (even.cross_sync_s, even.sync_s, even.iteration_time_s) == (3.0, 0.0, 9.0)
    assert even.cross_sync == "2 pipelines over a..b (10 B/s, 0.5 s)"
    assert _T(inst, "worked_example_v3_pipelines.uneven.plan.json").iteration_time_s == 12.0
    h3 = evaluate(_with(inst, pipeline_sync_period=3),
                  read_plan(VALID / "worked_example_v3_pipelines.plan.json"))
    assert (h3.iteration_time_s, h3.cross_sync_period) == (7.0, 3)
    # the brute force finds the optimum 9 (7 with H = 3)
    assert min(v[0] for v in brute_force_v3(inst).values()) == 9.0
    assert min(v[0] for v in brute_force_v3(_with(inst, pipeline_sync_period=3)).values()) == 7.0


def test_worked_example_microbatch_size_forbids_d_4():
    inst = read(EXAMPLE_PIPES)
    four = dataclasses.replace(inst, datacenters=tuple(
        dataclasses.replace(dc, devices=(dataclasses.replace(dc.devices[0], count=4),))
        for dc in inst.datacenters))
    par = dataclasses.replace(inst.parallelism, data_parallel=(1, 2, 4))
    sized = _with(four, microbatch_size=2, parallelism=par)
    plan = Plan(pipelines=[Pipeline([Stage(0, 1, [f"a/g/{i}" for i in range(4)], 4)], 2),
                           Pipeline([Stage(0, 1, "b/g/0")], 2)])
    assert evaluate(sized, plan).violations == (
        "pipelines[0].stages[0].data_parallel: 4 does not divide training.microbatch_size (2): "
        "each replica must take whole sequences of every microbatch",)
    assert evaluate(_with(sized, microbatch_size=4), plan).feasible


# --------------------------------------------------------------------------- plan rules
def test_every_broken_rule_between_pipelines_is_listed():
    inst = _with(read(EXAMPLE_PIPES), microbatches=4)
    plan = Plan(pipelines=[Pipeline([Stage(0, 1, "b/g/0")], 0),
                           Pipeline([Stage(0, 1, "a/g/0")], 3),
                           Pipeline([Stage(0, 1, "b/g/0")], 2)])
    ev = evaluate(inst, plan)
    assert ev.violations == (
        "pipelines[2].stages[0].device: b/g/0 already runs pipelines[0].stages[0]",
        "pipelines: 3 pipeline(s), not an allowed count [1, 2] "
        "(training.parallelism.pipelines)",
        "pipelines[0].microbatches: must be at least 1, got 0",
        "pipelines: microbatches add up to 5, training.microbatches is 4",
        "pipelines[1]: its DCs a..a do not come after pipelines[0]'s b..b; pipelines run on "
        "disjoint DC ranges in chain order",
    )
    assert math.isinf(ev.iteration_time_s)  # M_p = 0: no time


def test_a_one_pipeline_plan_is_refused_when_1_is_not_allowed():
    inst = read(EXAMPLE_PIPES)
    only2 = _with(inst, parallelism=dataclasses.replace(inst.parallelism, pipelines=(2,)))
    ev = evaluate(only2, Plan([Stage(0, 1, "a/g/0")]))
    assert ev.violations == ("stages: a plan of one pipeline, but 1 is not an allowed pipeline "
                             "count [2] (training.parallelism.pipelines)",)
    assert ev.iteration_time_s == 12.0  # still costed


def test_overlapping_ranges_and_stage_rules_per_pipeline():
    inst = read(EXAMPLE_PIPES)
    plan = Plan(pipelines=[Pipeline([Stage(0, 1, "b/g/0")], 2),
                           Pipeline([Stage(0, 2, "b/g/0"), Stage(0, 1, "a/g/9")], 2)])
    assert evaluate(inst, plan).violations == (
        "pipelines[1].stages[1].device: no device named 'a/g/9'",
        "pipelines[1].stages[0].layers: [0, 2) is not a non-empty range of the model's layers "
        "0..0 ([start, end) with 0 <= start < end <= 1)",
        "pipelines[1].stages[1].layers: starts at 0, expected 2",
        "pipelines[1].stages[0].device: b/g/0 already runs pipelines[0].stages[0]",
    )


def test_memory_counts_each_pipelines_own_microbatches():
    inst = read(EXAMPLE_PIPES)
    layer = dataclasses.replace(inst.layers[0], activation_bytes=1e8)  # 1e9 holds 10 in flight
    big = dataclasses.replace(_with(inst, microbatches=16),
                              model=cp.Model("m", (layer,)))
    one = evaluate(big, Plan([Stage(0, 1, "a/g/0")]))
    assert [s.in_flight for s in one.stages] == [16] and not one.feasible
    split = evaluate(big, Plan(pipelines=[Pipeline([Stage(0, 1, "a/g/0")], 8),
                                          Pipeline([Stage(0, 1, "b/g/0")], 8)]))
    assert [s.in_flight for s in split.stages] == [8, 8] and split.feasible


# --------------------------------------------------------------------------- each term
def _random_spec(inst, rng):
    """A random plan of the brute force's placements: the best per allowed P, else None."""
    res = brute_force_v3(inst)
    return [spec for _T, spec in res.values() if spec is not None]


@pytest.mark.parametrize("seed", range(40))
def test_phase_times_are_the_contracts_f_and_b(seed):
    inst = random_v3_instance(seed)
    for spec in _random_spec(inst, None):
        ev = evaluate(inst, plan_of_spec(inst, spec))
        stages = [st for _m, sts in spec for st in sts]
        for c, (a, e, k, g, d, t) in zip(ev.stages, stages):
            grp = inst.datacenters[k].devices[g]
            part = inst.layers[a:e]
            tp = (t - 1) / t * (sum(ly.tp_allreduce_bytes for ly in part) / d) \
                / grp.node_bandwidth_bytes_per_s if t > 1 else 0.0
            rate = d * t * grp.flop_per_s
            assert c.forward_time_s == pytest.approx(sum(ly.fwd_flop for ly in part) / rate + tp,
                                                     rel=1e-12)
            assert c.backward_time_s == pytest.approx(
                sum(ly.bwd_flop for ly in part) / rate + tp, rel=1e-12)
            assert c.forward_time_s + c.backward_time_s == pytest.approx(c.compute_time_s,
                                                                         rel=1e-12)


@pytest.mark.parametrize("seed", range(60))
def test_pipeline_times_and_periods_are_the_contracts(seed):
    """``T_p`` per pipeline (fill, period by objective and schedule, ``M_p``), under both
    objectives and both schedules, against :func:`helpers.contract_pipeline`."""
    base = random_v3_instance(seed)
    for objective in ("period", "classic"):
        for schedule in ("1f1b", "gpipe"):
            inst = _with(base, objective=objective, schedule=schedule)
            for spec in _random_spec(inst, None):
                ev = evaluate(inst, plan_of_spec(inst, spec))
                assert ev.feasible, ev.violations
                for pc, (m, stages) in zip(ev.pipelines, spec):
                    assert pc.microbatches == m
                    want = contract_pipeline(inst, m, stages)
                    assert pc.time_s == pytest.approx(want[0], rel=1e-12)


@pytest.mark.parametrize("seed", range(60))
def test_cross_sync_and_the_plans_time_are_the_contracts(seed):
    inst = random_v3_instance(seed)
    for spec in _random_spec(inst, None):
        ev = evaluate(inst, plan_of_spec(inst, spec))
        want = contract_cross_sync(inst, spec[0][1][0][2], spec[-1][1][-1][2]) \
            if len(spec) > 1 else 0.0
        assert ev.cross_sync_s == pytest.approx(want, rel=1e-12)
        assert ev.cross_sync_period == inst.training.pipeline_sync_period
        assert ev.iteration_time_s == pytest.approx(contract_time(inst, spec), rel=1e-12)


@pytest.mark.parametrize("seed", range(40))
def test_the_1f1b_loop_term_is_written_once(seed):
    """The simulator's cycle is the cost model's 1F1B period (one formula)."""
    inst = _with(random_v3_instance(seed), objective="period", schedule="1f1b")
    for spec in _random_spec(inst, None):
        if len(spec) == 1:
            plan = Plan(plan_of_spec(inst, spec).stages)
            ev = evaluate(_with(inst, microbatches=spec[0][0]), plan)
            assert one_f_one_b_cycle(ev, spec[0][0]) == ev.bottleneck_s


def test_loop_pacing_names_its_stages_and_make_up():
    C, Q = [1.0, 1.0, 1.0], [4.0, 0.0]
    assert cost.worst_loop(C, Q, 8) == (3.0, 0, 1)
    assert cost.worst_loop(C, Q, 2) == (0.0, -1, -1)  # n_0 = min(2, 3) = M: no loop
    assert cost.one_f_one_b_period(C, [0.5, 0.5], Q, 8) == 3.0
    assert cost.gpipe_period([1.0], [2.0], []) == 3.0
    assert cost.plan_time([6.0, 6.0], 0.0, 3.0, 3) == 7.0


# --------------------------------------------------------------------------- brute force
N_RANDOM = 300


@pytest.fixture(scope="module")
def brute():
    out = []
    for seed in range(N_RANDOM):
        inst = random_v3_instance(seed)
        out.append((inst, brute_force_v3(inst)))
    return out


def test_the_random_v3_instances_exercise_loops_and_pipelines(brute):
    """Loops change the optimum on many 1F1B ``period`` instances, several pipelines win
    on many that allow them; both measured, not assumed."""
    loops = loops_den = multi = multi_den = feasible = 0
    for inst, res in brute:
        best = min(v[0] for v in res.values())
        if math.isinf(best):
            continue
        feasible += 1
        if inst.training.objective == "period" and inst.training.schedule == "1f1b":
            loops_den += 1
            classic = min(v[0] for v in brute_force_v3(_with(inst, objective="classic")).values())
            loops += best > classic * (1 + 1e-9)
        if 1 in res and len(res) > 1:
            multi_den += 1
            multi += min(v[0] for P, v in res.items() if P > 1) < res[1][0] * (1 - 1e-9)
    assert feasible >= 0.75 * N_RANDOM
    assert loops >= 25 and loops >= 0.15 * loops_den, (loops, loops_den)
    assert multi >= 50 and multi >= 0.25 * multi_den, (multi, multi_den)


def test_evaluate_agrees_with_the_brute_force_optimum(brute):
    for inst, res in brute:
        for P, (T, spec) in res.items():
            if spec is None:
                continue
            ev = evaluate(inst, plan_of_spec(inst, spec))
            assert ev.feasible, (inst.name, P, ev.violations)
            assert len(ev.pipelines) == P
            assert ev.iteration_time_s == pytest.approx(T, rel=1e-12), (inst.name, P)


@pytest.mark.parametrize("seed", range(40))
def test_nothing_changed_on_version_1_and_2_instances(seed):
    """On /1 and /2 random instances (classic, one pipeline) the version-3 brute force
    finds the version-2 brute force's optimum, and evaluate gives its plan that time."""
    for inst in (random_instance(seed, max_layers=4), random_hybrid_instance(seed, max_layers=3)):
        want, stages = brute_force_hybrid(inst)
        assert inst.training.objective == "classic" and inst.parallelism.pipelines == (1,)
        res = brute_force_v3(inst)
        assert set(res) == {1}
        got, spec = res[1]
        assert got == pytest.approx(want, rel=1e-12) or got == want == math.inf
        if stages is not None:
            ev = evaluate(inst, Plan.from_tuples(inst, stages))
            assert ev.iteration_time_s == pytest.approx(want, rel=1e-12)
            assert ev.pipelines[0].paced_by in ("device", "link")


def _random_plans(inst, rng, n: int):
    """Up to ``n`` random rule-keeping plans (memory aside): per allowed ``P``, random
    one-pipeline placements on disjoint chain-ordered ranges and a random split of ``M``."""
    from helpers import _splits, _v3_configurations

    configs = _v3_configurations(inst)
    out = []
    for _ in range(n * 4):
        P = rng.choice(inst.parallelism.pipelines)
        if P > inst.microbatches or not configs:
            continue
        chosen = sorted(rng.sample(configs, min(P, len(configs))), key=lambda c: c[0][2])
        if len(chosen) < P or any(chosen[i][-1][2] >= chosen[i + 1][0][2] for i in range(P - 1)):
            continue
        split = rng.choice(list(_splits(inst.microbatches, P)))
        out.append(list(zip(split, chosen)))
        if len(out) == n:
            break
    return out


@pytest.mark.parametrize("seed", range(80))
def test_random_plans_cost_and_fit_as_the_contract_says(seed):
    """Random plans of every allowed pipeline count, feasible or not: ``T`` and the
    memory verdict (with each pipeline's ``M_p`` and ``S``) are the contract's."""
    import random

    inst = random_v3_instance(seed)
    for spec in _random_plans(inst, random.Random(seed), 6):
        ev = evaluate(inst, plan_of_spec(inst, spec))
        want = contract_time(inst, spec)
        fits = all(contract_pipeline(inst, m, stages) is not None for m, stages in spec)
        assert ev.feasible == fits, ev.violations
        assert all("microbatches in flight" in v for v in ev.violations)
        if fits:
            assert ev.iteration_time_s == pytest.approx(want, rel=1e-12)
        else:
            assert math.isinf(want) and math.isfinite(ev.iteration_time_s)


def test_loop_words_round_small_shares_to_below_one_percent():
    from chainpipe.plan import BoundaryCost, StageCost, _loop_words

    stages = [StageCost(i, i, i + 1, ("a/g/0",), "a", 1, 1, 100.0, 1, 0.0, 1.0, 0.0)
              for i in range(2)]
    bounds = [BoundaryCost(0, 0, 1.0, ("a",), 1.0, 0.0, 0.1, 0.2)]
    assert _loop_words(stages, bounds, 0, 1) == (
        "loop s0..s1 (2 microbatches per round trip): 100% compute, <1% in-DC round trips")


def test_the_classic_optimum_of_a_degraded_metro_instance_is_paced_by_a_loop():
    """Issue 30's first fact: on hybrid-medium-04-degraded the classic optimum's schedule
    takes more than twice its classic T; the period says so, and names the loop."""
    root = Path(__file__).resolve().parents[1]
    inst = read(root / "instances" / "hybrid" / "medium" / "hybrid-medium-04-degraded.json")
    assert inst.training.objective == "classic"  # a /2 file keeps its meaning
    res = cp.solve(inst, "dp")
    ev = evaluate(_with(inst, objective="period"), res.plan)
    assert ev.iteration_time_s > 2 * res.iteration_time
    assert ev.paced_by == "loop"
    assert ev.bottleneck.startswith("loop s0..s2 (3 microbatches per round trip): ")
    assert "% MAN round trips" in ev.bottleneck
