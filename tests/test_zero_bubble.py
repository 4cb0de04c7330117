"""Zero-bubble schedules (ZB-H1, ZB-H2) replayed as what-ifs on any plan: the published
closed forms at equal stages, memory peaks, lower bounds and the ``evaluate --schedules``
and ``plot --schedule`` commands."""

from __future__ import annotations

import dataclasses
import itertools
import json
import random
from pathlib import Path

import pytest

from chainpipe import Plan, evaluate, read
from chainpipe.cli import main
from chainpipe.instance import Datacenter, DeviceGroup, Instance, Layer, Link, Model, Training
from chainpipe.schedule import (
    SCHEDULES,
    WEIGHT,
    activation_peak,
    simulate_pipeline,
    simulate_schedules,
    stage_order,
)
from helpers import brute_force_v3, plan_of_spec, random_instance, random_v3_instance

DATA = Path(__file__).resolve().parent / "data" / "valid"


def equal_stages(S: int, M: int, f: float, b: float, *, memory: float = 1e9,
                 latency: float = 0.0, output: float = 0.0) -> tuple[Instance, Plan]:
    """``S`` equal stages of one layer each (forward ``f``, backward ``b`` seconds) on one DC,
    no communication unless ``latency``/``output`` say so."""
    layers = tuple(Layer(f"l{i}", f * 100.0, b * 100.0, 10, 1.0, output) for i in range(S))
    inst = Instance("equal", Model("m", layers), Training(M, "1f1b", 1.0),
                    (Datacenter("a", (DeviceGroup("g", S, 100.0, memory),),
                                Link(1e9 if not output else 10.0, latency)),), ())
    return inst, Plan.from_tuples(inst, [(i, i + 1, 0, 0) for i in range(S)])


def random_plans(n: int, seed: int = 0) -> list[tuple[Instance, Plan]]:
    """Random one-pipeline plans (cuts and groups at random, one device per stage) of random
    instances with links, latencies and both schedules; some break a memory limit."""
    rng = random.Random(seed)
    out, k = [], 0
    while len(out) < n:
        inst = random_instance(4000 + seed * 1000 + k, max_layers=6, max_count=3,
                               microbatches=rng.choice([1, 2, 3, 5, 8, 12]))
        k += 1
        L = inst.num_layers
        cuts = sorted(rng.sample(range(1, L), rng.randint(0, L - 1)))
        bounds = [0, *cuts, L]
        groups = [(dc, g) for dc, d in enumerate(inst.datacenters)
                  for g, grp in enumerate(d.devices) for _ in range(grp.count)]
        if len(groups) < len(bounds) - 1:
            continue
        picks = sorted(rng.sample(groups, len(bounds) - 1))
        out.append((inst, Plan.from_tuples(inst, [(a, b, dc, g) for (a, b), (dc, g)
                                                   in zip(itertools.pairwise(bounds), picks)])))
    return out


# --------------------------------------------------------------------------- orders
@pytest.mark.parametrize("schedule", ["zb-h1", "zb-h2"])
def test_zero_bubble_orders_run_f_b_w_once_each_w_after_its_b(schedule):
    for S, M in [(1, 1), (3, 2), (4, 4), (4, 9), (6, 3)]:
        for s in range(S):
            order = stage_order(schedule, S, s, M)
            for op in ("F", "B", WEIGHT):
                assert sorted(m for o, m in order if o == op) == list(range(M))
            pos = {block: i for i, block in enumerate(order)}
            assert all(pos[("F", m)] < pos[("B", m)] < pos[(WEIGHT, m)] for m in range(M))
            k = 1 if schedule == "zb-h1" else 2
            leading = next(i for i, (o, _) in enumerate(order) if o != "F")
            assert leading == min(k * (S - 1 - s) + 1, M)  # warm-up, then one more F
            # the held-back W: as many as the schedule says, at the end
            held = min(k * s, M)
            assert [o for o, _ in order[len(order) - held:]] == [WEIGHT] * held


