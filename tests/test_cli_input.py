"""The CLI's input handling: bad input exits 2 with one path-named line per problem on stderr,
nothing on stdout and never a traceback; a plan that breaks the rules is a job done (exit 0,
reported infeasible with its violations), a file that is not a plan at all is bad input (exit 2).

A few tests run the real command in a subprocess; the rest call ``chainpipe.cli.main``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from chainpipe.cli import main
from helpers import without_warnings

ROOT = Path(__file__).resolve().parents[1]
INVALID = ROOT / "tests" / "data" / "invalid"
VALID = ROOT / "tests" / "data" / "valid"
EXPECTED: dict[str, list[str]] = json.loads(
    (INVALID / "expected.json").read_text(encoding="utf-8"))["files"]
WORKED = VALID / "worked_example.json"


def _strict_json(text: str):
    def reject(token):
        raise ValueError(f"{token} in output")

    return json.loads(text, parse_constant=reject)


def run_cli(*args: str) -> subprocess.CompletedProcess:
    """Run the CLI in a subprocess; stderr comes without plausibility warnings (tested apart)."""
    proc = subprocess.run([sys.executable, "-m", "chainpipe", *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, check=False)
    proc.stderr = without_warnings(proc.stderr)
    return proc


def call(capsys, *args, keep_warnings: bool = False) -> tuple[int, str, str]:
    """Run the CLI in-process; stderr comes without plausibility warnings unless asked."""
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err if keep_warnings else without_warnings(err)


def write_plan(tmp_path: Path, stages) -> Path:
    path = tmp_path / "plan.json"
    path.write_text(json.dumps({"stages": [{"layers": [a, b], "device": d}
                                           for a, b, d in stages]}))
    return path


# --------------------------------------------------------------------------- subprocess
def test_subprocess_validate_bad_file_exit_2_one_line_per_problem():
    path = INVALID / "many_problems.json"
    proc = run_cli("validate", path)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert "Traceback" not in proc.stderr
    assert proc.stderr.splitlines() == [f"{path}: {line}" for line in EXPECTED[path.name]]


def test_subprocess_output_into_a_closed_pipe_is_quiet():
    """``chainpipe ... | head -1``: the reader leaves early; no traceback, no error line."""
    proc = subprocess.Popen([sys.executable, "-m", "chainpipe", "solve",
                             "instances/large/large-01.json", "--solver", "uniform",
                             "--format", "json"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.read(1)
    proc.stdout.close()  # the reader is gone before the rest of the plan is written
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 0
    assert err == ""


def test_subprocess_validate_missing_file_exit_2(tmp_path):
    missing = tmp_path / "absent.json"
    proc = run_cli("validate", missing)
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr.splitlines() == [f"{missing}: cannot read file: No such file or directory"]


def test_subprocess_evaluate_with_a_file_that_is_not_a_plan_exit_2(tmp_path):
    bad = tmp_path / "plan.json"
    bad.write_text('{"stages": [{"layers": [0, 3], "device": "a/g/0"},]}')
    proc = run_cli("evaluate", WORKED, bad)
    assert (proc.returncode, proc.stdout) == (2, "")
    assert "Traceback" not in proc.stderr
    (line,) = proc.stderr.splitlines()
    assert line.startswith(f"{bad}: invalid JSON: ")


def test_subprocess_evaluate_infeasible_plan_is_reported_with_exit_1(tmp_path):
    plan = write_plan(tmp_path, [(0, 1, "a/g/0"), (2, 3, "a/g/0")])
    proc = run_cli("evaluate", WORKED, plan, "--format", "json")
    assert (proc.returncode, proc.stderr) == (1, "")
    ev = _strict_json(proc.stdout)
    assert ev["feasible"] is False
    assert ev["violations"] == ["stages[1].layers: starts at 2, expected 1",
                                "stages[1].device: a/g/0 already runs stage 0"]


# --------------------------------------------------------------------------- validate
@pytest.mark.parametrize("name", sorted(EXPECTED), ids=lambda n: n.removesuffix(".json"))
def test_validate_each_invalid_file(capsys, name):
    path = INVALID / name
    code, out, err = call(capsys, "validate", path)
    assert (code, out) == (2, "")
    assert err.splitlines() == [f"{path}: {line}" for line in EXPECTED[name]]


def test_validate_valid_files_exit_0(capsys):
    files = sorted(p for p in VALID.glob("*.json") if p.name.count(".") == 1)
    code, out, err = call(capsys, "validate", *files)
    assert (code, err) == (0, "")
    assert [line.split(": valid (")[0] for line in out.splitlines()] == [str(p) for p in files]


def test_validate_mixed_files_reports_every_bad_one_and_exits_2(capsys):
    bad1, bad2 = INVALID / "device_count_zero.json", INVALID / "empty_file.json"
    code, out, err = call(capsys, "validate", bad1, WORKED, bad2)
    assert code == 2
    assert out.splitlines() == [f"{WORKED}: valid (3 layers, 1 datacenters, 2 devices)"]
    assert err.splitlines() == [f"{bad1}: {EXPECTED[bad1.name][0]}",
                                f"{bad2}: {EXPECTED[bad2.name][0]}"]


@pytest.mark.parametrize("argv, prog", [
    (["validate"], "chainpipe validate"), (["frobnicate"], "chainpipe"),
    (["evaluate", str(WORKED)], "chainpipe evaluate"), ([], "chainpipe"),
])
def test_argparse_usage_errors_exit_2_with_one_line(capsys, argv, prog):
    code, out, err = call(capsys, *argv)
    assert (code, out) == (2, "")
    (line,) = err.splitlines()
    assert line.startswith(f"{prog}: ") and line.endswith(f"(see '{prog} --help')")


# --------------------------------------------------------------------------- evaluate
def test_evaluate_a_good_plan_prints_the_breakdown(capsys):
    code, out, err = call(capsys, "evaluate", WORKED, VALID / "worked_example.plan.json")
    assert (code, err) == (0, "")
    assert "iteration time  32 s" in out and "INFEASIBLE" not in out
    code, out, err = call(capsys, "evaluate", WORKED, VALID / "worked_example.result.json",
                          "--format", "json")
    ev = _strict_json(out)
    assert (code, ev["iteration_time_s"], ev["feasible"], ev["violations"]) == (0, 32.0, True, [])
    assert ev["fill_drain_s"] + ev["steady_s"] == ev["iteration_time_s"]


@pytest.mark.parametrize("stages,violations", [
    ([(0, 1, "a/g/0"), (2, 3, "a/g/1")], ["stages[1].layers: starts at 2, expected 1"]),
    ([(0, 2, "a/g/0")], ["stages: cover layers up to 2, the model has 3"]),
    ([(0, 3, "a/g/0"), (3, 3, "a/g/1")],
     ["stages[1].layers: [3, 3) is not a non-empty range of the model's layers 0..2 "
      "([start, end) with 0 <= start < end <= 3)"]),
    ([(0, 2, "a/g/0"), (2, 3, "a/g/0")], ["stages[1].device: a/g/0 already runs stage 0"]),
    ([(0, 3, "a/tpu/0")], ["stages[0].device: no device named 'a/tpu/0'"]),
], ids=["not_contiguous", "not_covering", "empty_stage", "device_reused", "unknown_device"])
def test_evaluate_plan_breaking_the_rules_is_infeasible_exit_1(capsys, tmp_path, stages,
                                                               violations):
    plan = write_plan(tmp_path, stages)
    code, out, err = call(capsys, "evaluate", WORKED, plan)
    assert (code, err) == (1, "")
    # what is wrong, and no breakdown built from undefined times
    assert out.splitlines() == [
        f"INFEASIBLE: the plan breaks {len(violations)} rule(s) of worked-example:"] + [
        f"  {v}" for v in violations]
    code, out, err = call(capsys, "evaluate", WORKED, plan, "--format", "json")
    ev = _strict_json(out)  # no NaN or Infinity token even when the time is undefined
    assert (code, ev["feasible"], ev["violations"]) == (1, False, violations)


def test_evaluate_groups_many_unknown_devices(capsys, tmp_path):
    plan = write_plan(tmp_path, [(0, 1, "x/g/0"), (1, 2, "x/g/1"), (2, 3, "x/g/2"),
                                 (3, 3, "x/g/3")])
    code, out, _ = call(capsys, "evaluate", WORKED, plan)
    lines = out.splitlines()
    assert code == 1
    assert lines[1] == ("  4 devices are not in this instance, e.g. 'x/g/0' (stages[0].device): "
                        "is the plan for another instance?")
    assert not any("no device named" in line for line in lines)


def test_a_plan_naming_no_instance_is_read_with_one_warning(capsys, tmp_path):
    plan = write_plan(tmp_path, [(0, 1, "a/g/0"), (1, 3, "a/g/1")])
    code, out, err = call(capsys, "evaluate", WORKED, plan, keep_warnings=True)
    assert code == 0 and "iteration time  32 s" in out
    assert [line for line in err.splitlines() if str(plan) in line] == [
        f"warning: {plan} names no instance (written by hand or by an older chainpipe): not "
        f"checked against worked-example"]


def test_a_plan_for_another_instance_is_refused_unless_forced(capsys, tmp_path):
    other = json.loads(WORKED.read_text())
    other["name"] = "another"
    path = tmp_path / "other.json"
    path.write_text(json.dumps(other))
    plan = VALID / "worked_example.plan.json"  # names worked-example by its digest
    code, out, err = call(capsys, "evaluate", path, plan)
    assert (code, out) == (2, "")
    (line,) = err.splitlines()
    assert line.startswith(f"{plan}: the plan was written for instance 'worked-example' "
                           f"(sha256 df911810549c...), not 'another' (sha256 ")
    assert line.endswith("; --force uses it anyway")
    code, out, err = call(capsys, "evaluate", path, plan, "--force", keep_warnings=True)
    assert code == 0 and "iteration time  32 s" in out
    assert err.startswith("warning: ") and err.strip().endswith("used anyway (--force)")
    # the same content under the same name has the same digest, whatever its formatting
    same = tmp_path / "same.json"
    same.write_text(json.dumps(json.loads(WORKED.read_text()), indent=4, sort_keys=True))
    code, _, err = call(capsys, "evaluate", same, plan, keep_warnings=True)
    assert code == 0 and str(plan) not in err


def test_a_plan_written_by_solve_names_its_instance(capsys, tmp_path):
    out_plan = tmp_path / "plan.json"
    assert call(capsys, "solve", WORKED, "--plan-out", out_plan)[0] == 0
    doc = json.loads(out_plan.read_text())
    assert doc["instance"]["name"] == "worked-example" and len(doc["instance"]["sha256"]) == 64
    code, out, _ = call(capsys, "solve", WORKED, "--format", "json")
    res = json.loads(out)
    assert res["plan"]["instance"] == doc["instance"]
    assert (res["devices_used"], res["devices_total"]) == (2, 2)


def test_evaluate_plan_over_memory_is_infeasible_exit_1(capsys, tmp_path):
    inst = json.loads(WORKED.read_text())
    inst["model"]["layers"][0]["params"] = 10**8  # 16 * 1e8 bytes > 1e9
    path = tmp_path / "inst.json"
    path.write_text(json.dumps(inst))
    plan = write_plan(tmp_path, [(0, 3, "a/g/0")])
    code, out, err = call(capsys, "evaluate", path, plan, "--format", "json")
    assert (code, err) == (1, "")
    assert _strict_json(out)["violations"] == [
        "stages[0]: needs 1.6e+09 bytes (4 microbatches in flight) on a/g/0, which has 1e+09 bytes"]


@pytest.mark.parametrize("text,problems", [
    ("", ["invalid JSON: line 1, column 1: expecting value, found the end of the text"]),
    ("[]", ["(plan): must be an object"]),
    ('{"stages": "a/g/0"}', ["stages: must be a non-empty list"]),
    ('{"stages": [{"layers": [0, 3], "device": "a/g/0"}], "x": NaN}',
     ["invalid JSON: line 1, column 58: NaN is not a number JSON allows"]),
    ('{"stages": [{"layers": "0-3", "device": "a/g/0"}]}',
     ["stages[0].layers: must be a list [start, end] of two integers"]),
    ('{"stages": [{"layers": [0, 3], "device": ["a", "g", 0]}]}',
     ["stages[0].device: must be a device name 'dc/type/i'"]),
    ('{"plan": null, "status": "infeasible"}', ["plan: the result holds no plan"]),
    ('{"plan": 5}', ["plan: must be an object"]),
], ids=["empty", "array", "stages_string", "nan", "layers_string", "device_array",
        "result_without_plan", "result_plan_number"])
def test_evaluate_file_that_is_not_a_plan_exit_2(capsys, tmp_path, text, problems):
    plan = tmp_path / "plan.json"
    plan.write_text(text)
    code, out, err = call(capsys, "evaluate", WORKED, plan)
    assert (code, out) == (2, "")
    assert err.splitlines() == [f"{plan}: {p}" for p in problems]


def test_evaluate_with_missing_plan_or_bad_instance_exit_2(capsys, tmp_path):
    code, out, err = call(capsys, "evaluate", WORKED, tmp_path / "none.json")
    assert (code, out) == (2, "")
    assert err.splitlines() == [
        f"{tmp_path / 'none.json'}: cannot read file: No such file or directory"]
    bad = INVALID / "device_type_duplicate.json"
    code, out, err = call(capsys, "evaluate", bad, VALID / "worked_example.plan.json")
    assert (code, out) == (2, "")
    assert err.splitlines() == [f"{bad}: {EXPECTED[bad.name][0]}"]


# --------------------------------------------------------------------------- solve input
def test_solve_with_bad_instance_or_unknown_solver_exit_2(capsys):
    bad = INVALID / "links_too_many.json"
    code, out, err = call(capsys, "solve", bad, "--solver", "dp")
    assert (code, out) == (2, "")
    assert err.splitlines() == [f"{bad}: {EXPECTED[bad.name][0]}"]
    code, out, err = call(capsys, "solve", WORKED, "--solver", "no-such-solver")
    assert (code, out) == (2, "")
    (line,) = err.splitlines()
    assert line.startswith("chainpipe solve: argument --solver: unknown solver 'no-such-solver'")
    assert "known: dp, cdynp, " in line
    code, out, err = call(capsys, "solve", WORKED, "-O", "novalue")
    assert (code, out) == (2, "")
    assert err.splitlines() == ["--option: expected KEY=VALUE, got 'novalue'"]


@pytest.mark.parametrize("solver, option, message", [
    ("dp", "colour=1", "--option: unknown option 'colour' for dp; known: upper_bound, scheduler"),
    ("uniform", "colour=1", "--option: unknown option 'colour' for uniform; known: (none)"),
    ("cpsat", "max_round=2", "--option: unknown option 'max_round' for cpsat; did you mean "
                             "'max_rounds'? known: log_search_progress, hint, max_rounds, "
                             "write_model, features"),
    ("ilp-path", "backend=gurobi",
     "--option: ilp-path: unknown backend 'gurobi'; use one of highs, cbc"),
])
def test_solve_with_an_option_the_solver_does_not_take_exit_2(capsys, solver, option, message):
    code, out, err = call(capsys, "solve", WORKED, "--solver", solver, "-O", option)
    assert (code, out) == (2, "")
    assert err.splitlines() == [message]


def test_solve_plan_out_is_a_plan_file_evaluate_reads(capsys, tmp_path):
    plan = tmp_path / "out" / "plan.json"
    code, out, err = call(capsys, "solve", WORKED, "--solver", "dp", "--format", "json",
                          "--plan-out", plan)
    assert (code, err) == (0, "")
    res = _strict_json(out)
    assert (res["status"], res["iteration_time_s"]) == ("optimal", 32.0)
    code, out, err = call(capsys, "evaluate", WORKED, plan, "--format", "json")
    assert (code, err, _strict_json(out)["iteration_time_s"]) == (0, "", 32.0)


# --------------------------------------------------------------------------- option values
@pytest.mark.parametrize("argv, message", [
    (["--time-limit", "-5"], "argument --time-limit: must be a finite number of seconds >= 0, "
                             "got '-5'"),
    (["--time-limit", "nan"], "argument --time-limit: must be a finite number of seconds >= 0, "
                              "got 'nan'"),
    (["--time-limit", "inf"], "argument --time-limit: must be a finite number of seconds >= 0, "
                              "got 'inf'"),
    (["--time-limit", "1e400"], "argument --time-limit: must be a finite number of seconds >= 0, "
                                "got '1e400'"),
    (["--threads", "0"], "argument --threads: must be an integer from 1 to 1024, got '0'"),
    (["--threads", "two"], "argument --threads: must be an integer from 1 to 1024, got 'two'"),
    (["--seed", "-1"], "argument --seed: must be an integer in [0, 2^31), got '-1'"),
    (["--seed", str(2**40)], f"argument --seed: must be an integer in [0, 2^31), got '{2**40}'"),
    (["--solver", "ilp-pth"], "argument --solver: unknown solver 'ilp-pth'; did you mean "
                              "'ilp-path'? known: dp, cdynp, ilp-assign, ilp-path, cpsat, "),
    (["--format", "yaml"], "argument --format: invalid choice: 'yaml'"),
], ids=["negative", "nan", "inf", "overflow", "threads-0", "threads-word", "seed-negative",
        "seed-huge", "solver", "format"])
def test_solve_bad_option_value_exit_2_one_line_before_reading(capsys, tmp_path, argv, message):
    """Refused by the parser: the instance (absent here) is never read, nothing is written."""
    plan = tmp_path / "plan.json"
    code, out, err = call(capsys, "solve", tmp_path / "absent.json", *argv, "--plan-out", plan)
    assert (code, out) == (2, "")
    (line,) = err.splitlines()
    assert line.startswith(f"chainpipe solve: {message}")
    assert not plan.exists()


def test_a_long_bad_value_is_quoted_short(capsys):
    code, out, err = call(capsys, "solve", WORKED, "--threads", "9" * 5000)
    assert (code, out) == (2, "")
    (line,) = err.splitlines()
    assert line.startswith("chainpipe solve: argument --threads: must be an integer from 1 to 1024, got '9")
    assert "9" * 100 not in line


def test_solve_time_limit_zero_is_a_limit(capsys):
    code, out, err = call(capsys, "solve", WORKED, "--time-limit", "0", "--format", "json")
    assert (code, err) == (0, "")
    assert _strict_json(out)["status"] in ("optimal", "feasible", "no_solution")


# --------------------------------------------------------------------------- directories
MEDIUM = ROOT / "instances" / "medium"


def test_validate_the_readme_glob_skips_the_manifest_with_a_note(capsys):
    """``chainpipe validate instances/medium/*.json``: the glob takes manifest.json too."""
    files = sorted(MEDIUM.glob("*.json"))
    assert MEDIUM / "manifest.json" in files
    code, out, err = call(capsys, "validate", *files)
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[0] == (f"{MEDIUM / 'manifest.json'}: skipped (a manifest describes an "
                        f"instance set; it is not an instance)")
    assert [line.split(": valid (")[0] for line in lines[1:]] == [
        str(f) for f in files if f.name != "manifest.json"]


def test_validate_a_directory_validates_its_instance_files(capsys):
    code, out, err = call(capsys, "validate", MEDIUM)
    assert (code, err) == (0, "")
    instances = sorted(f for f in MEDIUM.glob("*.json") if f.name != "manifest.json")
    assert [line.split(": valid (")[0] for line in out.splitlines()] == [str(f) for f in instances]


def test_validate_a_manifest_alone_exit_2_saying_what_it_is(capsys):
    manifest = MEDIUM / "manifest.json"
    code, out, err = call(capsys, "validate", manifest)
    assert (code, out) == (2, "")
    assert err.splitlines() == [f"{manifest}: a manifest describes an instance set; it is not an "
                                f"instance: give the set's directory or its instance files"]


def test_validate_a_directory_reports_every_bad_file_and_an_empty_one(capsys, tmp_path):
    good, bad = tmp_path / "set" / "a.json", tmp_path / "set" / "b.json"
    good.parent.mkdir()
    good.write_text(WORKED.read_text())
    bad.write_text((INVALID / "device_count_zero.json").read_text())
    (tmp_path / "empty").mkdir()
    code, out, err = call(capsys, "validate", good.parent, tmp_path / "empty", good)
    assert code == 2
    assert out.splitlines() == [f"{good}: valid (3 layers, 1 datacenters, 2 devices)"]
    assert err.splitlines() == [f"{bad}: {EXPECTED['device_count_zero.json'][0]}",
                                f"{tmp_path / 'empty'}: no instance files (*.json) in this "
                                f"directory"]


# --------------------------------------------------------------------------- plausibility
@pytest.fixture
def memory_in_gb(tmp_path) -> Path:
    """small-01 with ``memory_bytes: 80`` on its first device group (meant as GB)."""
    data = json.loads((ROOT / "instances" / "small" / "small-01-tiny.json").read_text())
    data["datacenters"][0]["devices"][0]["memory_bytes"] = 80
    path = tmp_path / "gb.json"
    path.write_text(json.dumps(data))
    return path


def _warnings(path: Path) -> list[str]:
    from chainpipe.io import read
    from chainpipe.plausibility import plausibility_warnings

    lines = [f"{path}: {w}" for w in plausibility_warnings(read(path))]
    assert any("datacenters[0].devices[0].memory_bytes: " in line for line in lines)
    return lines


def test_validate_warns_of_implausible_values_exit_0(capsys, memory_in_gb):
    code, out, err = call(capsys, "validate", memory_in_gb, keep_warnings=True)
    assert code == 0
    assert out.startswith(f"{memory_in_gb}: valid (")
    assert err.splitlines() == [f"warning: {w}" for w in _warnings(memory_in_gb)]


def test_validate_strict_makes_warnings_errors(capsys, memory_in_gb):
    clean = ROOT / "instances" / "small" / "small-03-mem-1f1b.json"
    code, out, err = call(capsys, "validate", "--strict", memory_in_gb, clean, keep_warnings=True)
    assert code == 2
    assert out.splitlines() == [f"{clean}: valid (16 layers, 3 datacenters, 6 devices)"]
    assert err.splitlines() == _warnings(memory_in_gb)


def test_solve_and_evaluate_warn_on_stderr_and_keep_stdout_json(capsys, tmp_path, memory_in_gb):
    plan = tmp_path / "plan.json"
    code, out, err = call(capsys, "solve", memory_in_gb, "--format", "json", "--plan-out", plan,
                          keep_warnings=True)
    assert code == 0 and _strict_json(out)["status"] == "optimal"
    assert err.splitlines() == [f"warning: {w}" for w in _warnings(memory_in_gb)]
    code, out, err = call(capsys, "evaluate", memory_in_gb, plan, "--format", "json",
                          keep_warnings=True)
    assert code == 0 and _strict_json(out)["feasible"] is True
    assert err.splitlines() == [f"warning: {w}" for w in _warnings(memory_in_gb)]


@pytest.mark.parametrize("command", ["solve", "evaluate"])
def test_solve_and_evaluate_strict_refuse_before_any_work(capsys, tmp_path, memory_in_gb,
                                                          command):
    plan = tmp_path / "plan.json"
    if command == "solve":
        argv = ["solve", memory_in_gb, "--plan-out", plan, "--strict"]
    else:
        argv = ["evaluate", memory_in_gb, VALID / "worked_example.plan.json", "--strict"]
    code, out, err = call(capsys, *argv)
    assert (code, out) == (2, "")
    assert err.splitlines() == _warnings(memory_in_gb)
    assert not plan.exists()
