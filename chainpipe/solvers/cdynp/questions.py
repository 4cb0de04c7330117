"""The owner's search of several pipelines asked as ``dp`` asks it: "is ``g(i, j, m,
theta) <= tau``?", each question a bounded CDynP range run.

``dp``'s search (:mod:`chainpipe.solvers.dp_pipelines`, ``docs/dp.md``, "Version 3",
several pipelines) needs of the ranges only :meth:`RangeTimes.at_most
<chainpipe.solvers.dp_ranges.RangeTimes.at_most>`: a plan on DCs ``i..j`` with ``M_p = m``,
every ``R_s < theta`` and ``T_p <= tau``, or a proof that none exists. Its sweep over
``theta``, its bisection on ``tau`` and its capacities per range (the most ``M_p`` a range
runs within ``tau``) are reused here as they are (imported, not copied); only the answers
change hands:

- :class:`OwnerRangeTimes` answers each question the range's memory (plans found, floors
  proven) leaves open by one range run (:meth:`.pipelines.RangeRuns.least`) under the
  public ``upper_bound`` ``tau``: a run that finds a plan finds ``g`` itself (exact, its
  least ``T_p``), one that finds nothing proves ``g > tau`` (exhaustive below its bound).
  A bounded run costs the agents far less than an unbounded one (measured on
  ``v3-medium-01``: 0.01 to 0.04 s against 0.12 to 0.4 s), and most questions are asked
  just above or below ``g``. The owner has no static floor (it would need the DCs' devices),
  so a question is asked at ``tau`` itself (the range run climbs its own ladder of
  period bounds from the range's classic optimum, or the floor the runs proved there,
  up to ``tau``: :func:`chainpipe.solvers.cdynp._range_ladder`); what runs
  proved answers questions without a run, as in ``dp``, and across ranges too: a plan on
  a range is a plan of every range holding it (its pipeline leaves the other DCs
  unused), so a plan found inside ``i..j`` bounds ``g(i, j)`` from above, and a floor
  proven on a range holding ``i..j`` bounds it from below;
- :class:`OwnerSearch` is ``dp``'s search with the owner's incumbent: a split it offers
  is planned for real at each range's ``M_p`` (a value ``at_most`` took from a plan found at
  another ``M_p`` is an upper bound for it, ``docs/dp.md``; the run at ``M_p``, bounded by
  it and by the plan's ``max R``, gives the plan and its costs, which an owner across hosts
  needs to evaluate the plan) and evaluated by the owner (:meth:`evaluation` of
  :class:`~chainpipe.solvers.cdynp.LocalOwner` or :class:`.remote.RemoteOwner`).

What is sent is what range runs send (``docs/privacy.md``, "Several pipelines"): the
questions' bounds are public, as every range run's ``upper_bound`` is.
"""

from __future__ import annotations

import math
import sys
import threading
import types
from itertools import chain

from ...plan import Pipeline, Plan
from ..dp_pipelines import SeveralPipelines, cross_syncs
from ..dp_ranges import Found, RangeTimes
from .curve import least_time
from .drive import is_exact

#: exact ``period`` runs under 1F1B: a range's floors include its floor runs' curve
#: (:meth:`.pipelines.RangeRuns.floors`), taken, as ``dp`` takes its prefix curve's, only
#: where the floors the runs proved do not decide; ``False``: the proven floors alone
FLOOR_RUNS = True


