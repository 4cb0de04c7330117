"""The comparison harness: isolation, kills, resume, metrics, report, Dask, CLI errors.

Runs use small solvers of ``tests/fake_solvers.py`` registered for the test (plus
``dp`` once it exists); each run is a child process, so the sweeps stay small.
"""

from __future__ import annotations

import csv
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fake_solvers import first_device

from chainpipe import Plan, read
from chainpipe.cli import main
from chainpipe.compare import instance_digest, metrics, run_sweep
from chainpipe.compare.report import CSV_COLUMNS
from chainpipe.io import instance_to_dict, write, write_json
from chainpipe.plan import evaluate
from chainpipe.solve import SOLVERS, SolverInfo, available_solvers, solve
from helpers import brute_force, random_instance

ROOT = Path(__file__).resolve().parents[1]
FAKES = {
    "fake-exact": ("enumerate_optimal", True),
    "fake-first": ("first_device", False),
    "fake-anytime": ("anytime", True),
    "fake-sleep": ("sleeper", False),
    "fake-crash": ("crasher", False),
    "fake-raise": ("raiser", False),
    "fake-liar": ("liar", True),
    "fake-chatty": ("chatty", False),
}
HAS_DP = any(s.name == "dp" for s in available_solvers())


def _register(mp):
    for name, (func, exact) in FAKES.items():
        mp.setitem(SOLVERS, name, SolverInfo(name, f"fake_solvers:{func}", exact, "test solver"))


@pytest.fixture(autouse=True)
def fake_solvers(monkeypatch):
    _register(monkeypatch)


def _instances(directory: Path, seeds) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for s in seeds:
        p = directory / f"r{s}.json"
        write(random_instance(s, max_layers=4, max_dcs=2), p)
        paths.append(p)
    return paths


def _csv(path: Path) -> list[dict]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """One sweep shared by several tests (module-scoped: spawning processes is the cost)."""
    with pytest.MonkeyPatch.context() as mp:
        _register(mp)
        base = tmp_path_factory.mktemp("sweep")
        paths = _instances(base / "inst", [1, 2, 3])
        (base / "inst" / "manifest.json").write_text('{"instances": []}')  # skipped
        solvers = ["fake-exact", "fake-first", "fake-anytime", "fake-crash", "fake-raise",
                   "fake-liar"] + (["dp"] if HAS_DP else [])
        out = base / "out"
        records = run_sweep([base / "inst"], solvers, 20, out, threads=2, jobs=2,
                            progress=True)
        yield {"paths": paths, "solvers": solvers, "out": out, "records": records}


def test_every_run_recorded_with_identity_and_size(sweep):
    recs = sweep["records"]
    assert len(recs) == 3 * len(sweep["solvers"])
    lines = (sweep["out"] / "results.jsonl").read_text().splitlines()
    assert len(lines) == len(recs)
    for rec in recs:
        assert rec["seed"] == 0 and rec["threads"] == 2 and rec["time_limit_s"] == 20
        inst = read(rec["instance_path"])
        assert rec["num_layers"] == inst.num_layers
        assert rec["num_devices"] == inst.num_devices
        assert rec["num_datacenters"] == inst.num_datacenters


def test_statuses_and_times_are_honest(sweep):
    by = {(Path(r["instance_path"]).name, r["solver"]): r for r in sweep["records"]}
    for path in sweep["paths"]:
        T, plan = brute_force(read(path))
        exact = by[(path.name, "fake-exact")]
        if plan is None:
            assert exact["status"] == "infeasible"
            continue
        assert exact["status"] == "optimal"
        assert exact["iteration_time_s"] == pytest.approx(T)
        # the child ran under the pinned thread count
        assert exact["stats"] == {"threads": 2, "omp_num_threads": "2"}
        if HAS_DP:
            assert by[(path.name, "dp")]["iteration_time_s"] == pytest.approx(T)
        crash = by[(path.name, "fake-crash")]
        assert crash["status"] == "error" and "exited with code 7" in crash["message"]
        raised = by[(path.name, "fake-raise")]
        assert raised["status"] == "error"
        assert raised["message"] == "RuntimeError: the backend failed"


