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
seeded with base labels; it runs on the same compiled kernel
(:mod:`chainpipe.solvers.label_kernel`: its Pareto filters, defined in :mod:`..labels`,
the shifted dominance of ``T`` included under data or tensor parallelism), with labels
as arrays; the agent's data stay in its own process, as before. A
label is dropped when its own cost, plus an optional optimistic cost of the
prefix ``[0, a)`` (only DC 1 has one: the prefix must then run on its own
devices), cannot beat the upper bound ``ub``.
"""

from __future__ import annotations

import bisect
import math
import threading
from collections import OrderedDict
from collections.abc import Mapping

import numpy as np

from ... import cost
from ...deadline import Deadline
from ..labels import BOUND_SLACK
from .local_aot import load

#: per DC (its one-DC instance without ``M_p`` under 1F1B, :func:`.agent.floors_key`),
#: ``sync_cap`` and group: the dominance among its options in a form that holds at every
#: ``M_p`` up to the count it was built at (:func:`dominance_by_count`); the last 64 kept
_DOMINANCE: OrderedDict = OrderedDict()
_DOMINANCE_LOCK = threading.Lock()  # an agent server runs its sessions in threads


def dominance_by_count(ok, C, N, R, W, check=None) -> tuple[np.ndarray, np.ndarray]:
    """:func:`~chainpipe.tables.dominated_options` at every count ``M`` at once, for
    in-flight limits ``min(N, M)`` (``N``: the limits at the largest count, ``ok`` not
    reading ``M``): ``(T1, B)``, arrays ``[c, i, j]``, with option ``c`` dominated at ``M``
    iff ``M <= T1`` or (``M > N[c]`` and ``B``).

    With ``n = min(N, M)``, an allowed rival ``r`` (no more devices) dominates ``c`` iff
    ``C_r <= C_c``, ``R_r <= R_c``, ``n_r >= n_c`` and (fewer devices or listed first, or
    ``C_r < C_c``, or ``R_r < R_c``, or ``n_r > n_c``). Where the part in brackets holds
    without ``n``, it needs only ``n_r >= n_c``: always if ``N_r >= N_c``, else iff ``M <=
    N_r`` (``T1``: the largest such threshold). Else it needs ``n_r > n_c``: iff ``N_r >
    N_c`` and ``M > N_c`` (``B``: such a rival exists, whatever the brackets). Compiled
    (:func:`.local_fast.count_dominance`); ``check`` is called once."""
    if check is not None:
        check()
    _mask, T1, B = _built(_flat(ok, C, N, R, W), 0)
    return T1.reshape(ok.shape), B.reshape(ok.shape)


def _built(flat: list, M: int) -> tuple:
    """:func:`.local_fast.dominance_at` on ``flat`` (:func:`_flat`) with its thresholds
    built afresh: ``(dominated at M, T1, B)``, flat ``[c, e]``."""
    T1, B = np.zeros(flat[0].shape), np.zeros(flat[0].shape, dtype=bool)
    return kernel.dominance_at(*flat, T1, B, M, True), T1, B


#: a count above every in-flight limit: at it :func:`.local_fast.dominance_at`'s test is
#: the count-free one of :func:`~chainpipe.tables.dominated_options` (:func:`dominated`)
_ABOVE_EVERY_LIMIT = 2 ** 62


def dominated(ok, C, N, R, W, check=None) -> np.ndarray:
    """:func:`~chainpipe.tables.dominated_options` (without its ``extra`` arrays),
    compiled: :func:`.local_fast.dominance_at` at a count above every limit ``N``, where
    ``M <= T1`` holds iff a rival of no lower limit dominates and ``M > N`` always (so a
    rival of a higher limit dominates through ``B``). ``check`` is called once.
    (``v3-medium-04-gpipe``-like draws: the agents' bounded runs and every GPipe run
    called the interpreted rule, 11% of a solve.)"""
    if check is not None:
        check()
    return _built(_flat(ok, C, N, R, W), _ABOVE_EVERY_LIMIT)[0].reshape(np.shape(ok))


def beam_rows(starts: np.ndarray, X: np.ndarray, M: int, beam: int) -> tuple:
    """Per state (rows ``starts[s]:starts[s + 1]`` of ``X``, ``(mx, sm, p, r)``) its
    ``beam`` labels of least ``T`` estimate (:func:`~chainpipe.cost.iteration_time` at
    ``M``), ties in row order, all if it has no more: ``(rows, state)``, the rows ascending
    and each one's state index. One sort by state, then estimate, then row (a stable
    ``argsort`` per state before)."""
    of = np.repeat(np.arange(len(starts) - 1), np.diff(starts))
    order = np.lexsort((cost.iteration_time(X[:, 1], X[:, 0], M, X[:, 3]), of))
    rows = np.sort(order[np.arange(len(order)) - starts[of] < beam])
    return rows, of[rows]


def _flat(ok, C, N, R, W) -> list:
    """The options' arrays as :func:`.local_fast.dominance_at` takes them: ``[c, e]``,
    ``N`` as floats."""
    shape = (len(W), int(np.prod(np.shape(ok)[1:], dtype=np.int64)))  # no options: 0 rows
    return [*(np.ascontiguousarray(np.asarray(v).reshape(shape), dtype=t)
              for v, t in ((ok, bool), (C, float), (N, float), (R, float))),
            np.ascontiguousarray(W, dtype=np.int64)]

#: the label kernels (compiled ahead of time when built, :mod:`.local_aot`)
kernel = load()

#: the first size of the states' hash table, their usage rows and the extensions' rows
#: (:func:`.local_fast.extend_layer` doubles each when full); a power of two
TABLE_SLOTS = 64

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

    def _candidates(self, ub: float, grid=None, arrays: bool = False
                    ) -> list[list[list[tuple]]]:
        """``[g][x]``: per pair ``c`` of group ``g`` not dominated by another,
        ``(devices, c, stages)`` with ``stages`` the ``(a, C, max in flight, R)`` of
        ``[a, x)`` (with ``arrays``: as the rows of a float array), ``a`` descending, while :meth:`option_fits` holds (a run of starts;
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
        limit = ub * (1 + 1e-9)
        if ub < math.inf:
            self.bound_cut |= any(t > limit for t in worst)
        out = []
        for per_end in full:
            rows = []
            for per in per_end:
                row = []
                for w, c, arr, tops in per:
                    k = len(arr) if ub == math.inf else bisect.bisect_right(tops, limit)
                    if k:
                        got = arr if k == len(arr) else arr[:k]
                        row.append((w, c, got if arrays else list(map(tuple, got.tolist()))))
                rows.append(row)
            out.append(rows)
        return out

    def _unbounded(self, grid) -> tuple[list, list[float]]:
        """The candidate runs without a bound (:meth:`_direct_candidates`), each with, per
        stage, the largest ``M C + R`` of a stage alone from ``x - 1`` down to its start
        (skipped starts included), and per group the largest ``M C + R`` of an option that
        fits memory: built once per tables and grid. (Not shared across ``M``: the
        in-flight limits are capped at ``M``, and with them which pairs dominate.)"""
        cache = self.t.__dict__.setdefault("_cdynp_runs", {})
        key = None if grid is None else frozenset(grid)
        got = cache.get(key)
        if got is None:
            got = cache[key] = self._direct_candidates(math.inf, grid, tops=True)
        return got

    def _direct_candidates(self, ub: float, grid=None, tops: bool = False):
        """:meth:`_candidates` computed from the options (``tops``: as :meth:`_unbounded`
        keeps them, ``(runs as arrays with tops, worst per group)``), per group from arrays
        ``[pair, a, x]`` (:func:`.local_fast.candidate_runs`): a run ends after the largest
        ``a < x`` that fails :meth:`option_fits`."""
        L = self.L
        out, worst = [], []
        for rows, top, runs, widths, high in self._group_runs(ub, grid):
            worst.append(high)
            if tops:
                top = top.tolist()
            else:
                stages = list(map(tuple, rows.tolist()))
            per_end: list = [[] for _ in range(L + 1)]
            widths = widths.tolist()
            for c, x, s, e in runs.tolist():
                per_end[x].append((widths[c], c, rows[s:e], top[s:e]) if tops
                                  else (widths[c], c, stages[s:e]))
            out.append(per_end)
        return (out, worst) if tops else out

    def _group_runs(self, ub: float, grid=None):
        """Per group, what :func:`.local_fast.candidate_runs` gives (``rows, top, runs``),
        the options' widths and the largest ``M C + R`` of an option that fits memory
        (:meth:`_direct_candidates`)."""
        on = np.array([grid is None or x in grid for x in range(self.L + 1)])
        for g in range(self.t.G):
            self.deadline.check()
            opts = self.t.options(g)
            ok = self.option_fits(g, ub)
            with np.errstate(invalid="ignore"):  # inf * 0 where M = 1: not a stage
                alone = cost.iteration_time(opts.compute_time, opts.compute_time, self.M,
                                            opts.sync_time)
            alone = np.where(np.isnan(alone), math.inf, alone)
            high = float(alone[ok].max()) if ok.any() else -math.inf
            beaten = self._dominated(g, ok, opts) if ub == math.inf else (
                dominated(ok, opts.compute_time, opts.max_in_flight, opts.sync_time,
                          opts.width, self.deadline.check))
            # the runs, compiled; the largest M C + R from x - 1 down to each start
            rows, top, runs = kernel.candidate_runs(*(np.ascontiguousarray(v) for v in (
                ok, beaten, on, opts.compute_time, opts.max_in_flight.astype(np.int64),
                opts.sync_time, alone)))
            yield rows, top, runs, opts.width, high

    def _flat(self, grid) -> FlatRuns:
        """The candidate runs without a bound as :class:`FlatRuns`, built once per tables
        and grid (kept on the tables, as :meth:`_unbounded` keeps its lists)."""
        cache = self.t.__dict__.setdefault("_cdynp_flat", {})
        key = None if grid is None else frozenset(grid)
        got = cache.get(key)
        if got is None:
            got = cache[key] = FlatRuns(self.L, list(self._group_runs(math.inf, grid)))
        return got

    def _dominated(self, g: int, ok: np.ndarray, opts) -> np.ndarray:
        """:func:`~chainpipe.tables.dominated_options` of group ``g``'s options (``ok``: those
        that fit memory, whatever the bound), from :func:`dominance_by_count` kept per DC,
        ``sync_cap`` and group across ``M_p`` under 1F1B (remade at a larger count: an
        in-flight limit at ``M_p`` is the one at a larger count capped at ``M_p``)."""
        if self.t.schedule == "gpipe":  # the least stash is M_p: ok reads it
            return dominated(ok, opts.compute_time, opts.max_in_flight, opts.sync_time,
                             opts.width, self.deadline.check)
        from .agent import floors_key

        base = self.t.__dict__.get("_cdynp_base")
        key = (floors_key(self.t.instance), None if base is None else base[1], g)
        with _DOMINANCE_LOCK:
            got = _DOMINANCE.get(key)
            if got is not None:
                _DOMINANCE.move_to_end(key)
        flat = _flat(ok, opts.compute_time, opts.max_in_flight, opts.sync_time, opts.width)
        if got is None or got[0] < self.M:
            self.deadline.check()
            mask, T1, B = _built(flat, self.M)
            with _DOMINANCE_LOCK:
                _DOMINANCE[key] = (self.M, flat[2], T1, B)
                while len(_DOMINANCE) > 64:
                    _DOMINANCE.popitem(last=False)
        else:  # the limits at the count it was built at: flat[2] replaced
            _at_count, N, T1, B = got
            mask = kernel.dominance_at(*flat[:2], N, *flat[3:], T1, B, self.M, False)
        return mask.reshape(ok.shape)

    def label(self, i: int) -> tuple[int, int, int, tuple]:
        """Own label ``i`` (an index in :attr:`points`): ``(start, group, pair, ref)``, its
        first stage ``[start, end)`` on ``group`` with that pair of
        :meth:`~chainpipe.tables.CostTables.options`, and ``ref`` where the plan
        continues: own label ``(OWN, j, 0)`` (``end`` is its start), incoming entry and
        point ``(IN, e, p)`` or ``(END, 0, 0)`` (``end = L``)."""
        row = self._store[i]
        return row[0], row[1], row[2], (row[3], row[4], row[5])

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
        stage ending at ``x`` (:meth:`_extend`). The labels are arrays and the work per
        label is :mod:`chainpipe.solvers.label_kernel`'s (``local_layer``,
        ``local_extend``): the images of a layer's stages wait in an
        arena of blocks until their layer is filtered.
        """
        L, G = self.L, self.t.G
        self._flat_runs = self._flat(grid)
        cut = ub * (1 + 1e-9) if ub < math.inf else math.inf
        if ub < math.inf:  # as _candidates sets it
            self.bound_cut |= any(t > cut for t in self._flat_runs.worst)
        self._runs = self._flat_runs.cut(cut)
        self._limit = ub * (1 + 1e-12) if ub < math.inf else math.inf
        self._beam = int(beam)
        self._base = base
        pre = prefix if prefix is not None else ([0.0] * (L + 1), [0.0] * (L + 1))
        self._pre = np.array([pre[0], pre[1], [0.0] * (L + 1) if spread is None else
                              spread[0]], dtype=float)
        self._spread = spread
        self._count = np.array([int(min(c, L * self.t.widest)) for c in self.t.count],
                               dtype=np.int64)
        #: a usage as one integer: sum of u[g] * stride[g] (mixed radix)
        self._stride = np.cumprod([1, *(self._count[:-1] + 1)]).astype(np.int64)
        # in-flight count of a new stage placed before r stages
        self._need_at = np.asarray(self.t.in_flight(np.arange(1, self.R + 2)), dtype=np.int64)
        # the states (:func:`.local_fast.extend_layer`): a hash table of their usage codes
        # (code 0, no device in use, the base labels' state, id 0 at slot 0), their usage
        # by global id, per extension (meta) its source and group, and the counts of both
        self._table = np.full((TABLE_SLOTS, 2), -1, dtype=np.int64)
        self._table[0] = 0
        self._usage = np.zeros((TABLE_SLOTS, G), dtype=np.int64)
        self._meta = np.empty((TABLE_SLOTS, 2), dtype=np.int64)
        self._sizes = np.array([1, 0], dtype=np.int64)
        self._base_refs: dict[int, np.ndarray] = {}  # x -> refs of its kept base labels
        self._arena = kernel.new_arena(L, blocks=64)
        self._stored = 0
        self._own: list[tuple[int, np.ndarray]] = []  # per layer (x, own labels' parents)
        self._rows = None  # the store's rows, made when first read (:attr:`_store`)
        self.points = Points()
        labels_total = 0
        for x in range(L, -1, -1):
            self.deadline.check()
            layer = self._filter(x, base.get(x, ()))
            if layer is None:
                continue
            labels_total += len(layer[2])
            self._finalise(x, layer)
            if x > 0:
                self._extend(x, layer)
        self._arena = self._base = None
        self.stats["labels"] = labels_total

    def _filter(self, x: int, base_x) -> tuple | None:
        """The labels of layer ``x`` (its base labels, then the images filed for it) kept
        by the Pareto filters (shifted dominance under parallelism; per state at most
        :attr:`_beam` with a beam) and across usage states, as
        :func:`~chainpipe.solvers.label_kernel.local_layer` returns them (``None``: no
        label)."""
        if not base_x and self._arena[3][x] < 0:  # no image filed for x (its chain's head)
            return None
        F, I = kernel.take_layer(x, *self._arena)
        if base_x:
            bf = np.array([(lab[0], lab[1], lab[3]) for lab in base_x], dtype=float)
            bi = np.zeros((len(base_x), 5), dtype=np.int64)
            bi[:, 0] = [lab[2] for lab in base_x]
            bi[:, 1] = np.arange(len(base_x))
            bi[:, 2], bi[:, 4] = -1, -1 - x
            F, I = np.concatenate((bf, F)), np.concatenate((bi, I))
        if not len(F):
            return None
        usage = self._usage[:self._sizes[0]]
        steady = self.M - 1
        if not self._beam:
            return kernel.local_layer(F, I, usage, self.sync, steady, True)
        ids, starts, X, parents, _kill = kernel.local_layer(F, I, usage, self.sync, steady,
                                                            False)
        rows, of = beam_rows(starts, X, self.M, self._beam)
        state = ids[of]
        I2 = np.stack([X[rows, 2].astype(np.int64), parents[rows, 1], parents[rows, 2],
                       state, parents[rows, 0]], axis=1)
        return kernel.local_layer(np.ascontiguousarray(X[rows][:, [0, 1, 3]]), I2, usage,
                                  self.sync, steady, True)

    def _finalise(self, x: int, layer: tuple) -> None:
        """Give own labels store indices and list them in :attr:`points`; keep the base
        labels' references and the own labels' parents (:attr:`_store`)."""
        ids, starts, X, parents, _kill = layer
        lo = 0
        if ids[0] == 0:  # the base labels (state 0, listed first): their own references
            lo = int(starts[1])
            refs = np.array([lab[4] for lab in self._base[x]], dtype=np.int64)
            self._base_refs[x] = refs[parents[:lo, 1]]
        self._layer_off = self._stored - lo  # store index of row lo + i is _layer_off + lo + i
        if len(X) > lo:
            self._own.append((x, parents[lo:]))
            self.points.add(x, X[lo:], self._stored)
            self._stored += len(X) - lo

    @property
    def _store(self) -> list[list[int]]:
        """Per own label its row ``(start, group, pair, kind, j, p)`` (:meth:`label`), made
        from the labels' parents when first read (a run's caller walks back one plan, if
        any): the extension's source and group (``_meta``), then the parent, own or a base
        label's reference."""
        if self._rows is None:
            P = (np.concatenate([p for _x, p in self._own]) if self._own
                 else np.zeros((0, 3), dtype=np.int64))
            meta = self._meta[P[:, 0]]
            off, label = meta[:, 0], P[:, 1]
            rows = np.empty((len(P), 6), dtype=np.int64)
            rows[:, 0] = np.repeat([x for x, _p in self._own], [len(p) for _x, p in self._own])
            rows[:, 1], rows[:, 2] = meta[:, 1], P[:, 2]
            own = off >= 0
            rows[own, 3], rows[own, 4], rows[own, 5] = OWN, off[own] + label[own], 0
            for src in np.unique(off[~own]).tolist():  # parents among base labels at -1 - src
                at = off == src
                rows[at, 3:] = self._base_refs[-1 - src][label[at]]
            self._rows = rows.tolist()
        return self._rows

    def _extend(self, x: int, layer: tuple) -> None:
        """Prepend every candidate stage ``[a, x)`` to the labels of each state of
        ``layer`` (labels at ``x``), filing the images for layer ``a``: one compiled call
        for the layer (:func:`.local_fast.extend_layer`, which gives each state's images
        their states and extension ids and runs
        :func:`~chainpipe.solvers.label_kernel.local_extend` per state).

        The bound is tested without assembling ``T`` per label and stage: with ``bU`` the
        label's bottleneck lifted to the boundary's occupancy, ``h`` the larger of the
        stage's ``C`` and the prefix's bottleneck, ``T`` is the label's sum plus a term of
        the stage alone (``bU <= h``) or the label's sum and bottleneck plus the stage's
        and prefix's sums (``bU > h``); the same without the prefix for the test that
        stops the run of stages. The limits are widened a hair, so that rounding never
        cuts what assembling ``T`` would keep. A label whose killer a stage lifts to the
        same bottleneck is not extended (:func:`~chainpipe.solvers.labels.killers`).
        """
        ids, starts, X, _parents, kill = layer
        runs, gw_of, stages, gw = self._runs.layer(x)
        if not len(runs):
            return
        limit = self._limit + self._limit * BOUND_SLACK
        move = np.array([self.u_int[x], self.q_int[x], limit, self.M - 1, self.R, 0.0])
        caps = np.zeros((0, 3))
        if self._spread is not None:
            move[5] = self._spread[1]
            caps = np.array(self._spread[2], dtype=float).reshape(-1, 3)
        at = np.array([x, self._layer_off, 0], dtype=np.int64)
        while True:
            cut, short, at[2], self._table, self._usage, self._meta = kernel.extend_layer(
                X, kill, starts, ids, runs, stages, gw, gw_of, self._count, self._stride,
                self._table, self._usage, self._meta, self._sizes, move, at, self._need_at,
                self._pre, caps, *self._arena)
            if cut:
                self.bound_cut = True
            if not short:
                break
            self._arena = kernel.grown(self._arena, short)

    def _runs_at(self, x: int) -> tuple:
        """The candidate runs ending at ``x``, as :func:`~chainpipe.solvers.label_kernel.
        local_extend` takes them: ``runs`` (per run: group, width, pair, end row in
        ``stages``, and its ``(group, width)``'s index in ``gws``), ``stages`` and ``gws``,
        the distinct ``(group, width)`` pairs."""
        return self._runs.at(x)


