"""The cost model of docs/model.md, rule by rule, and the shared cost tables against it."""

from __future__ import annotations

import math
import random
from pathlib import Path

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as hst

from chainpipe.cost import in_flight
from chainpipe.cost import path as path_between
from chainpipe.instance import (
    Datacenter,
    DeviceGroup,
    Instance,
    InstanceError,
    Layer,
    Link,
    Model,
    Parallelism,
    Training,
)
from chainpipe.io import read, read_plan
from chainpipe.numeric import MEMORY_RTOL
from chainpipe.plan import Plan, Stage, evaluate
from chainpipe.tables import CostTables
from helpers import random_instance

DATA = Path(__file__).resolve().parent / "data" / "valid"


def plan(*stages: tuple[int, int, str]) -> Plan:
    return Plan(tuple(Stage(a, b, d) for a, b, d in stages))


def layer(i, flop=300.0, params=0, act=0.0, out=20.0) -> Layer:
    return Layer(f"l{i}", flop / 3, 2 * flop / 3, params, act, out)


def chain(layers, dcs, links, *, M=4, schedule="gpipe", bpp=1.0) -> Instance:
    return Instance("t", Model("m", tuple(layers)), Training(M, schedule, bpp), tuple(dcs),
                    tuple(links))


def dc(name, *groups, bw=10.0, lat=0.5) -> Datacenter:
    return Datacenter(name, tuple(DeviceGroup(*g) for g in groups), Link(bw, lat))


@pytest.fixture(scope="module")
def worked():
    return read(DATA / "worked_example.json")


# --------------------------------------------------------------------------- section 7
def test_worked_example_one_stage(worked):
    ev = evaluate(worked, plan((0, 3, "a/g/0")))
    assert ev.feasible
    assert ev.stages[0].compute_time_s == 9.0
    assert ev.boundaries == ()
    assert (ev.fill_drain_s, ev.steady_s, ev.iteration_time_s) == (9.0, 27.0, 36.0)
    assert ev.bottleneck == "stage 0 on a/g/0"


@pytest.mark.parametrize("cut,computes", [(1, (3.0, 6.0)), (2, (6.0, 3.0))])
def test_worked_example_two_stages(worked, cut, computes):
    ev = evaluate(worked, plan((0, cut, "a/g/0"), (cut, 3, "a/g/1")))
    assert ev.feasible
    assert tuple(s.compute_time_s for s in ev.stages) == computes
    (b,) = ev.boundaries
    assert (b.after_stage, b.layer, b.bytes) == (0, cut - 1, 20.0)
    assert b.path == ("a",)
    assert (b.bandwidth_bytes_per_s, b.latency_s) == (10.0, 0.5)
    assert (b.occupancy_s, b.traversal_s) == (2.0, 5.0)
    assert ev.fill_drain_s == 3 + 6 + 5
    assert ev.bottleneck_s == 6.0
    assert ev.iteration_time_s == 32.0
    assert ev.bottleneck == f"stage {computes.index(6.0)} on a/g/{computes.index(6.0)}"


def test_worked_example_plan_files(worked):
    ev = evaluate(worked, read_plan(DATA / "worked_example.plan.json"))
    assert ev.iteration_time_s == 32.0 and ev.feasible
    # a `solve --format json` result object is accepted as a plan file too
    from_result = read_plan(DATA / "worked_example.result.json")
    assert from_result == plan((0, 2, "a/g/0"), (2, 3, "a/g/1"))
    assert evaluate(worked, from_result).iteration_time_s == 32.0


# --------------------------------------------------------------------------- memory
def _memory_instance(schedule, M, memory, *, act=10.0, params=0, bpp=1.0):
    layers = [layer(i, params=params, act=act) for i in range(3)]
    return chain(layers, [dc("a", ("g", 3, 100.0, memory))], [], M=M, schedule=schedule, bpp=bpp)


THREE = plan((0, 1, "a/g/0"), (1, 2, "a/g/1"), (2, 3, "a/g/2"))


def test_in_flight_formula():
    # positions count stages from the end: stage s of S is at position S - s
    assert [in_flight("gpipe", 4, 3 - s) for s in range(3)] == [4, 4, 4]
    assert [in_flight("1f1b", 4, 3 - s) for s in range(3)] == [3, 2, 1]
    assert [in_flight("1f1b", 2, 3 - s) for s in range(3)] == [2, 2, 1]  # min(M, S - s + 1)
    assert in_flight("1f1b", 2, np.array([3, 2, 1])).tolist() == [2, 2, 1]


