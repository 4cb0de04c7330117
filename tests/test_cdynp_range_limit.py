"""The owner's range questions under ``dp``'s limit on ``T_p + max R``
(:meth:`chainpipe.solvers.dp_ranges.RangeTimes.within`, agent option ``sum_limit``).

``dp``'s search of several pipelines asks each range only of plans with ``T_p + max R``
below its limit (the incumbent less the span's cross-DC term): a plan above it cannot
beat the incumbent. Checked: on random v3 instances every answer of
:class:`~chainpipe.solvers.cdynp.questions.OwnerRangeTimes` under a limit is a plan
within it (and its target and cap) or "none" where the enumeration of every plan finds
none; a range of several DCs whose run found a plan above the limit is asked again under
the cap ``limit - T_p`` (every plan within the limit has ``R`` below it), and the loop
ends where the cap would not drop below the plan's ``R``; a one-DC run under a limit
keeps only plans within it.
"""

from __future__ import annotations

import itertools
import math
import random
import types

import pytest

from chainpipe.deadline import Deadline
from chainpipe.solvers.cdynp import LocalOwner, agent, alone, protocol
from chainpipe.solvers.cdynp.drive import agent_options
from chainpipe.solvers.cdynp.pipelines import RangePlan, RangeRuns
from chainpipe.solvers.cdynp.public import PublicInstance
from chainpipe.solvers.cdynp.questions import OwnerRangeTimes
from helpers import random_period_chains, random_v3_instance, v3_fronts


def _plans(fronts: dict, i: int, j: int, m: int) -> list[tuple[float, float]]:
    """``(T_p, max R)`` of every undominated plan on DCs ``i..j`` at ``M_p = m`` (a plan of a
    range inside it is one of the range)."""
    return [(T, R) for (a, b, mm), items in fronts.items() if i <= a and b <= j and mm == m
            for T, R, _stages in items]


def _between(values: list[float], rng: random.Random) -> float:
    """A value between two of ``values``, below the least or past the largest, never one
    of them (but 0 below a least value of 0): the runs' rounding slack decides no
    answer."""
    v = sorted(set(values))
    k = rng.randrange(-1, len(v))
    if k < 0:
        return v[0] / 2
    return v[k] * 1.1 + 1.0 if k == len(v) - 1 else (v[k] + v[k + 1]) / 2


def test_answers_under_a_limit_match_the_enumeration():
    """At least 150 questions on random v3 instances (both schedules and objectives, one
    to three DCs), each under a random limit, target and cap drawn between the plans'
    values, asked of one owner's memory in turn (what a run proved under one limit serves
    only the questions under it or a lower one): a plan within all three, or none where
    the enumeration finds none; both answers occur, and limits that cut a plan the target
    and cap would take."""
    asked = found = cut = 0
    for seed in range(60):
        inst = random_v3_instance(seed)
        fronts = v3_fronts(inst)
        K, M = inst.num_datacenters, inst.microbatches
        alone.forget()
        ranges = OwnerRangeTimes(RangeRuns(LocalOwner(inst, False, 60), agent_options(),
                                           Deadline(None)))
        rng = random.Random(seed)
        for _ in range(6):
            i = rng.randrange(K)
            j = rng.randrange(i, K)
            m = rng.randint(1, M)
            plans = _plans(fronts, i, j, m)
            if not plans:
                continue
            tau = _between([T for T, _R in plans], rng)
            theta = rng.choice([math.inf, _between([R for _T, R in plans], rng)])
            limit = rng.choice([math.inf, _between([T + R for T, R in plans], rng)])
            with ranges.within(limit):
                got = ranges.at_most(i, j, m, tau, theta)
            want = any(T <= tau and R < theta and T + R < limit for T, R in plans)
            asked += 1
            cut += want != any(T <= tau and R < theta for T, R in plans)
            if got is None:
                assert not want, (seed, i, j, m, tau, theta, limit)
                continue
            found += 1
            T, R, _stages = got
            assert T <= tau * (1 + 1e-9) and R < theta, (seed, i, j, m, got)
            assert T + R < limit * (1 + 1e-9), (seed, i, j, m, got, limit)
            assert want, (seed, i, j, m, got)
    assert asked >= 150 and found >= 30 and asked - found >= 30 and cut >= 5, (asked, found, cut)


