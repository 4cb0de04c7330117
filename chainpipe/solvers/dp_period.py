"""The exact chain DP of one pipeline under contract version 3 (``docs/dp.md``, "Version 3").

One search places the whole model as one pipeline of ``M_p`` microbatches, walking the
layers backwards like :mod:`chainpipe.solvers.dp` over states ``(b, k, u)``, with the
period of the instance's objective kept **exactly** in the labels:

- ``classic``: ``x1 = max(C, U)``;
- GPipe ``period``: ``x1 = max(f, U)`` and ``x2 = max(b, U)``, the two phases apart;
- 1F1B ``period``: ``x1`` is the period of the suffix placed so far (its slowest resource
  and its loops), and the label carries the concave majorant ``hull`` of the window sums
  ``W(s, s + j - 1)``, ``j = 1..p``, from its first stage ``s``: a stage prepended at a
  position below ``M_p`` closes its loops ``(C + Q + W_j) / (j + 1)``, a slope from a point
  left of every window, which only the majorant decides.

A label is ``(x1, x2, sum of C + Q, max R, p, hull, parent)``; the pipeline's time is
``T_p = sum + (M_p - 1) (x1 + x2)``. Under 1F1B ``p`` (stages placed) is kept exactly up
to ``M_p - 1``, past which no later stage has a loop or a position-dependent stash.

A search returns, per first DC of the pipeline, the complete plans not dominated in
``(T_p, max R)`` (all with ``T_p + max R`` below its bound), or with ``tighten`` only the
best ``T_p + max R``; :mod:`chainpipe.solvers.dp_pipelines` combines them.
"""

from __future__ import annotations

import numpy as np

from .. import cost
from ..deadline import Deadline
from ..tables import CostTables, dominated_options

#: relative slack of every bound test: rounding may keep a label, never cut one
SLACK = 1e-9


def phase_options(tables: CostTables, g: int) -> tuple[np.ndarray, np.ndarray]:
    """``(f, b)`` arrays ``[pair, i, j]`` of group ``g``'s options (GPipe's two phases),
    from :func:`chainpipe.cost.phase_time`; computed once per distinct group."""
    cache = tables.__dict__.setdefault("_phase_options", {})
    opts = tables.options(g)
    if id(opts) not in cache:
        grp, sums = tables.groups[g], tables.sums
        shape = (len(opts.d), 1, 1)
        dd, tt = opts.d.reshape(shape), opts.t.reshape(shape)
        tp = sums.range_sums(sums.tp_bytes)[None]
        out = []
        for prefix in (sums.fwd_flop, sums.bwd_flop):
            x = cost.phase_time(sums.range_sums(prefix)[None], grp.flop_per_s, dd, tt, tp,
                                grp.node_bandwidth)
            out.append(np.where(np.isfinite(opts.compute_time), x, np.inf))
        cache[id(opts)] = (out[0], out[1], opts)  # opts kept alive: its id stays unique
    f, b, _ = cache[id(opts)]
    return f, b


def hull_prepend(hull: tuple, c: float, q: float) -> tuple:
    """The concave majorant of the window sums once a stage of time ``c`` and boundary
    traversal ``q`` is prepended: points ``(1, c)`` and ``(j + 1, c + q + hull_j)``.

    ``hull`` is concave, so only the tangent from the new first point changes it: the
    majorant follows the chord to the point of largest slope from ``(1, c)``, then the
    shifted old majorant."""
    ys = [c] + [c + q + h for h in hull]
    best, j_star = -np.inf, 0
    for j in range(1, len(ys)):
        slope = (ys[j] - c) / j
        if slope >= best:
            best, j_star = slope, j
    if j_star == 0:
        return (c,)
    return tuple(c + i * best for i in range(j_star)) + tuple(ys[j_star:])


def new_loops(hull: tuple, c: float, q: float) -> float:
    """The slowest loop a stage of time ``c`` and traversal ``q`` closes over the suffix
    whose window sums have majorant ``hull``: ``max_j (c + q + hull_j) / (j + 1)``."""
    return max(((c + q + h) / (j + 2) for j, h in enumerate(hull)), default=0.0)


def dominates(a: tuple, b: tuple, p_equal: bool) -> bool:
    """Whether label ``a`` is no worse than ``b`` for every completion (``docs/dp.md``)."""
    if a[0] > b[0] or a[1] > b[1] or a[2] > b[2] or a[3] > b[3]:
        return False
    if (a[4] != b[4]) if p_equal else (a[4] > b[4]):
        return False
    return all(x <= y for x, y in zip(a[5], b[5]))


