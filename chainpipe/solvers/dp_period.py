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

A search returns, per first DC of the pipeline, the best complete plan it found: least
``T_p + max R`` (``tighten="sum"``) or least ``T_p`` (``"time"``), its bound dropping to
each plan found (the label dominance keeps, for every completion, a label as good in
``T_p`` and in ``T_p + max R``, not a frontier in ``(T_p, max R)``);
:mod:`chainpipe.solvers.dp_pipelines` combines them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import cost
from ..deadline import Deadline
from ..tables import CostTables, dominated_options, fill_bound, fill_curve
from .prefix_curve import PrefixCurve

#: relative slack of every bound test: rounding may keep a label, never cut one
SLACK = 1e-9
#: labels of a layer whose majorants are made at once (whole states; the survivors'
#: are kept): bounds the memory of a layer's filter to ``CHUNK x`` the majorants' width
CHUNK = 1 << 16
#: no walks of the prefix curve (:func:`.period_kernel.prefix_floors` with no caps)
_NONE = np.empty((0, 0))


class _LazyKernel:
    """:mod:`.period_kernel`, imported (with numba) on first use: a CDynP agent of a
    ``classic`` run imports this module and never needs it."""

    def __getattr__(self, name: str):
        from . import period_kernel

        globals()["kernel"] = period_kernel
        return getattr(period_kernel, name)


kernel = _LazyKernel()


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
    traversal ``q`` is prepended: points ``(1, c)`` and ``(j + 2, c + q + hull_j)``.

    ``hull`` is concave, so only the tangent from the new first point changes it: the
    majorant follows the chord to the point of largest slope from ``(1, c)``, then the
    shifted old majorant. The slope from a point left of a concave sequence rises, then
    falls (its derivative's numerator ``f'(x)(x - 1) - f(x) + c`` decreases), so the scan
    stops at its first fall. (A tuple front end of
    :func:`.period_kernel.hull_prepend`, the one written rule.)"""
    n = len(hull)
    H = np.array([hull], dtype=float) if n else np.zeros((1, 1))
    out = np.empty((1, n + 1))
    m = kernel.hull_prepend(H, 0, n, float(c), float(q), out, 0)
    return tuple(out[0, :m].tolist())


def new_loops(hull: tuple, c: float, q: float) -> float:
    """The slowest loop a stage of time ``c`` and traversal ``q`` closes over the suffix
    whose window sums have majorant ``hull``: ``max_j (c + q + hull_j) / (j + 2)``, the
    largest slope from the origin to a concave sequence (unimodal, as in
    :func:`hull_prepend`: the scan stops at its first fall; a tuple front end of
    :func:`.period_kernel.new_loops`)."""
    n = len(hull)
    H = np.array([hull], dtype=float) if n else np.zeros((1, 1))
    return float(kernel.new_loops(H, 0, n, float(c), float(q)))


@dataclass(frozen=True)
class Rule:
    """What the dominance test of one layer needs (``docs/dp.md``, "Version 3").

    Parameters
    ----------
    p_free : float
        When ``p_b < p_free`` every later stage sits below ``M_p`` with either label (so
        its loops count in both); otherwise ``p_a = p_b`` is required.
    steady : int
        ``M_p - 1``.
    upper, tau : float
        Only completions with ``T_p + max R < upper`` and ``T_p <= tau`` matter.
    shift : bool
        Measure a dominator's period above the floor under the other's completed period
        rather than above its own (valid for one period, not for GPipe's two phases).
    """

    p_free: float
    steady: int
    upper: float = np.inf
    tau: float = np.inf
    shift: bool = False

    def bounds(self) -> tuple[float, int, float, float, bool]:
        """The rule's arguments of :func:`.period_kernel.pareto` and ``across`` (the
        bounds with their slack)."""
        return (float(self.p_free), int(self.steady), float(self.upper) * (1 + SLACK),
                float(self.tau) * (1 + SLACK), bool(self.shift))


def _arrays(labels: list) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``S`` (``x1, x2, sum, R, p`` per label), the majorants padded with ``-inf`` and
    their lengths, of label tuples ``(x1, x2, sum, R, p, hull, ...)``."""
    S = np.array([lab[:5] for lab in labels], dtype=float).reshape(-1, 5)
    HL = np.array([len(lab[5]) for lab in labels], dtype=np.int64)
    H = np.full((len(labels), max(1, int(HL.max(initial=0)))), -np.inf)
    for i, lab in enumerate(labels):
        H[i, :len(lab[5])] = lab[5]
    return S, H, HL


def _by_period(lab: tuple) -> tuple:
    """The order of a state's labels: period, fill, ``R``, ``x1``, ``p``."""
    return (lab[0] + lab[1], lab[2], lab[3], lab[0], lab[4])


def pareto(labels: list, rule: Rule, floor: float = -np.inf) -> list:
    """The labels (of a state whose completions have a period of at least ``floor``),
    sorted by period, that no kept earlier one dominates (``docs/dp.md``, "Version 3":
    the dominance relation is transitive, so a dropped label's dominator is dominated by
    a kept one); label tuples ``(x1, x2, sum, R, p, hull, ...)``, by
    :func:`.period_kernel.pareto`."""
    if not labels:
        return labels
    labels.sort(key=_by_period)
    S, H, HL = _arrays(labels)
    alive = kernel.pareto(S, H, HL, np.array([0, len(labels)], dtype=np.int64),
                          np.array([floor], dtype=float), *rule.bounds())
    return [lab for lab, ok in zip(labels, alive.tolist()) if ok]


