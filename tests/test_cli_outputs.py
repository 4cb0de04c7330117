"""What the CLI writes and how it ends: never over an input, quietly when the reader of its
output leaves, with one line and exit 130 on Ctrl-C, progress on stderr with ``--log``.
"""

from __future__ import annotations

import importlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from chainpipe.cli import main
from helpers import sigint_at_default, without_warnings

ROOT = Path(__file__).resolve().parents[1]
WORKED = ROOT / "tests" / "data" / "valid" / "worked_example.json"
SMALL = ROOT / "instances" / "small" / "small-03-mem-1f1b.json"


def call(capsys, *args) -> tuple[int, str, str]:
    """Run the CLI in-process; stderr comes without plausibility warnings (tested apart)."""
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, without_warnings(err)


def snapshot(directory: Path) -> dict[str, bytes | str]:
    """Every entry below ``directory``: file bytes, or the target of a link."""
    return {str(p.relative_to(directory)): os.readlink(p) if p.is_symlink()
            else (p.read_bytes() if p.is_file() else "dir")
            for p in sorted(directory.rglob("*"))}


# --------------------------------------------------------------------------- never over an input
@pytest.fixture
def workdir(tmp_path) -> Path:
    """``inst.json`` (the worked example), ``link.json -> inst.json`` and ``sub/``."""
    (tmp_path / "inst.json").write_bytes(WORKED.read_bytes())
    (tmp_path / "link.json").symlink_to("inst.json")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "public.json").symlink_to("../inst.json")
    return tmp_path


@pytest.mark.parametrize("argv, message", [
    (["solve", "inst.json", "--plan-out", "inst.json"],
     "--plan-out: inst.json is an input of this command; refusing to write over it"),
    (["solve", "inst.json", "--plan-out", "link.json"],
     "--plan-out: link.json is an input of this command; refusing to write over it"),
    (["solve", "link.json", "--plan-out", "inst.json"],
     "--plan-out: inst.json is an input of this command; refusing to write over it"),
    (["solve", "inst.json", "--plan-out", "sub/../inst.json", "--format", "json"],
     "--plan-out: sub/../inst.json is an input of this command; refusing to write over it"),
    (["solve", "inst.json", "--solver", "cdynp", "--trace", "."],
     "--trace: . holds the input inst.json; refusing to write into it"),
    (["solve", "inst.json", "--solver", "cdynp", "--trace", "inst.json"],
     "--trace: inst.json holds the input inst.json; refusing to write into it"),
    (["split", "inst.json", "."], "OUTDIR: . holds the input inst.json; refusing to write into it"),
    (["split", "sub/public.json", "sub"],
     "OUTDIR: sub/public.json is an input of this command; refusing to write over it"),
    (["split", "inst.json", "sub"],
     "OUTDIR: sub/public.json is an input of this command; refusing to write over it"),
    (["solve", "inst.json", "--plan-out", "sub"],
     "--plan-out: sub is a directory; give a file name"),
], ids=["plan-out", "plan-out-link", "input-link", "plan-out-dotdot", "trace-holds-input",
        "trace-is-input", "split-here", "split-into-its-dir", "split-over-a-link",
        "plan-out-dir"])
def test_no_command_writes_over_its_input(capsys, monkeypatch, workdir, argv, message):
    monkeypatch.chdir(workdir)
    before = snapshot(workdir)
    code, out, err = call(capsys, *argv)
    assert (code, out) == (2, "")
    assert err.splitlines() == [message]
    assert snapshot(workdir) == before  # nothing written, nothing replaced


def test_outputs_beside_the_input_are_fine(capsys, monkeypatch, workdir):
    monkeypatch.chdir(workdir)
    assert call(capsys, "solve", "inst.json", "--plan-out", "plan.json")[0] == 0
    assert call(capsys, "split", "inst.json", "parts")[0] == 0
    assert (workdir / "inst.json").read_bytes() == WORKED.read_bytes()
    assert json.loads((workdir / "plan.json").read_text())["stages"]
    assert sorted(p.name for p in (workdir / "parts").iterdir()) == [
        "private-00-a.json", "public.json"]


