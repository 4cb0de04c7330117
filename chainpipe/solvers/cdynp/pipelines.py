"""CDynP with several pipelines (contract version 3, section 3): the owner's search.

How many pipelines run, which range of DCs each occupies and how many microbatches
each takes are the job owner's public decisions (contract section 5); each range then
plans as a chain of its own. With ``T = max_p T_p + max_{p,s} R_s + R_X / H``:

- ``R_X`` depends only on the model and the chain links of the outer span (public), so
  the owner computes it itself (:func:`chainpipe.cost.cross_sync_time`, the one cost
  model's term);
- a pipeline's ``T_p`` and ``max R_s`` depend only on its stages and ``M_p``. The owner
  asks, for a range ``[i, j]``, a count ``m`` and a synchronisation limit ``theta``,
  ``g(i, j, m, theta)``: the least ``T_p`` of a pipeline on DCs ``i..j`` with ``M_p = m``
  and every ``R_s < theta``. One CDynP run over the agents of DCs ``i..j`` answers it
  (:class:`RangeRuns`): the chain is the range's, ``M = m``, and every agent uses only
  the options with ``R < theta`` and counts ``R`` as 0 (agent option ``sync_cap``), so the
  run's optimum is ``g`` exactly (the run is the usual solve of one chain,
  :func:`chainpipe.solvers.cdynp.solve_chain`, under either objective);
- per count ``P`` and span ``[i0, j0]``, a sweep over ``theta`` (``docs/dp.md``, "Several
  pipelines", item 3): with ``theta = inf``, then ``theta`` = the last solution's own
  ``max R`` (strictly below), the least ``tau = max_p T_p`` over the splits of the span
  into ``P`` consecutive ranges and of ``M`` into ``M_p >= 1``; its plan has ``T <= tau +
  rho' + R_X / H`` (``rho' < theta`` its own ``max R``) and every plan of that span with
  ``max R`` in ``[rho', theta)`` has ``T >= tau + rho' + R_X / H``. The sweep stops when
  ``tau + R_X / H`` cannot beat the best plan known, or no plan is left.

In exact mode under ``period`` the owner takes ``g(i, j, m, theta)`` for ``m >= 8`` from
*frontier runs* (:meth:`RangeRuns.time`), one per block ``[2^k, 2^(k+1) - 1]`` of ``M_p``:
the range's first DC reports the lines ``A + (m - 1) lambda`` of its complete plans, and
a value is taken from them where a real plan's ``T_p(m)`` meets the least line, else from
a run at ``m`` (``docs/privacy.md``, "T_p as a function of M_p", with the proof).

A range of the split may hold DCs its pipeline does not use: the plan's real span (and
so its ``R_X``) is then narrower, and the span that is exactly the plan's is searched
too; every candidate's ``T`` is :func:`chainpipe.plan.evaluate`'s (across hosts, the
same combination of the pipelines' costs the agents reported:
:meth:`.remote.RemoteOwner.evaluation`).

The owner is a :class:`chainpipe.solvers.cdynp.LocalOwner` (the agents in this process
or in child processes) or a :class:`.remote.RemoteOwner` (each agent on its host, each
range run's header naming its chain); the search is the same. With compression the
range runs are compressed and the search keeps the guarantee factor
(:func:`solve_several`).
"""

from __future__ import annotations

import dataclasses
import math
import sys
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import numpy as np

from ... import cost
from ...deadline import Deadline
from ...instance import Instance
from ...plan import Pipeline, Plan, Stage
from . import alone
from .curve import CAP_STEPS, cap_grid
from .drive import guarantee_factor, is_exact, labels_kept
from .period import frontier_value
from .public import range_training

#: a range's floor runs (:meth:`RangeRuns.floors`): the coarse pass starts this factor
#: below the range's floor under its period (the relaxed walk may place the model a little
#: under it) and walks this many caps, this many per doubling; the fine pass this many
#: (:data:`.curve.CAP_STEPS` per doubling)
FLOOR_BELOW = 0.85
FLOOR_COARSE = 12
FLOOR_COARSE_STEPS = 4
FLOOR_FINE = 12
#: across hosts (the owner's mode ``tls``), the floor curves of every range a split into
#: several pipelines can take are made ahead, by this many threads beside the owner's own
#: runs (its one-pipeline solve first keeps one host busy at a time, so the others are
#: free for them); 0: each curve on first need, as in process (where the runs share one
#: interpreter) and in a traced solve (whose trace is the in-process one's)
FLOORS_AHEAD = 1


def _merged(a: tuple, b: tuple) -> tuple:
    """Two floor curves ``(grid, fills)`` as one: their caps together, ascending, each
    with the larger fill where both have it (each a floor there)."""
    caps = np.concatenate((a[0], b[0]))
    fills = np.concatenate((a[1], b[1]))
    grid = np.unique(caps)
    out = np.full(len(grid), -math.inf)
    np.maximum.at(out, np.searchsorted(grid, caps), fills)
    return grid, out


#: across hosts (the owner's mode ``tls``), untraced, the seed's one-DC range runs
#: (:func:`_replicas`) are made at once, one thread each (:meth:`RangeRuns.least_each`):
#: each DC answers on its own host. ``False``: one after another, as in process
AT_ONCE = True

#: exact mode: the owner's search asks ``dp``'s questions (:mod:`.questions`); ``False``:
#: the sweep of :func:`several` (split of ``M`` per partition, frontier runs)
QUESTIONS = True


def chain_instance(instance: Instance, i: int, j: int, microbatches: int) -> Instance:
    """The range ``i..j`` of ``instance``'s chain as an instance of one pipeline of
    ``microbatches`` (the instance's objective): what the range's agents plan (each gets
    only its own DC record of it, as for the whole chain; across hosts each builds the
    same public part itself, :meth:`.public.PublicInstance.chain`)."""
    return dataclasses.replace(instance, training=range_training(instance.training,
                                                                 microbatches),
                               datacenters=tuple(instance.datacenters[i:j + 1]),
                               links=tuple(instance.links[i:j]))


@dataclasses.dataclass(frozen=True)
class RangePlan:
    """What a range run gave the owner: ``T_p``, the plan's ``max R_s``, its stages and
    the pipeline's cost (:class:`chainpipe.plan.PipelineCost`, for an owner that holds
    only the public part)."""

    time: float
    sync: float
    stages: tuple[Stage, ...]
    cost: object = None


