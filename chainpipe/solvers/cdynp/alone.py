"""A range of one DC: its agent plans the pipeline alone, by ``dp``'s own search.

The owner's search of several pipelines (:mod:`.questions`) asks many range runs over
one DC only (a span of ``P`` pipelines on ``P`` DCs has nothing else). Such a run sends
no summary: the DC is the whole chain, knows every device the plan may use, and its
answer (the plan of least ``T_p`` with ``M_p = m`` and every ``R_s`` below the run's
``sync_cap``, if within the run's ``upper_bound``, else none) is all that leaves it. So
the DC may compute that answer any exact way; :class:`AloneDP` answers it with ``dp``'s
range search (:class:`LeastTimes`, :class:`chainpipe.solvers.dp_ranges.RangeTimes`) on
the DC's own one-DC tables: ``dp``'s compiled search, static floors and trial targets,
instead of the agent's label DP (:mod:`.period`) and the classic solve before it. Nothing more is sent than
before: the plan's stages and costs in the report, or "none".

The DC keeps what its searches proved (plans found, floors) as ``dp`` keeps it for a
range, *across* ``M_p``: one :class:`LeastTimes` per DC (whatever the run's ``M_p``) on
the DC's one-DC tables built for a microbatch count at least every ``M_p`` asked so far
(:func:`tables_at_least`; ``dp`` likewise searches every ``M_p`` of a range on the
instance's tables of ``M``). A plan found at ``m0`` runs every ``m <= m0`` within its
``fill + (m - 1) period``, and a floor proven at ``m0`` rises by the range's least period
per microbatch more (``docs/dp.md``, "Several pipelines"), so questions at one ``M_p``
are answered from runs at another. It answers later questions of the owner from that
memory where it can: private memory, which only makes the same answers come sooner
(``v3-medium-02``: 117 memories, one per DC and ``M_p`` while its tables were kept,
made 622 searches for 287 runs; one per DC, 4 memories make 132, and the solve's CPU
time went from 11.4 to 7.4 s).
"""

from __future__ import annotations

import dataclasses
import math
import threading
from collections import OrderedDict

from ...deadline import Deadline
from ...instance import Instance
from ..dp_period import search_curve
from ..dp_pipelines import shared_holds
from ..dp_ranges import ABOVE, LADDER, RangeTimes, close_step
from .local import END, OWN

#: ``False``: every range run of one DC runs the agent's own label DP as before (the tests
#: compare the two; the benchmarks measure the difference)
ENABLED = True
_LOCK = threading.Lock()
#: the DCs' memories (:func:`memory`), the :data:`KEPT` last asked in this process
_KEPT: OrderedDict = OrderedDict()
KEPT = 32
#: whether a memory's trials climb ``dp``'s ladder with its strides and close steps
#: (:meth:`RangeTimes._stride`, :func:`close_step`); ``False``: every rung
STRIDES = True
#: the least microbatch count of the tables a memory searches on
LEAST_M = 64


def tables_at_least(local: Instance, m: int):
    """The DC's own one-DC tables (every option) for a microbatch count at least ``m``:
    ``LEAST_M`` or the next power of two. A stage's in-flight limit is capped at the
    tables' count, so tables of a larger count tell every ``M_p <= `` it apart, as
    ``dp``'s instance tables do for its ranges."""
    from .agent import own_tables  # agent imports this module

    top = max(LEAST_M, 1 << max(m - 1, 0).bit_length())
    return own_tables(dataclasses.replace(
        local, training=dataclasses.replace(local.training, microbatches=top)), None)


def forget() -> None:
    """Drop every DC's memory (:func:`memory`) kept in this process (the benchmarks time
    each solve from none)."""
    with _LOCK:
        _KEPT.clear()