class Points(Mapping):
    """:attr:`DCRun.points` of a :class:`LocalDP` run: per start ``x`` its own labels'
    ``(r, bottleneck, total, sync, label index)``, made from the layer's rows when first
    read (a failed trial's, and DC 1's, caller reads only ``x = 0``)."""

    def __init__(self):
        self._rows: dict[int, tuple[np.ndarray, int]] = {}
        self._made: dict[int, list[tuple]] = {}

    def add(self, x: int, X: np.ndarray, index: int) -> None:
        """The labels starting at ``x``: rows ``(mx, sm, r, sync)`` of ``X``, numbered from
        ``index``."""
        self._rows[x] = (X, index)

    def __getitem__(self, x: int) -> list[tuple]:
        got = self._made.get(x)
        if got is None:
            X, index = self._rows[x]
            got = self._made[x] = list(zip(
                X[:, 2].astype(np.int64).tolist(), X[:, 0].tolist(), X[:, 1].tolist(),
                X[:, 3].tolist(), range(index, index + len(X))))
        return got

    def __contains__(self, x) -> bool:
        return x in self._rows

    def __iter__(self):
        return iter(self._rows)

    def __len__(self) -> int:
        return len(self._rows)


class FlatRuns:
    """Every candidate run without a bound (:meth:`LocalDP._group_runs`), by end: per end
    ``x`` its runs in the order :meth:`LocalDP._candidates` lists them (groups ascending,
    then pairs), their stages' rows and tops one block, so that :meth:`at` cuts them under
    a bound and gives :meth:`LocalDP._runs_at`'s arrays with a few array operations
    instead of a list per run.

    Parameters
    ----------
    L : int
        Layers.
    groups : list
        Per group ``(rows, top, runs, widths, worst)``, as :meth:`LocalDP._group_runs`
        yields them.
    """

    def __init__(self, L: int, groups: list):
        #: per group the largest ``M C + R`` of an option that fits memory
        self.worst = [high for *_rest, high in groups]
        parts, heads, tops, offset = [], [], [], 0
        for g, (rows, top, runs, widths, _high) in enumerate(groups):
            c, x, s, e = runs.T
            heads.append(np.stack([x, np.full(len(c), g), widths[c], c, s + offset,
                                   e - s], axis=1))
            parts.append(rows)
            tops.append(top)
            offset += len(rows)
        heads = np.concatenate(heads) if heads else np.zeros((0, 6), dtype=np.int64)
        heads = heads[np.argsort(heads[:, 0], kind="stable")].astype(np.int64)
        #: the stages' rows and tops, a group's runs after another's (each run's together)
        self.rows = np.concatenate(parts) if parts else np.zeros((0, 4))
        self.top = np.concatenate(tops) if tops else np.zeros(0)
        #: per run (by end, group, pair) ``(group, width, pair, stages)``, its end ``x``
        #: and its first row; the runs of end ``x`` are ``first[x]:first[x + 1]``
        self.runs = np.ascontiguousarray(heads[:, [1, 2, 3, 5]])
        self.end = np.ascontiguousarray(heads[:, 0])
        self.begin = np.ascontiguousarray(heads[:, 4])
        self.first = np.searchsorted(heads[:, 0], np.arange(L + 2), side="left")
        self.L = L

    def at(self, x: int, limit: float) -> tuple:
        """The runs ending at ``x`` cut at the first start whose top exceeds ``limit``
        (:meth:`LocalDP._candidates`), as :meth:`LocalDP._runs_at` returns them."""
        return self.cut(limit).at(x)

    def cut(self, limit: float) -> CutRuns:
        """Every run cut at the first start whose top exceeds ``limit`` (tops ascend along
        a run: its kept rows are a prefix of it), runs left without a stage dropped; the
        kept rows gathered in the runs' order."""
        runs, end, begin = self.runs, self.end, self.begin
        k = runs[:, 3]
        if limit < math.inf and len(runs):
            kept = np.concatenate(([0], np.cumsum(self.top <= limit)))
            k = kept[begin + k] - kept[begin]
            live = k > 0
            runs, end, begin, k = runs[live], end[live], begin[live], k[live]
        ends = np.cumsum(k)
        gather = np.repeat(begin - (ends - k), k) + np.arange(int(ends[-1]) if len(ends) else 0)
        return CutRuns(self.L, runs, end, k, self.rows[gather])