def test_memory_under_gpipe_stashes_all_microbatches():
    ev = evaluate(_memory_instance("gpipe", 4, 30.0), THREE)
    assert [s.in_flight for s in ev.stages] == [4, 4, 4]
    assert [s.memory_bytes for s in ev.stages] == [40.0, 40.0, 40.0]
    assert ev.violations == tuple(
        f"stages[{s}]: needs 40 bytes (4 microbatches in flight) on a/g/{s}, which has 30 bytes"
        for s in range(3))
    assert not ev.feasible
    assert math.isfinite(ev.iteration_time_s)  # an infeasible plan still gets its time


def test_memory_under_1f1b_stashes_min_of_m_and_stages_to_go():
    ev = evaluate(_memory_instance("1f1b", 4, 30.0), THREE)
    assert [s.in_flight for s in ev.stages] == [3, 2, 1]
    assert [s.memory_bytes for s in ev.stages] == [30.0, 20.0, 10.0]
    assert ev.feasible  # the same plan that gpipe cannot hold
    ev = evaluate(_memory_instance("1f1b", 2, 20.0), THREE)
    assert [s.in_flight for s in ev.stages] == [2, 2, 1]
    assert ev.feasible


def test_memory_counts_parameters_times_bytes_per_param():
    inst = _memory_instance("1f1b", 4, 1000.0, act=10.0, params=7, bpp=16.0)
    ev = evaluate(inst, plan((0, 2, "a/g/0"), (2, 3, "a/g/1")))
    # stage 0: 16 * 14 + 2 * 20 ; stage 1: 16 * 7 + 1 * 10
    assert [s.memory_bytes for s in ev.stages] == [264.0, 122.0]
    assert [s.memory_limit_bytes for s in ev.stages] == [1000.0, 1000.0]


@pytest.mark.parametrize("memory,feasible", [
    (30.0, True),                                   # fits to the byte
    (30.0 / (1 + 0.5 * MEMORY_RTOL), True),         # over by less than the tolerance
    (30.0 / (1 + 2 * MEMORY_RTOL), False),          # over by more than the tolerance
])
def test_memory_tolerance(memory, feasible):
    ev = evaluate(_memory_instance("1f1b", 4, memory), THREE)
    assert ev.feasible is feasible


# --------------------------------------------------------------------------- paths
@pytest.fixture(scope="module")
def three_dcs():
    layers = [layer(i, out=60.0) for i in range(3)]
    dcs = [dc("a", ("g", 2, 100.0, 1e9), ("h", 1, 50.0, 1e9), bw=30.0, lat=0.25),
           dc("b", ("g", 1, 100.0, 1e9), bw=1000.0, lat=0.0),
           dc("c", ("g", 1, 100.0, 1e9), bw=1000.0, lat=0.0)]
    return chain(layers, dcs, [Link(20.0, 1.0), Link(5.0, 2.0)])


def test_path_between(three_dcs):
    assert path_between(three_dcs, 0, 0) == (30.0, 0.25)
    assert path_between(three_dcs, 0, 1) == (20.0, 1.0)
    assert path_between(three_dcs, 1, 2) == (5.0, 2.0)
    assert path_between(three_dcs, 0, 2) == (5.0, 3.0)


def test_skipped_datacenter_path_is_min_bandwidth_and_summed_latency(three_dcs):
    ev = evaluate(three_dcs, plan((0, 1, "a/g/0"), (1, 3, "c/g/0")))
    assert ev.feasible
    (b,) = ev.boundaries
    assert b.path == ("a", "b", "c")
    assert (b.bandwidth_bytes_per_s, b.latency_s) == (5.0, 3.0)
    assert b.occupancy_s == 60.0 / 5.0
    assert b.traversal_s == 2 * (3.0 + 12.0)
    assert ev.bottleneck == "link a-b-c after stage 0"  # 12 s beats the 6 s stage
    assert ev.bottleneck_s == 12.0
    assert ev.iteration_time_s == 3.0 + 6.0 + 30.0 + 3 * 12.0


def test_same_dc_boundary_uses_the_dc_link_even_across_device_types(three_dcs):
    ev = evaluate(three_dcs, plan((0, 1, "a/g/1"), (1, 3, "a/h/0")))
    (b,) = ev.boundaries
    assert b.path == ("a",)
    assert (b.bandwidth_bytes_per_s, b.latency_s, b.occupancy_s) == (30.0, 0.25, 2.0)
    assert [s.compute_time_s for s in ev.stages] == [3.0, 12.0]  # h runs at 50 FLOP/s
    assert ev.iteration_time_s == 3 + 12 + 2 * (0.25 + 2) + 3 * 12


def test_neighbouring_dcs_use_their_chain_link(three_dcs):
    ev = evaluate(three_dcs, plan((0, 1, "a/g/0"), (1, 2, "b/g/0"), (2, 3, "c/g/0")))
    assert [(b.path, b.bandwidth_bytes_per_s, b.latency_s) for b in ev.boundaries] == [
        (("a", "b"), 20.0, 1.0), (("b", "c"), 5.0, 2.0)]
    assert ev.bottleneck == "link b-c after stage 1"