class RangeRuns:
    """``g(i, j, m, theta)`` by CDynP runs over the range's agents, remembered.

    Parameters
    ----------
    owner : LocalOwner or RemoteOwner
        Whose agents run (:meth:`chain` gives a range's, in this process, in child
        processes or on their hosts over TLS).
    options : dict
        The agents' options (:func:`.drive.agent_options`): exact, or compressed (then a
        run's ``T_p`` is at most the guarantee factor times ``g``, and a run that finds
        nothing below its bound proves ``g`` above the bound over that factor).
    deadline : Deadline
    trace_dir : path, optional
        Each run's messages go to ``trace_dir/range-<i>-<j>-m<m>-<n>/``.
    """

    #: ``M_p`` from which values come from frontier runs (:meth:`time`): blocks
    #: ``[2^k, 2^(k+1) - 1]`` with ``2^k`` at least this; below it one run per ``M_p``
    #: (a frontier run's lines settle only plans of at most ``2^k - 2`` stages)
    frontier_from = 8

    def __init__(self, owner, options: dict, deadline: Deadline, trace_dir=None):
        self.owner, self.options = owner, options
        self.deadline, self.trace_dir = deadline, trace_dir
        #: (i, j) -> [(m, theta, bound, limit, RangePlan or None)] of the runs made
        self.known: dict[tuple[int, int], list] = {}
        #: (i, j, first, last) -> [(theta, bound, lines or None)] of the frontier runs
        self.frontiers: dict[tuple, list] = {}
        self.runs = 0
        self.frontier_runs = 0
        #: values :meth:`time` took from a frontier run's settled lines, and those it
        #: could not settle (answered by a run at that ``M_p``)
        self.settled = self.unsettled = 0
        self.messages: list[dict] = []
        self.labels = 0
        #: range runs of one DC its agent answered by ``dp``'s search (:mod:`.alone`)
        self.one_dc = 0
        #: (i, j) -> (grid, fills) of the range's floor runs, or ``None`` (:meth:`floors`)
        self.floor_curves: dict[tuple[int, int], tuple | None] = {}
        self.floor_runs = 0
        #: floor curves made ahead (:meth:`start_floors_ahead`): (i, j) -> their future, until
        #: :meth:`floors` takes it; how many were made and never taken (:meth:`stop_ahead`)
        self._ahead: dict[tuple[int, int], Future] = {}
        self._pool: ThreadPoolExecutor | None = None
        self.floor_curves_unused = 0
        self._lock = threading.Lock()  # the counters and the messages, with runs ahead
        self._halted = threading.Event()  # no run starts any more (:meth:`halt`)
        public = owner.public
        self.use_frontier = is_exact(options) and public.period

    def widen(self, K: int) -> float:
        """The factor a compressed run of ``K`` DCs widens its bound by: the rounding part
        of the guarantee factor (``epsilon``, ``quantum``, ``digits`` over ``K - 1`` hops);
        1 in exact mode."""
        o = self.options
        if is_exact(o):
            return 1.0
        return guarantee_factor(K, o["epsilon"], o["quantum"], o["digits"])

    def _period_exact(self, m: int) -> bool:
        """Whether a range run at ``M_p = m`` is an exact ``period`` run (``m > 1``: one
        microbatch plans as ``classic``)."""
        return m > 1 and self.owner.public.training.objective == "period" and is_exact(
            self.options)

    def limited(self, i: int, j: int, m: int) -> bool:
        """Whether the runs of DCs ``i..j`` at ``M_p = m`` are asked under a limit on
        ``T_p + max R`` that their plan found keeps (:meth:`least_floor`): an exact
        ``period`` range of one DC, whose agent's own search keeps only plans under it
        (:mod:`.alone`). A label DP (several DCs) counts no ``R`` under ``sync_cap``: it
        takes the limit only through its caps (:meth:`under_limit`)."""
        return i == j and alone.ENABLED and self._period_exact(m)

    def under_limit(self, i: int, j: int, m: int) -> bool:
        """Whether the runs of DCs ``i..j`` at ``M_p = m`` take the owner's limit on ``T_p
        + max R`` at all: those of :meth:`limited`, and an exact ``period`` range of
        several DCs, whose period runs fall under the cap the limit leaves above each
        run's floor (:func:`~chainpipe.solvers.cdynp._within_cap`). These last answer for
        a set of plans that holds every plan within the limit: "none" proves none within
        it, and the plan found, the least ``T_p`` of the set, may lie above it. Any other
        run answers for every plan."""
        return i < j and self._period_exact(m) or self.limited(i, j, m)

    def least(self, i: int, j: int, m: int, theta: float,
              bound: float = math.inf) -> RangePlan | None:
        """The plan of least ``T_p`` on DCs ``i..j`` with ``M_p = m`` and every ``R_s <
        theta``, if that ``T_p`` is at most ``bound``; ``None``: no such plan.

        What a run proved is reused (``g`` does not decrease as ``m`` grows or ``theta``
        falls, ``docs/dp.md``, "Several pipelines", item 2): a run at ``(m, theta')``
        that found a plan with ``max R < theta <= theta'`` found ``g`` at ``theta``; one
        that found nothing at ``(m0, theta', bound')`` answers every ``m >= m0``,
        ``theta <= theta'`` and ``bound <= bound'``."""
        return self.least_floor(i, j, m, theta, bound)[0]

    def least_each(self, questions: list[tuple]) -> list:
        """:meth:`least` of each ``(i, j, m, theta)`` of ``questions``, in their order, up
        to the first ``None`` (those after it ``None`` too, unasked). Across hosts and
        untraced (the owner's mode ``tls``, :data:`AT_ONCE`) they are asked at once, one
        thread each, and all of them: each run asks its own DCs' agents, on their own
        hosts, so that questions of different DCs run side by side; in process (one
        interpreter) and traced (the trace is the in-process one's) one after another."""
        if (AT_ONCE and len(questions) > 1 and self.owner.mode == "tls"
                and self.trace_dir is None):
            with ThreadPoolExecutor(len(questions), thread_name_prefix="chainpipe-each") as pool:
                futures = [pool.submit(self.least, *q) for q in questions]
            got = [f.result() for f in futures]
        else:
            got = []
            for q in questions:
                got.append(self.least(*q))
                if got[-1] is None:
                    break
        cut = next((n for n, answer in enumerate(got) if answer is None), len(got))
        return got[:cut] + [None] * (len(questions) - cut)

    def least_floor(self, i: int, j: int, m: int, theta: float, bound: float = math.inf,
                    floor: float = 0.0, limit: float = math.inf
                    ) -> tuple[RangePlan | None, float, float]:
        """:meth:`least`, the floor under every plan's period on the range that its run
        reported (``period_floor_s``, ``docs/privacy.md``) and the floor under every plan's
        ``T_p`` its prefix-curve passes reported (``curve_floor_s``; both 0: answered from
        memory, no run made, or none reported). ``floor``: a floor under ``g`` the owner's
        runs proved, where the run's period runs start
        (:func:`~chainpipe.solvers.cdynp.solve_chain`). ``limit``: only plans with ``T_p +
        max R`` below it are asked for (``dp``'s :meth:`~chainpipe.solvers.dp_ranges.
        RangeTimes.within`; agent option ``sum_limit``): "none" then proves none of them,
        and the plan found is the least ``T_p`` among them (it may lie above the limit
        where a run answered for every plan). What a run proved under a limit answers the
        questions under that limit or a lower one."""
        hit, got = self._remembered(i, j, m, theta, bound, limit)
        if hit:
            return got, 0.0, 0.0
        got, lam, low = self._run(i, j, m, theta, bound, floor, limit)
        self.known.setdefault((i, j), []).append((m, theta, bound, limit, got))
        return got, lam, low

    def _remembered(self, i: int, j: int, m: int, theta: float, bound: float,
                    limit: float) -> tuple[bool, RangePlan | None]:
        """Whether a run made answers :meth:`least_floor`'s question, and its answer: a
        run that found nothing at ``m0 <= m``, ``theta' >= theta`` and a bound at least
        ``bound``; one that found at ``m`` a plan with ``max R < theta <= theta'``, the
        least ``T_p`` (none if above ``bound``, the plan if within ``limit``); only runs
        under ``limit`` or a higher one."""
        for m0, th, bd, lim, got in self.known.get((i, j), ()):
            if lim < limit:
                continue
            if got is None and m0 <= m and th >= theta and bd >= bound:
                return True, None
            if got is not None and m0 == m and th >= theta and got.sync < theta:
                if got.time > bound:  # the least T_p of every plan (or those under lim)
                    return True, None
                if got.time + got.sync < limit:  # least, and one of those asked for
                    return True, got
        return False, None

    def halt(self) -> None:
        """No run starts from now on: each raises :class:`Halted` instead (the solve has
        ended: its threads stop at their next run)."""
        self._halted.set()

    def _count(self, name: str, kind: str | None = None) -> str:
        """The next run's name (``name`` and the run's number), the run counted (and as
        ``kind``: ``floor_runs``, ``frontier_runs``); safe from the threads of
        :meth:`start_floors_ahead` and :class:`_Beside`. :class:`Halted` once
        :meth:`halt` was called."""
        if self._halted.is_set():
            raise Halted("cdynp: the solve has ended")
        with self._lock:
            n = self.runs
            self.runs += 1
            if kind is not None:
                setattr(self, kind, getattr(self, kind) + 1)
            return f"{name}-{n:03d}"

    def _add_messages(self, name: str, messages: list[dict]) -> None:
        """A run's messages, each under the run's ``name``."""
        got = [{**msg, "file": f"{name}/{msg['file']}"} for msg in messages]
        with self._lock:
            self.messages += got

    def start_floors_ahead(self, workers: int | None = None) -> None:
        """Make the floor curves (:meth:`floors`) of every range of two DCs or more but the
        whole chain (a split into several pipelines takes no other) in ``workers`` threads,
        from now on (``None``: :data:`FLOORS_AHEAD`); :meth:`floors` takes each when first
        needed (or makes it there, if its thread has not started it), and
        :meth:`stop_ahead` ends them. Only across hosts, untraced, and where floors are
        made at all."""
        public = self.owner.public
        K = public.num_datacenters
        workers = FLOORS_AHEAD if workers is None else workers
        if (workers < 1 or self.owner.mode != "tls" or self.trace_dir is not None
                or not self._floors_made() or max(public.training.parallelism.pipelines) < 2):
            return
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="chainpipe-floors")
        # shorter ranges first: a split of many pipelines, searched first, takes them
        for n in range(2, K):
            for i in range(K - n + 1):
                self._ahead[i, i + n - 1] = self._pool.submit(self._floor_curve, i, i + n - 1)

    def stop_ahead(self) -> None:
        """Cancel the floor curves not started yet and wait for those under way (each run
        bounded by the solve's deadline); those made and never taken are counted
        (:attr:`floor_curves_unused`)."""
        if self._pool is None:
            return
        self._pool.shutdown(wait=True, cancel_futures=True)
        self._pool = None
        self.floor_curves_unused += sum(not f.cancelled() for f in self._ahead.values())
        self._ahead.clear()

    def _floors_made(self) -> bool:
        """Whether this solve makes floor runs (:meth:`floors`): exact period runs under
        1F1B."""
        public = self.owner.public
        return (is_exact(self.options) and public.period
                and public.training.schedule == "1f1b")

    def floors(self, i: int, j: int, make: bool = True):
        """The range's floor curve ``(grid, fills)``: per public cap ``lam_c`` (ascending), a
        floor under the fill of every plan on DCs ``i..j`` whose every stage's ``C`` and
        boundary's ``U`` is at most ``lam_c`` (``inf``: none is), so that
        :func:`.curve.least_time` bounds every plan's ``T_p`` at any ``M_p``
        (``docs/privacy.md``, "Floor runs"); ``None`` where the range has none (one DC, not
        exact, not a period run under 1F1B, a DC that shares no prefix bound) or, with
        ``make`` false, none was made yet.

        Three floor runs make it (agent option ``floors_only``), each at ``M_p = 2`` with
        every option (``theta = inf``; a stage fits more at 2 microbatches than at more, so
        the fills are floors at every ``M_p >= 2``): the prefix pass alone gives the range's
        floor under its period (``period_floor_s``); a pass on :data:`FLOOR_COARSE` caps
        ``2^(1 / FLOOR_COARSE_STEPS)`` apart from :data:`FLOOR_BELOW` times it finds where
        the model starts to fit; a pass on :data:`FLOOR_FINE` caps of the fine grid
        (:data:`.curve.CAP_STEPS` per doubling) from the largest coarse cap it does not fit
        under gives the fills near the range's least period, where the floors at many
        microbatches are read (``dp``'s curve is dense there too). The two passes' caps
        together are the grid."""
        if (i, j) not in self.floor_curves and make:
            ahead = self._ahead.pop((i, j), None)
            if ahead is not None and not ahead.cancel():  # made ahead, or under way
                self.floor_curves[i, j] = ahead.result()  # (its failure raised here)
            else:
                self.floor_curves[i, j] = self._floor_curve(i, j)
        return self.floor_curves.get((i, j))

    def _floor_curve(self, i: int, j: int):
        """The three floor runs of :meth:`floors` for DCs ``i..j``: ``(grid, fills)`` or
        ``None``."""
        if not (i < j and self._floors_made()):
            return None
        first = self._floor_run(i, j, {})
        low = max([0.0] + [float(a["period_floor_s"]) for a in first if "period_floor_s" in a])
        if low <= 0:
            return None
        coarse = self._fills(i, j, low * FLOOR_BELOW, FLOOR_COARSE, FLOOR_COARSE_STEPS)
        if coarse is None:
            return None
        grid, fills = coarse
        out = np.flatnonzero(~np.isfinite(fills))
        # from the largest coarse cap the model does not fit under; when it fits under
        # every one, the fine caps below the first
        start = grid[out[-1]] if len(out) else grid[0] * 2.0 ** (-(FLOOR_FINE - 1) / CAP_STEPS)
        fine = self._fills(i, j, start, FLOOR_FINE, CAP_STEPS)
        return None if fine is None else _merged(coarse, fine)

    def _fills(self, i: int, j: int, low: float, caps: int, steps: int):
        """``(grid, fills)`` of a floor run's pass on ``caps`` caps ``2^(1 / steps)`` apart
        from ``low`` (:func:`.curve.cap_grid`), ``None`` if its last DC reported none."""
        top = low * 2.0 ** ((caps - 1.5) / steps)
        last = self._floor_run(i, j, {"curve_low": low, "curve_top": top,
                                      "curve_steps": steps})[-1]
        if last.get("curve_fills") is None:
            return None
        grid = cap_grid(low, top, 2, steps)
        fills = np.array([math.inf if v is None else float(v) for v in last["curve_fills"]])
        return (grid, fills) if len(fills) == len(grid) else None

    def _floor_run(self, i: int, j: int, extra: dict) -> list[dict]:
        """One floor run of DCs ``i..j`` (agent option ``floors_only``, ``extra`` options
        besides): the agents' reports."""
        backend = self.owner.chain(i, j, 2, count_sync=False)
        options = {**self.options, "upper_bound": None, "sync_cap": sys.float_info.max,
                   "floors_only": 1, **extra}
        name = self._count(f"floors-{i}-{j}", "floor_runs")
        trace = None if self.trace_dir is None else Path(self.trace_dir, name)
        res = backend.one_run(options, trace, self.deadline)
        self._add_messages(name, res.messages)
        return res.agents

    def time(self, i: int, j: int, m: int, theta: float, bound: float = math.inf) -> float:
        """``g(i, j, m, theta)`` if at most ``bound``, else ``inf``: from the frontier run
        of ``m``'s block where a real plan's ``T_p(m)`` (a settled line's, or the line of
        the plan found at the block's top) meets the least line (``docs/privacy.md``,
        "T_p as a function of M_p"), else by :meth:`least` (one run at ``m``,
        remembered)."""
        hit, got = self._remembered(i, j, m, theta, bound, math.inf)  # (of every plan)
        if hit:
            return math.inf if got is None else got.time
        block = self._block(m)
        got = None if block is None else self._frontier(i, j, theta, bound, *block)
        if got is not None:
            lines, upper = got
            every, settled = frontier_value(lines, m)
            if upper is not None:  # the plan found at the block's top runs m within it
                settled = min(settled, upper[0] + (m - 1) * upper[1])
            if every > bound * (1 + 1e-9):  # every plan's T_p(m) is at least its line
                self.settled += 1
                return math.inf
            if settled <= every * (1 + 1e-12):  # a real plan's T_p(m) meets the floor
                self.settled += 1
                return settled if settled <= bound else math.inf
            self.unsettled += 1
        got = self.least(i, j, m, theta, bound)
        return math.inf if got is None else got.time

    def _block(self, m: int) -> tuple[int, int] | None:
        """``(m_lo, m_hi)``: the block of ``m`` a frontier run covers, or ``None``."""
        if not self.use_frontier or m < self.frontier_from:
            return None
        lo = 1 << (m.bit_length() - 1)
        hi = min(2 * lo - 1, self.owner.public.microbatches)
        return (lo, hi) if lo < hi else None

    def _frontier(self, i: int, j: int, theta: float, bound: float, lo: int, hi: int):
        """The lines of the frontier run of DCs ``i..j`` over ``M_p`` in ``[lo, hi]`` under
        ``theta`` and the line ``(A, lambda)`` of the plan found at ``hi`` (``None``: none
        below ``bound``), remembered; ``None``: no bound to run it under.

        The run's bound is the line of the plan found at ``hi`` (``g`` at ``hi``, by
        :meth:`least`), ``A + (m - 1) lambda``: that plan runs every ``m <= hi`` within it
        (no more stashed, a subset of its loops), so no plan above the line at both ends
        is least anywhere in the block; with none at ``hi`` below ``bound``, ``bound``."""
        for th, bd, got in self.frontiers.get((i, j, lo, hi), ()):
            if th == theta and bd >= bound:
                return got
        top = self.least(i, j, hi, theta, bound)
        upper = None
        if top is not None:
            A, lam = float(top.cost.fill_drain_s), float(top.cost.period_s)
            b_lo, b_hi = A + (lo - 1) * lam, A + (hi - 1) * lam
            upper = (A, lam)
        elif math.isinf(bound):
            return None
        else:
            b_lo = b_hi = bound
        lines = self._frontier_run(i, j, theta, lo, hi, b_lo * (1 + 1e-9), b_hi * (1 + 1e-9))
        self.frontiers.setdefault((i, j, lo, hi), []).append((theta, bound, (lines, upper)))
        return lines, upper

    def _frontier_run(self, i, j, theta, lo, hi, b_lo, b_hi) -> list:
        """One frontier run (agent option ``frontier``): DC ``i``'s reported lines."""
        from ...deadline import TimeUp
        from .drive import drive
        from .runner import AgentFailure

        backend = self.owner.chain(i, j, lo, count_sync=False)
        options = {**self.options, "upper_bound": b_lo, "frontier": hi,
                   "frontier_bound": b_hi, "sync_cap": min(theta, sys.float_info.max)}
        name = self._count(f"frontier-{i}-{j}-m{lo}-{hi}", "frontier_runs")
        trace = None if self.trace_dir is None else Path(self.trace_dir, name)
        out = drive(backend, options, deadline=self.deadline, probe=False, trace_dir=trace)
        self._add_messages(name, out.stats.get("messages", []))
        agents = out.stats.get("agents", [])
        self.labels += labels_kept(agents)
        if out.status == "error":
            raise AgentFailure((out.message or "").removeprefix("cdynp: "),
                               out.stats.get("failed_datacenter"))
        if "messages" not in out.stats:  # the time limit ended it
            raise TimeUp(out.message or "time limit reached")
        return agents[0].get("frontier", {}).get("lines", []) if agents else []

    def _run(self, i: int, j: int, m: int, theta: float, bound: float,
             proven: float = 0.0, limit: float = math.inf
             ) -> tuple[RangePlan | None, float, float]:
        """One range run: its plan (``None``: none below ``bound``), the floor under the
        range's period its last DC reported and the largest floor under every plan's
        ``T_p`` it reported from a prefix-curve pass (0: none); ``proven``: a floor under
        ``g`` the owner's runs proved (:func:`~chainpipe.solvers.cdynp.solve_chain`'s
        ``floor``); ``limit``: the owner's limit on ``T_p + max R`` (``inf``: none), the
        agent's ``sum_limit`` on one DC, the period runs' caps on several
        (:meth:`under_limit`)."""
        from ...deadline import TimeUp
        from . import solve_chain
        from .runner import AgentFailure

        backend = self.owner.chain(i, j, m, count_sync=False)
        # compressed: the run's bound widened by its rounding factor, so that no plan within
        # ``bound`` is cut for its rounded-up estimate (a run that finds nothing under it then
        # proves g above ``bound`` with epsilon, quantum and digits; the plan it finds may lie
        # above ``bound``: a real plan, its T_p an upper bound on g)
        wide = bound * self.widen(j - i + 1)
        # theta = inf as the largest float (a message carries no infinity): every R is below
        options = {**self.options, "upper_bound": None if math.isinf(bound) else wide,
                   "sync_cap": min(theta, sys.float_info.max)}
        if math.isfinite(limit) and i == j:
            options["sum_limit"] = limit
        name = self._count(f"range-{i}-{j}-m{m}")
        trace = None if self.trace_dir is None else Path(self.trace_dir, name)
        out = solve_chain(backend, options, self.deadline, trace_dir=trace, probe=False,
                          floor=proven, limit=limit)
        self._add_messages(name, out.stats.get("messages", []))
        agents = out.stats.get("agents", [])
        with self._lock:  # (runs of :meth:`least_each` end in threads of their own)
            self.labels += labels_kept(agents)
            self.one_dc += any(a.get("engine") == "dp" for a in agents)
        # the range's last DC's floor under every plan's period (agent._report_floor)
        floor = max([0.0] + [float(a["period_floor_s"]) for a in agents
                             if "period_floor_s" in a])
        # the last DC of each period run (each step of its ladder) under the run's options:
        # no plan of the range at (m, theta) has T_p below it (.curve.CurvePass.floor)
        low = max([0.0] + [float(a["curve_floor_s"]) for a in agents if "curve_floor_s" in a])
        if out.status == "error":
            raise AgentFailure((out.message or "").removeprefix("cdynp: "),
                               out.stats.get("failed_datacenter"))
        if out.status == "no_solution":
            # the search found nothing below bound: exhaustive (exact, with its bound), or
            # compressed to its guarantee; a run the time limit ended never got that far
            if out.lower_bound is not None or "messages" in out.stats:
                return None, floor, low
            raise TimeUp(out.message or "time limit reached")
        if out.plan is None:
            return None, floor, low
        ev = backend.evaluation(out.plan)
        return RangePlan(float(ev.pipelines[0].time_s), float(ev.sync_s), out.plan.stages,
                         ev.pipelines[0]), floor, low


