"""The ILPs and CP-SAT under contract version 3 (issue 33): the ``period`` objective (1F1B
loops, GPipe's two phases) and several pipelines, against the brute-force enumerator of
``tests/helpers.py`` and against ``dp`` on ``instances/v3/small``.

Runtime: about 45 s on one core (the brute force of each random instance is computed once).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from pathlib import Path

import pytest

from chainpipe import evaluate
from chainpipe.formulations import pipelines as outer
from chainpipe.io import read
from chainpipe.solve import solve
from chainpipe.support import refusal
from helpers import brute_force_v3, check_bracket, random_v3_instance

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "valid"
SMALL = sorted((ROOT / "instances" / "v3" / "small").glob("v3-small-*.json"))
#: the three models; the ILPs alternate HiGHS and CBC by seed, so each backend sees half
MODELS = ("ilp-path", "ilp-assign", "cpsat")
SEEDS = range(64)


@functools.cache
def _reference(seed: int):
    """``(instance, optimum, best T of one pipeline under the instance's objective, best T
    of one pipeline under classic)``, by enumeration."""
    inst = random_v3_instance(seed)
    ref = brute_force_v3(inst)
    T = min(v[0] for v in ref.values())
    one = dataclasses.replace(inst, training=dataclasses.replace(
        inst.training, objective="classic",
        parallelism=dataclasses.replace(inst.parallelism, pipelines=(1,))))
    return inst, T, ref.get(1, (math.inf,))[0], brute_force_v3(one)[1][0]


def _backend(name: str, seed: int) -> dict:
    return {} if name == "cpsat" else {"backend": ("highs", "cbc")[seed % 2]}


def _check(name: str, seed: int):
    """The model's answer equals the brute force's; returns the plan's pipeline count."""
    inst, T, _one, _classic = _reference(seed)
    r = solve(inst, name, time_limit=60, **_backend(name, seed))
    where = (name, seed, _backend(name, seed))
    if not math.isfinite(T):
        assert r.status == "infeasible", (where, r.status, r.message)
        assert r.message
        return None
    assert r.status == "optimal", (where, r.status, r.message)
    assert math.isclose(r.iteration_time, T, rel_tol=1e-6, abs_tol=1e-12), (where, T)
    ev = evaluate(inst, r.plan)
    assert ev.feasible, ev.violations
    assert r.iteration_time == ev.iteration_time_s
    assert r.lower_bound <= T * (1 + 1e-9), where
    return r.plan.num_pipelines


def test_the_random_instances_cover_what_v3_adds():
    """Of the 64 instances: loops (or GPipe's phases) change the one-pipeline optimum,
    several pipelines win, both schedules and both objectives occur."""
    loops = several = 0
    kinds = set()
    for seed in SEEDS:
        inst, T, one, classic = _reference(seed)
        kinds.add((inst.training.schedule, inst.training.objective))
        if math.isfinite(T) and T < one * (1 - 1e-9):
            several += 1
        if inst.training.objective == "period" and math.isfinite(one) \
                and one > classic * (1 + 1e-9):
            loops += 1
    assert loops >= 5 and several >= 10, (loops, several)
    assert kinds == {(s, o) for s in ("1f1b", "gpipe") for o in ("period", "classic")}


@pytest.mark.parametrize("name", MODELS)
def test_each_model_equals_brute_force_on_64_random_v3_instances(name):
    """64 random small v3 instances: 1-3 DCs, both schedules and objectives, pipeline lists
    with and without 1, ``H`` from 1 to 4, widths 1 and 2, tight memory; every status
    ``optimal`` with the enumerator's ``T`` (or ``infeasible`` with it)."""
    counts = [_check(name, seed) for seed in SEEDS]
    assert sum(1 for c in counts if c and c > 1) >= 10  # plans of several pipelines returned


@pytest.mark.parametrize("path", SMALL, ids=[p.stem for p in SMALL])
def test_v3_small_proven_by_every_model(path):
    """Every ``instances/v3/small`` optimum, proven by each model (the ILPs on HiGHS; the
    path ILP on CBC too), equals ``dp``'s."""
    inst = read(path)
    ref = solve(inst, "dp")
    assert ref.status == "optimal"
    for name, options in [(m, {}) for m in MODELS] + [("ilp-path", {"backend": "cbc"})]:
        r = solve(inst, name, time_limit=60, **options)
        assert r.status == "optimal", (name, options, r.message)
        assert math.isclose(r.iteration_time, ref.iteration_time, rel_tol=1e-6), (name, options)
        assert r.lower_bound <= ref.iteration_time * (1 + 1e-9)


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("example, T", [("worked_example_v3_1f1b", 24.0),
                                        ("worked_example_v3_gpipe", 21.0),
                                        ("worked_example_v3_pipelines", 9.0)])
def test_worked_examples_of_the_contract(name, example, T):
    inst = read(DATA / f"{example}.json")
    r = solve(inst, name)
    assert r.status == "optimal" and math.isclose(r.iteration_time, T, rel_tol=1e-9), r.message
    if example == "worked_example_v3_pipelines":
        assert r.plan.num_pipelines == 2
        slow = dataclasses.replace(inst, training=dataclasses.replace(
            inst.training, pipeline_sync_period=3))
        assert math.isclose(solve(slow, name).iteration_time, 7.0, rel_tol=1e-9)