def test_a_link_and_a_stage_tied_for_bottleneck_report_the_stage(worked):
    # [0,1) computes 3 s; output 30 bytes on a 10 B/s link occupies it 3 s
    inst = chain([layer(0, out=30.0), layer(1)], [dc("a", ("g", 2, 100.0, 1e9))], [])
    ev = evaluate(inst, plan((0, 1, "a/g/0"), (1, 2, "a/g/1")))
    assert ev.bottleneck_s == 3.0 and ev.bottleneck == "stage 0 on a/g/0"


# --------------------------------------------------------------------------- rules of a plan
def test_device_reused_is_a_violation(worked):
    ev = evaluate(worked, plan((0, 1, "a/g/0"), (1, 2, "a/g/1"), (2, 3, "a/g/0")))
    assert ev.violations == ("stages[2].device: a/g/0 already runs stage 0",)
    assert math.isfinite(ev.iteration_time_s)


def test_going_backwards_in_the_chain_is_a_violation(three_dcs):
    ev = evaluate(three_dcs, plan((0, 1, "b/g/0"), (1, 3, "a/g/0")))
    assert ev.violations == ("stages[1].device: datacenter a comes before b in the chain",)
    assert ev.boundaries[0].path == ("a", "b")  # the time is still shown


@pytest.mark.parametrize("stages,violations", [
    ([(0, 1, "a/g/0"), (2, 3, "a/g/1")],
     ["stages[1].layers: starts at 2, expected 1"]),
    ([(0, 2, "a/g/0"), (1, 3, "a/g/1")],
     ["stages[1].layers: starts at 1, expected 2"]),
    ([(0, 2, "a/g/0")],
     ["stages: cover layers up to 2, the model has 3"]),
    ([(1, 3, "a/g/0")],
     ["stages[0].layers: starts at 1, expected 0"]),
])
def test_gaps_overlaps_and_short_cover_are_violations(worked, stages, violations):
    ev = evaluate(worked, plan(*stages))
    assert list(ev.violations) == violations
    assert math.isfinite(ev.iteration_time_s)


@pytest.mark.parametrize("stages,violations", [
    ([(0, 0, "a/g/0"), (0, 3, "a/g/1")],
     ["stages[0].layers: [0, 0) is not a non-empty range of the model's layers 0..2 "
      "([start, end) with 0 <= start < end <= 3)"]),
    ([(0, 2, "a/g/0"), (2, 4, "a/g/1")],
     ["stages[1].layers: [2, 4) is not a non-empty range of the model's layers 0..2 "
      "([start, end) with 0 <= start < end <= 3)",
      "stages: cover layers up to 4, the model has 3"]),
    ([(0, 3, "a/g/2")], ["stages[0].device: no device named 'a/g/2'"]),
    ([(0, 3, "b/g/0")], ["stages[0].device: no device named 'b/g/0'"]),
    ([(0, 3, "a/g")], ["stages[0].device: no device named 'a/g'"]),
])
def test_stages_that_do_not_exist_make_the_time_undefined(worked, stages, violations):
    ev = evaluate(worked, plan(*stages))
    assert list(ev.violations) == violations
    assert ev.iteration_time_s == math.inf and ev.bottleneck == "undefined"
    assert ev.stages == () and not ev.feasible


def test_empty_plan_is_an_error(worked):
    with pytest.raises(InstanceError):
        evaluate(worked, Plan(()))


def test_several_violations_are_all_listed(three_dcs):
    ev = evaluate(three_dcs, plan((0, 1, "b/g/0"), (2, 3, "a/g/0"), (3, 3, "b/g/0")))
    assert list(ev.violations) == [
        "stages[1].layers: starts at 2, expected 1",
        "stages[2].layers: [3, 3) is not a non-empty range of the model's layers 0..2 "
        "([start, end) with 0 <= start < end <= 3)",
        "stages[2].device: b/g/0 already runs stage 0",
        "stages[1].device: datacenter a comes before b in the chain",
    ]


# --------------------------------------------------------------------------- plan files
@pytest.mark.parametrize("data,problems", [
    ([], ["(plan): must be an object"]),
    ({}, ["stages: must be a non-empty list"]),
    ({"stages": []}, ["stages: must be a non-empty list"]),
    ({"stages": [3]}, ["stages[0]: must be an object"]),
    ({"stages": [{"layers": [0, 1.0], "device": "a/g/0"}]},
     ["stages[0].layers: must be a list [start, end] of two integers"]),
    ({"stages": [{"layers": [0, True], "device": "a/g/0"}]},
     ["stages[0].layers: must be a list [start, end] of two integers"]),
    ({"stages": [{"layers": [0, 1, 2], "device": 0}]},
     ["stages[0].layers: must be a list [start, end] of two integers",
      "stages[0].device: must be a device name 'dc/type/i'"]),
    ({"stages": [{"layers": [0, 1]}, {"device": "a/g/0"}]},
     ["stages[0].device: must be a device name 'dc/type/i'",
      "stages[1].layers: must be a list [start, end] of two integers"]),
])
def test_plan_from_dict_names_every_problem(data, problems):
    with pytest.raises(InstanceError) as info:
        Plan.from_dict(data)
    assert info.value.problems == problems


