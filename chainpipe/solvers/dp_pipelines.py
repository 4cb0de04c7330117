"""The exact DP under contract version 3: the ``period`` objective and several pipelines.

:func:`chainpipe.solvers.dp.run` hands an instance here when it needs a version-3
feature (:func:`chainpipe.support.features`). ``docs/dp.md`` ("Version 3") proves each step:

1. **One pipeline.** Under ``period`` with an incumbent (the several-pipeline seed),
   :class:`~chainpipe.solvers.dp_period.PipelineSearch` runs trials from the prefix
   curve's floor up to the incumbent. Otherwise the classic optimum (the version-2
   search) bounds the answer: its ``T`` under ``classic`` is a lower bound (no period is
   below the classic one) and its ``T`` under the instance's objective an upper bound, as
   are the classic optima inside each DC alone (no MAN round trip). When the bounds meet,
   the plan is optimal; otherwise the trials run between them.
2. **Several pipelines.** A pipeline's cost depends only on its DC range and ``M_p``, and
   ``R_X`` only on the outer span. Per last DC and ``M_p`` one search gives, per first DC,
   the plans not dominated in ``(T_p, max R)``. For each span and count ``P``, a sweep over
   the synchronisation ``theta`` (entries with ``max R < theta``, ``theta`` dropping below
   each solution's) and, inside it, a bisection on the target ``tau`` of ``max T_p``: a
   range's largest ``M_p`` meeting ``tau`` (``T_p`` grows with ``M_p``) and a DP over the
   ranges of the span decide whether ``tau`` is reachable.

Every reported ``T`` is :func:`chainpipe.plan.evaluate`'s.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from .. import cost
from ..deadline import Deadline, TimeUp
from ..plan import Pipeline, Plan, evaluate
from ..result import Outcome
from ..tables import CostTables
from . import dp_ranges
from .dp_parallel import Beside, available
from .dp_period import PipelineSearch, search_curve
from .dp_ranges import RangeTimes, close_step

#: relative width at which the bisection on ``max T_p`` stops (the contract's optimum is
#: within a relative 1e-6)
TAU_RTOL = 1e-10
#: bisection steps a step of the sweep takes past its early stop: each raises the proven
#: floor under the next ``theta`` (or finds a better split), which the sweep then drops
#: below at once (:meth:`SeveralPipelines.span`; ``docs/dp.md``: fresh ``-03``-like
#: instances, seeds 3-8, 20.8-76 s against 24.5-83 s with none and 19-300+ s with no limit)
EXTRA_STEPS = 2
#: trial bounds between the classic lower bound and the classic optimum's own ``T``
#: (relative steps above the lower bound): a search's labels grow quickly with how far its
#: bound lies above the optimum, and failed trials below it are cheap, so the ladder is
#: dense (``hybrid`` seed 4: the last trial kept 40,448 labels with steps 0.01, 0.03, 0.1,
#: 0.3, and 12,214 with these; ``docs/dp.md``)
STEPS = (0.005, 0.01, 0.02, 0.03, 0.045, 0.06, 0.08, 0.1, 0.15, 0.2, 0.3, 0.45, 0.6, 0.8, 1.0,
         1.5, 2.0)


def solve(instance, deadline: Deadline, log=None, threads: int = 1,
          scheduler=None) -> Outcome:
    """The proven optimum of a version-3 instance over every allowed pipeline count
    (``threads``, ``scheduler``: the version-2 searches' processes or Dask cluster,
    :func:`chainpipe.solvers.dp.run`)."""
    tables = CostTables(instance)
    pipelines = instance.parallelism.pipelines
    best = _Best()
    try:
        capacity = shared_holds(tables, deadline)
        if any(P > 1 for P in pipelines):
            _seed(instance, deadline, best, threads)
        if 1 in pipelines:
            _one_pipeline(instance, tables, deadline, best, log, capacity, threads, scheduler)
        many = [P for P in sorted(pipelines) if 2 <= P <= min(instance.microbatches, tables.K)]
        if many:
            SeveralPipelines(instance, tables, deadline, best, log, capacity,
                             threads).run(many)
    except TimeUp:
        if best.plan is None:
            return Outcome("no_solution", lower_bound=None,
                           message="time limit reached before a plan was found")
        return Outcome("feasible", plan=best.plan, lower_bound=None,
                       message="time limit reached before the plan was proven optimal")
    if best.plan is None:
        return Outcome("infeasible", lower_bound=None, message=_why_infeasible(tables))
    return Outcome("optimal", plan=best.plan, lower_bound=None,
                   stats={"objective_s": best.T, "searches": best.searches})


def shared_holds(tables: CostTables, deadline: Deadline):
    """What free devices hold under a bottleneck, shared by every search of the instance
    (:class:`Holds`); ``None`` where the version-2 search does without it."""
    from .dp import LayerCapacity

    if tables.single_device or tables.M == 1 or not LayerCapacity.affordable(tables):
        return None
    return Holds(tables, deadline)


class Holds:
    """``dp.LayerCapacity`` valid for a pipeline of ``M_p`` microbatches.

    The knapsack counts the options that fit memory with the least stash of a stage:
    1 under 1F1B whatever ``M_p``, but ``M_p`` under GPipe, where the one built for the
    instance's ``M`` is valid only for ``M_p = M``; for a smaller ``M_p`` a second one,
    built with a stash of 1 (more options hold, so a lower, still valid, floor), serves.
    """

    def __init__(self, tables: CostTables, deadline: Deadline):
        from .dp import LayerCapacity, usage_caps

        self.t, self.deadline = tables, deadline
        self.count = usage_caps(tables)
        self.full = LayerCapacity(tables, self.count, deadline.check)
        self.any_stash = None
        self.chain = self._chain(tables, deadline)
        #: the chain's floors per state ``(k0, usage)``, by position and prefix end
        #: (``dp_period.PipelineSearch._chain_rows``): the same in every search
        self.chain_rows: dict = {}

    def _chain(self, tables: CostTables, deadline: Deadline):
        """The floors by position along the chain (``dp.ChainCapacity``) with stashes of
        ``min(M, q)`` at its ``n`` positions told apart: valid for a pipeline of ``M_p >=
        n`` microbatches (its stages stash no less there; fewer stash less, so their
        stages hold more); ``None`` where they do not apply."""
        from .dp import ChainCapacity

        if not ChainCapacity.useful(tables):
            return None
        chain = ChainCapacity(tables, self.count, deadline.check)
        total = float(tables.flop_prefix[-1])
        low = float(self.full.needed(self.full.curve(list(range(tables.G)), []), total))
        if not np.isfinite(low) or chain.floored(low, total) <= 0:
            return None
        return chain

    def for_pipeline(self, microbatches: int):
        """The capacity valid for a pipeline of ``microbatches``."""
        if self.t.schedule == "1f1b" or microbatches == self.t.M:
            return self.full
        if self.any_stash is None:
            from .dp import LayerCapacity

            self.any_stash = LayerCapacity(self.t, self.count, self.deadline.check, need=1)
        return self.any_stash


def _seed(instance, deadline: Deadline, best: _Best, threads: int = 1) -> None:
    """Offer the ``replicate-per-dc`` baseline's plan (one pipeline per DC, each planned
    inside its DC: a few small searches) before the exact searches: an incumbent of
    several pipelines bounds the one-pipeline trials and the range searches, and is what
    a search cut by the time limit returns when it beats the best plan of one pipeline
    (``threads``: the DCs planned in that many processes)."""
    from .baselines.replicate import replicate_per_dc

    got = replicate_per_dc(instance, deadline=deadline, threads=threads)
    if got.plan is not None:
        best.offer(instance, got.plan)


class _Best:
    """The incumbent: its plan and its ``T`` by :func:`evaluate`."""

    def __init__(self):
        self.T, self.plan, self.searches = math.inf, None, 0

    def offer(self, instance, plan: Plan) -> None:
        ev = evaluate(instance, plan)
        if ev.feasible and ev.iteration_time_s < self.T:
            self.T, self.plan = float(ev.iteration_time_s), plan


def _why_infeasible(tables: CostTables) -> str:
    """The reason no plan exists: a layer no device holds even with the least stash any
    pipeline may have (GPipe's ``M_p`` can be 1 with several pipelines), else memory
    and counts."""
    inst = tables.instance
    counts = inst.parallelism.pipelines
    if all(P > min(inst.microbatches, tables.K) for P in counts):
        return (f"no allowed pipeline count {list(counts)} fits: P pipelines need P "
                f"microbatches (M = {inst.microbatches}) and P datacenters (K = {tables.K})")
    several = any(2 <= P <= min(inst.microbatches, tables.K) for P in counts)
    if several and tables.schedule == "gpipe":
        training = dataclasses.replace(inst.training, microbatches=1)
        tables = CostTables(dataclasses.replace(inst, training=training))
    return tables.infeasibility_reason() or (
        "no plan of an allowed pipeline count satisfies the memory limits and device counts")


def classic_instance(instance):
    """The same instance under ``classic`` with one pipeline (version 2's problem)."""
    training = instance.training
    par = dataclasses.replace(training.parallelism, pipelines=(1,))
    return dataclasses.replace(instance, training=dataclasses.replace(
        training, objective="classic", parallelism=par))


def _one_pipeline(instance, tables, deadline, best: _Best, log, capacity, threads=1,
                  scheduler=None) -> None:
    """Offer the best plan of one pipeline to ``best`` (``threads``, ``scheduler``: the
    version-2 searches' processes or cluster, :mod:`.dp_parallel`, :mod:`.dp_dask`)."""
    from .dp import solve_checked as dp_run

    floor = _curve_floor(tables, best.T)
    if floor >= best.T:
        return  # no plan of one pipeline beats the incumbent (v3-large-03: 6.1 s saved)
    if floor > 0 and instance.training.objective == "period":
        # the curve's floor starts the trials and the incumbent ends them: the classic
        # search's T_c and T_e would only move the first trial (docs/dp.md)
        _trials(instance, tables, deadline, best, log, capacity, floor, best.T, threads)
        return
    ref = dp_run(classic_instance(instance), deadline, threads, scheduler=scheduler)
    if ref.status.value == "no_solution":
        raise TimeUp()
    if ref.plan is None:  # infeasible for one pipeline, whatever the objective
        return
    T_c = float(evaluate(classic_instance(instance), ref.plan).iteration_time_s)
    T_e = float(evaluate(instance, ref.plan).iteration_time_s)
    best.offer(instance, ref.plan)
    if T_e <= T_c * (1 + 1e-12):
        return
    for k in range(tables.K if tables.K > 1 else 0):  # no MAN round trip: often a better bound
        if tables.pipeline_bound(k, k, tables.M) >= best.T:
            continue  # no plan on DC k alone beats the incumbent: its solve would offer none
        alone = dataclasses.replace(classic_instance(instance), links=(),
                                    datacenters=(instance.datacenters[k],))
        got = dp_run(alone, deadline, threads)
        if got.plan is not None:  # device names are the full instance's too
            best.offer(instance, got.plan)
    T_e = min(T_e, best.T)
    _trials(instance, tables, deadline, best, log, capacity,
            max(T_c, _curve_floor(tables, T_e)), T_e, threads)


def _trials(instance, tables, deadline, best: _Best, log, capacity, low: float,
            high: float, threads: int = 1) -> None:
    """Offer the best plan of one pipeline below ``high`` to ``best``, if any: the trials
    ``low (1 + d)`` for ``d`` in :data:`STEPS` below ``high``, then ``high (1 + 1e-9)``,
    each a search of every plan below it, until one finds a plan (the optimum: every plan
    below its bound was enumerated); after a dear miss the next trial is close above it
    (:func:`.dp_ranges.close_step`, the range ladders' rule: a search far above the
    optimum costs several times one just above). ``low``: a floor under every plan of one
    pipeline. With ``threads > 1``, once a miss kept :data:`.dp_ranges.PAIR` labels, two
    trials run at once, the upper one in a forked process (:class:`.dp_parallel.Beside`):
    the lower one's plan wins, else the upper one's answer counts."""
    if low >= high:
        return  # the incumbent is the best of one pipeline or better
    trials = sorted({low * (1 + d) for d in STEPS if low * (1 + d) < high} | {high * (1 + 1e-9)})
    n, labels, pairs = 0, None, threads > 1 and available()
    while n < len(trials):
        if pairs and labels is not None and labels >= dp_ranges.PAIR and n + 1 < len(trials):
            close_step(trials, n, labels)
            with Beside(lambda x=trials[n + 1]: _trial(tables, x, deadline, capacity),
                        deadline) as there:
                found, labels = _trial(tables, trials[n], deadline, capacity, log)
                if found is None:
                    best.searches += 1
                    n += 1
                    found, labels = there.result()
                    _said(log, trials[n], found, labels)
        else:
            found, labels = _trial(tables, trials[n], deadline, capacity, log)
        best.searches += 1
        if found is not None:
            best.offer(instance, Plan.from_tuples(instance, found))
            return
        close_step(trials, n, labels)
        n += 1


def _trial(tables, bound: float, deadline, capacity, log=None):
    """One search of every plan of one pipeline with ``T`` below ``bound``: the best
    plan's stages (``None`` if none) and the labels it kept."""
    search = PipelineSearch(tables, tables.M, None, bound, deadline, "sum", capacity)
    done = search.run()
    found = None
    if done:
        entry = min((x for v in done.values() for x in v), key=lambda x: x[0] + x[1])
        found = search.backtrack(entry[2])
    _said(log, bound, found, search.stats["labels"])
    return found, search.stats["labels"]


def _said(log, bound: float, found, labels: int) -> None:
    """The log line of one trial of :func:`_trials`."""
    if log is not None:
        log(f"dp: one pipeline, trial T < {bound:.6g} s: "
            f"{'plan found' if found is not None else 'none'} ({labels} labels)")


def _curve_floor(tables: CostTables, upper: float) -> float:
    """A floor under ``T_p`` of every plan of one pipeline below ``upper``
    (:meth:`.prefix_curve.PrefixCurve.least_time` over the whole chain); 0 where the
    period is not capped, ``inf`` when the model does not fit the curve's relaxed rules
    under the period cap ``upper / (M - 1)`` (no plan of one pipeline is below ``upper``)."""
    M = tables.M
    if M <= 1 or not np.isfinite(upper):
        return 0.0
    curve = search_curve(tables, M, None, None)
    return float(curve.least_time(M, upper / (M - 1), tables.K - 1))


def cross_syncs(instance) -> dict[tuple[int, int], float]:
    """``R_X / H`` per outer span ``(i, j)``, ``i < j``, of an instance (or of the public
    part the CDynP owner holds: links, layers and training are all it reads)."""
    K, H = len(instance.links) + 1, instance.training.pipeline_sync_period
    total = float(sum(ly.params for ly in instance.model.layers))
    gamma = instance.training.gradient_bytes_per_param
    out = {}
    for i in range(K):
        for j in range(i + 1, K):
            bw, lat = cost.chain_path(instance.links, i, j)
            out[i, j] = float(cost.cross_sync_time(total, gamma, bw, lat)) / H
    return out


class SeveralPipelines:
    """The optimum over plans of ``P >= 2`` pipelines (``docs/dp.md``, "Version 3")."""

    def __init__(self, instance, tables, deadline, best: _Best, log, capacity, threads=1):
        self.inst, self.t, self.deadline, self.best, self.log = instance, tables, deadline, best, log
        self.M, self.K = instance.microbatches, tables.K
        self.H = instance.training.pipeline_sync_period
        self.cross = cross_syncs(instance)
        # one bound for every pipeline search, fixed before the first: T_p + max R below it
        self.upper = best.T - min(self.cross.values())
        self.ranges = RangeTimes(tables, deadline, self.upper, capacity, log,
                                 threads if available() else 1)

    def entry(self, i: int, j: int, m: int, tau: float, theta: float):
        """A plan on range ``[i, j]`` with ``m`` microbatches, ``max R < theta`` and
        ``T_p <= tau``: ``(T_p, max R, stages)``, or ``None`` when none exists
        (:class:`~chainpipe.solvers.dp_ranges.RangeTimes`)."""
        return self.ranges.at_most(i, j, m, tau, theta)

    def capacity(self, i: int, j: int, tau: float, theta: float, top: int,
                 rough: bool = False) -> int:
        """The largest ``m <= top`` whose floor on ``[i, j]`` is at most ``tau``
        (:meth:`RangeTimes.may_meet`: no search; at least the largest ``m`` whose best
        ``T_p`` is, 0 if none): neither grows with ``m``, so a bisection finds it.
        ``rough``: with the floors made so far, no new walk (never below the answer)."""
        lo, hi = 0, top
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self.ranges.may_meet(i, j, mid, tau, theta, rough):
                lo = mid
            else:
                hi = mid - 1
        return lo

    def _known_cap(self, i: int, j: int, tau: float, theta: float, lo: int, hi: int) -> int:
        """The largest ``m`` in ``[lo, hi]`` a plan already found meets ``tau`` with
        (``lo`` if none; what the plans found give does not fall with ``m``)."""
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self.ranges.meets(i, j, mid, tau, theta):
                lo = mid
            else:
                hi = mid - 1
        return lo

    def run(self, counts: list[int]) -> None:
        """Offer the best plan of each count in ``counts`` to the incumbent, the largest
        count first: its ranges are the shortest, their searches the cheapest, and the
        incumbent they give bounds the longer ranges' searches (``v3-medium-02``: 7.4 s
        smallest count first, 4.1 s largest first)."""
        for P in sorted(counts, reverse=True):
            for i0 in range(self.K):
                for j0 in range(i0 + P - 1, self.K):
                    self.deadline.check()
                    self.span(P, i0, j0)
        self.best.searches += self.ranges.searches

    def span(self, P: int, i0: int, j0: int) -> None:
        """The best plans of ``P`` pipelines whose outer span is ``[i0, j0]``: a sweep
        over ``theta``, each step below the last solution's ``max R``."""
        X = self.cross[i0, j0]
        theta, floor = math.inf, 0.0
        while X < self.best.T:
            with self.ranges.within(self.best.T - X):
                got = self.least_max_time(P, i0, j0, theta, self.best.T - X, floor)
            if got is None:
                return
            tau, chosen, floor = got  # a smaller theta never lowers the least max T_p
            rho = max(e[1] for _, _, _, e in chosen)
            if tau + rho + X < self.best.T:
                self.offer(chosen)
            # every solution left has max T_p > floor: one with max R at or above
            # best.T - X - floor cannot beat the incumbent, so theta drops there at once
            theta = min(rho, self.best.T - X - floor)

    def least_max_time(self, P, i0, j0, theta, limit, floor=0.0):
        """The least ``max T_p`` below ``limit`` (relative :data:`TAU_RTOL`) over ranges of
        the span and splits of ``M`` with every ``max R < theta``: ``(tau, [(i, j, m,
        entry), ...], lo)`` with ``lo`` a target proven out of reach, or ``None``.
        ``floor``: a target known to be out of reach (the last ``lo`` at a larger
        ``theta``). Targets go from just above the floor (two steps) to ``limit`` until
        one is reachable (a low guess first cost more than it saved: its bisections over
        ``M_p`` search every range at targets far below its time), then a bisection; each
        reachable target drops to the largest ``T_p`` of its split, and each split found
        is first tested a hair below it (within :data:`TAU_RTOL`): when it is the least,
        one step proves it where halving took 30 (fresh ``v3/large``-like instance,
        class ``-03``, seed 6: the same three range searches repeated at targets ever
        nearer it). The bisection stops early, :data:`EXTRA_STEPS` steps after ``lo`` plus
        the found split's ``max R`` reaches ``limit``: every solution with ``max R`` from
        there to ``theta`` has ``max T_p > lo``, so none of them beats the limit, and the
        sweep moves below that ``max R`` with ``lo`` proven (and below ``limit - lo``: the
        extra steps raise ``lo``; with none, fresh ``-03``-like seed 4 took 125 s instead
        of 67: its next steps proved their floors at a lower ``theta``, with dearer
        searches; with no stop, seed 6 was not proven in 300 s). So the first target it
        tries is that point, ``limit - max R``
        (``v3-medium-03``: 279 searches, 249 with the stop, 242 with this first try, 176
        without the low guesses)."""
        top = limit * (1 - 1e-15)
        if floor >= top:
            return None
        lo, found = floor, None
        near = [floor * 1.01, floor * 1.05] if floor > 0 else []
        for tau in near + [top]:
            if tau > top or tau <= lo or found is not None:
                continue
            found = self.reach(P, i0, j0, tau, theta)
            if found is None:
                lo = tau
        if found is None:
            return None
        extra = 0
        tested = None  # the last split found that a target a hair below it was tried for
        while found[0] > lo * (1 + TAU_RTOL) + 1e-300:
            stop_at = limit - max(e[1] for *_, e in found[1])
            if lo >= stop_at:
                if extra >= EXTRA_STEPS:
                    break  # no solution from here to the found one's max R can beat the limit
                extra += 1
            # the target at which the sweep could stop, if it is out of reach; else, once
            # per split found, a hair below it (out of reach: it is the least); else halve
            below = (stop_at >= found[0] or stop_at <= lo) and tested != found[0]
            if lo < stop_at < found[0]:
                mid = stop_at
            elif below:
                tested, mid = found[0], max(found[0] / (1 + TAU_RTOL), (lo + found[0]) / 2)
            else:
                mid = (lo + found[0]) / 2
            if mid <= lo or mid >= found[0]:
                break
            better = self.reach(P, i0, j0, mid, theta)
            if better is not None:
                found = better
            else:
                lo = mid
                if below:  # nothing a hair below the split found: it is the least
                    break
        return found + (lo,)

    def reach(self, P, i0, j0, tau, theta):
        """Ranges and a split with every ``T_p <= tau`` and ``max R < theta``: ``(max
        T_p, chosen)`` or ``None``.

        Each range's most microbatches at ``tau`` lies between what the plans found give
        (``lower``) and what its floors allow (``upper``, no search; first from the floors
        already made, and walked only once the DP picks the range: a floor left out only
        raises ``upper``; ``docs/dp.md``, "Several pipelines"). A DP over the span
        (:meth:`_most`) picks the ranges the ``upper`` values let take the most: if even
        they fall short of ``M``, the target is out of reach; if their ``lower`` values
        reach ``M``, those plans are the answer; else one search narrows one of them
        (:meth:`_probe`) and the DP runs again. Each search raises a ``lower`` or drops an
        ``upper``, so this ends, and no range is pinned down further than the answer
        needs (``v3-large-02``: most ranges' ``upper`` only had to fall a few
        microbatches, which searches past a range's answer prove cheaply)."""
        top = self.M - (P - 1)
        upper: dict = {}
        lower: dict = {}  # what each probe proved, whatever rounding the floors see

        rough: set = set()  # the ranges whose ``upper`` is rough (no new walk made)

        def cap(i, k):
            if (i, k) not in upper:
                upper[i, k] = self.capacity(i, k, tau, theta, top, rough=True)
                rough.add((i, k))
            return upper[i, k]

        while True:
            ranges = self._most(P, i0, j0, cap)
            if ranges is None:
                return None
            picked = rough.intersection(ranges)
            if picked:  # the walks only for the ranges the DP picks, then the DP again
                for r in picked:
                    upper[r] = min(upper[r], self.capacity(*r, tau, theta, top))
                rough.difference_update(picked)
                continue
            ups = [upper[r] for r in ranges]
            lows = [max(lower.get(r, 0), self._known_cap(*r, tau, theta, 0, u))
                    for r, u in zip(ranges, ups)]
            if min(lows) >= 1 and sum(lows) >= self.M:
                return self.split(ranges, lows, tau, theta)
            r, m, got = self._probe(ranges, lows, ups, tau, theta)
            if got is None:  # g(m) > tau: the range takes fewer
                upper[r] = min(upper[r], m - 1, self.capacity(*r, tau, theta, top))
            else:
                lower[r] = m

    def _probe(self, ranges, lows, ups, tau, theta):
        """Search one range of ``ranges`` at one ``M_p``: ``(range, M_p, entry or None)``.

        The range is the one of fewest DCs whose ``lows`` and ``ups`` entries differ (the
        wider gap on a tie): its searches are the cheapest (``v3-large-03``: 63 s with
        the widest gap first, 46 s so). ``M_p`` is just low enough that "none" brings
        the ranges' total below ``M`` (a search past a range's answer is cheap), but not
        below the middle of the gap (a bisection's worst case). No trials above ``tau``
        (:meth:`RangeTimes.at_most`): near a long range's time they were the dearest
        searches of all (``v3-large-03``: 9.8 s for one that found nothing)."""
        drop = sum(ups) - self.M + 1
        k = max((q for q in range(len(ranges)) if ups[q] > lows[q]),
                key=lambda q: (ranges[q][0] - ranges[q][1], ups[q] - lows[q]))
        m = max(ups[k] - drop + 1, (lows[k] + ups[k] + 1) // 2, lows[k] + 1)
        return ranges[k], m, self.ranges.at_most(*ranges[k], m, tau, theta, above=False)

    def _most(self, P, i0, j0, cap):
        """The ranges of ``P`` pipelines over the span that take the most microbatches
        with ``cap(i, k)`` each, if they take ``M`` or more (else ``None``): per count
        ``q`` and last DC ``k``, the most ``q`` ranges from ``i0`` to ``k`` can take; ``cap``
        is asked only of ranges a split can use (the ``q``-th of ``P`` starts at ``i0 + q -
        1`` or later and leaves ``P - q`` DCs after it)."""
        most = {(1, k): (cap(i0, k), None) for k in range(i0, j0 - P + 2) if cap(i0, k) > 0}
        for q in range(2, P + 1):
            for k in ([j0] if q == P else range(i0 + q - 1, j0 - P + q + 1)):
                for i in range(i0 + q - 1, k + 1):
                    if not any((q - 1, j) in most for j in range(i0, i)) or cap(i, k) == 0:
                        continue
                    v, j = max((most[q - 1, j][0], j) for j in range(i0, i) if (q - 1, j) in most)
                    if (q, k) not in most or v + cap(i, k) > most[q, k][0]:
                        most[q, k] = (v + cap(i, k), (j, i))
        if most.get((P, j0), (0,))[0] < self.M:
            return None
        ranges, q, k = [], P, j0
        while q >= 1:
            total, back = most[q, k]
            start = i0 if back is None else back[1]
            ranges.append((start, k))
            if back is not None:
                k = back[0]
            q -= 1
        ranges.reverse()
        return ranges

    def split(self, ranges, caps, tau, theta):
        """Microbatches per range, each at most its cap (at ``tau``) and at least 1, adding
        up to ``M``: ``(max T_p, [(i, j, m, entry), ...])``."""
        ms, excess = list(caps), sum(caps) - self.M
        for p in range(len(ms)):
            cut = min(excess, ms[p] - 1)
            ms[p] -= cut
            excess -= cut
        chosen = [(i, j, m, self.entry(i, j, m, tau, theta)) for (i, j), m in zip(ranges, ms)]
        return max(e[0] for *_, e in chosen), chosen

    def offer(self, chosen) -> None:
        """Build the plan of ``chosen`` and offer it to the incumbent."""
        pipes = []
        for _i, _j, m, e in chosen:
            pipes.append(Pipeline(Plan.from_tuples(self.inst, e[2]).stages, m))
        self.best.offer(self.inst, Plan(pipelines=pipes))
        if self.log is not None:
            self.log(f"dp: {len(pipes)} pipelines, T = {self.best.T:.6g} s")