@pytest.mark.parametrize("name", MODELS)
def test_time_limited_runs_bracket_the_optimum(name):
    """Cut short (a limit of a few ms to 0.3 s), every answer keeps ``bound <= optimum <=
    T`` and claims ``optimal`` only with the optimum."""
    for path in SMALL[:3]:
        inst = read(path)
        ref = solve(inst, "dp")
        for limit in (0.005, 0.05, 0.3):
            r = solve(inst, name, time_limit=limit)
            check_bracket(ref, r, f"{name} {path.stem} {limit}")


def test_the_enumeration_counts_and_bounds_every_entry():
    """The outer choices of a 3-DC chain with ``M = 4`` and ``pipelines = [1, 2, 3]``: one
    entry for one pipeline, every partition of every span times every split for more; the
    span's ``R_X / H`` is the contract's."""
    inst, *_ = _reference(next(s for s in SEEDS if random_v3_instance(s).num_datacenters == 3))
    inst = dataclasses.replace(inst, training=dataclasses.replace(
        inst.training, microbatches=4,
        parallelism=dataclasses.replace(inst.parallelism, pipelines=(1, 2, 3))))
    got = outer.entries(inst)
    # P = 2: spans [0,1], [1,2] one cut each, [0,2] two cuts, times 3 splits; P = 3: 1 x 3
    assert len(got) == 1 + 4 * 3 + 1 * 3
    for e in got:
        assert sum(e.splits) == 4 and len(e.splits) == len(e.blocks)
        assert all(a <= b for a, b in e.blocks)
        assert all(e.blocks[i][1] + 1 == e.blocks[i + 1][0] for i in range(len(e.blocks) - 1))
    links = inst.links
    bw = min(lk.bandwidth_bytes_per_s for lk in links)
    lat = sum(lk.latency_s for lk in links)
    grads = inst.training.gradient_bytes_per_param * sum(ly.params for ly in inst.layers)
    assert math.isclose(outer.cross_time(inst, 0, 2),
                        (grads / bw + 2 * lat) / inst.training.pipeline_sync_period)


def test_the_ilps_and_cpsat_no_longer_refuse_v3():
    inst = read(DATA / "worked_example_v3_pipelines.json")
    for name in MODELS:
        assert refusal(inst.training, name) is None
    with pytest.raises(ValueError, match="one pipeline"):
        solve(inst, "ilp-path", relax=True)
    with pytest.raises(ValueError, match="one pipeline"):
        solve(inst, "cpsat", hint="dp")


def _fewer_microbatches(seed: int, objective: str | None = None):
    """Random instance ``seed`` with ``M`` of 2 or 3 (fewer than three layers' stages may
    need): stages at positions ``>= M`` stash ``M`` and close no loop."""
    inst = random_v3_instance(seed)
    training = dataclasses.replace(inst.training, microbatches=2 + seed % 2,
                                   objective=objective or inst.training.objective)
    return dataclasses.replace(inst, training=training)


@pytest.mark.parametrize("name, options", [("ilp-path", {}), ("ilp-path", {"backend": "cbc"}),
                                           ("ilp-assign", {}), ("cpsat", {})])
def test_fewer_microbatches_than_stages_and_the_highs_presolve_case(name, options):
    """``M`` of 2 or 3 on 3-layer instances; seed 108 under ``classic`` is the 6-column
    model HiGHS 1.14's presolve ("parallel rows and columns") called optimal at 6.91 s
    where 5.26 s is (``chainpipe.solvers.highs.PRESOLVE_RULES_OFF``)."""
    cases = [_fewer_microbatches(108, "classic")] + [
        _fewer_microbatches(s) for s in range(40) if random_v3_instance(s).num_layers == 3]
    for inst in cases:
        ref = brute_force_v3(inst)
        T = min(v[0] for v in ref.values())
        r = solve(inst, name, time_limit=60, **options)
        if not math.isfinite(T):
            assert r.status == "infeasible", (name, inst.name, r.status)
            continue
        assert r.status == "optimal", (name, inst.name, r.message)
        assert math.isclose(r.iteration_time, T, rel_tol=1e-6), (name, inst.name, T,
                                                                  r.iteration_time)


@pytest.mark.parametrize("name", ("ilp-assign", "ilp-path"))
def test_the_enumeration_reports_its_largest_sub_model(name):
    """Several pipelines: the outer enumeration's stats keep the size of the largest
    one-pipeline sub-model it solved (the benchmark's model-size columns), as the
    sub-model's own run reports it."""
    inst = read(next(p for p in SMALL if "two-pipelines" in p.stem))
    r = solve(inst, name, time_limit=60)
    size = r.stats["largest_sub_model"]
    assert r.stats["sub_solves"] >= 1
    assert all(isinstance(size[k], int) and size[k] > 0
               for k in ("variables", "constraints", "nonzeros"))


@pytest.mark.parametrize("name", ("ilp-path", "ilp-assign"))
def test_each_ilp_with_the_other_backend_on_the_64_random_v3_instances(name):
    """The same 64 instances with the backend the first pass did not use on each seed
    (CBC where it had HiGHS and back), so both PuLP backends see all 64."""
    for seed in SEEDS:
        inst, T, _one, _classic = _reference(seed)
        backend = ("cbc", "highs")[seed % 2]
        r = solve(inst, name, time_limit=60, backend=backend)
        where = (name, seed, backend)
        if not math.isfinite(T):
            assert r.status == "infeasible", (where, r.status, r.message)
            continue
        assert r.status == "optimal", (where, r.status, r.message)
        assert math.isclose(r.iteration_time, T, rel_tol=1e-6, abs_tol=1e-12), (where, T)
        assert evaluate(inst, r.plan).feasible, where
        assert r.lower_bound <= T * (1 + 1e-9), where
