"""Child processes that never outlive their parent: the one mechanism every child uses.

A child started by chainpipe (a ``compare`` run, a MIP backend such as CBC) must end
when the process that started it ends, however it ends -- ``SIGKILL`` included, when
no clean-up code of the parent runs. On Linux the kernel does it:
``prctl(PR_SET_PDEATHSIG, SIGKILL)`` in the child asks for ``SIGKILL`` the moment its
parent dies; the child then checks that its parent has not died already (between the
fork and the ``prctl``), by comparing ``getppid()`` with the parent's id.

- A Python child calls :func:`die_with_parent` first thing, with the parent's id
  (given on its command line). Where ``prctl`` is missing (not Linux) or fails, it
  starts instead a watcher thread that polls ``getppid()`` every :data:`WATCH_S`
  seconds and kills the child (and its process group, when it leads one) once the
  parent is gone.
- Another program (CBC) gets :func:`preexec` as ``subprocess.Popen(preexec_fn=...)``:
  the same ``prctl`` and check, run in the child between fork and exec, with ``prctl``
  looked up in the parent beforehand (nothing is imported after the fork). Without
  ``prctl`` it is ``None``: such a child is ended by its parent's own clean-up only.

Linux sends the signal when the *thread* that started the child ends, not only the
process: a child must be started from a thread that outlives it (every caller waits
for its child in the thread that started it).
"""

from __future__ import annotations

import functools
import os
import signal
import sys
import threading
import time
from collections.abc import Callable

#: ``PR_SET_PDEATHSIG`` of ``<linux/prctl.h>``
PR_SET_PDEATHSIG = 1
#: seconds between two looks at the parent in the watcher thread (no ``prctl``)
WATCH_S = 0.2


@functools.cache
def _prctl() -> Callable | None:
    """libc's ``prctl`` on Linux, else ``None``; looked up once."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


def _kill_on_parent_death(prctl: Callable | None) -> bool:
    """Ask the kernel for ``SIGKILL`` when the parent dies; whether it agreed."""
    return prctl is not None and prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0


def die_with_parent(parent_pid: int) -> None:
    """In a Python child: be killed when the process ``parent_pid`` dies.

    Parameters
    ----------
    parent_pid : int
        The parent's process id, as the parent saw it (``os.getpid()`` there).

    Notes
    -----
    Exits at once (status 1) if the parent is already gone. Without ``prctl``, a
    daemon thread (:func:`watch_parent`) does the killing.
    """
    if not _kill_on_parent_death(_prctl()):
        watch_parent(parent_pid)
    if os.getppid() != parent_pid:
        os._exit(1)


def watch_parent(parent_pid: int) -> threading.Thread:
    """Start the watcher thread: kill this process (and the process group it leads, if it
    leads one) within :data:`WATCH_S` seconds of ``parent_pid`` ceasing to be its parent."""
    thread = threading.Thread(target=_watch, args=(parent_pid,), daemon=True,
                              name="chainpipe-lifeline")
    thread.start()
    return thread


def _watch(parent_pid: int) -> None:  # pragma: no cover - ends by killing its process
    while os.getppid() == parent_pid:
        time.sleep(WATCH_S)
    if os.getpgrp() == os.getpid():  # a group of our own: what we started goes too
        os.killpg(0, signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)


def preexec() -> Callable[[], None] | None:
    """A ``preexec_fn`` tying a program's child process to this process, or ``None``.

    Returns
    -------
    callable or None
        Run in the child after the fork: ``prctl(PR_SET_PDEATHSIG, SIGKILL)``, then exit
        (status 1) if this process has already died. ``None`` where there is no ``prctl``.
    """
    prctl = _prctl()
    if prctl is None:
        return None
    parent = os.getpid()

    def run() -> None:  # pragma: no cover - runs in the child, between fork and exec
        _kill_on_parent_death(prctl)
        if os.getppid() != parent:
            os._exit(1)

    return run


__all__ = ["PR_SET_PDEATHSIG", "WATCH_S", "die_with_parent", "preexec", "watch_parent"]
