"""Python work in a forked child: the one way chainpipe forks itself.

A child made by :func:`os.fork` inherits the parent's state (built tables, a model,
the loaded kernels) without copying it, and a fork takes milliseconds. :class:`Fork`
starts ``work(emit)`` in such a child at once; the child sends back, over a pipe, the
events ``emit`` is given and then its answer (``work``'s value or what it raised), and
leaves by :func:`os._exit`. The child

- dies with the process that forked it (:func:`chainpipe.lifeline.die_with_parent`:
  ``PR_SET_PDEATHSIG``, or a watcher thread without it);
- ignores ``SIGINT``: Ctrl-C reaches the parent, which kills it;
- goes on from the parent's CPU reading (:func:`~chainpipe.formulations.cpu_clock.start_child`),
  and its CPU seconds count on the parent's clock while it runs and once reaped
  (:func:`~chainpipe.formulations.cpu_clock.watch`).

:meth:`Fork.stop` (and leaving its ``with`` block) kills the child if it still runs and
reaps it, on every way out. Two callers build on it:

- :func:`run_forked`, a native solve that must be stopped from outside: HiGHS 1.14's MIP
  does some root-node work after its presolve that reads neither the interrupt
  callbacks nor its own ``time_limit`` (``docs/formulations.md``, "Twentieth round":
  3.4-3.9 CPU s past a run's 120 on fresh ``-02``-like seed 16). A thread cannot be
  stopped from outside; a child is killed (``SIGKILL``) once the deadline's CPU end
  plus :data:`KILL_GRACE_CPU`, the run's CPU end plus :data:`KILL_GRACE_RUN` or the
  wall-clock deadline plus ``abandon_s`` has passed;
- :mod:`chainpipe.solvers.dp_parallel`, ``dp``'s trials and searches side by side.
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
from ..lifeline import die_with_parent

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


class Fork:
    """``work(emit)`` run at once in a forked child (module docstring).

    Parameters
    ----------
    work : callable
        Called in the child with ``emit``; ``emit(event)`` sends a picklable ``event`` to
        ``on_event`` here (from any of the child's threads). Its value must be picklable
        (an exception it raises that is not is sent as ``RuntimeError``).
    on_event : callable, optional
        Called here with each event, in order, as :meth:`take` reads them.

    Attributes
    ----------
    outcome : tuple or None
        ``("done", value)``, ``("error", exception)`` or ``("gone", None)`` (the child
        ended without an answer: killed, out of memory) once known, else ``None``.
    """

    def __init__(self, work, on_event=None):
        reading, parent = clock.cpu_clock(), os.getpid()
        r, w = os.pipe()
        # SIGINT blocked across the fork: a Ctrl-C before the child ignores it waits in
        # the parent (delivered there once unblocked) and never kills the child
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            pid = os.fork()
            if pid == 0:  # pragma: no cover - the child; it never returns
                os.close(r)
                _child(work, w, reading, parent, mask)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        os.close(w)
        clock.watch(pid)
        self.pid, self._fd, self._buf, self._on_event = pid, r, bytearray(), on_event
        self.outcome = None

    def fileno(self) -> int:
        """The pipe's end this process reads (for :func:`select.select` and
        :func:`multiprocessing.connection.wait`)."""
        return self._fd

    def take(self) -> tuple | None:
        """Read what the child has sent (call when :meth:`fileno` is readable: it blocks
        otherwise); :attr:`outcome`, ``None`` while the answer is still to come."""
        if self.outcome is not None:
            return self.outcome
        chunk = os.read(self._fd, 1 << 20)
        if not chunk:
            self.outcome = ("gone", None)
            return self.outcome
        self._buf += chunk
        while self.outcome is None and len(self._buf) >= _HEADER.size:
            (size,) = _HEADER.unpack_from(self._buf)
            if len(self._buf) < _HEADER.size + size:
                break
            kind, payload = pickle.loads(bytes(self._buf[_HEADER.size:_HEADER.size + size]))
            del self._buf[:_HEADER.size + size]
            if kind == "event":
                if self._on_event is not None:
                    self._on_event(payload)
            else:
                self.outcome = (kind, payload)
        return self.outcome

    def wait(self, timeout: float | None) -> tuple | None:
        """:attr:`outcome`, waiting for it at most ``timeout`` seconds (``None``: as long
        as it takes); ``None`` if it has not come by then."""
        end = None if timeout is None else time.monotonic() + timeout
        while self.outcome is None:
            left = None if end is None else max(end - time.monotonic(), 0.0)
            ready, _, _ = select.select([self._fd], [], [], left)
            if ready:
                self.take()
            elif end is not None:
                break
        return self.outcome

    def value(self):
        """What ``work`` returned, once :attr:`outcome` is known; raises what it raised,
        or :class:`Killed` if the child ended without an answer."""
        kind, payload = self.outcome
        if kind == "done":
            return payload
        if kind == "error":
            raise payload
        raise Killed("the child ended without an answer")

    def stop(self) -> None:
        """Kill the child if it still runs, reap it (its CPU is then counted) and close
        the pipe; again: nothing."""
        if self._fd is None:
            return
        _reap(self.pid)
        os.close(self._fd)
        self._fd = None

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


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
    """``work(emit)`` in a forked child (:class:`Fork`); its value, or :class:`Killed`.

    Parameters
    ----------
    work : callable
        As :class:`Fork`'s.
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
    with Fork(work, on_event) as child:
        while child.wait(POLL_S) is None:
            if clock.cpu_clock() >= kill_cpu:
                raise Killed("killed at the CPU limit")
            if time.monotonic() >= kill_wall:
                raise Killed("killed at the wall-clock limit")
        return child.value()


def _child(work, w: int, reading: float, parent: int, mask) -> None:  # pragma: no cover
    """The child's whole life: ignore ``SIGINT`` (then restore the parent's signal mask,
    ``mask``), run ``work``, send its answer, leave by ``os._exit``."""
    code = 0
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # (the forking thread is its main one)
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        die_with_parent(parent)
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
