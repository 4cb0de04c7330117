"""The floor a range run's prefix-curve passes report (``curve_floor_s``, the last DC's
:meth:`.curve.CurvePass.floor`), which the owner keeps as a proven floor of the range when
the run finds nothing (``questions.OwnerRangeTimes._search``): it must lie under the
range's least ``T_p``, and it must answer a later question at a target below it without a
run, as a run would (none)."""

from __future__ import annotations

import math
import sys
from pathlib import Path

from chainpipe.deadline import Deadline
from chainpipe.io import read
from chainpipe.solvers.cdynp import LocalOwner
from chainpipe.solvers.cdynp.drive import agent_options
from chainpipe.solvers.cdynp.pipelines import RangeRuns
from chainpipe.solvers.cdynp.questions import OwnerRangeTimes

ROOT = Path(__file__).resolve().parents[1]
MEDIUM = ROOT / "instances" / "v3" / "medium" / "v3-medium-03-slow-sync8.json"


def _least(owner, i, j, m, theta=math.inf):
    """``g(i, j, m, theta)``: one unbounded range run (a fresh memory)."""
    got = RangeRuns(owner, agent_options(), Deadline(None)).least(i, j, m, theta)
    return None if got is None else got.time


def test_the_curve_floor_lies_under_the_least_time():
    """DC ranges of ``v3-medium-03`` at several ``M_p`` and two sync limits, each run under
    bounds 1% and 4% below the range's least ``T_p``: every run finds nothing and every
    floor it reports lies under that least ``T_p``; on some the floor lies above the bound
    (what the owner keeps beyond the run's own proof)."""
    owner = LocalOwner(read(MEDIUM), False, 60)
    above = checked = 0
    for i, j, m in ((0, 1, 31), (2, 3, 33), (1, 3, 46), (0, 2, 20)):
        for theta in (math.inf, 0.8):
            g = _least(owner, i, j, m, theta)
            if g is None:
                continue
            for below in (0.99, 0.96):
                runs = RangeRuns(owner, agent_options(), Deadline(None))
                got, _lam, low = runs.least_floor(i, j, m, min(theta, sys.float_info.max),
                                                  g * below)
                assert got is None, (i, j, m, theta)
                assert low <= g * (1 + 1e-12), (i, j, m, theta, low, g)
                above += low > g * below
                checked += 1
    assert checked >= 10 and above >= 2, (checked, above)


def test_a_kept_curve_floor_answers_a_question_without_a_run():
    """Where a run under ``tau`` found nothing and reported a floor above ``tau``, a
    question at a target between the two is answered "none" from memory (no run), and a
    run there finds nothing too; a question above the floor still runs."""
    owner = LocalOwner(read(MEDIUM), False, 60)
    found = 0
    for i, j, m in ((0, 1, 31), (2, 3, 33), (1, 3, 46), (0, 2, 20)):
        g = _least(owner, i, j, m)
        times = OwnerRangeTimes(RangeRuns(owner, agent_options(), Deadline(None)))
        tau = g * 0.97
        assert times.at_most(i, j, m, tau, math.inf) is None
        low = max(v for _m, _th, v, _lam in times.proven[(i, j)])
        if low <= tau * (1 + 1e-6):
            continue
        found += 1
        runs = times.runs.runs
        mid = (tau + low) / 2
        assert times.at_most(i, j, m, mid, math.inf) is None and times.runs.runs == runs
        fresh = RangeRuns(owner, agent_options(), Deadline(None))
        assert fresh.least(i, j, m, math.inf, mid * (1 + 1e-9)) is None
        assert low <= g and times.at_most(i, j, m, g, math.inf) is not None
        assert times.runs.runs == runs + 1
    assert found >= 1
