"""A DC agent's own label DP (never sent): suffix plans that begin in this DC.

State ``(x, u)``: the suffix ``[x, L)`` is covered and ``u`` counts the devices
of each of this DC's groups in use (``d * t`` per stage). A *label* at a state
is one partial plan's ``(bottleneck, total, r, sync)``: ``r`` counts its stages,
capped at the position cap, and ``sync`` is the largest gradient
synchronisation ``R`` of its stages (0 without data parallelism). Prepending
stage ``[a, x)`` on group ``g`` with the pair ``(d, t)`` needs ``d * t`` free
devices of ``g`` and memory for the in-flight count of its position
(:func:`chainpipe.cost.in_flight`); it costs ``C`` and ``R`` of that option
(:meth:`chainpipe.tables.CostTables.options`) and, if a stage of this DC
follows, the internal boundary's occupancy ``U`` and traversal ``Q`` on the
DC's own link (:func:`chainpipe.cost.occupancy`, :func:`chainpipe.cost.traversal`).
*Base labels* (``u = 0``) are the downstream DCs' suffix plans, their
inter-DC boundary already folded in; a base label is never extended by an
internal boundary.

This is the label loop of :mod:`chainpipe.solvers.dp` restricted to one DC and
seeded with base labels; it shares its Pareto filters (:mod:`..labels`),
the shifted dominance of ``T`` included under data or tensor parallelism. A
label is dropped when its own cost, plus an optional optimistic cost of the
prefix ``[0, a)`` (only DC 1 has one: the prefix must then run on its own
devices), cannot beat the upper bound ``ub``.
"""

from __future__ import annotations

import bisect
import math

import numpy as np

from ... import cost
from ...deadline import Deadline
from ...tables import dominated_options
from ..labels import (
    BOUND_SLACK,
    across_usage,
    killers,
    pareto3,
    pareto4,
    shifted_pareto,
)

#: where a label's plan continues, ``(kind, i, j)``: ``OWN``: own label ``i``; ``IN``:
#: point ``j`` of incoming entry ``i``; ``END``: the model ends after the label's stage
OWN, IN, END = 0, 1, 2


class DCRun:
    """One run of a DC's DP for a given upper bound: what both engines share.

    Parameters
    ----------
    tables : CostTables
        The tables of the DC's own one-DC instance (its groups and its link only).
    position_cap : int
        ``R``: stage counts are capped there.
    deadline : Deadline, optional
        Checked once per layer; :class:`~chainpipe.deadline.TimeUp` when it passes.

    After :meth:`run`: :attr:`points` (``x -> [(r, bottleneck, total, sync, label
    index)]``, own labels whose first stage starts at ``x``; ``x = 0``: complete plans),
    :meth:`label` to walk a plan back, :attr:`bound_cut` (whether the bound cut a
    stage or a label; if not, the run was exhaustive) and :attr:`stats`.
    """

    def __init__(self, tables, *, position_cap: int, deadline: Deadline | None = None):
        self.t = tables
        self.L, self.M, self.R = tables.L, tables.M, position_cap
        self.deadline = deadline if deadline is not None else Deadline(None)
        #: whether labels carry a synchronisation term (data or tensor parallelism)
        self.sync = not tables.single_device
        # the boundary between two of this DC's own stages crosses its own link
        self.u_int = tables.boundary_occupancy[:, 0, 0]
        self.q_int = tables.boundary_traversal[:, 0, 0]
        self.stats = {"labels": 0}
        self.bound_cut = False
        self.points: dict[int, list[tuple[int, float, float, float, int]]] = {}

    def option_fits(self, g: int, ub: float) -> np.ndarray:
        """``[c, a, x]``: stage ``[a, x)`` on ``g`` with pair ``c`` fits memory as the last
        stage (the least any stage stashes) and has ``M * C + R <= ub`` (``T >= sum C +
        (M - 1) max C + max R``). Both only fail more as the stage grows; sets
        :attr:`bound_cut` if the bound cut one."""
        opts = self.t.options(g)
        ok = opts.max_in_flight >= self.t.in_flight(1)
        if ub < math.inf:
            with np.errstate(invalid="ignore"):  # inf * 0 where M = 1 and j <= i: not a stage
                T = cost.iteration_time(opts.compute_time, opts.compute_time, self.M,
                                        opts.sync_time)
            fast = T <= ub * (1 + 1e-9)
            self.bound_cut |= bool((ok & ~fast).any())
            ok &= fast
        return ok

    def stage_fits(self, ub: float) -> np.ndarray:
        """``[g, a, x]``: stage ``[a, x)`` fits on ``g`` with some pair (:meth:`option_fits`)."""
        return np.stack([self.option_fits(g, ub).any(axis=0) for g in range(self.t.G)])


