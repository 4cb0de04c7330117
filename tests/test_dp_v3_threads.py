"""``dp`` under contract v3 with ``threads > 1``: the range ladders' and the
one-pipeline trials' bounds searched two at a time (the upper one in a forked process,
:class:`chainpipe.solvers.dp_parallel.Beside`) and the seed's DCs planned in processes
(:func:`chainpipe.solvers.dp_parallel.spread`) give the optimum brute force gives, and
leave no process behind."""

from __future__ import annotations

import math
import os
import time

import psutil
import pytest

from chainpipe.deadline import Deadline, TimeUp
from chainpipe.solve import solve
from chainpipe.solvers import dp_parallel, dp_ranges
from helpers import brute_force_v3, random_v3_instance

pytestmark = pytest.mark.skipif(not dp_parallel.available(), reason="needs fork")


def _alive(before: set) -> list:
    me = psutil.Process(os.getpid())
    return [c for c in me.children(recursive=True) if c.pid not in before
            and c.is_running() and c.status() != psutil.STATUS_ZOMBIE]


def _children() -> set:
    return {c.pid for c in psutil.Process(os.getpid()).children(recursive=True)}


@pytest.mark.parametrize("block", range(3))
def test_pairs_of_trials_equal_brute_force(block, monkeypatch):
    """Every trial after a miss runs with the next one beside it (``PAIR`` 0), on 30 random
    small v3 instances a block: the same optimum as brute force, pairs made in numbers."""
    monkeypatch.setattr(dp_ranges, "PAIR", 0)
    made = []
    real = dp_parallel.Beside.__init__

    def counted(self, work, deadline):
        made.append(1)
        real(self, work, deadline)

    monkeypatch.setattr(dp_parallel.Beside, "__init__", counted)
    before = _children()
    for seed in range(9000 + 30 * block, 9030 + 30 * block):
        inst = random_v3_instance(seed)
        T = min(v[0] for v in brute_force_v3(inst).values())
        res = solve(inst, "dp", time_limit=60, threads=2)
        if not math.isfinite(T):
            assert res.status == "infeasible", (inst.name, res.status)
            continue
        assert res.status == "optimal", (inst.name, res.status, res.message)
        assert math.isclose(res.iteration_time, T, rel_tol=1e-9, abs_tol=1e-12), (inst.name, T)
    assert len(made) >= 20, len(made)
    assert not _alive(before)


def test_spread_keeps_the_order_and_reports_a_failure():
    before = _children()
    got = dp_parallel.spread(lambda x: (x, os.getpid()), list(range(7)), Deadline(30), 3)
    assert [x for x, _ in got] == list(range(7))
    assert len({pid for _, pid in got}) == 3  # three processes did the work
    assert got[0][1] == os.getpid()

    def fail(x):
        if x == 5:
            raise ValueError("item five")
        return x

    with pytest.raises(RuntimeError, match="ValueError: item five"):
        dp_parallel.spread(fail, list(range(7)), Deadline(30), 3)
    assert not _alive(before)


def test_work_beside_is_bounded_by_the_deadline():
    before = _children()
    t0 = time.monotonic()
    with pytest.raises(TimeUp):
        with dp_parallel.Beside(lambda: time.sleep(30), Deadline(0.3)) as there:
            there.result()
    assert time.monotonic() - t0 < 5
    assert not _alive(before)


def test_work_beside_is_stopped_unread():
    before = _children()
    with dp_parallel.Beside(lambda: time.sleep(30), Deadline(None)):
        assert _alive(before)
    assert not _alive(before)