class _Runs:
    """A range's runs as :class:`~chainpipe.solvers.cdynp.pipelines.RangeRuns` answers
    them, over a fixed list of plans ``(T_p, max R)``: the least ``T_p`` with ``R`` below
    the cap, if within the bound (several DCs: no limit honoured)."""

    def __init__(self, plans, honours: bool = False):
        self.plans, self.caps, self.honours = plans, [], honours
        public = types.SimpleNamespace(training=types.SimpleNamespace(schedule="1f1b"),
                                       num_datacenters=2)
        self.owner = types.SimpleNamespace(public=public)
        self.deadline = Deadline(None)

    @staticmethod
    def limited(i, j, m):
        return False

    def under_limit(self, i, j, m):
        return self.honours

    def floors(self, i, j, make=True):
        return None

    def least_floor(self, i, j, m, theta, bound, floor, limit):
        self.caps.append(theta)
        # honoured as several DCs' period runs do (their caps fall to the limit less the
        # run's floor): a set holding every plan within the limit
        fit = sorted((T, R) for T, R in self.plans
                     if R < theta and (not self.honours or R < limit - floor))
        if not fit or fit[0][0] > bound:
            return None, 0.0, 0.0
        T, R = fit[0]
        cost = types.SimpleNamespace(fill_drain_s=T / 2, period_s=T / (2 * (m - 1)))
        return RangePlan(T, R, (f"plan {T} {R}",), cost), 0.0, 0.0


def test_a_plan_above_the_limit_is_asked_again_under_a_tighter_cap():
    """Plans ``(0.5, 0.6)`` and ``(0.6, 0.3)`` under the limit 1: the first run finds the
    first (above it), the next one under the cap ``1 - 0.5`` the second; what each proved
    is kept (every plan's floor 0.5, the limit's 0.6)."""
    runs = _Runs([(0.5, 0.6), (0.6, 0.3)])
    ranges = OwnerRangeTimes(runs)
    with ranges.within(1.0):
        got = ranges.at_most(0, 1, 4, 0.9, math.inf)
        assert got[:2] == (0.6, 0.3) and runs.caps == [math.inf, 0.5]
        assert ranges._floor(0, 1, 4, math.inf) == 0.6
    assert ranges._floor(0, 1, 4, math.inf) == 0.5  # (no limit: the first plan's T_p)


def test_a_run_under_the_limit_proves_only_under_it():
    """Runs of several DCs that take the limit (:meth:`RangeRuns.under_limit`: their caps
    fall to the limit less each period run's floor) answer for a set that holds every plan
    within it: the plan found may still lie above it (``(0.5, 0.6)`` under 1.0, kept by the
    first run's cap), and the loop goes on; what they prove holds under the limit only, so
    no floor is kept for every plan."""
    runs = _Runs([(0.5, 0.6), (0.4, 1.2), (0.6, 0.3)], honours=True)
    ranges = OwnerRangeTimes(runs)
    with ranges.within(1.0):
        got = ranges.at_most(0, 1, 4, 0.9, math.inf)
        assert got[:2] == (0.6, 0.3) and runs.caps == [math.inf, 0.5]
        assert ranges._floor(0, 1, 4, math.inf) == 0.6
    assert ranges._floor(0, 1, 4, math.inf) == 0.0  # (0.4, 1.2) was never asked about