def usage_rivals(usages: list) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For one DC's states (distinct usages ``usages``), the order in which
    :func:`.period_kernel.across` tests them (by devices used, ties in the order given)
    and per state its rivals, the earlier ones using no more devices of any group (CSR:
    ``ptr`` and ``rivals``, indices into ``usages``)."""
    usage = np.array(usages, dtype=np.int64).reshape(len(usages), -1)
    order = np.argsort(usage.sum(axis=1), kind="stable")
    usage = usage[order]
    # [r, s]: r before s in the order and no more devices of any group
    below = np.triu((usage[:, None, :] <= usage[None, :, :]).all(axis=2), k=1)
    of, rv = np.nonzero(below.T)
    ptr = np.zeros(len(usages) + 1, dtype=np.int64)
    np.cumsum(np.bincount(of, minlength=len(usages)), out=ptr[1:])
    return order.astype(np.int64), ptr, order[rv].astype(np.int64)


def rivals(keys: list) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`usage_rivals` of states ``keys`` (``(dc, usage)``), DC by DC in the order
    the DCs first appear: the order in which :func:`.period_kernel.across` tests them
    and per state its rivals (CSR: ``ptr`` and ``rivals``, indices into ``keys``)."""
    by_dc: dict = {}
    for s, key in enumerate(keys):
        by_dc.setdefault(key[0], []).append(s)
    if len(by_dc) == 1:  # one DC (the common case): its indices are the keys'
        return usage_rivals([key[1] for key in keys])
    none = np.zeros(0, dtype=np.int64)
    order, ptr, out, at = [none], [np.zeros(1, dtype=np.int64)], [none], 0
    for segs in by_dc.values():
        segs = np.array(segs, dtype=np.int64)
        o, p, r = usage_rivals([keys[s][1] for s in segs])
        order.append(segs[o])
        out.append(segs[r])
        ptr.append(p[1:] + at)
        at += int(p[-1])
    return np.concatenate(order), np.concatenate(ptr), np.concatenate(out)


def across_usage(layer: dict, rule: Rule, floors: dict) -> None:
    """Drop, in place, labels dominated by a label of another state of the same DC that
    uses no more devices of any group: every completion of the one stays open to the other
    (``floors``: per state, a floor under its completions' period); by
    :func:`.period_kernel.across`, each state's labels sorted by period."""
    keys = [k for k in layer if layer[k]]
    if len(keys) < 2:
        return
    flat = []
    starts = [0]
    for k in keys:
        layer[k].sort(key=_by_period)
        flat += layer[k]
        starts.append(len(flat))
    S, H, HL = _arrays(flat)
    alive = np.ones(len(flat), dtype=np.bool_)
    order, ptr, rv = rivals(keys)
    kernel.across(S, H, HL, alive, np.array(starts, dtype=np.int64),
                  np.array([floors[k] for k in keys], dtype=float), order, ptr, rv,
                  *rule.bounds())
    for x, k in enumerate(keys):
        layer[k] = [lab for lab, ok in zip(layer[k], alive[starts[x]:starts[x + 1]].tolist())
                    if ok]


def candidate_rows(tables: CostTables, g: int, need: int, phases: bool, deadline: Deadline):
    """Per end ``b``: the options of group ``g`` on ``[a, b)`` that hold ``need``
    microbatches, by increasing ``C``, as rows ``[a, C, f, b, n, w, R, pair]`` of a float
    array (``f, b``: GPipe's phases when ``phases``, else ``C``), ``None`` for an end with
    none; the distinct in-flight limits ``n`` of the rows and their distinct widths ``w``,
    sorted. Options
    dominated by another pair of the same range (no more devices, no larger ``C`` or
    ``R``, no fewer in flight, and with ``phases`` no larger ``f`` or ``b``: GPipe's two
    phases may rank pairs apart) are dropped: a search's caps on ``C`` and ``R`` keep a
    dominator whenever they keep what it dominates, so the rows are built once per group
    and ``need`` and each search takes the prefix under its cap."""
    opts = tables.options(g)
    cache = tables.__dict__.setdefault("_candidate_rows", {})
    key = (id(opts), need, phases)
    if key in cache:
        return cache[key][:3]
    per_end: list = [None] * (tables.L + 1)
    limits = np.zeros(0, dtype=np.int64)
    widths = np.zeros(0)
    if len(opts.d):
        rows, ends = _undominated_rows(tables, g, opts, phases, deadline)
        held = rows[:, 4] >= need  # (a subset keeps the order: by end, then C)
        rows, ends = rows[held], ends[held]
        cuts = np.searchsorted(ends, np.arange(tables.L + 2))
        limits = np.unique(rows[:, 4]).astype(np.int64)
        widths = np.unique(rows[:, 5])
        for b in range(1, tables.L + 1):
            lo, hi = int(cuts[b]), int(cuts[b + 1])
            if lo < hi:
                per_end[b] = np.ascontiguousarray(rows[lo:hi])
    cache[key] = (per_end, limits, widths, opts)  # opts kept alive: its id stays unique
    return per_end, limits, widths


