"""Run a native solve in a forked child that is killed when its limit has passed.

HiGHS 1.14's MIP does some root-node work after its presolve that reads neither the
interrupt callbacks nor its own ``time_limit`` (``docs/formulations.md``, "Twentieth
round": 3.4-3.9 CPU s past a run's 120 on fresh ``-02``-like seed 16, 26 s past a
phase's end on that seed's four-DC block). A thread cannot be stopped from outside, so
such a solve runs here in a child made by :func:`os.fork` (the model is inherited, not
copied; a fork takes milliseconds to tens of them): the child runs ``work`` as it would have run in
this process and sends back what it reports and its answer, and the parent kills it
(``SIGKILL``) once the deadline's CPU end plus :data:`KILL_GRACE_CPU` or the run's CPU
end plus :data:`KILL_GRACE_RUN` (:func:`~chainpipe.formulations.cpu_clock.cpu_clock`,
which counts the child) or the wall-clock deadline plus ``abandon_s`` has passed. The
child is reaped on every way out, so its CPU seconds are counted (``RUSAGE_CHILDREN``),
and it dies with this process (``PR_SET_PDEATHSIG``, :mod:`chainpipe.lifeline`). Ctrl-C
reaches this process only (the child ignores ``SIGINT``): the child is killed and
``KeyboardInterrupt`` re-raised.
"""

from __future__ import annotations

import math
import os
import pickle
import select
import signal
import struct
import threading
import time
import traceback

from ..deadline import Deadline
from ..formulations import cpu_clock as clock
from ..lifeline import preexec

#: CPU seconds past the deadline's CPU end at which the child is killed: enough for a
#: backend stopped by its interrupt at that end to send its answer
KILL_GRACE_CPU = 0.5
#: CPU seconds past the run's CPU end (the outermost phase's) at which it is killed
KILL_GRACE_RUN = 0.05
#: seconds between two looks at the clocks while the child runs
POLL_S = 0.02
_HEADER = struct.Struct("!I")


class Killed(Exception):
    """The child was killed at its limit (or ended without an answer); ``str``: why."""


def kill_points(deadline: Deadline, abandon_s: float) -> tuple[float, float]:
    """``(CPU reading, monotonic time)`` at which a child solving under ``deadline`` is
    killed (``inf``: never on that clock).

    Parameters
    ----------
    deadline : Deadline
        The sub-solve's deadline (a :class:`~chainpipe.formulations.pipelines.CpuPhase`
        or a wall-clock one).
    abandon_s : float
        Seconds past the wall-clock deadline.

    Returns
    -------
    tuple of float
    """
    cpu = deadline.cpu_end() + KILL_GRACE_CPU
    run_end = getattr(deadline, "run_cpu_end", None)
    if run_end is not None:
        cpu = min(cpu, run_end() + KILL_GRACE_RUN)
    wall = math.inf if deadline.unlimited else deadline.at + abandon_s
    return cpu, wall


def run_forked(work, *, kill_cpu: float, kill_wall: float, on_event=None):
    """``work(emit)`` in a forked child; its return value, or :class:`Killed`.

    Parameters
    ----------
    work : callable
        Called in the child with ``emit``; ``emit(event)`` sends a picklable ``event`` to
        ``on_event`` in this process (from any of the child's threads). Its return value
        must be picklable.
    kill_cpu, kill_wall : float
        The child is killed once :func:`~chainpipe.formulations.cpu_clock.cpu_clock`
        reaches ``kill_cpu`` or the monotonic clock ``kill_wall``.
    on_event : callable, optional
        Called in this process with each event, in order.

    Returns
    -------
    object
        What ``work`` returned.

    Raises
    ------
    Killed
        When the child was killed at a limit or ended without an answer.
    KeyboardInterrupt
        On Ctrl-C, once the child is killed and reaped.
    Exception
        What ``work`` raised (as ``RuntimeError`` when it cannot be pickled).
    """
    reading = clock.cpu_clock()
    tie = preexec()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child; it never returns
        os.close(r)
        _child(work, w, reading, tie)
    os.close(w)
    clock.watch(pid)
    try:
        return _parent(pid, r, kill_cpu, kill_wall, on_event)
    finally:
        os.close(r)
        _reap(pid)


def _child(work, w: int, reading: float, tie) -> None:  # pragma: no cover - in the child
    """The child's whole life: run ``work``, send its answer, leave by ``os._exit``."""
    code = 0
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        if tie is not None:
            tie()
        clock.start_child(reading)
        lock = threading.Lock()

        def emit(kind, payload):
            data = pickle.dumps((kind, payload), protocol=pickle.HIGHEST_PROTOCOL)
            with lock:
                _write_all(w, _HEADER.pack(len(data)) + data)

        try:
            value = work(lambda event: emit("event", event))
        except Exception as exc:
            try:
                pickle.dumps(exc)
            except Exception:
                exc = RuntimeError("".join(traceback.format_exception_only(exc)).strip())
            emit("error", exc)
        else:
            emit("done", value)
    except BaseException:
        code = 1
    finally:
        os._exit(code)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _parent(pid: int, r: int, kill_cpu: float, kill_wall: float, on_event):
    """Read the child's frames until its answer; kill it at a limit (:class:`Killed`)."""
    buf = bytearray()
    while True:
        ready, _, _ = select.select([r], [], [], POLL_S)
        if ready:
            chunk = os.read(r, 1 << 20)
            if not chunk:
                raise Killed("the child ended without an answer")
            buf += chunk
            while len(buf) >= _HEADER.size:
                (size,) = _HEADER.unpack_from(buf)
                if len(buf) < _HEADER.size + size:
                    break
                kind, payload = pickle.loads(bytes(buf[_HEADER.size:_HEADER.size + size]))
                del buf[:_HEADER.size + size]
                if kind == "done":
                    return payload
                if kind == "error":
                    raise payload
                if on_event is not None:
                    on_event(payload)
        if clock.cpu_clock() >= kill_cpu:
            raise Killed("killed at the CPU limit")
        if time.monotonic() >= kill_wall:
            raise Killed("killed at the wall-clock limit")


def _reap(pid: int) -> None:
    """Kill the child if it is still there and wait for it (its CPU then counted)."""
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    while True:
        try:
            os.waitpid(pid, 0)
            break
        except ChildProcessError:
            break
        except InterruptedError:
            continue
    clock.reaped(pid)
