"""Contract version 3 on the command line: evaluate's table for a loop and for several
pipelines, a plan breaking pipeline rules (exit 1, one line each), and solve's refusal."""

from __future__ import annotations

import json
from pathlib import Path

from chainpipe.cli import main
from helpers import without_warnings

VALID = Path(__file__).resolve().parent / "data" / "valid"


def call(capsys, *args) -> tuple[int, str, str]:
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, without_warnings(err)


def test_evaluate_names_the_loop_that_paces_1f1b(capsys):
    code, out, err = call(capsys, "evaluate", VALID / "worked_example_v3_1f1b.json",
                          VALID / "worked_example_v3_1f1b.plan.json")
    assert (code, err) == (0, "")
    assert ("steady state    18 s  (M - 1 = 3 x 6 s, paced by loop s0..s1 (2 microbatches per "
            "round trip): 50% compute, 50% in-DC round trips)") in out.splitlines()
    assert out.splitlines()[-1] == "iteration time  30 s  (paced by a loop)"


def test_evaluate_shows_every_pipeline_and_the_averaging_across_dcs(capsys):
    code, out, err = call(capsys, "evaluate", VALID / "worked_example_v3_pipelines.json",
                          VALID / "worked_example_v3_pipelines.plan.json")
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[0].split()[:2] == ["pipeline", "stage"]
    assert [line.split()[:2] for line in lines[1:3]] == [["0", "0"], ["1", "0"]]
    assert lines[4].startswith("pipeline 0      6 s  (M_p = 2 on a: fill + drain 3 s + 1 x 3 s")
    assert lines[5].startswith("pipeline 1      6 s  (M_p = 2 on b:")
    assert "across DCs      3 s  (R_X = 3 s every 1 iteration(s), 2 pipelines over a..b " \
           "(10 B/s, 0.5 s))" in lines
    assert lines[-1] == "iteration time  9 s  (paced by a device)"


def test_evaluate_lists_the_broken_pipeline_rules(capsys, tmp_path):
    plan = json.loads((VALID / "worked_example_v3_pipelines.plan.json").read_text())
    plan["pipelines"][0]["microbatches"] = 3
    plan["pipelines"].reverse()
    path = tmp_path / "bad.plan.json"
    path.write_text(json.dumps(plan))
    code, out, err = call(capsys, "evaluate", VALID / "worked_example_v3_pipelines.json", path)
    assert code == 1
    assert (out + err).splitlines()[-2:] == [
        "  pipelines: microbatches add up to 5, training.microbatches is 4",
        "  pipelines[1]: its DCs a..a do not come after pipelines[0]'s b..b; pipelines run on "
        "disjoint DC ranges in chain order"]


def test_solve_refuses_a_period_instance_with_one_line(capsys, monkeypatch):
    from chainpipe import support

    # every exact solver has the period objective now: take it from cdynp for this test
    monkeypatch.setitem(support.SUPPORTED, "cdynp", frozenset({"pipelines"}))
    code, out, err = call(capsys, "solve", VALID / "worked_example_v3_gpipe.json", "--solver",
                          "cdynp", "--format", "json")
    result = json.loads(out)
    assert code == 1 and result["status"] == "error" and result["plan"] is None
    assert result["message"] == ("cdynp does not support contract version 3 yet: objective "
                                 "'period' (training.objective; 'classic' is supported)")


def test_solve_dp_proves_a_period_optimum(capsys):
    code, out, err = call(capsys, "solve", VALID / "worked_example_v3_gpipe.json", "--format",
                          "json")
    result = json.loads(out)
    assert code == 0 and result["status"] == "optimal" and result["iteration_time_s"] == 21


def test_a_plan_file_of_a_bad_shape_exits_2_naming_each_path(capsys, tmp_path):
    path = tmp_path / "bad.plan.json"
    path.write_text(json.dumps({"pipelines": [
        {"stages": [{"layers": [0, 1], "device": "a/g/0"}]},
        {"microbatches": "2", "stages": [{"layers": [0, 1], "device": "b/g/0"}]}]}))
    code, out, err = call(capsys, "evaluate", VALID / "worked_example_v3_pipelines.json", path)
    assert (code, out) == (2, "")
    assert err.splitlines() == [
        f"{path}: pipelines[0].microbatches: missing field (required with 'pipelines')",
        f"{path}: pipelines[1].microbatches: must be an integer, got '2'"]