def test_results_csv_has_the_contract_columns_and_gap_to_best(sweep):
    rows = _csv(sweep["out"] / "results.csv")
    assert list(rows[0]) == CSV_COLUMNS  # one seed: no extra column
    assert CSV_COLUMNS[:8] == ["instance", "solver", "status", "iteration_time_s",
                               "lower_bound_s", "gap", "gap_to_best", "solve_time_s"]
    assert len(rows) == len(sweep["records"])
    names = {read(p).name: p for p in sweep["paths"]}
    for row in rows:
        inst = read(names[row["instance"]])
        assert int(row["devices_total"]) == inst.num_devices
        assert (row["devices_used"] == "") == (row["iteration_time_s"] == "")
        if row["devices_used"]:
            assert 1 <= int(row["devices_used"]) <= inst.num_devices
        T, plan = brute_force(read(names[row["instance"]]))
        if row["iteration_time_s"]:
            # gap to best = (T - T*) / T*, T* the best any solver found (here the optimum)
            t = float(row["iteration_time_s"])
            assert float(row["gap_to_best"]) == pytest.approx((t - T) / T, abs=1e-6)
        else:
            assert row["gap_to_best"] == ""
        if row["solver"] == "fake-exact" and plan is not None:
            assert float(row["gap"]) == 0.0 and float(row["lower_bound_s"]) == pytest.approx(T)


def test_summary_table_figures_and_contradictions(sweep):
    out = sweep["out"]
    md = (out / "summary.md").read_text()
    assert "| solver | kind | runs |" in md
    assert "(T - T*) / T*" in md and "shift 1 s" in md
    for name in ("profile_time", "profile_quality", "gap_over_time", "time_vs_size"):
        assert (out / f"{name}.png").read_bytes()[:4] == b"\x89PNG", name
        assert (out / f"{name}.csv").stat().st_size > 0, name
    # the liar claims optimality for one-stage plans; where that is worse than the
    # optimum, the report must say so
    worse = [r for r in sweep["records"] if r["solver"] == "fake-liar"
             and r["iteration_time_s"] is not None
             and r["iteration_time_s"] > 1.000001 * min(
                 x["iteration_time_s"] for x in sweep["records"]
                 if x["instance_path"] == r["instance_path"] and x["iteration_time_s"])]
    assert worse  # instances r1 and r2 need more than one stage
    assert "## Contradictions between solvers" in md
    assert "fake-liar (seed 0) claims optimal" in md
    summary = {s["solver"]: s for s in metrics.solver_summary(sweep["records"])}
    assert summary["fake-crash"]["error"] == 3
    # a crashed run is charged the limit: SGM of three 20 s runs with shift 1 s
    assert summary["fake-crash"]["sgm_time_s"] == pytest.approx(20.0)
    assert summary["fake-exact"]["wins"] == sum(
        1 for p in sweep["paths"] if brute_force(read(p))[1] is not None)


