"""The simulated schedule under contract version 3 (issue 30, item 4).

Blocks take the cost model's ``f_s`` and ``b_s``; several pipelines run side by
side and then average across DCs (``R_X / H``); the ``period`` objective's ``T`` is
never below the simulated makespan under 1F1B and is GPipe's exact closed form;
the worked examples of ``docs/model.md`` (version 3) simulate as stated; ``plot``
draws and ``export --to ranks`` writes plans of several pipelines.

Under 1F1B the period is an upper bound on the brute-force optima of every
pipeline count, not on every plan: a stage's warm-up forwards can queue on a slow
link ahead of its first backward, which the fill ``sum C + sum Q`` does not count
(:func:`test_the_1f1b_period_misses_warm_up_forwards_queued_on_a_slow_link`;
``docs/schedule.md``).
"""

from __future__ import annotations

import dataclasses
import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from chainpipe import (
    Datacenter,
    DeviceGroup,
    Instance,
    Layer,
    Link,
    Model,
    Plan,
    Training,
    evaluate,
    read,
)
from chainpipe.instance import Parallelism
from chainpipe.schedule import CROSS_SYNC, SYNC, gpipe_makespan, simulate_pipeline
from helpers import _v3_configurations, brute_force_v3, plan_of_spec, random_v3_instance

DATA = Path(__file__).resolve().parent / "data" / "valid"
RTOL = 1e-9


def _with(inst: Instance, **training) -> Instance:
    return dataclasses.replace(inst, training=dataclasses.replace(inst.training, **training))


def _v3_plans(n_seeds: int = 60):
    """``(instance, plan, optimal)``: each allowed pipeline count's brute-force optimum of
    random v3 instances (``optimal``), and a few random one-pipeline placements of each
    (memory not checked: the simulation runs any plan), every instance under ``period``
    with both schedules."""
    rng = random.Random(3)
    out = []
    for seed in range(n_seeds):
        base = random_v3_instance(seed)
        for schedule in ("1f1b", "gpipe"):
            inst = _with(base, objective="period", schedule=schedule)
            for _P, (_T, spec) in brute_force_v3(inst).items():
                if spec is not None:
                    out.append((inst, plan_of_spec(inst, spec), True))
            if 1 in inst.parallelism.pipelines:
                configs = _v3_configurations(inst)
                for stages in rng.sample(configs, min(3, len(configs))):
                    out.append((inst, Plan.from_tuples(inst, stages), False))
    return out


PLANS = _v3_plans()


def test_the_random_plans_cover_several_pipelines_loops_and_both_schedules():
    several = [1 for inst, plan, _opt in PLANS if plan.num_pipelines > 1]
    loops = [1 for inst, plan, _opt in PLANS
             if any(p.paced_by == "loop" for p in evaluate(inst, plan).pipelines)]
    gpipe = [1 for inst, _plan, _opt in PLANS if inst.training.schedule == "gpipe"]
    assert len(PLANS) >= 300 and len(several) >= 30 and len(loops) >= 30 and len(gpipe) >= 100


def _tp_instance(schedule: str = "gpipe") -> tuple[Instance, Plan]:
    """One DC, nodes of 2 devices; a layer heavy backward with tensor-parallel all-reduces:
    its forward and backward blocks are not its FLOP shares of ``C_s``."""
    layers = (Layer("l0", 100.0, 300.0, 0, 0.0, 10.0, 40.0),
              Layer("l1", 200.0, 100.0, 0, 0.0, 10.0, 40.0))
    group = DeviceGroup("g", 4, 100.0, 1e9, 2, 10.0)
    training = Training(4, schedule, 16.0, parallelism=Parallelism((1,), (1, 2)),
                        objective="period")
    inst = Instance("tp", Model("m", layers), training,
                    (Datacenter("a", (group,), Link(10.0, 0.25)),), ())
    return inst, Plan.from_tuples(inst, [(0, 1, 0, 0, 1, 2), (1, 2, 0, 0, 1, 2)])


def test_blocks_take_the_cost_models_forward_and_backward_times():
    inst, plan = _tp_instance()
    ev = evaluate(inst, plan)
    sim = simulate_pipeline(inst, plan)
    for st, row in zip(ev.stages, (r for r in sim.rows if r.kind == "stage")):
        assert {b.duration for b in row.blocks if b.op == "F"} == {st.forward_time_s}
        assert {b.duration for b in row.blocks if b.op == "B"} == {st.backward_time_s}
    # stage 0: f = 100 / 200 + 1/2 * 40 / 10 = 2.5, b = 300 / 200 + 2 = 3.5 (the FLOP
    # shares of C = 6 would be 1.5 and 4.5)
    assert ev.stages[0].forward_time_s == pytest.approx(2.5)
    assert ev.stages[0].backward_time_s == pytest.approx(3.5)
    assert sim.makespan_s == pytest.approx(ev.iteration_time_s, rel=RTOL)


