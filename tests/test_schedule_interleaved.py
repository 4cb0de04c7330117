"""Interleaved 1F1B (``interleaved:V``) replayed as a what-if on any plan: the re-cut of the
plan's stages into ``V`` chunks each (Megatron's layout), the published bubble at zero
communication, Megatron's memory peaks, links as resources, lower bounds, and the
``evaluate --schedules`` and ``plot --schedule`` commands."""

from __future__ import annotations

import dataclasses
import json
import random

import pytest

from chainpipe import Plan
from chainpipe.cli import main
from chainpipe.instance import (
    Datacenter,
    DeviceGroup,
    Instance,
    Layer,
    Link,
    Model,
    Parallelism,
    Training,
)
from chainpipe.plan import Pipeline
from chainpipe.schedule import (
    InapplicableSchedule,
    interleaved_layout,
    interleaved_order,
    interleaved_peak_formula,
    parse_schedule,
    simulate_pipeline,
    simulate_schedules,
)
from helpers import random_instance


def equal_chunks(S: int, v: int, M: int, f: float, b: float, *, memory: float = 1e9,
                 output: float = 0.0, latency: float = 0.0) -> tuple[Instance, Plan]:
    """``S`` equal stages of ``v`` equal layers (a stage's forward ``f``, backward ``b``) on
    one DC; no communication unless ``output``/``latency`` say so."""
    layers = tuple(Layer(f"l{i}", f / v * 100.0, b / v * 100.0, 10, 1.0, output)
                   for i in range(S * v))
    inst = Instance("equal", Model("m", layers), Training(M, "1f1b", 1.0),
                    (Datacenter("a", (DeviceGroup("g", S, 100.0, memory),),
                                Link(1e9 if not output else 10.0, latency)),), ())
    return inst, Plan.from_tuples(inst, [(i * v, (i + 1) * v, 0, 0) for i in range(S)])