# --------------------------------------------------------------------------- closed forms
def test_zb_h1_equal_stages_makespan_is_the_published_formula():
    """``M (f + b + w) + (S - 1) max(f + b - w, f, b)`` for ``M >= S``, no communication."""
    rng = random.Random(3)
    for _ in range(60):
        S = rng.randint(2, 6)
        M = rng.randint(S, 3 * S)
        f, b, share = rng.choice([0.5, 1, 2, 3]), rng.choice([1, 2, 3, 4]), \
            rng.choice([0.1, 0.25, 0.5, 0.75, 0.9])
        inst, plan = equal_stages(S, M, f, b)
        B, W = b * (1 - share), b * share
        sim = simulate_pipeline(inst, plan, schedule="zb-h1", weight_share=share)
        assert sim.makespan_s == pytest.approx(M * (f + B + W) + (S - 1) * max(f + B - W, f, B),
                                               rel=1e-12)


def test_published_bubbles_at_zero_communication():
    """1F1B's bubble ``(p - 1)(T_F + T_B + T_W)``; ZB-H1's ``(p - 1)(T_F + T_B - T_W)`` when
    ``T_W <= min(T_F, T_B)``; ZB-H2's ``(p - 1)(T_F + T_B - 2 T_W)`` when ``2 T_W <=
    min(T_F, T_B)`` and ``M >= 2p - 1`` (below that the last stage's fill ``(p - 1) T_F``
    is a bubble no order removes)."""
    rng = random.Random(5)
    checked = {"1f1b": 0, "zb-h1": 0, "zb-h2": 0}
    for _ in range(200):
        p = rng.randint(2, 6)
        M = rng.randint(2 * p - 1, 4 * p)
        f, b, share = rng.uniform(0.2, 3), rng.uniform(0.2, 4), rng.uniform(0.05, 0.95)
        B, W = b * (1 - share), b * share
        inst, plan = equal_stages(p, M, f, b)
        work = M * (f + B + W)
        bubbles = {"1f1b": (p - 1) * (f + B + W)}
        if W <= min(f, B):
            bubbles["zb-h1"] = (p - 1) * (f + B - W)
        if 2 * W <= min(f, B):
            bubbles["zb-h2"] = (p - 1) * (f + B - 2 * W)
        for name, bubble in bubbles.items():
            sim = simulate_pipeline(inst, plan, schedule=name, weight_share=share)
            assert sim.makespan_s - work == pytest.approx(bubble, rel=1e-9, abs=1e-9), name
            checked[name] += 1
    assert min(checked.values()) >= 20


def test_zb_h2_cannot_beat_the_last_stage_fill():
    """With ``T_F = T_B = T_W`` the published ZB-H2 bubble is 0, but the last stage starts
    ``(p - 1) T_F`` late and has ``3 M`` of work: the replay takes exactly that."""
    inst, plan = equal_stages(4, 8, 1.0, 2.0)
    sim = simulate_pipeline(inst, plan, schedule="zb-h2", weight_share=0.5)
    assert sim.makespan_s == 3 * 8 + 3 * 1.0 == sim.lower_bound_s


# --------------------------------------------------------------------------- memory
def test_memory_peaks_follow_the_papers_table():
    """Stage ``i`` (from 1) of ``p``: ZB-H1 ``(p - i + 1) M_B + (i - 1) M_W``, ZB-H2
    ``(2p - 2i + 1) M_B + (2i - 2) M_W``, 1F1B ``(p - i + 1) M_B``, GPipe ``M M_B``."""
    for p, M, mw in [(4, 8, 32 / 34), (5, 12, 0.5), (3, 5, 1.0), (6, 11, 0.25)]:
        inst, plan = equal_stages(p, M, 1.0, 2.0)
        sims = {s.schedule: s for s in simulate_schedules(inst, plan, weight_memory_share=mw)}
        for i in range(1, p + 1):
            peaks = {name: sims[name].memory[i - 1].peak_in_flight for name in SCHEDULES}
            assert peaks["zb-h1"] == pytest.approx((p - i + 1) + (i - 1) * mw)
            assert peaks["zb-h2"] == pytest.approx((2 * p - 2 * i + 1) + (2 * i - 2) * mw)
            assert peaks["1f1b"] == p - i + 1 and peaks["gpipe"] == M


def test_memory_of_the_instances_own_schedule_is_the_memory_rule():
    for inst, plan in random_plans(40, seed=1):
        ev = evaluate(inst, plan)
        sim = simulate_pipeline(inst, plan)
        assert [m.memory_bytes for m in sim.memory] == \
            pytest.approx([st.memory_bytes for st in ev.stages], rel=1e-12)
        assert sim.fits == all(not v.startswith("stages[") or "needs" not in v
                               for v in ev.violations)


