"""The collector's pacing during a solve (``chainpipe.gc_pace``): raised inside, never
lowered, restored on every way out, once for nested and concurrent uses."""

import gc
import threading
from pathlib import Path

import pytest

import chainpipe as cp
from chainpipe.gc_pace import THRESHOLDS, fewer_collections


@pytest.fixture(autouse=True)
def _default_thresholds():
    saved = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    yield
    gc.set_threshold(*saved)


def test_raised_inside_and_restored_after():
    with fewer_collections():
        assert gc.get_threshold() == THRESHOLDS
    assert gc.get_threshold() == (700, 10, 10)


def test_never_lowered():
    gc.set_threshold(10**6, 5, 500)
    with fewer_collections():
        assert gc.get_threshold() == (10**6, THRESHOLDS[1], 500)
    assert gc.get_threshold() == (10**6, 5, 500)


def test_restored_when_the_body_raises():
    with pytest.raises(KeyError):
        with fewer_collections():
            raise KeyError("x")
    assert gc.get_threshold() == (700, 10, 10)


def test_nested_and_concurrent_uses_restore_once_at_the_end():
    inside, go = threading.Event(), threading.Event()

    def other():
        with fewer_collections():
            inside.set()
            go.wait(10)

    t = threading.Thread(target=other)
    with fewer_collections():
        with fewer_collections():
            pass
        assert gc.get_threshold() == THRESHOLDS
        t.start()
        inside.wait(10)
    assert gc.get_threshold() == THRESHOLDS  # the thread's use is still running
    go.set()
    t.join(10)
    assert gc.get_threshold() == (700, 10, 10)


def test_a_solve_runs_with_them_and_leaves_them_as_they_were():
    from chainpipe.result import Status
    from chainpipe.solve import run_solver, solver_function

    seen = []

    def run(instance, **kw):
        seen.append(gc.get_threshold())
        return solver_function("dp")(instance, **kw)

    inst = cp.read(Path(__file__).resolve().parents[1] / "instances/small/small-01-tiny.json")
    got = run_solver(inst, "dp", run)
    assert seen == [THRESHOLDS] and got.status == Status.OPTIMAL
    assert gc.get_threshold() == (700, 10, 10)
