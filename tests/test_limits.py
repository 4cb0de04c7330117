"""Time limits cover the whole solve; backend children die with the solve; logs stream."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from chainpipe.deadline import Deadline, TimeUp
from chainpipe.io import read
from chainpipe.solve import solve
from chainpipe.tables import CostTables
from helpers import random_instance, sigint_at_default

ROOT = Path(__file__).resolve().parent.parent
LARGE = ROOT / "instances" / "large" / "large-01.json"
# CBC starts on it in about 1.4 s (on LARGE after 6.4 s) and runs for more than 19 s
CBC_BUSY = ROOT / "instances" / "medium" / "medium-05-pool-2dc.json"
ROUTES = [("ilp-assign", {}), ("ilp-path", {}), ("ilp-path", {"backend": "cbc"}), ("cpsat", {})]


def test_builders_stop_on_a_spent_deadline():
    from chainpipe.formulations.cpsat import CpsatModel
    from chainpipe.formulations.ilp_assign import AssignFormulation
    from chainpipe.formulations.ilp_path import PathFormulation

    tables = CostTables(random_instance(3, max_layers=6))
    spent = Deadline(0.0)
    with pytest.raises(TimeUp):
        PathFormulation(tables, check=spent.check)
    with pytest.raises(TimeUp):
        AssignFormulation(tables, check=spent.check).build()
    with pytest.raises(TimeUp):
        CpsatModel.build(tables, None, check=spent.check)


def test_a_backend_is_never_given_zero_seconds():
    from chainpipe.solvers.cbc import cbc_options
    from chainpipe.solvers.mip import backend_seconds

    assert backend_seconds(Deadline(0.0)) > 0
    assert backend_seconds(Deadline(None)) is None
    opts = cbc_options(False, 0.0, 0, 1)
    assert float(opts[opts.index("-sec") + 1]) > 0


@pytest.mark.parametrize("solver,options", ROUTES, ids=lambda x: str(x))
def test_large_instance_answers_within_the_limit(solver, options):
    limit = 2.0
    inst = read(LARGE)
    start = time.monotonic()
    r = solve(inst, solver, time_limit=limit, **options)
    wall = time.monotonic() - start
    # the target is limit + 1 s + 5 % (benchmarks/limits.py measures it); one more second
    # absorbs a loaded CI machine (two test workers on two cores). Before the fix the
    # build alone took 9 s (path ILP) to 18 s (CP-SAT) on this instance.
    assert wall <= limit * 1.05 + 2.0, (solver, options, wall)
    assert r.status in ("feasible", "no_solution", "optimal"), r.message
    if r.lower_bound is not None and r.iteration_time is not None:
        assert 0 <= r.lower_bound <= r.iteration_time


# ---------------------------------------------------------------- child processes
def _cbc_pids(marker: str) -> list[int]:
    """Live processes whose command line mentions ``marker`` (the private temp dir)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (entry / "stat").read_text().split()[2]
        except OSError:
            continue
        if marker in cmd and "cbc" in cmd and state != "Z":
            pids.append(int(entry.name))
    return pids


def _start_parent(tmp_path: Path, limit: float = 120.0) -> subprocess.Popen:
    code = textwrap.dedent(f"""
        from chainpipe.io import read
        from chainpipe.solve import solve
        solve(read({str(CBC_BUSY)!r}), "ilp-path", time_limit={limit}, backend="cbc")
    """)
    env = dict(os.environ, TMPDIR=str(tmp_path), PYTHONPATH=str(ROOT))
    return subprocess.Popen([sys.executable, "-c", code], env=env, cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            preexec_fn=sigint_at_default)


def _wait_for_cbc(parent: subprocess.Popen, marker: str, timeout: float = 60.0) -> list[int]:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        pids = _cbc_pids(marker)
        if pids:
            return pids
        if parent.poll() is not None:
            pytest.fail("the solve ended before CBC started: " + parent.stderr.read().decode())
        time.sleep(0.1)
    parent.kill()
    pytest.fail("CBC never started")


def _gone(pids: list[int], timeout: float = 5.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        alive = [p for p in pids if _alive(p)]
        if not alive:
            return True
        time.sleep(0.05)
    return False


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc and PDEATHSIG")
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM, signal.SIGINT],
                         ids=lambda s: signal.Signals(s).name)
