"""``training.microbatch_size``: every stage's data-parallel width divides it, in every solver.

A microbatch of ``B`` sequences is split over a stage's ``d`` replicas, each taking
``B / d`` whole sequences; a width that does not divide ``B`` cannot run. The exact
solvers must agree with the brute-force enumerator (which applies the rule straight
from the contract), and every heuristic's plan must keep the rule too.
"""

from __future__ import annotations

import dataclasses
import random

import pytest

from chainpipe import evaluate, solve
from chainpipe.instance import InstanceError
from chainpipe.io import instance_from_dict, instance_to_dict
from chainpipe.plan import Plan, Stage
from helpers import brute_force_hybrid, random_hybrid_instance

EXACT = ("dp", "cdynp", "ilp-assign", "ilp-path", "cpsat")


def with_batch(inst, size):
    return dataclasses.replace(inst, training=dataclasses.replace(inst.training,
                                                                  microbatch_size=size))


def stated_instances(n: int):
    """Random version-2 instances whose ``microbatch_size`` rules out some allowed width."""
    out = []
    seed = 0
    while len(out) < n:
        inst = random_hybrid_instance(seed)
        seed += 1
        widths = inst.parallelism.data_parallel
        if len(widths) < 2 and widths != (2,):
            continue
        size = random.Random(seed).choice([1, 2, 3, 4, 6])
        out.append(with_batch(inst, size))
    return out


@pytest.mark.parametrize("inst", stated_instances(24), ids=lambda i: i.name)
def test_exact_solvers_equal_brute_force_with_the_rule(inst):
    T, _ = brute_force_hybrid(inst)
    for solver in EXACT:
        res = solve(inst, solver, time_limit=60)
        if T == float("inf"):
            assert res.plan is None, solver
            continue
        assert res.status == "optimal", (solver, res.status, res.message)
        assert res.iteration_time == pytest.approx(T, rel=1e-6), solver
        for st in res.plan.stages:
            assert inst.training.microbatch_size % st.data_parallel == 0, solver


def test_the_rule_binds_on_some_of_the_instances():
    """Without the rule the optimum is lower on some instances: the test above is not
    vacuous."""
    binds = 0
    for inst in stated_instances(24):
        T, _ = brute_force_hybrid(inst)
        free, _ = brute_force_hybrid(with_batch(inst, None))
        assert free <= T + 1e-9
        binds += free < T - 1e-9
    assert binds >= 3


@pytest.mark.parametrize("solver", ["uniform", "greedy-fill", "megatron", "metis", "sailor"])
def test_heuristics_keep_the_rule(solver):
    for inst in stated_instances(12):
        res = solve(inst, solver, time_limit=20)
        if res.plan is not None:
            assert evaluate(inst, res.plan).feasible, (solver, inst.name)


def test_a_plan_with_a_width_that_does_not_divide_is_infeasible():
    inst = next(i for i in map(random_hybrid_instance, range(100))
                if i.datacenters[0].devices[0].count >= 2)
    inst = dataclasses.replace(inst, training=dataclasses.replace(
        inst.training, parallelism=dataclasses.replace(inst.parallelism, data_parallel=(1, 2),
                                                       tensor_parallel=(1,))))
    dc, grp = inst.datacenters[0], inst.datacenters[0].devices[0]
    plan = Plan((Stage(0, inst.num_layers, (f"{dc.name}/{grp.type}/0", f"{dc.name}/{grp.type}/1"),
                       2, 1),))
    ok = evaluate(inst, plan)
    bad = evaluate(with_batch(inst, 3), plan)
    assert not any("microbatch_size" in v for v in ok.violations)
    assert any("does not divide training.microbatch_size (3)" in v for v in bad.violations)


def test_the_field_round_trips_and_is_checked():
    inst = with_batch(random_hybrid_instance(1), 8)
    data = instance_to_dict(inst)
    assert data["training"]["microbatch_size"] == 8
    assert instance_from_dict(data) == inst
    assert "microbatch_size" not in instance_to_dict(with_batch(inst, None))["training"]
    data["training"]["microbatch_size"] = 0
    with pytest.raises(InstanceError, match=r"training.microbatch_size: must be an integer >= 1"):
        instance_from_dict(data)


def test_widths_the_batch_rules_out_are_a_plausibility_warning():
    from chainpipe.plausibility import plausibility_warnings

    inst = dataclasses.replace(random_hybrid_instance(1), training=dataclasses.replace(
        random_hybrid_instance(1).training,
        parallelism=dataclasses.replace(random_hybrid_instance(1).parallelism,
                                        data_parallel=(1, 2, 4, 8))))
    assert not any("microbatch_size" in w for w in plausibility_warnings(with_batch(inst, 8)))
    (line,) = [w for w in plausibility_warnings(with_batch(inst, 6))
               if w.startswith("training.microbatch_size")]
    assert line == ("training.microbatch_size: 6 sequences cannot be split evenly over 4, 8 "
                    "replicas, so no stage can use those widths of data_parallel [1, 2, 4, 8] "
                    "(usable: [1, 2])")