def test_plan_round_trip_and_from_tuples(three_dcs):
    p = Plan.from_tuples(three_dcs, [(0, 1, 0, 0), (1, 2, 0, 0), (2, 3, 2, 0)])
    assert p == plan((0, 1, "a/g/0"), (1, 2, "a/g/1"), (2, 3, "c/g/0"))
    assert Plan.from_dict(p.to_dict()) == p
    d = evaluate(three_dcs, p).to_dict()
    assert d["feasible"] is True and d["iteration_time_s"] > 0


def test_read_plan_prefixes_problems_with_the_file(tmp_path):
    f = tmp_path / "p.json"
    f.write_text('{"plan": null, "status": "infeasible"}')
    with pytest.raises(InstanceError) as info:
        read_plan(f)
    assert info.value.problems == [f"{f}: plan: the result holds no plan"]
    f.write_text('{"plan": {"stages": [{"layers": [0], "device": "a/g/0"}]}}')
    with pytest.raises(InstanceError) as info:
        read_plan(f)
    assert info.value.problems == [
        f"{f}: plan.stages[0].layers: must be a list [start, end] of two integers"]


# --------------------------------------------------------------------------- invariants
def _random_plan(inst: Instance, rng: random.Random) -> Plan:
    """A random structurally valid plan: contiguous stages on distinct chain-ordered devices."""
    L = inst.num_layers
    slots = [(k, g) for k, d in enumerate(inst.datacenters) for g, grp in enumerate(d.devices)
             for _ in range(grp.count)]
    S = rng.randint(1, min(L, len(slots)))
    cuts = sorted(rng.sample(range(1, L), S - 1))
    bounds = [0, *cuts, L]
    chosen = sorted(rng.sample(slots, S))  # chain order; from_tuples numbers devices
    return Plan.from_tuples(inst, [(bounds[s], bounds[s + 1], *chosen[s]) for s in range(S)])


@pytest.mark.parametrize("seed", range(40))
def test_breakdown_sums_and_tables_agree_with_evaluate(seed):
    inst = random_instance(seed, max_layers=7, max_dcs=3, max_types=2)
    tables = CostTables(inst)
    rng = random.Random(seed)
    flat = {(g.dc, g.index): i for i, g in enumerate(tables.groups)}
    for _ in range(6):
        p = _random_plan(inst, rng)
        ev = evaluate(inst, p)
        assert not [v for v in ev.violations if "needs" not in v], ev.violations
        assert ev.fill_drain_s + ev.steady_s == pytest.approx(ev.iteration_time_s, rel=1e-12)
        assert ev.steady_s == pytest.approx((inst.microbatches - 1) * ev.bottleneck_s)
        assert ev.bottleneck_s == max([s.compute_time_s for s in ev.stages]
                                      + [b.occupancy_s for b in ev.boundaries])
        S = p.num_stages
        for s, (st, cost) in enumerate(zip(p.stages, ev.stages)):
            ref = inst.locate(st.device)
            g = flat[(ref.dc, ref.group)]
            assert tables.compute_time[g, st.start, st.end] == pytest.approx(cost.compute_time_s)
            assert tables.in_flight(S - s) == cost.in_flight
            fits = cost.memory_bytes <= cost.memory_limit_bytes * (1 + MEMORY_RTOL)
            assert tables.fits(g, st.start, st.end, S - s) == fits
            assert (f"stages[{s}]: needs" in " ".join(ev.violations)) == (not fits)
        for b in ev.boundaries:
            k1 = inst.locate(p.stages[b.after_stage].device).dc
            k2 = inst.locate(p.stages[b.after_stage + 1].device).dc
            cut = p.stages[b.after_stage].end
            assert tables.occupancy(cut, k1, k2) == pytest.approx(b.occupancy_s)
            assert tables.traversal(cut, k1, k2) == pytest.approx(b.traversal_s)
        if ev.feasible:
            assert tables.lower_bound <= ev.iteration_time_s * (1 + 1e-12)