def _undominated_rows(tables: CostTables, g: int, opts, phases: bool, deadline: Deadline):
    """Every finite option of group ``g`` that no other pair of its range dominates
    (:func:`_dominated`), as the rows of :func:`candidate_rows` ordered by end, then ``C``,
    and their ends; once per group (and ``phases``), whatever ``need``: the rows that hold
    ``need`` are a subset, in the same order (a ``v3-medium-04-gpipe``-like draw asks a
    DC's group at 9 counts, each rows' build a sort of every option)."""
    cache = tables.__dict__.setdefault("_candidate_all", {})
    key = (id(opts), phases)
    got = cache.get(key)
    if got is None:
        C, N, R, W = opts.compute_time, opts.max_in_flight, opts.sync_time, opts.width
        F, B = phase_options(tables, g) if phases else (C, C)
        ok = np.isfinite(C) & ~_dominated(tables, opts, phases, F, B, deadline)
        cs, starts, ends = np.nonzero(ok)
        order = np.lexsort((C[cs, starts, ends], ends))
        cs, starts, ends = cs[order], starts[order], ends[order]
        rows = np.column_stack([starts, C[cs, starts, ends], F[cs, starts, ends],
                                B[cs, starts, ends], N[cs, starts, ends], W[cs],
                                R[cs, starts, ends], cs]).astype(float)
        got = cache[key] = (rows, ends, opts)  # opts kept alive: its id stays unique
    return got[:2]


def _dominated(tables: CostTables, opts, phases: bool, F, B, deadline: Deadline):
    """:func:`~chainpipe.tables.dominated_options` of a group's finite options, once per
    group (and ``phases``) whatever ``need``: a dominator holds no fewer microbatches
    than what it dominates, so an option that holds ``need`` is dominated among those
    that hold ``need`` exactly when it is among all (GPipe asks a group at the ``M_p`` of
    each search: a fresh ``v3-medium-04``-like instance, seed 5, spent 0.85 of its 3.1 s
    on 140 such masks)."""
    cache = tables.__dict__.setdefault("_dominated_rows", {})
    key = (id(opts), phases)
    got = cache.get(key)
    if got is None:
        C, N, R, W = opts.compute_time, opts.max_in_flight, opts.sync_time, opts.width
        got = cache[key] = dominated_options(np.isfinite(C), C, N, R, W, deadline.check,
                                             (F, B) if phases else ())
    return got


