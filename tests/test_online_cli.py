"""``chainpipe simulate``: exit codes, one line per bad field naming its JSON path, the files
of the contract, byte-for-byte determinism for a seed."""

from __future__ import annotations

import csv
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from chainpipe.cli import main
from chainpipe.online.catalogue import POLICY_LINES
from chainpipe.online.presets import PRESETS, preset_dict
from chainpipe.online.report import JOB_COLUMNS, SUMMARY_COLUMNS

ROOT = Path(__file__).resolve().parents[1]


def write(path: Path, data) -> Path:
    path.write_text(json.dumps(data) if not isinstance(data, str) else data, encoding="utf-8")
    return path


def broken_tiny() -> dict:
    data = preset_dict("tiny")
    data["network"]["links"][0]["between"] = ["a", "c"]
    data["network"]["datacenters"][1]["gpus"][0]["count"] = 0
    data["jobs"]["models"] = ["gpt3-1.3bb"]
    data["planning"]["tensor_parallel"] = [1, 3]
    return data


def test_a_bad_scenario_exits_2_with_one_line_per_problem_and_no_traceback(tmp_path):
    bad = write(tmp_path / "bad.json", broken_tiny())
    proc = subprocess.run([sys.executable, "-m", "chainpipe", "simulate", str(bad),
                           "--out", str(tmp_path / "out")], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, check=False)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert "Traceback" not in proc.stderr
    assert any(f"{bad}: network.datacenters[1].gpus[0].count: must be an integer >= 1" in ln
               for ln in lines), lines
    assert any(f"{bad}: network.links[0].between: unknown datacenter 'c'" in ln
               for ln in lines), lines
    assert any("jobs.models[0]: unknown model 'gpt3-1.3bb'; did you mean 'gpt3-1.3b'?" in ln
               for ln in lines), lines
    assert any("planning.tensor_parallel[1]: must be a power of two" in ln for ln in lines)
    assert len(lines) == 4
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("text, expected", [
    ("{", "invalid JSON"),
    ("[1, 2]", "(scenario): must be an object, got array"),
    ('{"format": "chainpipe-scenario/1", "name": "x"}', "network: missing field"),
    ('{"format": "x/1", "name": "x", "network": {"datacenters": []}}',
     "format: must be 'chainpipe-scenario/1'"),
    (json.dumps({**preset_dict("tiny"), "extra": 1}), "extra: unknown field"),
    (json.dumps({**preset_dict("tiny"), "jobs": {"iterations": [5, 2]}}),
     "jobs.iterations: must be [min, max] with min <= max"),
])
def test_bad_scenarios_name_the_field(tmp_path, capsys, text, expected):
    bad = write(tmp_path / "s.json", text)
    assert main(["simulate", str(bad), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert expected in err
    assert all(line.startswith(str(bad)) for line in err.strip().splitlines())


def test_a_disconnected_network_is_refused(tmp_path, capsys):
    data = preset_dict("tiny")
    data["network"]["links"] = []
    assert main(["simulate", str(write(tmp_path / "s.json", data)), "--out",
                 str(tmp_path / "o")]) == 2
    assert "network.links: the network is not connected: a; b" in capsys.readouterr().err


@pytest.mark.parametrize("args, expected", [
    (["--preset", "tiny", "--policies", "chain-dq", "--out", "o"],
     "--policies: unknown policy 'chain-dq'; did you mean 'chain-dp'?"),
    (["--preset", "nope", "--out", "o"], "--preset: unknown scenario preset 'nope'"),
    (["--preset", "tiny"], "--out: the output directory is required"),
    ([], "give a SCENARIO file or --preset NAME"),
])
def test_bad_options_exit_2(tmp_path, capsys, monkeypatch, args, expected):
    monkeypatch.chdir(tmp_path)
    assert main(["simulate", *args]) == 2
    assert expected in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_preset_list_prints_name_then_description(capsys):
    assert main(["simulate", "--preset", "list"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert [ln.split()[0] for ln in lines] == ["tiny", "metro-ring", "metro-mesh"]
    assert all(len(ln.split(None, 1)) == 2 for ln in lines)


def test_help_lists_every_policy_with_its_line_and_every_preset(capsys):
    assert main(["simulate", "--help"]) == 0
    # argparse wraps lines, after a hyphen too: fold both back
    text = " ".join(re.sub(r"-\n\s*", "-", capsys.readouterr().out).split())
    for name, line in POLICY_LINES.items():
        assert f"{name}: {line}" in text
    assert "one of " + ", ".join(PRESETS) in text
    assert "(default: the scenario's)" in text


def test_the_output_directory_may_not_hold_the_scenario(tmp_path, capsys):
    s = write(tmp_path / "s.json", preset_dict("tiny"))
    assert main(["simulate", str(s), "--out", str(tmp_path), "-q"]) == 2
    assert "--out" in capsys.readouterr().err


def test_the_files_of_the_contract_and_determinism_byte_for_byte(tmp_path, capsys):
    scenario = write(tmp_path / "s.json", preset_dict("tiny"))
    args = ["simulate", str(scenario), "--jobs", "10", "--seed", "5",
            "--policies", "first-fit,chain-dp,cba", "-q"]
    assert main([*args, "--out", str(tmp_path / "one")]) == 0
    assert main([*args, "--out", str(tmp_path / "two")]) == 0
    one = sorted(p.name for p in (tmp_path / "one").iterdir())
    assert {"jobs.csv", "summary.csv", "summary.md"} <= set(one)
    assert any(n.endswith(".png") for n in one)
    for name in one:
        assert (tmp_path / "one" / name).read_bytes() == (tmp_path / "two" / name).read_bytes()
    with open(tmp_path / "one" / "summary.csv", newline="") as fh:
        rows = list(csv.reader(fh))
    assert rows[0] == SUMMARY_COLUMNS
    assert [r[0] for r in rows[1:]] == ["first-fit", "chain-dp", "cba"]
    assert all(r[1] == "10" and r[-2] == "tiny" and r[-1] == "5" for r in rows[1:])
    assert all(int(r[2]) + int(r[3]) == 10 for r in rows[1:])
    with open(tmp_path / "one" / "jobs.csv", newline="") as fh:
        jobs = list(csv.reader(fh))
    assert jobs[0] == JOB_COLUMNS
    assert len(jobs) == 1 + 3 * 10
    assert {r[3] for r in jobs[1:]} <= {"accepted", "blocked"}
    assert capsys.readouterr().out == ""
    assert main([*args[:-1], "--seed", "6", "--out", str(tmp_path / "three")]) == 0
    assert (tmp_path / "three" / "jobs.csv").read_bytes() != (
        tmp_path / "one" / "jobs.csv").read_bytes()


def test_the_progress_bar_goes_to_stderr_only_when_asked(tmp_path, capsys):
    args = ["simulate", "--preset", "tiny", "--jobs", "3", "--policies", "first-fit"]
    assert main([*args, "--out", str(tmp_path / "a"), "--progress"]) == 0
    out, err = capsys.readouterr()
    assert "first-fit" in err and "/3 " in err  # the bar, cleared at the end
    assert "blocking" in out  # the summary table
    assert main([*args, "--out", str(tmp_path / "b")]) == 0  # stderr is no terminal here
    assert capsys.readouterr().err == ""
    assert main([*args, "--out", str(tmp_path / "c"), "--progress", "-q"]) == 0
    assert capsys.readouterr() == ("", "")