class OwnerRangeTimes(RangeTimes):
    """:class:`~chainpipe.solvers.dp_ranges.RangeTimes` answered by CDynP range runs.

    Parameters
    ----------
    runs : RangeRuns
        The owner's range runs (exact options); each question is one
        :meth:`~.pipelines.RangeRuns.least` at ``(m, theta)`` under the bound ``tau``.
    """

    def __init__(self, runs):
        public = runs.owner.public
        super().__init__(types.SimpleNamespace(schedule=public.training.schedule),
                         runs.deadline, math.inf)
        self.runs = runs

    def at_most(self, i: int, j: int, m: int, tau: float, theta: float,
                above: bool = True):
        """As :meth:`RangeTimes.at_most`, without its ladder: what the runs proved answers
        the question if it can (a known plan within ``tau``, a floor above it), else one
        run under ``tau`` finds ``g`` (a plan) or proves it above ``tau``.

        Parameters
        ----------
        i, j : int
            The range's first and last DC.
        m : int
            ``M_p``.
        tau : float
            The target of ``T_p``.
        theta : float
            Every ``R_s`` below it.
        above : bool, default True
            ``dp``'s trials above ``tau`` after a failed one; a run never searches above
            ``tau``, so it is accepted and not read.

        Returns
        -------
        tuple or None
            ``(T_p, max R, stages)`` or ``None``.
        """
        if theta <= 0.0:  # no R_s is below 0 (the sweep's last step past a plan of R = 0)
            return None
        known = self._best_known(i, j, m, theta)
        if known is not None and known[0] <= tau:
            return known
        floor = self._floor(i, j, m, theta)
        if floor > tau:
            return None
        got = self._search(i, j, m, tau, theta, floor)
        return got if got is not None and got[0] <= tau else None

    def _best_known(self, i, j, m, theta):
        """The least upper bound the plans found on DCs ``i..j`` or any range inside it
        give at ``(m, theta)``: a plan of a range inside ``i..j`` is a plan of ``i..j`` (its
        pipeline leaves the other DCs unused), with the same ``T_p`` and ``max R``. Only
        plans with ``T_p + max R`` below the questions' limit (:meth:`within`) count, as
        only those are asked for: one above it answers nothing the search can use, and
        ``dp``'s searches under the limit never find it (``v3-medium-04-gpipe``-like seed
        44: the plans of one-DC ranges found before the search, under no limit, made its
        first sweep find splits at every target that no limited search would)."""
        best = None
        # only the ranges a plan was found on hold one, in the order of the loop over
        # every range inside i..j (a, then b, ascending: the same plan wins a tie)
        for a, b in sorted(r for r in self.found if i <= r[0] and r[1] <= j):
            got = self._least_of(self.found[a, b], m, theta, self.limit)
            if got is not None and (best is None or got[0] < best[0]):
                best = got
        return best

    def _floor(self, i, j, m, theta, tau=math.inf, rough=False) -> float:
        """The best floor the runs proved on DCs ``i..j`` or on any range holding it (no
        static floor): ``g`` of a range is at most ``g`` of a range inside it (the plans
        of the inner range are plans of the outer one). ``inf`` at ``theta <= 0``: no
        ``R_s`` is below 0, so no plan (``dp``'s reach then drops the range instead of
        asking it again). Where these are not above ``tau`` (the question's target), the
        range's floor-run curve raises them (:data:`FLOOR_RUNS`; at ``M_p >= 2``): its runs
        are made on first need, unless ``rough`` (``dp``'s floor without new prefix-curve
        walks), which reads only a curve made before."""
        if theta <= 0.0:
            return math.inf
        lo = 0.0
        # only the ranges a run proved something on have a floor above 0 (no static floor,
        # no prefix curve here): the others are skipped
        for a, b in {*self.proven, *self.proven_within}:
            if a <= i and j <= b:
                self.static.setdefault((a, b, m), 0.0)
                lo = max(lo, super()._floor(a, b, m, theta), self._period_line(a, b, m, theta))
        if lo <= tau and m >= 2 and FLOOR_RUNS:  # the range's floor runs, as dp's curve
            got = self.runs.floors(i, j, make=not rough)
            if got is not None:
                lo = max(lo, least_time(*got, m))
        return lo

    def _period_line(self, i, j, m, theta) -> float:
        """``(m - 1) lambda``: ``lambda`` the largest floor under the range's period that a
        run on DCs ``i..j`` reported (``period_floor_s``) at a ``theta'`` at least
        ``theta`` (its options a superset), and under 1F1B at any ``M_p`` (the floor reads
        none: :func:`.agent.floors_key`), under GPipe at an ``M_p`` at most ``m`` (a stage
        stashes ``M_p``: fewer options fit at a larger one). Every plan's ``T_p`` is its
        fill (at least 0) plus ``m - 1`` periods, each at least ``lambda``
        (``docs/privacy.md``, "A floor under a range's period"); the proven floors of
        :meth:`RangeTimes._floor` raise only at ``m`` above the run's count, so a range's
        capacity at a target came down one run at a time from above (``v3-large-01``: 44
        of 99 runs of several DCs answered by this line, ``benchmarks/results/
        cdynp_range_runs.md``)."""
        lam = 0.0  # (a floor under every plan's period: whatever limit its run was under)
        for m0, th, _v, got, *_ in chain(self.proven.get((i, j), ()),
                                         self.proven_within.get((i, j), ())):
            if th >= theta and (self.one_f_one_b or m0 <= m):
                lam = max(lam, got)
        return (m - 1) * lam

    def _search(self, i, j, m, tau, theta, floor=0.0):
        """One range run under ``tau`` (``inf``: unbounded) whose period runs start above
        ``floor`` (what the runs proved, :meth:`_floor`); records what it proves (a run
        that finds nothing proves ``g`` above its bound, a hair above ``tau``: a floor
        above the question's target, which ``dp``'s search may ask again).

        The question is ``dp``'s, of plans with ``T_p + max R`` below the search's limit
        (:meth:`within`). A range of one DC is asked under it (:meth:`.pipelines.RangeRuns.
        limited`): its plan is within it. An exact ``period`` range of several DCs takes it
        too (:meth:`.pipelines.RangeRuns.under_limit`: its period runs' caps fall under
        it), but answers for a set that holds every plan within it; any other range for
        every plan. When either finds a plan above the limit, with least ``T_p`` ``g0``,
        every plan within the limit has ``T_p >= g0`` and so ``R`` below ``limit - g0``,
        and the range is asked again under that cap (``sync_cap``), which leaves the plan
        found out; until a plan within the limit, none, or a cap that would not fall below
        the plan's ``R`` (a plan at the limit to rounding: the answer). What each run
        proves under a cap below ``theta`` is kept for that cap and, under the limit, for
        ``theta``; what a run under the limit proves, under the limit only."""
        bound = tau * (1 + 1e-9)
        # dp's questions are of plans with T_p + max R below the search's limit (its
        # within()): asked so of the ranges that take it, whose proofs then hold under it
        limit = self.limit if self.runs.under_limit(i, j, m) else math.inf
        exact = self.runs.limited(i, j, m)  # the plan found is within the limit
        cap = theta
        while True:
            # lam: under every plan's period on the range (0: unknown); low: under every
            # plan's T_p, from the run's prefix-curve passes (0: none), may lie above bound
            got, lam, low = self.runs.least_floor(i, j, m, cap, bound, floor, limit)
            self.searches += 1
            if got is None:
                self._proved(i, j, (m, cap, max(bound, low), lam), limit)
                if cap < theta:
                    self._proved(i, j, (m, theta, max(bound, low), lam), self.limit)
                return None
            found = Found(m, float(got.cost.fill_drain_s), float(got.cost.period_s),
                          got.sync, tuple(got.stages))
            self.found.setdefault((i, j), []).append(found)
            self._proved(i, j, (m, cap, got.time, lam), limit)
            if cap < theta:
                self._proved(i, j, (m, theta, got.time, lam), self.limit)
            nxt = self.limit - got.time
            if got.time + got.sync < self.limit or got.time > tau or exact \
                    or not nxt < min(cap, got.sync):
                return got.time, got.sync, list(got.stages)
            if nxt <= 0.0:  # every plan's T_p is at or above the limit: none within it
                self._proved(i, j, (m, theta, bound, lam), self.limit)
                return None
            cap, floor = nxt, max(floor, got.time)

    def _proved(self, i, j, fact: tuple, limit: float) -> None:
        """Record ``fact`` ``(m, theta, floor, lambda)`` of DCs ``i..j``: of every plan
        (:attr:`proven`), or of those with ``T_p + max R`` below ``limit``
        (:attr:`proven_within`, as ``dp`` records its searches under a limit)."""
        if math.isinf(limit):
            self.proven.setdefault((i, j), []).append(fact)
        else:
            self.proven_within.setdefault((i, j), []).append((*fact, limit))


