"""What the search of several pipelines knows of each DC range's least ``T_p``.

For a range of DCs ``i..j``, ``M_p = m`` microbatches and a synchronisation limit
``theta``, let ``g(i, j, m, theta)`` be the least ``T_p`` of a pipeline placed on that
range with every ``R_s < theta`` (among plans with ``T_p + max R`` below the search's
bound). :class:`RangeTimes` answers "is ``g <= tau``?" exactly, searching as little as it
can (``docs/dp.md``, "Version 3", several pipelines):

- ``g`` does not decrease with ``m`` (a plan of ``m`` microbatches runs ``m - 1`` with no
  more stashed and a subset of its loops) nor increase with ``theta``; so a search that
  proves ``g > x`` at ``(m, theta)`` proves it at every ``m' >= m``, ``theta' <= theta``;
- a plan found at ``m`` with fill ``A`` and period ``lambda`` runs any ``m' <= m`` in at
  most ``A + (m' - 1) lambda``, and, under 1F1B with fewer than ``m`` stages (every
  stash and loop then independent of ``M_p``), any ``m' > m`` in exactly that;
- a static floor (:meth:`~chainpipe.tables.CostTables.pipeline_bound`) starts a ladder of
  trial targets; the first trial that finds a plan finds ``g`` itself (the search's target
  drops to each plan found), and each trial that finds none proves ``g`` above it.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from itertools import chain

import numpy as np

from ..deadline import Deadline
from ..tables import CostTables
from .dp_period import PipelineSearch, search_curve
from .prefix_curve import PrefixCurve

#: relative steps of the trial targets above the best proven floor (then the target): a
#: search's labels grow steeply with how far its target lies above ``g`` (measured: 2 000
#: labels 1% below, 18 000 at 8% above), while those below it stay cheap
LADDER = tuple(1.03 ** k - 1 for k in range(1, 40))
#: a ladder step less than this (relative) below the target is left out for the target
#: itself: a search just under it costs about as much and proves little more (a fresh
#: ``-03``-like instance, seed 6: 12.708 then 12.7515, 2.4 and 2.8 s, both finding none)
NEAR = 0.015
#: relative steps of the trials above a target that found nothing
ABOVE = (0.03, 0.06, 0.1)
#: a miss at the target that kept fewer labels than this (a cheap range) is followed by
#: a trial :data:`ABOVE` ``[0]`` above it even where none is asked (:meth:`RangeTimes.at_most`):
#: the bisections ask the same range again at targets a hair higher, each a search of its
#: own whose fixed costs (6 ms on ``v3-large-03``, where 100 searches kept under 100
#: labels) outweigh its labels, while the trial above finds ``g`` or a floor that
#: answers them (``v3-large-03`` 5.8 to 5.2 CPU s; 100 labels: 5.4 s; 1,000: 5.4 s)
CHEAP = 300
#: a ladder trial that finds nothing after keeping fewer labels than this lies far below
#: ``g`` (its labels grow steeply near it), so the next rung is left out: each search has
#: fixed costs its few labels do not repay (``v3-large-03``: 174 to 155 searches, 246,447
#: to 239,950 labels; fresh ``-03``-like seeds 4 and 6 213 to 189 and 308 to 281)
FAR = 300
#: a ladder whose misses' labels grow by less than this a rung is far below ``g`` (near
#: it they grow two to four times a rung), so its steps double, up to :data:`STRIDE`
#: rungs: a fresh ``-03``-like instance, seed 26, climbed 27 rungs on one DC at ``M_p = 4``
#: (labels 1.2 to 1.4 times a rung; 23.7 to 17.9 CPU s in all with the strides, the other
#: committed and fresh instances measured searched as before or less)
SLOW = 1.5
#: the most rungs one step of the ladder climbs (:data:`SLOW`)
STRIDE = 4
#: the labels a search of a range keeps past which the range is *dear*: its later
#: searches walk a prefix curve of their own limit ``theta`` (walks per range and
#: ``theta``, which cheap ranges do not repay)
DEAR = 10_000
#: a trial that finds nothing after keeping more labels than this lies close below the
#: range's ``g`` (a search's labels grow steeply as its target nears ``g``), so the
#: next trial is at most :data:`CLOSE_STEP` above it instead of the ladder's next step:
#: a search far above ``g`` costs several times one just above it (fresh ``-03``-like
#: seed 4, DCs ``4..6`` at ``M_p = 47``: none at 11.474 s with 3.4 s, then the next
#: step 2.1 % above ``g`` took 15.3 s; a 1.5 % step lands 0.4 % above it). A smaller
#: step after every miss, or after cheaper ones, trades the overshoot for more misses
CLOSE = 40_000
#: the relative step after a trial that kept more than :data:`CLOSE` labels
CLOSE_STEP = 0.015
#: with several processes, a ladder's trials run two at a time (:meth:`RangeTimes._pair`)
#: once a miss kept this many labels: the next trials then cost more than a fork and
#: the answer's transfer (a search keeps about 50,000 labels a second)
PAIR = 5_000


def close_step(trials: list, n: int, labels: int) -> None:
    """After trial ``trials[n]`` found nothing and kept ``labels`` labels: if that is more
    than :data:`CLOSE` (a dear miss, the answer lies close above it), put a trial
    :data:`CLOSE_STEP` above it next, unless the next one is nearer already."""
    near = trials[n] * (1 + CLOSE_STEP)
    if labels > CLOSE and n + 1 < len(trials) and trials[n + 1] > near:
        trials.insert(n + 1, near)


@dataclass(frozen=True)
class Found:
    """A plan found for a range: its ``M_p``, fill, period, ``max R`` and stages."""

    m: int
    fill: float
    period: float
    sync: float
    stages: tuple

    def time_at(self, m: int, one_f_one_b: bool) -> float:
        """An upper bound on the plan's ``T_p`` with ``m`` microbatches (``inf`` where the
        plan is not known to be valid at ``m``)."""
        if m <= self.m or (one_f_one_b and len(self.stages) < self.m):
            return self.fill + (m - 1) * self.period
        return np.inf


class RangeTimes:
    """Exact answers to "a plan on DCs ``i..j`` with ``T_p <= tau``?" (module docstring).

    Parameters
    ----------
    tables : CostTables
    deadline : Deadline
    upper : float
        Only plans with ``T_p + max R`` below it are searched.
    holds : dp_pipelines.Holds or None
        What free devices hold under a bottleneck (a floor under each range's period).
    log : callable or None
    processes : int
        With more than one, a dear ladder's trials run two at a time (:meth:`_pair`).
    """

    def __init__(self, tables: CostTables, deadline: Deadline, upper: float, holds=None,
                 log=None, processes: int = 1):
        self.t, self.deadline, self.upper, self.holds, self.log = (
            tables, deadline, upper, holds, log)
        self.processes = processes
        self.one_f_one_b = tables.schedule == "1f1b"
        self.found: dict[tuple[int, int], list[Found]] = {}
        #: per range, ``(m0, theta, floor, lambda0 at m0)`` of what each search proved
        self.proven: dict[tuple[int, int], list[tuple[int, float, float, float]]] = {}
        self.floors: dict[tuple, float] = {}
        self.static: dict[tuple[int, int, int], float] = {}
        self.curved: dict[tuple[int, int, int], float] = {}
        self.searches = 0
        #: the labels the last search kept
        self.last_labels = 0
        #: the dear ranges (:data:`DEAR`)
        self.dear: set[tuple[int, int]] = set()
        #: the bound on ``T_p + max R`` of the questions asked now (:meth:`within`)
        self.limit = upper
        #: per range, ``(m0, theta, floor, lambda0, limit)`` of what each search under a
        #: limit below ``upper`` proved (:attr:`proven`'s, for bounds at most ``limit``)
        self.proven_within: dict[tuple[int, int], list] = {}

    @contextmanager
    def within(self, limit: float):
        """Ask the questions inside the block only of plans with ``T_p + max R`` below
        ``limit`` (at most ``upper``): the searches keep no other, and what they prove
        holds for every question under the same bound or a lower one."""
        before, self.limit = self.limit, min(self.upper, limit)
        try:
            yield self
        finally:
            self.limit = before

    def at_most(self, i: int, j: int, m: int, tau: float, theta: float, above: bool = True):
        """``(T_p, max R, stages)`` of a plan on DCs ``i..j`` with ``m`` microbatches, every
        ``R < theta`` and ``T_p <= tau`` (the least ``T_p`` when a search had to find it),
        or ``None`` when no such plan exists.

        A search at ``tau`` that finds nothing is followed by a few above it (to a known
        plan's ``T_p`` at most) unless ``above`` is false: the bisections ask the same
        range again at targets a hair higher, which ``g`` itself, once found, answers
        without searching. With ``above`` false, one trial above follows a cheap miss
        (:data:`CHEAP`), the answer still ``None``."""
        known = self._best_known(i, j, m, theta)
        if known is not None and known[0] <= tau:
            return known
        lo = self._floor(i, j, m, theta, tau)
        if lo <= tau and self._theta_apart(i, j, theta):  # the searches' curve, first
            lo = max(lo, self._theta_floor(i, j, m, theta))
        if lo > tau or lo == np.inf:
            return None
        ceiling = np.inf if known is None else known[0]
        trials = [x for x in (lo * (1 + d) for d in LADDER)
                  if x < min(tau / (1 + NEAR), ceiling)] + [tau]
        if above:
            trials += [x for x in (tau * (1 + d) for d in ABOVE) if x < ceiling]
        if above and known is not None:
            trials.append(ceiling)
        n, before, stride = 0, None, 1
        while n < len(trials):
            if self._pairs(trials, n, before):  # this trial here, the next beside it
                got = self._pair(i, j, m, trials[n], trials[n + 1], theta)
                n += 1  # (the rules below read the upper one's labels)
            else:
                got = self._search(i, j, m, trials[n], theta)
            if got is not None:  # g itself (a search keeps plans a rounding hair above)
                return got if got[0] <= tau else None
            close_step(trials, n, self.last_labels)
            stride = self._stride(self.last_labels, before, stride)
            before = self.last_labels
            for _ in range(stride - 1):  # (never the target itself)
                if n + 2 < len(trials) and trials[n + 2] <= tau:
                    del trials[n + 1]
            if n == len(trials) - 1 and not above and self.last_labels < CHEAP \
                    and tau * (1 + ABOVE[0]) < ceiling:
                trials.append(tau * (1 + ABOVE[0]))
                above = True
            n += 1
        return None

    @staticmethod
    def _stride(labels: int, before: int | None, stride: int) -> int:
        """How many rungs of the ladder the next trial moves up after a miss that kept
        ``labels`` (``before``: the last miss's, ``stride`` rungs below): one after a
        dear miss (:func:`close_step` put the next trial close above it) or one whose
        labels grew steeply (``g`` is near); twice the last stride, up to
        :data:`STRIDE`, while they grow by less than :data:`SLOW` a rung (``g`` is far);
        at least two after a miss under :data:`FAR` labels."""
        if labels > CLOSE:
            return 1
        slow = before is not None and labels < SLOW ** stride * before
        got = min(2 * stride, STRIDE) if slow else 1
        return max(got, 2) if labels < FAR else got

    def may_meet(self, i: int, j: int, m: int, tau: float, theta: float,
                 rough: bool = False) -> bool:
        """Whether ``g(i, j, m, theta) <= tau`` is still possible by what is known (a plan
        found within it, else the floor not above it), without searching; it does not grow
        with ``m`` (nor the floors shrink). ``rough``: no prefix-curve walk is made for it
        (the floors already made still count), so a ``True`` may be one the walks would
        turn down."""
        known = self._best_known(i, j, m, theta)
        if known is not None and known[0] <= tau:
            return True
        floor = self._floor(i, j, m, theta, tau, rough)
        return floor <= tau and floor < np.inf  # an infinite floor: no plan at all

    def meets(self, i: int, j: int, m: int, tau: float, theta: float) -> bool:
        """Whether a plan already found shows ``g(i, j, m, theta) <= tau`` (no search;
        it does not grow with ``m``)."""
        known = self._best_known(i, j, m, theta)
        return known is not None and known[0] <= tau

    def _best_known(self, i, j, m, theta):
        """The least upper bound the plans found give at ``(m, theta)``."""
        return self._least_of(self.found.get((i, j), ()), m, theta)

    def _least_of(self, plans, m: int, theta: float, limit: float = np.inf):
        """``(T_p, max R, stages)`` of the least ``T_p`` at ``(m, theta)`` that ``plans``
        (:class:`Found`) give among those with ``T_p + max R`` below ``limit``, or ``None``
        (a plan not known to run ``m`` gives none)."""
        best = None
        for f in plans:
            if f.sync < theta:
                T = f.time_at(m, self.one_f_one_b)
                if T + f.sync < limit and (best is None or T < best[0]):
                    best = (T, f.sync, f.stages)
        return best

    def _floor(self, i, j, m, theta, tau=np.inf, rough=False) -> float:
        """The best floor under ``g(i, j, m, theta)``: the static one and every proven one
        at some ``m0 <= m`` and ``theta' >= theta``, raised by ``(m - m0) lambda0``: a
        plan's ``T_p`` grows by at least its period at ``m0`` per microbatch more (its
        period does not shrink), and ``lambda0`` (:meth:`_period_floor`) is under every
        plan's period on the range. The prefix curve's floor (whose walks are most of a
        range's cost) is taken only when the others are not above ``tau``: the answer
        is then a floor above ``tau`` or the best floor (``v3-large-03``: 36 range curves
        made instead of 65; ``v3-large-02`` 11.3 to 8.0 s)."""
        lo = self.static.get((i, j, m))
        if lo is None:
            lo = self.static[i, j, m] = float(
                self.t.pipeline_bound(i, j, m, self._period_floor(i, j, m)))
        least = self._least_cap(i, j)
        unbounded = ((*x, self.upper) for x in self.proven.get((i, j), ()))
        for m0, th, v, lam, lim in chain(unbounded, self.proven_within.get((i, j), ())):
            if m0 <= m and th >= theta and lim >= self.limit:
                lo = max(lo, v + (m - m0) * max(lam, least) if m > m0 else v)
        if lo <= tau:  # the prefix curve's floor only where the others do not decide
            curve = self.curved.get((i, j, m))
            if curve is None and not rough:
                curve = self.curved[i, j, m] = self._curve_floor(i, j, m)
            lo = lo if curve is None else max(lo, curve)
        if lo <= tau and not rough and self._theta_apart(i, j, theta) and PrefixCurve.made(
                self.t, i, j, True, False, theta) is not None:
            lo = max(lo, self._theta_floor(i, j, m, theta))  # (its walks mostly made)
        return lo

    def _theta_apart(self, i, j, theta) -> bool:
        """Whether the range's searches at ``theta`` walk a curve of their own
        (:func:`.dp_period.search_curve`: a finite limit, the range dear), a range of one
        DC too: CDynP's one-DC memories (:mod:`.cdynp.alone`) ask nothing else, and on
        ``v3-large-03`` theirs kept 93,432 labels instead of 189,315 (``dp``'s searches
        214,967 instead of 239,950; a fresh ``-03``-like instance, seed 7: the memories
        3.79 CPU s instead of 5.36)."""
        return bool(np.isfinite(theta)) and (i, j) in self.dear

    def _least_cap(self, i, j) -> float:
        """The range's least cap, once its prefix curve has found it: the largest
        ``max(C, U)`` under which the relaxed walk cannot place the model on DCs ``i..j``
        (:meth:`.prefix_curve.PrefixCurve.grid`), so under every plan's period at any
        ``M_p``; 0 until then."""
        curve = PrefixCurve.made(self.t, i, j, True, False)
        return 0.0 if curve is None or curve.least is None else float(curve.least)

    def _curve_floor(self, i, j, m, theta=np.inf) -> float:
        """The prefix curve's floor under ``T_p`` on DCs ``i..j`` with ``m`` microbatches
        and every ``R < theta`` (:meth:`.prefix_curve.PrefixCurve.least_time`; periods
        below ``upper / (m - 1)``, as every plan the searches look for has). Its windows
        are never capped here: the walks then serve every ``m`` (with them,
        ``v3-large-02`` took 64 s, without 54 s)."""
        if m <= 1 or not np.isfinite(self.upper):
            return 0.0
        curve = search_curve(self.t, m, i, j, theta)
        got = curve.least_time(m, self.upper / (m - 1), j)
        return min(got, self.upper)

    def _theta_floor(self, i, j, m, theta) -> float:
        """:meth:`_curve_floor` with the options of ``R >= theta`` left out, as the
        range's searches at ``theta`` make it: taken only before a search (its walks then
        serve the search), once per ``(i, j, m, theta)``."""
        got = self.curved.get((i, j, m, theta))
        if got is None:
            got = self.curved[i, j, m, theta] = self._curve_floor(i, j, m, theta)
        return got

    def _period_floor(self, i, j, m) -> float:
        """The least bottleneck under which the devices of DCs ``i..j`` hold the model
        (with the capacity valid for ``m``: :class:`~chainpipe.solvers.dp_pipelines.Holds`)."""
        if self.holds is None:
            return 0.0
        holds = self.holds.for_pipeline(m)
        got = self.floors.get((i, j, id(holds)))
        if got is None:
            groups = np.flatnonzero((self.t.group_dc >= i) & (self.t.group_dc <= j)).tolist()
            total = float(self.t.flop_prefix[-1])
            got = self.floors[i, j, id(holds)] = float(
                holds.needed(holds.curve(groups, []), total))
        return got

    def _pairs(self, trials: list, n: int, before: int | None) -> bool:
        """Whether trial ``n`` runs with trial ``n + 1`` beside it (:meth:`_pair`): with
        more than one process, once the last miss kept :data:`PAIR` labels (the next
        trials cost more than a fork); after a dear one the trial beside is the close
        step :func:`close_step` would put there."""
        if self.processes < 2 or before is None or before < PAIR or n + 1 >= len(trials):
            return False
        close_step(trials, n, before)
        return True

    def _pair(self, i, j, m, low, high, theta):
        """Trials ``low < high`` at once: ``high`` in a forked process
        (:class:`.dp_parallel.Beside`), ``low`` here. A plan ``low`` finds is ``g``
        itself (the other is stopped); else ``high``'s answer, recorded as a search of
        this process (its proof holds under the same bound)."""
        from .dp_parallel import Beside

        own = self._theta_apart(i, j, theta)
        with Beside(lambda: self._run(i, j, m, high, theta, own), self.deadline) as there:
            got = self._search(i, j, m, low, theta)
            if got is not None:
                return got
            done, labels = there.result()
        return self._record(i, j, m, high, theta, done, labels)

    def _run(self, i, j, m, tau, theta, own_theta):
        """One bounded search: the plans it keeps from DC ``i`` as ``(T_p, max R, fill,
        period, stages)``, and the labels it kept."""
        search = PipelineSearch(self.t, m, j, self.limit, self.deadline, "time", self.holds,
                                (tau, theta), first_dc=i, own_theta=own_theta)
        done = [(T, R, fill, period, tuple(search.backtrack(parent)))
                for T, R, parent, fill, period in search.run().get(i, [])]
        return done, search.stats["labels"]

    def _search(self, i, j, m, tau, theta):
        """One bounded search; records what it proves. ``(T_p, max R, stages)`` or ``None``."""
        done, labels = self._run(i, j, m, tau, theta, self._theta_apart(i, j, theta))
        return self._record(i, j, m, tau, theta, done, labels)

    def _record(self, i, j, m, tau, theta, done, labels):
        """What a search at ``tau`` that kept ``done`` (:meth:`_run`) proves: ``(T_p, max
        R, stages)`` of its best plan, or ``None``."""
        self.searches += 1
        self.last_labels = labels
        if labels > DEAR:
            self.dear.add((i, j))
        if self.log is not None:
            self.log(f"dp: a pipeline on DCs {i}..{j}, M_p = {m}, T_p <= {tau:.6g}: "
                     f"{'found' if done else 'none'} ({labels} labels)")
        if not done:  # no plan within tau (and a rounding hair above): g > tau
            self._prove(i, j, m, theta, float(np.nextafter(tau, np.inf)))
            return None
        found = self.found.setdefault((i, j), [])
        for _, R_x, fill_x, period_x, stages_x in done:  # every plan kept: upper bounds
            found.append(Found(m, fill_x, period_x, R_x, stages_x))
        T, R, _, _, stages = min(done, key=lambda x: x[0])
        self._prove(i, j, m, theta, T)
        return T, R, list(stages)

    def _prove(self, i, j, m, theta, floor) -> None:
        """Record that no plan of the questions' bound has ``T_p`` below ``floor`` at
        ``(m, theta)``."""
        lam = self._period_floor(i, j, m)
        if self.limit >= self.upper:
            self.proven.setdefault((i, j), []).append((m, theta, floor, lam))
        else:
            self.proven_within.setdefault((i, j), []).append((m, theta, floor, lam, self.limit))
