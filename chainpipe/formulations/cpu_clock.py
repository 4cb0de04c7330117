"""The CPU clock a solve's CPU limit is read on: this process and the children it ran.

:class:`~chainpipe.formulations.pipelines.CpuPhase` and HiGHS's limits
(:mod:`chainpipe.solvers.highs`) read :func:`cpu_clock`: this process's CPU time
(:func:`time.process_time`, every thread), plus that of its children already reaped
(``RUSAGE_CHILDREN``: a CBC run, a HiGHS solve in a forked child,
:mod:`chainpipe.solvers.forked`), plus that of the children still running that
:func:`watch` was told of (read from ``/proc``). A sub-solve moved into a child process
is then counted as if it had run in a thread, and a child killed at the limit leaves no
CPU second unseen: what the benchmark measures (``RUSAGE_SELF`` plus
``RUSAGE_CHILDREN``, ``benchmarks/formulations.py``) is what the limit is held to.

In a forked child, :func:`start_child` sets the clock to go on from the parent's
reading at the fork (a new process starts at 0 CPU seconds), so deadlines copied
into the child end at the same CPU reading as in the parent.
"""

from __future__ import annotations

import os
import resource
import time

#: the parent's reading at the fork, in a forked child (``None`` in the parent)
_base: float | None = None
#: children still running whose CPU time counts: process id -> a readable stat file
_live: dict[int, str] = {}
_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def cpu_clock() -> float:
    """CPU seconds of this process, its reaped children and its watched live ones.

    Returns
    -------
    float
        Seconds; only differences mean anything.
    """
    if _base is not None:
        return _base + time.process_time()
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    total = time.process_time() + kids.ru_utime + kids.ru_stime
    for path in _live.values():
        total += _stat_seconds(path)
    return total


def _stat_seconds(path: str) -> float:
    """``utime + stime`` of a live process from its ``/proc/<pid>/stat`` (0 once gone)."""
    try:
        with open(path, "rb") as f:
            text = f.read()
    except OSError:
        return 0.0
    # the command name (field 2) may hold spaces: fields 14, 15 counted after its ')'
    fields = text[text.rfind(b")") + 2:].split()
    try:
        return (int(fields[11]) + int(fields[12])) / _TICK
    except (IndexError, ValueError):
        return 0.0


def watch(pid: int) -> None:
    """Count the running child ``pid``'s CPU time until :func:`reaped` (Linux only:
    elsewhere it counts once reaped)."""
    path = f"/proc/{pid}/stat"
    if os.path.exists(path):
        _live[pid] = path


def reaped(pid: int) -> None:
    """``pid`` has been waited for: its CPU time is in ``RUSAGE_CHILDREN`` now."""
    _live.pop(pid, None)


def start_child(parent_reading: float) -> None:
    """In a forked child, first thing: the clock goes on from ``parent_reading``.

    Parameters
    ----------
    parent_reading : float
        :func:`cpu_clock` in the parent just before the fork.
    """
    global _base
    _base = parent_reading - time.process_time()
    _live.clear()