def pareto(labels: list, p_equal: bool) -> list:
    """The labels no other one dominates (ties: the first in sorted order stays)."""
    labels.sort(key=lambda x: (x[0] + x[1], x[2], x[3], x[0], x[4]))
    kept: list = []
    for lab in labels:
        if not any(dominates(k, lab, p_equal) for k in reversed(kept)):
            kept.append(lab)
    return kept


class PipelineSearch:
    """One bounded search of one pipeline with ``microbatches`` microbatches.

    Parameters
    ----------
    tables : CostTables
    microbatches : int
        ``M_p``.
    last_dc : int or None
        The DC of the pipeline's last stage (``None``: any).
    upper : float
        Only plans with ``T_p + max R < upper`` are searched (``inf``: all).
    deadline : Deadline
    tighten : bool
        Keep only the best ``T_p + max R`` (the bound drops to each plan found) instead of
        every complete plan not dominated in ``(T_p, max R)``.
    """

    def __init__(self, tables: CostTables, microbatches: int, last_dc: int | None,
                 upper: float, deadline: Deadline, tighten: bool):
        self.t, self.m, self.last_dc = tables, microbatches, last_dc
        self.upper, self.deadline, self.tighten = upper, deadline, tighten
        training = tables.instance.training
        self.gpipe_period = training.objective == "period" and tables.schedule == "gpipe"
        self.loops = training.objective == "period" and tables.schedule == "1f1b"
        self.p_cap = 0 if tables.schedule == "gpipe" else max(0, min(microbatches - 1, tables.L))
        self.stats = {"labels": 0, "states": 0}

    def run(self) -> dict[int, list]:
        """Per first DC, the complete plans kept: ``(T_p, max R, parent)``."""
        self._bounds()
        self.cands = [self._candidates(g) for g in range(self.t.G)]
        return self._loop()

    def _bounds(self) -> None:
        """The period cap of any plan below the bound and the prefix bounds per DC."""
        t, m = self.t, self.m
        total = float(t.flop_prefix[-1])
        sum_lb = cost.compute_time(total, t.rate.max(), t.widest)
        finite = np.isfinite(self.upper)
        self.cap = (self.upper - sum_lb) / (m - 1) if finite and m > 1 else np.inf
        self.sync_cap = self.upper - sum_lb if finite else np.inf
        flop = t.flop_prefix
        largest = np.concatenate(([0.0], np.maximum.accumulate(np.diff(flop))))
        rates = [float(t.rate[t.group_dc <= k].max()) for k in range(t.K)]
        self.pre_sum = [cost.compute_time(flop, r, t.widest).tolist() for r in rates]
        self.pre_max = [cost.compute_time(largest, r, t.widest).tolist() for r in rates]
        self.groups_of = [np.flatnonzero(t.group_dc == k).tolist() for k in range(t.K)]
        self.local = [t.groups[g].index for g in range(t.G)]

    def _candidates(self, g: int) -> list:
        """Per end ``b``: rows ``(a, C, f, b, n, w, R, pair)`` of the options of group ``g``
        on ``[a, b)`` that fit at the last position, within the caps, not dominated."""
        t, m = self.t, self.m
        opts = t.options(g)
        per_end: list = [[] for _ in range(t.L + 1)]
        if not len(opts.d):
            return per_end
        C, N, R, W = opts.compute_time, opts.max_in_flight, opts.sync_time, opts.width
        F, B = phase_options(t, g) if self.gpipe_period else (C, C)
        need = m if t.schedule == "gpipe" else 1
        lim = self.cap * (1 + SLACK)
        ok = np.isfinite(C) & (N >= need) & (C <= lim) & (R <= self.sync_cap * (1 + SLACK))
        if not self.gpipe_period:  # same C, no more devices, ... (GPipe's f, b may differ)
            ok &= ~dominated_options(ok, C, N, R, W, self.deadline.check)
        cs, starts, ends = np.nonzero(ok)
        for c, a, b in zip(cs.tolist(), starts.tolist(), ends.tolist()):
            per_end[b].append((a, float(C[c, a, b]), float(F[c, a, b]), float(B[c, a, b]),
                               int(N[c, a, b]), int(W[c]), float(R[c, a, b]), c))
        return per_end

    def _moves(self, b: int, key: tuple):
        """``(g, k0, local index, usage before, U, Q)`` for the stage before state ``key``."""
        t = self.t
        k, u = key
        first = k == t.K
        dcs = ([self.last_dc] if self.last_dc is not None else range(t.K)) if first \
            else range(k + 1)
        for k0 in dcs:
            if first:
                U = Q = 0.0
            else:
                U = float(t.occupancy(b, k0, k))
                if U > self.cap * (1 + SLACK):
                    continue
                Q = float(t.traversal(b, k0, k))
            base = u if (not first and k0 == k) else (0,) * len(self.groups_of[k0])
            for g in self.groups_of[k0]:
                gl = self.local[g]
                if base[gl] < int(t.count[g]):
                    yield g, k0, gl, base, U, Q

    def _extend(self, lab: tuple, row: tuple, U: float, Q: float) -> tuple | None:
        """The label of ``lab``'s suffix with the stage ``row`` prepended (without its
        parent), or ``None`` when the stage breaks memory at its position."""
        x1, x2, sm, r, p, hull, _ = lab
        _a, c, f, bk, n, _w, rr, _ci = row
        m, p_cap = self.m, self.p_cap
        position = p + 1  # exact while p < p_cap; beyond, at least m
        if cost.in_flight(self.t.schedule, m, position if p < p_cap else m) > n:
            return None
        if self.gpipe_period:
            nx1, nx2 = max(x1, f, U), max(x2, bk, U)
        else:
            nx1, nx2 = max(x1, c, U), 0.0
            if self.loops and p < p_cap:  # the new stage sits below M_p: its loops count
                nx1 = max(nx1, new_loops(hull, c, Q))
        np_ = p + 1 if p < p_cap else p_cap
        nhull = hull_prepend(hull, c, Q) if self.loops and np_ < p_cap else ()
        return (nx1, nx2, sm + c + Q, max(r, rr), np_, nhull)

    def time_of(self, lab: tuple) -> float:
        """``T_p`` of a complete label."""
        return lab[2] + cost.steady_state(self.m, lab[0] + lab[1])

    def _loop(self) -> dict[int, list]:
        """Walk the layers backwards; return the complete plans kept per first DC."""
        t = self.t
        L = t.L
        p_equal = self.loops
        states: list[dict] = [dict() for _ in range(L + 1)]
        states[L][(t.K, ())] = [(0.0, 0.0, 0.0, 0.0, 0, (), None)]
        self.states = states
        done: dict[int, list] = {}
        for b in range(L, 0, -1):
            layer = states[b]
            for key in list(layer):
                layer[key] = pareto(layer[key], p_equal)
            self.stats["states"] += len(layer)
            self.stats["labels"] += sum(len(v) for v in layer.values())
            for key, labels in layer.items():
                self.deadline.check()
                for g, k0, gl, base, U, Q in self._moves(b, key):
                    self._expand(b, key, labels, g, k0, gl, base, U, Q, done)
        return {k: v for k, v in done.items() if v}

    def _expand(self, b, key, labels, g, k0, gl, base, U, Q, done) -> None:
        """Prepend every candidate stage ``[a, b)`` of group ``g`` to the labels of a state."""
        free = int(self.t.count[g]) - base[gl]
        pre_sum, pre_max = self.pre_sum[k0], self.pre_max[k0]
        for row in self.cands[g][b]:
            a, w = row[0], row[5]
            if w > free:
                continue
            nkey = (k0, base[:gl] + (base[gl] + w,) + base[gl + 1:])
            for idx, lab in enumerate(labels):
                new = self._extend(lab, row, U, Q)
                if new is None:
                    continue
                period = max(new[0] + new[1], pre_max[a])
                bound = new[2] + pre_sum[a] + cost.steady_state(self.m, period) + new[3]
                if bound >= self.upper * (1 + SLACK):
                    continue
                parent = (b, key, idx, a, g, row[7])
                if a == 0:
                    self._complete(done, k0, new, parent)
                else:
                    self.states[a].setdefault(nkey, []).append(new + (parent,))

    def _complete(self, done: dict, k0: int, new: tuple, parent: tuple) -> None:
        """Keep a complete plan (first DC ``k0``) if no kept one is as good in both terms."""
        T = self.time_of(new)
        value = T + new[3]
        if value >= self.upper:
            return
        kept = done.setdefault(k0, [])
        if any(x[0] <= T and x[1] <= new[3] for x in kept):
            return
        kept[:] = [x for x in kept if not (T <= x[0] and new[3] <= x[1])] + [(T, new[3], parent)]
        if self.tighten:
            self.upper = value

    def backtrack(self, parent) -> list[tuple[int, int, int, int, int, int]]:
        """The stages ``(start, end, dc, group in dc, d, t)`` of the plan ending at ``parent``."""
        stages = []
        while parent is not None:
            b, key, idx, a, g, ci = parent
            opts = self.t.options(g)
            stages.append((a, b, int(self.t.group_dc[g]), self.local[g], int(opts.d[ci]),
                           int(opts.t[ci])))
            parent = self.states[b][key][idx][6]
        return stages