class PipelineSearch:
    """One bounded search of one pipeline with ``microbatches`` microbatches.

    Parameters
    ----------
    tables : CostTables
    microbatches : int
        ``M_p``.
    last_dc : int or None
        The DC of the pipeline's last stage (``None``: any).
    first_dc : int or None
        The DC of its first stage (``None``: any).
    upper : float
        Only plans with ``T_p + max R < upper`` are searched (``inf``: all).
    deadline : Deadline
    tighten : {"sum", "time"}
        Find the best ``T_p + max R`` (``"sum"``: the bound drops to each plan found) or
        the best ``T_p`` (``"time"``: ``tau`` drops so).
    capacity : dp_pipelines.Holds or None
        What free devices hold under a bottleneck (the one valid for ``M_p``).
    box : tuple of float
        ``(tau, theta)``: only plans with ``T_p <= tau`` and ``max R < theta`` besides.
    own_theta : bool
        Whether a range's prefix curve leaves out the options of ``R >= theta`` as the
        search does (stronger floors, walks of their own: :data:`.dp_ranges.DEAR`).
    """

    def __init__(self, tables: CostTables, microbatches: int, last_dc: int | None,
                 upper: float, deadline: Deadline, tighten: str, capacity=None,
                 box: tuple[float, float] = (np.inf, np.inf), first_dc: int | None = None,
                 own_theta: bool = True):
        self.t, self.m, self.last_dc, self.first_dc = tables, microbatches, last_dc, first_dc
        self.own_theta = own_theta
        self.tau, self.theta = box
        self.upper, self.deadline, self.tighten = upper, deadline, tighten
        training = tables.instance.training
        self.gpipe_period = training.objective == "period" and tables.schedule == "gpipe"
        self.loops = training.objective == "period" and tables.schedule == "1f1b"
        # with M_p > L every stage sits below M_p, so every loop counts (docs/dp.md)
        self.all_loops = self.loops and microbatches > tables.L
        self._need = microbatches if tables.schedule == "gpipe" else 1
        self.p_cap = self._position_cap()
        # the stash of a stage placed before p stages: position p + 1, exact while p < p_cap
        # and at least M_p beyond
        self.need_at = [cost.in_flight(tables.schedule, microbatches,
                                       p + 1 if p < self.p_cap else microbatches)
                        for p in range(self.p_cap + 1)]
        self.stats = {"labels": 0, "states": 0}
        self.capacity = None if capacity is None else capacity.for_pipeline(microbatches)
        # the chain's floors read stashes of min(M, q) for positions q up to its rows:
        # valid for any M_p of at least that many (docs/dp.md, "positions along the chain")
        chain = None if capacity is None else getattr(capacity, "chain", None)
        self.chain = chain if chain is not None and microbatches >= chain.held.shape[1] \
            else None
        self.chain_rows = {} if self.chain is None else capacity.chain_rows
        # :meth:`_static_top`'s, shared by the searches with the same capacity (if any)
        self._tops = {} if self.capacity is None else \
            self.capacity.__dict__.setdefault("period_tops", {})

    def _position_cap(self) -> int:
        """How far the count ``p`` of stages placed is kept exactly: to ``M_p - 1`` where
        loops depend on positions, else only while 1F1B memory does (one past the largest
        in-flight limit below ``M_p`` of an option the search may use; 0 under GPipe)."""
        t, m = self.t, self.m
        if t.schedule == "gpipe":
            return 0
        exact = max(0, min(m - 1, t.L))
        if self.loops and not self.all_loops:
            return exact
        below = 0
        lowest = self.first_dc or 0
        highest = t.K - 1 if self.last_dc is None else self.last_dc
        for g in range(t.G):
            if lowest <= t.group_dc[g] <= highest:
                limits = candidate_rows(t, g, self._need, self.gpipe_period, self.deadline)[1]
                under = limits[limits < m]
                if len(under):
                    below = max(below, int(under[-1]))
        return min(exact, below + 1)

    def run(self) -> dict[int, list]:
        """Per first DC, the complete plans kept: ``(T_p, max R, parent, fill, period)``
        (``T_p = fill + (M_p - 1) period``)."""
        self._bounds()
        self.cands = [self._candidates(g) for g in range(self.t.G)]
        self.widths = [candidate_rows(self.t, g, self._need, self.gpipe_period,
                                      self.deadline)[2] for g in range(self.t.G)]
        return self._loop()

    def _bounds(self) -> None:
        """The period cap of any plan below the bound and the prefix bounds per DC."""
        t, m = self.t, self.m
        # the groups a plan may use: those of DCs first_dc..last_dc
        lowest = self.first_dc or 0
        highest = t.K - 1 if self.last_dc is None else self.last_dc
        self.usable = (t.group_dc >= lowest) & (t.group_dc <= highest)
        total = float(t.flop_prefix[-1])
        sum_lb = cost.compute_time(total, t.rate[self.usable].max(), t.widest)
        finite = np.isfinite(self.upper)
        top = min(self.upper, self.tau)  # T_p is below both
        self.cap = (top - sum_lb) / (m - 1) if np.isfinite(top) and m > 1 else np.inf
        if np.isfinite(self.cap) and self.cap > 0:  # every C <= cap: the fill bound, 3 rounds
            everything = (t.rate * t.count)[self.usable].tolist()
            for _ in range(3):
                x, _ = fill_curve(everything, self.cap)
                sum_lb = max(sum_lb, fill_bound(total, x.tolist(), self.cap))
                self.cap = (top - sum_lb) / (m - 1)
        self._floors: dict = {}
        self.sync_cap = self.upper - sum_lb if finite else np.inf
        flop = t.flop_prefix
        largest = t.layer_flop_max
        rates = [float(t.rate[(t.group_dc <= k) & self.usable].max()) if k >= lowest
                 else float(t.rate.max()) for k in range(t.K)]  # (no stage before lowest)
        self.pre_sum = [np.asarray(cost.compute_time(flop, r, t.widest), dtype=float)
                        for r in rates]
        self.pre_max = [np.asarray(cost.compute_time(largest, r, t.widest), dtype=float)
                        for r in rates]
        self.groups_of = [np.flatnonzero(t.group_dc == k).tolist() for k in range(t.K)]
        self.local = [t.groups[g].index for g in range(t.G)]

    def _candidates(self, g: int) -> list:
        """Per end ``b``: group ``g``'s options on ``[a, b)`` by increasing ``C``
        (:func:`candidate_rows`); none for a group outside the range."""
        if not self.usable[g]:
            return [None] * (self.t.L + 1)
        return candidate_rows(self.t, g, self._need, self.gpipe_period, self.deadline)[0]

    def _moves(self, b: int, key: tuple) -> list:
        """``(g, k0, local index, usage before, U, Q)`` for the stage before state ``key``
        (those whose boundary occupancy ``U`` passes the period cap), from a list made
        once per instance, layer, state and DC range (:meth:`_all_moves`)."""
        lim = self.cap * (1 + SLACK)
        return [mv for mv in self._all_moves(b, key) if mv[4] <= lim]

    def _all_moves(self, b: int, key: tuple) -> list:
        """Every move before state ``key`` at layer ``b`` within the search's DCs."""
        t = self.t
        lowest = self.first_dc or 0
        cache = t.__dict__.setdefault("_period_moves", {})
        ck = (b, key, lowest, self.last_dc)
        got = cache.get(ck)
        if got is not None:
            return got
        k, u = key
        first = k == t.K
        dcs = ([self.last_dc] if self.last_dc is not None else range(lowest, t.K)) if first \
            else range(lowest, k + 1)
        got = []
        for k0 in dcs:
            U = Q = 0.0
            if not first:
                U, Q = float(t.occupancy(b, k0, k)), float(t.traversal(b, k0, k))
            base = u if (not first and k0 == k) else (0,) * len(self.groups_of[k0])
            for g in self.groups_of[k0]:
                gl = self.local[g]
                if base[gl] < int(t.count[g]):
                    got.append((g, k0, gl, base, U, Q))
        cache[ck] = got
        return got

    def time_of(self, x1: float, x2: float, fill: float) -> float:
        """``T_p`` of a complete label."""
        return fill + cost.steady_state(self.m, x1 + x2)

    def _loop(self) -> dict[int, list]:
        """Walk the layers backwards; return the complete plans kept per first DC."""
        t = self.t
        self.mode = (kernel.PHASES if self.gpipe_period else
                     kernel.LOOPS if self.loops else kernel.PLAIN)
        width = max(1, t.L if self.all_loops else self.p_cap) if self.loops else 1
        self.kept, self.pend = _Kept(width), _Pending.reused(t)
        self.generation = self.pend.generation
        self.ids: dict = {}
        self.keys: list = []
        # room for as many states as the instance's searches have made (they grow it)
        self.room = t.__dict__.setdefault("_period_states", [64])
        self.floor_tab = np.empty((self.room[0], t.L + 1))
        nq = 0 if self.chain is None else int(self.chain.held.shape[1])
        self.chain_tab = np.empty((self.room[0], nq, t.L + 1))
        self._start_curve()
        self.rival_sets: dict = {}
        self.targets: dict = {}
        self.done: dict[int, list] = {}
        self.need = np.asarray(self.need_at, dtype=float)
        self._kernel_args()
        root = self._kid((t.K, ()))
        self.kept.add(np.zeros((1, 5)), np.full((1, width), -np.inf), np.zeros(1, np.int64),
                      np.full((1, 3), -1, np.int64), t.L)
        segments = [(root, 0, 1)]
        for b in range(t.L, 0, -1):
            if b < t.L:
                segments = self._filter(b)
                if not segments and self.pend.head[:b].max() < 0:
                    break  # nothing kept here and nothing filed before: no plan to come
            self.stats["states"] += len(segments)
            self.stats["labels"] += sum(s1 - s0 for _, s0, s1 in segments)
            for kid, s0, s1 in segments:
                self.deadline.check()
                key = self.keys[kid]
                for g, k0, gl, base, U, Q in self._moves(b, key):
                    self._expand(b, s0, s1, g, k0, gl, base, U, Q)
        return {k: v for k, v in self.done.items() if v}

    def _kernel_args(self) -> None:
        """:func:`.period_kernel.expand`'s bounds (``fs[3:]``: ``R``'s limit, the period
        cap, ``M_p - 1``, ``upper`` and ``tau`` with their slack; ``fs[:3]`` are each
        move's) and, per group and DC, its integers (made once each per search)."""
        sync_lim = min(self.sync_cap * (1 + SLACK), np.nextafter(self.theta, -np.inf))
        self.fs = np.array([0.0, 0.0, 0.0, sync_lim, self.cap * (1 + SLACK), self.m - 1,
                            self.upper * (1 + SLACK), self.tau * (1 + SLACK)])
        self.ints: dict = {}

    def _kid(self, key: tuple) -> int:
        """The number of state ``key`` (the same in every layer). Its row of
        ``floor_tab`` holds, per layer ``b``, a floor under the period of every completion
        of the state there (the prefix ``[0, b)`` is still to place on DCs up to
        ``key``'s: :meth:`_prefix_floors`; none for the root)."""
        got = self.ids.get(key)
        if got is None:
            got = self.ids[key] = len(self.keys)
            self.keys.append(key)
            if got == len(self.floor_tab):
                self.floor_tab = _grown(self.floor_tab)
                self.curve = tuple(_grown(x) for x in self.curve[:2]) + self.curve[2:]
                self.chain_tab = _grown(self.chain_tab)
                self.room[0] = max(self.room[0], len(self.floor_tab))
            row = self.floor_tab[got]
            row[:] = -np.inf
            self.chain_tab[got] = 0.0
            if key[0] != self.t.K:
                row[1:] = self._prefix_floors(*key)[1][1:]
                if self.chain_tab.shape[1]:
                    self.chain_tab[got] = self._chain_rows(*key)
                if len(self.curve[2]):
                    self._curve_rows(got, *key)
        return got

    def _start_curve(self) -> None:
        """The prefix curve of the search's DC range (:mod:`.prefix_curve`; its windows
        capped too where every stage's loops count) when the period is capped: its grid of
        caps and, per state (made by :meth:`_kid`), the floors
        :func:`.period_kernel.curve_floor` reads."""
        t, grid = self.t, np.empty(0)
        if self.m > 1 and np.isfinite(self.cap) and self.cap > 0:
            self.prefix_curve = search_curve(t, self.m, self.first_dc, self.last_dc,
                                             self.theta if self.own_theta else np.inf)
            grid = self.prefix_curve.grid(self.cap * (1 + SLACK))[:self.prefix_curve.steps]
        self.caps = len(grid)  # the walks' caps
        if len(grid) and grid[-1] < self.cap * (1 + SLACK):  # periods past the last cap
            grid = np.append(grid, np.inf)  # (:meth:`_curve_rows`)
        J = len(grid)
        rows = len(self.floor_tab)
        self.curve = (np.empty((rows, t.L + 1, J)), np.empty((rows, t.L + 1, J)), grid)

    def _curve_rows(self, kid: int, k0: int, usage: tuple) -> None:
        """Write state ``kid = (k0, usage)``'s rows of the curve
        (:func:`.period_kernel.curve_rows`): per prefix end and cap ``i``, the least fill
        ``CF`` of the prefix under cap ``i`` and ``CS[i]``, the least of ``CF[i'] + (M_p -
        1) grid[i' - 1]`` over ``i' >= i``. Where the walks' caps stop below the search's
        period cap, a last cap ``inf`` stands for the periods past them, with the fill
        bound of :meth:`_prefix_floors` (a prefix the walks cannot place under any of
        their caps may still run at a period past them)."""
        walked = self.prefix_curve.rows(k0, usage, self.caps)
        kernel.curve_rows(walked, self._prefix_floors(k0, usage)[0], self.curve[2], self.m - 1,
                          self.caps, self.curve[0][kid], self.curve[1][kid])

    def _rivals(self, states: tuple):
        """:func:`rivals` of the states ``states`` (numbers), kept per search: the same
        sets of states recur from layer to layer."""
        got = self.rival_sets.get(states)
        if got is None:
            got = self.rival_sets[states] = rivals([self.keys[k] for k in states])
        return got

    def _filter(self, b: int) -> list[tuple[int, int, int]]:
        """The labels filed for layer ``b``, filtered per state (the Pareto rule, then the
        rule across states of one DC) and kept: ``(state, first, end)`` per state, ranges
        of the kept store."""
        pend, kept = self.pend, self.kept
        if pend.head[b] < 0:
            return []
        # at most b stages come before: with p + b < M_p every one sits below M_p (its
        # loops count, whatever p); without loops p only matters to memory
        p_free = float(self.m - b) if self.loops and not self.all_loops else np.inf
        bounds = Rule(p_free, self.m - 1, self.upper, self.tau,
                      shift=not self.gpipe_period).bounds()
        # each state's labels by period raised to its floor (with shift), Pareto within it
        ids, S, starts, states, floors, H, HL = kernel.filter_layer(
            pend.head, b, pend.PF, pend.PI, self.floor_tab, kept.H, kept.HL,
            kept.H.shape[1], self.mode, self.all_loops, self.p_cap, *bounds, CHUNK)
        alive = np.ones(len(ids), dtype=np.bool_)
        states = states.tolist()
        if len(states) > 1:
            order, ptr, rv = self._rivals(tuple(states))
            if len(rv):
                kernel.across(S, H, HL, alive, starts, floors, order, ptr, rv, *bounds)
        S, H, HL, par, counts = kernel.keep_layer(ids, pend.PI, S, H, HL, alive, starts,
                                                  pend.head, b)
        first = kept.add(S, H, HL, par, b)
        ends = (first + np.cumsum(counts)).tolist()
        return [(k, e - c, e) for k, c, e in zip(states, counts.tolist(), ends) if c]

    def _prefix_floors(self, k0: int, usage: tuple) -> tuple[np.ndarray, np.ndarray]:
        """Per prefix end ``a``: floors under the fill and the period of ``[0, a)`` placed
        on DCs ``<= k0`` with ``usage`` taken on DC ``k0``. Fill: the FLOP on the fastest
        widest stage, or the fill bound of the free devices at the period cap
        (``tables.fill_curve``). Period: :meth:`_static_top`, and the largest cap of the
        prefix curve under which the prefix cannot fit."""
        key = (k0, usage)
        got = self._floors.get(key)
        if got is None:
            t = self.t
            top, rates = self._static_top(k0, usage)
            cap = float(self.cap) if np.isfinite(self.cap) and self.m > 1 else 0.0
            walked = self.prefix_curve.rows(k0, usage, self.caps) if self.caps else _NONE
            got = self._floors[key] = (np.empty(t.L + 1), np.empty(t.L + 1))
            kernel.prefix_floors(self.pre_sum[k0], top, rates, cap, t.flop_prefix, walked,
                                 self.curve[2], self.caps, *got)
        return got

    def _static_top(self, k0: int, usage: tuple) -> tuple[np.ndarray, np.ndarray]:
        """What :meth:`_prefix_floors` reads that depends on neither the period cap nor
        the search's bounds, kept across the searches of the DC ranges of one first DC
        (on the capacity, which every search shares; what it reads lies on the state's DC
        and those before it): per prefix end, a floor under the period (at least
        every ``C``: the largest layer on the fastest widest stage, or the least
        bottleneck under which the free devices hold the prefix's FLOP, ``dp.LayerCapacity``
        when given, and ``dp.ChainCapacity`` with the prefix's stages at position 2 or
        later, for a pipeline of at least as many microbatches as it tells positions
        apart; per label, at the label's positions, :meth:`_chain_rows`); and the free
        devices' rates ``n_g r_g``, positive ones in falling order (``tables.fill_curve``'s
        order: the fill bound at a cap ``x`` is ``x`` per group, filled in that order)."""
        home = self._tops
        # not the last DC's: a state's DC and those before it are all the floors read
        key = (self.first_dc, self.chain is not None, k0, usage)
        got = home.get(key)
        if got is None:
            t = self.t
            rates = [float(t.rate[h] * t.count[h]) for h in range(t.G)
                     if t.group_dc[h] < k0 and self.usable[h]]
            rates += [float(t.rate[h] * (t.count[h] - x))
                      for h, x in zip(self.groups_of[k0], usage)]
            rates = np.asarray(sorted((r for r in rates if r > 0), reverse=True))
            top = self.pre_max[k0]
            if self.capacity is not None:
                before = [h for h in range(t.G) if t.group_dc[h] < k0 and self.usable[h]]
                here = tuple((h, int(t.count[h]) - x) for h, x in zip(self.groups_of[k0], usage))
                need = self.capacity.held_prefixes(before, here, t.flop_prefix)
                top = np.maximum(top, need)
                if self.chain is not None:  # (M_p at least its positions: Holds.chain)
                    # a stage is placed after the prefix: its stages sit at position 2 on
                    rows = self._chain_rows(k0, usage)
                    top = np.maximum(top, rows[min(1, len(rows) - 1)])
                top[0] = 0.0
            got = home[key] = (np.asarray(top, dtype=float), rates)
        return got

    def _chain_rows(self, k0: int, usage: tuple) -> np.ndarray:
        """Per position ``q`` and prefix end ``a``: the chain's floor under the period of
        ``[0, a)`` placed on DCs ``<= k0`` with ``usage`` taken on ``k0``, its stages at
        (0-based) position ``q`` or later (``dp.ChainCapacity``; ``M_p`` at least its
        positions). :func:`.period_kernel.expand` reads it per label at
        :func:`.period_kernel.label_position`."""
        got = self.chain_rows.get((k0, usage))
        if got is None:
            t = self.t
            here = [(h, int(t.count[h]) - x) for h, x in zip(self.groups_of[k0], usage)]
            got = self.chain.position_floors(k0, here, t.flop_prefix)
            got[:, 0] = 0.0
            self.chain_rows[k0, usage] = got
        return got

    def _targets(self, k0: int, base: tuple, g: int, gl: int):
        """Per width of group ``g``'s options: the state after a stage of that width
        (from usage ``base`` on DC ``k0``) and its prefix floors (fill, period) by
        prefix end; widths past the free devices get none (the kernel skips them)."""
        key = (k0, base, g)
        got = self.targets.get(key)
        if got is None:
            t = self.t
            widths = self.widths[g]
            free = int(t.count[g]) - base[gl]
            kids = np.full(len(widths), -1, dtype=np.int64)
            F, T = np.zeros((len(widths), t.L + 1)), np.zeros((len(widths), t.L + 1))
            for x, w in enumerate(widths.tolist()):
                if w <= free:
                    usage = base[:gl] + (base[gl] + int(w),) + base[gl + 1:]
                    kids[x] = self._kid((k0, usage))
                    F[x], T[x] = self._prefix_floors(k0, usage)
            got = self.targets[key] = (widths, kids, F, T)
        return got

    def _expand(self, b, s0, s1, g, k0, gl, base, U, Q) -> None:
        """Prepend every candidate stage ``[a, b)`` of group ``g`` to the kept labels
        ``s0..s1`` of a state (:func:`.period_kernel.expand`: the bound with the state's
        least label values, then per label with the period's floor ``max(x1 + x2, C, U)``
        before the loops), then keep the complete plans made."""
        rows = self.cands[g][b]
        if rows is None:
            return
        widths, kids, F, T = self._targets(k0, base, g, gl)
        fs = self.fs  # the move's three, then the search's bounds (:meth:`_kernel_args`)
        fs[0], fs[1], fs[2] = U, Q, int(self.t.count[g]) - base[gl]
        ints = self.ints.get((g, k0))
        if ints is None:
            complete = self.first_dc is None or k0 == self.first_dc
            ints = self.ints[g, k0] = np.array(
                [g, self.p_cap, self.mode, self.all_loops, complete], dtype=np.int64)
        pend, kept = self.pend, self.kept
        since, start = int(pend.head[0]), 0
        while True:
            pend.n, start = kernel.expand(kept.S, kept.H, kept.HL, s0, s1, rows, widths, kids,
                                          F, T, self.chain_tab, self.need, fs, ints, pend.PF, pend.PI,
                                          pend.head, pend.n, start, self.curve)
            if start < 0:
                break
            pend.grow()
        if pend.head[0] != since:
            for e in kernel.gather(pend.head, 0, pend.PI, since).tolist():
                self._complete(k0, e)

    def _complete(self, k0: int, e: int) -> None:
        """Keep the complete plan of pending entry ``e`` (first DC ``k0``) if no kept one
        is as good in both terms."""
        x1, x2, sm, r = self.pend.PF[e, :4].tolist()
        T = self.time_of(x1, x2, sm)
        value = T + r
        if value >= self.upper or T > self.tau * (1 + SLACK):
            return
        kept = self.done.setdefault(k0, [])
        if any(x[0] <= T and x[1] <= r for x in kept):
            return
        kept[:] = [x for x in kept if not (T <= x[0] and r <= x[1])] + [
            (T, r, e, sm, x1 + x2)]
        if self.tighten == "sum":
            self.upper = value
        else:
            self.tau = T
        self._kernel_args()

    def backtrack(self, parent: int) -> list[tuple[int, int, int, int, int, int]]:
        """The stages ``(start, end, dc, group in dc, d, t)`` of the plan completed by
        pending entry ``parent``."""
        t, kept = self.t, self.kept
        if self.pend.generation != self.generation:
            raise RuntimeError("backtrack after another search of the same instance began")

        def stage(a, b, g, ci):
            opts = t.options(g)
            return (a, b, int(t.group_dc[g]), t.groups[g].index, int(opts.d[ci]),
                    int(opts.t[ci]))

        i, g, ci = self.pend.PI[parent, 1:4].tolist()
        stages = [stage(0, int(kept.lay[i]), g, ci)]
        while kept.par[i, 0] >= 0:
            j, g, ci = kept.par[i].tolist()
            stages.append(stage(int(kept.lay[i]), int(kept.lay[j]), g, ci))
            i = j
        return stages


