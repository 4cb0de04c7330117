"""``RangeTimes`` (``chainpipe/solvers/dp_ranges.py``), the several-pipeline search's
answers per DC range, against every placement of small random v3 instances: for each
range, ``M_p`` and limit ``theta`` of ``max R`` its least ``T_p`` is the brute force's
(the range's curves at each ``theta`` leave out the options a search may not use)."""

from __future__ import annotations

import numpy as np
import pytest

from chainpipe.deadline import Deadline
from chainpipe.solvers.dp_pipelines import shared_holds
from chainpipe.solvers.dp_ranges import Found, RangeTimes
from chainpipe.tables import CostTables
from helpers import _v3_configurations, contract_pipeline, random_v3_instance


@pytest.mark.parametrize("dear", [False, True])
@pytest.mark.parametrize("seed", range(60))
def test_a_range_least_time_at_each_theta_is_the_brute_force_one(seed, dear):
    """Each range (of one DC too), each ``M_p`` and each ``theta`` (from ``inf`` down
    through a hair above every placement's ``max R``, as the sweep asks them, one
    ``RangeTimes`` keeping what its searches proved): ``at_most`` finds a plan within the
    least ``T_p`` of the placements on the range with ``max R < theta`` and none a hair
    below it, or none at all when no placement has one.
    With ``dear``, every range is dear from the start (its searches walk curves of their
    own ``theta``, a range of one DC's too); then it fails when the walks leave out the
    options of ``R`` above 0.7 ``theta``."""
    inst = random_v3_instance(seed)
    tables = CostTables(inst)
    if tables.K < 2 or inst.microbatches < 2:
        pytest.skip("one datacenter or one microbatch")
    placements = _v3_configurations(inst)
    values = {}
    for stages in placements:
        for m in range(1, inst.microbatches + 1):
            got = contract_pipeline(inst, m, stages)
            if got is not None:
                values[tuple(stages), m] = got
    if not values:
        pytest.skip("no placement fits")
    upper = 4 * max(T + R for T, R in values.values()) + 1
    thetas = sorted({float(np.nextafter(R, np.inf)) for _, R in values.values()},
                    reverse=True)
    dl = Deadline(120)
    ranges = RangeTimes(tables, dl, upper, shared_holds(tables, dl))
    if dear:
        ranges.dear = {(i, j) for i in range(tables.K) for j in range(i, tables.K)}
    asked = 0
    for i in range(tables.K):
        for j in range(i, tables.K):
            for theta in [np.inf] + thetas:
                for m in range(1, inst.microbatches + 1):
                    best = min((T for (st, mm), (T, R) in values.items()
                                if mm == m and st[0][2] == i and st[-1][2] == j
                                and R < theta), default=None)
                    if best is None:
                        assert ranges.at_most(i, j, m, upper, theta) is None, (i, j, m, theta)
                        continue
                    below = ranges.at_most(i, j, m, best * (1 - 1e-6), theta)
                    assert below is None, (i, j, m, theta, best, below)
                    got = ranges.at_most(i, j, m, best * (1 + 1e-9), theta)
                    assert got is not None, (i, j, m, theta, best)
                    assert got[0] <= best * (1 + 1e-9) and got[1] < theta
                    asked += 1
    if not asked:
        pytest.skip("no placement fits a range")


@pytest.mark.parametrize("growth", ["far", "steep", "slow", "dear"])
def test_the_ladder_steps_by_what_its_misses_kept(growth, monkeypatch):
    """After a trial that found nothing but kept more than ``CLOSE`` labels, the ladder's
    next trial lies at most ``CLOSE_STEP`` above it (``g`` is near); after misses whose
    labels grow steeply (three times a rung) it keeps its own steps; after misses whose
    labels grow slowly (1.1 times a rung: ``g`` is far) its steps double, to ``STRIDE``
    rungs; after misses under ``FAR`` labels it climbs two rungs or more. The answer is
    the search's either way (``g`` itself, found by the first trial above it)."""
    from chainpipe.solvers.dp_ranges import STRIDE

    inst = random_v3_instance(3)
    tables = CostTables(inst)
    ranges = RangeTimes(tables, Deadline(60), 1e9)
    g = 10.0 * 1.03 ** 14 * 1.001  # just above the ladder's fourteenth step from the floor
    kept = {"far": lambda k: 10, "steep": lambda k: 400 * 3 ** k,
            "slow": lambda k: int(1000 * 1.1 ** k), "dear": lambda k: 50_000}[growth]
    asked = []

    def search(i, j, m, tau, theta):
        ranges.last_labels = kept(len(asked))
        asked.append(tau)
        return (g, 0.0, []) if tau >= g else None

    monkeypatch.setattr(ranges, "_floor", lambda *a, **k: 10.0)
    monkeypatch.setattr(ranges, "_search", search)
    assert ranges.at_most(0, 0, 4, 20.0, np.inf, above=False) == (g, 0.0, [])
    steps = [b / a for a, b in zip(asked, asked[1:])][:-1]  # (the last: the rung at g)
    assert asked[0] == pytest.approx(10.3) and asked[-1] >= g
    if growth == "dear":
        assert all(s <= 1.015 + 1e-12 for s in steps), steps
    elif growth == "steep":
        assert all(s == pytest.approx(1.03) for s in steps[:4]), steps
    elif growth == "slow":
        assert steps[:3] == pytest.approx([1.03, 1.03 ** 2, 1.03 ** 4]), steps
        assert max(steps) == pytest.approx(1.03 ** STRIDE)
    else:
        assert all(s >= 1.03 ** 2 * (1 - 1e-12) for s in steps), steps