def memory(local: Instance, m: int) -> tuple[LeastTimes, threading.Lock]:
    """The DC's :class:`LeastTimes` (one per DC record, model and training but ``M_p``),
    on tables valid for ``m`` (:func:`tables_at_least`), and the lock that keeps two
    sessions of an agent server from searching it at once. Asked at an ``m`` past its
    tables' count, the memory moves to larger tables and keeps its plans and proven
    floors (facts about the DC's ``g``, not about the tables)."""
    key = dataclasses.replace(local, training=dataclasses.replace(local.training,
                                                                  microbatches=1))
    with _LOCK:
        kept = _KEPT.get(key)
        if kept is not None:
            _KEPT.move_to_end(key)
        if kept is None or kept[0].t.M < m:
            t = tables_at_least(local, m)
            # the knapsack of what free devices hold, built without a deadline (in
            # milliseconds; a later run's deadline would not be the one it kept)
            times = LeastTimes(t, Deadline(None), math.inf, shared_holds(t, Deadline(None)))
            if kept is not None:
                times.found, times.proven = kept[0].found, kept[0].proven
                times.searches = kept[0].searches
            kept = _KEPT[key] = (times, threading.Lock() if kept is None else kept[1])
            while len(_KEPT) > KEPT:
                _KEPT.popitem(last=False)
    return kept


class LeastTimes(RangeTimes):
    """:class:`~chainpipe.solvers.dp_ranges.RangeTimes` of one DC asked for ``g`` itself.

    ``dp``'s question "is ``g <= tau``?" may be answered by any plan found within ``tau``;
    a range run answers with the plan of least ``T_p`` (the owner takes its ``T_p`` as
    ``g``, a floor included). So a plan the memory holds answers only when it is proven
    least (its ``T_p`` meets the proven floor at ``(m, theta)``); otherwise the same
    trials as :meth:`~chainpipe.solvers.dp_ranges.RangeTimes.at_most` run, with its
    strides up the ladder (:data:`STRIDES`), the first that finds a plan finding ``g``
    (a search keeps every plan within its trial, the trials rise, and each one before
    proved none within its own). ``v3-medium-02``: 86 -> 67 searches, ``v3-large-03``
    161 -> 149, the same answers.
    """

    def least(self, m: int, tau: float, theta: float):
        """``(T_p, max R, stages)`` of the plan of least ``T_p`` on the DC with ``m``
        microbatches and every ``R < theta``, if ``T_p <= tau``; else ``None``."""
        known = self._best_known(0, 0, m, theta)
        lo = self._floor(0, 0, m, theta)
        if known is not None and known[0] <= lo * (1 + 1e-12):
            return known if known[0] <= tau else None
        if lo > tau or lo == math.inf:  # an infinite floor: no plan at all
            return None
        if math.isfinite(tau) and m > 1:  # the prefix curve, for plans within tau
            lo = max(lo, self._curve_within(m, tau))
            if lo > tau:
                return None
        ceiling = math.inf if known is None else known[0]
        trials = [x for x in (lo * (1 + d) for d in LADDER) if x < min(tau, ceiling)]
        if known is None or tau < ceiling:  # tau itself (inf: an unbounded search)
            trials += [tau] + [x for x in (tau * (1 + d) for d in ABOVE) if x < ceiling]
        if known is not None:
            trials.append(ceiling)
        n, before, stride = 0, None, 1
        while n < len(trials):
            got = self._search(0, 0, m, trials[n], theta)
            if got is not None:  # g itself (a search keeps plans a rounding hair above)
                return got if got[0] <= tau else None
            if STRIDES:  # dp's steps up its ladder (RangeTimes.at_most)
                close_step(trials, n, self.last_labels)
                stride = self._stride(self.last_labels, before, stride)
                before = self.last_labels
                for _ in range(stride - 1):  # (never tau itself)
                    if n + 2 < len(trials) and trials[n + 2] <= tau:
                        del trials[n + 1]
            n += 1
        return None

    def _best_known(self, i, j, m, theta):
        """:meth:`RangeTimes._best_known` of the plans with ``T_p + max R`` below the
        questions' limit (:meth:`~chainpipe.solvers.dp_ranges.RangeTimes.within`): a plan
        above it is no answer to a question under it."""
        return self._least_of(self.found.get((i, j), ()), m, theta, self.limit)

    def period_floor(self, m: int) -> float:
        """``dp``'s floor under the period of every plan on the DC with ``m`` microbatches
        (:meth:`RangeTimes._period_floor`: every option counted, so under any cap)."""
        return float(self._period_floor(0, 0, m))

    def _curve_within(self, m: int, tau: float) -> float:
        """A floor under ``T_p`` of every plan with ``T_p <= tau`` (``inf``: none): the
        prefix curve's (:meth:`.prefix_curve.PrefixCurve.least_time`, every option, so
        under any cap) over periods up to ``tau / (m - 1)``, which every such plan's period
        is within (``T_p`` is its fill, at least 0, plus ``m - 1`` periods). ``dp``'s
        ranges take it under the incumbent (:meth:`RangeTimes._curve_floor`); a memory,
        whose questions come under bounds of their own, takes it per question
        (``v3-large-03``: 101 to 89 searches for the owner's first questions of a DC at a
        count)."""
        return float(search_curve(self.t, m, 0, 0).least_time(m, tau / (m - 1), 0))