def test_cbc_dies_with_chainpipe(tmp_path, sig):
    parent = _start_parent(tmp_path)
    pids = _wait_for_cbc(parent, str(tmp_path))
    parent.send_signal(sig)
    parent.wait(timeout=30)
    try:
        assert _gone(pids), f"cbc {pids} outlived chainpipe killed by {signal.Signals(sig).name}"
    finally:
        for p in pids:
            if _alive(p):
                os.kill(p, signal.SIGKILL)
    if sig != signal.SIGKILL:  # with SIGKILL nothing can run to remove files
        assert not list(tmp_path.glob("chainpipe-cbc-*")), list(tmp_path.iterdir())


def test_cbc_leaves_no_file_and_no_child_on_the_limit(tmp_path, monkeypatch):
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    r = solve(random_instance(501, max_layers=22, max_dcs=4, max_types=3, max_count=5),
              "ilp-path", backend="cbc", time_limit=0.3)
    assert r.status in ("optimal", "feasible", "no_solution", "infeasible")
    assert not list(tmp_path.iterdir())
    assert not _cbc_pids(str(tmp_path))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="signals")
def test_ctrl_c_stops_highs_in_process(tmp_path):
    code = textwrap.dedent(f"""
        import sys
        from chainpipe.io import read
        from chainpipe.solve import solve
        def log(line):
            print(line, file=sys.stderr, flush=True)
        try:
            solve(read({str(LARGE)!r}), "ilp-assign", time_limit=120, log=log)
        except KeyboardInterrupt:
            print("interrupted", flush=True)
    """)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    parent = subprocess.Popen([sys.executable, "-c", code], env=env, cwd=ROOT, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              preexec_fn=sigint_at_default)
    for line in parent.stderr:  # HiGHS is running once it logs its presolve
        if "Presolving" in line or "presolve" in line.lower():
            break
    time.sleep(0.5)
    parent.send_signal(signal.SIGINT)
    try:
        out, _ = parent.communicate(timeout=5)
    except subprocess.TimeoutExpired:
        parent.kill()
        pytest.fail("Ctrl-C did not stop HiGHS within 5 s")
    assert "interrupted" in out


# ---------------------------------------------------------------- logs
@pytest.mark.parametrize("solver,options,word", [
    ("ilp-assign", {}, "HiGHS"), ("ilp-path", {}, "HiGHS"),
    ("ilp-path", {"backend": "cbc"}, "Cbc"), ("cpsat", {}, "CP-SAT"),
], ids=lambda x: str(x))
def test_backend_log_lines_reach_log_and_nothing_reaches_stdout(capfd, solver, options, word):
    inst = random_instance(7, max_layers=5)
    lines: list[str] = []
    r = solve(inst, solver, log=lines.append, **options)
    assert r.status in ("optimal", "infeasible")
    out, _ = capfd.readouterr()
    assert out == ""
    if r.status == "optimal":
        assert lines and all(isinstance(x, str) and "\n" not in x for x in lines)
        assert any(word.lower() in x.lower() for x in lines), lines[:5]


def test_without_log_nothing_is_printed(capfd):
    inst = random_instance(7, max_layers=5)
    for solver, options in ROUTES:
        solve(inst, solver, **options)
    out, err = capfd.readouterr()
    assert out == "" and err == ""


@pytest.mark.parametrize("solver,options", [
    ("ilp-path", {"msg": True}), ("ilp-path", {"msg": True, "backend": "cbc"}),
    ("cpsat", {"log_search_progress": True}),
], ids=lambda x: str(x))
def test_log_options_without_log_write_to_stderr_only(capfd, solver, options):
    solve(random_instance(7, max_layers=5), solver, **options)
    out, err = capfd.readouterr()
    assert out == ""
    assert err.strip()


def test_child_output_streams_and_the_child_is_stopped_at_the_deadline():
    # a program that prints a line and hangs: on a pipe its line would sit in its buffer
    # and die with it; the line must arrive, and the child must end soon after the deadline
    from chainpipe.solvers.child import KILL_AFTER, run_child

    # stdout reopened as C programs have it: line-buffered on a terminal, else in blocks
    code = ("import os, signal, sys, time; signal.signal(signal.SIGINT, signal.SIG_IGN); "
            "sys.stdout = os.fdopen(1, 'w'); print('first'); time.sleep(60)")
    # the deadline leaves the child's interpreter time to start and ignore SIGINT (a
    # clean-clone run at load 9 once took more than 0.5 s: the child died of SIGINT)
    seen: list[str] = []
    start = time.monotonic()
    rc, lines = run_child([sys.executable, "-c", code], deadline=Deadline(3.0), log=seen.append)
    assert time.monotonic() - start < 3.0 + KILL_AFTER + 2.0
    assert rc == -signal.SIGKILL
    assert seen == ["first"] == lines
