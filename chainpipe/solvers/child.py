"""Run a backend program as a child that never outlives the solve.

The child gets its own session (so a terminal's Ctrl-C reaches chainpipe, which then
ends it) and, on Linux, ``PR_SET_PDEATHSIG = SIGKILL`` (:func:`chainpipe.lifeline.preexec`):
the kernel kills it when chainpipe dies, even by ``SIGKILL``. Its output is streamed line by line to ``log``.
It is asked to stop (``SIGINT``, which CBC answers by writing its best solution) when
the deadline passes, and killed :data:`KILL_AFTER` seconds later. On every way out
of :func:`run_child` -- normal end, the deadline, Ctrl-C, an exception, ``SIGTERM``
-- the child's process group is killed and the child reaped.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time

from ..deadline import Deadline
from ..lifeline import preexec as die_with_parent

#: seconds between asking the child to stop (SIGINT) and killing it
KILL_AFTER = 0.5
#: seconds before the deadline at which the child is asked to stop, so that it is
#: killed (if it ignores the request) at most ``KILL_AFTER - STOP_EARLY`` past it
STOP_EARLY = 0.3
#: how often the parent looks at the clock while the child runs
POLL_S = 0.05
#: the longest wait, once the child has ended, for its last lines to be read
DRAIN_S = 5.0


class ChildFailed(RuntimeError):
    """The child could not be started or ended in an unexpected way."""


def run_child(args: list[str], *, deadline: Deadline, log=None, stop_at: float | None = None
              ) -> tuple[int, list[str]]:
    """Run ``args``, streaming output to ``log``; return ``(exit code, output lines)``.

    Parameters
    ----------
    args : list of str
        The program and its arguments.
    deadline : Deadline
        The solve's deadline; the child is asked to stop (SIGINT) at ``stop_at`` seconds
        of the monotonic clock (default: :data:`STOP_EARLY` before the deadline) and killed
        :data:`KILL_AFTER` seconds later.
    log : callable, optional
        Called with each line the child prints (stdout and stderr), without newline.
    stop_at : float, optional
        Monotonic time at which to ask the child to stop.

    Returns
    -------
    tuple of (int, list of str)
        The exit code (negative: killed by that signal) and every line printed.
    """
    if stop_at is None and not deadline.unlimited:
        stop_at = deadline.at - STOP_EARLY
    preexec = die_with_parent()
    lines: list[str] = []
    with _terminate_raises():
        child_end, stream = _output_channel()
        try:
            proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=child_end,
                                    stderr=subprocess.STDOUT, text=True, errors="replace",
                                    bufsize=1, start_new_session=True, preexec_fn=preexec)
        except OSError as exc:
            if stream is not None:
                os.close(child_end)
                stream.close()
            raise ChildFailed(f"cannot run {args[0]}: {exc}") from exc
        if stream is None:
            stream = proc.stdout
        else:
            os.close(child_end)  # the child holds it now; EOF comes when the child ends
        reader = threading.Thread(target=_read_lines, args=(stream, lines, log), daemon=True)
        reader.start()
        try:
            _wait(proc, stop_at)
        finally:
            _end(proc)
            # the child and its group are gone: EOF follows the last line at once; the
            # wait is bounded for a reader starved of CPU on a loaded machine
            reader.join(timeout=DRAIN_S)
            with contextlib.suppress(Exception):
                stream.close()
    return proc.returncode, lines


def _output_channel():
    """``(child's end, parent's text stream)``: a pseudo-terminal where there is one.

    A program writing to a pipe buffers its output in blocks (CBC's lines would
    arrive only when it exits, or never if it is killed); on a terminal it writes
    line by line. Without a pseudo-terminal: ``(subprocess.PIPE, None)``.
    """
    try:
        parent, child = os.openpty()
    except (AttributeError, OSError):
        return subprocess.PIPE, None
    return child, open(parent, encoding="utf-8", errors="replace", newline=None)


def _read_lines(stream, lines: list[str], log) -> None:
    # OSError (EIO) is how a pseudo-terminal says that the child has gone
    with contextlib.suppress(ValueError, OSError):
        for line in stream:
            line = line.rstrip("\r\n")
            lines.append(line)
            if log is not None:
                log(line)


def _wait(proc: subprocess.Popen, stop_at: float | None) -> None:
    """Wait for ``proc``; SIGINT it at ``stop_at``, SIGKILL it ``KILL_AFTER`` later."""
    asked = None
    while True:
        try:
            proc.wait(timeout=POLL_S)
            return
        except subprocess.TimeoutExpired:
            pass
        now = time.monotonic()
        if stop_at is not None and asked is None and now >= stop_at:
            _signal_group(proc, signal.SIGINT)
            asked = now
        elif asked is not None and now >= asked + KILL_AFTER:
            _signal_group(proc, signal.SIGKILL)
            proc.wait()
            return


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)


def _end(proc: subprocess.Popen) -> None:
    """Kill the child's whole process group (if anything is left) and reap the child."""
    _signal_group(proc, signal.SIGKILL)
    with contextlib.suppress(Exception):
        proc.wait(timeout=5)


class Terminated(SystemExit):
    """SIGTERM arrived while a child ran: unwind (ending the child, removing files), then exit."""


@contextlib.contextmanager
def _terminate_raises():
    """While a child runs, make SIGTERM unwind the stack instead of killing Python outright.

    Only when Python's default disposition is in place and we are on the main thread
    (signal handlers can only be set there); a handler someone else installed is kept.
    """
    main = threading.current_thread() is threading.main_thread()
    previous = signal.getsignal(signal.SIGTERM) if main else None
    if previous is not signal.SIG_DFL:
        yield
        return

    def handler(signum, frame):
        raise Terminated(128 + signum)

    signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