def test_none_within_the_limit_after_the_tighter_cap():
    """One plan ``(0.5, 0.6)``: under the limit 1 no plan is asked for; the second run,
    under the cap 0.5, finds none, so the answer is none and, under the limit, the target
    is a floor."""
    runs = _Runs([(0.5, 0.6)])
    ranges = OwnerRangeTimes(runs)
    with ranges.within(1.0):
        assert ranges.at_most(0, 1, 4, 0.9, math.inf) is None
        assert runs.caps == [math.inf, 0.5]
        assert ranges._floor(0, 1, 4, math.inf) >= 0.9
    with ranges.within(2.0):  # a higher limit: the plan itself answers
        assert ranges.at_most(0, 1, 4, 0.9, math.inf)[:2] == (0.5, 0.6)


def test_the_loop_ends_where_the_cap_would_not_drop_below_the_plan():
    """A plan exactly at the limit (``0.5 + 0.5``): the next cap, ``1 - 0.5``, would not
    leave it out, so it is the answer (one run, no loop)."""
    runs = _Runs([(0.5, 0.5)])
    ranges = OwnerRangeTimes(runs)
    with ranges.within(1.0):
        assert ranges.at_most(0, 1, 4, 0.9, math.inf)[:2] == (0.5, 0.5)
    assert runs.caps == [math.inf]


def test_one_dc_runs_keep_only_plans_within_the_limit():
    """A one-DC range run (:mod:`chainpipe.solvers.cdynp.alone`) under ``sum_limit``: its
    plan is the least ``T_p`` of those with ``T_p + max R`` below the limit, on random v3
    DCs, where a plan above it has a lower ``T_p``."""
    checked = 0
    for seed in range(120):
        inst = random_v3_instance(seed)
        if inst.training.objective != "period":
            continue
        fronts = v3_fronts(inst)
        for k, m in itertools.product(range(inst.num_datacenters),
                                      range(2, inst.microbatches + 1)):
            plans = sorted(_plans(fronts, k, k, m))
            first = plans[0][0] + plans[0][1] if plans else 0.0
            below = [T + R for T, R in plans if T + R < first]
            if not below:
                continue  # the least T_p is within every limit some plan meets
            limit = (first + max(below)) / 2  # the least T_p's plan above it, another below
            inside = [T for T, R in plans if T + R < limit]
            alone.forget()
            runs = RangeRuns(LocalOwner(inst, False, 60), agent_options(), Deadline(None))
            got = runs._run(k, k, m, math.inf, math.inf, 0.0, limit)[0]
            assert got is not None and math.isclose(got.time, min(inside), rel_tol=1e-9), (
                seed, k, got, inside)
            checked += got.time > plans[0][0] * (1 + 1e-9)
    assert checked >= 5, checked


def test_several_dc_runs_under_a_limit_hold_every_plan_within_it():
    """A range run of several DCs under a limit (:func:`~chainpipe.solvers.cdynp.
    _within_cap`: each period run's cap falls to the limit less its floor), on random v3
    instances, against the enumeration: "none" only where no plan within the bound lies
    within the limit; a plan found has the least ``T_p`` of those within it or less, and
    exactly the least when it lies within the limit itself. (These chains of 1 to 3
    layers seldom climb a ladder, where caps fall: the next test has longer ones.)"""
    checked = within = 0
    for seed in range(160):
        inst = random_v3_instance(seed)
        if inst.training.objective != "period" or inst.num_datacenters < 2:
            continue
        fronts = v3_fronts(inst)
        runs = RangeRuns(LocalOwner(inst, False, 60), agent_options(), Deadline(None))
        rng = random.Random(seed)
        K, M = inst.num_datacenters, inst.microbatches
        for i, j, m in itertools.product(range(K), range(K), range(2, M + 1)):
            plans = _plans(fronts, i, j, m) if i < j else []
            if not plans:
                continue
            limit = _between([T + R for T, R in plans], rng)
            bound = rng.choice([math.inf, max(T for T, _R in plans) * 1.05])
            inside = [T for T, R in plans if T + R < limit and T <= bound]
            got = runs._run(i, j, m, math.inf, bound, 0.0, limit)[0]
            checked += 1
            if got is None:
                assert not inside, (seed, i, j, m, limit, inside)
                continue
            least = min(T for T, _R in plans)
            assert least * (1 - 1e-9) <= got.time, (seed, i, j, m, got)
            if inside:
                assert got.time <= min(inside) * (1 + 1e-9), (seed, i, j, m, got, inside)
            if got.time + got.sync < limit:
                assert inside and math.isclose(got.time, min(inside), rel_tol=1e-9)
                within += 1
    assert checked >= 300 and 50 <= within <= checked - 50, (checked, within)


