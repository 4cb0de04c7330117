"""One (instance, solver, seed) run in a process of its own.

:func:`run_spec` is what every executor calls (a thread of the local pool, or a
Dask task on any worker): it starts ``python -m chainpipe.compare.runner``
with the run's specification on stdin, pins the child's thread count, waits
for it at most ``time_limit + kill_margin(time_limit)`` seconds, kills its
whole process group past that, and always returns one record -- the
:class:`~chainpipe.result.Result` dictionary plus what identifies the run. A
killed run is recorded ``no_solution``; a crashed one ``error``. It never
raises for anything the child does.

The child process (:mod:`chainpipe.compare.child`) rebuilds the instance from the JSON it
was sent (so remote workers need no shared file system), imports the solver
function named by ``target`` (``module:function``), runs it, and turns its
:class:`~chainpipe.result.Outcome` into a Result with
:func:`chainpipe.solve.finish`, which re-evaluates the plan with the one cost
model. The result goes to a file named on the command line, so whatever the
solver prints on stdout cannot garble it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

#: environment variables that cap the threads of numeric libraries in the child
THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
               "NUMEXPR_NUM_THREADS", "VECLIB_MAXIMUM_THREADS", "BLIS_NUM_THREADS")

#: keep this much of a failed child's output in its record's message
_LOG_TAIL_CHARS = 600


def kill_margin(time_limit: float) -> float:
    """How far past its limit a run may go before it is killed: ``max(5 s, 20 %)``."""
    return max(5.0, 0.2 * time_limit)


# --------------------------------------------------------------------------- live children
_live: set[subprocess.Popen] = set()
_live_lock = threading.Lock()


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        try:
            proc.kill()
        except ProcessLookupError:
            pass


def kill_all_children() -> None:
    """Kill every run this process has under way (used on Ctrl-C)."""
    with _live_lock:
        procs = list(_live)
    for proc in procs:
        _kill_group(proc)


# --------------------------------------------------------------------------- parent side
def child_env(threads: int) -> dict[str, str]:
    """The child's environment: thread caps, and this interpreter's import path."""
    env = dict(os.environ)
    for var in THREAD_VARS:
        env[var] = str(threads)
    paths = [os.getcwd() if p == "" else p for p in sys.path]
    seen, keep = set(), []
    for p in paths:
        if p not in seen and os.path.isdir(p):
            seen.add(p)
            keep.append(p)
    env["PYTHONPATH"] = os.pathsep.join(keep)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def base_record(spec: dict) -> dict:
    """The fields that identify a run, shared by every record of it."""
    return {
        "instance": spec["instance_name"],
        "solver": spec["solver"],
        "seed": spec["seed"],
        "instance_path": spec["instance_path"],
        "time_limit_s": spec["time_limit"],
        "threads": spec["threads"],
        "exact": spec["exact"],
        "run_key": spec["run_key"],
        **spec["size"],
    }


def failed_record(spec: dict, status: str, message: str, elapsed: float,
                  stats: dict | None = None) -> dict:
    """A record for a run that produced no result of its own (killed, crashed, lost)."""
    rec = {
        "instance": spec["instance_name"], "solver": spec["solver"], "status": status,
        "iteration_time_s": None, "lower_bound_s": None, "gap": None,
        "solve_time_s": float(elapsed), "plan": None, "message": message,
        "stats": dict(stats or {}),
    }
    rec.update(base_record(spec))
    rec["wall_time_s"] = float(elapsed)
    return rec


def _tail(text: str) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    last = lines[-1] if lines else ""
    return last[-_LOG_TAIL_CHARS:]


def run_spec(spec: dict) -> dict:
    """Run one specification in a child process; always returns a record."""
    limit = float(spec["time_limit"])
    deadline = limit + kill_margin(limit)
    payload = json.dumps(spec).encode()
    with tempfile.TemporaryDirectory(prefix="chainpipe-run-") as tmp:
        out_path = Path(tmp) / "result.json"
        start = time.perf_counter()
        try:
            proc = subprocess.Popen(
                [sys.executable, "-m", "chainpipe.compare.child", str(out_path)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                env=child_env(int(spec["threads"])), start_new_session=True,
            )
        except OSError as exc:
            return failed_record(spec, "error", f"could not start the run: {exc}", 0.0)
        with _live_lock:
            _live.add(proc)
        killed = False
        try:
            output, _ = proc.communicate(payload, timeout=deadline)
        except subprocess.TimeoutExpired:
            killed = True
            _kill_group(proc)
            output, _ = proc.communicate()
        finally:
            _kill_group(proc)  # reap anything the solver left behind in its group
            with _live_lock:
                _live.discard(proc)
        elapsed = time.perf_counter() - start
        text = output.decode("utf-8", "replace") if output else ""
        if killed:
            return failed_record(
                spec, "no_solution",
                f"killed after {elapsed:.1f} s: ran past the time limit of {limit:g} s "
                f"plus a margin of {kill_margin(limit):g} s",
                elapsed, {"killed": True},
            )
        if out_path.exists():
            try:
                rec = json.loads(out_path.read_text(encoding="utf-8"))
            except ValueError as exc:
                return failed_record(spec, "error", f"unreadable result from the run: {exc}",
                                     elapsed)
            rec.update(base_record(spec))
            rec["wall_time_s"] = float(elapsed)
            if proc.returncode not in (0, None) and rec.get("status") != "error":
                rec["message"] = (rec.get("message") or "") + \
                    f" (run exited with code {proc.returncode})"
            return rec
        code = proc.returncode
        how = (f"killed by signal {signal.Signals(-code).name}" if code is not None and code < 0
               and -code in signal.valid_signals() else f"exited with code {code}")
        detail = _tail(text)
        return failed_record(spec, "error",
                             f"run crashed ({how})" + (f": {detail}" if detail else ""), elapsed,
                             {"returncode": code})