class _Kept:
    """The kept labels of a search: rows ``[x1, x2, sum, R, p]``, majorants (``H``, their
    lengths ``HL``), parents ``[kept label, group, pair]`` and layers, grown by doubling."""

    def __init__(self, width: int):
        self.n = 0
        self.S, self.H = np.zeros((64, 5)), np.full((64, width), -np.inf)
        self.HL = np.zeros(64, dtype=np.int64)
        self.par, self.lay = np.zeros((64, 3), dtype=np.int64), np.zeros(64, dtype=np.int64)

    def add(self, S, H, HL, par, layer: int) -> int:
        """Append labels of ``layer``; return the index of the first."""
        first, k = self.n, len(S)
        if first + k > len(self.S):
            size = max(2 * len(self.S), first + k)
            for name in ("S", "H", "HL", "par", "lay"):
                old = getattr(self, name)
                new = np.empty((size,) + old.shape[1:], dtype=old.dtype)
                new[:first] = old[:first]
                setattr(self, name, new)
        self.S[first:first + k], self.H[first:first + k] = S, H
        self.HL[first:first + k], self.par[first:first + k] = HL, par
        self.lay[first:first + k] = layer
        self.n += k
        return first


class _Pending:
    """The labels made and not yet filtered: ``PF = [x1, x2, sum, R, c, Q]``, ``PI = [p,
    parent, group, pair, state, next]``, a list per layer from ``head`` (newest first);
    a filtered layer's entries are released for reuse (the list ``head[-1]``)."""

    def __init__(self, layers: int):
        self.n = self.generation = 0
        self.PF, self.PI = np.zeros((1 << 14, 6)), np.zeros((1 << 14, 6), dtype=np.int64)
        self.head = np.full(layers + 2, -1, dtype=np.int64)  # the last: released entries

    @classmethod
    def reused(cls, tables: CostTables) -> _Pending:
        """The store of the instance's last search, emptied (the searches of one solve
        run one after another; its arrays keep the room they grew to)."""
        got = tables.__dict__.get("_period_pending")
        if got is None:
            got = tables.__dict__["_period_pending"] = cls(tables.L)
        got.n = 0
        got.head[:] = -1
        got.generation += 1
        return got

    def grow(self) -> None:
        """Double the room."""
        self.PF = np.concatenate([self.PF, np.zeros_like(self.PF)])
        self.PI = np.concatenate([self.PI, np.zeros_like(self.PI)])