class LocalDP(DCRun):
    """The label loop, one label at a time (the DCs of ``medium/``, DC 1 always, and
    every DC under data or tensor parallelism)."""

    def _candidates(self, ub: float, grid=None) -> list[list[list[tuple]]]:
        """``[g][x]``: per pair ``c`` of group ``g`` not dominated by another,
        ``(devices, c, stages)`` with ``stages`` the ``(a, C, max in flight, R)`` of
        ``[a, x)``, ``a`` descending, while :meth:`option_fits` holds (a run of starts;
        options another pair of the same range dominates are left out of it). With
        ``grid`` (a set of layer boundaries), only stages that start and end on it.

        The runs without a bound are built once per tables and grid
        (:meth:`_unbounded`, kept on the tables, which the agent keeps across runs) and
        cut here at the first start whose stage alone, or a shorter one's, exceeds
        ``ub``: exactly the runs :meth:`option_fits` gives under ``ub`` (a pair dominated
        among the options within ``ub`` is dominated among all, and its dominator has
        no larger ``M C + R``, so it is within ``ub`` too), and :attr:`bound_cut` as
        :meth:`option_fits` sets it."""
        full, worst = self._unbounded(grid)
        if ub == math.inf:
            return [[[(w, c, lst) for w, c, lst, _ in per] for per in per_end]
                    for per_end in full]
        limit = ub * (1 + 1e-9)
        self.bound_cut |= any(t > limit for t in worst)
        out = []
        for per_end in full:
            rows = []
            for per in per_end:
                row = []
                for w, c, lst, tops in per:
                    k = bisect.bisect_right(tops, limit)
                    if k:
                        row.append((w, c, lst if k == len(lst) else lst[:k]))
                rows.append(row)
            out.append(rows)
        return out

    def _unbounded(self, grid) -> tuple[list, list[float]]:
        """The candidate runs without a bound (:meth:`_direct_candidates`), each with, per
        stage, the largest ``M C + R`` of a stage alone from ``x - 1`` down to its start
        (skipped starts included), and per group the largest ``M C + R`` of an option that
        fits memory: built once per tables and grid. (Not shared across ``M``: the
        in-flight limits are capped at ``M``, and with them which pairs dominate.)"""
        cache = self.t.__dict__.setdefault("_cdynp_candidates", {})
        key = None if grid is None else frozenset(grid)
        got = cache.get(key)
        if got is None:
            got = cache[key] = self._direct_candidates(math.inf, grid, tops=True)
        return got

    def _direct_candidates(self, ub: float, grid=None, tops: bool = False):
        """:meth:`_candidates` computed from the options (``tops``: as :meth:`_unbounded`
        keeps them, ``(runs with tops, worst per group)``), per group with arrays
        ``[pair, x, a]``: a run ends after the largest ``a < x`` that fails
        :meth:`option_fits`."""
        L = self.L
        pos = np.arange(L + 1)
        on = np.array([grid is None or x in grid for x in range(L + 1)])
        before = pos[None, None, :] < pos[None, :, None]  # [., x, a]: a < x
        out, worst = [], []
        for g in range(self.t.G):
            self.deadline.check()
            opts = self.t.options(g)
            ok = self.option_fits(g, ub)
            with np.errstate(invalid="ignore"):  # inf * 0 where M = 1: not a stage
                alone = cost.iteration_time(opts.compute_time, opts.compute_time, self.M,
                                            opts.sync_time)
            alone = np.where(np.isnan(alone), math.inf, alone)
            worst.append(float(alone[ok].max()) if ok.any() else -math.inf)
            dominated = dominated_options(ok, opts.compute_time, opts.max_in_flight,
                                          opts.sync_time, opts.width, self.deadline.check)
            okT = ok.transpose(0, 2, 1)
            stop = np.where(~okT & before, pos, -1).max(axis=2)  # [c, x]: the break
            keep = (before & (pos[None, None, :] > stop[:, :, None]) & on[None, :, None]
                    & on[None, None, :] & ~dominated.transpose(0, 2, 1))
            # a descending within (c, x): the a axis flipped
            ci, xi, ri = np.nonzero(keep[:, :, ::-1])
            ai = L - ri
            stages = list(zip(ai.tolist(), opts.compute_time[ci, ai, xi].tolist(),
                              opts.max_in_flight[ci, ai, xi].tolist(),
                              opts.sync_time[ci, ai, xi].tolist()))
            if tops:  # the largest M C + R from x - 1 down to a, skipped starts included
                high = np.where(before, alone.transpose(0, 2, 1), -math.inf)
                top = np.maximum.accumulate(high[:, :, ::-1], axis=2)[ci, xi, ri].tolist()
            per_end: list = [[] for _ in range(L + 1)]
            widths = opts.width.tolist()
            key = ci * (L + 1) + xi
            cuts = [0, *(np.flatnonzero(np.diff(key)) + 1).tolist(), len(key)]
            for s, e in zip(cuts[:-1], cuts[1:]):
                if e > s:
                    c, x = int(ci[s]), int(xi[s])
                    per_end[x].append((widths[c], c, stages[s:e], top[s:e]) if tops
                                      else (widths[c], c, stages[s:e]))
            out.append(per_end)
        return (out, worst) if tops else out

    def label(self, i: int) -> tuple[int, int, int, tuple]:
        """Own label ``i`` (an index in :attr:`points`): ``(start, group, pair, ref)``, its
        first stage ``[start, end)`` on ``group`` with that pair of
        :meth:`~chainpipe.tables.CostTables.options`, and ``ref`` where the plan
        continues: own label ``(OWN, j, 0)`` (``end`` is its start), incoming entry and
        point ``(IN, e, p)`` or ``(END, 0, 0)`` (``end = L``)."""
        return self._store[i]

    def run(self, base: dict[int, list[tuple]], ub: float, prefix=None, beam: int = 0,
            grid=None, spread=None) -> None:
        """``base[x]``: base labels ``(bottleneck, total, r, sync, (IN | END, e, p))``
        joining at ``x``.

        ``prefix``: ``(pre_sum, pre_max)`` lists, an optimistic cost of the prefix
        ``[0, a)`` (sum and bottleneck terms), or ``None``. ``spread``: ``(flop, A, caps)``
        or ``None``, which lifts the prefix's bottleneck term of a new label at state
        ``(a, u)`` to ``flop[a] / (A + free)``: ``flop[a]`` is the FLOP of ``[0, a)``,
        ``A`` bounds the FLOP/s of the devices upstream, and ``free`` those of this DC's
        devices the label leaves free, ``caps[g] = (rate, count, most)`` giving
        ``rate * min(count - u[g], most)`` per group (the prefix's stages run on no other
        devices, and its slowest takes at least its FLOP over theirs). ``beam`` (0: exact) keeps
        only that many labels per state, those with the least ``T`` estimate, and ``grid``
        (a set of layer boundaries, ``None``: all) restricts stages to start and end on
        it: both make a fast probe, inexact, whose complete plans give an upper bound.

        Walks the layers from the end: at each ``x`` the labels of ``[x, L)`` are
        filtered (:meth:`_filter`), numbered (:meth:`_finalise`) and extended by one
        stage ending at ``x`` (:meth:`_extend`).
        """
        L, G = self.L, self.t.G
        self._cands = self._candidates(ub, grid)
        self._limit = ub * (1 + 1e-12) if ub < math.inf else math.inf
        self._beam = int(beam)
        self._prefix = prefix if prefix is not None else ([0.0] * (L + 1), [0.0] * (L + 1))
        self._spread = spread
        self._zero = (0,) * G
        self._count = [int(min(c, L * self.t.widest)) for c in self.t.count]
        # in-flight count of a new stage placed before r stages
        self._need_at = [self.t.in_flight(r + 1) for r in range(self.R + 1)]
        self._store: list[tuple[int, int, int, tuple]] = []  # (start, group, pair, parent)
        states: list[dict] = [dict() for _ in range(L + 1)]
        # per layer and state: per bottleneck, (sum, stages, sync) of the labels so far
        self._fronts: list = [dict() for _ in range(L + 1)]
        for x, labels in base.items():
            states[x][(0, self._zero)] = list(labels)
        self.points = {}
        labels_total = 0
        for x in range(L, -1, -1):
            self.deadline.check()
            layer = states[x]
            if not layer:
                continue
            labels_total += self._filter(layer)
            refs = self._finalise(x, layer)
            if x > 0:
                self._extend(x, layer, refs, states)
            states[x] = self._fronts[x] = None  # finalised labels live on in the store only
        self.stats["labels"] = labels_total

    def _filter(self, layer: dict) -> int:
        """Keep each state's Pareto labels (shifted dominance under parallelism), and drop
        labels dominated across usage states. Returns how many labels are left."""
        for key in list(layer):
            if self.sync:
                labels = shifted_pareto(pareto4(layer[key]), self.M)
            else:
                labels = pareto3(layer[key], self.R)
            if self._beam and len(labels) > self._beam:
                labels = sorted(labels, key=lambda lab: cost.iteration_time(
                    lab[1], lab[0], self.M, lab[3]))[:self._beam]
                labels.sort(key=lambda lab: lab[:4])  # by bottleneck again, for killers
            layer[key] = labels
        if len(layer) > 1:
            across_usage(layer, sync=self.sync)
        return sum(len(v) for v in layer.values())

    def _finalise(self, x: int, layer: dict) -> dict:
        """Give own labels store indices and list them in :attr:`points`; returns, per
        state, each label's reference as its parents will hold it."""
        store, zero = self._store, self._zero
        refs: dict[tuple, list] = {}
        own = []
        for key, labels in layer.items():
            if key[1] == zero:
                refs[key] = [lab[4] for lab in labels]  # base labels: their own reference
                continue
            lst = []
            for bn, sm, r, s, (parent, g, c) in labels:
                i = len(store)
                store.append((x, g, c, parent))
                own.append((r, bn, sm, s, i))
                lst.append((OWN, i, 0))
            refs[key] = lst
        if own:
            self.points[x] = own
        return refs

    def _extend(self, x: int, layer: dict, refs: dict, states: list) -> None:
        """Prepend every candidate stage ``[a, x)`` to the labels of ``layer`` (labels at
        ``x``), adding the new labels to ``states[a]``.

        The bound is tested without assembling ``T`` per label and stage: with ``bU`` the
        label's bottleneck lifted to the boundary's occupancy, ``h`` the larger of the
        stage's ``C`` and the prefix's bottleneck, ``T`` is the label's sum plus a term of
        the stage alone (``bU <= h``) or the label's sum and bottleneck plus the stage's
        and prefix's sums (``bU > h``); the same without the prefix for the test that
        stops the run of stages. The limits are widened a hair, so that rounding never
        cuts what assembling ``T`` would keep. An image that an earlier one of its bucket
        with the same bottleneck dominates is left out (the Pareto filter would drop it).
        """
        M, t = self.M, self.t
        count = self._count
        iteration_time = cost.iteration_time
        zero, cands = self._zero, self._cands
        limit = self._limit + self._limit * BOUND_SLACK
        u_x, q_x = float(self.u_int[x]), float(self.q_int[x])
        spread = self._spread
        if spread is not None:
            _, s_up, s_caps = spread
        terms: dict = {}  # per candidate run (and FLOP/s with spread): _run_terms
        for key, labels in layer.items():
            u = key[1]
            if spread is not None:  # FLOP/s of the devices upstream and of own free ones
                own_free = [r_ * min(n_ - ug, m_) for (r_, n_, m_), ug in zip(s_caps, u)]
                s_free = s_up + sum(own_free)
            internal = u != zero
            U = u_x if internal else 0.0
            Q = q_x if internal else 0.0
            rl = refs[key]
            # a stage whose max(C, U) reaches the bottleneck of a label's killer lifts both
            # to one bottleneck, and the killer's image then dominates (labels.killers)
            n_labels = len(labels)
            flat = [labels[k][0] if k < n_labels else math.inf for k in killers(labels)]
            lifted = []  # per label: (sum + Q, bU, T-term of sum + Q and bU)
            for bn, sm, _r, _s, _ in labels:
                bu = bn if bn >= U else U
                lifted.append((sm + Q, bu, iteration_time(sm + Q, bu, M)))
            for g in range(t.G):
                free = count[g] - u[g]
                for w, c, stages in cands[g][x]:
                    if w > free:
                        continue
                    if spread is None:
                        rkey, avail = (g, c), 0.0
                    else:  # the new label's own stages take w more devices of g
                        r_, n_, m_ = s_caps[g]
                        avail = s_free - own_free[g] + r_ * min(n_ - u[g] - w, m_)
                        rkey = (g, c, avail)
                    run = terms.get(rkey)
                    if run is None:
                        run = terms[rkey] = self._run_terms(stages, avail)
                    nkey = (0, u[:g] + (u[g] + w,) + u[g + 1:])
                    self._prepend_run(labels, (rl, flat, lifted), run, (g, c, nkey, U, Q, limit),
                                      states)

    def _run_terms(self, stages: list, avail: float) -> list:
        """Per stage ``(a, C, max in flight, R)`` of a candidate run: ``(a, C, max in flight,
        R, h, T-term with h, C + prefix sum, M C as T-term alone)``, with ``h`` the larger
        of ``C`` and the prefix's bottleneck (raised, with spread, by the prefix's FLOP on
        the ``avail`` FLOP/s it may use)."""
        M, iteration_time = self.M, cost.iteration_time
        pre_sum, pre_max = self._prefix
        s_flop = None if self._spread is None else self._spread[0]
        run = []
        for a, ca, n, ra in stages:
            pm = pre_max[a]
            if s_flop is not None and s_flop[a] > 0:
                f = s_flop[a] / avail if avail > 0 else math.inf
                pm = f if f > pm else pm
            h = ca if ca >= pm else pm
            run.append((a, ca, n, ra, h, iteration_time(ca + pre_sum[a], h, M),
                        ca + pre_sum[a], iteration_time(ca, ca, M)))
        return run

    def _prepend_run(self, labels: list, per_label: tuple, run: list, move: tuple,
                     states: list) -> None:
        """Prepend the stages of one candidate ``run`` to every label of a state (the loop
        of :meth:`_extend`; ``per_label``: parent refs, killers' bottlenecks and lifted
        terms; ``move``: group, pair, next state, boundary occupancy and traversal, bound)."""
        rl, flat, lifted = per_label
        g, c, nkey, U, Q, limit = move
        need_at, R, fronts = self._need_at, self.R, self._fronts
        buckets: dict[int, tuple] = {}
        for i, (_bn, sm, r, s, _) in enumerate(labels):
            need = need_at[r]
            nr = r + 1 if r < R else R
            ref = (rl[i], g, c)  # (parent ref, group, pair) until finalised
            fi = flat[i]
            if U >= fi:
                continue  # every image is dominated by its killer's
            smq, bu, lt = lifted[i]
            # along the stages C and R grow and memory shrinks: stop at the
            # first that fails either, or whose C flattens this label
            for a, ca, n, ra, h, th, cpre, tc in run:
                if need > n or ca >= fi:
                    break
                ns = s if s >= ra else ra
                # over the bound with the prefix: skip (the prefix cost is not
                # monotone in a), and stop if over it without (later stages
                # cost more)
                if (smq + th if bu <= h else lt + cpre) + ns > limit:
                    self.bound_cut = True
                    if (lt + ca if ca <= bu else smq + tc) + ns > limit:
                        break
                    continue
                nbn = bu if bu >= ca else ca
                nsm = sm + ca + Q
                got = buckets.get(a)
                if got is None:
                    bucket = states[a].get(nkey)
                    if bucket is None:
                        bucket = states[a][nkey] = []
                        front = fronts[a][nkey] = {}
                    else:
                        front = fronts[a][nkey]
                    buckets[a] = (bucket, front)
                else:
                    bucket, front = got
                same = front.get(nbn)
                if same is None:
                    front[nbn] = [(nsm, nr, ns)]
                else:
                    for s_, r_, y_ in same:
                        if s_ <= nsm and r_ <= nr and y_ <= ns:
                            break
                    else:
                        same.append((nsm, nr, ns))
                        bucket.append((nbn, nsm, nr, ns, ref))
                    continue
                bucket.append((nbn, nsm, nr, ns, ref))
