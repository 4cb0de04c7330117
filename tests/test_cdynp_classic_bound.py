"""A range run's classic run bounded by the classic line of a plan the owner holds
(:meth:`chainpipe.solvers.cdynp.pipelines.RangeRuns.classic_bound`, ``classic_bound`` of
:func:`chainpipe.solvers.cdynp.solve_chain`): the classic plan a range run found at ``m0``
runs every ``M_p <= m0`` (under 1F1B also every ``M_p`` when it has fewer stages than
``m0``) within its fill plus ``M_p - 1`` periods, so the classic run at such an ``M_p``
finds the same classic optimum under that line, and the range run the same answer.
"""

from __future__ import annotations

import math
import sys
import types
from pathlib import Path

import pytest

import chainpipe.solvers.cdynp as cdynp
from chainpipe.deadline import Deadline
from chainpipe.io import read
from chainpipe.solve import solve
from chainpipe.solvers.cdynp import LocalOwner, pipelines, solve_chain
from chainpipe.solvers.cdynp.drive import agent_options
from helpers import random_v3_chains

ROOT = Path(__file__).resolve().parents[1]


def _run(owner, i, j, m, bound, classic_bound=math.inf):
    backend = owner.chain(i, j, m, count_sync=False)
    options = {**agent_options(), "upper_bound": bound, "sync_cap": sys.float_info.max}
    out = solve_chain(backend, options, Deadline(None), probe=False,
                      classic_bound=classic_bound)
    T = None if out.plan is None else backend.evaluation(out.plan).pipelines[0].time_s
    return T, out.stats


def test_the_line_bounds_the_classic_run_at_fewer_microbatches():
    """On random v3 ranges of two or more DCs: the classic line a run at ``M`` reports
    gives its classic optimum at ``M`` (``classic_s``); at ``M_p < M`` the line's value
    bounds the classic run, which then finds the same classic optimum and the range run
    the same least ``T_p`` as with the owner's bound alone."""
    checked = 0
    for seed, inst in random_v3_chains(3):
        K, M = inst.num_datacenters, inst.microbatches
        owner = LocalOwner(inst, False, 60)
        T0, stats0 = _run(owner, 0, K - 1, M, None)
        line = stats0.get("classic_line")
        if T0 is None or line is None:
            continue
        at_M = line["fill_s"] + (M - 1) * line["period_s"]
        assert at_M == pytest.approx(stats0["classic_s"], rel=1e-9), seed
        m = max(2, M // 2)
        bound = line["fill_s"] + (m - 1) * line["period_s"]
        plain, s_plain = _run(owner, 0, K - 1, m, T0 * 1.25)
        got, s_got = _run(owner, 0, K - 1, m, T0 * 1.25, bound * (1 + 1e-9))
        assert s_got["classic_s"] == pytest.approx(s_plain["classic_s"], rel=1e-12), seed
        assert s_got["classic_s"] <= bound * (1 + 1e-9), seed
        assert (got is None) == (plain is None), seed
        if got is not None:
            assert got == pytest.approx(plain, rel=1e-9), seed
        checked += 1
    assert checked >= 12, checked


def _runs(schedule: str, exact: bool = True) -> pipelines.RangeRuns:
    public = types.SimpleNamespace(period=True, microbatches=64,
                                   training=types.SimpleNamespace(schedule=schedule))
    options = {**agent_options(), "epsilon": 0.0 if exact else 0.05}
    return pipelines.RangeRuns(types.SimpleNamespace(public=public), options,
                               Deadline(None))


def test_which_lines_bound_which_counts():
    """A line found at ``m0`` bounds ``M_p <= m0``; under 1F1B also ``M_p > m0`` when its
    plan has fewer stages than ``m0`` (its stashes do not read the count), under GPipe
    never (a stage stashes ``M_p``); only below a ``theta`` above its ``max R``; the least
    line wins; a compressed owner takes none."""
    line = {"fill_s": 2.0, "period_s": 0.5, "sync_s": 0.25, "stages": 3}
    for schedule in ("1f1b", "gpipe"):
        runs = _runs(schedule)
        runs.classic_lines[0, 1] = [(10, line)]
        assert runs.classic_bound(0, 1, 10, math.inf) == pytest.approx(6.5)
        assert runs.classic_bound(0, 1, 4, math.inf) == pytest.approx(3.5)
        assert runs.classic_bound(0, 1, 4, 0.3) == pytest.approx(3.5)
        assert runs.classic_bound(0, 1, 4, 0.25) == math.inf  # R = 0.25 not below it
        assert runs.classic_bound(0, 2, 4, math.inf) == math.inf  # another range
        above = runs.classic_bound(0, 1, 20, math.inf)
        assert above == (pytest.approx(11.5) if schedule == "1f1b" else math.inf)
        runs.classic_lines[0, 1].append((4, {**line, "stages": 5, "fill_s": 1.0}))
        assert runs.classic_bound(0, 1, 3, math.inf) == pytest.approx(2.0)
        assert runs.classic_bound(0, 1, 6, math.inf) == pytest.approx(4.5)  # (5 >= 4)
    runs = _runs("1f1b", exact=False)
    runs.classic_lines[0, 1] = [(10, line)]
    assert runs.classic_bound(0, 1, 4, math.inf) == math.inf


def test_the_owner_bounds_classic_runs_and_keeps_dp_answers(monkeypatch):
    """Whole solves of ``v3-medium-02`` and ``-03`` (the owner asks their ranges at falling
    counts; random small instances seldom do): the owner's range runs bound classic runs
    below the owner's bound, each with the classic optimum and the status it has without
    that bound, and the answer is ``dp``'s."""
    bounded = []
    real = cdynp.solve_chain

    def spy(backend, options, deadline, **kw):
        cb = kw.get("classic_bound", math.inf)
        user = options.get("upper_bound")
        out = real(backend, options, deadline, **kw)
        if math.isfinite(cb) and (user is None or cb < user):  # the same as unbounded
            plain = real(backend, options, deadline, **{**kw, "classic_bound": math.inf})
            assert out.status == plain.status
            assert out.stats.get("classic_s") == plain.stats.get("classic_s")
            bounded.append(out.stats.get("classic_s"))
        return out

    monkeypatch.setattr(cdynp, "solve_chain", spy)
    for name in ("v3-medium-02-small-model", "v3-medium-03-slow-sync8"):
        inst = read(ROOT / f"instances/v3/medium/{name}.json")
        d, c = solve(inst, "dp"), solve(inst, "cdynp")
        assert c.status == d.status == "optimal", name
        assert c.iteration_time == pytest.approx(d.iteration_time, rel=1e-9), name
    assert len(bounded) >= 4, bounded
