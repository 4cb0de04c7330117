"""The Gantt chart and ``chainpipe plot``: no input overwritten, side files only on request,
readable and fast on a large plan."""

from __future__ import annotations

import json
import shutil
import struct
import time
from pathlib import Path

import numpy as np
import pytest

from chainpipe import Plan, read
from chainpipe.cli import main
from chainpipe.gantt import (
    DPI,
    MAX_HEIGHT_IN,
    SYNC_COLOR,
    chart_rows,
    draw,
    gantt,
    window_end,
)
from chainpipe.schedule import simulate_pipeline

DATA = Path(__file__).resolve().parent / "data" / "valid"
INSTANCE = DATA / "worked_example.json"
PLAN = DATA / "worked_example.plan.json"


def _png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", head[16:24])


def test_plot_writes_only_the_chart_beside_an_instance_of_the_same_stem(tmp_path, capsys):
    # the user's report: `plot mine.json plan.json -o mine.png` destroyed mine.json
    mine = tmp_path / "mine.json"
    shutil.copy(INSTANCE, mine)
    before = mine.read_bytes()
    assert main(["plot", str(mine), str(PLAN), "-o", str(tmp_path / "mine.png")]) == 0
    assert mine.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine.json", "mine.png"]
    out = capsys.readouterr().out
    assert "T = 32 s" in out and "simulated makespan 32 s" in out


@pytest.mark.parametrize("which", ["instance", "plan"])
@pytest.mark.parametrize("option", ["-o", "--data"])
def test_plot_refuses_an_output_on_an_input(tmp_path, capsys, which, option):
    inst, plan = tmp_path / "inst.json", tmp_path / "plan.json"
    shutil.copy(INSTANCE, inst)
    shutil.copy(PLAN, plan)
    target = inst if which == "instance" else plan
    before = target.read_bytes()
    args = ["plot", str(inst), str(plan), "-o", str(tmp_path / "g.png")]
    if option == "-o":
        args[-1] = str(target)
    else:
        args += ["--data", str(target)]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "refusing to write over it" in err
    assert target.read_bytes() == before
    assert not (tmp_path / "g.png").exists()


def test_plot_refuses_unknown_formats_before_any_work(tmp_path, capsys):
    assert main(["plot", str(INSTANCE), str(PLAN), "-o", str(tmp_path / "g.xyz")]) == 2
    assert capsys.readouterr().err.startswith("--output: ")
    assert main(["plot", str(INSTANCE), str(PLAN), "-o", str(tmp_path / "g.png"),
                 "--data", str(tmp_path / "d.txt")]) == 2
    assert "--data" in capsys.readouterr().err
    assert main(["plot", str(INSTANCE), str(PLAN), "-o", str(tmp_path / "g.png"),
                 "--microbatches", "0"]) == 2
    assert capsys.readouterr().err.startswith("--microbatches: '0'")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("suffix", [".json", ".csv"])
def test_plot_data_on_request(tmp_path, suffix):
    data = tmp_path / f"schedule{suffix}"
    assert main(["plot", str(INSTANCE), str(PLAN), "-o", str(tmp_path / "g.png"),
                 "--data", str(data)]) == 0
    inst = read(INSTANCE)
    blocks = 2 * inst.microbatches * 2  # two stages
    if suffix == ".json":
        doc = json.loads(data.read_text())
        assert doc["iteration_time_s"] == pytest.approx(32.0)
        assert sum(len(r["blocks"]) for r in doc["rows"] if r["kind"] == "stage") == blocks
    else:
        lines = data.read_text().splitlines()
        assert lines[0] == "row,resource,kind,op,microbatch,start_s,duration_s,pipeline"
        assert sum(1 for ln in lines[1:] if ",stage," in ln) == blocks


def test_plot_bad_plan_is_exit_2(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"stages": [{"layers": [0, 3], "device": "a/nope/0"}]}))
    assert main(["plot", str(INSTANCE), str(bad), "-o", str(tmp_path / "x.png")]) == 2
    err = capsys.readouterr().err
    assert "stages[0].device" in err and "Traceback" not in err
    assert not (tmp_path / "x.png").exists()