def test_several_dc_questions_under_limits_with_and_without_the_caps(monkeypatch):
    """Chains of 5 to 12 layers (:func:`helpers.random_period_chains`, where period runs
    climb ladders, so that their caps fall under the limit): the owner's answers to
    questions of two DCs or more under random limits, targets and caps, asked in turn,
    with the period runs' caps under the limit (:func:`~chainpipe.solvers.cdynp.
    _within_cap`) and without (:data:`~chainpipe.solvers.cdynp.WITHIN_CAP` off: the
    owner's loop alone honours the limit): a plan for the same questions, each within its
    target, cap and limit, and caps that fell."""
    import chainpipe.solvers.cdynp as cdynp

    fell = []
    plain = cdynp._within_cap

    def counted(options, limit):
        got = plain(options, limit)
        fell.append(got is None or got.get("sync_cap") != options.get("sync_cap"))
        return got

    monkeypatch.setattr(cdynp, "_within_cap", counted)
    asked = found = 0
    for seed, inst in random_period_chains(20, microbatches=(8, 12, 20)):
        answers = []
        for on in (True, False):
            monkeypatch.setattr(cdynp, "WITHIN_CAP", on)
            alone.forget()
            ours = OwnerRangeTimes(RangeRuns(LocalOwner(inst, False, 60), agent_options(),
                                             Deadline(None)))
            whole = ours.at_most(0, inst.num_datacenters - 1, inst.microbatches, math.inf,
                                 math.inf)
            rng, got = random.Random(seed), []
            for _ in range(8):
                K, M = inst.num_datacenters, inst.microbatches
                i = rng.randrange(K - 1)
                j = rng.randrange(i + 1, K)
                m = rng.randint(2, M)
                scale = whole[0] * m / M + whole[1]
                tau = scale * rng.uniform(0.6, 1.5)
                theta = rng.choice([math.inf, scale * rng.uniform(0.05, 0.5)])
                limit = scale * rng.uniform(0.8, 1.6)
                with ours.within(limit):
                    plan = ours.at_most(i, j, m, tau, theta)
                if plan is not None:
                    T, R, _stages = plan
                    assert T <= tau * (1 + 1e-9) and R < theta and T + R < limit * (1 + 1e-9)
                got.append(None if plan is None else plan[0])
            answers.append(got)
        asked += len(answers[0])
        found += sum(t is not None for t in answers[0])
        # (a plan within the target is an answer, not the least: memories differ)
        assert [a is None for a in answers[0]] == [b is None for b in answers[1]], (
            seed, answers)
    assert asked >= 150 and 30 <= found <= asked - 30, (asked, found)
    assert sum(fell) >= 20, sum(fell)


def test_sum_limit_is_validated():
    """The agent option: a positive finite number (as ``sync_cap``), refused by the agent
    itself with one line naming it."""
    assert protocol.option_problem("sum_limit", 0.0)
    assert protocol.option_problem("sum_limit", float("nan"))
    assert protocol.option_problem("sum_limit", float("inf"))
    assert protocol.option_problem("sum_limit", 3.5) is None
    inst = random_v3_instance(1)
    public = PublicInstance.of(inst)
    with pytest.raises(ValueError, match="sum_limit"):
        agent.DCAgent(public, 0, inst.datacenters[0], sync_cap=1.0, sum_limit=-1.0)
    assert agent.DCAgent(public, 0, inst.datacenters[0], sync_cap=1.0,
                         sum_limit=2.0).sum_limit == 2.0
