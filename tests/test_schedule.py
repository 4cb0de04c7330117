"""The simulated pipeline schedule obeys the pipeline's rules and the cost model's resources."""

from __future__ import annotations

import dataclasses
import itertools
import json
import random
from pathlib import Path

import pytest

from chainpipe import Plan, evaluate, read
from chainpipe.instance import Parallelism
from chainpipe.schedule import (
    SYNC,
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


def _v2_plans(n, schedule=None):
    """Random instances made version 2 (groups of 4 devices in nodes of 2, widths 1 to 3,
    degrees 1 and 2, ZeRO either way) with a random plan each that uses them; plans may
    break a memory limit (the simulation runs them all the same)."""
    out = []
    rng = random.Random(7)
    seed = 0
    while len(out) < n:
        base = random_instance(900 + seed, max_layers=5)
        seed += 1
        dcs = tuple(dataclasses.replace(dc, devices=tuple(
            dataclasses.replace(g, count=4, devices_per_node=2,
                                node_bandwidth_bytes_per_s=float(rng.choice([5, 50])))
            for g in dc.devices)) for dc in base.datacenters)
        training = dataclasses.replace(
            base.training, schedule=schedule or base.training.schedule,
            parallelism=Parallelism((1, 2, 3), (1, 2), rng.random() < 0.5))
        inst = dataclasses.replace(base, training=training, datacenters=dcs)
        L = inst.num_layers
        cuts = sorted(rng.sample(range(1, L), rng.randint(0, min(L - 1, 3))))
        bounds = [0, *cuts, L]
        groups = sorted((k, g) for k, dc in enumerate(dcs) for g in range(len(dc.devices)))
        picks = sorted(rng.choice(groups) for _ in bounds[1:])
        stages, used = [], {}
        for (a, b), (k, g) in zip(itertools.pairwise(bounds), picks):
            d, t = rng.choice([(1, 1), (2, 1), (3, 1), (1, 2), (2, 2)])
            if used.get((k, g), 0) + d * t > 4:
                d, t = 1, 1
            used[(k, g)] = used.get((k, g), 0) + d * t
            stages.append((a, b, k, g, d, t))
        if max(used.values()) <= 4:
            out.append((inst, Plan.from_tuples(inst, stages)))
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
        fwd, bwd = block_durations(ev.stages)
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


# --------------------------------------------------------------------------- synchronisation
def test_worked_example_v2_syncs_each_stage_after_its_last_backward():
    """The v2 optimum (two stages of d = 2, R = 2.5 each): the cost model adds max R_s after
    the drain; the schedule starts each stage's sync when its last backward ends, so stage
    1's overlaps stage 0's drain and stage 0's ends the iteration."""
    inst = read(DATA / "worked_example_v2.json")
    plan = Plan.from_tuples(inst, [(0, 1, 0, 0, 2, 1), (1, 2, 0, 0, 2, 1)])
    sim = simulate_pipeline(inst, plan)
    assert (sim.iteration_time_s, sim.sync_s) == (pytest.approx(16.0), pytest.approx(2.5))
    stage_rows = [r for r in sim.rows if r.kind == "stage"]
    assert [r.label for r in stage_rows] == ["s0 a/g/0..1 2x1 [0,1)", "s1 a/g/2..3 2x1 [1,2)"]
    for row in stage_rows:
        *work, sync = sorted(row.blocks, key=lambda b: b.start)
        assert (sync.op, sync.microbatch, sync.duration) == (SYNC, -1, pytest.approx(2.5))
        assert sync.start == pytest.approx(max(b.end for b in work))
        assert all(b.op != SYNC for b in work)
    drain = max(b.end for r in stage_rows for b in r.blocks if b.op != SYNC)
    assert sim.makespan_s == pytest.approx(drain + 2.5)
    assert sim.makespan_s == pytest.approx(gpipe_makespan(inst, plan), rel=1e-12)
    assert sim.to_dict()["sync_s"] == pytest.approx(2.5)
    assert ("S", -1) in {(row[3], row[4]) for row in sim.csv_rows()[1]}


def test_version_1_plans_have_no_sync_blocks_and_keep_their_labels():
    inst = read(DATA / "worked_example.json")
    plan = Plan.from_dict(json.loads((DATA / "worked_example.plan.json").read_text()))
    sim = simulate_pipeline(inst, plan)
    assert sim.sync_s == 0.0
    assert all(b.op != SYNC for r in sim.rows for b in r.blocks)
    assert [r.label for r in sim.rows if r.kind == "stage"] == ["s0 a/g/0 [0,1)",
                                                                  "s1 a/g/1 [1,3)"]


def test_v2_schedules_sync_after_the_drain_of_each_stage_and_stay_within_T_terms():
    """On random v2 plans: each stage with d > 1 has one sync block of its R_s from the end of
    its last backward; the makespan counts them, and no schedule beats the pipeline's round
    trip plus stage 0's sync (stage 0 is the last to finish its backwards), nor exceeds the
    pipeline alone plus max R_s; with one microbatch that is T exactly when stage 0's sync is
    the longest."""
    seen_sync = 0
    for inst, plan in _v2_plans(40):
        ev = evaluate(inst, plan)
        sim = simulate_pipeline(inst, plan)
        rows = [r for r in sim.rows if r.kind == "stage"]
        ends = []
        for st, row in zip(ev.stages, rows):
            syncs = [b for b in row.blocks if b.op == SYNC]
            work = [b for b in row.blocks if b.op != SYNC]
            assert len(work) == 2 * inst.microbatches
            last = max(b.end for b in work)
            if st.sync_time_s > 0:
                seen_sync += 1
                assert len(syncs) == 1 and syncs[0].start == pytest.approx(last)
                assert syncs[0].duration == pytest.approx(st.sync_time_s)
            else:
                assert syncs == []
            ends.append(last)
        pipeline = max(ends)
        assert ends[0] == pytest.approx(pipeline)
        assert sim.makespan_s == pytest.approx(max(e + st.sync_time_s
                                                   for e, st in zip(ends, ev.stages)))
        assert sim.makespan_s >= (ev.fill_drain_s + ev.stages[0].sync_time_s) * (1 - 1e-9)
        assert sim.makespan_s <= (pipeline + ev.sync_s) * (1 + 1e-9)
        if inst.microbatches == 1:
            assert sim.makespan_s <= ev.iteration_time_s * (1 + 1e-9)
            if ev.stages[0].sync_time_s == ev.sync_s:
                assert sim.makespan_s == pytest.approx(ev.iteration_time_s)
    assert seen_sync > 20


def test_gpipe_closed_form_holds_with_synchronisation():
    """GPipe's makespan is max_s (end of stage s's backwards + R_s), in closed form; T, which
    adds max R_s after the whole drain, exceeds it by at most max R_s - R_0."""
    for inst, plan in _v2_plans(30, schedule="gpipe"):
        ev = evaluate(inst, plan)
        sim = simulate_pipeline(inst, plan)
        assert sim.makespan_s == pytest.approx(gpipe_makespan(inst, plan, ev), rel=1e-9)
        slack = ev.sync_s - ev.stages[0].sync_time_s
        assert sim.iteration_time_s <= (sim.makespan_s + slack) * (1 + 1e-9)