def split_microbatches(times, M: int, P: int):
    """The least ``max_p g_p(m_p)`` over ``m_1 + ... + m_P = M``, ``m_p >= 1``.

    Each ``g_p`` is non-decreasing in ``m`` (``docs/dp.md``, "Several pipelines", item 2),
    so the greedy split is optimal: every range starts with one microbatch, and each of
    the other ``M - P`` goes to a range whose next value ``g_p(m_p + 1)`` is least. (Its
    maximum is the least ``tau`` with ``sum_p max{m : g_p(m) <= tau} >= M``: any split
    whose maximum is ``tau`` has ``m_p <= max{m : g_p(m) <= tau}``.) ``g_p`` is asked at
    most ``M + P`` times in all.

    Parameters
    ----------
    times : callable
        ``times(p, m)``: ``T_p`` of range ``p`` with ``m`` microbatches, ``inf`` where no
        plan exists (or none below the caller's bound).
    M, P : int

    Returns
    -------
    tuple or None
        ``(tau, [m_1, ..., m_P])``, or ``None`` when no split has a finite maximum.
    """
    import heapq

    if M < P:
        return None
    ms = [1] * P
    first = [times(p, 1) for p in range(P)]
    if any(math.isinf(t) for t in first):
        return None
    tau = max(first)
    heap = [(times(p, 2), p) for p in range(P)] if M > P else []
    heapq.heapify(heap)
    for _ in range(M - P):
        t, p = heapq.heappop(heap)
        if math.isinf(t):
            return None
        ms[p] += 1
        tau = max(tau, t)
        heapq.heappush(heap, (times(p, ms[p] + 1) if sum(ms) < M else math.inf, p))
    return tau, ms