def test_a_plan_that_fits_1f1b_may_not_fit_zb_h2():
    """Memory for exactly 4 stashed microbatches (10 bytes of parameters + 4 x 1 byte):
    1F1B and ZB-H1 (at most 4 units on stage 0, ``3 + 32/34`` on stage 1) fit; ZB-H2 holds
    7 units on stage 0 (and ``1 + 6 x 32/34`` on the last) and GPipe 8: neither fits."""
    inst, plan = equal_stages(4, 8, 1.0, 2.0, memory=14.0)
    sims = {s.schedule: s for s in simulate_schedules(inst, plan)}
    assert sims["1f1b"].fits and sims["zb-h1"].fits
    assert not sims["zb-h2"].fits and not sims["gpipe"].fits
    assert [m.fits for m in sims["zb-h2"].memory] == [False] * 4
    assert activation_peak(stage_order("zb-h2", 4, 0, 8), 32 / 34) == 7.0


# --------------------------------------------------------------------------- bounds, rules
@pytest.mark.parametrize("schedule", SCHEDULES)
def test_lower_bounds_are_never_above_the_replay(schedule):
    plans = random_plans(80, seed=2)
    for k in range(25):  # optimal plans with 1F1B loops and several pipelines (contract v3)
        inst = random_v3_instance(k)
        for _T, spec in brute_force_v3(inst).values():
            if spec is not None:
                plans.append((inst, plan_of_spec(inst, spec)))
    tight = 0
    for inst, plan in plans:
        for share in (0.2, 0.5, 0.8):
            sim = simulate_pipeline(inst, plan, schedule=schedule, weight_share=share)
            assert sim.lower_bound_s <= sim.makespan_s * (1 + 1e-12) + 1e-12
            tight += sim.lower_bound_s >= sim.makespan_s * (1 - 1e-9)
    assert tight > 0  # the bound is attained somewhere, not a trivial 0


def test_zero_bubble_replay_keeps_dependencies_and_work():
    for inst, plan in random_plans(30, seed=3):
        ev = evaluate(inst, plan)
        for name in ("zb-h1", "zb-h2"):
            sim = simulate_pipeline(inst, plan, schedule=name, weight_share=0.3)
            stages = [r for r in sim.rows if r.kind == "stage"]
            for s, row in enumerate(stages):
                ends = {(b.op, b.microbatch): b for b in row.blocks}
                for m in range(inst.microbatches):
                    assert ends[(WEIGHT, m)].start >= ends[("B", m)].end - 1e-12
                    assert ends[("B", m)].start >= ends[("F", m)].end - 1e-12
                busy = sum(b.duration for b in row.blocks if b.op in ("F", "B", WEIGHT))
                assert busy == pytest.approx(inst.microbatches * ev.stages[s].compute_time_s)
                blocks = sorted(row.blocks, key=lambda b: b.start)
                assert all(x.end <= y.start + 1e-12 for x, y in itertools.pairwise(blocks))
            assert sim.makespan_s > 0


def test_zero_bubble_never_slower_than_1f1b_at_equal_stages():
    for S, M, b in [(2, 4, 2.0), (4, 8, 2.0), (6, 12, 3.0)]:
        inst, plan = equal_stages(S, M, 1.0, b, latency=0.5, output=5.0)
        t = {s.schedule: s.makespan_s for s in simulate_schedules(inst, plan)}
        assert t["zb-h2"] <= t["zb-h1"] < t["1f1b"]


def test_unknown_schedule_and_bad_shares_are_refused():
    inst, plan = equal_stages(2, 2, 1.0, 2.0)
    with pytest.raises(ValueError, match="unknown schedule"):
        simulate_pipeline(inst, plan, schedule="zb-v")
    with pytest.raises(ValueError, match="weight_share"):
        simulate_pipeline(inst, plan, schedule="zb-h1", weight_share=1.5)


# --------------------------------------------------------------------------- commands
def _files(tmp_path):
    inst, plan = equal_stages(4, 8, 1.0, 2.0, memory=14.0)
    from chainpipe.io import write, write_plan

    write(inst, tmp_path / "i.json")
    write_plan(plan, tmp_path / "p.json", inst)
    return tmp_path / "i.json", tmp_path / "p.json"


