"""Run a blocking native solve in a worker thread so that Ctrl-C still reaches Python.

A native solver (HiGHS, CP-SAT) called from the main thread holds it until it returns:
Python's SIGINT handler cannot run, so Ctrl-C waits for the time limit. Here the solve
runs in a worker thread while the main thread waits in short slices; on Ctrl-C the
solver is told to stop (``stop()``), the worker joined for at most
:data:`CTRL_C_WAIT_S`, and ``KeyboardInterrupt`` re-raised.
"""

from __future__ import annotations

import threading
import time

#: seconds between two looks at the worker
POLL_S = 0.1

#: seconds Ctrl-C waits for a solver told to stop before giving it up (a HiGHS presolve
#: can ignore its interrupt callback); the daemon thread then ends with the process
CTRL_C_WAIT_S = 2.0


class Abandoned(Exception):
    """The solver ignored ``stop()`` past ``abandon_at``; its thread was left to finish."""


def run_stoppable(target, stop, name: str = "solver", stop_at: float | None = None,
                  abandon_at: float | None = None, poll=None):
    """``target()`` in a worker thread; on Ctrl-C call ``stop()``, wait, re-raise.

    Parameters
    ----------
    target : callable
        The blocking call; its return value is returned.
    stop : callable
        Asks the solver to stop soon (e.g. ``CpSolver.stop_search``).
    name : str
        The worker thread's name.
    stop_at : float, optional
        A time on the monotonic clock at which ``stop()`` is called if the solver is
        still running (a backstop for a backend that overruns its own limit).
    abandon_at : float, optional
        A later monotonic time at which the caller stops waiting (:class:`Abandoned`);
        the worker, already told to stop, finishes on its own. The caller must not
        touch the solver's state afterwards.
    poll : callable, optional
        Called with no argument in the caller's thread every :data:`POLL_S` while the
        worker runs (e.g. to move the solver's own time limit,
        :mod:`chainpipe.solvers.highs`).

    Returns
    -------
    object
        What ``target()`` returned.

    Raises
    ------
    KeyboardInterrupt
        When Ctrl-C was pressed, once the solver stopped or ``CTRL_C_WAIT_S`` passed.
    Abandoned
        When the solver was still running at ``abandon_at``.
    BaseException
        Whatever ``target()`` raised.
    """
    box: dict = {}

    def work():
        try:
            box["value"] = target()
        except BaseException as exc:  # handed to the caller's thread
            box["error"] = exc

    worker = threading.Thread(target=work, name=name, daemon=True)
    worker.start()
    stopped = False
    try:
        while worker.is_alive():
            worker.join(POLL_S)
            now = time.monotonic()
            if poll is not None and worker.is_alive():
                poll()
            if not stopped and stop_at is not None and now >= stop_at:
                stop()
                stopped = True
            if abandon_at is not None and now >= abandon_at and worker.is_alive():
                stop()
                raise Abandoned
    except KeyboardInterrupt:
        stop()
        worker.join(CTRL_C_WAIT_S)
        raise
    if "error" in box:
        raise box["error"]
    return box.get("value")