# --------------------------------------------------------------------------- the reader leaves
@pytest.mark.parametrize("argv", [
    ["solvers"],
    ["solve", "instances/large/large-01.json", "--solver", "uniform", "--format", "json"],
    ["validate", "instances/small"],
], ids=["solvers", "solve", "validate"])
def test_output_into_a_pipe_nobody_reads_ends_quietly_with_exit_0(argv):
    """``chainpipe ... | head``: the reader is gone before the first line; no word, exit 0."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        proc = subprocess.run([sys.executable, "-m", "chainpipe", *argv], cwd=ROOT,
                              stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=120,
                              check=False)
    finally:
        os.close(write_end)
    assert (proc.returncode, proc.stderr) == (0, "")


def test_a_broken_pipe_that_is_not_stdout_is_a_failure(capfd, monkeypatch):
    """Only the reader of stdout leaving is quiet; a solver's own broken pipe is exit 1."""
    solve_module = importlib.import_module("chainpipe.solve")

    def broken(*args, **kwargs):
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(solve_module, "solve", broken)
    assert main(["solve", str(SMALL)]) == 1
    out, err = capfd.readouterr()
    assert (out, err) == ("", "chainpipe: BrokenPipeError: [Errno 32] Broken pipe\n")


# --------------------------------------------------------------------------- Ctrl-C
@pytest.mark.parametrize("argv", [
    ["validate", WORKED],
    ["solve", WORKED],
    ["evaluate", WORKED, WORKED],
    ["split", WORKED, "out"],
], ids=["validate", "solve", "evaluate", "split"])
def test_ctrl_c_in_any_command_is_one_line_and_exit_130(capsys, monkeypatch, tmp_path, argv):
    import chainpipe.cli

    def interrupted(path):
        raise KeyboardInterrupt

    monkeypatch.setattr(chainpipe.cli, "read", interrupted)  # the CLI's reader of instances
    monkeypatch.chdir(tmp_path)
    assert call(capsys, *argv) == (130, "", "interrupted\n")


NAPPER = """
import sys, time
from chainpipe.cli import main
from chainpipe.solve import SOLVERS, SolverInfo

def nap(instance, *, deadline=None, seed=0, threads=1, log=None):
    log("napping")
    time.sleep(60)

SOLVERS["nap"] = SolverInfo("nap", "__main__:nap", False, "sleeps")
raise SystemExit(main(sys.argv[1:]))
"""


def test_sigint_during_a_solve_is_one_line_and_exit_130():
    proc = subprocess.Popen([sys.executable, "-c", NAPPER, "solve", str(SMALL), "--solver",
                             "nap", "--log"], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=sigint_at_default)
    try:
        assert proc.stderr.readline() == "napping\n"  # inside the solve now
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert (proc.returncode, out, err) == (130, "", "interrupted\n")


# --------------------------------------------------------------------------- --log
def test_log_streams_the_dp_trials_on_stderr_and_stdout_stays_one_json_object(capsys):
    code, out, err = call(capsys, "solve", SMALL, "--solver", "dp", "--format", "json", "--log")
    assert code == 0
    assert json.loads(out)["status"] == "optimal"  # the whole of stdout is one object
    lines = err.splitlines()
    assert len(lines) >= 2 and all(line.startswith("dp: trial T < ") for line in lines)
    assert "plan found" in lines[-1]
    code, _, verbose_err = call(capsys, "solve", SMALL, "--solver", "dp", "--format", "json",
                                "--verbose")
    assert code == 0  # --verbose is the same flag: the same trials (timings aside)
    assert [line.split(" (")[0] for line in verbose_err.splitlines()] == [
        line.split(" (")[0] for line in lines]
    assert call(capsys, "solve", SMALL, "--solver", "dp", "--format", "json")[2] == ""
