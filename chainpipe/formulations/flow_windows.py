"""The arc-flow route's decomposition on the period: windows of ``lambda``, best first.

Under 1F1B's period the arc-flow model writes the loops by node potentials, whose close
rows ``r_u + sum C x <= B`` are not weighted by the flow: a fractional path relaxes them,
and on a two-type datacenter the root gap is about 14 % (``docs/formulations.md``,
"Eleventh round"). With the period in a narrow window ``[lo, hi]`` the loop rows can be
written flow-weighted for the fixed period ``hi`` (``z_c = hi x_c``, linear), and the
LP bound is near the optimum. So the period's range ``[floor_B, cap]``
(:meth:`~chainpipe.formulations.ilp_flow.FlowFormulation.period_range`) is cut into
windows of relative width :data:`START_WIDTH`, halved down to :data:`WIDTH`, and each
window is then a MIP of its own
(:meth:`~chainpipe.formulations.ilp_flow.FlowFormulation.window`, built with the
fixed-period rows):

- a window's *key* is a proven lower bound on ``T`` of its plans: at first ``fill_min +
  (M - 1) lo + floor_S`` (every plan pays its least fill and ``(M - 1) lambda``), then
  the window model's whole-path and loop bound (``cheap_bound``) once it is built, then
  its MIP's dual bound once one has run;
- a window's network, once built, offers its loop-feasible least paths as plans
  (:func:`~chainpipe.formulations.flow_excess.least_paths`, one per cap on the
  synchronisation; each kept when :func:`~chainpipe.plan.evaluate` finds it feasible
  and faster): the route's own heuristic, from its own network, :data:`PATH_PLANS`;
- the open window of least key is taken next (best first); a window whose key reaches
  the incumbent (the route's own heuristic plan, or the best plan a window or its paths found) is
  *closed*, as is one whose model is empty or proven infeasible below the incumbent, or
  whose MIP is proven optimal (its plan then is the incumbent or no better);
- a window's MIP gets a CPU-time slice (:data:`SLICE_S` at first); stopped, it is split
  in two at its geometric middle while wider than :data:`MIN_WIDTH` (the halves keep its
  bound), else taken again later with twice the slice;
- the bound is the least key of the open windows (the incumbent when none is open), so
  ``bound <= optimum <= T`` at any stop; ``optimal`` only when every window is closed;
- a later solve of the same model (the outer enumeration of several pipelines taking a
  block and ``M_p`` again) goes on with the open windows (:meth:`PeriodWindows.resume`).

The route (``solvers/ilp.py:_windowed``, ``_root_gap_wide``) takes the windows for
models of one datacenter (and for such networks of the levels of its joint models of
several pipelines, valued by ``T - max R``: ``solvers/ilp.py:_level_windows``;
:data:`WINDOW_DCS`; the two-type DCs of the eleventh round), and first, for
:data:`FIRST_WINDOW_SHARE` of the time left before the whole MIP, for models of
:data:`FIRST_WINDOW_DCS` datacenters or more (``solvers/ilp.py:_windows_first``),
with :data:`WINDOW_COLUMNS` stage columns or more, and only when the whole model's LP
relaxation is more than :data:`WINDOW_GAP` below the upper bound, or not solved in
:data:`ROOT_LP_S` CPU seconds; that LP's bound is every window's first floor. Every window, its model
building and its MIP count against the one deadline. Nothing
comes from another solver: the only outside help is the route's heuristic plan.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field

import numpy as np

from ..cost import steady_state
from ..deadline import Deadline, TimeUp
from ..numeric import OPTIMALITY_RTOL
from ..plan import evaluate
from .common import safe_bound
from .cpu_clock import cpu_clock
from .flow_excess import least_paths, loops_in_tail
from .pipelines import CpuPhase

#: the first windows' relative width in ``lambda``: built (whole-path and loop bounds),
#: empty ones closed at once, the others split in two until :data:`WIDTH` wide
START_WIDTH = 0.08
#: a window is solved as a MIP once at most this wide (relative, in ``lambda``)
WIDTH = 0.01
#: a window narrower than this is not split again (its MIP gets more time instead)
MIN_WIDTH = 0.001
#: the first CPU seconds of a window's MIP; doubled each time a window is taken again
SLICE_S = 6.0
#: CPU seconds of the whole model's LP relaxation, which decides (at most a quarter of
#: the time left)
ROOT_LP_S = 10.0
#: windows when that LP is more than this far below the upper bound (relative)
WINDOW_GAP = 0.05
#: the route decomposes models of at most this many datacenters: on ``v3-medium-02``'s
#: one-pipeline entry (four DCs, ``M = 64``, LP 11.6 % below the cutoff) the whole MIP
#: proves the cutoff in about 13 CPU s, the windows in 27 (``docs/formulations.md``,
#: "Twelfth round")
WINDOW_DCS = 1
#: models of at least this many datacenters (and more than :data:`WINDOW_DCS`) whose
#: root gap is wide take the windows first for :data:`FIRST_WINDOW_SHARE` of the time
#: left, after the flow-weighted loop LP and before the whole MIP
#: (``solvers/ilp.py:_windows_first``): fresh ``v3-medium-01``-like seed 3's one-pipeline
#: entry (four DCs, ``M = 64``; the LP mixes plans whose bottleneck averages below any
#: plan's) is proven by them in 7.4 CPU s, by the whole MIP not in 100
#: (``docs/formulations.md``, "Fourteenth round")
FIRST_WINDOW_DCS = 3
#: the share of the time left that the windows get first on such a model
FIRST_WINDOW_SHARE = 0.3
#: the share of the time left that the windows get first, before the flow-weighted loop
#: LP and without the root-LP test, on such a model whose windows are pruned by their
#: loop-feasible least paths (:func:`excess_first`): fresh ``v3-medium-02``-like seed 3's
#: four-DC entry (``M = 64``, 36 293 stage columns) is closed by them in 12.6 CPU s, every
#: window emptied without a MIP, where its loop LP, root LP and window MIPs each ran out
#: of their shares (``docs/formulations.md``, "Nineteenth round"); all of it since the
#: twenty-second round: the loop LP after them gave no bound on fresh seeds 16 and 31's
#: four-DC blocks (23.2 and 6.1 CPU s), and the windows are kept for a later solve
EXCESS_WINDOW_SHARE = 1.0
#: the route decomposes one-pipeline 1F1B models with at least this many stage columns
#: (smaller ones are solved whole, as before)
WINDOW_COLUMNS = 2000
#: offer each window's loop-feasible least paths as plans when its network is built
#: (:meth:`PeriodWindows._paths`; the MIP and CP-SAT routes alike)
PATH_PLANS = True


def excess_first(form) -> bool:
    """Whether the windows of ``form``'s period are pruned by their loop-feasible least
    paths (:func:`~chainpipe.formulations.flow_excess.excess_prune`): its loops a
    condition on the path alone (:func:`~chainpipe.formulations.flow_excess.loops_in_tail`)
    and an upper bound."""
    return loops_in_tail(form) and form.upper_bound is not None


def _plan_T(g, plan) -> float:
    """``T`` of ``plan`` (a plan of window model ``g``'s instance), by the cost model."""
    return float(evaluate(g.tables.instance, plan).iteration_time_s)


@dataclass(order=True)
class Window:
    """An open window ``[lo, hi]`` of the period (seconds) and its key (a bound, seconds)."""

    key: float
    lo: float
    hi: float
    slice_s: float = field(default=SLICE_S, compare=False)
    built: bool = field(default=False, compare=False)
    #: the window's network when it was re-keyed by it (used once, then dropped)
    net: object = field(default=None, compare=False, repr=False)


@dataclass
class WindowsResult:
    """What the windows proved: the best plan found (``None``: none below the upper
    bound), its ``T``, the bound (seconds; every plan no slower than the upper bound is at
    least this) and whether every window was closed."""

    plan: object
    T: float
    bound: float
    closed: bool
    stats: dict


class PeriodWindows:
    """The decomposition of one arc-flow model on its period.

    Parameters
    ----------
    form : FlowFormulation
        The whole model's network (1F1B, one pipeline, ``M > 1``, with an upper bound:
        the heuristic plan's ``T`` or a cutoff below it).
    solve : callable
        ``solve(model, window_form, incumbent_T, deadline) -> MipAnswer``: the backend on
        a window's model, told the incumbent's ``T`` by its own means (HiGHS's
        ``objective_bound``; a window it proves infeasible is closed).
    deadline : Deadline
        The run's deadline; every step counts against it.
    width, min_width, slice_s, start_width : float
        :data:`WIDTH`, :data:`MIN_WIDTH`, :data:`SLICE_S`, :data:`START_WIDTH`.
    floor : float
        A proven bound (seconds) on every plan of the model (the whole model's LP
        relaxation, ``solvers/ilp.py:_root_gap_wide``): every window's first key is at
        least this.
    plan, plan_T : Plan, float
        A plan found before and its ``T``: the incumbent if below the model's upper
        bound.
    value : callable, optional
        ``value(window_form, plan) -> float``: the model's objective of a plan a window
        found (default ``T`` by :func:`~chainpipe.plan.evaluate`). A level of the joint
        model of several pipelines (``solvers/ilp.py:_SyncBlock``) minimises ``T - max R``
        (a model built with ``count_sync=False``) and passes that.
    target : float
        Stop once a plan no slower than this is found (what the caller needs; the
        windows are then not all closed, the bound is still a proven one). 0: none.
    """

    def __init__(self, form, solve, deadline: Deadline, *, width: float = WIDTH,
                 min_width: float = MIN_WIDTH, slice_s: float = SLICE_S,
                 start_width: float = START_WIDTH, floor: float = 0.0,
                 plan=None, plan_T: float = math.inf, value=None, target: float = 0.0):
        self.form, self.solve, self.deadline = form, solve, deadline
        self.value = value if value is not None else _plan_T
        self.target = float(target)
        self.width, self.min_width = width, min_width
        self.best_T, self.best_plan = float(form.upper_bound), None
        if plan is not None and plan_T < self.best_T:
            self.best_T, self.best_plan = float(plan_T), plan
        #: the least key of a window closed by its key (at most a hair below the
        #: incumbent, :meth:`closes`): the bound never claims more than was proven
        self.closed_key = math.inf
        self.open: list[Window] = []
        self.stats = {"windows": 0, "built": 0, "empty": 0, "mips": 0, "split": 0,
                      "closed_by_key": 0, "mip_cpu_s": 0.0, "build_cpu_s": 0.0}
        lo0, hi0 = form.period_range()
        self.stats["period_range_s"] = [lo0, hi0]
        start_width = max(start_width, width)
        n = max(1, math.ceil(math.log(hi0 / lo0) / math.log1p(start_width))) if lo0 > 0 else 1
        edges = np.geomspace(lo0, hi0, n + 1) if lo0 > 0 else np.linspace(lo0, hi0, n + 1)
        base = self._fill_floor()
        steady = float(steady_state(form.tables.M, 1))
        for lo, hi in zip(edges[:-1].tolist(), edges[1:].tolist()):
            self.open.append(Window(max(base + steady * lo, floor), lo, hi, slice_s))
        heapq.heapify(self.open)
        self.stats["windows"] = len(self.open)

    def resume(self, solve, deadline: Deadline, upper: float) -> PeriodWindows:
        """Go on with a later solve of the same model: its backend, its deadline, and an
        upper bound at most the model's (a lower cutoff: the incumbent becomes it unless
        the best plan found is below it). Every closed window stays closed (it holds no
        plan below the old incumbent, so none below the new one), every key stays a
        bound."""
        if upper > self.form.upper_bound * (1 + 1e-12):
            raise ValueError("windows resume only under an upper bound at most their model's")
        self.solve, self.deadline = solve, deadline
        self.form.check = deadline.check  # the windows' networks are built under it
        if upper < self.best_T:
            self.best_T, self.best_plan = float(upper), None
        self.stats["resumed"] = self.stats.get("resumed", 0) + 1
        return self

    def _fill_floor(self) -> float:
        """The least fill and drain of a path plus ``floor_S``: with ``(M - 1) lo`` a
        bound on the plans of a window starting at ``lo``."""
        f = self.form
        fill = f.least_fill_by_stages(1)
        least = float(np.min(fill)) if len(fill) else 0.0
        return (least if math.isfinite(least) else 0.0) + f.floor_S

    def closes(self, key: float) -> bool:
        """Whether a window of this key holds no plan better than the incumbent (to a
        tenth of ``OPTIMALITY_RTOL``; the key is kept in :attr:`closed_key`)."""
        if key >= self.best_T * (1 - OPTIMALITY_RTOL / 10):
            self.closed_key = min(self.closed_key, key)
            return True
        return False

    def bound(self) -> float:
        """The least key of the open windows and of those closed by their key, or the
        incumbent's ``T`` when that is less."""
        return min([w.key for w in self.open] + [self.best_T, self.closed_key])

    def run(self) -> WindowsResult:
        """Take the windows best first until every one is closed or the deadline passes."""
        while self.open and not self.deadline.expired() and self.best_T > self.target:
            w = heapq.heappop(self.open)
            if self.closes(w.key):
                self.stats["closed_by_key"] += 1
                continue
            try:
                self._take(w)
            except TimeUp:
                heapq.heappush(self.open, w)
                break
        self.open = [w for w in self.open if not self.closes(w.key)]
        return WindowsResult(self.best_plan, self.best_T, self.bound(), not self.open,
                             self.stats)

    def _take(self, w: Window) -> None:
        """Build ``w``'s network and, once it is keyed and narrow enough, solve it."""
        g = self._network(w)
        if g is not None:
            self._solve(w, g)

    def _network(self, w: Window):
        """``w``'s network, re-keyed by its cheap bound on first sight; ``None`` when
        there is nothing to solve now (no arc left, taken again in its turn once
        re-keyed, or split in halves while wider than the width)."""
        t0 = cpu_clock()
        g, w.net = w.net, None
        if g is None or g.upper_bound > self.best_T:
            g = self.form.window(w.lo, w.hi, self.best_T)
            self.stats["build_cpu_s"] += cpu_clock() - t0
            self._paths(g)
        else:
            self.stats["build_cpu_s"] += cpu_clock() - t0
        if not g.n_arcs:
            self.stats["empty"] += 1
            return None
        if not w.built:
            w.built = True
            if g.cheap_bound > w.key:  # re-keyed lazily: taken again in its turn
                w.key, w.net = g.cheap_bound, g
                heapq.heappush(self.open, w)
                return None
        if w.hi / w.lo - 1 > self.width * (1 + 1e-9):  # too wide for a solve: halves
            self._split(w, max(w.key, g.cheap_bound), w.slice_s)
            return None
        return g

    def _paths(self, g) -> None:
        """Offer the window's loop-feasible least paths as plans
        (:func:`~chainpipe.formulations.flow_excess.least_paths`): each one
        :func:`~chainpipe.plan.evaluate` finds feasible and faster than the incumbent
        becomes it (the route's own heuristic, from its own network). Fresh
        ``v3-medium-02``-like seed 16's four-DC block: no plan below the heuristic's
        1.061 s in 60 CPU s before; the first window built gives 0.847 s, the window
        holding the optimum's period the optimum 0.8274 s (``docs/formulations.md``,
        "Twenty-second round")."""
        if not PATH_PLANS:
            return
        t0 = cpu_clock()
        for plan in least_paths(g, self.best_T):
            self.stats["path_plans"] = self.stats.get("path_plans", 0) + 1
            if not evaluate(g.tables.instance, plan).feasible:
                continue
            T = float(self.value(g, plan))
            if T < self.best_T:
                self.best_T, self.best_plan = T, plan
                self.stats["path_better"] = self.stats.get("path_better", 0) + 1
        self.stats["path_cpu_s"] = self.stats.get("path_cpu_s", 0.0) + cpu_clock() - t0

    def _solve(self, w: Window, g) -> None:
        """Build ``w``'s MIP and run it (:meth:`_answer` reads it)."""
        self.deadline.check()
        t0 = cpu_clock()
        model = g.build(flow_loops=True)
        self.stats["built"] += 1
        size = model.stats()
        if size.get("variables", 0) > self.stats.get("largest_model", {}).get("variables", -1):
            self.stats["largest_model"] = size
        self.stats["build_cpu_s"] += cpu_clock() - t0
        self.deadline.check()
        t0 = cpu_clock()
        answer = self.solve(model, g, self.best_T, CpuPhase(self.deadline, w.slice_s))
        self.stats["mips"] += 1
        self.stats["mip_cpu_s"] += cpu_clock() - t0
        self._answer(w, g, model, answer)

    def _answer(self, w: Window, g, model, answer) -> None:
        """Read a window's MIP: a plan may become the incumbent; a proven window closes;
        a stopped one goes back (:meth:`_requeue`), keyed by its bound."""
        if answer.values is not None:
            model.assign(answer.values)
            plan = g.decode()
            T = float(self.value(g, plan))
            if T < self.best_T:
                self.best_T, self.best_plan = T, plan
        if answer.status in ("optimal", "infeasible"):
            return
        bound = safe_bound(answer.bound, g.scale) if answer.bound is not None else None
        self._requeue(w, max(w.key, g.cheap_bound, bound or 0.0))

    def _requeue(self, w: Window, key: float) -> None:
        """A window stopped unproven with bound ``key``: dropped if that closes it, else
        split while wider than twice the least width, else back with a longer slice."""
        if self.closes(key):
            return
        if w.hi / w.lo - 1 > 2 * self.min_width:
            self._split(w, key, w.slice_s)
        else:
            heapq.heappush(self.open, Window(key, w.lo, w.hi, 2 * w.slice_s, True))

    def _split(self, w: Window, key: float, slice_s: float) -> None:
        """``w`` cut in two at its geometric middle, each half keyed by ``key`` (a bound
        on all of ``w``'s plans)."""
        mid = math.sqrt(w.lo * w.hi)
        self.stats["split"] += 1
        for lo, hi in ((w.lo, mid), (mid, w.hi)):
            heapq.heappush(self.open, Window(key, lo, hi, slice_s))
