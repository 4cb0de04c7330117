"""Contract v2 on the command line: every exact solver plans data and tensor parallelism
(and still solves version-1-equivalent instances), and ``evaluate``/``solve`` show
``d x t``, ``R_s`` and what paces ``T``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from chainpipe import read, solve
from chainpipe.cli import main
from chainpipe.plan import devices_label
from chainpipe.solve import SOLVERS
from helpers import brute_force, without_warnings

VALID = Path(__file__).resolve().parent / "data" / "valid"
V2 = VALID / "worked_example_v2.json"
EXACT = ("dp", "cdynp", "ilp-assign", "ilp-path", "cpsat")
#: the worked example's optimum: two stages of d = 2 on the four devices (T = 16)
OPTIMUM = {"stages": [
    {"layers": [0, 1], "data_parallel": 2, "tensor_parallel": 1, "devices": ["a/g/0", "a/g/1"]},
    {"layers": [1, 2], "data_parallel": 2, "tensor_parallel": 1, "devices": ["a/g/2", "a/g/3"]},
]}


def call(capsys, *args) -> tuple[int, str, str]:
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, without_warnings(err)


def v2_document(**training) -> dict:
    """The worked example's document, its ``training`` fields replaced."""
    doc = json.loads(V2.read_text())
    doc["training"].update(training)
    return doc


def write(tmp_path: Path, name: str, doc: dict) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return path


# --------------------------------------------------------------------------- every solver
@pytest.mark.parametrize("solver", EXACT)
def test_every_exact_solver_proves_the_worked_example(solver):
    """Every exact route plans data and tensor parallelism: the worked v2 example's
    optimum, two stages of d = 2 (T = 16)."""
    res = solve(read(V2), solver)
    assert res.status == "optimal", (res.status, res.message)
    assert res.iteration_time == pytest.approx(16.0, rel=1e-6)


@pytest.mark.parametrize("solver", EXACT)
def test_single_device_instances_whatever_nodes_and_zero(tmp_path, solver):
    """The v2 example with parallelism ``[1], [1]`` and ZeRO on: a version-1 problem (its
    devices still in nodes of 2), solved to the brute-force optimum."""
    doc = v2_document(parallelism={"data_parallel": [1], "tensor_parallel": [1], "zero": True},
                      microbatches=3)
    inst = read(write(tmp_path, "single.json", doc))
    assert inst.datacenters[0].devices[0].devices_per_node == 2 and inst.training.parallelism.zero
    res = solve(inst, solver)
    assert res.status == "optimal"
    assert res.iteration_time == pytest.approx(brute_force(inst)[0], rel=1e-9)


def test_cli_solvers_lists_every_solver(capsys):
    code, out, _ = call(capsys, "solvers")
    assert code == 0
    assert [line.split()[0] for line in out.splitlines() if line.strip()] == list(SOLVERS)


# --------------------------------------------------------------------------- the breakdown
def test_evaluate_table_shows_widths_devices_sync_and_pacing(capsys, tmp_path):
    plan = write(tmp_path, "plan.json", OPTIMUM)
    code, out, err = call(capsys, "evaluate", V2, plan)
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[0].split() == ["stage", "layers", "d", "x", "t", "devices", "compute", "s",
                                "in", "flight", "memory/device", "GiB", "limit", "GiB", "sync", "s"]
    assert lines[1].split() == ["0", "[0,", "1)", "2x1", "a/g/0..1", "1.5", "4", "0.000",
                                "0.931", "2.5"]
    assert lines[2].split()[3:5] == ["2x1", "a/g/2..3"]
    assert "synchronisation 2.5 s  (max R_s, stage 0 on 2 x 1 devices a/g/0..1)" in lines
    assert "iteration time  16 s  (paced by a link: the steady state above max R_s)" in lines


def test_evaluate_names_the_synchronisation_when_it_paces(capsys, tmp_path):
    """One stage of ``d = 2``, ``M = 2``: ``C = 3``, steady state 3, ``R = 4.5``."""
    inst = write(tmp_path, "m2.json", v2_document(microbatches=2))
    plan = write(tmp_path, "plan.json", {"stages": [
        {"layers": [0, 2], "data_parallel": 2, "devices": ["a/g/0", "a/g/2"]}]})
    code, out, _ = call(capsys, "evaluate", inst, plan)
    assert code == 0
    assert "iteration time  10.5 s  (paced by the synchronisation: max R_s above the steady " \
           "state)" in out.splitlines()
    assert out.splitlines()[1].split()[3:5] == ["2x1", "a/g/0,2"]
    code, out, _ = call(capsys, "evaluate", inst, plan, "--format", "json")
    ev = json.loads(out)
    assert (ev["sync_s"], ev["paced_by"], ev["sync"]) == (
        4.5, "synchronisation", "stage 0 on 2 x 1 devices a/g/0,2")
    assert (ev["stages"][0]["data_parallel"], ev["stages"][0]["sync_time_s"]) == (2, 4.5)


def test_evaluate_version_1_plan_reads_as_one_by_one(capsys):
    code, out, _ = call(capsys, "evaluate", VALID / "worked_example.json",
                        VALID / "worked_example.plan.json")
    lines = out.splitlines()
    assert code == 0
    assert [line.split()[3:5] for line in lines[1:3]] == [["1x1", "a/g/0"], ["1x1", "a/g/1"]]
    assert "synchronisation 0 s  (none: every stage has d = 1)" in lines
    assert "iteration time  32 s  (paced by a device)" in lines


def test_solve_table_shows_the_breakdown_of_the_plan(capsys):
    code, out, _ = call(capsys, "solve", V2, "--solver", "dp")
    assert code == 0
    assert any(line.startswith("synchronisation ") for line in out.splitlines())
    header = next(line for line in out.splitlines() if line.startswith("stage "))
    assert header.split()[2:5] == ["d", "x", "t"]


@pytest.mark.parametrize("devices, label", [
    (["a/g/3"], "a/g/3"),
    (["a/g/0", "a/g/1", "a/g/2", "a/g/3"], "a/g/0..3"),
    (["a/g/0", "a/g/1", "a/g/4", "a/g/5"], "a/g/0,1,4,5"),
    ([f"a/g/{i}" for i in (0, 1, 4, 5, 8, 9)], "a/g/0,1,...,9 (6)"),
    (["a/g/0", "b/g/0"], "a/g/0..b/g/0 (2)"),
])
def test_devices_label_is_compact(devices, label):
    assert devices_label(devices) == label