@pytest.mark.parametrize("seed", range(40))
def test_max_in_flight_matches_the_memory_rule_at_every_position(seed):
    inst = random_instance(seed, max_layers=6, schedule="1f1b" if seed % 2 else "gpipe")
    t = CostTables(inst)
    bpp, layers, M = inst.training.bytes_per_param, inst.layers, inst.microbatches
    for g, grp in enumerate(t.groups):
        for i in range(t.L):
            for j in range(i + 1, t.L + 1):
                params = sum(ly.params for ly in layers[i:j])
                act = sum(ly.activation_bytes for ly in layers[i:j])
                for position in range(1, t.L + 2):
                    n = M if inst.training.schedule == "gpipe" else min(M, position)
                    rule = bpp * params + n * act <= grp.memory_bytes * (1 + MEMORY_RTOL)
                    assert t.fits(g, i, j, position) == rule, (g, i, j, position)


# --------------------------------------------------------------------------- version 2
def v2_plan(*stages) -> Plan:
    """Stages ``(start, end, devices, d, t)``."""
    return Plan(tuple(Stage(a, b, tuple(devs), d, t) for a, b, devs, d, t in stages))


def _names(prefix, *indices):
    return tuple(f"{prefix}/{i}" for i in indices)


@pytest.fixture(scope="module")
def worked_v2():
    return read(DATA / "worked_example_v2.json")


#: the five plans of the version-2 worked example: stages, C_s, R_s, U, T
WORKED_V2 = {
    "one stage, d = t = 1": ([(0, 2, ["a/g/0"], 1, 1)], [6.0], [0.0], None, 24.0),
    "one stage, d = 2": ([(0, 2, ["a/g/0", "a/g/1"], 2, 1)], [3.0], [4.5], None, 16.5),
    "one stage, d = 2, t = 2": ([(0, 2, ["a/g/0", "a/g/1", "a/g/2", "a/g/3"], 2, 2)],
                                [5.5], [2.5], None, 24.5),
    "two stages, d = 1": ([(0, 1, ["a/g/0"], 1, 1), (1, 2, ["a/g/1"], 1, 1)],
                          [3.0, 3.0], [0.0, 0.0], 2.0, 19.5),
    "two stages, d = 2": ([(0, 1, ["a/g/0", "a/g/1"], 2, 1), (1, 2, ["a/g/2", "a/g/3"], 2, 1)],
                          [1.5, 1.5], [2.5, 2.5], 2.0, 16.0),
}


@pytest.mark.parametrize("name", list(WORKED_V2))
def test_worked_example_v2(worked_v2, name):
    stages, computes, syncs, occupancy, T = WORKED_V2[name]
    ev = evaluate(worked_v2, v2_plan(*stages))
    assert ev.feasible, ev.violations
    assert [s.compute_time_s for s in ev.stages] == pytest.approx(computes, rel=1e-12)
    assert [s.sync_time_s for s in ev.stages] == pytest.approx(syncs, rel=1e-12)
    assert [(s.data_parallel, s.tensor_parallel) for s in ev.stages] == \
        [(d, t) for *_, d, t in stages]
    assert [b.occupancy_s for b in ev.boundaries] == ([] if occupancy is None else [occupancy])
    assert ev.sync_s == pytest.approx(max(syncs), rel=1e-12)
    assert ev.iteration_time_s == pytest.approx(T, rel=1e-12)
    # the parts add up: fill and drain, steady state, synchronisation
    assert ev.fill_drain_s + ev.steady_s + ev.sync_s == pytest.approx(T, rel=1e-12)


def test_worked_example_v2_optimum_is_paced_by_the_link(worked_v2):
    ev = evaluate(worked_v2, read_plan(DATA / "worked_example_v2.plan.json"))
    assert ev.feasible and ev.iteration_time_s == pytest.approx(16.0, rel=1e-12)
    assert ev.bottleneck == "link a after stage 0" and ev.paced_by == "link"
    assert ev.bottleneck_s == 2.0  # U = 2 beats C = 1.5
    assert ev.sync == "stage 0 on 2 x 1 devices a/g/0..1"
    # one stage on two replicas: its 9 s of steady state outweigh its 4.5 s synchronisation
    one = evaluate(worked_v2, v2_plan(*WORKED_V2["one stage, d = 2"][0]))
    assert (one.paced_by, one.steady_s, one.sync_s) == ("device", 9.0, 4.5)


def test_worked_example_v2_plan_evaluates_the_same_from_tuples(worked_v2):
    p = Plan.from_tuples(worked_v2, [(0, 1, 0, 0, 2, 1), (1, 2, 0, 0, 2, 1)])
    assert p == read_plan(DATA / "worked_example_v2.plan.json")
    assert evaluate(worked_v2, p).iteration_time_s == pytest.approx(16.0, rel=1e-12)


