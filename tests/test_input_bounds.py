"""Inputs that used to hang, explode memory or end in an exception name (issue 28, items 8,
9 and the matching cases of 14): each is refused in one line naming its field or option,
exit 2, within seconds.

Anything that could hang on a regression runs in a child process with a timeout, so a
failing test fails instead of hanging the suite.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chainpipe.cli import main
from chainpipe.instance import InstanceError
from chainpipe.instances.cluster_file import BYTES, RATE, TIME, quantity, read_cluster
from chainpipe.instances.hf_config import BOUNDS, read_model_config

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "metro-cluster.toml"
MODELS = ROOT / "tests" / "data" / "models"
#: seconds a refusal may take, child process start included
QUICK_S = 30


def run_cli(args: list[str], timeout: float = QUICK_S) -> subprocess.CompletedProcess:
    """``chainpipe ARGS`` in a child process, killed (and the test failed) past ``timeout``."""
    return subprocess.run([sys.executable, "-m", "chainpipe", *map(str, args)],
                          capture_output=True, text=True, timeout=timeout, cwd=ROOT)


def one_line_exit_2(proc: subprocess.CompletedProcess, needle: str) -> None:
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, proc.stderr
    assert len(lines) == 1 and needle in lines[0], lines
    assert "Error" not in lines[0] and "Traceback" not in proc.stderr


# --------------------------------------------------------------------------- item 8: quantities
def test_power_expressions_are_refused_not_evaluated(tmp_path):
    """pint evaluated ``10**10**10`` (never answered) and ``2^2^2^2^2^2`` (23 s)."""
    code = textwrap.dedent("""
        from chainpipe.instances.cluster_file import BYTES, quantity
        for text in ("10**10**10 B", "9**9**9 B", "2^2^2^2^2^2 B", "2**30 B", "80 GiB**9**9"):
            try:
                quantity(text, BYTES)
            except ValueError as exc:
                print(exc)
            else:
                print("accepted", text)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=QUICK_S, cwd=ROOT)
    lines = out.stdout.splitlines()
    assert len(lines) == 5 and all(line.startswith("expected a quantity of bytes")
                                   for line in lines), out


def test_a_power_in_a_cluster_file_is_one_line_exit_2(tmp_path):
    text = EXAMPLE.read_text(encoding="utf-8").replace('"80 GiB"', '"10**10**10 B"', 1)
    assert "10**10**10" in text
    (tmp_path / "c.toml").write_text(text, encoding="utf-8")
    proc = run_cli(["generate", "--cluster", tmp_path / "c.toml", "--model", "gpt3-125m"])
    one_line_exit_2(proc, "memory: expected a quantity of bytes")


@pytest.mark.parametrize("text, dim, value", [
    ("80 GiB", BYTES, 80 * 2**30), ("1.5e2 GB", BYTES, 150e9), (".5 TiB", BYTES, 2**39),
    ("  312 TFLOP / s ", RATE, 312e12), ("5us", TIME, 5e-6), ("+2 ms", TIME, 2e-3),
])
def test_a_number_and_a_unit_still_read(text, dim, value):
    assert quantity(text, dim) == pytest.approx(value, rel=1e-12)


@pytest.mark.parametrize("text", ["1e309 B", "inf B", "nan B", "1e300 PiB", "0 B", "-1 GiB"])
def test_quantities_follow_the_instance_number_rules(text):
    with pytest.raises(ValueError, match="must be a finite quantity > 0"):
        quantity(text, BYTES)


UNITS = {"B": 1, "KiB": 2**10, "GiB": 2**30, "GB": 1e9, "bit": 1 / 8, "Mbit": 1e6 / 8}
NUMBER = st.one_of(st.integers(0, 10**20).map(str),
                   st.floats(min_value=0, max_value=1e300, allow_nan=False).map(repr))


