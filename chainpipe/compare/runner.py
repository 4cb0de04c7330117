"""One (instance, solver, seed) run in a process of its own.

:func:`run_spec` is what every executor calls (a thread of the local pool, or a
Dask task on any worker): it starts ``python -m chainpipe.compare.child`` in a
new session (its own process group), tied to this process's life
(:mod:`chainpipe.lifeline`: it dies if this process dies, even by ``SIGKILL``), with
the run's specification on stdin,
pins the child's thread count, waits for it at most ``time_limit +
kill_margin(time_limit)`` seconds, kills its whole process group past that (and
always once the run is over, so nothing a solver started outlives it), and
returns one record -- the :class:`~chainpipe.result.Result` dictionary plus
what identifies the run. It never raises for anything the child does.

The child writes its result as JSON on its standard output and sends
everything a solver prints (Python or native code) to its standard error, so
no temporary file is needed and a solver's own output cannot garble the
result. A run that crashes is recorded ``error`` with the last line it
printed; a run killed past its limit is recorded ``no_solution`` with
``stats["killed"] = True``, and its ``solve_time_s`` (like ``wall_time_s``) is
the wall-clock time from its start until it was killed, so it is always more
than the limit; the comparison charges such a run the time limit.

:func:`stop_all` kills every run under way and refuses to start new ones: the
sweep calls it on Ctrl-C and SIGTERM.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

#: environment variables that cap the threads of numeric libraries in the child
THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
               "NUMEXPR_NUM_THREADS", "VECLIB_MAXIMUM_THREADS", "BLIS_NUM_THREADS")

#: keep this much of a failed child's output in its record's message
_LOG_TAIL_CHARS = 600
#: the longest single wait for a child, seconds: ``poll`` takes at most 2**31 - 1 ms
#: (24.8 days), so a longer limit (up to ``1e308`` s: "no practical limit") is waited
#: out in steps of this length
WAIT_STEP_S = 86_400.0


def kill_margin(time_limit: float) -> float:
    """How far past its limit a run may go before it is killed.

    Parameters
    ----------
    time_limit : float
        The run's time limit in seconds.

    Returns
    -------
    float
        ``max(5 s, 20 % of the limit)``: room for starting Python, importing the
        solver and re-evaluating its plan, which the solver's own limit does not
        cover. A run still going at ``time_limit + kill_margin(time_limit)`` has
        its process group killed.
    """
    return max(5.0, 0.2 * time_limit)


# --------------------------------------------------------------------------- live children
_live: set[subprocess.Popen] = set()
_live_lock = threading.Lock()
_stopping = False


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        try:
            proc.kill()
        except ProcessLookupError:
            pass


def allow_runs() -> None:
    """Let :func:`run_spec` start runs again (a new sweep after :func:`stop_all`)."""
    global _stopping
    with _live_lock:
        _stopping = False


def stop_all() -> None:
    """Kill the process group of every run under way, and start no new run.

    Used on Ctrl-C and SIGTERM: a run whose thread is about to start its child
    kills it as soon as it exists. :func:`allow_runs` lifts the stop.
    """
    global _stopping
    with _live_lock:
        _stopping = True
        procs = list(_live)
    for proc in procs:
        _kill_group(proc)


def _register(proc: subprocess.Popen) -> bool:
    """Track a started child; ``False`` (and the child killed) if the sweep is stopping."""
    with _live_lock:
        _live.add(proc)
        stopping = _stopping
    if stopping:
        _kill_group(proc)
    return not stopping


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
        "instance_sha256": spec["instance_sha256"],
        "time_limit_s": spec["time_limit"],
        "threads": spec["threads"],
        "options": spec["options"],
        "exact": spec["exact"],
        "run_key": spec["run_key"],
        **spec["size"],
    }


def failed_record(spec: dict, status: str, message: str, elapsed: float,
                  stats: dict | None = None) -> dict:
    """A record for a run that produced no result of its own (killed, crashed, lost).

    Its ``solve_time_s`` and ``wall_time_s`` are both ``elapsed``: the wall-clock
    seconds from the run's start until it ended or was killed. An ``error`` record
    (not started, crashed, unreadable, lost by the executor) is marked
    ``stats["retry"]``: a resumed sweep runs it again instead of reusing the failure.
    A run killed past its limit is a result (``no_solution``) and is kept.
    """
    rec = {
        "instance": spec["instance_name"], "solver": spec["solver"], "status": status,
        "iteration_time_s": None, "lower_bound_s": None, "gap": None,
        "solve_time_s": float(elapsed), "plan": None, "message": message,
        "stats": {**(stats or {}), **({"retry": True} if status == "error" else {})},
    }
    rec.update(base_record(spec))
    rec["wall_time_s"] = float(elapsed)
    return rec


def _tail(text: str) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    last = lines[-1] if lines else ""
    return last[-_LOG_TAIL_CHARS:]


def _communicate(proc: subprocess.Popen, payload: bytes | None, seconds: float):
    """``proc.communicate(payload)`` for at most ``seconds`` (any finite or infinite
    number), waited out in steps of :data:`WAIT_STEP_S`.

    Raises
    ------
    subprocess.TimeoutExpired
        The child still runs after ``seconds``.
    """
    end = time.monotonic() + seconds
    while True:
        step = min(WAIT_STEP_S, max(0.0, end - time.monotonic()))
        try:
            return proc.communicate(payload, timeout=step)
        except subprocess.TimeoutExpired:
            if time.monotonic() >= end:
                raise
        payload = None  # sent by the first call; communicate() keeps what is left to send


def run_spec(spec: dict) -> dict:
    """Run one specification in a child process; always returns a record.

    Parameters
    ----------
    spec : dict
        One entry of :func:`chainpipe.compare.sweep.plan_runs`.

    Returns
    -------
    dict
        The run's :class:`~chainpipe.result.Result` dictionary with the fields of
        :func:`base_record` and ``wall_time_s``; a run killed past its limit plus
        :func:`kill_margin` is ``no_solution`` with ``stats["killed"]``, a crashed
        one ``error``.
    """
    limit = float(spec["time_limit"])
    deadline = limit + kill_margin(limit)
    payload = json.dumps(spec).encode()
    if _stopping:
        return failed_record(spec, "error", "not started: the sweep was interrupted", 0.0)
    start = time.perf_counter()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "chainpipe.compare.child", str(os.getpid())],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env=child_env(int(spec["threads"])), start_new_session=True,
        )
    except OSError as exc:
        return failed_record(spec, "error", f"could not start the run: {exc}", 0.0)
    killed = False
    try:
        if not _register(proc):
            payload = None
        output, log = _communicate(proc, payload, deadline)
    except subprocess.TimeoutExpired:
        killed = True
        _kill_group(proc)
        output, log = proc.communicate()
    finally:
        _kill_group(proc)  # reap anything the solver left behind in its group
        with _live_lock:
            _live.discard(proc)
    elapsed = time.perf_counter() - start
    if killed:
        return failed_record(
            spec, "no_solution",
            f"killed after {elapsed:.1f} s: ran past the time limit of {limit:g} s "
            f"plus a margin of {kill_margin(limit):g} s",
            elapsed, {"killed": True},
        )
    if output:
        try:
            rec = json.loads(output.decode("utf-8"))
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
    detail = _tail(log.decode("utf-8", "replace") if log else "")
    return failed_record(spec, "error",
                         f"run crashed ({how})" + (f": {detail}" if detail else ""), elapsed,
                         {"returncode": code})