@pytest.fixture(scope="module")
def large():
    """large-01 and its optimal plan: 41 stages, 128 microbatches."""
    import chainpipe as cp

    inst = read(Path(__file__).resolve().parents[1] / "instances" / "large" / "large-01.json")
    return inst, cp.solve(inst, "dp").plan


def test_large_plan_draws_in_seconds_at_a_capped_size(large, tmp_path):
    inst, plan = large
    assert plan.num_stages > 30 and inst.microbatches == 128
    t0 = time.perf_counter()
    sim = gantt(inst, plan, path=tmp_path / "g.png")
    assert time.perf_counter() - t0 < 20  # was 50 s to 3 min, one call per block
    w, h = _png_size(tmp_path / "g.png")
    assert h <= MAX_HEIGHT_IN * DPI + 1 and w <= 14 * DPI  # was 1440 x 4226
    # links inside a DC get no row of their own at this size; stages all do
    rows = chart_rows(sim)
    assert sum(r.kind == "stage" for r in rows) == plan.num_stages
    assert all(r.inter_dc for r in rows if r.kind == "link")
    # the first microbatches in full colour, but the time axis covers the whole iteration
    assert window_end(sim, 16) < 0.5 * sim.makespan_s
    assert window_end(sim, None) == pytest.approx(max(sim.makespan_s, sim.iteration_time_s))


def test_the_default_chart_shows_the_whole_iteration_with_its_end(large):
    """The default window colours the first 16 microbatches; the axis still runs to the end
    of the iteration (drain and synchronisation), where T and the makespan are marked."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    inst, plan = large
    sim = simulate_pipeline(inst, plan)
    fig = draw(sim)  # the default window
    ax = fig.axes[0]
    end = max(sim.makespan_s, sim.iteration_time_s)
    assert ax.get_xlim()[1] >= end
    marks = sorted(line.get_xdata()[0] for line in ax.get_lines())
    assert marks == pytest.approx(sorted([sim.iteration_time_s, sim.makespan_s]))
    assert "first 16 microbatches in full colour" in ax.get_title()
    plt.close(fig)


def test_gantt_into_given_axes_draws_every_row():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    inst = read(INSTANCE)
    plan = Plan.from_dict(json.loads(PLAN.read_text()))
    fig, ax = plt.subplots()
    sim = gantt(inst, plan, ax=ax, window=None)
    assert len(ax.get_yticklabels()) == len(sim.rows) == 3
    assert "T = 32" in ax.get_title() and "makespan 32" in ax.get_title()
    plt.close(fig)
    assert sim.makespan_s == pytest.approx(simulate_pipeline(inst, plan).makespan_s)


def _sync_bars(ax) -> list[tuple[float, float]]:
    """``(start, width)`` of every bar drawn in the synchronisation colour."""
    from matplotlib.colors import to_rgba

    out = []
    for coll in ax.collections:
        if coll.get_facecolor().size and tuple(coll.get_facecolor()[0]) == to_rgba(SYNC_COLOR):
            out.extend((float(np.min(p.vertices[:, 0])), float(np.ptp(p.vertices[:, 0])))
                       for p in coll.get_paths())
    return sorted(out)


@pytest.mark.parametrize("dense", [False, True], ids=["blocks", "dense"])
def test_gantt_draws_each_stage_sync_after_its_drain_with_a_legend_and_d_x_t(dense):
    """The v2 worked example's optimum: two stages of 2x1 devices, each syncing R = 2.5 s
    from the end of its last backward."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    inst = read(DATA / "worked_example_v2.json")
    plan = Plan.from_tuples(inst, [(0, 1, 0, 0, 2, 1), (1, 2, 0, 0, 2, 1)])
    sim = simulate_pipeline(inst, plan)
    fig, ax = plt.subplots(figsize=(0.3, 2) if dense else (13, 3))
    draw(sim, ax, window=None, links="all")
    stage_rows = [r for r in sim.rows if r.kind == "stage"]
    ends = sorted(max(b.end for b in r.blocks if b.op != "S") for r in stage_rows)
    bars = _sync_bars(ax)
    assert [s for s, _ in bars] == pytest.approx(ends)
    assert [w for _, w in bars] == pytest.approx([2.5, 2.5])
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert "s0 a/g/0..1 2x1 [0,1)" in labels and "s1 a/g/2..3 2x1 [1,2)" in labels
    assert "gradient synchronisation R_s" in [t.get_text() for t in ax.get_legend().get_texts()]
    assert "synchronisation max R_s = 2.5 s" in ax.get_title()
    plt.close(fig)