def test_the_v2_breakdown_reports_d_t_memory_and_sync(worked_v2):
    ev = evaluate(worked_v2, v2_plan(*WORKED_V2["one stage, d = 2, t = 2"][0]))
    (st,) = ev.stages
    assert st.devices == ("a/g/0", "a/g/1", "a/g/2", "a/g/3") and st.device == "a/g/0"
    # per device: beta * P / t + n * A / (d t) = 16 * 20 / 2 + 0
    assert (st.memory_bytes, st.memory_limit_bytes, st.in_flight) == (160.0, 1e9, 4)
    d = ev.to_dict()
    assert d["paced_by"] == "device" and d["sync_s"] == pytest.approx(2.5)
    assert d["stages"][0]["data_parallel"] == 2 and d["stages"][0]["tensor_parallel"] == 2


# a v2 cluster: DC a with g (8 devices, nodes of 4) and h (4, nodes of 2), DC b with g (4, one
# per node); three layers of 300 FLOP, 10 parameters and 5 stashed bytes each
def _v2_instance(*, memory=1e9, zero=False, dp=(1, 2, 3), tp=(1, 2, 4)) -> Instance:
    layers = [Layer(f"l{i}", 100.0, 200.0, 10, 5.0, 20.0, 40.0) for i in range(3)]
    dcs = [Datacenter("a", (DeviceGroup("g", 8, 100.0, memory, 4, 10.0),
                            DeviceGroup("h", 4, 50.0, memory, 2, 5.0)), Link(10.0, 0.25)),
           Datacenter("b", (DeviceGroup("g", 4, 100.0, memory),), Link(10.0, 0.25))]
    training = Training(4, "gpipe", 16.0, optimizer_bytes_per_param=12.0,
                        parallelism=Parallelism(dp, tp, zero))
    return Instance("v2", Model("m", tuple(layers)), training, tuple(dcs), (Link(5.0, 1.0),))


@pytest.fixture(scope="module")
def cluster():
    return _v2_instance()


@pytest.mark.parametrize("stage,violations", [
    ((0, 3, ("a/g/0", "a/h/0"), 2, 1),
     ["stages[0].devices: mixes device groups a/g, a/h; a stage runs on one group"]),
    ((0, 3, ("a/g/0", "b/g/0"), 2, 1),
     ["stages[0].devices: mixes device groups a/g, b/g; a stage runs on one group"]),
    ((0, 3, _names("a/g", 2, 3, 4, 5), 1, 4),
     ["stages[0].devices[0:4]: tensor-parallel group spans nodes (devices 2, 3, 4, 5, "
      "4 per node)"]),
    ((0, 3, _names("a/g", 0, 1, 3, 4), 2, 2),
     ["stages[0].devices[2:4]: tensor-parallel group spans nodes (devices 3, 4, 4 per node)"]),
    ((0, 3, _names("a/g", 0, 1, 2, 3), 4, 1),
     ["stages[0].data_parallel: 4 is not an allowed width [1, 2, 3]"]),
    ((0, 3, _names("a/g", *range(8)), 1, 8),
     ["stages[0].tensor_parallel: 8 is not an allowed degree [1, 2, 4]",
      "stages[0].tensor_parallel: 8 exceeds the 4 device(s) per node of a/g"]),
    ((0, 3, _names("a/g", 0, 1), 2, 2),
     ["stages[0].devices: lists 2 device(s), data_parallel x tensor_parallel = 4"]),
    ((0, 3, _names("a/g", 0, 1, 2, 3, 4), 2, 2),
     ["stages[0].devices: lists 5 device(s), data_parallel x tensor_parallel = 4"]),
    ((0, 3, _names("a/h", 0, 1, 2, 3), 1, 4),
     ["stages[0].tensor_parallel: 4 exceeds the 2 device(s) per node of a/h"]),
    ((0, 3, _names("b/g", 0, 1), 1, 2),
     ["stages[0].tensor_parallel: 2 exceeds the 1 device(s) per node of b/g"]),
    ((0, 3, ("a/g/1", "a/g/1"), 2, 1), ["stages[0].devices: a/g/1 is listed twice"]),
])
def test_v2_stage_rules_are_violations_with_the_time_still_shown(cluster, stage, violations):
    ev = evaluate(cluster, v2_plan(stage))
    assert list(ev.violations) == violations
    assert math.isfinite(ev.iteration_time_s)


def test_v2_rules_hold_stage_by_stage(cluster):
    ev = evaluate(cluster, v2_plan((0, 1, _names("a/h", 0, 1), 1, 2),
                                   (1, 2, _names("a/g", 3, 4), 1, 2),
                                   (2, 3, _names("b/g", 0, 1, 2, 3), 3, 1)))
    assert list(ev.violations) == [
        "stages[1].devices[0:2]: tensor-parallel group spans nodes (devices 3, 4, 4 per node)",
        "stages[2].devices: lists 4 device(s), data_parallel x tensor_parallel = 3",
    ]