def partitions(i0: int, j0: int, P: int):
    """Every split of the DCs ``i0..j0`` into ``P`` consecutive non-empty ranges, as
    ``[(i, j), ...]`` in chain order."""
    if P == 1:
        yield [(i0, j0)]
        return
    for cut in range(i0, j0 - P + 2):
        for rest in partitions(cut + 1, j0, P - 1):
            yield [(i0, cut), *rest]


def several(instance, counts, runs: RangeRuns, best_T: float, deadline: Deadline):
    """The best plan of ``P >= 2`` pipelines, ``P`` in ``counts``, that beats ``best_T``.

    Parameters
    ----------
    instance : Instance or PublicInstance
        Its public part is all that is read.
    counts : iterable of int
        Pipeline counts, each at most ``min(M, K)``.
    runs : RangeRuns
    best_T : float
        ``T`` of the best plan known (``inf``: none); only plans below it are returned.
    deadline : Deadline

    Returns
    -------
    tuple
        ``(T, plan)`` of the best plan found below ``best_T``, or ``(best_T, None)``.
    """
    K, M = instance.num_datacenters, instance.microbatches
    H = instance.training.pipeline_sync_period
    total_params = float(sum(ly.params for ly in instance.model.layers))
    gamma = instance.training.gradient_bytes_per_param
    found = None
    for P in counts:
        for i0 in range(K):
            for j0 in range(i0 + P - 1, K):
                bw, lat = cost.chain_path(instance.links, i0, j0)
                rx = float(cost.cross_sync_time(total_params, gamma, bw, lat)) / H
                theta = math.inf
                while True:
                    deadline.check()
                    # a plan of this span beats best_T only if every T_p < best_T - R_X / H
                    bound = (best_T - rx) * (1 + 1e-9)
                    if bound <= 0:
                        break
                    got = _least_max(instance, runs, P, i0, j0, theta, M, bound)
                    if got is None:
                        break
                    tau, chosen = got
                    if tau + rx >= best_T:  # every plan left in the sweep: T >= tau + R_X / H
                        break
                    plan = Plan(pipelines=[Pipeline(rp.stages, m) for rp, m in chosen])
                    T = runs.owner.evaluation(plan, [rp.cost for rp, _m in chosen]
                                              ).iteration_time_s
                    if T < best_T:
                        best_T, found = T, plan
                    rho = max(rp.sync for rp, _m in chosen)
                    if not rho < theta or rho <= 0.0:
                        break  # rho < theta always (the runs' options); 0: nothing below
                    theta = rho
    return best_T, found