class CutRuns:
    """The candidate runs of :class:`FlatRuns` under one bound, per end ``x`` as
    :func:`.local_fast.extend_layer` takes them (:meth:`layer`), made for every end at
    once: a run's end row in its end's stages, and its ``(group, width)``'s index in the
    distinct pairs of its end in the order they first come.

    Parameters
    ----------
    L : int
        Layers.
    runs, end, k : numpy.ndarray
        int64: the kept runs' ``(group, width, pair, ...)`` rows, ends ``x`` (ascending)
        and kept stage counts.
    stages : numpy.ndarray
        Their kept stages, one run after another.
    """

    def __init__(self, L: int, runs: np.ndarray, end: np.ndarray, k: np.ndarray,
                 stages: np.ndarray):
        xs = np.arange(L + 2)
        self.first = np.searchsorted(end, xs, side="left")
        ends = np.cumsum(k)
        self.rows_from = np.concatenate(([0], ends))[self.first]  # stage row of x's first
        self.stages = np.ascontiguousarray(stages)
        self.runs = np.empty((len(runs), 4), dtype=np.int64)
        self.runs[:, :3] = runs[:, :3]
        self.runs[:, 3] = ends - self.rows_from[end]
        # the (group, width) pairs: per end, the distinct ones in the order they first come
        key = (end * (int(runs[:, 0].max(initial=0)) + 1) + runs[:, 0]) * (
            int(runs[:, 1].max(initial=0)) + 1) + runs[:, 1]
        _uniq, once, inverse = np.unique(key, return_index=True, return_inverse=True)
        order = np.argsort(once)
        self.pairs_from = np.searchsorted(end[once[order]], xs, side="left")
        rank = np.empty(len(once), dtype=np.int64)
        rank[order] = np.arange(len(once)) - self.pairs_from[end[once[order]]]
        self.gw_of = rank[inverse.reshape(-1)]
        self.gw = np.ascontiguousarray(runs[once[order], :2])

    def layer(self, x: int) -> tuple:
        """The runs ending at ``x``: ``(runs, gw_of, stages, gw)``, per run its group,
        width, pair and end row in ``stages``, and its ``(group, width)``'s row in ``gw``,
        the distinct pairs."""
        lo, hi = self.first[x], self.first[x + 1]
        g0, g1 = self.pairs_from[x], self.pairs_from[x + 1]
        return (self.runs[lo:hi], self.gw_of[lo:hi],
                self.stages[self.rows_from[x]:self.rows_from[x + 1]], self.gw[g0:g1])

    def at(self, x: int) -> tuple:
        """:meth:`layer` as :meth:`LocalDP._runs_at` returns it: ``runs`` with the pair's
        index as a fifth column, ``stages`` and the pairs as a list of tuples."""
        runs, gw_of, stages, gw = self.layer(x)
        return (np.column_stack((runs, gw_of)).astype(np.int64).reshape(-1, 5), stages,
                list(map(tuple, gw.tolist())))