def test_data_parallel_replicas_may_sit_in_different_nodes(cluster):
    # only a tensor-parallel group must stay inside a node; t = 1 replicas go anywhere
    ev = evaluate(cluster, v2_plan((0, 3, _names("a/g", 3, 4, 7), 3, 1)))
    assert ev.feasible, ev.violations
    ev = evaluate(cluster, v2_plan((0, 3, _names("a/g", 6, 7, 2, 3), 2, 2)))
    assert ev.feasible, ev.violations  # two aligned pairs, in any order


def test_devices_of_two_stages_are_distinct(cluster):
    ev = evaluate(cluster, v2_plan((0, 1, _names("a/g", 0, 1), 1, 2),
                                   (1, 3, _names("a/g", 1, 2), 2, 1)))
    assert list(ev.violations) == ["stages[1].device: a/g/1 already runs stage 0"]


@pytest.mark.parametrize("zero,need", [(False, 255.0), (True, 165.0)])
def test_memory_is_per_device_with_zero_1(zero, need):
    # P = 30, A = 15, n = M = 4, d = t = 2, beta = 16, zeta = 12 with ZeRO-1:
    # ((beta - zeta) + zeta / d) * P / t + n * A / (d t)
    inst = _v2_instance(memory=200.0, zero=zero)
    ev = evaluate(inst, v2_plan((0, 3, _names("a/g", 0, 1, 2, 3), 2, 2)))
    assert ev.stages[0].memory_bytes == need
    assert list(ev.violations) == ([] if need <= 200 else [
        "stages[0]: needs 255 bytes (4 microbatches in flight) on each of its 4 a/g devices, "
        "which has 200 bytes"])


def test_one_device_stage_memory_is_version_1(cluster):
    ev = evaluate(_v2_instance(memory=200.0, zero=True), v2_plan((0, 3, ("a/g/0",), 1, 1)))
    # ZeRO-1 over one replica shards nothing: 16 * 30 + 4 * 15
    assert ev.stages[0].memory_bytes == 540.0
    assert ev.violations == (
        "stages[0]: needs 540 bytes (4 microbatches in flight) on a/g/0, which has 200 bytes",)


# --------------------------------------------------------------------------- v2 plan files
def test_v2_plan_shape_reads_and_writes():
    data = {"stages": [
        {"layers": [0, 2], "data_parallel": 2, "tensor_parallel": 2,
         "devices": ["a/g/0", "a/g/1", "a/g/2", "a/g/3"]},
        {"layers": [2, 3], "devices": ["b/g/0"]},
    ]}
    p = Plan.from_dict(data)
    assert p.stages[0] == Stage(0, 2, _names("a/g", 0, 1, 2, 3), 2, 2)
    assert p.stages[0].tp_groups() == [("a/g/0", "a/g/1"), ("a/g/2", "a/g/3")]
    assert p.stages[1] == Stage(2, 3, ("b/g/0",), 1, 1)  # widths default to 1
    assert p.to_dict()["stages"][1] == {"layers": [2, 3], "data_parallel": 1,
                                        "tensor_parallel": 1, "devices": ["b/g/0"]}
    assert Plan.from_dict(p.to_dict()) == p


def test_v1_plan_shape_reads_as_one_device_stages(worked):
    p = read_plan(DATA / "worked_example.plan.json")
    assert p.stages == (Stage(0, 1, ("a/g/0",)), Stage(1, 3, ("a/g/1",)))
    assert [(s.device, s.width) for s in p.stages] == [("a/g/0", 1), ("a/g/1", 1)]
    assert p.to_dict()["stages"][0] == {"layers": [0, 1], "data_parallel": 1,
                                        "tensor_parallel": 1, "devices": ["a/g/0"]}


