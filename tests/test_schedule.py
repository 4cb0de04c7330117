"""The simulated pipeline schedule obeys the pipeline's rules and the cost model's resources."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from chainpipe import Plan, evaluate, read
from chainpipe.schedule import (
    block_durations,
    gpipe_makespan,
    one_f_one_b_cycle,
    simulate_pipeline,
    stage_order,
)
from helpers import brute_force, random_instance

DATA = Path(__file__).resolve().parent / "data" / "valid"


def _plans(n):
    """Optimal plans of random instances with at least one feasible plan."""
    out = []
    seed = 0
    while len(out) < n:
        inst = random_instance(500 + seed, max_layers=5)
        seed += 1
        _T, plan = brute_force(inst)
        if plan is not None:
            out.append((inst, plan))
    return out


def test_worked_example_simulates_to_the_cost_model_time():
    inst = read(DATA / "worked_example.json")
    plan = Plan.from_dict(json.loads((DATA / "worked_example.plan.json").read_text()))
    sim = simulate_pipeline(inst, plan)
    assert sim.iteration_time_s == pytest.approx(32.0)
    # one DC, stage 1 the bottleneck for forward and backward: the simulation is exact
    assert sim.makespan_s == pytest.approx(32.0)
    assert [r.kind for r in sim.rows] == ["stage", "link", "stage"]


@pytest.mark.parametrize("schedule", ["1f1b", "gpipe"])
def test_stage_order_runs_every_block_once(schedule):
    for S in range(1, 6):
        for M in (1, 2, 3, 8):
            for s in range(S):
                order = stage_order(schedule, S, s, M)
                assert sorted(order) == sorted([("F", m) for m in range(M)] +
                                               [("B", m) for m in range(M)])
                assert all(order.index(("F", m)) < order.index(("B", m)) for m in range(M))
                if schedule == "1f1b":  # never more than S - s activations stashed
                    live = peak = 0
                    for op, _ in order:
                        live += 1 if op == "F" else -1
                        peak = max(peak, live)
                    assert peak == min(M, S - s)


def test_simulated_schedule_respects_dependencies_and_resources():
    for inst, plan in _plans(25):
        ev = evaluate(inst, plan)
        sim = simulate_pipeline(inst, plan)
        S, M = plan.num_stages, inst.microbatches
        stage_rows = [r for r in sim.rows if r.kind == "stage"]
        link_rows = [r for r in sim.rows if r.kind == "link"]
        assert len(stage_rows) == S and len(link_rows) == S - 1
        end = {}
        for s, row in enumerate(stage_rows):
            blocks = sorted(row.blocks, key=lambda b: b.start)
            assert len(blocks) == 2 * M
            for a, b in itertools.pairwise(blocks):  # a device runs one block at a time
                assert b.start >= a.start + a.duration - 1e-9
            part = inst.layers[plan.stages[s].start:plan.stages[s].end]
            fwd, bwd = sum(ly.fwd_flop for ly in part), sum(ly.bwd_flop for ly in part)
            rate = inst.group(inst.locate(plan.stages[s].device)).flop_per_s
            for b in blocks:
                end[(s, b.op, b.microbatch)] = b.start + b.duration
                if fwd + bwd > 0:  # forward and backward blocks take their own FLOP's time
                    assert b.duration == pytest.approx((fwd if b.op == "F" else bwd) / rate)
        for s, row in enumerate(link_rows):
            bd = ev.boundaries[s]
            for b in row.blocks:
                assert b.duration == pytest.approx(bd.occupancy_s)
                src = (s, "F", b.microbatch) if b.op == "F" else (s + 1, "B", b.microbatch)
                assert b.start >= end[src] - 1e-9
            for direction in "FB":
                bl = sorted((b for b in row.blocks if b.op == direction), key=lambda b: b.start)
                assert len(bl) == M
                for a, b in itertools.pairwise(bl):  # one transfer at a time per direction
                    assert b.start >= a.start + a.duration - 1e-9
        starts = {(s, b.op, b.microbatch): b.start
                  for s, row in enumerate(stage_rows) for b in row.blocks}
        for m in range(M):
            for s in range(1, S):
                bd = ev.boundaries[s - 1]
                assert starts[(s, "F", m)] >= end[(s - 1, "F", m)] + bd.occupancy_s \
                    + bd.latency_s - 1e-9
                assert starts[(s - 1, "B", m)] >= end[(s, "B", m)] + bd.occupancy_s \
                    + bd.latency_s - 1e-9
        # no schedule beats one microbatch's round trip, nor the busiest device's work
        assert sim.makespan_s >= ev.fill_drain_s * (1 - 1e-9)
        assert sim.makespan_s >= M * max(st.compute_time_s for st in ev.stages) * (1 - 1e-9)
        if M == 1:  # a single microbatch: the simulation is the cost model exactly
            assert sim.makespan_s == pytest.approx(ev.iteration_time_s)


def _with(inst, schedule, microbatches=None):
    import dataclasses

    training = dataclasses.replace(inst.training, schedule=schedule,
                                   microbatches=microbatches or inst.microbatches)
    return dataclasses.replace(inst, training=training)


def test_gpipe_makespan_is_the_flow_shop_closed_form_and_never_below_T():
    """GPipe runs every forward, then every backward: two flow shops of identical jobs."""
    for inst, plan in _plans(25):
        inst = _with(inst, "gpipe")
        ev = evaluate(inst, plan)
        sim = simulate_pipeline(inst, plan)
        fwd, bwd = block_durations(inst, plan, ev)
        u = max((b.occupancy_s for b in ev.boundaries), default=0.0)
        closed = ev.fill_drain_s + (inst.microbatches - 1) * (max(max(fwd), u) +
                                                              max(max(bwd), u))
        assert sim.makespan_s == pytest.approx(closed, rel=1e-9)
        assert gpipe_makespan(inst, plan) == pytest.approx(closed, rel=1e-12)
        assert sim.iteration_time_s <= sim.makespan_s * (1 + 1e-9)


def _loop(ev, s, t):
    return sum(st.compute_time_s for st in ev.stages[s:t + 1]) + \
        sum(b.traversal_s for b in ev.boundaries[s:t])


def test_1f1b_stash_limit_loops_bound_the_simulated_makespan():
    """Stage s starts forward i + n_s only after backward i: around stages s..t a loop of
    length W(s, t) lets t - s + 1 microbatches through, so the makespan is at least
    (floor((M - 1 - n_s) / (t - s + 1)) + 2) W(s, t); the 1F1B cycle is the largest loop."""
    checked = 0
    for inst, plan in _plans(30):
        for M in (3, 8, 20):
            inst = _with(inst, "1f1b", M)
            ev = evaluate(inst, plan)
            sim = simulate_pipeline(inst, plan)
            S = plan.num_stages
            for s in range(S):
                n_s = S - s
                if n_s > M - 1:
                    continue
                for t in range(s, S):
                    w = t - s + 1
                    bound = ((M - 1 - n_s) // w + 2) * _loop(ev, s, t)
                    assert sim.makespan_s >= bound * (1 - 1e-9)
                    checked += 1
            # the cycle counts every loop above and the busiest resource
            cycle = one_f_one_b_cycle(ev, M)
            assert cycle >= ev.bottleneck_s * (1 - 1e-12)
            for s in range(S):
                if S - s <= M - 1:
                    assert cycle >= _loop(ev, s, S - 1) / (S - s) * (1 - 1e-12)
    assert checked > 100
