"""Loop-feasible least paths of one period window of the arc-flow network.

Under 1F1B's period a plan whose period is at most ``v`` keeps every loop ``W(s, t) <= (t
- s + 1) v`` of its tail stages. When every stage of every plan is in the tail (no plan
has ``M`` stages), that is a condition on the path alone, carried along it by the
*excess* of ``docs/formulations.md`` ("1F1B: the loops"): ``r`` at an ``N`` node (the
largest excess a window of stages carries into the stage, clipped at 0, ``r <= Q_top``)
and ``t = r + C`` at the ``E`` (or ``X``) node after a stage, which must stay at most
``v``; a boundary column turns ``t`` into ``max(0, t - v + Q)``. A shortest path over
``(node, excess)`` with the excess rounded *down* to a grid is a relaxation (a smaller
excess only allows more continuations, and rounding never raises it): its least fill
and drain (``sum C + sum Q``) and its least synchronisation maximum (``max R``) are
lower bounds of those of every plan of the window, and so is, per column, the least
such path through the column. :func:`excess_prune` keys a window by them and drops the
columns every such path through which is slower than the upper bound.

The same sweeps also give plans: :func:`least_paths` walks a least path back from the
sinks (one per cap on the synchronisation) and decodes it. Rounding may make such a path
break a loop at ``v``, and the network leaves out the position caps of 1F1B's memory, so
a path is only a candidate: its caller keeps it when :func:`~chainpipe.plan.evaluate`
finds it feasible, at the ``T`` that finds.
"""

from __future__ import annotations

import math

import numpy as np

from ..cost import steady_state
from .cpsat import UB_RTOL

#: grid points of the excess per node (``r`` in ``[0, Q_top]``, ``t`` in ``[0, v]``)
GRID = 128

#: at most this many stage columns times :data:`GRID` cells per sweep (memory)
MAX_CELLS = 40_000_000

#: at most this many least paths per window (:func:`least_paths`): one per cap on the
#: synchronisation, each below the last path's ``max R``
PATH_TRIES = 8