@pytest.mark.parametrize("i", range(len(PLANS)))
def test_period_is_never_below_the_simulation_and_is_gpipes_closed_form(i):
    """GPipe: every plan, exactly. 1F1B: the optima (see the module doc for other plans)."""
    inst, plan, optimal = PLANS[i]
    bounded = optimal or inst.training.schedule == "gpipe"
    ev = evaluate(inst, plan)
    sim = simulate_pipeline(inst, plan)
    assert sim.num_pipelines == plan.num_pipelines
    assert sim.iteration_time_s == ev.iteration_time_s
    # each pipeline: its makespan is at most T_p plus its slowest stage's R_s
    for pipe, end in zip(ev.pipelines, sim.pipeline_makespans_s):
        sync = max(st.sync_time_s for st in pipe.stages)
        assert end <= (pipe.time_s + sync) * (1 + RTOL) or not bounded
        if inst.training.schedule == "gpipe":  # T_p is the flow shops' exact length
            rows = [r for r in sim.rows if r.pipeline == pipe.index and r.kind == "stage"]
            compute_end = max(b.end for r in rows for b in r.blocks if b.op != SYNC)
            assert compute_end == pytest.approx(pipe.time_s, rel=RTOL)
    cross = ev.cross_sync_s / ev.cross_sync_period if plan.num_pipelines > 1 else 0.0
    assert sim.makespan_s == pytest.approx(max(sim.pipeline_makespans_s) + cross, rel=RTOL)
    assert sim.iteration_time_s >= sim.makespan_s * (1 - RTOL) or not bounded
    if inst.training.schedule == "gpipe":
        assert gpipe_makespan(inst, plan, ev) == pytest.approx(sim.makespan_s, rel=RTOL)


@pytest.mark.parametrize("i", range(0, len(PLANS), 7))
def test_each_pipeline_simulates_as_a_plan_of_its_own(i):
    """A pipeline of a plan of several runs exactly as the one-pipeline plan of its stages
    on an instance of its ``M_p`` microbatches."""
    inst, plan, _optimal = PLANS[i]
    sim = simulate_pipeline(inst, plan)
    for p, pipe in enumerate(plan.pipelines):
        m = pipe.microbatches or inst.microbatches
        alone = _with(inst, microbatches=m, parallelism=dataclasses.replace(
            inst.parallelism, pipelines=(1,)))
        own = simulate_pipeline(alone, Plan(pipe.stages))
        assert own.makespan_s == pytest.approx(sim.pipeline_makespans_s[p], rel=RTOL)
        mine = [r for r in sim.rows if r.pipeline == p]
        assert [len(r.blocks) for r in mine] == [len(r.blocks) for r in own.rows]


def test_rows_of_several_pipelines_and_the_averaging_across_dcs():
    inst = read(DATA / "worked_example_v3_pipelines.json")
    plan = Plan.from_dict(json.loads((DATA / "worked_example_v3_pipelines.plan.json").read_text()))
    sim = simulate_pipeline(inst, plan)
    assert [(r.label, r.kind, r.pipeline) for r in sim.rows] == [
        ("p0 s0 a/g/0 [0,1)", "stage", 0), ("p1 s0 b/g/0 [0,1)", "stage", 1),
        ("across DCs: link a-b (R_X / H)", "cross", -1)]
    (block,) = sim.rows[-1].blocks
    assert (block.start, block.duration, block.op) == (6.0, 3.0, CROSS_SYNC)
    data = sim.to_dict()
    assert data["pipelines"] == [{"microbatches": 2, "makespan_s": 6.0},
                                 {"microbatches": 2, "makespan_s": 6.0}]
    assert data["cross_sync_s"] == 3.0 and data["objective"] == "period"


def test_the_1f1b_period_misses_warm_up_forwards_queued_on_a_slow_link():
    """Three stages, ``f = b = 1`` each, the first boundary's link busy ``U = 10`` per
    microbatch, ``M = 4``. The period is the loop s0..s1, ``(2 + 20 + 2) / 2 = 12``, and
    ``T = 26 + 3 x 12 = 62``. But stage 1 runs its warm-up forward of microbatch 1 before
    its first backward, and that activation queues 10 s behind microbatch 0's on the link:
    the first round trip ends 8 s late, and the schedule takes 68 s."""
    layers = tuple(Layer(f"l{i}", 100.0, 100.0, 0, 0.0, 100.0 if i == 0 else 0.0)
                   for i in range(3))
    training = Training(4, "1f1b", 16.0, objective="period")
    inst = Instance("warm-up", Model("m", layers), training,
                    (Datacenter("a", (DeviceGroup("g", 1, 100.0, 1e9),), Link(1e9, 0.0)),
                     Datacenter("b", (DeviceGroup("g", 2, 100.0, 1e9),), Link(1e9, 0.0))),
                    (Link(10.0, 0.0),))
    plan = Plan.from_tuples(inst, [(0, 1, 0, 0), (1, 2, 1, 0), (2, 3, 1, 0)])
    ev = evaluate(inst, plan)
    assert (ev.fill_drain_s, ev.bottleneck_s, ev.iteration_time_s) == (26.0, 12.0, 62.0)
    assert ev.pipelines[0].paced_by == "loop"
    sim = simulate_pipeline(inst, plan)
    s1 = [b for b in sim.rows[2].blocks]
    assert [(b.op, b.microbatch, b.start) for b in s1[:3]] == [("F", 0, 11.0), ("F", 1, 21.0),
                                                                ("B", 0, 22.0)]
    assert sim.makespan_s == 68.0


