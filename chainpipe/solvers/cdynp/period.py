"""A DC agent's own label DP under the ``period`` objective (contract v3, section 4.3).

The same states as :mod:`.local` (``(x, u)``: suffix ``[x, L)`` covered, ``u`` own
devices in use per group), with the labels of ``dp``'s version-3 search
(:mod:`chainpipe.solvers.dp_period`, ``docs/dp.md``, "Version 3"):

``(x1, x2, total, sync, p, hull, ref)``:

- GPipe: ``x1 = max(max f_s, max U_s)`` and ``x2 = max(max b_s, max U_s)`` over the
  suffix, the two phases apart; ``p`` is 0 (no stash depends on a position);
- 1F1B: ``x1`` is the period of the suffix (its slowest ``C`` or ``U`` and every loop
  that closes inside it), ``x2 = 0``, ``p`` the stages placed (kept exactly up to
  ``M - 1``, past which no stage has a loop or a position-dependent stash), and ``hull``
  the concave majorant of the window sums ``W_j`` (the first ``j`` stages' ``C`` and the
  ``Q`` between them) from the suffix's first stage, dropped once ``p >= M - 1``.

A stage prepended at position ``p + 1 < M`` closes the loops ``(C + Q + W_j) / (j + 1)``
over the suffix: :func:`~chainpipe.solvers.dp_period.new_loops` reads them off the
majorant exactly, and :func:`~chainpipe.solvers.dp_period.hull_prepend` gives the new
majorant (both ``dp``'s own functions). So a loop that starts in an upstream DC and ends
in a downstream one is closed by the DC that holds its first stage, from the majorant the
summaries carried up; nothing else of the downstream stages is needed.

Base labels (``u = 0``) are the downstream DCs' points with the inter-DC boundary folded
in: ``total`` and every window grow by the boundary's traversal ``Q`` (the latencies by
the DCs that passed the point on, the occupancy part by this DC), ``x1`` and ``x2`` are
lifted to its occupancy ``U``.

The labels of a state are filtered by ``dp``'s own rule (:func:`~chainpipe.solvers.
dp_period.pareto` and :func:`~chainpipe.solvers.dp_period.across_usage`: the shifted
dominance with the majorants, ``docs/dp.md``, "Dominance"; at layer ``x`` at most ``x``
stages are still to come upstream, wherever they run, so ``p_free = M - x``). The points
of a summary are compared by :func:`dominates` (every component no worse, the majorants
point by point, the same ``p`` under 1F1B: a suffix with fewer stages puts upstream
stages at lower positions, where more loops count). A label whose ``total + (M - 1)(x1 +
x2) + sync``, with the optimistic cost of the prefix before it, exceeds the bound is
dropped.
"""

from __future__ import annotations

import math

import numpy as np

from ... import cost
from ...deadline import Deadline
from ..dp_period import Rule, hull_prepend, new_loops, phase_options, usage_rivals
from .local import END, OWN

#: relative slack of the bound test: rounding may keep a label, never cut one
SLACK = 1e-9

#: under one period (1F1B) the layer's filter uses ``dp``'s shifted rule (``Rule.shift``: a
#: dominator's period measured above the state's floor under the other's completed period,
#: :meth:`PeriodDP._state_floor`), each state's labels sorted by period raised to its floor
#: (not in a frontier run, whose labels stand for several microbatch counts)
SHIFT = True


def period_time(M: int, x1: float, x2: float, total: float, sync: float) -> float:
    """``T`` of a complete plan from a period label: ``total + (M - 1)(x1 + x2) + sync``
    (:func:`chainpipe.cost.iteration_time` with the period ``x1 + x2``)."""
    return float(cost.iteration_time(total, x1 + x2, M, sync))


def prepend(label: tuple, stage: tuple, U: float, Q: float, *, M: int, gpipe: bool,
            p_cap: int) -> tuple:
    """The label of ``stage`` placed before ``label``'s suffix across a boundary of
    occupancy ``U`` and traversal ``Q`` (both 0 before a base label, which holds its own).

    ``label``: ``(x1, x2, total, sync, p, hull)``; ``stage``: ``(C, f, b, R)``. Returns the
    new ``(x1, x2, total, sync, p, hull)``.
    """
    x1, x2, total, sync, p, hull = label
    C, f, b, R = stage
    if gpipe:
        nx1 = max(x1, f, U)
        nx2 = max(x2, b, U)
        np_, nhull = 0, ()
    else:
        nx1 = max(x1, C, U)
        if p < M - 1 and hull:  # the new stage sits below M: its loops count
            nx1 = max(nx1, new_loops(hull, C, Q))
        nx2 = 0.0
        np_ = min(p + 1, p_cap)
        nhull = hull_prepend(hull, C, Q) if np_ < M - 1 else ()
    return nx1, nx2, total + C + Q, max(sync, R), np_, nhull


def dominates(a: tuple, b: tuple, same_p: bool) -> bool:
    """Label ``a`` is at least as good as ``b`` for every completion (the module's rule):
    ``(x1, x2, total, sync, p, hull, ...)`` each no larger, ``p`` equal under 1F1B, and
    ``a``'s majorant nowhere above ``b``'s."""
    if same_p and a[4] != b[4]:
        return False
    if a[0] > b[0] or a[1] > b[1] or a[2] > b[2] or a[3] > b[3]:
        return False
    ha, hb = a[5], b[5]
    if len(ha) != len(hb):
        return False
    return all(x <= y for x, y in zip(ha, hb))