def _least_max(instance, runs: RangeRuns, P: int, i0: int, j0: int, theta: float, M: int,
               bound: float = math.inf):
    """The least ``max_p T_p`` of ``P`` pipelines on consecutive ranges splitting
    ``i0..j0``, every ``R_s < theta`` and every ``T_p <= bound`` (each range run searches
    only below it), and the chosen ``(RangePlan, M_p)`` per range."""
    best = None
    for ranges in partitions(i0, j0, P):
        def times(p, m, ranges=ranges, bound=bound):
            return runs.time(*ranges[p], m, theta, bound)

        split = split_microbatches(times, M, P)
        if split is not None and (best is None or split[0] < best[0]):
            # the plans of the split (a value from a frontier run's lines has its plan
            # from a run at that M_p, the same g up to rounding)
            best = (split[0], [(runs.least(*r, m, theta, bound * (1 + 1e-9))
                                or runs.least(*r, m, theta), m)
                               for r, m in zip(ranges, split[1])])
            bound = min(bound, split[0] * (1 + 1e-9))  # later partitions must beat it
    return best


def solve_several(owner, options: dict, deadline: Deadline, trace_dir=None, probe=None):
    """The owner's search over the allowed pipeline counts: one pipeline over the whole
    chain by the usual solve (:func:`chainpipe.solvers.cdynp.solve_chain`), several by
    range runs (:func:`several`).

    Exact and under ``max_entries``: the seed, then ``dp``'s questions (:mod:`.questions`;
    compressed range runs' bounds widened by :meth:`RangeRuns.widen`, no guarantee:
    ``docs/privacy.md``, "Compressed mode under version 3"). Compressed by ``epsilon``,
    ``quantum``, ``digits`` alone: the seed, then the sweep of :func:`several`; every range
    run keeps the guarantee factor ``F`` of the whole chain's ``K - 1`` hops (a range has
    fewer), and so does the search (``docs/privacy.md``, "Compression under version 3"):
    the greedy split of ``M`` over values within ``F`` of ``g`` is within ``F`` of the
    least maximum, a range run that finds nothing below its bound proves ``g`` above the
    bound over ``F``, and the sweep over ``theta`` stops only where no plan left can be
    ``F`` times better. The answer is ``feasible`` with the lower bound ``T / F``
    (``max_entries``: no bound).

    Parameters
    ----------
    owner : LocalOwner or RemoteOwner
        Whose agents run, and how the owner evaluates a plan.
    options : dict
        The agents' options (:func:`.drive.agent_options`); ``upper_bound`` is refused.
    deadline : Deadline
    trace_dir : path, optional
        The one-pipeline solve's messages under ``one/``, each range run's under its name.
    probe : bool, optional
        The one-pipeline solve's probe (:func:`chainpipe.solvers.cdynp.run`).

    Returns
    -------
    Outcome
    """
    import time

    from ...deadline import TimeUp
    from ...result import Outcome
    from .runner import AgentFailure

    if options["upper_bound"] is not None:
        return Outcome("error", message="cdynp: with several pipelines option upper_bound "
                       "is not supported")
    t0 = time.perf_counter()
    public = owner.public
    K = public.num_datacenters
    if K == 1:  # no summary is sent: nothing to compress
        options = {**options, "epsilon": 0.0, "quantum": 0.0, "digits": 0, "max_entries": 0}
    exact = is_exact(options)
    stats = {"mode": owner.mode, "exact": exact}
    runs = RangeRuns(owner, options, deadline, None if trace_dir is None else Path(trace_dir))
    best = [math.inf, None]  # (T, plan) of the best plan known, kept when the time is up
    try:
        try:
            runs.start_floors_ahead()
            one = _search(owner, options, deadline, trace_dir, probe, runs, stats, best)
        finally:  # no thread of the solve outlives it
            runs.stop_ahead()
        if one is not None:
            return one
    except TimeUp as exc:
        stats.update(_range_stats(runs, t0))
        message = "cdynp: " + (str(exc).removeprefix("cdynp: ") or "time limit reached")
        if best[1] is None:
            return Outcome("no_solution", message=message, stats=stats)
        return Outcome("feasible", best[1], message=message, stats=stats)
    except AgentFailure as exc:
        return Outcome("error", message=f"cdynp: {exc}",
                       stats={**_range_stats(runs, t0), "failed_datacenter": exc.datacenter})
    stats.update(_range_stats(runs, t0))
    best_T, best_plan = best
    if best_plan is None:
        if not exact and options["max_entries"]:
            return Outcome("no_solution", message="cdynp: no plan survived the max_entries "
                           "cap", stats=stats)
        return Outcome("infeasible", message=owner.infeasibility_reason(), stats=stats)
    stats["objective_s"] = best_T
    if exact:
        return Outcome("optimal", best_plan, stats=stats)
    factor = guarantee_factor(K, options["epsilon"], options["quantum"], options["digits"])
    stats["guarantee_factor"] = None if options["max_entries"] else factor
    return Outcome("feasible", best_plan, stats=stats,
                   lower_bound=None if options["max_entries"] else best_T / factor)