def random_interleavable(n: int, seed: int = 0) -> list[tuple[Instance, Plan, int]]:
    """Random one-pipeline plans with at least ``v`` layers per stage and ``M`` a multiple of
    ``S``, on random instances with links, latencies and several DCs."""
    rng, out, k = random.Random(seed), [], 0
    while len(out) < n:
        inst = random_instance(9000 + 100 * seed + k, max_layers=12, max_count=3)
        k += 1
        v = rng.choice([2, 2, 3])
        L = inst.num_layers
        groups = [(dc, g) for dc, d in enumerate(inst.datacenters)
                  for g, grp in enumerate(d.devices) for _ in range(grp.count)]
        most = min(len(groups), L // v)
        if most < 2:
            continue
        S = rng.randint(2, most)
        sizes = [v] * S
        for _ in range(L - v * S):
            sizes[rng.randrange(S)] += 1
        bounds = [sum(sizes[:i]) for i in range(S + 1)]
        picks = sorted(rng.sample(groups, S))
        M = S * rng.randint(1, 3)
        inst = dataclasses.replace(inst, training=dataclasses.replace(inst.training,
                                                                      microbatches=M))
        plan = Plan.from_tuples(inst, [(bounds[i], bounds[i + 1], *picks[i]) for i in range(S)])
        out.append((inst, plan, v))
    return out


# --------------------------------------------------------------------------- names, layout
def test_names_parse_and_bad_names_say_why():
    assert parse_schedule("zb-h1") == ("zb-h1", 1)
    assert parse_schedule("interleaved:4") == ("interleaved", 4)
    for bad in ("interleaved", "interleaved:1", "interleaved:x", "interleaved:65", "zb-h3"):
        with pytest.raises(ValueError, match="interleaved:V"):
            parse_schedule(bad)


def test_layout_is_megatrons_round_robin_of_contiguous_chunks():
    """Virtual stage ``c = k S + s`` holds the ``c``-th run of layers on stage ``s``; each
    stage keeps its layer count, split as evenly as possible."""
    layout = interleaved_layout([3, 5, 2], 2)
    assert [(x.stage, x.chunk, x.start, x.end) for x in layout] == [
        (0, 0, 0, 2), (1, 0, 2, 5), (2, 0, 5, 6), (0, 1, 6, 7), (1, 1, 7, 9), (2, 1, 9, 10)]
    with pytest.raises(InapplicableSchedule, match="stage 2 holds 2"):
        interleaved_layout([3, 5, 2], 3)


def test_orders_run_every_chunk_of_every_microbatch_once_with_megatrons_warm_up():
    for S, v, M in [(2, 2, 2), (4, 2, 8), (3, 3, 6), (4, 4, 4)]:
        for s in range(S):
            order = interleaved_order(S, s, M, v)
            for op in ("F", "B"):
                assert sorted((m, k) for o, m, k in order if o == op) == \
                    [(m, k) for m in range(M) for k in range(v)]
            leading = next(i for i, (o, _m, _k) in enumerate(order) if o == "B")
            assert leading == min(2 * (S - s - 1) + (v - 1) * S + 1, v * M)
            # a chunk's forward comes before its backward on the same stage
            pos = {block: i for i, block in enumerate(order)}
            assert all(pos[("F", m, k)] < pos[("B", m, k)] for m in range(M) for k in range(v))


# --------------------------------------------------------------------------- published forms
def test_published_bubble_at_zero_communication():
    """Equal stages, no communication, ``M`` a multiple of ``S``: the makespan is
    ``M (f + b) + (S - 1)(f + b) / v`` (Narayanan et al., SC 2021), 1F1B's bubble over
    ``v``."""
    rng = random.Random(7)
    for _ in range(40):
        S, v = rng.randint(2, 5), rng.randint(2, 4)
        M = S * rng.randint(1, 4)
        f, b = rng.uniform(0.2, 3), rng.uniform(0.2, 4)
        inst, plan = equal_chunks(S, v, M, f, b)
        sim = simulate_pipeline(inst, plan, schedule=f"interleaved:{v}")
        plain = simulate_pipeline(inst, plan, schedule="1f1b")
        assert sim.makespan_s - M * (f + b) == pytest.approx((S - 1) * (f + b) / v,
                                                             rel=1e-9, abs=1e-9)
        assert plain.makespan_s - M * (f + b) == pytest.approx((S - 1) * (f + b), rel=1e-9)


def test_memory_peaks_follow_megatrons_count():
    """Stage ``s`` holds ``(2 (S - s - 1) + (v - 1) S + 1) / v`` of its stash per microbatch at
    its peak (``S + (S - 1) / v`` on the first stage), priced by the memory rule."""
    for S, v, M in [(2, 2, 2), (4, 2, 8), (4, 2, 4), (3, 3, 9), (5, 2, 10), (4, 4, 16)]:
        inst, plan = equal_chunks(S, v, M, 1.0, 2.0)
        sim = simulate_pipeline(inst, plan, schedule=f"interleaved:{v}")
        plain = simulate_pipeline(inst, plan, schedule="1f1b")
        for s, (m, p) in enumerate(zip(sim.memory, plain.memory)):
            assert m.peak_in_flight == pytest.approx(interleaved_peak_formula(S, s, M, v))
            # the same layers' parameters; the stash scales with the peak
            act = v * 1.0
            assert m.memory_bytes - p.memory_bytes == pytest.approx(
                (m.peak_in_flight - p.peak_in_flight) * act)
        if 2 * (S - 1) + (v - 1) * S < v * M:  # the warm-up does not run every forward
            assert sim.memory[0].peak_in_flight == pytest.approx(S + (S - 1) / v)


def test_a_plan_that_fits_1f1b_may_not_fit_interleaved():
    inst, plan = equal_chunks(4, 2, 8, 1.0, 2.0, memory=2 * 10 * 1.0 + 2 * 4.0)
    plain = simulate_pipeline(inst, plan, schedule="1f1b")
    sim = simulate_pipeline(inst, plan, schedule="interleaved:2")
    assert plain.fits and not sim.fits
    assert [m.fits for m in sim.memory] == [False, False, True, True]


# --------------------------------------------------------------------------- links
def test_links_carry_v_times_the_boundaries_and_the_wrap():
    """Each plan boundary is crossed by ``v`` chunks per microbatch each way, and the wrap
    from the last stage to the first by ``v - 1``: ``2 (v S - 1) M`` transfers in all."""
    S, v, M = 3, 2, 6
    inst, plan = equal_chunks(S, v, M, 1.0, 2.0, output=5.0, latency=0.25)
    sim = simulate_pipeline(inst, plan, schedule=f"interleaved:{v}")
    links = [r for r in sim.rows if r.kind == "link"]
    assert sum(len(r.blocks) for r in links) == 2 * (v * S - 1) * M
    for r in links:  # one direction of a link carries one transfer at a time
        for op in ("F", "B"):
            spans = sorted((b.start, b.end) for b in r.blocks if b.op == op)
            assert all(a[1] <= b[0] + 1e-12 for a, b in zip(spans, spans[1:]))
    assert any("s0<->s2" in r.label for r in links)  # the wrap
    assert sim.lower_bound_s <= sim.makespan_s
    # communication slows the replay down from the zero-communication one
    free, _ = equal_chunks(S, v, M, 1.0, 2.0)
    assert sim.makespan_s > simulate_pipeline(free, plan, schedule="interleaved:2").makespan_s


def test_the_wrap_shares_the_chain_links_with_the_gradients():
    """Across DCs the wrap's activations (virtual boundary 1: stage 1 back to stage 0) travel
    the chain link in the gradients' direction: that direction carries them and the
    boundaries' gradients one at a time, and the wrap is slower than free links."""
    layers = tuple(Layer(f"l{i}", 50.0, 100.0, 10, 1.0, 40.0) for i in range(4))
    dcs = tuple(Datacenter(n, (DeviceGroup("g", 1, 100.0, 1e9),), Link(1e9, 0.0))
                for n in "ab")
    inst = Instance("two", Model("m", layers), Training(4, "1f1b", 1.0), dcs,
                    (Link(20.0, 0.5),))
    plan = Plan.from_tuples(inst, [(0, 2, 0, 0), (2, 4, 1, 0)])
    sim = simulate_pipeline(inst, plan, schedule="interleaved:2")
    (link,) = [r for r in sim.rows if r.kind == "link"]
    assert link.inter_dc and len(link.blocks) == 2 * 3 * 4
    # boundary c runs from stage c mod 2: even c forward goes a -> b, odd c (the wrap) b -> a
    down = [b for b in link.blocks if (b.op == "F") == (b.chunk % 2 == 1)]
    up = [b for b in link.blocks if b not in down]
    assert sorted({(b.op, b.chunk) for b in down}) == [("B", 0), ("B", 2), ("F", 1)]
    for direction in (down, up):
        spans = sorted((b.start, b.end) for b in direction)
        assert all(x[1] <= y[0] + 1e-12 for x, y in zip(spans, spans[1:]))
    assert any(x.start < y.end and y.start < x.end for x in down for y in up)  # full duplex
    assert sim.lower_bound_s <= sim.makespan_s


def test_random_plans_replay_without_deadlock_above_their_lower_bound():
    for inst, plan, v in random_interleavable(60, seed=1):
        sim = simulate_pipeline(inst, plan, schedule=f"interleaved:{v}")
        assert sim.lower_bound_s <= sim.makespan_s * (1 + 1e-9)
        blocks = sum(1 for r in sim.rows if r.kind == "stage" for b in r.blocks if b.op in "FB")
        assert blocks == 2 * v * inst.microbatches * plan.num_stages


def test_several_pipelines_each_interleaved_then_averaged():
    layers = tuple(Layer(f"l{i}", 50.0, 100.0, 10, 1.0, 1.0) for i in range(4))
    dcs = tuple(Datacenter(n, (DeviceGroup("g", 2, 100.0, 1e9),), Link(1e3, 0.01))
                for n in "ab")
    training = Training(4, "1f1b", 1.0, parallelism=Parallelism(pipelines=(1, 2)))
    inst = Instance("pp", Model("m", layers), training, dcs, (Link(1e3, 0.1),))
    a = Plan.from_tuples(inst, [(0, 2, 0, 0), (2, 4, 0, 0)]).stages
    b = Plan.from_tuples(inst, [(0, 2, 1, 0), (2, 4, 1, 0)]).stages
    plan = Plan(pipelines=[Pipeline(a, 2), Pipeline(b, 2)])
    sim = simulate_pipeline(inst, plan, schedule="interleaved:2")
    assert len(sim.pipeline_makespans_s) == 2 and sim.num_stages == 4
    assert sim.makespan_s == pytest.approx(max(sim.pipeline_makespans_s) + sim.cross_sync_s)
    assert sim.lower_bound_s <= sim.makespan_s


# --------------------------------------------------------------------------- inapplicable
def test_inapplicable_plans_say_why():
    inst, plan = equal_chunks(3, 2, 4, 1.0, 2.0)  # 4 microbatches over 3 stages
    with pytest.raises(InapplicableSchedule, match="multiple of the stages"):
        simulate_pipeline(inst, plan, schedule="interleaved:2")
    inst, plan = equal_chunks(3, 2, 6, 1.0, 2.0)
    with pytest.raises(InapplicableSchedule, match="at least 3 layers per stage"):
        simulate_pipeline(inst, plan, schedule="interleaved:3")
    (out,) = simulate_schedules(inst, plan, ["interleaved:3"])
    assert out.summary()["applicable"] is False and "stage 0 holds 2" in out.reason


# --------------------------------------------------------------------------- commands
@pytest.fixture()
def files(tmp_path):
    inst, plan = equal_chunks(4, 2, 8, 1.0, 2.0, output=2.0, latency=0.01)
    ipath, ppath = tmp_path / "i.json", tmp_path / "p.json"
    from chainpipe.io import instance_to_dict, write_json, write_plan

    write_json(instance_to_dict(inst), ipath)
    write_plan(plan, ppath, inst)
    return ipath, ppath


def test_evaluate_reports_interleaved_and_inapplicable_rows(files, capsys):
    ipath, ppath = files
    assert main(["evaluate", str(ipath), str(ppath), "--schedules",
                 "1f1b,interleaved:2,interleaved:3"]) == 0
    out = capsys.readouterr().out
    assert "interleaved:2" in out and "inapplicable: interleaved:3 needs at least 3" in out
    assert main(["evaluate", str(ipath), str(ppath), "--schedules", "1f1b,interleaved:2",
                 "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)["schedules"]
    assert [d["schedule"] for d in data] == ["1f1b", "interleaved:2"]
    assert data[1]["makespan_s"] < data[0]["makespan_s"]
    assert len(data[1]["memory"]) == 4


@pytest.mark.parametrize("bad", ["interleaved:1", "interleaved:two", "interleave:2"])
def test_bad_interleaved_names_exit_2_in_one_line(files, capsys, bad):
    ipath, ppath = files
    assert main(["evaluate", str(ipath), str(ppath), "--schedules", bad]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) >= 1 and "interleaved:V" in err[-1]


def test_plot_draws_interleaved_and_refuses_an_inapplicable_one(files, tmp_path, capsys):
    ipath, ppath = files
    out, data = tmp_path / "g.png", tmp_path / "g.json"
    assert main(["plot", str(ipath), str(ppath), "-o", str(out), "--data", str(data),
                 "--schedule", "interleaved:2"]) == 0
    rows = json.loads(data.read_text())["rows"]
    assert {b["chunk"] for r in rows if r["kind"] == "stage" for b in r["blocks"]} == {0, 1}
    assert {b["chunk"] for r in rows if r["kind"] == "link" for b in r["blocks"]} == \
        set(range(2 * 4 - 1))  # every virtual boundary, the wrap included
    assert main(["plot", str(ipath), str(ppath), "-o", str(out),
                 "--schedule", "interleaved:3"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "at least 3 layers per stage" in err[0]


# --------------------------------------------------------------------------- against Megatron-Core
def _megatron_functions() -> dict:
    """``get_schedule_table`` and ``get_pp_rank_microbatches`` from the installed
    Megatron-Core's ``pipeline_parallel/schedules.py`` (its module imports PyTorch, so the
    two pure functions are taken from its source)."""
    import ast
    import importlib.util
    import typing
    from pathlib import Path

    spec = importlib.util.find_spec("megatron")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("megatron-core is not installed")
    path = Path(list(spec.submodule_search_locations)[0]) / "core" / "pipeline_parallel" / \
        "schedules.py"
    if not path.exists():
        pytest.skip("megatron-core has no pipeline_parallel/schedules.py")
    tree = ast.parse(path.read_text())
    wanted = [n for n in tree.body if isinstance(n, ast.FunctionDef)
              and n.name in ("get_schedule_table", "get_pp_rank_microbatches")]
    namespace = {"Optional": typing.Optional, "P2PCommunicator": object,
                 "parallel_state": None}
    exec(compile(ast.Module(wanted, []), str(path), "exec"), namespace)  # noqa: S102
    return namespace


def test_orders_are_megatron_cores_own():
    """Megatron-Core's schedule table (``microbatch_group_size_per_vp_stage = S``) and its
    warm-up count give every rank's order of forwards and backwards, one forward then one
    backward in the steady state: exactly :func:`interleaved_order`."""
    mc = _megatron_functions()

    class Group:
        def __init__(self, size, rank):
            self.size, self.rank = (lambda: size), (lambda: rank)

    class Communicator:
        def __init__(self, size, rank, v):
            self.pp_group, self.virtual_pipeline_model_parallel_size = Group(size, rank), v

    for S, v, M in [(2, 2, 2), (2, 2, 6), (4, 2, 8), (3, 3, 6), (4, 4, 4), (5, 2, 15)]:
        table = mc["get_schedule_table"](M, v, S)
        for s in range(S):
            _total, _all, warm, rest = mc["get_pp_rank_microbatches"](
                M, v, S, p2p_communicator=Communicator(S, s, v))
            fwd = [("F", m, k) for m, k in table]
            bwd = [("B", m, v - 1 - k) for m, k in table]
            expected = fwd[:warm]
            for i in range(rest):
                expected += [fwd[warm + i], bwd[i]]
            expected += bwd[rest:]
            assert interleaved_order(S, s, M, v) == expected, (S, v, M, s)