class OwnerBest:
    """The owner's incumbent: ``T`` (the owner's evaluation), the plan, searches made.

    Offers are taken under a lock: across hosts the search may run in a thread beside the
    one-pipeline solve's period run, whose answer is offered too
    (:data:`.pipelines.BESIDE`)."""

    def __init__(self, T: float = math.inf, plan: Plan | None = None):
        self.T, self.plan, self.searches = T, plan, 0
        self._lock = threading.Lock()

    def offer(self, T: float, plan: Plan, ties: bool = False) -> bool:
        """Take ``(T, plan)`` if ``T`` is below the incumbent (``ties``: or equal to it);
        whether it was taken."""
        with self._lock:
            if T < self.T or (ties and T <= self.T):
                self.T, self.plan = T, plan
                return True
            return False


class OwnerSearch(SeveralPipelines):
    """``dp``'s search of several pipelines
    (:class:`chainpipe.solvers.dp_pipelines.SeveralPipelines`)
    with CDynP range runs as its ranges and the owner's incumbent.

    Parameters
    ----------
    runs : RangeRuns
        The owner's range runs (exact options).
    best : OwnerBest
        The incumbent (the best plan of one pipeline, or none); improved in place.
    """

    def __init__(self, runs, best: OwnerBest):
        # not SeveralPipelines.__init__: it builds the ranges from the instance's cost tables,
        # which the owner does not have
        public = runs.owner.public
        self.inst, self.t, self.deadline, self.best, self.log = (
            public, None, runs.deadline, best, None)
        self.runs = runs
        self.exact = is_exact(runs.options)
        self.M, self.K = public.microbatches, public.num_datacenters
        self.H = public.training.pipeline_sync_period
        self.cross = cross_syncs(public)
        self.upper = math.inf
        self.ranges = OwnerRangeTimes(runs)

    def offer(self, chosen) -> None:
        """Plan each chosen range at its ``M_p`` (a run bounded by the entry's ``T_p`` and
        ``max R``: the entry's own stages qualify) and offer the plan to the incumbent."""
        pipes, costs = [], []
        for i, j, m, (T_p, R, _stages) in chosen:
            theta = min(math.nextafter(R, math.inf), sys.float_info.max)
            rp = self.runs.least(i, j, m, theta, T_p * (1 + 1e-9))
            if rp is None and not self.exact:  # a compressed run may drop it (max_entries)
                return
            if rp is None:  # never expected: the entry's stages run m within both
                raise AssertionError(f"cdynp: range {i}..{j} at M_p = {m} lost its plan")
            pipes.append(Pipeline(rp.stages, m))
            costs.append(rp.cost)
        plan = Plan(pipelines=pipes)
        T = float(self.runs.owner.evaluation(plan, costs).iteration_time_s)
        self.best.offer(T, plan)


def several(public, counts, runs, best_T: float, best_plan, search=None,
            best: OwnerBest | None = None):
    """The best plan of ``P >= 2`` pipelines, ``P`` in ``counts``, below ``best_T``, by
    :class:`OwnerSearch` (exact range runs only); ``search``: an earlier one whose memory
    of the ranges (plans found, floors proven) it goes on with; ``best``: the incumbent to
    improve in place (another thread may lower it meanwhile), else a new one of
    ``best_T`` and ``best_plan``.

    Returns
    -------
    tuple
        ``(T, plan)``: the best known (``best_T``, ``best_plan`` if nothing beat them).
    """
    if best is None:
        best = OwnerBest(best_T, best_plan)
    if search is None:
        search = OwnerSearch(runs, best)
    else:
        best.searches = search.best.searches
        search.best = best
    search.run(list(counts))
    return best.T, best.plan