def _search(owner, options: dict, deadline: Deadline, trace_dir, probe, runs: RangeRuns,
            stats: dict, best: list):
    """The owner's search (:func:`solve_several`): the seed, one pipeline, several; ``best``
    (``[T, plan]``) is improved in place. Returns the one-pipeline solve's outcome if it
    failed, else ``None``.

    Exact or under the ``max_entries`` cap, several pipelines by ``dp``'s questions (no
    guarantee to keep under the cap); with ``epsilon``, ``quantum``, ``digits`` alone by
    the sweep of :func:`several`, which keeps their factor. Across hosts the questions
    are asked beside the one-pipeline solve's period run (:data:`BESIDE`)."""
    public = owner.public
    K, M = public.num_datacenters, public.microbatches
    allowed = public.training.parallelism.pipelines
    questions = QUESTIONS and (is_exact(options) or bool(options["max_entries"]))
    counts = [P for P in sorted(allowed) if 2 <= P <= min(M, K)]
    spread: list = []  # the search of K pipelines made before the period run, if made
    beside: list = []  # the search of several pipelines under way beside the period run
    stats["several_beside"] = False
    if QUESTIONS:
        best[:] = _seed(owner, runs)
    if 1 in allowed:
        # one pipeline per DC, searched exactly between the one-pipeline solve's classic
        # and period runs, below the classic plan's T: its best plan bounds the period run
        first = questions and SPREAD_FIRST and K in counts and public.training.schedule == \
            "1f1b" and M > 1
        aside = questions and BESIDE and owner.mode == "tls" and runs.trace_dir is None

        def incumbent(T_e: float) -> float:
            if first:
                spread.append(_spread_first(runs, best, T_e))
            left = [P for P in counts if not (spread and P == K)]
            if aside and left and best[0] < T_e:
                beside.append(_Beside(public, left, runs, best, spread[0] if spread else None))
                stats["several_beside"] = True
            return best[0]

        # the seed bounds the classic solve's main run too (CLASSIC_SEED), not its probe
        # (whose plan is what a solve the time limit cuts returns, v3-large-01 at 150 s:
        # 9.50 s against the even seed's 19.17 s; and whose T, when lower, bounds it)
        try:
            one = _one_pipeline(owner, options, deadline, trace_dir, probe, runs, stats,
                                incumbent if first or aside else best[0],
                                best[0] if CLASSIC_SEED and is_exact(options) else math.inf)
        except BaseException:
            for b in beside:  # (the time limit: the best plan it found counts)
                b.stop(best)
            raise
        if one.status == "error":
            for b in beside:
                b.stop(best)
            return one
        if one.plan is not None and one.stats["objective_s"] < best[0]:
            best[:] = one.stats["objective_s"], one.plan
    if beside:  # its search goes on under the one-pipeline solve's answer, if lower
        beside[0].result(best)
    elif questions:
        from .questions import several as by_questions

        if spread:  # K pipelines searched below the classic plan's T, itself not beaten
            counts.remove(K)
        best[:] = by_questions(public, counts, runs, *best,
                               search=spread[0] if spread else None)
    else:
        T, found = several(public, counts, runs, best[0], deadline)
        best[:] = T, found or best[1]
    return None