# --------------------------------------------------------------------------- worked examples
def _example(name: str, plan: str = "plan") -> tuple[Instance, Plan]:
    inst = read(DATA / f"worked_example_v3_{name}.json")
    return inst, Plan.from_dict(json.loads(
        (DATA / f"worked_example_v3_{name}.{plan}.json").read_text()))


def test_worked_example_1f1b_simulates_below_its_period_and_above_classic():
    """Two stages, n_0 = 2 < M = 4: the loop of 12 s lets 2 microbatches through, 6 s each.
    The schedule takes 27 s: below T = 30 (1F1B's warm-up hides part of the first round
    trip), above the classic 21 the two stages would be credited with."""
    inst, plan = _example("1f1b")
    sim = simulate_pipeline(inst, plan)
    assert sim.iteration_time_s == pytest.approx(30.0)
    assert sim.makespan_s == pytest.approx(27.0)
    classic = simulate_pipeline(_with(inst, objective="classic"), plan)
    assert classic.iteration_time_s == pytest.approx(21.0)
    assert classic.makespan_s == pytest.approx(27.0)
    one_inst, one = _example("1f1b", "one_stage.plan")
    assert simulate_pipeline(one_inst, one).makespan_s == pytest.approx(24.0)


def test_worked_example_gpipe_simulates_to_its_period():
    inst, plan = _example("gpipe")
    sim = simulate_pipeline(inst, plan)
    assert sim.iteration_time_s == pytest.approx(21.0)
    assert sim.makespan_s == pytest.approx(21.0)
    assert evaluate(_with(inst, objective="classic"), plan).iteration_time_s == pytest.approx(18.0)
    one_inst, one = _example("gpipe", "one_stage.plan")
    assert simulate_pipeline(one_inst, one).makespan_s == pytest.approx(24.0)


@pytest.mark.parametrize(("H", "T"), [(1, 9.0), (3, 7.0)])
def test_worked_example_two_pipelines_simulate_to_T(H, T):
    inst, plan = _example("pipelines")
    sim = simulate_pipeline(_with(inst, pipeline_sync_period=H), plan)
    assert sim.pipeline_makespans_s == (6.0, 6.0)
    assert sim.iteration_time_s == pytest.approx(T)
    assert sim.makespan_s == pytest.approx(T)
    uneven_inst, uneven = _example("pipelines", "uneven.plan")
    sim = simulate_pipeline(uneven_inst, uneven)
    assert sim.pipeline_makespans_s == (9.0, 3.0)
    assert sim.makespan_s == pytest.approx(12.0)


# --------------------------------------------------------------------------- plot and export
def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "chainpipe", *args], capture_output=True,
                          text=True, timeout=300)


def test_plot_draws_a_plan_of_several_pipelines(tmp_path):
    out, data = tmp_path / "g.png", tmp_path / "g.json"
    r = _cli("plot", str(DATA / "worked_example_v3_pipelines.json"),
             str(DATA / "worked_example_v3_pipelines.plan.json"), "-o", str(out),
             "--data", str(data))
    assert r.returncode == 0, r.stderr
    assert "2 pipelines (2 + 2 microbatches)" in r.stdout
    assert "averaging across DCs R_X / H = 3 s included" in r.stdout
    assert out.stat().st_size > 1000
    rows = json.loads(data.read_text())["rows"]
    assert [r["kind"] for r in rows] == ["stage", "stage", "cross"]


def test_export_ranks_numbers_every_pipeline_and_frameworks_refuse_in_one_line():
    inst, plan = str(DATA / "worked_example_v3_pipelines.json"), \
        str(DATA / "worked_example_v3_pipelines.plan.json")
    r = _cli("export", inst, plan, "--to", "ranks")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert [(x["rank"], x["device"], x["pipeline"], x["stage"]) for x in doc["ranks"]] == [
        (0, "a/g/0", 0, 0), (1, "b/g/0", 1, 0)]
    assert doc["pipelines"] == [{"pipeline": 0, "microbatches": 2, "stages": 1},
                                {"pipeline": 1, "microbatches": 2, "stages": 1}]
    for fmt in ("megatron", "torchtitan"):
        r = _cli("export", inst, plan, "--to", fmt, "--microbatch-size", "2")
        lines = [x for x in r.stderr.splitlines() if not x.startswith("warning:")]
        assert r.returncode == 1 and r.stdout == ""
        assert lines == [f"chainpipe export: {fmt} launches one pipeline per job, and this plan "
                         f"runs 2 (2+2 microbatches) averaging gradients across DCs: export "
                         f"--to ranks writes every pipeline's ranks"]
