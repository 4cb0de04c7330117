"""An exact range run's ladder of period bounds (``chainpipe.solvers.cdynp._range_ladder``,
``docs/privacy.md``, "A ladder of bounds inside a range run") gives the answer one run
under the owner's bound gives: the least ``T_p`` when it lies within the bound, else none;
and it puts its next bound close above a dear miss (``chainpipe.solvers.cdynp.RANGE_CLOSE``,
``dp_ranges.close_step``) with the same answer.
"""

from __future__ import annotations

import sys

from chainpipe.deadline import Deadline
from chainpipe.solvers import dp_ranges
from chainpipe.solvers.cdynp import LocalOwner, solve_chain
from chainpipe.solvers.cdynp.drive import agent_options
from helpers import random_v3_chains


def _run(owner, i, j, m, bound, floor=0.0):
    backend = owner.chain(i, j, m, count_sync=False)
    options = {**agent_options(), "upper_bound": bound, "sync_cap": sys.float_info.max}
    out = solve_chain(backend, options, Deadline(None), probe=False, floor=floor)
    T = None if out.plan is None else backend.evaluation(out.plan).pipelines[0].time_s
    return T, out.stats.get("ladder") or []


def _ranges():
    """``(seed, owner, i, j, M, least T_p)`` of random v3 ranges of two or more DCs at
    ``M_p = M`` that have a plan (one unbounded run's least ``T_p``)."""
    for seed, inst in random_v3_chains(2):
        K, M = inst.num_datacenters, inst.microbatches
        owner = LocalOwner(inst, False, 60)
        for i, j in ((0, K - 1), (K - 2, K - 1)):
            least, _ = _run(owner, i, j, M, None)
            if least is not None:
                yield seed, owner, i, j, M, least


def test_the_ladder_finds_the_least_time_or_none():
    """On random v3 ranges of two or more DCs at ``M_p = M``: under a bound 25% above the
    least ``T_p`` (one unbounded run's) the ladder finds that least ``T_p``; under a bound
    a hair below it, nothing; with the least ``T_p`` 3% below as a proven floor, the same.
    Many of the bounded runs climb more than one step (a ladder stopped at its first failed
    step, or taking a failed step for the answer, fails it)."""
    climbed = checked = 0
    for seed, owner, i, j, M, least in _ranges():
        got, steps = _run(owner, i, j, M, least * 1.25)
        assert got is not None and abs(got - least) <= 1e-9 * least, (seed, i, j)
        climbed += len(steps) > 1
        got, _ = _run(owner, i, j, M, least * 1.25, floor=least * 0.97)
        assert got is not None and abs(got - least) <= 1e-9 * least, (seed, i, j)
        assert _run(owner, i, j, M, least * (1 - 1e-6))[0] is None, (seed, i, j)
        checked += 1
    assert checked >= 30 and climbed >= 8, (checked, climbed)


def test_close_steps_keep_the_least_time(monkeypatch):
    """Every miss made dear (``CLOSE`` at 0 labels): under a bound 25% above the least
    ``T_p`` the ladder still finds it, and under a bound a hair below it nothing; many
    ladders take a close step (1.5% above the step before, where the 3% ladder had a wider
    gap)."""
    monkeypatch.setattr(dp_ranges, "CLOSE", 0)
    close = checked = 0
    for seed, owner, i, j, M, least in _ranges():
        got, steps = _run(owner, i, j, M, least * 1.25)
        assert got is not None and abs(got - least) <= 1e-9 * least, (seed, i, j)
        bounds = [s["upper_bound"] for s in steps]
        close += any(abs(b / a - 1 - dp_ranges.CLOSE_STEP) < 1e-9
                     for a, b in zip(bounds, bounds[1:]))
        assert _run(owner, i, j, M, least * (1 - 1e-6))[0] is None, (seed, i, j)
        checked += 1
    assert checked >= 30 and close >= 8, (checked, close)


def test_a_run_near_its_proven_floor_skips_the_classic_solve():
    """With a proven floor 0.2% under the least ``T_p`` and a bound 0.2% above it, the run
    makes no classic solve (``cdynp._near_floor``) and its ladder from the floor finds the
    least ``T_p``; under a bound a hair below it, nothing. The classic solve kept fails it,
    and so does a ladder that stops short of the bound."""
    skipped = checked = 0
    for seed, owner, i, j, M, least in _ranges():
        backend = owner.chain(i, j, M, count_sync=False)
        for bound, want in ((least * 1.002, least), (least * (1 - 1e-6), None)):
            options = {**agent_options(), "upper_bound": bound, "sync_cap": sys.float_info.max}
            out = solve_chain(backend, options, Deadline(None), probe=False,
                              floor=least * 0.998)
            got = None if out.plan is None else backend.evaluation(out.plan).pipelines[0].time_s
            assert (got is None) == (want is None), (seed, i, j, bound)
            assert want is None or abs(got - want) <= 1e-9 * want, (seed, i, j)
            assert "messages" in out.stats, (seed, i, j)  # a finished run, not a timeout
            skipped += "classic" not in out.stats
        checked += 1
    assert checked >= 30 and skipped == 2 * checked, (checked, skipped)


def test_strides_skip_rungs_and_keep_the_least_time(monkeypatch):
    """Every miss made cheap (``FAR`` past any count of labels: the next rung is left out,
    ``cdynp.RANGE_STRIDES``, ``dp``'s rule): under a bound 25% above the least ``T_p`` the
    ladder still finds it, and under a bound a hair below it nothing; many ladders climb
    two rungs at once (6.09% between steps where the ladder's rungs lie 3% apart). A
    ladder that climbs every rung fails it."""
    monkeypatch.setattr(dp_ranges, "FAR", 10**12)
    skipped = checked = 0
    for seed, owner, i, j, M, least in _ranges():
        got, steps = _run(owner, i, j, M, least * 1.25)
        assert got is not None and abs(got - least) <= 1e-9 * least, (seed, i, j)
        bounds = [s["upper_bound"] for s in steps][:-1]  # (the last may be the bound)
        skipped += any(b / a > 1.05 for a, b in zip(bounds, bounds[1:]))
        assert _run(owner, i, j, M, least * (1 - 1e-6))[0] is None, (seed, i, j)
        checked += 1
    assert checked >= 30 and skipped >= 5, (checked, skipped)
