"""The seed's one-DC questions asked at once across hosts
(:meth:`chainpipe.solvers.cdynp.pipelines.RangeRuns.least_each`, :data:`~chainpipe.
solvers.cdynp.pipelines.AT_ONCE`): in the owner's mode ``tls``, untraced, every question
runs in a thread of its own, side by side, and the answers come back in the questions'
order, ``None`` from the first ``None`` on; in process and traced, one after another,
stopping at the first ``None``.
"""

from __future__ import annotations

import math
import threading
import time
import types

import pytest

from chainpipe.solvers.cdynp import pipelines
from chainpipe.solvers.cdynp.pipelines import RangeRuns


def _runs(mode: str, answers: dict, trace_dir=None, delay: float = 0.0):
    """A :class:`RangeRuns` of an owner in ``mode`` whose :meth:`least` answers from
    ``answers`` (per DC) after ``delay`` s, recording the questions and how many ran at
    once at most."""
    owner = types.SimpleNamespace(mode=mode, public=types.SimpleNamespace(period=True))
    runs = RangeRuns.__new__(RangeRuns)
    runs.owner, runs.trace_dir = owner, trace_dir
    runs.asked, runs.most = [], 0
    lock, now = threading.Lock(), [0]

    def least(i, j, m, theta, bound=math.inf):
        with lock:
            runs.asked.append((i, m))
            now[0] += 1
            runs.most = max(runs.most, now[0])
        time.sleep(delay)
        with lock:
            now[0] -= 1
        return answers[i]

    runs.least = least
    return runs


def test_across_hosts_all_at_once_in_order():
    runs = _runs("tls", {0: "a", 1: "b", 2: "c", 3: "d"}, delay=0.05)
    got = runs.least_each([(k, k, 16, math.inf) for k in range(4)])
    assert got == ["a", "b", "c", "d"]
    assert sorted(runs.asked) == [(k, 16) for k in range(4)]
    assert runs.most == 4  # side by side


def test_across_hosts_none_from_the_first_none_on():
    runs = _runs("tls", {0: "a", 1: None, 2: "c"})
    assert runs.least_each([(k, k, 8, math.inf) for k in range(3)]) == ["a", None, None]
    assert len(runs.asked) == 3  # all were asked at once


@pytest.mark.parametrize("mode, trace", [("in-process", None), ("processes", None),
                                         ("tls", "trace")])
def test_one_after_another_otherwise(mode, trace):
    runs = _runs(mode, {0: "a", 1: None, 2: "c"}, trace_dir=trace)
    assert runs.least_each([(k, k, 8, math.inf) for k in range(3)]) == ["a", None, None]
    assert runs.asked == [(0, 8), (1, 8)]  # stopped at the none
    assert runs.most == 1


def test_at_once_off(monkeypatch):
    monkeypatch.setattr(pipelines, "AT_ONCE", False)
    runs = _runs("tls", {0: "a", 1: "b"})
    assert runs.least_each([(0, 0, 4, math.inf), (1, 1, 4, math.inf)]) == ["a", "b"]
    assert runs.most == 1 and runs.asked == [(0, 4), (1, 4)]


def test_a_failure_in_one_thread_is_raised():
    runs = _runs("tls", {0: "a", 1: "b"})
    plain = runs.least

    def least(i, j, m, theta, bound=math.inf):
        if i == 1:
            raise RuntimeError("agent 1 failed")
        return plain(i, j, m, theta, bound)

    runs.least = least
    with pytest.raises(RuntimeError, match="agent 1 failed"):
        runs.least_each([(0, 0, 4, math.inf), (1, 1, 4, math.inf)])




def test_the_seed_lowers_its_largest_sync(monkeypatch):
    """:func:`~chainpipe.solvers.cdynp.pipelines._lower_sync`: the pipelines of the
    largest ``R`` (both, when tied) are asked again under it as their cap while the seed's
    ``T = max T_p + max R`` falls; it stops at the first step that does not lower ``T``."""
    plan_of = types.SimpleNamespace

    def P(time, sync):
        return plan_of(time=time, sync=sync, stages=(), cost=None)

    # per DC, its plans (T_p, R) by R descending: least T_p under each cap
    fronts = {0: [P(5.0, 3.0), P(5.5, 1.0), P(7.0, 0.1)], 1: [P(6.0, 1.0), P(6.2, 0.5)],
              2: [P(4.0, 1.0), P(4.1, 0.5)]}
    asked = []

    class Runs:
        @staticmethod
        def least_each(questions):
            out = []
            for k, _k, _m, cap in questions:
                asked.append((k, cap))
                fit = [p for p in fronts[k] if p.sync < cap]
                out.append(min(fit, key=lambda p: p.time) if fit else None)
            return out

    monkeypatch.setattr(pipelines, "_replicated",
                        lambda owner, answers, ms: (max(a.time for a in answers)
                                                    + max(a.sync for a in answers), "plan"))
    start = [fronts[0][0], fronts[1][0], fronts[2][0]]  # T = 6.0 + 3.0
    T, plan = pipelines._lower_sync(None, Runs(), 9.0, "seed", start, [4, 4, 4])
    # DC 0 under 3.0: (5.5, 1.0), T = 7.0; then DCs 0, 1, 2 tied at 1.0: (7.0, 0.1),
    # (6.2, 0.5), (4.1, 0.5): T = 7.5, not lower: kept at 7.0
    assert T == 7.0 and plan == "plan"
    assert asked == [(0, 3.0), (0, 1.0), (1, 1.0), (2, 1.0)]