def _grown(a: np.ndarray) -> np.ndarray:
    """``a`` with twice its rows (the new ones unset)."""
    out = np.empty((2 * len(a),) + a.shape[1:])
    out[:len(a)] = a
    return out


def search_curve(tables: CostTables, m: int, first_dc: int | None,
                 last_dc: int | None, theta: float = np.inf) -> PrefixCurve:
    """The prefix curve a search of ``m`` microbatches on DCs ``first_dc..last_dc``
    (``None``: from the first, to the last) with every ``R < theta`` uses. Its windows are
    capped only for one pipeline over the chain where every loop counts: a range's walks,
    ``C`` and ``U`` capped only, then serve its searches at every ``M_p`` (and its floors,
    ``dp_ranges``). A range's walks leave out the options with ``R >= theta``, as its
    searches do, a range of one DC too (a fresh ``-03``-like instance, seed 6: a search of
    DCs ``0..1`` at ``M_p = 44`` and ``theta = 0.43`` kept 12,252 labels instead of
    112,301)."""
    training = tables.instance.training
    every_loop = (training.objective == "period" and tables.schedule == "1f1b"
                  and m > tables.L)
    ranged = first_dc is not None
    last = tables.K - 1 if last_dc is None else last_dc
    return PrefixCurve.of(tables, first_dc or 0, last, ranged, every_loop and not ranged,
                          theta if ranged else np.inf)