def pareto(labels: list, same_p: bool, prior: tuple | list = ()) -> list:
    """The labels no other one dominates (one of equal labels kept), by ``total``, and none
    of the ``prior`` points (already kept) dominates (compiled:
    :func:`.period_fast.keep_points`)."""
    from .period_fast import keep_points

    labels = sorted(labels, key=lambda lab: (lab[2], lab[0], lab[1], lab[3]))
    if not labels:
        return labels
    rows = list(prior) + labels
    S = np.array([lab[:5] for lab in rows], dtype=float).reshape(-1, 5)
    HL = np.array([len(lab[5]) for lab in rows], dtype=np.int64)
    H = np.full((len(rows), max(1, int(HL.max()))), -np.inf)
    for i, lab in enumerate(rows):
        H[i, :len(lab[5])] = lab[5]
    alive = keep_points(S, H, HL, len(prior), bool(same_p)).tolist()
    return [lab for lab, ok in zip(labels, alive[len(prior):]) if ok]


class PeriodDP:
    """One run of a DC's label DP under ``period`` (module docstring).

    Parameters
    ----------
    tables : CostTables
        The tables of the DC's own one-DC instance.
    position_cap : int
        ``R``: stage counts are capped there (``M - 1`` or ``L`` under 1F1B, 0 under GPipe).
    deadline : Deadline, optional

    After :meth:`run`: :attr:`points` (``x -> [(r, x1, x2, total, sync, hull, index)]``, own
    labels whose first stage starts at ``x``), :meth:`label`, :attr:`bound_cut` and
    :attr:`stats`, as :class:`.local.LocalDP` has them.
    """

    def __init__(self, tables, *, position_cap: int, deadline: Deadline | None = None,
                 frontier: tuple[int, float] | None = None, floors=None, curve=None):
        self.t = tables
        #: :class:`.curve.CurvePass` or ``None``: the paired prefix-curve floor that drops a
        #: label before the layer's filters (never in a frontier run)
        self.curve = curve if frontier is None else None
        #: :class:`.floors.Floors` or ``None``: per own usage, a floor under the period of
        #: the prefix before a label (what the own free devices and the upstream FLOP/s
        #: hold), raising the prefix's slowest stage in the bound test
        self.floors = floors
        self.L, self.M, self.R = tables.L, tables.M, position_cap
        #: a frontier run (:func:`frontier_lines`): ``(m_hi, bound at m_hi)``; the labels
        #: keep ``M``'s positions, stashes and loops, every dominance test weighs the period
        #: ``m_hi - 1`` times (valid for every ``M_p`` in ``[M, m_hi]``) and a label is cut
        #: only when its cost lies above the bound at both ``M`` and ``m_hi``
        self.frontier = frontier
        self.steady = self.M - 1 if frontier is None else int(frontier[0]) - 1
        self.deadline = deadline if deadline is not None else Deadline(None)
        self.gpipe = tables.schedule == "gpipe"
        self.u_int = tables.boundary_occupancy[:, 0, 0]
        self.q_int = tables.boundary_traversal[:, 0, 0]
        self.stats = {"labels": 0}
        self.bound_cut = False
        self.points: dict[int, list] = {}
        self._store: list[tuple] = []

    def label(self, i: int) -> tuple[int, int, int, tuple]:
        """Own label ``i``: ``(start, group, pair, ref)`` as :meth:`.local.LocalDP.label`."""
        return self._store[i]

    def _shared(self, name: str) -> dict:
        """A cache of what depends on the tables alone, kept on them."""
        return self.t.__dict__.setdefault(f"_cdynp_period_{name}", {})

    def _group_stages(self, g: int) -> list[tuple]:
        """Per ``x``, group ``g``'s candidate stages ``[a, x)`` as arrays ``(pairs, widths,
        runs, ptr)``: per pair ``c`` (ascending) a run of rows ``(a, C, f, b, R, max in
        flight)``, ``a`` descending, while it fits memory at all. Along a run the stage
        grows: ``C``, ``f``, ``b`` and ``R`` do not fall and the in-flight limit does not
        rise. A run ends after the largest ``a < x`` whose in-flight limit is below the
        least need (a longer stage holds more: it fits no better). The runs' rows follow
        one another in ``runs``, run ``q`` from ``ptr[q]`` (views of
        :meth:`_stage_table`, :func:`_by_end`)."""
        return _by_end(self._stage_table(g), self.L)

    def _stage_table(self, g: int) -> tuple:
        """Group ``g``'s runs of :meth:`_group_stages` for every end at once, by end and
        pair: ``(ends, pairs, widths, runs, ptr)``, run ``q`` of end ``ends[q]`` the rows
        ``runs[ptr[q]:ptr[q + 1]]``; made once per tables (:meth:`_shared`)."""
        cache = self._shared("table")
        got = cache.get(g)
        if got is not None:
            return got
        self.deadline.check()
        opts = self.t.options(g)
        f, b = phase_options(self.t, g)
        L = self.L
        pos = np.arange(L + 1)
        before = pos[None, None, :] < pos[None, :, None]  # [., x, a]: a < x
        N = opts.max_in_flight.transpose(0, 2, 1)
        stop = np.where((N < self.t.in_flight(1)) & before, pos, -1).max(axis=2)
        keep = before & (pos[None, None, :] > stop[:, :, None])
        # by (x, c), a descending within
        xi, ci, ri = np.nonzero(keep.transpose(1, 0, 2)[:, :, ::-1])
        ai = L - ri
        at = (ci * (L + 1) + ai) * (L + 1) + xi  # [c, a, x] in the options' flat order
        rows = np.column_stack([ai.astype(float), *(np.take(v, at).astype(float) for v in (
            opts.compute_time, f, b, opts.sync_time, opts.max_in_flight))]).reshape(-1, 6)
        first = np.flatnonzero(np.diff(xi * (len(opts.width) + 1) + ci, prepend=-1))
        pairs = ci[first].astype(np.int64)
        got = cache[g] = (xi[first], pairs, np.asarray(opts.width, dtype=np.int64)[pairs],
                          rows, np.append(first, len(xi)).astype(np.int64))
        return got

    def run(self, base: dict[int, list], ub: float, prefix=None) -> None:
        """``base[x]``: base labels ``(x1, x2, total, sync, p, hull, ref)`` joining at ``x``
        (``ref``: ``(IN, e, j)`` or ``(END, 0, 0)``); ``ub``: only labels that could be part
        of a plan with ``T <= ub`` are kept; ``prefix``: ``(pre_sum, pre_max)`` lists, an
        optimistic fill and slowest stage of the prefix ``[0, a)`` before a label whose
        first stage starts at ``a`` (as :class:`.local.LocalDP` takes them; the period is
        at least every stage's ``C``, so ``max(x1 + x2, pre_max)`` bounds it), or ``None``.

        Labels stay arrays from the base to the points (:class:`_Labels`: rows ``x1, x2,
        total, sync, p``, majorants padded with ``-inf``, and per label its stage and
        parent ``g, pair, kind, i, j``); only the labels kept as own points become tuples."""
        L, G = self.L, self.t.G
        limit = ub * (1 + SLACK) if ub < math.inf else math.inf
        if self.frontier is not None:
            hi = self.frontier[1]
            self._hi = (self.frontier[0], hi * (1 + SLACK) if hi < math.inf else math.inf)
        zero = (0,) * G
        self._count = [int(min(c, L * self.t.widest)) for c in self.t.count]
        need = self._shared("need")  # per stage count, the microbatches a stage stashes
        if self.R not in need:
            need[self.R] = np.array([self.t.in_flight(r + 1) for r in range(self.R + 1)],
                                    dtype=float)
        self._need_arr = need[self.R]
        self._no_pre = np.zeros(1)
        self._rows: dict = {}  # _prefix_row by usage code (this run's prefix)
        #: a usage as one integer: sum of u[g] * stride[g] (its images' states, _file)
        self._stride = np.cumprod([1] + [c + 1 for c in self._count[:-1]]).astype(np.int64)
        self._usages: dict = {}
        states: list[dict] = [dict() for _ in range(L + 1)]
        for x, labels in base.items():
            states[x][zero] = [_Labels.of_base(labels)]
        self.points, self._store = {}, []
        total_labels = 0
        for x in range(L, -1, -1):
            self.deadline.check()
            if not states[x]:
                continue
            layer, refs = self._finish_layer(x, states[x], ub, zero, prefix)
            total_labels += sum(len(labels) for labels in layer.values())
            if x == 0:
                break
            self._extend_layer(x, layer, refs, states, limit, zero, prefix)
            states[x] = None
        self.stats["labels"] = total_labels

    def _finish_layer(self, x: int, chunks: dict, ub: float, zero: tuple, prefix) -> tuple:
        """Filter layer ``x``'s labels (``chunks[u]``: per usage, :class:`_Labels` chunks
        in the order filed) with dp's rules (docs/dp.md, "Dominance": at layer x at most x
        stages are still to come upstream, so a label with ``p < M - x`` leaves every one
        below M; each state's floor under its completions' period, :meth:`_state_floor`),
        store the own ones as points, and return the kept labels per usage and per usage
        the references ``(kind, i, j)`` their images will carry."""
        # a frontier run weighs the period for the interval's top and keeps the bound out
        # of the rule (its room is valid at one weight only, docs/privacy.md)
        rule = Rule(p_free=self.M - x, steady=self.steady,
                    upper=ub if self.frontier is None else math.inf,
                    shift=SHIFT and not self.gpipe and self.frontier is None)
        layer = self._filtered(x, chunks, ub, rule, prefix)
        every, keys, at = self._joined  # the kept labels, state after state
        if not len(every):
            return layer, {}
        # a base label (usage 0) goes on where it came from; an own one is stored, its
        # images refer to it (the own labels in the layer's order, numbered from first)
        own = np.ones(len(every), dtype=bool)
        ref = np.zeros((len(every), 3), dtype=np.int64)
        if zero in keys:
            lo, hi = at[keys.index(zero)], at[keys.index(zero) + 1]
            own[lo:hi] = False
            ref[lo:hi] = every.ref[lo:hi, 2:5]
        first, n = len(self._store), int(own.sum())
        ref[own, 0], ref[own, 1] = OWN, np.arange(first, first + n)
        if n:
            mine = every.take(own)
            cols = mine.ref.T.tolist()
            self._store.extend(zip([x] * n, cols[0], cols[1], zip(*cols[2:])))
            S = mine.S
            self.points[x] = list(zip(S[:, 4].astype(np.int64).tolist(), *S[:, :4].T.tolist(),
                                      mine.hull_tuples(), range(first, first + n)))
        refs = {u: ref[at[i]:at[i + 1]] for i, u in enumerate(keys)}
        return layer, refs

    def _filtered(self, x: int, chunks: dict, ub: float, rule: Rule, prefix) -> dict:
        """Per usage (in ``chunks``' order), its labels that the curve's paired floor
        (:func:`.curve.paired`, rows from :meth:`.curve.CurvePass.rows`) and ``dp``'s rule (:func:`_filter_joined`) keep,
        in ``dp``'s order of a state's labels (period, fill, ``R``, ``x1``, ``p``; ties in
        the order filed: :func:`~chainpipe.solvers.dp_period.pareto`'s sort): the layer
        joined once, each usage's rows sorted in that order, filtered, and cut into one
        slice (a view) per usage."""
        from .period_fast import order_layer

        keys = list(chunks)
        every = _Labels.joined([c for u in keys for c in chunks[u]])
        sizes = [sum(len(c) for c in chunks[u]) for u in keys]
        bounds = np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)
        cut = self.curve is not None and x > 0
        if cut:  # the paired floor (:func:`.curve.paired`, rows from :meth:`.curve.CurvePass.rows`) of each state's row
            c = self.curve
            CF, grid, below, M = c.rows(x, keys), c.grid, c.below, c.M
        else:
            CF, grid, below, M = np.zeros((0, 1)), np.zeros(1), np.zeros(1), self.M
        # one sort per state (one of the whole layer by numpy was slower), compiled
        order, counts, dropped = order_layer(
            np.ascontiguousarray(every.S), bounds, CF, cut,
            np.ascontiguousarray(grid, dtype=float), np.ascontiguousarray(below, dtype=float),
            int(M), ub * (1 + 1e-9))
        if dropped:  # a cut by the bound: the DC's trials go on past it
            self.bound_cut = True
        live = [i for i in range(len(keys)) if counts[i]]
        if not live:  # all cut (most layers of a drive that finds nothing): no sorts
            empty = every.rows(0, 0)
            self._joined = (empty, [], np.zeros(1, dtype=np.int64))
            return dict.fromkeys(keys, empty)
        every = every.take(order)
        starts = np.concatenate(([0], np.cumsum(counts[live]))).astype(np.int64)
        floors = np.array([self._state_floor(x, keys[i], prefix) for i in live], dtype=float)
        if rule.shift:  # each state's labels by period raised to its floor, as dp's are
            every = every.take(_by_raised_period(every.S, starts, floors))
        alive = _filter_joined([keys[i] for i in live], every, starts, floors, rule)
        every = every.take(alive)
        at = np.concatenate(([0], np.cumsum(alive))).astype(np.int64)[starts]
        empty = every.rows(0, 0)
        layer = dict.fromkeys(keys, empty)
        for n, i in enumerate(live):
            layer[keys[i]] = every.rows(int(at[n]), int(at[n + 1]))
        #: the layer's labels joined, the usages of their states in order and each one's
        #: first row (:meth:`_extend_layer`)
        self._joined = (every, [keys[i] for i in live], at)
        return layer

    def _state_floor(self, x: int, u: tuple, prefix) -> float:
        """A floor under the period of every completion of a label at layer ``x`` with
        own usage ``u``: the prefix ``[0, x)``'s slowest stage (its optimistic bound, and
        what the devices left free hold, :attr:`floors`), and with the prefix-curve pass
        the largest cap under which the prefix cannot be placed
        (:meth:`.curve.CurvePass.period_floor`); ``-inf`` at ``x = 0`` or with neither."""
        if x == 0:
            return -math.inf
        got = -math.inf
        if prefix is not None:
            got = float(prefix[1][x])
            if self.floors is not None:
                got = max(got, float(self.floors.period(u)[x]))
        if self.curve is not None:
            got = max(got, self.curve.period_floor(x, u))
        return got

    def _extend_layer(self, x, layer, refs, states, limit, zero, prefix) -> None:
        """Prepend every candidate stage ``[a, x)`` to the labels of ``layer``, adding the
        images whose bound stays within ``limit`` to ``states[a]``: one compiled call for
        the layer (:func:`.period_fast.extend_layer`: the loop over states, runs, labels
        and stages), the runs of every group one after another."""
        from .period_fast import extend_layer

        every, keys, at = self._joined
        if not len(every):
            return
        pre_sum, pre_max = (self._no_pre, self._no_pre) if prefix is None else (
            np.asarray(v, dtype=float) for v in prefix)  # arrays: numba reflects no lists
        pairs, widths, runs, ptr, of_g = self._layer_runs(x)
        usage = np.array(keys, dtype=np.int64).reshape(len(keys), self.t.G)
        use = np.ascontiguousarray(  # usage[:, of_g] comes out in Fortran order
            widths[None, :] <= np.asarray(self._count)[of_g][None, :] - usage[:, of_g])
        size = int(np.diff(at) @ (use @ np.diff(ptr)))
        if not size:
            return
        code = usage @ self._stride  # each state's, and per run the image's usage code
        P, prow = self._layer_prefix_rows(
            use, code[:, None] + widths * self._stride[of_g], pre_max)
        hi_m, hi_lim = self._hi if self.frontier is not None else (self.M, math.inf)
        ints = np.array([self.M, self.R, self.gpipe, self.frontier is not None, hi_m,
                         prefix is not None], dtype=np.int64)
        fs = np.array([float(self.u_int[x]), float(self.q_int[x]), limit, hi_lim])
        internal = np.array([u != zero for u in keys], dtype=np.int64)
        H = every.H
        out_S, out_H = np.empty((size, 5)), np.empty((size, H.shape[1] + 1))
        out_HL, src = np.empty(size, dtype=np.int64), np.empty((size, 3), np.int64)
        state = np.empty(size, dtype=np.int64)
        k, cut = extend_layer(every.S, H, every.HL, at, internal, use, runs, ptr, prow, P,
                              self._need_arr, fs, ints, pre_sum, out_S, out_H, out_HL, src,
                              state)
        self.bound_cut |= bool(cut)
        if not k:
            return
        state, q, lab = state[:k], src[:k, 0], src[:k, 1]
        ref = np.concatenate([refs[u] for u, n in zip(keys, np.diff(at).tolist()) if n])
        g = of_g[q]
        self._file(states, (
            out_S[:k], out_HL[:k], out_H[:k],
            np.column_stack([g, pairs[q], np.take(ref, at[state] + lab, axis=0)]),
            runs[:, 0][ptr[q] + src[:k, 2]].astype(np.int64),
            code[state] + widths[q] * self._stride[g]), limit)

    def _layer_prefix_rows(self, use: np.ndarray, image: np.ndarray,
                           pre_max: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The prefix floors of a layer's runs: ``(P, prow)``, run ``q`` before a label of
        state ``s`` (its images of usage code ``image[s, q]``, where ``use[s, q]``) reads
        row ``P[prow[s, q]]``: the prefix's slowest-stage floor by prefix end, raised by
        :attr:`floors` for the images' usage (:meth:`_prefix_row`)."""
        prow = np.zeros(use.shape, dtype=np.int64)
        if len(pre_max) < 2:  # no prefix bound: never read
            return np.zeros((1, 1)), prow
        if self.floors is None:
            return pre_max[None, :], prow
        codes, prow[use] = np.unique(image[use], return_inverse=True)
        return np.array([self._prefix_row(c, pre_max) for c in codes.tolist()]), prow

    def _prefix_row(self, code: int, pre_max: np.ndarray) -> np.ndarray:
        """:meth:`_layer_prefix_rows`' row of usage code ``code``, made once per run."""
        got = self._rows.get(code)
        if got is None:
            got = self._rows[code] = np.maximum(pre_max, self.floors.period(self._usage(code)))
        return got

    def _file(self, states: list, made: tuple, limit: float) -> None:
        """File one layer's images (``made``: rows, majorant lengths, majorants, references
        ``g, pair, kind, i, j``, the new stage's start, the new usage's code, in the order
        made) in ``states[a][u']`` as one :class:`_Labels` chunk per state, ``a`` the new
        stage's start and ``u'`` the usage with its width: within a state in the order
        made. Only the images the curve's paired floor keeps (:meth:`_curve_keeps`) are
        filed, but every image's state is made (a state's place in its layer is that of
        its first image, whatever the floor drops)."""
        S, lengths, H, ref, starts, code = made
        key = starts * int(self._stride[-1] * (self._count[-1] + 1)) + code
        order = np.argsort(key, kind="stable")
        key = key[order]
        cuts = np.flatnonzero(np.diff(key)) + 1
        lo = np.concatenate(([0], cuts))
        heads = order[lo]
        at, codes = starts[heads], code[heads]
        S = np.take(S, order, axis=0)
        kept = self._curve_keeps(S, lo, at, codes, limit)
        if kept is not None:  # the rows kept, and where each state's start among them
            lo = np.concatenate(([0], np.cumsum(kept)))[lo]
            order, S = order[kept], np.compress(kept, S, axis=0)
        # sorted once; each state's chunk is a slice (a view) of the sorted arrays
        width = max(1, int(lengths.max()))
        H = np.take(H, order, axis=0)[:, :width]
        lengths, ref = lengths[order], np.take(ref, order, axis=0)
        lo = lo.tolist()
        hi = lo[1:] + [len(order)]
        usages = self._usages
        for x, c, a, b in zip(at.tolist(), codes.tolist(), lo, hi):
            u = usages.get(c)
            if u is None:
                u = self._usage(c)
            chunks = states[x].setdefault(u, [])
            if b > a:
                chunks.append(_Labels(S[a:b], H[a:b], lengths[a:b], ref[a:b]))

    def _curve_keeps(self, S: np.ndarray, lo: np.ndarray, at: np.ndarray, codes: np.ndarray,
                     limit: float) -> np.ndarray | None:
        """Which images the curve's paired floor keeps at their own layer, where
        :meth:`_filtered` would test them (:func:`.period_fast.order_layer`'s test, the
        same operations, so the same bits; ``None``: no curve, all): rows ``S`` grouped
        by state, state ``i``'s from ``lo[i]``, at layer ``at[i]`` of usage code
        ``codes[i]``. Tested as soon as they are made, so that no image it drops is filed,
        joined or sorted."""
        c = self.curve
        if c is None:
            return None
        G = self.t.G
        room = int(sum((int(r) - 1) * int(s) for r, s in zip(c.radix[:G], c.stride[:G])))
        usage = codes[:, None] // self._stride[None, :] % (np.asarray(self._count) + 1)
        room = room - usage @ np.asarray(c.stride[:G], dtype=np.int64)  # .curve room()
        grid, below, n = c.grid, c.below, len(c.grid)
        w = float(c.M - 1)
        # per state, its row of caps and their suffix minima, each padded with inf to
        # n + 2 columns (a period past the grid reads no cap)
        CF = np.full((len(at), n + 2), np.inf)
        CF[:, :n] = c.CF[at, room]
        suffix = np.full((len(at), n + 2), np.inf)
        suffix[:, :n] = np.minimum.accumulate((CF[:, :n] + w * below)[:, ::-1], axis=1)[:, ::-1]
        per = S[:, 0] + S[:, 1]
        j = np.searchsorted(grid, per, side="left")
        # each row's state (its row's start in the padded tables' flat order), plus j
        sizes = np.diff(np.append(lo, len(S)))
        at_j = np.repeat(np.arange(0, len(at) * (n + 2), n + 2), sizes) + j
        first = CF.ravel()[at_j] + w * np.maximum(per, np.append(below, 0.0)[j])
        least = np.minimum(first, suffix.ravel()[at_j + 1])
        kept = S[:, 2] + S[:, 3] + np.minimum(least, w * np.maximum(per, grid[n - 1])) <= limit
        if not at[0]:  # layer 0 (the least start, first): no test there
            kept[:sizes[at == 0].sum()] = True
        if kept.all():
            return None
        self.bound_cut = True
        return kept

    def _usage(self, code: int) -> tuple:
        """The usage tuple of :meth:`_code` ``code``."""
        got = self._usages.get(code)
        if got is None:
            got = self._usages[code] = tuple(
                (code // s) % (c + 1) for s, c in zip(self._stride.tolist(), self._count))
        return got

    def _layer_runs(self, x: int) -> tuple:
        """Every group's runs at ``x`` (:meth:`_group_runs`) as :func:`_all_runs` joins
        them, made once per tables and end (:meth:`_shared`)."""
        cache = self._shared("all_runs")
        got = cache.get(x)
        if got is None:
            got = cache[x] = _all_runs([self._group_runs(g, x) for g in range(self.t.G)])
        return got

    def _group_runs(self, g: int, x: int) -> tuple:
        """:meth:`_group_stages` at ``x``, made once per tables (:meth:`_shared`) and group
        (every trial of a DC's run asks the same ones). Tables under a ``sync_cap``
        (:func:`.agent.own_tables`: ``_cdynp_base`` names the uncapped ones and the cap)
        take the uncapped tables' runs cut at the cap (:func:`_cut_runs`)."""
        cache = self._shared("by_end")
        got = cache.get(g)
        if got is None:
            base = self.t.__dict__.get("_cdynp_base")
            if base is None:
                got = self._group_stages(g)
            else:
                whole = PeriodDP(base[0], position_cap=self.R, deadline=self.deadline)
                got = _by_end(_cut_runs(whole._stage_table(g), base[1]), self.L)
            cache[g] = got
        return got[x]

    def _over(self, M: int, x1: float, x2: float, total: float, sync: float,
              limit: float) -> bool:
        """Whether a label of these (optimistic) terms cannot be part of a plan within the
        bound: ``T`` above ``limit`` at ``M``, and in a frontier run above the bound at
        the interval's top too (``T`` is linear in ``M_p`` for fixed terms, so above both
        ends is above the whole interval)."""
        if period_time(M, x1, x2, total, sync) <= limit:
            return False
        if self.frontier is None:
            return True
        m_hi, limit_hi = self._hi
        return period_time(m_hi, x1, x2, total, sync) > limit_hi

    @staticmethod
    def end_label() -> tuple:
        """The base label of the model's end: nothing placed."""
        return (0.0, 0.0, 0.0, 0.0, 0, (), (END, 0, 0))


class _Labels:
    """Labels of one state as arrays: ``S`` rows ``x1, x2, total, sync, p``, majorants
    ``H`` (padded with ``-inf``) of lengths ``HL``, and ``ref`` rows ``g, pair, kind, i,
    j``: the label's first stage (``-1`` for a base label) and where the plan goes on."""

    __slots__ = ("S", "H", "HL", "ref")

    def __init__(self, S, H, HL, ref):
        self.S, self.H, self.HL, self.ref = S, H, HL, ref

    def __len__(self) -> int:
        return len(self.S)

    @classmethod
    def of_base(cls, labels: list) -> _Labels:
        """Base label tuples ``(x1, x2, total, sync, p, hull, (kind, e, j))``."""
        S = np.array([lab[:5] for lab in labels], dtype=float).reshape(-1, 5)
        HL = np.array([len(lab[5]) for lab in labels], dtype=np.int64)
        H = np.full((len(labels), max(1, int(HL.max(initial=0)))), -np.inf)
        for i, lab in enumerate(labels):
            H[i, :len(lab[5])] = lab[5]
        ref = np.array([(-1, -1, *lab[6]) for lab in labels], dtype=np.int64).reshape(-1, 5)
        return cls(S, H, HL, ref)

    @classmethod
    def joined(cls, chunks: list) -> _Labels:
        """The chunks in order, as one (none: no labels)."""
        if len(chunks) <= 1:
            return chunks[0] if chunks else cls.empty()
        Hs = [c.H for c in chunks]
        widths = [h.shape[1] for h in Hs]
        width = max(widths)
        if min(widths) == width:  # one width: no padding
            H = np.concatenate(Hs)
        else:
            H = np.full((sum(len(h) for h in Hs), width), -np.inf)
            at = 0
            for h, w in zip(Hs, widths):
                H[at:at + len(h), :w] = h
                at += len(h)
        return cls(np.concatenate([c.S for c in chunks]), H,
                   np.concatenate([c.HL for c in chunks]),
                   np.concatenate([c.ref for c in chunks]))

    @classmethod
    def empty(cls) -> _Labels:
        """No labels."""
        return cls(np.zeros((0, 5)), np.zeros((0, 1)), np.zeros(0, dtype=np.int64),
                   np.zeros((0, 5), dtype=np.int64))

    def rows(self, lo: int, hi: int) -> _Labels:
        """The labels ``lo..hi - 1``, as views."""
        return _Labels(self.S[lo:hi], self.H[lo:hi], self.HL[lo:hi], self.ref[lo:hi])

    def take(self, rows) -> _Labels:
        """The labels ``rows`` (indices or a mask), in that order."""
        if rows.dtype == bool:
            rows = np.flatnonzero(rows)
        return _Labels(*(np.take(v, rows, axis=0) for v in (self.S, self.H, self.HL, self.ref)))

    def hull_tuples(self) -> list[tuple]:
        """Each label's majorant as a tuple."""
        rows = self.H.tolist()
        return [tuple(row[:n]) for row, n in zip(rows, self.HL.tolist())]


def _by_raised_period(S: np.ndarray, starts: np.ndarray, floors: np.ndarray) -> np.ndarray:
    """The order of the rows ``S`` (each state's, ``starts[i]:starts[i + 1]``, in
    :meth:`PeriodDP._filtered`'s order: period first) by period raised to the state's
    floor, as :func:`~chainpipe.solvers.period_kernel.by_raised_period` orders ``dp``'s:
    the rows at or below the floor, a first run that all raise to it, by fill (stably),
    the others as they are."""
    n = len(S)
    state = np.repeat(np.arange(len(starts) - 1), np.diff(starts))
    floor = floors[state]
    per = S[:, 0] + S[:, 1]
    low = per <= floor
    if not low.any():
        return np.arange(n)
    return np.lexsort((np.arange(n), np.where(low, S[:, 2], 0.0), np.maximum(per, floor),
                       state))


def _filter_joined(keys: list, every: _Labels, starts: np.ndarray, floors: np.ndarray,
                   rule: Rule) -> np.ndarray:
    """Which labels ``dp``'s rule keeps, the states' (sorted) labels joined in ``every``,
    state ``i``'s rows ``starts[i]:starts[i + 1]``: within the state
    (:func:`~chainpipe.solvers.period_kernel.pareto`), then against the states of no more
    devices (``across``), as :func:`~chainpipe.solvers.dp_period.pareto` and
    :func:`~chainpipe.solvers.dp_period.across_usage` call them on label tuples."""
    from ..dp_period import kernel

    if not keys:
        return np.zeros(0, dtype=bool)
    alive = kernel.pareto(every.S, every.H, every.HL, starts, floors, *rule.bounds())
    if len(keys) > 1:
        order, ptr, rv = usage_rivals(keys)
        if len(rv):
            kernel.across(every.S, every.H, every.HL, alive, starts, floors, order, ptr, rv,
                          *rule.bounds())
    return alive


def _all_runs(groups: list) -> tuple:
    """The runs of every group (:meth:`PeriodDP._group_runs`) one after another: ``(pairs,
    widths, runs, ptr, group)``, run ``q``'s rows ``runs[ptr[q]:ptr[q + 1]]``."""
    pairs = np.concatenate([grp[0] for grp in groups]).astype(np.int64)
    widths = np.concatenate([grp[1] for grp in groups]).astype(np.int64)
    runs = np.concatenate([grp[2] for grp in groups]).reshape(-1, 6)
    ptr, at = [np.zeros(1, dtype=np.int64)], 0
    for grp in groups:
        ptr.append(grp[3][1:] + at)
        at += int(grp[3][-1])
    of_g = np.repeat(np.arange(len(groups), dtype=np.int64), [len(grp[0]) for grp in groups])
    return pairs, widths, np.ascontiguousarray(runs), np.concatenate(ptr), of_g


def _by_end(table: tuple, L: int) -> list[tuple]:
    """A group's runs for every end (:meth:`PeriodDP._stage_table`) as
    :meth:`PeriodDP._group_stages` gives them: per end ``x = 0..L``, ``(pairs, widths,
    runs, ptr)`` (views, ``ptr`` from 0)."""
    ends, pairs, widths, runs, ptr = table
    at = np.searchsorted(ends, np.arange(L + 2), side="left").tolist()
    starts = ptr.tolist()
    return [(pairs[lo:hi], widths[lo:hi], runs[starts[lo]:starts[hi]], ptr[lo:hi + 1] - starts[lo])
            for lo, hi in zip(at, at[1:])]


def _cut_runs(table: tuple, cap: float) -> tuple:
    """A group's runs (:meth:`PeriodDP._stage_table`) under a ``sync_cap``: as the capped
    tables give them (an option with ``R >= cap`` fits nowhere, the others count ``R`` as
    0). Along a run the stage grows and ``R`` does not fall, so the capped run is the
    uncapped one up to its first stage with ``R >= cap``; runs left empty are dropped."""
    ends, pairs, widths, runs, ptr = table
    n = len(runs)
    which = np.repeat(np.arange(len(pairs)), np.diff(ptr))  # each row's run
    idx = np.arange(n)
    bad = np.where(runs[:, 4] >= cap, idx, n)
    # per run (none empty), its first row at or above the cap, else n
    first = np.minimum.reduceat(bad, ptr[:-1]) if len(pairs) else np.zeros(0, dtype=np.int64)
    keep = idx < first[which]
    counts = np.bincount(which[keep], minlength=len(pairs))
    live = counts > 0
    out = runs[keep].copy()
    out[:, 4] = 0.0
    new_ptr = np.zeros(int(live.sum()) + 1, dtype=np.int64)
    new_ptr[1:] = np.cumsum(counts[live])
    return ends[live], pairs[live], widths[live], out, new_ptr


def concave_majorant(values) -> tuple:
    """The least concave sequence at or above ``values`` (window ``j`` at ``x = j + 1``):
    the upper hull of the points, read at every window. A compressed run's summaries
    round every window sum up on its own, which may leave a dent; the receiver reads
    loops off the majorant (:func:`~chainpipe.solvers.dp_period.new_loops` and
    :func:`~chainpipe.solvers.dp_period.hull_prepend` assume a concave sequence), which is
    still at or above the true one and, the true one being concave, within the rounding's
    factor of it."""
    vals = [float(v) for v in values]
    hull: list[int] = []  # indices of the upper hull's vertices
    for i, v in enumerate(vals):
        while len(hull) >= 2:
            a, b = hull[-2], hull[-1]
            # b lies on or below the chord from a to i: not a vertex
            if (vals[b] - vals[a]) * (i - a) <= (v - vals[a]) * (b - a):
                hull.pop()
            else:
                break
        hull.append(i)
    out = list(vals)
    for a, b in zip(hull, hull[1:]):
        for i in range(a + 1, b):
            out[i] = max(vals[i], vals[a] + (vals[b] - vals[a]) * (i - a) / (b - a))
    return tuple(out)


def _within(a: tuple, b: tuple, f: float, same_p: bool) -> bool:
    """Point ``a`` costs at most ``f`` times ``b`` for every completion: each of ``(x1,
    x2, total, sync)`` and every window at most ``f`` times ``b``'s, the same ``p`` under
    1F1B (points ``(x1, x2, total, sync, p, hull, ...)``)."""
    if same_p and a[4] != b[4]:
        return False
    if len(a[5]) != len(b[5]):
        return False
    return (a[0] <= f * b[0] and a[1] <= f * b[1] and a[2] <= f * b[2] and a[3] <= f * b[3]
            and all(x <= f * y for x, y in zip(a[5], b[5])))


def epsilon_keep(points: list, eps: float, same_p: bool) -> list[int]:
    """Indices (ascending) of the points kept by epsilon-dominance under ``period``: every
    dropped point is within ``1 + eps`` of a kept one (:func:`_within`). Prepending a
    stage and ``T`` are monotone and positively homogeneous in a point's values (maxima,
    sums, loops over window sums, the majorant), so every completion through the kept
    point costs at most ``1 + eps`` times the same completion through the dropped one."""
    if eps <= 0:
        return list(range(len(points)))
    f = 1.0 + eps
    kept: list = []
    out = []
    for i in sorted(range(len(points)), key=lambda i: (points[i][2], points[i][0])):
        if not any(_within(k, points[i], f, same_p) for k in kept):
            kept.append(points[i])
            out.append(i)
    out.sort()
    return out


def cap_keep(points: list, M: int, max_entries: int, scale: float, occupancy: float,
             gpipe: bool) -> list[int]:
    """Indices (ascending) of the ``max_entries`` points with the least estimated ``T`` of
    a whole plan (as :func:`.summary.cap_keep`: the boundary paid, the total scaled by
    the model's FLOP over the suffix's), the period lifted to the loops that a stage as
    slow as the suffix's period would close over its windows (measured on
    ``v3-medium-03`` with one pipeline, ``digits=3``, 8 points per entry: 1.9% above the
    optimum, against 2.3% by the suffix's own period; ranking each stage count's best
    first was no better); no guarantee."""
    if max_entries <= 0 or len(points) <= max_entries:
        return list(range(len(points)))
    return sorted(cap_order(points, M, scale, occupancy, gpipe)[:max_entries])


def cap_order(points: list, M: int, scale: float, occupancy: float, gpipe: bool) -> list[int]:
    """The indices of ``points`` by the estimated ``T`` of a whole plan :func:`cap_keep`
    ranks them by (:func:`cap_estimates`), least first."""
    est = cap_estimates(points, M, scale, occupancy, gpipe)
    return sorted(range(len(points)), key=est.__getitem__)


def cap_estimates(points: list, M: int, scale: float, occupancy: float,
                  gpipe: bool) -> list[float]:
    """Per point, the estimated ``T`` of a whole plan through it that :func:`cap_keep`
    ranks by."""
    u = occupancy
    q = float(cost.traversal(0.0, u))

    def estimate(p) -> float:
        x1 = max(p[0], u)
        if p[5]:  # the loops a stage like its slowest closes over the suffix's windows
            x1 = max(x1, new_loops(tuple(h + q for h in p[5]), x1, 0.0))
        return period_time(M, x1, max(p[1], u) if gpipe else p[1], (p[2] + q) * scale, p[3])

    return [estimate(p) for p in points]


def frontier_lines(lines: list, m_lo: int, m_hi: int) -> list[list]:
    """The lines a frontier run's DC 1 reports: of complete plans' ``(fill, period,
    settled)``, each ``T(m) = fill + (m - 1) period``, those least at some ``m`` of
    ``[m_lo, m_hi]`` among all lines, and those least among the settled ones (a
    *settled* line is a 1F1B plan of at most ``m_lo - 2`` stages: every stash and loop is
    then the same at every ``m >= m_lo``, so its line is its exact ``T_p``; any other
    line is only a lower bound above ``m_lo``). Returned as ``[fill, period, settled]``
    lists sorted by fill, ties of the two kinds kept once (settled wins).

    Parameters
    ----------
    lines : list of tuple
        ``(fill, period, settled)``.
    m_lo, m_hi : int
        The interval of ``M_p``.

    Returns
    -------
    list of list
    """
    def least(cands: list) -> set:
        # a line no other is below in both fill and period can be least somewhere
        cands = sorted(cands, key=lambda ln: (ln[1], ln[0], not ln[2]))
        front, low = [], math.inf
        for ln in cands:
            if ln[0] < low:
                front.append(ln)
                low = ln[0]
        out = set()
        for m in range(m_lo, m_hi + 1):
            if front:
                out.add(min(front, key=lambda ln: (ln[0] + (m - 1) * ln[1], not ln[2])))
        return out

    kept = least(lines) | least([ln for ln in lines if ln[2]])
    return [[float(f), float(p), bool(s)] for f, p, s in sorted(kept)]


def frontier_value(lines: list, m: int) -> tuple[float, float]:
    """``(least of every line, least of the settled lines)`` at ``M_p = m`` (``inf`` for
    none) from :func:`frontier_lines`'s ``[fill, period, settled]``: the first is a lower
    bound on ``T_p(m)`` (every plan's cost at ``m`` is at least its line), the second the
    exact ``T_p`` of a real plan."""
    every = settled = math.inf
    for fill, per, ok in lines:
        t = fill + (m - 1) * per
        every = min(every, t)
        if ok:
            settled = min(settled, t)
    return every, settled