@settings(max_examples=400, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(NUMBER, st.sampled_from(sorted(UNITS)), st.sampled_from(["", " ", "  "]))
def test_fuzz_number_and_unit_reads_as_the_number_times_the_unit(number, unit, gap):
    value = float(number) * UNITS[unit]
    text = f"{number}{gap}{unit}"
    if value > 0 and math.isfinite(value):
        assert quantity(text, BYTES) == pytest.approx(value, rel=1e-11)
    else:
        with pytest.raises(ValueError):
            quantity(text, BYTES)


#: pieces a hostile quantity is made of: numbers, operators, units, junk
PIECES = st.sampled_from(["10", "9", "2", "1e308", "0x10", "**", "^", "*", "/", "(", ")", " ",
                          "B", "GiB", "s", "Gbit", "e", "-", ".", "_", "pi", "µ", "\x00",
                          "FLOP", "inf", "nan", "1_000", "sqrt", "exp"])


@settings(max_examples=1500, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(st.lists(PIECES, max_size=12).map("".join), st.text(max_size=40)))
def test_fuzz_any_text_is_a_finite_value_or_one_line_value_error(text):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        try:
            v = quantity(text, BYTES, positive=False)
        except ValueError as exc:
            assert "\n" not in str(exc) and len(str(exc)) < 300
        else:
            assert math.isfinite(v) and v >= 0


# --------------------------------------------------------------------------- item 8: model sizes
def _config(tmp_path: Path, **fields) -> Path:
    data = json.loads((MODELS / "llama-3-8b" / "config.json").read_text(encoding="utf-8"))
    data.update(fields)
    (tmp_path / "config.json").write_text(json.dumps(data), encoding="utf-8")
    return tmp_path


def test_layer_count_of_2_31_is_refused_at_once_naming_the_field(tmp_path):
    """2**31 - 1 blocks was accepted; the instance then grew 1 GB every 30 s."""
    path = _config(tmp_path, num_hidden_layers=2**31 - 1)
    proc = run_cli(["generate", "--cluster", EXAMPLE, "--model-config", path])
    one_line_exit_2(proc, "config.json: num_hidden_layers: must be an integer <= 10000")


@pytest.mark.parametrize("key, role", [
    ("num_hidden_layers", "blocks"), ("hidden_size", "hidden"),
    ("num_attention_heads", "heads"), ("intermediate_size", "ffn"), ("vocab_size", "vocab"),
    ("max_position_embeddings", "context"), ("num_key_value_heads", "kv_heads"),
    ("head_dim", "head_dim"),
])
def test_every_dimension_is_bounded_by_name(tmp_path, key, role):
    bound = BOUNDS[role][0]
    path = _config(tmp_path, **{key: bound + 1})
    with pytest.raises(InstanceError) as info:
        read_model_config(path)
    assert any(f"config.json: {key}: must be an integer <= {bound} " in p
               for p in info.value.problems), info.value.problems


def test_the_largest_dimensions_still_make_an_instance_layer(tmp_path):
    path = _config(tmp_path, num_hidden_layers=1, hidden_size=BOUNDS["hidden"][0],
                   num_attention_heads=BOUNDS["heads"][0], num_key_value_heads=1,
                   intermediate_size=BOUNDS["ffn"][0], vocab_size=BOUNDS["vocab"][0])
    shape = read_model_config(path, seq_len=BOUNDS["context"][0])
    assert shape.hidden == BOUNDS["hidden"][0]


def test_seq_len_is_bounded_like_the_context(tmp_path):
    proc = run_cli(["generate", "--cluster", EXAMPLE, "--model-config", MODELS / "llama-3-8b",
                    "--seq-len", 2**40])
    one_line_exit_2(proc, "seq_len: must be an integer <= 134217728")


# --------------------------------------------------------------------------- item 14: inputs
@pytest.mark.parametrize("form", ["file", "directory"])
def test_a_model_config_on_a_loop_of_links_is_one_line(tmp_path, capsys, form):
    """Was ``RuntimeError: Symlink loop`` (exit 1) from the output check."""
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    given = tmp_path / "a"
    if form == "directory":
        (tmp_path / "m").mkdir()
        (tmp_path / "m" / "config.json").symlink_to(tmp_path / "a")
        given = tmp_path / "m"
    code = main(["generate", "--cluster", str(EXAMPLE), "--model-config", str(given),
                 "-o", str(tmp_path / "out.json")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert "Too many levels of symbolic links" in err[0] and "Error" not in err[0]
    assert not (tmp_path / "out.json").exists()


# --------------------------------------------------------------------------- item 14: TOML
@pytest.mark.parametrize("body", [
    "a = " + "[" * 5000 + "]" * 5000,
    "a = " + "{b = " * 3000 + "1" + "}" * 3000,
    "[training]\nmicrobatches." + ".".join(["a"] * 5000) + " = 1",
])
def test_a_deeply_nested_cluster_file_is_one_line(tmp_path, body, capsys):
    (tmp_path / "deep.toml").write_text(body, encoding="utf-8")
    with pytest.raises(InstanceError) as info:
        read_cluster(tmp_path / "deep.toml")
    assert info.value.problems == [f"{tmp_path / 'deep.toml'}: invalid TOML: tables and arrays "
                                   f"nest deeper than 100 levels (a cluster file needs 5)"]
    assert main(["generate", "--cluster", str(tmp_path / "deep.toml"), "--model",
                 "gpt3-125m"]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


# --------------------------------------------------------------------------- item 9: simulate
def _scenario(tmp_path: Path, change) -> Path:
    from chainpipe.online.presets import preset_dict

    data = preset_dict("tiny")
    change(data)
    path = tmp_path / "s.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


@pytest.mark.parametrize("jobs", [10**9, 10**30])
def test_simulate_jobs_beyond_the_stream_bound_is_refused(tmp_path, jobs):
    """Built every request first: 2.6-3.3 GB in 40 s, no output."""
    proc = run_cli(["simulate", "--preset", "tiny", "--jobs", jobs, "--out", tmp_path / "o"])
    one_line_exit_2(proc, "--jobs: must be an integer <= 100000")
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("change, needle", [
    (lambda d: d["jobs"].update(count=2**31 - 1),
     "s.json: jobs.count: must be an integer <= 100000"),
    (lambda d: d["jobs"].update(arrivals_per_hour=1e-6),
     "jobs.arrivals_per_hour: 1e-06 an hour puts arrival 1 of 20 at"),
    (lambda d: d["network"]["links"][0].update(km=1e308),
     "s.json: network.links[0].km: must be at most 40000 (the Earth's circumference)"),
    (lambda d: d["jobs"].update(trace=[{"arrival_s": 0, "model": "gpt3-1.3b",
                                        "microbatches": 2**31 - 1, "iterations": 1000,
                                        "gpus": 8}]),
     "s.json: jobs.trace[0].microbatches: must be an integer <= 65536"),
    (lambda d: d["jobs"].update(trace=[{"arrival_s": 1e300, "model": "gpt3-1.3b",
                                        "microbatches": 16, "iterations": 1000, "gpus": 8}]),
     "jobs.trace[0].arrival_s: 1e+300 s is past the horizon of a simulation"),
    (lambda d: (d["jobs"].update(iterations=[10**7, 10**7], count=2),
                d["background"].update(change_s=1)),
     "jobs.iterations: job 0 (gpt3-1.3b, 16 microbatches) placed at"),
    (lambda d: d["jobs"].update(patience_s=1e12),
     "s.json: jobs.patience_s: must be at most the horizon of a simulation"),
    (lambda d: d["network"]["links"][0].update(wavelengths=2**31 - 1),
     "s.json: network.links[0].wavelengths: must be an integer <= 1024"),
])
def test_an_endless_or_huge_simulation_is_refused_in_one_line(tmp_path, change, needle):
    path = _scenario(tmp_path, change)
    proc = run_cli(["simulate", path, "--out", tmp_path / "o", "--policies", "first-fit"])
    one_line_exit_2(proc, needle)


def test_the_horizon_is_what_the_scenario_allows(tmp_path):
    """The presets stay far inside every bound."""
    from chainpipe.online.jobs import horizon_s, job_stream
    from chainpipe.online.presets import PRESETS, preset
    from chainpipe.online.scenario import MAX_STEPS

    for name in PRESETS:
        s = preset(name)
        assert horizon_s(s) == MAX_STEPS * s.background.change_s
        assert job_stream(s, s.seed)[-1].arrival_s < horizon_s(s) / 100


# --------------------------------------------------------------------------- item 9, 14: compare
def _instance(tmp_path: Path) -> Path:
    from chainpipe.io import write
    from helpers import random_instance

    path = tmp_path / "r1.json"
    write(random_instance(1, max_layers=4, max_dcs=2), path)
    return path


@pytest.mark.parametrize("args, needle", [
    (["--seeds", 10**9], "--seeds: must be an integer <= 10000, got 1000000000"),
    (["--jobs", 10**6], "--jobs: must be an integer <= 1024, got 1000000"),
    (["--scheduler", "not a url"],
     "--scheduler: expected an address such as tcp://host:8786, got 'not a url'"),
    (["--scheduler", "tcp://host:99999"], "--scheduler: expected an address such as"),
])
def test_compare_options_beyond_their_bounds_are_one_line(tmp_path, args, needle):
    proc = run_cli(["compare", _instance(tmp_path), "--solvers", "dp", "--out",
                    tmp_path / "o", *args])
    one_line_exit_2(proc, needle)
    assert not (tmp_path / "o").exists()


def test_a_sweep_of_too_many_runs_is_refused_before_planning(tmp_path):
    from chainpipe.compare.sweep import MAX_RUNS, plan_runs
    from chainpipe.io import read

    inst = read(_instance(tmp_path))
    with pytest.raises(InstanceError, match=f"a sweep holds at most {MAX_RUNS}"):
        plan_runs([(str(i), inst) for i in range(11)], ["dp"], 1.0, seeds=10_000)


def test_compare_with_a_time_limit_of_1e308_runs_and_draws_without_a_warning(tmp_path):
    """The run failed (OverflowError in the wait) and matplotlib warned of an overflow."""
    proc = run_cli(["compare", _instance(tmp_path), "--solvers", "dp,greedy-fill", "--out",
                    tmp_path / "o", "--time-limit", "1e308", "--no-progress"], timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "Warning" not in proc.stderr and "overflow" not in proc.stderr, proc.stderr
    runs = [json.loads(line) for line in (tmp_path / "o" / "results.jsonl").read_text(
        encoding="utf-8").splitlines()]
    assert {r["solver"]: r["status"] for r in runs} == {"dp": "optimal",
                                                        "greedy-fill": "feasible"}


def test_figures_of_runs_charged_a_limit_of_1e308_draw_clipped(tmp_path):
    """A run charged the limit put 1e308 on a log axis: an overflow warning, or with an
    anytime trace an OverflowError."""
    from chainpipe.compare.figures import CLIPPED
    from chainpipe.compare.report import write_figures

    def rec(inst, solver, status, t, T, **extra):
        return {"instance_path": inst, "instance": inst, "solver": solver, "seed": 0,
                "status": status, "iteration_time_s": T, "lower_bound_s": T, "gap": 0.0,
                "solve_time_s": t, "time_limit_s": 1e308, "threads": 1, "exact": True,
                "num_layers": 4, "num_devices": 2, "num_datacenters": 1,
                "num_device_types": 1, "stats": {}, **extra}

    recs = [rec("a", "dp", "optimal", 0.5, 2.0), rec("a", "cpsat", "no_solution", 1e308, None),
            rec("b", "dp", "optimal", 0.01, 2.0),
            rec("b", "cpsat", "feasible", 1e308, 3.0, stats={"trace": [[0.1, 3.0, 1.0]]})]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        figures = write_figures(recs, tmp_path)
    assert len(figures) == 4
    assert CLIPPED == "beyond 1e9 drawn at 1e9 (no practical limit)"