def usable(public, sync_cap, frontier, compressed: bool) -> bool:
    """Whether a run is a range run of one DC that :class:`AloneDP` answers: one DC,
    ``period``, under ``sync_cap`` (``T_p`` minimised, no ``R`` counted), exact, not a
    frontier run."""
    return (ENABLED and public.num_datacenters == 1 and public.period
            and sync_cap is not None and frontier is None and not compressed)


class AloneDP:
    """The answer of a one-DC range run, shaped as :class:`.period.PeriodDP`'s result
    (:attr:`points` at ``x = 0``, :meth:`label`, :attr:`bound_cut`, :attr:`stats`) so
    that the agent decides and realises it as any other.

    Parameters
    ----------
    local : Instance
        The DC's own one-DC instance of the run (``M_p`` its microbatches); the search runs
        on the DC's memory (:func:`memory`: every option, no ``sync_cap`` applied: ``dp``'s
        question takes the limit itself, so one memory serves every limit and ``M_p``).
    options_of : callable
        ``options_of(g)``: the options of group ``g`` the agent realises stages with.
    deadline : Deadline
    """

    def __init__(self, local: Instance, options_of, deadline: Deadline):
        self.local, self.options_of, self.deadline = local, options_of, deadline
        self.points: dict[int, list] = {}
        self.bound_cut = True
        self.stats = {"labels": 0, "searches": 0}
        #: the least bottleneck under which the DC's devices hold the model, every option
        #: counted (``dp``'s floor under the period, :meth:`RangeTimes._period_floor`): the
        #: agent reports it as the range's floor under every plan's period (it serves every
        #: cap; a knapsack per cap cost ``v3-large-03`` 107 builds, 0.8 CPU s, for 153 runs)
        self.period_floor = 0.0
        self._store: list[tuple] = []

    def run(self, ub: float, sync_cap: float, limit: float = math.inf) -> None:
        """The least ``T_p`` of a plan with every ``R_s < sync_cap`` and ``T_p <= ub``
        (``inf``: no bound) among those with ``T_p + max R < limit`` (``dp``'s question
        under :meth:`~chainpipe.solvers.dp_ranges.RangeTimes.within`: what its searches
        prove under a limit serves the questions under that limit or a lower one), kept
        as the one point at ``x = 0``; none if there is none."""
        m = self.local.microbatches
        times, lock = memory(self.local, m)
        with lock, times.within(limit):
            times.deadline = self.deadline
            before = times.searches
            got = times.least(m, ub, sync_cap)
            self.stats["searches"] = times.searches - before
            self.period_floor = times.period_floor(m)
        if got is None:
            return
        T, _R, stages = got
        for n, (a, _b, _dc, g, d, t) in enumerate(stages):
            opts = self.options_of(g)
            pair = next(c for c in range(len(opts.d)) if opts.d[c] == d and opts.t[c] == t)
            ref = (OWN, n + 1, 0) if n + 1 < len(stages) else (END, 0, 0)
            self._store.append((int(a), int(g), int(pair), ref))
        # the point's terms: T_p as its total, no period or R apart (it never leaves the
        # DC; only its T is read, by the decision)
        self.points[0] = [(len(stages), 0.0, 0.0, float(T), 0.0, (), 0)]

    def label(self, i: int) -> tuple[int, int, int, tuple]:
        """Stage ``i`` of the plan: ``(start, group, pair, ref)`` as
        :meth:`.local.LocalDP.label`."""
        return self._store[i]
