"""The one fork mechanism (:class:`chainpipe.solvers.forked.Fork`), which both the HiGHS
child solves (:func:`~chainpipe.solvers.forked.run_forked`) and ``dp``'s side-by-side
searches (:mod:`chainpipe.solvers.dp_parallel`) use: events in order, the answer or
what was raised, a child that ends without a word, and no child left behind on any way
out (a stop, a kill at the limit, a child started from a thread)."""

from __future__ import annotations

import math
import os
import signal
import threading
import time

import psutil
import pytest

from chainpipe.solvers.forked import Fork, Killed, run_forked

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")


def _children() -> set:
    return {c.pid for c in psutil.Process(os.getpid()).children(recursive=True)
            if c.is_running() and c.status() != psutil.STATUS_ZOMBIE}


class _Unpicklable(Exception):
    def __reduce__(self):
        raise TypeError("no pickling")


def test_events_come_in_order_then_the_value():
    seen = []
    got = run_forked(lambda emit: [emit(k) for k in range(50)] and os.getpid(),
                     kill_cpu=math.inf, kill_wall=time.monotonic() + 30, on_event=seen.append)
    assert seen == list(range(50))
    assert got != os.getpid()  # it ran in another process


def test_what_the_work_raised_is_raised_here():
    with pytest.raises(ValueError, match="seven"):
        run_forked(lambda emit: int("seven"), kill_cpu=math.inf, kill_wall=math.inf)
    with pytest.raises(RuntimeError, match="_Unpicklable"):
        run_forked(lambda emit: (_ for _ in ()).throw(_Unpicklable("x")),
                   kill_cpu=math.inf, kill_wall=math.inf)


def test_a_child_that_ends_without_a_word_is_gone():
    with Fork(lambda emit: os._exit(3)) as child:
        assert child.wait(10) == ("gone", None)
        with pytest.raises(Killed):
            child.value()


def test_a_child_past_its_wall_limit_is_killed_and_reaped():
    before = _children()
    t0 = time.monotonic()
    with pytest.raises(Killed, match="wall-clock"):
        run_forked(lambda emit: time.sleep(30), kill_cpu=math.inf,
                   kill_wall=time.monotonic() + 0.3)
    assert time.monotonic() - t0 < 5
    assert _children() <= before


def test_wait_times_out_and_stop_kills_the_child():
    before = _children()
    child = Fork(lambda emit: time.sleep(30))
    assert child.wait(0.1) is None and child.outcome is None
    assert child.pid in _children()
    child.stop()
    child.stop()  # again: nothing
    assert _children() <= before


def test_the_child_ignores_ctrl_c_and_a_fork_from_a_thread_works():
    """``SIGINT`` goes to the parent only; a child forked from a thread other than the
    main one answers too. The signal is sent at once: it is blocked across the fork, so
    no window is left before the child ignores it."""
    with Fork(lambda emit: (time.sleep(0.3), "after")[1]) as child:
        os.kill(child.pid, signal.SIGINT)
        assert child.wait(10) == ("done", "after")
    box = {}
    thread = threading.Thread(target=lambda: box.setdefault(
        "v", run_forked(lambda emit: 42, kill_cpu=math.inf, kill_wall=math.inf)))
    thread.start()
    thread.join(30)
    assert box == {"v": 42}


def test_the_child_goes_on_from_the_parents_cpu_clock():
    from chainpipe.formulations import cpu_clock as clock

    before = clock.cpu_clock()
    got = run_forked(lambda emit: clock.cpu_clock(), kill_cpu=math.inf, kill_wall=math.inf)
    assert got >= before - 1e-6
