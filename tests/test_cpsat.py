"""The CP-SAT solver: exact optima, valid bounds despite integer scaling, honest statuses."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from chainpipe import solve
from chainpipe.cli import main
from chainpipe.formulations.cpsat import (
    SCALE_UNITS,
    CpsatModel,
    dominated,
    greedy_plans,
    scaled_floor,
    stage_arcs,
)
from chainpipe.instances.sets import SETS
from chainpipe.plan import Plan, evaluate
from chainpipe.result import OptionError
from chainpipe.solvers.cpsat import ALL_FEATURES
from chainpipe.tables import CostTables
from helpers import brute_force, brute_force_hybrid, random_hybrid_instance, random_instance

pytest.importorskip("ortools")

RTOL = 1e-4  # the tolerance the tests demand; the solver's own is chainpipe.numeric.OPTIMALITY_RTOL
SEEDS = range(70)


def _bound_ok(bound, optimum):
    return bound is None or bound <= optimum * (1 + 1e-12) + 1e-15


@pytest.mark.parametrize("seed", SEEDS)
def test_matches_brute_force(seed):
    inst = random_instance(seed)
    opt, _ = brute_force(inst)
    r = solve(inst, "cpsat", seed=seed)
    if math.isinf(opt):
        assert r.status == "infeasible", r.message
        assert r.message
        return
    assert r.status == "optimal", (r.status, r.message)
    assert r.iteration_time == pytest.approx(opt, rel=RTOL, abs=1e-12)
    assert _bound_ok(r.lower_bound, opt)
    assert r.iteration_time - r.lower_bound <= RTOL * r.iteration_time


@pytest.mark.parametrize("seed", range(100, 112))
def test_bound_sandwich_on_tiny_time_limits(seed):
    inst = random_instance(seed, max_layers=7, max_dcs=3, max_count=3)
    opt, _ = brute_force(inst)
    r = solve(inst, "cpsat", time_limit=0.005, seed=seed)
    assert r.status in ("optimal", "feasible", "no_solution", "infeasible"), r.message
    if math.isinf(opt):
        assert r.status in ("infeasible", "no_solution")
        return
    assert r.status != "infeasible"
    assert _bound_ok(r.lower_bound, opt)
    if r.iteration_time is not None:
        assert r.lower_bound <= opt * (1 + 1e-12) <= r.iteration_time * (1 + 2e-12)


@pytest.mark.parametrize("seed", [3, 17, 42, 60])
def test_trace_is_monotone_and_in_true_seconds(seed):
    inst = random_instance(seed, max_layers=6, microbatches=16)
    opt, _ = brute_force(inst)
    r = solve(inst, "cpsat", seed=seed)
    if r.status == "infeasible" and math.isinf(opt):
        pytest.skip("infeasible instance: no search, no trace")
    trace = r.stats["trace"]
    assert trace, "the trace records at least the starting bound"
    times = [t for t, _, _ in trace]
    assert times == sorted(times)
    incumbents = [x for _, x, _ in trace if x is not None]
    bounds = [b for _, _, b in trace if b is not None]
    assert all(a >= b for a, b in zip(incumbents, incumbents[1:]))
    assert all(a <= b for a, b in zip(bounds, bounds[1:]))
    if math.isfinite(opt):
        assert all(x >= opt * (1 - 1e-12) for x in incumbents)
        assert all(_bound_ok(b, opt) for b in bounds)
        assert incumbents[-1] == pytest.approx(r.iteration_time, rel=1e-12)


def test_infeasible_by_reason_and_by_search():
    # a layer that fits no device: the tables give the reason without search
    inst = next(random_instance(s) for s in range(500)
                if CostTables(random_instance(s)).infeasibility_reason())
    r = solve(inst, "cpsat")
    assert r.status == "infeasible" and "layer" in r.message
    # infeasible only through search (device counts / 1F1B positions): CP-SAT must prove it
    found = 0
    for s in range(400):
        inst = random_instance(s)
        if CostTables(inst).infeasibility_reason() is None and math.isinf(brute_force(inst)[0]):
            r = solve(inst, "cpsat")
            assert r.status == "infeasible", (s, r.status, r.message)
            found += 1
            if found == 3:
                break
    assert found, "no search-infeasible instance among the seeds"


def test_worked_example():
    from chainpipe import Datacenter, DeviceGroup, Instance, Layer, Link, Model, Training

    ly = Layer("l", 100.0, 200.0, 0, 0.0, 20.0)
    inst = Instance("ex", Model("m", (ly, ly, ly)), Training(4, "gpipe", 16.0),
                    (Datacenter("a", (DeviceGroup("g", 2, 100.0, 1e9),), Link(10.0, 0.5)),), ())
    r = solve(inst, "cpsat")
    assert r.status == "optimal" and r.iteration_time == pytest.approx(32.0)
    assert r.lower_bound <= 32.0


def test_scaled_coefficients_never_exceed_true_costs():
    inst = random_instance(7, max_layers=6)
    t = CostTables(inst)
    ub = min(evaluate(inst, Plan.from_tuples(inst, p)).iteration_time_s for p in greedy_plans(t))
    m = CpsatModel.build(t, ub)
    true_c = t.compute_time[m.arcs.group, m.arcs.start, m.arcs.end]
    assert np.all(m.x_cost * m.unit <= true_c)
    assert np.all(true_c - m.x_cost * m.unit < m.unit * (1 + 1e-9))
    assert m.objective_cap < 2**31 and int(m.x_cost.max(initial=0)) < 2**31
    assert m.unit == pytest.approx(ub / SCALE_UNITS)
    # float division may round up; the shaved floor never does
    assert int(scaled_floor([3.0], 1.0)[0]) == 2
    assert int(scaled_floor([3.0 + 1e-9], 1.0)[0]) == 3


def test_hint_is_off_by_default_and_recorded_when_used():
    inst = random_instance(11, max_layers=6)
    opt, plan = brute_force(inst)
    assert plan is not None
    plain = solve(inst, "cpsat")
    assert "hint" not in plain.stats
    hinted = solve(inst, "cpsat", hint=plan)
    assert hinted.stats["hint"]["source"] == "plan"
    assert hinted.stats["hint"]["accepted"] is True
    assert hinted.iteration_time == pytest.approx(opt, rel=RTOL)
    with pytest.raises(ValueError):
        solve(inst, "cpsat", hint="nonsense")
    with pytest.raises(ValueError):
        solve(inst, "cpsat", no_such_option=1)


def test_parameters_are_recorded():
    inst = random_instance(5)
    r = solve(inst, "cpsat", seed=3, threads=2)
    if r.status == "infeasible" and "layer" in (r.message or ""):
        pytest.skip("instance infeasible before search")
    assert r.stats["num_workers"] == 2 and r.stats["seed"] == 3
    rnd = r.stats["rounds"][0]
    assert rnd["stage_arcs"] > 0 and rnd["unit_s"] > 0
    assert rnd["max_rounding_error_s"] == pytest.approx(rnd["rounded_terms"] * rnd["unit_s"])


@pytest.mark.parametrize("entry", SETS["small"], ids=lambda e: e.stem)
def test_agrees_with_dp_on_small_set(entry):
    pytest.importorskip("chainpipe.solvers.dp")
    inst = entry.instance()
    d = solve(inst, "dp")
    r = solve(inst, "cpsat", time_limit=60)
    if d.status == "infeasible":
        assert r.status == "infeasible"
        return
    assert d.status == "optimal"
    assert r.status == "optimal", r.message
    assert r.iteration_time == pytest.approx(d.iteration_time, rel=RTOL)
    assert _bound_ok(r.lower_bound, d.iteration_time)


# --------------------------------------------------------------------------- contract v2
HYBRID_SEEDS = range(72)


def _exact(r, opt):
    """``r`` proves ``opt``: optimal, the same time, a bound never above the optimum."""
    if math.isinf(opt):
        assert r.status == "infeasible", (r.status, r.message)
        return
    assert r.status == "optimal", (r.status, r.message)
    assert r.iteration_time == pytest.approx(opt, rel=RTOL, abs=1e-12)
    assert _bound_ok(r.lower_bound, opt)


@pytest.mark.parametrize("seed", HYBRID_SEEDS)
def test_matches_hybrid_brute_force(seed):
    inst = random_hybrid_instance(seed)
    opt, _ = brute_force_hybrid(inst)
    _exact(solve(inst, "cpsat", seed=seed), opt)


def test_device_counts_hold_when_memory_caps_no_position():
    """Two devices, three one-layer stages would fit memory: the count row must be there
    (it was once skipped because no stage option needed a position row)."""
    inst = random_hybrid_instance(187)
    assert [g.count for dc in inst.datacenters for g in dc.devices] == [2]
    opt, _ = brute_force_hybrid(inst)
    _exact(solve(inst, "cpsat"), opt)


@pytest.mark.parametrize("seed", range(200, 216))
def test_every_strengthening_off_is_still_exact(seed):
    inst = random_hybrid_instance(seed, max_layers=5)
    opt, _ = brute_force_hybrid(inst)
    _exact(solve(inst, "cpsat", features=[]), opt)
    _exact(solve(inst, "cpsat", features="capacity,bound_prune"), opt)
    _exact(solve(inst, "cpsat", features=list(ALL_FEATURES)), opt)


@pytest.mark.parametrize("seed", range(300, 312))
def test_hybrid_bound_sandwich_on_tiny_time_limits(seed):
    inst = random_hybrid_instance(seed, max_layers=6)
    opt, _ = brute_force_hybrid(inst)
    r = solve(inst, "cpsat", time_limit=0.005, seed=seed)
    if math.isinf(opt):
        assert r.status in ("infeasible", "no_solution")
        return
    assert r.status in ("optimal", "feasible", "no_solution"), r.message
    assert _bound_ok(r.lower_bound, opt)
    if r.iteration_time is not None:
        assert r.lower_bound <= opt * (1 + 1e-12) <= r.iteration_time * (1 + 2e-12)


@pytest.mark.parametrize("entry", SETS["hybrid/small"], ids=lambda e: e.stem)
def test_agrees_with_dp_on_hybrid_small_set(entry):
    inst = entry.instance()
    d = solve(inst, "dp")
    r = solve(inst, "cpsat", time_limit=60)
    assert d.status == "optimal"
    _exact(r, d.iteration_time)


def test_dominated_options():
    c = np.array([[1.0, 2.0], [1.0, 3.0], [1.0, 2.0], [0.5, np.inf]])
    r = np.zeros((4, 2))
    w = np.array([1, 2, 1, 4])
    n = np.array([[4, 4], [4, 4], [4, 4], [4, -1]])
    out = dominated(c, r, w, n)
    # option 1 is beaten by 0 (fewer devices); option 2 ties 0 and comes later; option 3
    # is faster on range 0 (kept) and invalid on range 1 (dominated, never a dominator:
    # option 0 on range 1 stays)
    assert out.tolist() == [[False, False], [True, True], [True, True], [False, True]]


def test_dominated_options_are_not_modelled_but_a_hint_using_them_is_kept():
    inst = next(random_hybrid_instance(s) for s in range(400)
                if _has_dominated(random_hybrid_instance(s)))
    t = CostTables(inst)
    arcs = stage_arcs(t, None)
    for g in range(t.G):
        o = t.options(g)
        for a in np.nonzero(arcs.group == g)[0]:
            i, j = arcs.start[a], arcs.end[a]
            k = arcs.option[a]
            assert not dominated(o.compute_time[:, i, j][:, None], o.sync_time[:, i, j][:, None],
                                 o.width, o.max_in_flight[:, i, j][:, None])[k, 0]
    # a plan made of one dominated stage option (if it is a whole plan) is hinted through
    # an option that dominates it
    plan = _dominated_plan(inst, t)
    if plan is not None:
        m = CpsatModel.build(t, evaluate(inst, plan).iteration_time_s)
        assert m.hint(plan)


def _has_dominated(inst) -> bool:
    return _dominated_plan(inst, CostTables(inst)) is not None


def _dominated_plan(inst, t):
    """A one-stage plan on a dominated option that fits memory, or ``None``."""
    L = t.L
    for g in range(t.G):
        o = t.options(g)
        if not len(o.d):
            continue
        dom = dominated(o.compute_time[:, 0:1, L], o.sync_time[:, 0:1, L], o.width,
                        o.max_in_flight[:, 0:1, L])[:, 0]
        for k in np.nonzero(dom & (o.max_in_flight[:, 0, L] >= t.in_flight(1)))[0]:
            grp = t.groups[g]
            plan = Plan.from_tuples(inst, [(0, L, grp.dc, grp.index, int(o.d[k]), int(o.t[k]))])
            if evaluate(inst, plan).feasible:
                return plan
    return None


def test_features_option_is_checked():
    inst = random_hybrid_instance(1)
    with pytest.raises(OptionError, match="unknown feature 'capacityy'; known: "):
        solve(inst, "cpsat", features=["capacityy"])
    with pytest.raises(OptionError, match="must be a list of names"):
        solve(inst, "cpsat", features=3)
    assert solve(inst, "cpsat").stats["features"] == sorted(set(ALL_FEATURES)
                                                           - {"capacity", "sync_levels"})
    assert solve(inst, "cpsat", features="").stats["features"] == []


# --------------------------------------------------------------------------- export
@pytest.mark.parametrize("suffix", [".pbtxt", ".txt", ".pb"])
def test_written_model_solves_to_the_same_optimum(tmp_path, suffix):
    from google.protobuf import text_format
    from ortools.sat import cp_model_pb2
    from ortools.sat.python import cp_model

    inst = random_hybrid_instance(4, max_layers=6)  # four stages of d = 2 are optimal
    opt, _ = brute_force_hybrid(inst)
    assert math.isfinite(opt)
    path = tmp_path / f"model{suffix}"
    r = solve(inst, "cpsat", write_model=str(path))
    _exact(r, opt)
    assert r.stats["model_file"] == str(path)
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no temporary file left
    proto = cp_model_pb2.CpModelProto()
    if suffix == ".pb":
        proto.ParseFromString(path.read_bytes())
    else:
        text_format.Parse(path.read_text(), proto)
    model = cp_model.CpModel()
    model.proto.parse_text_format(text_format.MessageToString(proto))
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1
    assert solver.solve(model) == cp_model.OPTIMAL
    first = r.stats["rounds"][0]
    unit, slack = first["unit_s"], first["max_rounding_error_s"]
    # every coefficient is rounded down: the scaled optimum is at most T*, by less than E units
    assert opt - slack <= solver.objective_value * unit <= opt * (1 + 1e-12)


def test_write_model_refuses_unknown_suffixes_and_directories(tmp_path):
    inst = random_hybrid_instance(5)
    with pytest.raises(OptionError, match=r"must end in \.pbtxt, \.txt, \.pb"):
        solve(inst, "cpsat", write_model=str(tmp_path / "model.lp"))
    (tmp_path / "d.pbtxt").mkdir()
    with pytest.raises(OptionError, match="is a directory"):
        solve(inst, "cpsat", write_model=str(tmp_path / "d.pbtxt"))
    assert [p.name for p in tmp_path.iterdir()] == ["d.pbtxt"]


def test_cli_write_model_never_overwrites_the_instance(tmp_path, capsys):
    src = Path(__file__).resolve().parent / "data" / "valid" / "worked_example_v2.json"
    inst = tmp_path / "inst.pbtxt"
    inst.write_bytes(src.read_bytes())
    before = inst.read_bytes()
    code = main(["solve", str(inst), "--solver", "cpsat", "-O", f"write_model={inst}"])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert "-O write_model: " in err and "refusing to write over it" in err
    assert inst.read_bytes() == before
    code = main(["solve", str(inst), "--solver", "cpsat", "-O", "write_model=m.lp"])
    out, err = capsys.readouterr()
    assert code == 2 and "write_model" in err and ".pbtxt" in err
    model = tmp_path / "m.pbtxt"
    assert main(["solve", str(inst), "--solver", "cpsat", "-O", f"write_model={model}"]) == 0
    assert model.read_text().startswith("variables")


@pytest.mark.parametrize("entry", [e for e in SETS["hybrid/medium"] if e.stem == "hybrid-medium-01"],
                         ids=lambda e: e.stem)
def test_time_limited_hybrid_medium_run_brackets_the_optimum(entry):
    """A real-size v2 model stopped early: ``bound <= optimum <= T`` and a plan is returned."""
    inst = entry.instance()
    opt = solve(inst, "dp").iteration_time
    r = solve(inst, "cpsat", time_limit=2.0)
    assert r.status in ("optimal", "feasible"), r.message
    assert r.lower_bound <= opt * (1 + 1e-12) <= r.iteration_time * (1 + 1e-12)
    assert r.stats["upper_bound_source"] in ("greedy", "metis")


def test_write_model_says_when_no_model_was_built(tmp_path):
    inst = next(random_instance(s) for s in range(500)
                if CostTables(random_instance(s)).infeasibility_reason())
    path = tmp_path / "m.pbtxt"
    r = solve(inst, "cpsat", write_model=str(path))
    assert r.status == "infeasible" and r.message.endswith(f"'{path}' not written")
    r = solve(random_hybrid_instance(4, max_layers=6), "cpsat", time_limit=0.0,
              write_model=str(path))
    assert r.status in ("no_solution", "feasible")
    assert r.message.endswith(f"no model was built, '{path}' not written")
    assert not path.exists()


def test_a_cutoff_proves_no_plan_faster_or_finds_the_optimum():
    """``cutoff`` (what the outer enumeration passes its sub-solves): below the optimum
    the answer proves nothing is faster than the cutoff (a bound at least the cutoff, never
    ``optimal``, the plan no faster than the optimum); above it, the optimum itself."""
    from chainpipe.formulations.pipelines import sub_instance
    from chainpipe.io import read
    from chainpipe.solvers.cpsat import run

    root = Path(__file__).resolve().parents[1]
    inst = read(sorted((root / "instances" / "v3" / "small").glob("v3-small-*.json"))[2])
    one = sub_instance(inst, 0, len(inst.datacenters) - 1, inst.microbatches)
    T = solve(one, "dp").iteration_time

    def time_of(out):
        return math.inf if out.plan is None else evaluate(one, out.plan).iteration_time_s

    for cutoff in (0.999 * T, 0.5 * T):
        out = run(one, deadline=60, cutoff=cutoff)
        # at least the cutoff (the tables' own bound may be higher), at most the optimum
        assert out.status.value != "optimal" and cutoff * (1 - 1e-9) <= out.lower_bound <= T, \
            (cutoff, out.status, out.lower_bound)
        assert time_of(out) >= T * (1 - 1e-9)
    out = run(one, deadline=60, cutoff=1.01 * T)
    assert out.status.value == "optimal" and math.isclose(time_of(out), T, rel_tol=1e-6)