#: across hosts (the owner's mode ``tls``), untraced, by ``dp``'s questions, when the
#: incumbent (the seed, or the search of ``K`` pipelines) already beats the one-pipeline
#: solve's classic plan: the search of the other counts runs in a thread beside that solve's
#: period run (its ladder over the whole chain keeps one host busy at a time, the range
#: runs others), under the incumbent, lowered to the period run's answer if that comes
#: lower. Not when the classic plan is the better: the period run's answer often lies far
#: below it (``v3-large-01``: 6.87 s against 9.50 s), and a search under the classic plan's
#: ``T`` meanwhile asks many questions the answer settles (157 range runs against 113).
#: ``False``: after it, as in process (where the runs share one interpreter) and in a
#: traced solve (whose trace is the in-process one's)
BESIDE = True


class Halted(Exception):
    """The solve ended while a run of its was still to start (:meth:`RangeRuns.halt`)."""


class _Beside:
    """The search of several pipelines (:func:`.questions.several`) in a thread of its own,
    beside the one-pipeline solve's period run (:data:`BESIDE`).

    Parameters
    ----------
    public : PublicInstance
    counts : list of int
        The pipeline counts to search.
    runs : RangeRuns
    best : list
        ``[T, plan]``: the owner's incumbent (the seed, or the search of ``K`` pipelines'),
        below the one-pipeline solve's classic plan's ``T``.
    search : OwnerSearch or None
        The search of ``K`` pipelines made before (its memory goes on).
    """

    def __init__(self, public, counts: list[int], runs: RangeRuns, best: list, search):
        from .questions import OwnerBest
        from .questions import several as by_questions

        self.runs = runs
        self.best = OwnerBest(*best)
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="chainpipe-several")
        self._future = self._pool.submit(by_questions, public, counts, runs, None, None,
                                         search, self.best)

    def result(self, best: list) -> None:
        """Offer the search ``best`` (``[T, plan]``, the one-pipeline solve's answer in it:
        it wins a tie, as it would have before the search), wait for the search's end (its
        failure raised here) and put the better in ``best``."""
        self.best.offer(best[0], best[1], ties=True)
        try:
            self._future.result()
        finally:
            self._end(best)

    def stop(self, best: list) -> None:
        """End the search: no run of the solve starts any more (:meth:`RangeRuns.halt`),
        the one under way ends first (bounded by the solve's deadline); its failure is
        not raised, the best plan it found goes in ``best``."""
        self.runs.halt()
        try:
            self._future.result()
        except Exception:  # the solve's own failure is the one reported
            pass
        finally:
            self._end(best)

    def _end(self, best: list) -> None:
        """The thread gone; the search's best plan in ``best`` if better."""
        self._pool.shutdown(wait=True)
        if self.best.T < best[0]:
            best[:] = self.best.T, self.best.plan


#: exact mode: the one-pipeline solve's classic run is bounded by the owner's seed (a
#: classic run that finds nothing below it proves no plan of one pipeline is); ``False``:
#: unbounded, with its probe
CLASSIC_SEED = True

#: exact (or capped) mode, 1F1B: the span of ``K`` pipelines, one per DC, is searched
#: (``dp``'s questions, every range one DC) between the one-pipeline solve's classic run and
#: its period run (the owner's ladder), whose bound its best plan lowers; ``False``: after
#: it, with the other counts, as ``dp`` orders them. Off since session 45: below the
#: classic plan's ``T`` the span's search asks many one-DC ranges for plans that the
#: one-pipeline optimum, found next, rules out (a fresh ``v3-large-01``-like draw, seed 44:
#: 187 one-DC runs and 9.3 s against 16 and 0.1 s after the ladder, the solve 18.9 -> 12.0
#: s; fresh ``v3/large``-like draws 8% to 23% less CPU time, ``v3-medium-02``-like 10% and
#: 26%, the committed ``v3-large-02`` and ``-03`` 4% and 2% less, ``v3-large-01`` 14% and
#: ``v3-medium-02`` and ``-03`` 6% and 7% more, one or two solves each); the period runs'
#: bound is then the seed's ``T``, which the ladder's floor stop and its strides make
#: cheap to search under
SPREAD_FIRST = False


def _spread_first(runs: RangeRuns, best: list, cap: float):
    """The best plan of ``K`` pipelines, one per DC, below the incumbent ``best`` (``[T,
    plan]``, improved in place) and ``cap`` (the one-pipeline classic plan's ``T``, which
    the answer does not exceed) by ``dp``'s search of the span of every DC
    (:class:`.questions.OwnerSearch`, whose ranges are all of one DC: each question a range
    run of one DC, answered by ``dp``'s search there, :mod:`.alone`). Returns the search,
    whose memory of the ranges the search of the other counts goes on with.

    ``dp`` seeds with ``replicate-per-dc`` (a classic plan per DC, ``M`` split by speed);
    the owner's seed (:func:`_seed`, ``M`` split evenly, ``R`` not weighed) lies above it
    (``v3-large-03``: 19.89 s against 16.72 s), and a one-pipeline solve bounded by it
    searches plans a better incumbent rules out. Exact: the span's search finds the best
    plan of ``K`` pipelines below the incumbent and ``cap``; the answer is at most ``cap``
    (the classic plan is one of one pipeline), so no plan of ``K`` pipelines at or above it
    is needed, and a later, lower incumbent only narrows what the search would look for."""
    from .questions import OwnerBest, OwnerSearch

    K = runs.owner.public.num_datacenters
    search = OwnerSearch(runs, OwnerBest(*best) if best[0] <= cap else OwnerBest(cap))
    search.span(K, 0, K - 1)
    if search.best.plan is not None and search.best.T < best[0]:
        best[:] = search.best.T, search.best.plan
    return search