@pytest.mark.parametrize("stage,problems", [
    ({"layers": [0, 1], "device": "a/g/0", "devices": ["a/g/0"]},
     ["stages[0]: give 'devices' (a list) or 'device' (one name), not both"]),
    ({"layers": [0, 1], "devices": []},
     ["stages[0].devices: must be a non-empty list of device names 'dc/type/i'"]),
    ({"layers": [0, 1], "devices": "a/g/0"},
     ["stages[0].devices: must be a non-empty list of device names 'dc/type/i'"]),
    ({"layers": [0, 1], "devices": ["a/g/0", 1]},
     ["stages[0].devices: must be a non-empty list of device names 'dc/type/i'"]),
    ({"layers": [0, 1], "data_parallel": 0, "devices": ["a/g/0"]},
     ["stages[0].data_parallel: must be an integer from 1 to 2**31 - 1, got 0"]),
    ({"layers": [0, 1], "data_parallel": -2, "devices": ["a/g/0"]},
     ["stages[0].data_parallel: must be an integer from 1 to 2**31 - 1, got -2"]),
    ({"layers": [0, 1], "data_parallel": 1.5, "devices": ["a/g/0"]},
     ["stages[0].data_parallel: must be an integer from 1 to 2**31 - 1, got 1.5"]),
    ({"layers": [0, 1], "data_parallel": True, "devices": ["a/g/0"]},
     ["stages[0].data_parallel: must be an integer from 1 to 2**31 - 1, got True"]),
    ({"layers": [0, 1], "data_parallel": "2", "devices": ["a/g/0"]},
     ["stages[0].data_parallel: must be an integer from 1 to 2**31 - 1, got '2'"]),
    ({"layers": [0, 1], "data_parallel": 2**31, "devices": ["a/g/0"]},
     ["stages[0].data_parallel: must be an integer from 1 to 2**31 - 1, got 2147483648"]),
    ({"layers": [0, 1], "tensor_parallel": None, "device": "a/g/0"},
     ["stages[0].tensor_parallel: must be an integer from 1 to 2**31 - 1, got None"]),
    ({"layers": [0, 1], "data_parallel": 0, "tensor_parallel": 0, "device": "a/g/0",
      "devices": ["a/g/0"], "pipeline": 2},
     ["stages[0].pipeline: unknown field",
      "stages[0].data_parallel: must be an integer from 1 to 2**31 - 1, got 0",
      "stages[0].tensor_parallel: must be an integer from 1 to 2**31 - 1, got 0",
      "stages[0]: give 'devices' (a list) or 'device' (one name), not both"]),
])
def test_v2_plan_stage_problems_are_named(stage, problems):
    with pytest.raises(InstanceError) as info:
        Plan.from_dict({"stages": [stage]})
    assert info.value.problems == problems


# --------------------------------------------------------------------------- allocation
@hst.composite
def _v2_cluster_and_stages(draw):
    """Random v2 groups (nodes of 1 to 8) and chain-ordered stages ``(a, b, k, g, d, t)`` whose
    device counts fit their groups, each ``t`` within its group's node."""
    K = draw(hst.integers(1, 3))
    sizes = [[(node, node * draw(hst.integers(1, 3)))
              for node in draw(hst.lists(hst.sampled_from([1, 2, 4, 8]), min_size=1, max_size=2))]
             for _ in range(K)]
    L = draw(hst.integers(1, 6))
    S = draw(hst.integers(1, L))
    bounds = [0, *sorted(draw(hst.sets(hst.integers(1, L - 1), min_size=S - 1,
                                      max_size=S - 1))), L] if L > 1 else [0, 1]
    used: dict[tuple[int, int], int] = {}
    stages, k_min = [], 0
    for s in range(S):
        free = [(k, g) for k in range(k_min, K) for g, (_node, count) in enumerate(sizes[k])
                if used.get((k, g), 0) < count]
        assume(free)
        k, g = draw(hst.sampled_from(free))
        node, count = sizes[k][g]
        left = count - used.get((k, g), 0)
        t = draw(hst.sampled_from([t for t in (1, 2, 4, 8) if t <= min(node, left)]))
        d = draw(hst.integers(1, left // t))
        used[(k, g)] = used.get((k, g), 0) + d * t
        k_min = k
        stages.append((bounds[s], bounds[s + 1], k, g, d, t))
    dcs = tuple(
        Datacenter(f"dc{k}", tuple(DeviceGroup(f"g{g}", count, 100.0, 1e12, node,
                                               None if node == 1 else 10.0)
                                   for g, (node, count) in enumerate(sizes[k])), Link(10.0, 0.1))
        for k in range(K))
    parallelism = Parallelism(tuple(sorted({d for *_, d, _t in stages})),
                              tuple(sorted({t for *_, t in stages})), draw(hst.booleans()))
    layers = tuple(Layer(f"l{i}", 10.0, 20.0, 1, 1.0, 1.0) for i in range(L))
    inst = Instance("alloc", Model("m", layers), Training(2, "1f1b", 16.0, parallelism=parallelism),
                    dcs, tuple(Link(5.0, 0.5) for _ in range(K - 1)))
    return inst, stages


@settings(max_examples=300, deadline=None, derandomize=True)
@given(_v2_cluster_and_stages())
def test_from_tuples_packs_tensor_parallel_groups_into_whole_nodes(case):
    inst, stages = case
    p = Plan.from_tuples(inst, stages)
    ev = evaluate(inst, p)
    assert ev.violations == (), (stages, p)
    names = [n for st in p.stages for n in st.devices]
    assert len(names) == len(set(names))
    for st, (_a, _b, k, g, d, t) in zip(p.stages, stages):
        assert (st.data_parallel, st.tensor_parallel, len(st.devices)) == (d, t, d * t)
        node = inst.datacenters[k].devices[g].devices_per_node
        for block in st.tp_groups():
            refs = [inst.locate(n) for n in block]
            assert {(r.dc, r.group) for r in refs} == {(k, g)}
            assert len({r.index // node for r in refs}) == 1  # one node per TP group