def test_evaluate_schedules_all_reports_each_schedule(tmp_path, capsys):
    i, p = _files(tmp_path)
    assert main(["evaluate", str(i), str(p), "--schedules", "all", "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    got = {s["schedule"]: s for s in data["schedules"]}
    assert list(got) == list(SCHEDULES)
    assert got["zb-h1"]["makespan_s"] == pytest.approx(8 * 3 + 3 * max(1 + 1 - 1, 1, 1))
    assert got["1f1b"]["fits"] and not got["zb-h2"]["fits"]
    assert [m["peak_in_flight"] for m in got["gpipe"]["memory"]] == [8] * 4
    assert main(["evaluate", str(i), str(p), "--schedules", "1f1b,zb-h2",
                 "--weight-share", "0.25"]) == 0
    out = capsys.readouterr().out
    assert "zb-h2" in out and "zb-h1" not in out and "does not fit" in out
    assert "W = 0.25 of each layer's backward FLOP" in out


def test_evaluate_schedules_bad_names_exit_2(tmp_path, capsys):
    i, p = _files(tmp_path)
    assert main(["evaluate", str(i), str(p), "--schedules", "zb-h3"]) == 2
    err = capsys.readouterr().err
    assert "--schedules" in err and "zb-h3" in err and "Traceback" not in err
    assert main(["evaluate", str(i), str(p), "--schedules", "all",
                 "--weight-share", "2"]) == 2


def test_plot_schedule_draws_the_zero_bubble_replay(tmp_path, capsys):
    i, p = _files(tmp_path)
    out, data = tmp_path / "g.png", tmp_path / "g.json"
    assert main(["plot", str(i), str(p), "-o", str(out), "--data", str(data),
                 "--schedule", "zb-h1"]) == 0
    assert out.stat().st_size > 0
    sim = json.loads(data.read_text())
    assert sim["schedule"] == "zb-h1" and sim["makespan_s"] == pytest.approx(27.0)
    assert any(b["op"] == "W" for r in sim["rows"] for b in r["blocks"])
    assert "zb-h1 schedule" in capsys.readouterr().out


def test_worked_example_all_schedules(capsys):
    inst = read(DATA / "worked_example.json")
    plan = Plan.from_dict(json.loads((DATA / "worked_example.plan.json").read_text()))
    sims = simulate_schedules(inst, plan)
    assert [s.schedule for s in sims] == list(SCHEDULES)
    assert all(s.lower_bound_s <= s.makespan_s + 1e-12 for s in sims)


# --------------------------------------------------------------------------- the instance field
def _with_shares(inst: Instance, shares) -> Instance:
    layers = tuple(dataclasses.replace(ly, weight_grad_share=x)
                   for ly, x in zip(inst.model.layers, shares))
    return dataclasses.replace(inst, model=Model(inst.model.name, layers))


def test_each_layers_weight_grad_share_sets_its_w_unless_overridden():
    inst, plan = equal_stages(4, 8, 1.0, 2.0)
    own = _with_shares(inst, [0.25] * 4)
    by_field = simulate_pipeline(own, plan, schedule="zb-h1")
    assert by_field.weight_share is None
    assert by_field.makespan_s == simulate_pipeline(inst, plan, schedule="zb-h1",
                                                    weight_share=0.25).makespan_s
    w = [b.duration for b in by_field.rows[0].blocks if b.op == WEIGHT]
    assert w == pytest.approx([0.5] * 8)  # 0.25 x 200 FLOP at 100 FLOP/s
    # without the field: 0.5; a parameter overrides every layer's field
    assert simulate_pipeline(inst, plan, schedule="zb-h1").makespan_s == \
        pytest.approx(8 * 3 + 3 * max(1 + 1 - 1, 1, 1))
    assert simulate_pipeline(own, plan, schedule="zb-h1", weight_share=0.5).makespan_s == \
        pytest.approx(27.0)
    mixed = _with_shares(inst, [0.0, 1.0, 0.5, 0.5])
    sim = simulate_pipeline(mixed, plan, schedule="zb-h2")
    assert [sum(b.duration for b in r.blocks if b.op == WEIGHT) for r in sim.rows
            if r.kind == "stage"] == pytest.approx([0.0, 16.0, 8.0, 8.0])


def test_weight_grad_share_is_read_written_and_checked(tmp_path, capsys):
    from chainpipe.io import instance_to_dict, write

    inst, _plan = equal_stages(3, 4, 1.0, 2.0)
    assert all("weight_grad_share" not in ly for ly in instance_to_dict(inst)["model"]["layers"])
    own = _with_shares(inst, [0.1, 0.2, 0.3])
    write(own, tmp_path / "i.json")
    assert read(tmp_path / "i.json") == own
    data = json.loads((tmp_path / "i.json").read_text())
    assert [ly["weight_grad_share"] for ly in data["model"]["layers"]] == [0.1, 0.2, 0.3]
    data["model"]["layers"][1]["weight_grad_share"] = 1.5
    (tmp_path / "bad.json").write_text(json.dumps(data))
    assert main(["validate", str(tmp_path / "bad.json")]) == 2
    assert "model.layers[1].weight_grad_share: must be a finite number from 0 to 1, got 1.5" \
        in capsys.readouterr().err


# --------------------------------------------------------------------------- derived shares
def _products(m, piece: str, b: int) -> list[tuple[int, bool]]:
    """Every matrix product of one piece of ``m``, counted from its dimensions alone:
    ``(forward FLOP, has a weight)``, ``2 x rows x inner x columns`` each."""
    n, h, s, f = b * m.seq, m.hidden, m.seq, m.ffn_size
    heads = m.heads
    if m.family == "llama":  # heads of head_dim (or h / heads); K, V of kv_heads heads
        d = m.head_dim or h // heads
        q, kv = d * heads, d * (m.kv_heads or heads)
    else:  # GPT: Q, K, V of width h split over the heads (GPT-3 1.3B's 2048 / 24 is no integer)
        d, q, kv = h / heads, h, h
    if piece == "head":
        return [(2 * n * h * m.vocab, True)]
    if piece == "attention":
        projections = ([(2 * n * h * q, True), (2 * n * h * kv, True), (2 * n * h * kv, True),
                        (2 * n * q * h, True)])
        # per sequence and head: scores (s x d)(d x s), then (s x s)(s x d)
        attention = [(round(b * heads * 2 * s * d * s), False),
                     (round(b * heads * 2 * s * s * d), False)]
        return projections + attention
    if m.family == "llama":  # SwiGLU: gate, up, down
        return [(2 * n * h * f, True), (2 * n * h * f, True), (2 * n * f * h, True)]
    return [(2 * n * h * f, True), (2 * n * f * h, True)]


def _split_backward(products) -> tuple[int, int]:
    """``(B, W)``: a product by a weight has an input gradient and a weight gradient of its
    forward's size; one of two activations has two input gradients."""
    B = sum(fwd if weighted else 2 * fwd for fwd, weighted in products)
    W = sum(fwd for fwd, weighted in products if weighted)
    return B, W


@pytest.mark.parametrize("model, seq", [("gpt3-1.3b", None), ("gpt3-125m", 8192),
                                        ("llama2-70b", None), ("llama2-7b", 1024)])
@pytest.mark.parametrize("granularity", ["block", "sublayer"])
def test_derived_share_is_w_over_b_plus_w_of_an_independent_flop_count(model, seq, granularity):
    from chainpipe.instances import generate
    from chainpipe.instances.models import model_layers, model_shape

    shape = model_shape(model)
    if seq is not None:
        shape = dataclasses.replace(shape, seq=seq)
    b = 2
    layers = model_layers(shape, microbatch_size=b, blocks=2, granularity=granularity)
    pieces = {"block0": ("attention", "mlp"), "block0.attn": ("attention",),
              "block0.mlp": ("mlp",), "head": ("head",)}
    checked = 0
    for ly in layers:
        if ly.name not in pieces:
            continue
        B, W = _split_backward([p for piece in pieces[ly.name] for p in _products(shape, piece, b)])
        assert ly.bwd_flop == B + W  # the split is of the layer's own backward
        assert ly.weight_grad_share == pytest.approx(W / (B + W), rel=1e-12)
        assert 0 < ly.weight_grad_share < 1
        checked += 1
    assert checked == (2 if granularity == "block" else 3)
    # the closed forms of docs/schedule.md
    h, s = shape.hidden, shape.seq
    if shape.family == "gpt" and granularity == "block":
        assert layers[1].weight_grad_share == pytest.approx(3 * h / (6 * h + s), rel=1e-12)
    if shape.family == "gpt" and granularity == "sublayer":
        assert layers[1].weight_grad_share == pytest.approx(h / (2 * h + s), rel=1e-12)
        assert layers[2].weight_grad_share == 0.5
    assert layers[-1].weight_grad_share == 0.5  # the LM head: one product by a weight
    # the embedding's input is token ids: its whole backward is its table's gradient
    assert layers[0].weight_grad_share == 1.0
    # the share does not depend on the microbatch size; the generator writes it (v3 only)
    assert [ly.weight_grad_share for ly in model_layers(shape, blocks=2,
                                                        granularity=granularity)] == \
        [ly.weight_grad_share for ly in layers]
    v3 = generate("tiny", 0, model=shape, blocks=2, granularity=granularity, version=3)
    assert [ly.weight_grad_share for ly in v3.layers] == \
        [ly.weight_grad_share for ly in layers]


def test_generated_version_3_files_carry_the_share_and_version_2_ones_do_not(tmp_path):
    from chainpipe.instances import generate
    from chainpipe.io import instance_to_dict

    out = tmp_path / "g.json"
    assert main(["generate", "--preset", "metro", "--seed", "2", "-o", str(out)]) == 0
    layers = json.loads(out.read_text())["model"]["layers"]
    assert all(0 < ly["weight_grad_share"] <= 1 for ly in layers)
    assert layers[0]["weight_grad_share"] == 1.0 and layers[-1]["weight_grad_share"] == 0.5
    assert read(out).layers == generate("metro", 2, version=3).layers
    cluster = Path(__file__).resolve().parents[1] / "examples" / "metro-cluster.toml"
    assert main(["generate", "--cluster", str(cluster), "--model", "llama2-7b",
                 "-o", str(tmp_path / "c.json")]) == 0
    shares = [ly.weight_grad_share for ly in read(tmp_path / "c.json").layers]
    assert shares[0] == 1.0 and shares[1] == pytest.approx(0.428889, abs=1e-6)
    for preset in ("tiny", "metro", "hybrid"):
        assert all("weight_grad_share" not in ly
                   for ly in instance_to_dict(generate(preset, 2))["model"]["layers"])


def test_committed_v3_sets_carry_the_share_and_older_sets_do_not():
    from chainpipe.instances.sets import ROOT, SETS

    for set_name, entries in SETS.items():
        for e in entries:
            text = (ROOT / set_name / f"{e.stem}.json").read_text(encoding="utf-8")
            doc = json.loads(text)
            if e.version == 3:
                assert doc["format"] == "chainpipe-instance/3"
                shares = [ly["weight_grad_share"] for ly in doc["model"]["layers"]]
                assert shares == [ly.weight_grad_share for ly in e.instance().layers]
                assert shares[0] == 1.0 and all(0 < x < 1 for x in shares[1:])
            else:
                assert doc["format"] in ("chainpipe-instance/1", "chainpipe-instance/2")
                assert "weight_grad_share" not in text, e.stem


def test_derived_shares_shorten_w_against_the_default_on_a_v3_plan():
    """A GPT-style or Llama block at s = 4096 spends more than half its backward on
    input gradients (the attention products have no weight), so W is below 0.5."""
    from chainpipe.instances.sets import ROOT
    from chainpipe.schedule import weight_blocks

    inst = read(ROOT / "v3" / "small" / "v3-small-05-gpipe.json")
    plan = Plan.from_tuples(inst, [(0, inst.num_layers, 0, 0)])
    pipe = evaluate(inst, plan).pipelines[0]
    (b_own,), (w_own,) = weight_blocks(inst, pipe)
    (b_half,), (w_half,) = weight_blocks(inst, pipe, weight_share=0.5)
    assert b_own + w_own == pytest.approx(b_half + w_half)
    flop = sum(ly.weight_grad_share * ly.bwd_flop for ly in inst.layers)
    assert w_own / w_half == pytest.approx(flop / (0.5 * sum(ly.bwd_flop for ly in inst.layers)))
    assert w_own < w_half