class _Excess:
    """The sweeps of one window network at period ``v``: columns above ``v`` dropped,
    the rounded excess as a second index (:data:`GRID` points)."""

    def __init__(self, form, v: float, grid: int = GRID):
        self.form, self.v, self.G = form, float(v), int(grid)
        tails, heads, fill, maxima = form._column_terms()
        nx = len(form.col_arc)
        self.nx, self.tails, self.heads, self.fill = nx, tails, heads, fill
        self.sync = next(m for m in maxima if m[0] == "S")[2]
        C = form.arcs.compute[form.col_arc]
        Q = form.boundary[form.bcol_arc, 3]
        top = np.concatenate([form.stage_B[form.col_arc], form.boundary[form.bcol_arc, 4]])
        self.ok = top <= self.v * (1 + 1e-9)
        q_top = float(Q.max(initial=0.0))
        self.hN = max(q_top, 1e-300) / (self.G - 1)  # r at N nodes, in [0, Q_top]
        self.hE = self.v / (self.G - 1)  # t = r + C at E/X nodes, in [0, v]
        g = np.arange(self.G)
        # the grid index reached through each column from each grid index (-1: the
        # stage's window would exceed v)
        with np.errstate(invalid="ignore"):
            t = g[None, :] * self.hN + C[:, None]
            j = np.floor(t / self.hE + 1e-9).astype(np.int64)
            j[t > self.v * (1 + 1e-9)] = -1
            r = np.maximum(0.0, g[None, :] * self.hE - self.v + Q[:, None])
            k = np.floor(r / self.hN + 1e-9).astype(np.int64)
        self.to = np.minimum(np.concatenate([j, k]), self.G - 1)
        self.n_nodes = 3 * (form.tables.L + 1) * len(form.states)
        per_layer = len(form.states)
        self.sources = np.arange(per_layer)
        self.sinks = (2 * form.tables.L + 1) * per_layer + np.arange(per_layer)

    def _groups(self, forward: bool):
        sel = np.nonzero(self.ok)[0]
        key = self.form._topo(self.tails[sel] if forward else self.heads[sel])
        order = np.argsort(key if forward else -key, kind="stable")
        sel, key = sel[order], key[order]
        cut = np.flatnonzero(np.diff(key)) + 1
        for lo, hi in zip(np.r_[0, cut], np.r_[cut, len(key)]):
            yield sel[lo:hi]

    def forward(self, weight: np.ndarray, bottleneck: bool) -> np.ndarray:
        """Least path sum (maximum) of ``weight`` from the sources to every ``(node,
        excess)``; ``inf`` where no loop-feasible path is."""
        out = np.full((self.n_nodes, self.G), np.inf)
        out[self.sources, 0] = 0.0
        for sel in self._groups(True):
            self.form.check()
            base = out[self.tails[sel]]
            w = weight[sel][:, None]
            val = np.maximum(base, w) if bottleneck else base + w
            to = self.to[sel]
            val[to < 0] = np.inf
            np.minimum.at(out, (self.heads[sel][:, None], np.maximum(to, 0)), val)
        return out

    def least_path(self, weight: np.ndarray, keep: np.ndarray):
        """A least path sum of ``weight`` over the columns where :attr:`ok` and ``keep``
        hold, walked back from the sinks: ``(columns, sum)`` (indices into the stage
        then boundary columns, source first), or ``(None, inf)`` when none is."""
        ok = self.ok
        self.ok = ok & keep
        try:
            fwd = self.forward(weight, False)
        finally:
            self.ok = ok
        ends = fwd[self.sinks]
        if not np.isfinite(ends).any():
            return None, math.inf
        at = int(np.argmin(ends))
        node, j = int(self.sinks[at // self.G]), at % self.G
        total = val = float(ends.flat[at])
        sel = np.nonzero(ok & keep)[0]
        heads, cols = self.heads[sel], []
        for _ in range(2 * self.form.tables.L + 2):
            if node < len(self.sources) and j == 0 and val <= 1e-12 * max(1.0, total):
                return cols[::-1], total
            into = sel[heads == node]
            base = fwd[self.tails[into]] + weight[into][:, None]
            hit = np.argwhere((self.to[into] == j)
                              & (np.abs(base - val) <= 1e-9 * max(1.0, total)))
            if not len(hit):
                return None, math.inf
            c = int(into[hit[0, 0]])
            cols.append(c)
            node, j = int(self.tails[c]), int(hit[0, 1])
            val = float(fwd[node, j])
        return None, math.inf

    def backward(self, weight: np.ndarray, bottleneck: bool) -> np.ndarray:
        """Least path sum (maximum) of ``weight`` from every ``(node, excess)`` to the
        sinks (the excess rounded as :meth:`forward` rounds it)."""
        out = np.full((self.n_nodes, self.G), np.inf)
        out[self.sinks, :] = 0.0
        rows = np.arange(self.G)[None, :]
        for sel in self._groups(False):
            self.form.check()
            to = self.to[sel]
            nxt = out[self.heads[sel][:, None], np.maximum(to, 0)]
            w = weight[sel][:, None]
            val = np.maximum(nxt, w) if bottleneck else nxt + w
            val[to < 0] = np.inf
            np.minimum.at(out, (self.tails[sel][:, None], rows), val)
        return out

    def through(self, weight: np.ndarray, bottleneck: bool) -> tuple[np.ndarray, float]:
        """Per column, the least path sum (maximum) of ``weight`` over the loop-feasible
        source-to-sink paths through it (``inf``: none), and the least over all paths."""
        fwd, bwd = self.forward(weight, bottleneck), self.backward(weight, bottleneck)
        least = float(fwd[self.sinks].min()) if len(self.sinks) else math.inf
        out = np.full(len(self.tails), np.inf)
        idx = np.nonzero(self.ok)[0]
        for part in np.array_split(idx, max(1, len(idx) * self.G // 4_000_000 + 1)):
            to = self.to[part]
            f = fwd[self.tails[part]]
            b = bwd[self.heads[part][:, None], np.maximum(to, 0)]
            w = weight[part][:, None]
            val = np.maximum(np.maximum(f, w), b) if bottleneck else f + w + b
            val[to < 0] = np.inf
            out[part] = val.min(axis=1)
        return out, least


def loops_in_tail(form) -> bool:
    """Whether ``form``'s loops are a condition on the path alone: 1F1B's period, ``M >
    1``, every stage of every plan in the tail (no plan of ``M`` stages), columns left."""
    t = form.tables
    return (form.mode == "1f1b" and t.M > 1 and int(form.arcs.s_max) < t.M
            and len(form.col_arc) > 0)


def applies(form) -> bool:
    """Whether :func:`excess_prune` applies: :func:`loops_in_tail`, a period window
    (:attr:`~chainpipe.formulations.ilp_flow.FlowFormulation.period`), and not too many
    columns."""
    return (loops_in_tail(form) and form.period is not None
            and (len(form.col_arc) + len(form.bcol_arc)) * GRID <= MAX_CELLS)


def excess_prune(form, grid: int = GRID) -> None:
    """Raise a window's :attr:`cheap_bound` by its loop-feasible least paths and drop
    the columns on no loop-feasible path no slower than its upper bound.

    For a window ``[lo, hi]`` every plan has ``T >= fill + (M - 1) lo + max R`` with
    its loops holding at ``hi``; the least fill and the least ``max R`` of such paths
    through a column (each on its own: a sum of two minima is at most the minimum of
    the sum) bound every plan through it. Exact: only columns on no plan of the window
    no slower than the upper bound go, and the bound holds for every plan the window
    keeps. Nothing is done when :func:`applies` is false.
    """
    if not applies(form):
        return
    lo, hi = form.period
    ex = _Excess(form, hi, grid)
    fill, least_fill = ex.through(ex.fill, False)
    sync, least_sync = ex.through(ex.sync, True) if form.count_sync else (
        np.zeros(len(fill)), 0.0)
    steady = float(steady_state(form.tables.M, 1)) * max(lo, form.floor_B)
    low = fill + sync + steady
    floor = least_fill + least_sync + steady
    form.cheap_bound = max(form.cheap_bound, floor)
    if form.upper_bound is None:
        return
    keep = low <= form.upper_bound * (1 + UB_RTOL)
    form.excess_pruned = int((~keep).sum())
    if keep.all():
        return
    form._keep_columns(keep)
    form._on_paths()


def least_paths(form, upper: float = math.inf, tries: int = PATH_TRIES, grid: int = GRID):
    """Candidate plans of a window: its loop-feasible least paths (rounded as
    :func:`excess_prune` rounds them), decoded.

    The least fill and drain path first, then, while the objective counts the
    synchronisation, the least one among the columns whose ``R`` is below the last
    path's ``max R`` (at most ``tries`` in all). Stops once a path's fill plus ``(M - 1)
    lo`` reaches ``upper`` (a tighter cap only adds fill). Each plan is yielded right
    after :meth:`~chainpipe.formulations.ilp_flow.FlowFormulation.decode`, with
    ``form.values`` its columns (``chosen_sync`` reads them). A candidate only (module
    docstring): the caller evaluates it. Nothing when :func:`applies` is false.
    """
    if not applies(form):
        return
    lo, hi = form.period
    ex = _Excess(form, hi, grid)
    steady = float(steady_state(form.tables.M, 1)) * max(lo, form.floor_B)
    cap, nx = math.inf, len(form.col_arc)
    for _ in range(tries):
        form.check()
        cols, fill = ex.least_path(ex.fill, ex.sync <= cap * (1 + 1e-12))
        if cols is None or fill + steady >= upper * (1 + UB_RTOL):
            return
        values = np.zeros(nx)
        values[[c for c in cols if c < nx]] = 1.0
        form.values = values
        yield form.decode()
        r = float(ex.sync[cols].max())
        lower = ex.sync[ex.ok & (ex.sync < r * (1 - 1e-9))]
        if not form.count_sync or not len(lower):
            return
        cap = float(lower.max())