def _seed(owner, runs: RangeRuns) -> tuple[float, Plan | None]:
    """The owner's first incumbent, as ``dp``'s (its ``replicate-per-dc`` seed): one
    pipeline per DC, each planned by a range run of its one DC (``dp``'s own search there,
    :mod:`.alone`), ``M`` split evenly, then (:data:`RESPLIT`) again in proportion to the
    rates ``M_p / T_p`` the even split's pipelines showed (:func:`split_by_rate`; ``dp``
    splits by the DCs' speeds, which the owner does not know); the better ``(T, plan)`` by
    the owner's evaluation, or ``(inf, None)`` when ``K`` pipelines are not allowed or a DC
    plans none. It bounds the range runs from the start (the search of ``K`` pipelines
    first, :func:`_spread_first`), and is what a solve the time limit cuts returns when it
    beats the one-pipeline solve's plan (``v3-large-02`` at 150 s: 22.81 s against 28.77
    s). The second split costs ``K`` one-DC runs (``v3-large-03``: 0.05 CPU s) and lowers
    the seed a great deal where the DCs differ (``v3-large-03`` 19.89 -> 16.17 s, ``-02``
    22.81 -> 18.27 s, ``-01`` 19.17 -> 11.84 s). Last (:data:`SEED_SYNC`), the pipelines
    of the largest ``R`` are planned again under caps below it (:func:`_lower_sync`)."""
    public = owner.public
    K, M = public.num_datacenters, public.microbatches
    if K < 2 or K > M or K not in public.training.parallelism.pipelines:
        return math.inf, None
    even = [M // K + (k < M % K) for k in range(K)]
    T, plan, got = _replicas(owner, runs, even)
    if plan is None:
        return T, plan
    best = T, plan, got, even
    if RESPLIT:
        split = split_by_rate(M, even, [g.time for g in got])
        if split != even:
            T2, plan2, got2 = _replicas(owner, runs, split)
            if T2 < T:
                best = T2, plan2, got2, split
    return _lower_sync(owner, runs, *best) if SEED_SYNC else best[:2]


#: whether the owner's seed splits ``M`` a second time, by the rates the first showed
RESPLIT = True

#: whether the owner's seed plans its pipelines of the largest ``R`` again under caps
#: below it while its ``T`` falls (:func:`_lower_sync`)
SEED_SYNC = True


def _replicas(owner, runs: RangeRuns, ms: list[int]) -> tuple[float, Plan | None, list]:
    """One pipeline per DC, DC ``k`` with ``ms[k]`` microbatches, each its least ``T_p``
    (an unbounded one-DC range run): ``(T, plan, [RangePlan per DC])``, ``(inf, None,
    [])`` when a DC plans none or the plan does not run."""
    answers = runs.least_each([(k, k, m, math.inf) for k, m in enumerate(ms)])
    if any(got is None for got in answers):
        return math.inf, None, []
    T, plan = _replicated(owner, answers, ms)
    return (T, plan, answers) if plan is not None else (math.inf, None, [])


def _replicated(owner, answers: list, ms: list[int]) -> tuple[float, Plan | None]:
    """The plan of one pipeline per DC from their range plans ``answers`` (DC ``k`` with
    ``ms[k]`` microbatches) and its ``T`` by the owner's evaluation; ``(inf, None)`` when it
    does not run."""
    plan = Plan(pipelines=[Pipeline(got.stages, m) for got, m in zip(answers, ms)])
    ev = owner.evaluation(plan, [got.cost for got in answers])
    if not ev.feasible:
        return math.inf, None
    return float(ev.iteration_time_s), plan


def _lower_sync(owner, runs: RangeRuns, T: float, plan: Plan, answers: list,
                ms: list[int]) -> tuple[float, Plan]:
    """The seed ``(T, plan)`` of one pipeline per DC (their range plans ``answers``, ``ms``
    microbatches) improved: ``T = max T_p + max R + R_X / H``, and each DC's least ``T_p``
    pays no heed to its ``R``, so the pipelines whose ``R`` is the largest are planned again
    under that ``R`` as their cap (one-DC range runs: their least ``T_p`` with every ``R_s``
    below it) while the plan's ``T`` falls, at most ``2 K`` times. ``v3-medium-03``-like
    seed 50: 12.868 -> 11.721 s in two runs (``dp``'s seed, split by the DCs' speeds,
    12.229 s; the optimum 11.387 s); a lower incumbent bounds every later run."""
    for _ in range(2 * len(answers)):
        top = max(got.sync for got in answers)
        if top <= 0.0:
            break
        lower = [k for k, got in enumerate(answers) if got.sync >= top]
        again = runs.least_each([(k, k, ms[k], top) for k in lower])
        if any(got is None for got in again):
            break
        trial = list(answers)
        for k, got in zip(lower, again):
            trial[k] = got
        T2, plan2 = _replicated(owner, trial, ms)
        if not T2 < T:
            break
        T, plan, answers = T2, plan2, trial
    return T, plan


def split_by_rate(M: int, ms: list[int], times: list[float]) -> list[int]:
    """``M`` microbatches split over the pipelines in proportion to their rates ``ms[p] /
    times[p]``, each at least 1 (largest remainders; ties to the earlier pipeline)."""
    if any(t <= 0 for t in times):  # a rate unknown
        return list(ms)
    rates = [m / t for m, t in zip(ms, times)]
    total = sum(rates)
    share = [M * r / total for r in rates]
    out = [max(1, int(x)) for x in share]
    while sum(out) < M:
        out[max(range(len(out)), key=lambda p: (share[p] - out[p], -p))] += 1
    while sum(out) > M:
        out[max(range(len(out)), key=lambda p: (out[p] - share[p] if out[p] > 1 else -math.inf,
                                                 -p))] -= 1
    return out


def _one_pipeline(owner, options: dict, deadline: Deadline, trace_dir, probe,
                  runs: RangeRuns, stats: dict, incumbent=math.inf,
                  classic_bound: float = math.inf):
    """The usual solve of one pipeline over the whole chain (its messages counted with the
    range runs', under ``one/``); its plan in the several-pipeline plan's form, with its
    ``T`` as ``stats["objective_s"]``. ``incumbent`` (the seed's ``T``, or a callable
    giving it from the classic plan's ``T``: :func:`_spread_first`) bounds
    its period run (:func:`~chainpipe.solvers.cdynp.solve_chain`'s ``period_bound``): a
    one-pipeline plan is wanted only if it beats the incumbent. ``classic_bound`` (the
    seed's ``T``, exact) bounds the classic run's main run (``solve_chain``'s
    ``classic_bound``): when nothing lies below it the answer is ``no_solution`` with the
    run's messages, and no plan of one pipeline beats the seed (``v3-large-03``: the seed
    16.17 s, the classic optimum 17.89 s; 50,000 of its labels).

    Raises
    ------
    TimeUp
        The time limit ended it.
    """
    from ...deadline import TimeUp
    from . import solve_chain

    K, M = owner.public.num_datacenters, owner.public.microbatches
    whole = owner.chain(0, K - 1, M)
    one = solve_chain(whole, options, deadline, probe=probe, period_bound=incumbent,
                      classic_bound=classic_bound,
                      trace_dir=None if trace_dir is None else Path(trace_dir, "one"))
    if one.status == "error":
        return one
    done = one.status == "no_solution" and "messages" in one.stats  # none below the seed
    if one.status not in ("optimal", "feasible", "infeasible") and not done:
        raise TimeUp(one.message or "time limit reached")
    stats["one_pipeline"] = {k: v for k, v in one.stats.items() if k != "agents"}
    runs._add_messages("one", one.stats.get("messages", []))
    if one.plan is not None:
        plan = Plan(one.plan.stages)
        T = owner.evaluation(plan, [whole.evaluation(one.plan).pipelines[0]]).iteration_time_s
        one = dataclasses.replace(one, plan=plan, stats={**one.stats, "objective_s": T})
    return one


def _range_stats(runs: RangeRuns, t0: float) -> dict:
    import time

    sizes = [m["bytes"] for m in runs.messages]
    return {"range_runs": runs.runs, "one_dc_runs": runs.one_dc,
            "floor_runs": runs.floor_runs, "floor_curves_unused": runs.floor_curves_unused,
            "frontier_runs": runs.frontier_runs,
            "frontier_settled": runs.settled, "frontier_unsettled": runs.unsettled,
            "messages": runs.messages, "labels": runs.labels,
            "message_bytes_total": sum(sizes), "message_bytes_max": max(sizes, default=0),
            "protocol_s": time.perf_counter() - t0}