@pytest.mark.parametrize("seed", range(40))
def test_answers_within_a_bound_on_t_plus_r_keep_to_it(seed):
    """Under :meth:`RangeTimes.within` (the several-pipeline search's bound ``T_p + max R <
    limit`` of a span) each range's answer is the brute force's least ``T_p`` over the
    placements with ``T_p + max R`` below the limit: a plan within it is found and none
    a hair below it (a plan found earlier under a larger bound may still answer: it is a
    real plan). The limits are asked smallest first, so a proof made under a small bound
    and read under a larger one (where a plan it did not see exists) fails it."""
    inst = random_v3_instance(seed)
    tables = CostTables(inst)
    if tables.K < 2 or inst.microbatches < 2:
        pytest.skip("one datacenter or one microbatch")
    values = {}
    for stages in _v3_configurations(inst):
        for m in range(1, inst.microbatches + 1):
            got = contract_pipeline(inst, m, stages)
            if got is not None:
                values[tuple(stages), m] = got
    sums = sorted({T + R for T, R in values.values()})
    if len(sums) < 2:
        pytest.skip("fewer than two placements fit")
    upper = 4 * sums[-1] + 1
    limits = sorted({float(np.nextafter(x, np.inf)) for x in sums[::max(1, len(sums) // 4)]})
    dl = Deadline(120)
    ranges = RangeTimes(tables, dl, upper, shared_holds(tables, dl))
    asked = 0
    for i in range(tables.K):
        for j in range(i, tables.K):
            for m in range(1, inst.microbatches + 1):
                for limit in limits + [upper]:
                    best = min((T for (st, mm), (T, R) in values.items()
                                if mm == m and st[0][2] == i and st[-1][2] == j
                                and T + R < limit), default=None)
                    with ranges.within(limit):
                        if best is None:
                            got = ranges.at_most(i, j, m, upper, np.inf)
                            assert got is None or got[0] + got[1] >= limit, (i, j, m, limit)
                            continue
                        got = ranges.at_most(i, j, m, best * (1 + 1e-9), np.inf)
                        assert got is not None and got[0] <= best * (1 + 1e-9), (i, j, m, limit)
                        below = ranges.at_most(i, j, m, best * (1 - 1e-6), np.inf)
                        assert below is None or below[0] + below[1] >= limit * (1 - 1e-9)
                    asked += 1
    assert ranges.limit == upper  # restored after each block
    if not asked:
        pytest.skip("no placement fits a limit")


@pytest.mark.parametrize("labels, extra", [(10, True), (5_000, False)])
def test_a_cheap_miss_is_followed_by_one_trial_above(labels, extra, monkeypatch):
    """With no trials above asked, a miss at the target that kept fewer than ``CHEAP``
    labels is followed by one trial ``ABOVE[0]`` above it: the answer is still none, and
    the plan it finds answers the next question a hair higher without a search; after a
    dear miss nothing more is searched."""
    from chainpipe.solvers.dp_ranges import ABOVE, CHEAP

    assert labels < CHEAP or not extra
    inst = random_v3_instance(3)
    ranges = RangeTimes(CostTables(inst), Deadline(60), 1e9)
    g = 20.5
    asked = []

    def search(i, j, m, tau, theta):
        asked.append(tau)
        ranges.last_labels = labels
        if tau < g:
            ranges.proven.setdefault((i, j), []).append((m, theta, tau, 0.0))
            return None
        ranges.found.setdefault((i, j), []).append(Found(m, g, 0.0, 0.0, ()))
        return g, 0.0, []

    monkeypatch.setattr(ranges, "_floor", lambda *a, **k: 19.9)
    monkeypatch.setattr(ranges, "_search", search)
    assert ranges.at_most(0, 0, 4, 20.0, np.inf, above=False) is None
    assert asked[-2:] == [20.0, 20.0 * (1 + ABOVE[0])] if extra else asked[-1] == 20.0
    n = len(asked)
    got = ranges.at_most(0, 0, 4, 20.6, np.inf, above=False)
    assert got is not None and got[0] == g
    assert (len(asked) == n) == extra  # answered by the plan the trial above found