def test_plot_of_a_v2_plan_says_the_makespan_includes_the_sync(tmp_path, capsys):
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"stages": [
        {"layers": [0, 1], "data_parallel": 2, "devices": ["a/g/0", "a/g/1"]},
        {"layers": [1, 2], "data_parallel": 2, "devices": ["a/g/2", "a/g/3"]}]}))
    assert main(["plot", str(DATA / "worked_example_v2.json"), str(plan), "-o",
                 str(tmp_path / "g.png")]) == 0
    out = capsys.readouterr().out
    assert "cost model T = 16 s, simulated makespan 22 s (synchronisation max R_s = 2.5 s " \
           "included)" in out


def test_the_default_window_is_not_stretched_by_the_sync():
    """The sync comes after every microbatch: under 1F1B the first ones' span ends before
    it."""
    import dataclasses

    inst = read(DATA / "worked_example_v2.json")
    inst = dataclasses.replace(inst, training=dataclasses.replace(inst.training,
                                                                  schedule="1f1b"))
    plan = Plan.from_tuples(inst, [(0, 1, 0, 0, 2, 1), (1, 2, 0, 0, 2, 1)])
    sim = simulate_pipeline(inst, plan)
    first = max(b.end for r in sim.rows for b in r.blocks if b.op != "S" and b.microbatch < 2)
    assert window_end(sim, 2) == pytest.approx(first)
    assert window_end(sim, 2) < sim.makespan_s - 2.5 - 1.0


def test_dense_rows_merge_blocks_under_a_pixel_apart():
    from chainpipe.gantt import merge_spans

    bars = [(2.0, 1.0), (0.0, 1.0), (1.05, 0.5), (5.0, 0.1), (3.5, 0.2)]
    def flat(spans):
        return [x for span in spans for x in span]

    assert flat(merge_spans(bars, 0.1)) == pytest.approx([0.0, 1.55, 2.0, 1.0, 3.5, 0.2,
                                                          5.0, 0.1])
    assert flat(merge_spans(bars, 0.5)) == pytest.approx([0.0, 3.7, 5.0, 0.1])
    assert merge_spans([], 1.0) == []


def test_plot_refuses_a_schedule_too_long_to_simulate_at_once(tmp_path, capsys):
    doc = json.loads(INSTANCE.read_text())
    doc["training"]["microbatches"] = 1_000_000  # 4 000 000 blocks on two stages
    inst = tmp_path / "inst.json"
    inst.write_text(json.dumps(doc))
    t0 = time.perf_counter()
    # the plan names the worked example, not this copy of it: refused without --force
    assert main(["plot", str(inst), str(PLAN), "-o", str(tmp_path / "g.png")]) == 2
    assert "the plan was written for instance 'worked-example'" in capsys.readouterr().err
    assert main(["plot", str(inst), str(PLAN), "-o", str(tmp_path / "g.png"), "--force"]) == 1
    assert time.perf_counter() - t0 < 10
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0].startswith("warning: ") and "used anyway (--force)" in err[0]
    assert len(err) == 2 and "fewer microbatches" in err[1]
    assert not (tmp_path / "g.png").exists()