def test_resume_skips_recorded_runs_and_repairs_a_cut_line(sweep, tmp_path):
    out = tmp_path / "out"
    paths = _instances(tmp_path / "inst", [1, 2])
    run_sweep(paths, ["fake-exact", "fake-first"], 20, out, progress=False, figures=False)
    jsonl = out / "results.jsonl"
    lines = jsonl.read_text().splitlines()
    assert len(lines) == 4
    # drop one run and cut the last line in half, as an interrupted sweep would
    kept = lines[:2] + [lines[3][: len(lines[3]) // 2]]
    jsonl.write_text("\n".join(kept))
    records = run_sweep(paths, ["fake-exact", "fake-first"], 20, out, progress=False,
                        figures=False)
    after = jsonl.read_text().splitlines()
    assert len(after) == 4 and all(json.loads(x) for x in after)
    assert after[:2] == lines[:2]  # the recorded runs were not run again
    assert len(records) == 4
    # a different time limit is a different experiment: runs again
    again = run_sweep(paths, ["fake-exact"], 7, out, progress=False, figures=False)
    assert len(again) == 2 and len(jsonl.read_text().splitlines()) == 6


def test_overrunning_run_is_killed_and_the_sweep_goes_on(tmp_path, monkeypatch):
    from chainpipe.compare import runner

    # a margin of 3 s: the other run's process starts and imports within it on a loaded
    # machine (with 0.5 s it was killed too at load 5 to 8)
    monkeypatch.setattr(runner, "kill_margin", lambda limit: 3.0)
    paths = _instances(tmp_path / "inst", [1])
    records = run_sweep(paths, ["fake-sleep", "fake-first"], 0.5, tmp_path / "out",
                        jobs=2, progress=False, figures=False)
    by = {r["solver"]: r for r in records}
    sleep = by["fake-sleep"]
    assert sleep["status"] == "no_solution"
    assert sleep["message"].startswith("killed after")
    assert sleep["stats"]["killed"] is True
    assert 3.4 < sleep["solve_time_s"] < 15
    assert by["fake-first"]["status"] == "feasible"
    assert not metrics.finished(sleep) and metrics.charged_time(sleep) == 0.5


def test_progress_bar_is_off_when_stderr_is_not_a_terminal(tmp_path, capsys):
    paths = _instances(tmp_path / "inst", [4])
    run_sweep(paths, ["fake-first", "fake-exact"], 20, tmp_path / "out", figures=False)
    assert capsys.readouterr().err == ""


def test_progress_bar_when_asked(tmp_path, capsys):
    paths = _instances(tmp_path / "inst", [4])
    run_sweep(paths, ["fake-first", "fake-exact"], 20, tmp_path / "out", figures=False,
              progress=True)
    err = capsys.readouterr().err
    assert "compare: 100%" in err and "2/2" in err  # tqdm's bar, on stderr


def test_solver_output_on_stdout_does_not_garble_the_result(tmp_path):
    paths = _instances(tmp_path / "inst", [5])
    rec, = run_sweep(paths, ["fake-chatty"], 20, tmp_path / "out", figures=False,
                     progress=False)
    assert rec["status"] == "feasible" and rec["iteration_time_s"] > 0


def test_seeds_add_a_seed_column(tmp_path):
    paths = _instances(tmp_path / "inst", [5])
    run_sweep(paths, ["fake-first"], 20, tmp_path / "out", seeds=2, progress=False,
              figures=False)
    rows = _csv(tmp_path / "out" / "results.csv")
    assert list(rows[0]) == CSV_COLUMNS + ["seed"]
    assert [r["seed"] for r in rows] == ["0", "1"]


def test_dask_local_cluster_gives_the_same_rows(tmp_path):
    distributed = pytest.importorskip("distributed")
    paths = _instances(tmp_path / "inst", [1, 2])
    solvers = ["fake-exact", "fake-first", "fake-crash"] + (["dp"] if HAS_DP else [])
    local = run_sweep(paths, solvers, 20, tmp_path / "local", jobs=2, progress=False,
                      figures=False)
    with distributed.LocalCluster(n_workers=1, threads_per_worker=2, processes=True,
                                  dashboard_address=None) as cluster:
        remote = run_sweep(paths, solvers, 20, tmp_path / "dask", progress=False,
                           figures=False, scheduler=cluster.scheduler_address)

    def key(rows):
        return [(r["instance"], r["solver"], r["status"], r["iteration_time_s"],
                 r["gap_to_best"]) for r in rows]

    assert key(_csv(tmp_path / "local" / "results.csv")) == \
        key(_csv(tmp_path / "dask" / "results.csv"))
    assert [r["status"] for r in local] == [r["status"] for r in remote]


# --------------------------------------------------------------------------- metrics
def test_shifted_geometric_mean():
    assert metrics.shifted_geometric_mean([0.0, 3.0], shift=1.0) == pytest.approx(1.0)
    assert metrics.shifted_geometric_mean([5.0], shift=1.0) == pytest.approx(5.0)
    assert metrics.shifted_geometric_mean([]) is None


def _rec(**kw):
    base = {"instance": "i", "instance_path": "/i", "solver": "s", "seed": 0, "status": "optimal",
            "iteration_time_s": 10.0, "lower_bound_s": 10.0, "gap": 0.0, "solve_time_s": 5.0,
            "time_limit_s": 10.0, "exact": True, "stats": {}}
    base.update(kw)
    return base


def test_primal_integral_follows_the_trace():
    # no plan for 1 s, then T = 20 (gap 0.5) until 4 s, then the optimum 10
    rec = _rec(stats={"trace": [[1.0, 20.0, None], [4.0, 10.0, 10.0]]})
    assert metrics.primal_integral(rec, best=10.0) == pytest.approx(1.0 + 3 * 0.5)
    # without a trace: no plan until the run returns at 5 s
    assert metrics.primal_integral(_rec(), best=10.0) == pytest.approx(5.0)
    # killed: never a plan, the whole limit
    killed = _rec(status="no_solution", iteration_time_s=None, stats={"killed": True})
    assert metrics.primal_integral(killed, best=10.0) == pytest.approx(10.0)


def test_finished_and_charged_time():
    assert metrics.finished(_rec())
    assert not metrics.finished(_rec(status="feasible"))  # exact solver stopped without proof
    assert metrics.charged_time(_rec(status="feasible")) == 10.0
    assert metrics.finished(_rec(status="feasible", exact=False))  # a heuristic's answer
    assert not metrics.finished(_rec(solve_time_s=12.0))  # over the limit
    assert not metrics.finished(_rec(status="error"))


def test_a_run_that_gives_up_is_told_apart_from_one_out_of_time():
    from chainpipe.compare import report

    quit_early = _rec(solver="h", exact=False, status="no_solution", iteration_time_s=None,
                      lower_bound_s=None, gap=None, solve_time_s=0.01,
                      message="no candidate fits memory")
    out_of_time = _rec(solver="e", status="no_solution", iteration_time_s=None,
                       lower_bound_s=None, gap=None, solve_time_s=10.0)
    killed = _rec(solver="k", status="no_solution", iteration_time_s=None, lower_bound_s=None,
                  gap=None, solve_time_s=1.0, stats={"killed": True})
    assert metrics.gave_up(quit_early)
    assert not metrics.gave_up(out_of_time) and not metrics.gave_up(killed)
    # MIPLIB's rule still charges the limit to both
    assert metrics.charged_time(quit_early) == metrics.charged_time(out_of_time) == 10.0
    size = {"num_devices": 8, "num_layers": 3, "num_datacenters": 1, "threads": 1}
    recs = [_rec(solver="a", devices_used=6, **size),
            *(dict(r, **size) for r in (quit_early, out_of_time))]
    rows = {r["solver"]: r for r in metrics.solver_summary(recs)}
    assert (rows["h"]["no_solution"], rows["h"]["gave_up"]) == (1, 1)
    assert (rows["e"]["no_solution"], rows["e"]["gave_up"]) == (1, 0)
    text = report.summary_markdown(recs, {})
    assert "## Runs that gave up" in text
    assert "- i / h (seed 0, 0.01 s): no candidate fits memory" in text
    assert "/ e (" not in text.split("## Runs that gave up")[1]
    _, cells = report.instance_table(recs)
    assert cells[0][-3:] == ["0.00% opt, 6/8 GPUs", "gave up", "no sol"]
    table = dict(zip(report.SOLVER_HEADER, report.solver_table(metrics.solver_summary(recs))[1]))
    assert (table["no sol"], table["gave up"]) == ("0", "1")


def test_best_known_wins_and_profiles():
    recs = [_rec(solver="a", iteration_time_s=10.0, solve_time_s=1.0),
            _rec(solver="b", status="feasible", exact=False, iteration_time_s=12.5,
                 lower_bound_s=None, gap=None, solve_time_s=0.5),
            _rec(solver="c", status="no_solution", iteration_time_s=None, lower_bound_s=None,
                 gap=None, solve_time_s=10.0)]
    best = metrics.best_known(recs)["/i"]
    assert best["best"] == 10.0 and best["proven"] and not best["conflicts"]
    ann = {r["solver"]: r for r in metrics.annotate(recs)}
    assert ann["b"]["gap_to_best"] == pytest.approx(0.25)
    assert [ann[s]["win"] for s in "abc"] == [True, False, False]
    q = metrics.performance_profile(recs, "quality")
    assert q["ratios"] == {"a": [1.0], "b": [1.25], "c": [math.inf]}
    t = metrics.performance_profile(recs, "time")
    assert t["ratios"] == {"a": [2.0], "b": [1.0], "c": [math.inf]}
    assert metrics.profile_curve([1.0, 2.0, math.inf], [1.0, 2.0, 100.0]) == \
        pytest.approx([1 / 3, 2 / 3, 2 / 3])


# --------------------------------------------------------------------------- command line
@pytest.mark.parametrize("argv,needle", [
    (["--solvers", "no-such-solver"], "--solvers: unknown solver 'no-such-solver'"),
    (["--solvers", "fake-first", "--time-limit", "0"], "--time-limit: must be a finite number"),
    (["--solvers", "fake-first", "--time-limit", "-5"], "got '-5'"),
    (["--solvers", "fake-first", "--time-limit", "inf"], "got 'inf'"),
    (["--solvers", "fake-first", "--time-limit", "nan"], "got 'nan'"),
])
def test_cli_bad_arguments_exit_2(tmp_path, capsys, argv, needle):
    paths = _instances(tmp_path / "inst", [1])
    code = main(["compare", str(paths[0]), "--out", str(tmp_path / "o")] + argv)
    err = capsys.readouterr().err
    assert code == 2
    assert err.strip().splitlines() == [err.strip()] and needle in err
    assert "Traceback" not in err
    assert not (tmp_path / "o").exists()


def test_cli_missing_input_exit_2(tmp_path, capsys):
    code = main(["compare", str(tmp_path / "nope.json"), "--solvers", "fake-first",
                 "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert code == 2
    assert err.strip() == f"INSTANCE_OR_DIR: {tmp_path / 'nope.json'}: no such file or directory"


@pytest.mark.skipif(not HAS_DP, reason="dp solver not present")
def test_cli_compare_end_to_end(tmp_path, capsys):
    inst = ROOT / "instances" / "small" / "small-01-tiny.json"
    if not inst.exists():
        pytest.skip("committed small set not present")
    out = tmp_path / "o"
    out.mkdir()
    (out / "old_figure.png").write_bytes(b"left by an earlier sweep")
    code = main(["compare", str(inst), "--solvers", "dp,fake-first", "--time-limit", "30",
                 "--out", str(out)])
    stdout = capsys.readouterr().out
    assert code == 0
    assert stdout.splitlines()[0].split()[:3] == ["solver", "kind", "runs"]
    assert "summary.md" in stdout and "profile_quality.png" in stdout
    assert "old_figure.png" not in stdout  # only this sweep's figures are listed
    rows = _csv(out / "results.csv")
    assert [r["solver"] for r in rows] == ["dp", "fake-first"]
    assert rows[0]["status"] == "optimal" and rows[0]["gap_to_best"] == "0"


# --------------------------------------------------------------------------- resume is true of the file
def _scale_flop(path: Path, factor: float) -> None:
    data = instance_to_dict(read(path))
    for layer in data["model"]["layers"]:
        layer["fwd_flop"] *= factor
        layer["bwd_flop"] *= factor
    write_json(data, path)


def test_a_changed_instance_is_run_again_never_served_stale(tmp_path, capsys):
    paths = _instances(tmp_path / "inst", [5])
    out = tmp_path / "out"
    first, = run_sweep(paths, ["fake-first"], 20, out, figures=False)
    _scale_flop(paths[0], 3.0)
    capsys.readouterr()
    second, = run_sweep(paths, ["fake-first"], 20, out, figures=False)
    now = read(paths[0])
    assert second["iteration_time_s"] == pytest.approx(
        evaluate(now, first_device(now).plan).iteration_time_s)
    assert second["iteration_time_s"] != pytest.approx(first["iteration_time_s"])
    assert second["instance_sha256"] == instance_digest(now) != first["instance_sha256"]
    assert len((out / "results.jsonl").read_text().splitlines()) == 2
    rows = _csv(out / "results.csv")
    assert len(rows) == 1 and float(rows[0]["iteration_time_s"]) == pytest.approx(
        second["iteration_time_s"])
    # the re-run is said on stderr, in summary.md and in sweep.json
    err = capsys.readouterr().err
    assert "again because their instance changed" in err and paths[0].name in err
    md = (out / "summary.md").read_text()
    assert "## Runs done again" in md and f"{paths[0].resolve()} / fake-first" in md
    sweep = json.loads((out / "sweep.json").read_text())
    assert sweep["rerun_instance_changed"] == [
        {"instance_path": str(paths[0].resolve()), "instance": now.name,
         "solver": "fake-first", "seed": 0, "reason": "instance changed"}]
    assert sweep["status"] == "complete" and sweep["run"] == 1 and sweep["reused"] == 0
    # the same content, written differently: reused, not run
    paths[0].write_text(json.dumps(instance_to_dict(now), indent=4, sort_keys=True))
    third, = run_sweep(paths, ["fake-first"], 20, out, figures=False)
    assert len((out / "results.jsonl").read_text().splitlines()) == 2
    assert third["iteration_time_s"] == second["iteration_time_s"]
    # back to the first content: its recorded run is the right one again
    _scale_flop(paths[0], 1 / 3.0)
    if instance_digest(read(paths[0])) == first["instance_sha256"]:
        fourth, = run_sweep(paths, ["fake-first"], 20, out, figures=False)
        assert fourth["iteration_time_s"] == first["iteration_time_s"]
        assert len((out / "results.jsonl").read_text().splitlines()) == 2


def test_records_of_an_older_results_file_without_the_digest_are_not_reused(tmp_path):
    paths = _instances(tmp_path / "inst", [5])
    out = tmp_path / "out"
    rec, = run_sweep(paths, ["fake-first"], 20, out, progress=False, figures=False)
    # what the previous version wrote: a key of path and settings, no content digest
    old = {k: v for k, v in rec.items() if k not in ("instance_sha256", "options")}
    old["run_key"] = f"{rec['instance_path']}|fake-first|0|20|1|"
    old["iteration_time_s"] = 999.0
    (out / "results.jsonl").write_text(json.dumps(old) + "\n")
    again, = run_sweep(paths, ["fake-first"], 20, out, progress=False, figures=False)
    assert again["iteration_time_s"] == rec["iteration_time_s"]
    assert len((out / "results.jsonl").read_text().splitlines()) == 2
    sweep = json.loads((out / "sweep.json").read_text())
    assert [r["reason"] for r in sweep["rerun_instance_changed"]] == [
        "recorded without an instance digest"]


@pytest.mark.skipif(not HAS_DP, reason="dp solver not present")
def test_cli_compare_after_the_links_slow_down_reports_the_new_T(tmp_path, capsys):
    src = ROOT / "instances" / "small" / "small-03-mem-1f1b.json"
    if not src.exists():
        pytest.skip("committed small set not present")
    inst = tmp_path / "inst.json"
    inst.write_text(src.read_text())
    argv = ["compare", str(inst), "--solvers", "dp", "--out", str(tmp_path / "cmp")]
    assert main(argv) == 0
    before = float(_csv(tmp_path / "cmp" / "results.csv")[0]["iteration_time_s"])
    data = instance_to_dict(read(inst))
    for dc in data["datacenters"]:
        dc["link"]["bandwidth_bytes_per_s"] /= 1000
    for link in data["links"]:
        link["bandwidth_bytes_per_s"] /= 1000
    write_json(data, inst)
    assert main(argv) == 0
    after = float(_csv(tmp_path / "cmp" / "results.csv")[0]["iteration_time_s"])
    assert after == pytest.approx(solve(read(inst), "dp").iteration_time, rel=1e-8)
    assert after > 10 * before


# --------------------------------------------------------------------------- inputs and outputs
def _tree(root: Path) -> dict:
    return {str(p): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("where", ["the file", "its directory", "a parent"])
def test_out_on_an_input_is_refused_and_nothing_written(tmp_path, capsys, where):
    paths = _instances(tmp_path / "inst", [1])
    args = {"the file": (paths[0], paths[0]), "its directory": (paths[0].parent, paths[0].parent),
            "a parent": (paths[0], tmp_path)}[where]
    before = _tree(tmp_path)
    code = main(["compare", str(args[0]), "--solvers", "fake-first", "--out", str(args[1])])
    err = capsys.readouterr().err
    assert code == 2
    assert err.strip().splitlines() == [err.strip()]
    assert err.startswith(f"--out: {args[1]} holds the input") and "refusing" in err
    assert _tree(tmp_path) == before


def _bad_directory(root: Path) -> Path:
    d = root / "mixed"
    _instances(d, [1])
    data = instance_to_dict(read(d / "r1.json"))
    data["datacenters"][0]["devices"][0]["count"] = 0
    write_json(data, d / "bad.json")
    text = (d / "r1.json").read_text()
    (d / "cut.json").write_text(text[: len(text) // 2])
    return d


def test_a_directory_with_bad_files_reports_every_one_and_runs_nothing(tmp_path, capsys):
    d = _bad_directory(tmp_path)
    out = tmp_path / "out"
    code = main(["compare", str(d), "--solvers", "fake-first", "--out", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert [line.split(":")[0] for line in err] == [str(d / "bad.json"), str(d / "cut.json")]
    assert "datacenters[0].devices[0].count" in err[0] and "invalid JSON" in err[1]
    assert not out.exists()


def test_skip_invalid_runs_the_valid_ones_and_lists_the_rest(tmp_path, capsys):
    d = _bad_directory(tmp_path)
    out = tmp_path / "out"
    code = main(["compare", str(d), "--solvers", "fake-first", "--out", str(out),
                 "--skip-invalid"])
    err = capsys.readouterr().err
    assert code == 0
    assert [r["instance"] for r in _csv(out / "results.csv")] == [read(d / "r1.json").name]
    skipped = [line for line in err.splitlines() if "skipped" in line]
    assert len(skipped) == 2 and "bad.json" in skipped[0] and "cut.json" in skipped[1]
    md = (out / "summary.md").read_text()
    assert "## Inputs skipped" in md
    assert f"- {d / 'bad.json'}: datacenters[0].devices[0].count" in md
    assert f"- {d / 'cut.json'}: invalid JSON" in md
    assert len(json.loads((out / "sweep.json").read_text())["skipped_inputs"]) == 2


def test_scheduler_without_dask_says_how_to_install_it(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "distributed", None)  # import distributed fails
    paths = _instances(tmp_path / "inst", [1])
    code = main(["compare", str(paths[0]), "--solvers", "fake-first", "--out",
                 str(tmp_path / "o"), "--scheduler", "tcp://127.0.0.1:9"])
    err = capsys.readouterr().err
    assert code == 1
    assert err.strip().splitlines() == [err.strip()]
    assert "pip install 'chainpipe[dask]'" in err and "ModuleNotFoundError" not in err
    assert not (tmp_path / "o").exists()


# --------------------------------------------------------------------------- signals
_DRIVER = """
import sys
from chainpipe.solve import SOLVERS, SolverInfo
for name, func in (("fake-hang", "sleeper_with_child"), ("fake-first", "first_device")):
    SOLVERS[name] = SolverInfo(name, "fake_solvers:" + func, False, "test solver")
from chainpipe.cli import main
sys.exit(main(sys.argv[1:]))
"""


def _processes() -> dict[int, tuple[int, int, str]]:
    """``{pid: (parent pid, process group, state)}`` of every process, from /proc."""
    out = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        out[int(entry)] = (int(fields[1]), int(fields[2]), fields[0])
    return out


def _descendants(pid: int) -> set[int]:
    procs = _processes()
    found, frontier = set(), {pid}
    while frontier:
        frontier = {p for p, (ppid, _, _) in procs.items() if ppid in frontier} - found
        found |= frontier
    return found


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_leaves_no_process_and_no_temporary_file(tmp_path, signum):
    paths = _instances(tmp_path / "inst", [1])
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = dict(os.environ, TMPDIR=str(tmp),
               PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "tests")]))
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [sys.executable, "-c", _DRIVER, "compare", str(paths[0]), "--solvers",
         "fake-first,fake-hang", "--jobs", "2", "--time-limit", "600", "--out", str(out)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        groups: set[int] = set()
        for _ in range(300):  # until the hanging run's child has started its own process
            procs = _processes()
            desc = _descendants(proc.pid)
            groups = {procs[p][1] for p in desc if p in procs}
            if any(procs[p][0] in desc for p in desc if p in procs):
                break
            time.sleep(0.05)
        else:
            pytest.fail("the run never started")
        time.sleep(0.2)
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=30)
        groups.discard(os.getpgid(0))
        alive = [p for p, (_, pgid, state) in _processes().items()
                 if pgid in groups and state != "Z"]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        leftover = {pgid for _, pgid, state in _processes().values()
                    if pgid in groups - {os.getpgid(0)} and state != "Z"}
        for pgid in leftover:  # never leave a failed test's processes behind
            os.killpg(pgid, signal.SIGKILL)
    err = err.decode()
    assert proc.returncode == 128 + signum
    assert err.strip().splitlines() == [err.strip()]
    assert f"interrupted by {signal.Signals(signum).name}" in err
    assert "rerun the same command to resume" in err
    assert alive == []
    assert [e for e in os.listdir(tmp) if e.startswith("chainpipe")] == []
    assert json.loads((out / "sweep.json").read_text())["status"] == "interrupted"


def test_a_resumed_sweep_retries_harness_failures_and_keeps_results(sweep, tmp_path):
    """A crashed run is tried again on resume; a run killed past its limit is a result."""
    out = tmp_path / "out"
    paths = _instances(tmp_path / "inst", [1])
    first = run_sweep(paths, ["fake-crash", "fake-first"], 20, out, progress=False,
                      figures=False)
    assert {r["solver"]: r["status"] for r in first} == {"fake-crash": "error",
                                                          "fake-first": "feasible"}
    assert [r for r in first if r["solver"] == "fake-crash"][0]["stats"]["retry"] is True
    run_sweep(paths, ["fake-crash", "fake-first"], 20, out, progress=False, figures=False)
    lines = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    assert [r["solver"] for r in lines].count("fake-crash") == 2  # run again
    assert [r["solver"] for r in lines].count("fake-first") == 1  # reused


# --------------------------------------------------------------------------- contract v2
def test_cli_compare_on_v2_instances(tmp_path, capsys):
    """Two small v2 instances (the worked example; two DCs with nodes, ZeRO and widths
    [1, 2], [1, 2]): every solver gives its plan, the exact ones the DP's optimum, and the
    sweep finishes with its report."""
    src = tmp_path / "in"
    src.mkdir()
    worked = json.loads((ROOT / "tests" / "data" / "valid" / "worked_example_v2.json")
                        .read_text())
    (src / "worked.json").write_text(json.dumps(worked))
    two = json.loads(json.dumps(worked))
    two["name"], two["training"]["schedule"] = "two-dc-v2", "1f1b"
    two["training"]["parallelism"]["zero"] = True
    two["datacenters"].append({
        "name": "b", "devices": [{"type": "h", "count": 4, "flop_per_s": 200, "memory_bytes": 1e9,
                                  "devices_per_node": 4, "node_bandwidth_bytes_per_s": 20}],
        "link": {"bandwidth_bytes_per_s": 10, "latency_s": 0.25}})
    two["links"] = [{"bandwidth_bytes_per_s": 5, "latency_s": 1}]
    (src / "two.json").write_text(json.dumps(two))
    out = tmp_path / "out"
    code = main(["compare", str(src), "--solvers", "dp,cpsat,cdynp,uniform", "--time-limit",
                 "30", "--out", str(out)])
    capsys.readouterr()
    assert code == 0
    rows = {(r["instance"], r["solver"]): r for r in _csv(out / "results.csv")}
    assert len(rows) == 8
    assert (out / "summary.md").exists()
    for name in ("worked-example-v2", "two-dc-v2"):
        inst = read(src / ("worked.json" if name == "worked-example-v2" else "two.json"))
        for solver in ("dp", "uniform", "cpsat", "cdynp"):
            assert rows[(name, solver)]["status"] in ("optimal", "feasible")
        for solver in ("cpsat", "cdynp"):
            assert rows[(name, solver)]["status"] == "optimal"
            assert float(rows[(name, solver)]["iteration_time_s"]) == pytest.approx(
                float(rows[(name, "dp")]["iteration_time_s"]), rel=1e-6)
        records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
        for rec in records:
            if rec["instance"] == name and rec["plan"] is not None:
                ev = evaluate(inst, Plan.from_dict(rec["plan"]))
                assert ev.feasible and ev.iteration_time_s == pytest.approx(
                    rec["iteration_time_s"])
    assert float(rows[("worked-example-v2", "dp")]["iteration_time_s"]) >= 16.0 * (1 - 1e-9)
    assert (out / "profile_quality.png").exists()
