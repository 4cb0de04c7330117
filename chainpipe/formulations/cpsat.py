"""The CP-SAT model: boolean stage-option and boundary arcs of a layered network.

Nodes (``docs/cpsat.md`` has the maths):

- ``N(b, k)``: a stage on datacenter ``k`` starts at layer ``b``;
- ``E(b, k)``: a stage on datacenter ``k`` ends at layer ``b``.

Arcs:

- stage arc ``x[g, o, i, j]`` from ``N(i, dc(g))`` to ``E(j, dc(g))``: stage ``[i, j)``
  on group ``g`` with option ``o`` (data-parallel width ``d``, tensor-parallel degree
  ``t``, ``w = d t`` devices), see :class:`StageArcs`;
- boundary arc ``y[b, k1, k2]`` from ``E(b, k1)`` to ``N(b, k2)``, ``k1 <= k2``: the
  boundary at layer ``b`` crosses the path ``k1 -> k2``, so its occupancy and traversal
  are known exactly.

A plan is one path from a start ``N(0, .)`` to an end ``E(L, .)``. Under 1F1B an integer
``P_b`` counts the stages starting at layer ``b`` or later (the position of a stage that
starts at ``b``), and a stage option that holds only ``n < M`` microbatches in flight
forces ``P_b <= n``. Times are integers in a per-instance unit with every coefficient
rounded *down*, so the scaled objective of every plan is at most its true time divided by
the unit, and CP-SAT's best bound times the unit is a valid lower bound on the true
optimum.
"""

from __future__ import annotations

import dataclasses
import math
import weakref
from dataclasses import dataclass, field

import numpy as np

from ..cost import compute_time, iteration_time, steady_state
from ..plan import Plan
from ..tables import CostTables
from .common import period_mode, phase_arrays
from .greedy import greedy_plans  # noqa: F401  (re-exported: the scaling heuristic)
from .matrix import no_check

#: the scaled objective of the scaling plan (an upper bound on the optimum) maps to this
#: many units: coefficients and the objective stay below 2^31
SCALE_UNITS = 2**30
#: arcs handled between two deadline checks while building
CHECK_EVERY = 5000
#: relative margin for floating-point error in comparisons against the upper bound
UB_RTOL = 1e-9
#: relative shave applied to scaled quantities so float division never rounds a floor up
FLOOR_RTOL = 1e-12
#: optional strengthenings (``docs/cpsat.md`` measures each): ``bound_prune`` drops arcs
#: whose bottleneck alone forces ``T`` above the upper bound (the tables' capacity bound
#: with a bottleneck floor), ``capacity`` adds per group ``sum C w x <= count z``,
#: ``bottleneck_floor`` starts ``z`` at the FLOP-over-capacity bound, ``cover`` adds the
#: redundant "each layer in exactly one stage" rows, ``loop_prune`` (under 1F1B's period)
#: drops the options on no path of the arc-flow network no slower than the upper bound
#: (whole-path bounds and the loop over all stages, :func:`loop_pruned`)
FEATURES = ("bound_prune", "capacity", "bottleneck_floor", "cover", "loop_prune")
#: the ones on by default: ``capacity`` slowed the proof on ``medium-02`` (docs/cpsat.md)
DEFAULT_FEATURES = frozenset(FEATURES) - {"capacity"}
#: grid points of the bottleneck-floor bound curve used by ``bound_prune``
BOUND_GRID = 256
#: rows whose coefficient magnitudes could overflow CP-SAT's int64 checks are left out
SAFE_MAGNITUDE = 2**60
#: :func:`loop_pruned` builds the arc-flow network only up to this many stage columns
LOOP_PRUNE_COLUMNS = 200_000


def scaled_floor(values, unit: float) -> np.ndarray:
    """``floor(v / unit)``, shaved by :data:`FLOOR_RTOL` so the result is ``<= v / unit``."""
    v = np.asarray(values, dtype=float) / unit
    return np.floor(v * (1.0 - FLOOR_RTOL)).astype(np.int64)


# ------------------------------------------------------------------ stage options
@dataclass(frozen=True)
class StageArcs:
    """Stage options ``(g, o, [start, end))`` that can be in an optimal plan, as arrays.

    ``cap`` is the largest position (stages counted from the end, the stage itself
    included) the option may take under 1F1B: its in-flight limit when that is below
    ``M``, else :attr:`s_max`. ``total`` counts the options before any filter.
    """

    group: np.ndarray  # int64, flattened group index
    option: np.ndarray  # int64, index into tables.options(group)
    start: np.ndarray
    end: np.ndarray
    d: np.ndarray
    t: np.ndarray
    compute: np.ndarray  # float64, C (seconds)
    sync: np.ndarray  # float64, R (seconds)
    cap: np.ndarray  # int64
    s_max: int  # an upper bound on the number of stages of any plan the arcs form
    total: int

    def __len__(self) -> int:
        return int(self.group.shape[0])

    @property
    def width(self) -> np.ndarray:
        return self.d * self.t


def dominated(c: np.ndarray, r: np.ndarray, w: np.ndarray, n: np.ndarray) -> np.ndarray:
    """``[o, pair]``: option ``o`` of one group is dominated on the layer range ``pair``.

    Option ``p`` dominates ``o`` when it is no slower (``C``), syncs no longer (``R``),
    takes no more devices (``w``) and holds no fewer microbatches (``n``), and is strictly
    better in one of them or, on a full tie, comes first. Replacing ``o`` by ``p`` in a
    plan keeps it feasible (same group, fewer devices, memory at the same position) and
    does not raise ``T``, so some optimal plan uses no dominated option. Invalid options
    (``n < 0`` or ``C`` infinite) are never dominators.
    """
    P = c.shape[0]
    out = np.zeros(c.shape, dtype=bool)
    valid = (n >= 0) & np.isfinite(c) & np.isfinite(r)
    for p in range(P):
        no_worse = (c[p] <= c) & (r[p] <= r) & (w[p] <= w)[:, None] & (n[p] >= n) & valid[p]
        better = (c[p] < c) | (r[p] < r) | (w[p] < w)[:, None] | (n[p] > n)
        tie_first = ~better & (p < np.arange(P))[:, None]
        hit = no_worse & (better | tie_first)
        hit[p] = False
        out |= hit
    return out


def stage_arcs(tables: CostTables, upper_bound: float | None, check=no_check,
               floor_bound=None, sync_cap: float | None = None,
               count_sync: bool = True) -> StageArcs:
    """Every stage option that can be in an optimal plan no slower than ``upper_bound``.

    Dropped: options that do not fit memory even as the last stage (``n < 1`` under
    1F1B, ``n < M`` under gpipe), overflowing ones, dominated ones (:func:`dominated`),
    and with ``upper_bound`` those whose own ``M C + R`` exceeds it (any plan holding
    the stage has ``T >= C + (M - 1) C + R``), and with ``floor_bound`` (a
    :class:`FloorBound`) those with ``floor_bound(C) + R`` above it. With ``sync_cap``
    the options whose ``R`` exceeds it are dropped too; with ``count_sync`` false the
    bound is on ``T - max R`` (``R`` left out of both tests: the synchronisation-free
    objective of :class:`~chainpipe.formulations.ilp_flow.FlowFormulation`).
    """
    L, M = tables.L, tables.M
    ii, jj = np.triu_indices(L + 1, 1)
    need = tables.in_flight(1)
    parts = []
    total = 0
    for g in range(tables.G):
        check()
        opts = tables.options(g)
        P = len(opts.d)
        total += P * len(ii)
        if not P:
            continue
        c = opts.compute_time[:, ii, jj]
        r = opts.sync_time[:, ii, jj]
        n = opts.max_in_flight[:, ii, jj]
        keep = (n >= need) & np.isfinite(c) & np.isfinite(r)
        keep &= ~dominated(c, r, opts.width, n)
        if sync_cap is not None:
            keep &= r <= sync_cap
        if upper_bound is not None:
            counted = r if count_sync else np.zeros(r.shape)
            with np.errstate(over="ignore", invalid="ignore"):
                keep &= iteration_time(c, c, M, counted) <= upper_bound * (1 + UB_RTOL)
                if floor_bound is not None:
                    keep &= floor_bound(c) + counted <= upper_bound * (1 + UB_RTOL)
        o_idx, pair = np.nonzero(keep)
        parts.append((np.full(o_idx.shape, g), o_idx, ii[pair], jj[pair], opts.d[o_idx],
                      opts.t[o_idx], c[o_idx, pair], r[o_idx, pair], n[o_idx, pair]))
    if parts:
        cols = [np.concatenate(x) for x in zip(*parts)]
    else:
        cols = [np.zeros(0, dtype=np.int64)] * 6 + [np.zeros(0)] * 2 + [np.zeros(0, np.int64)]
    g, o, i, j, d, t, c, r, n = cols
    s_max = min(L, int(tables.count.sum()))
    if tables.schedule == "1f1b" and len(n) and n.max() < M:
        s_max = min(s_max, int(n.max()))  # the first stage holds min(M, S) microbatches
    s_max = max(s_max, 1)
    cap = np.where(n < M, np.minimum(n, s_max), s_max) if tables.schedule == "1f1b" \
        else np.full(n.shape, s_max)
    g, o, i, j, d, t, cap = (np.asarray(a, dtype=np.int64) for a in (g, o, i, j, d, t, cap))
    return StageArcs(g, o, i, j, d, t, np.asarray(c, float), np.asarray(r, float), cap, s_max,
                     total)


def loop_pruned(tables: CostTables, arcs: StageArcs, upper_bound: float,
                check=no_check) -> StageArcs:
    """``arcs`` without the options no plan no slower than ``upper_bound`` uses, by the
    arc-flow path ILP's exact pruning (:class:`~chainpipe.formulations.ilp_flow.
    FlowFormulation`, whose stage options are these arcs' with device states added):
    whole-path bounds on fill, the period's maxima (GPipe's two phases) and ``R``, and
    under 1F1B's period the loop over all stages (a plan of ``k < M`` stages has ``T >=
    fill (1 + (M - 1) / k)``). Every plan no slower than the bound is a path of that
    network that keeps all its columns, so an option without a kept column is in none;
    and when no such path has ``M`` stages, ``s_max`` drops to ``M - 1``. For a network
    of at most :data:`LOOP_PRUNE_COLUMNS` stage columns (and device states: a group of
    ``2**31`` devices is refused before its usages are enumerated); ``arcs`` unchanged
    otherwise.
    (Before issue 33's fourteenth round only under 1F1B's period: on ``v3-medium-04``'s
    one-pipeline GPipe entry the path bounds keep 10 of 10 758 options.)"""
    from .ilp_flow import FlowFormulation, ModelTooLarge

    if not len(arcs):
        return arcs
    try:
        flow = FlowFormulation(tables, check=check, upper_bound=upper_bound, exits=False,
                               max_columns=LOOP_PRUNE_COLUMNS)
    except ModelTooLarge:
        return arcs
    return kept_options(tables, arcs, flow)


def kept_options(tables: CostTables, arcs: StageArcs, flow) -> StageArcs:
    """``arcs`` restricted to the stage options that have a column in ``flow`` (a
    :class:`~chainpipe.formulations.ilp_flow.FlowFormulation` built on the same tables,
    or one of its period windows), ``s_max`` lowered to the network's."""
    fa = flow.arcs

    def keys(x):
        return ((x.group * 4096 + x.option) * (tables.L + 1) + x.start) * (tables.L + 1) + x.end

    kept = np.zeros(len(fa), dtype=bool)
    kept[np.unique(flow.col_arc)] = True
    keep = np.isin(keys(arcs), keys(fa)[kept])
    s_max = min(int(arcs.s_max), int(fa.s_max))
    fields = ("group", "option", "start", "end", "d", "t", "compute", "sync", "cap")
    kept_fields = {f: getattr(arcs, f)[keep] for f in fields}
    kept_fields["cap"] = np.minimum(kept_fields["cap"], s_max)
    return dataclasses.replace(arcs, s_max=max(s_max, 1), **kept_fields)


#: per tables object, the values ``h(b)`` :class:`FloorBound` computed (kept while the
#: tables live)
_FLOOR_VALUES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


class FloorBound:
    """``T >= h(b)`` for every plan whose bottleneck is at least ``b``, on a grid.

    ``h(b) = CostTables.bound_with_floors([b] * K, b)``: the tables' capacity bound
    (fill over the devices' FLOP capacity plus ``(M - 1)`` times a bottleneck of at least
    ``b``; synchronisation not counted). Evaluated at ``BOUND_GRID`` values ``b_k`` of the
    arcs' compute times; a value ``v`` gets ``h(b_k)`` of the largest ``b_k <= v`` (0 below
    the grid), which is a bound for every plan with bottleneck ``>= v >= b_k``.
    """

    def __init__(self, tables: CostTables, values: np.ndarray, check=no_check):
        v = np.unique(values[np.isfinite(values) & (values > 0)])
        if len(v) > BOUND_GRID:
            v = v[np.linspace(0, len(v) - 1, BOUND_GRID).astype(np.int64)]
        K = tables.K
        # ``h`` depends on the tables and ``b`` only: the models built on one tables
        # object (a sub-solve's model, its loop LP and loop pruning, the levels of a joint
        # model) share their values instead of computing them again
        known = _FLOOR_VALUES.setdefault(tables, {})
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            for b in v.tolist():
                if b not in known:
                    known[b] = tables.bound_with_floors([b] * K, b, check)
            h = np.array([known[b] for b in v.tolist()], dtype=float)
        self.grid, self.values = v, np.where(np.isfinite(h), h, 0.0)

    def __call__(self, values) -> np.ndarray:
        values = np.asarray(values, dtype=float)
        if not len(self.grid):  # no arc below the upper bound: no floor
            return np.zeros(values.shape)
        k = np.searchsorted(self.grid, values, side="right") - 1
        return np.where(k >= 0, self.values[np.maximum(k, 0)], 0.0)


def bottleneck_floor(tables: CostTables) -> float:
    """A lower bound on ``max_s C_s`` of every plan: the FLOP over every device's rate.

    ``C_s >= F_s / (w_s r_s)`` (tensor-parallel all-reduces only add), so
    ``F = sum F_s <= max C * sum_s w_s r_s <= max C * sum_g count_g r_g``.
    """
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        b = float(compute_time(float(tables.flop_prefix[-1]),
                               float(np.sum(tables.rate * tables.count))))
    return b if math.isfinite(b) else 0.0


def _slowest_boundary(tables: CostTables) -> tuple[float, float]:
    """The largest finite occupancy and traversal of any boundary on any path. A path's
    bandwidth is at least the whole chain's and its latency at most the whole chain's, so
    the largest are on the whole chain or a DC's own link (``O(L K)``); only when one of
    those overflows are the ``L K^2`` paths searched."""
    if tables.L <= 1:
        return 0.0, 0.0
    paths = [(k, k) for k in range(tables.K)] + [(0, tables.K - 1)]
    u = np.array([[tables.occupancy(b, *p) for p in paths] for b in range(1, tables.L)])
    q = np.array([[tables.traversal(b, *p) for p in paths] for b in range(1, tables.L)])
    if not (np.isfinite(u).all() and np.isfinite(q).all()):
        u, q = tables.boundary_occupancy[1:], tables.boundary_traversal[1:]
    return (float(np.nanmax(np.where(np.isfinite(u), u, 0.0))),
            float(np.nanmax(np.where(np.isfinite(q), q, 0.0))))


def range_bound(tables: CostTables, arcs: StageArcs) -> float:
    """An upper bound on the time of every plan made of ``arcs`` (when no plan is known)."""
    if not len(arcs):
        return 1.0
    c_max, r_max = float(arcs.compute.max()), float(arcs.sync.max())
    u_max, q_max = _slowest_boundary(tables)
    s = arcs.s_max
    total = iteration_time(s * c_max + (s - 1) * q_max, max(c_max, u_max), tables.M, r_max)
    return float(total) if total > 0 else 1.0


# ------------------------------------------------------------------ the model
@dataclass
class CpsatModel:
    """A built CP-SAT model with its arcs, scaling and decoder."""

    tables: CostTables
    upper_bound: float  # seconds: T of a known plan, or a bound on every modelled plan
    unit: float  # seconds per integer time unit
    arcs: StageArcs
    model: object = None  # cp_model.CpModel
    x_cost: np.ndarray = None  # scaled C
    x_sync: np.ndarray = None  # scaled R
    x_vars: np.ndarray = None  # variable indices of the stage arcs
    # boundary arcs
    y_layer: np.ndarray = None
    y_from: np.ndarray = None  # dc of the stage before
    y_to: np.ndarray = None  # dc of the stage after
    y_traversal: np.ndarray = None  # scaled Q
    y_occupancy: np.ndarray = None  # scaled U
    y_vars: np.ndarray = None
    bottleneck: int | None = None  # index of z, scaled max(C, U)
    sync: int | None = None  # index of s, scaled max R
    objective_cap: int = 0
    rounded_terms: int = 0  # bound on the number of rounded terms in any plan's objective
    check: object = None  # called while building (Deadline.check)
    features: frozenset = frozenset()
    floor_bound: FloorBound | None = None
    _covering: list = field(default_factory=list)
    mode: str = "classic"  # how the period is written (common.period_mode)
    bottleneck_bwd: int | None = None  # GPipe: index of the backward phase's maximum
    #: ``(variable, coefficient)`` of ``T`` less the synchronisation (``fill + (M-1) lambda``)
    time_pairs: list = field(default_factory=list)
    shared: bool = False  # built into a model of several pipelines: no objective of its own
    #: ``(lo, hi)`` seconds: a window of the period (:meth:`build`'s ``window``), or None
    period: tuple | None = None

    # -------------------------------------------------------------- building
    @classmethod
    def build(cls, tables: CostTables, upper_bound: float | None, check=None,
              features=DEFAULT_FEATURES, model=None, unit: float | None = None,
              window=None) -> CpsatModel:
        """Build the model.

        ``upper_bound`` is the time of a real plan: arcs that alone make a plan slower
        are dropped and the unit is ``upper_bound / SCALE_UNITS``. With ``None`` nothing
        is pruned and the unit comes from :func:`range_bound`. ``check`` is called now and
        then while building (``Deadline.check``: raises to stop). ``features`` picks the
        strengthenings of :data:`FEATURES` (default :data:`DEFAULT_FEATURES`).

        ``model`` (a ``CpModel``) and ``unit``: build into that model with that unit, as one
        pipeline of a plan of several (:mod:`chainpipe.formulations.pipelines`); no
        objective is set, :attr:`time_pairs` and :attr:`sync` give the pipeline's terms.

        ``window`` (1F1B's period, with ``upper_bound``): a period window of the arc-flow
        network (:meth:`~chainpipe.formulations.ilp_flow.FlowFormulation.window`, its
        ``period`` ``(lo, hi)``); the model then holds only the options with a column in
        it and ``z`` in ``[floor(lo / unit), floor(hi / unit)]``: every plan no slower than
        ``upper_bound`` whose period is in the window, each at most at its ``T``
        (``docs/cpsat.md``, "Windows of the period"). Any other network of the same tables
        (``period`` ``None``, e.g. a level of the joint model by synchronisation levels)
        keeps only its options.
        """
        from ortools.sat.python import cp_model

        check = check or no_check
        features = frozenset(features)
        prune = upper_bound is not None
        floor_bound = None
        if prune and "bound_prune" in features:
            floor_bound = FloorBound(tables, stage_arcs(tables, upper_bound, check).compute,
                                     check)
        arcs = stage_arcs(tables, upper_bound, check, floor_bound)
        if window is not None:
            arcs = kept_options(tables, arcs, window)
        elif prune and "loop_prune" in features:
            arcs = loop_pruned(tables, arcs, upper_bound, check)
        if not prune:
            upper_bound = range_bound(tables, arcs)
        self = cls(tables, upper_bound, unit or upper_bound / SCALE_UNITS, arcs)
        self.check, self.features, self.floor_bound = check, features, floor_bound
        self.mode, self.shared = period_mode(tables), model is not None
        self.period = None if window is None or window.period is None else tuple(window.period)
        self.model = model if model is not None else cp_model.CpModel()
        self.x_cost = scaled_floor(arcs.compute, self.unit)
        self.x_sync = scaled_floor(arcs.sync, self.unit)
        self._boundary_arcs(prune)
        self._flow()
        self._device_counts()
        self._positions()
        self._bottleneck()
        self._loops()
        self._objective()
        return self

    @property
    def x_dc(self) -> np.ndarray:
        return self.tables.group_dc[self.arcs.group]

    def _new_vars(self, n: int, upper: int = 1, lower: int = 0) -> np.ndarray:
        """``n`` unnamed integer variables in ``[lower, upper]`` written into the proto."""
        proto = self.model.proto
        first = len(proto.variables)
        for k in range(n):
            if k % CHECK_EVERY == 0:
                self.check()
            proto.variables.add().domain.extend([lower, upper])
        return np.arange(first, first + n, dtype=np.int64)

    def _linear(self, variables, coefficients, lower: int, upper: int) -> None:
        """``lower <= sum coefficients * variables <= upper``, written into the proto."""
        ct = self.model.proto.constraints.add().linear
        ct.vars.extend(int(v) for v in variables)
        ct.coeffs.extend(int(c) for c in coefficients)
        ct.domain.extend([int(lower), int(upper)])

    def _enforced(self, literals, variables, coefficients, lower: int, upper: int) -> None:
        """:meth:`_linear` enforced only when every literal of ``literals`` is true."""
        ct = self.model.proto.constraints.add()
        ct.enforcement_literal.extend(int(v) for v in literals)
        ct.linear.vars.extend(int(v) for v in variables)
        ct.linear.coeffs.extend(int(c) for c in coefficients)
        ct.linear.domain.extend([int(lower), int(upper)])

    def _exactly_one(self, variables) -> None:
        self.model.proto.constraints.add().exactly_one.literals.extend(int(v) for v in variables)

    def _boundary_arcs(self, prune: bool) -> None:
        t, M, a = self.tables, self.tables.M, self.arcs
        ends = np.zeros((t.L + 1, t.K), dtype=bool)
        starts = np.zeros((t.L + 1, t.K), dtype=bool)
        ends[a.end, self.x_dc] = True
        starts[a.start, self.x_dc] = True
        rows = []
        limit = self.upper_bound * (1 + UB_RTOL) if prune else math.inf
        for b in range(1, t.L):
            for k1 in np.nonzero(ends[b])[0].tolist():
                self.check()  # a long chain has K^2 / 2 paths per layer
                k2 = (np.nonzero(starts[b, k1:])[0] + k1).tolist()
                u = np.array([t.occupancy(b, k1, k) for k in k2])
                q = np.array([t.traversal(b, k1, k) for k in k2])
                with np.errstate(invalid="ignore", over="ignore"):
                    keep = np.isfinite(u) & np.isfinite(q)  # an overflow is in no finite plan
                    if prune:
                        floor = self.floor_bound(u) if self.floor_bound is not None else 0.0
                        keep &= np.maximum(iteration_time(q, u, M), floor) <= limit
                rows += [(b, k1, k2[i], q[i], u[i]) for i in np.flatnonzero(keep).tolist()]
        arr = np.array(rows, dtype=float).reshape(-1, 5)
        self.y_layer = arr[:, 0].astype(np.int64)
        self.y_from = arr[:, 1].astype(np.int64)
        self.y_to = arr[:, 2].astype(np.int64)
        self.y_traversal = scaled_floor(arr[:, 3], self.unit)
        self.y_occupancy = scaled_floor(arr[:, 4], self.unit)

    def _flow(self) -> None:
        """Variables and flow conservation: one path from layer 0 to layer L."""
        a, L, K = self.arcs, self.tables.L, self.tables.K
        self.x_vars = self._new_vars(len(a))
        self.y_vars = self._new_vars(len(self.y_layer))
        dc = self.x_dc
        self._exactly_one(self.x_vars[a.start == 0])
        self._exactly_one(self.x_vars[a.end == L])
        x_out = _index(a.start * K + dc, self.x_vars)
        x_in = _index(a.end * K + dc, self.x_vars)
        y_in = _index(self.y_layer * K + self.y_to, self.y_vars)
        y_out = _index(self.y_layer * K + self.y_from, self.y_vars)
        for n, node in enumerate(sorted(set(x_out) | set(y_in))):
            if n % 500 == 0:
                self.check()
            if node // K > 0:  # N(b, k): stages leaving = boundaries entering
                out, inn = x_out.get(node, []), y_in.get(node, [])
                self._linear(list(out) + list(inn), [1] * len(out) + [-1] * len(inn), 0, 0)
        for n, node in enumerate(sorted(set(x_in) | set(y_out))):
            if n % 500 == 0:
                self.check()
            if node // K < L:  # E(b, k): stages entering = boundaries leaving
                inn, out = x_in.get(node, []), y_out.get(node, [])
                self._linear(list(inn) + list(out), [1] * len(inn) + [-1] * len(out), 0, 0)
        # every layer is covered by exactly one stage (implied by the path; for propagation)
        self._covering = []
        for layer in range(L):
            self.check()
            arcs = np.nonzero((a.start <= layer) & (a.end > layer))[0]
            self._covering.append(arcs)
            if "cover" in self.features:
                self._exactly_one(self.x_vars[arcs])

    def _device_counts(self) -> None:
        """At most ``count`` devices of each group: ``sum w x <= count``."""
        a, width = self.arcs, self.arcs.width
        for g in range(self.tables.G):
            sel = np.nonzero(a.group == g)[0]
            count = int(self.tables.count[g])
            # the stages of a plan cover distinct layers: at most L of them
            if len(sel) and np.sort(width[sel])[::-1][:self.tables.L].sum() > count:
                self._linear(self.x_vars[sel], width[sel], 0, count)

    def _positions(self) -> None:
        """1F1B memory: ``P_b`` stages start at ``b`` or later; an option starting at ``b``
        that holds ``n < M`` microbatches needs ``P_b <= n``:
        ``P_b + sum_{a starts at b} (s_max - cap_a) x_a <= s_max`` (at most one ``x_a``
        is 1, so the row is ``P_b <= cap_a`` for it, and ``P_b <= s_max`` without one)."""
        a, L, s_max = self.arcs, self.tables.L, self.arcs.s_max
        self.positions = None
        # the loops need positions only when a plan may have M stages (else every stage
        # stashes fewer than M and may close one)
        loops_need = self.mode == "1f1b" and s_max >= self.tables.M
        if not len(a) or ((a.cap >= s_max).all() and not loops_need):
            return
        P = self._new_vars(L + 1, s_max)  # P[L] = 0
        self._linear([P[L]], [1], 0, 0)
        self.positions = P
        for b in range(L):
            self.check()
            sel = np.nonzero(a.start == b)[0]
            # P_b = P_{b+1} + (a stage starts at b)
            self._linear([P[b], P[b + 1]] + list(self.x_vars[sel]), [1, -1] + [-1] * len(sel),
                         0, 0)
            tight = sel[a.cap[sel] < s_max]
            if len(tight):
                self._linear([P[b]] + list(self.x_vars[tight]),
                             [1] + list(s_max - a.cap[tight]), 0, s_max)

    def _bottleneck(self) -> None:
        """``z >= C`` and ``s >= R`` of the stage covering each layer, ``z >= U`` of each
        boundary used (one row per layer or boundary: exactly one arc in each sum is 1)."""
        M = self.tables.M
        self.bottleneck = self.sync = None
        if M > 1 and self.mode == "gpipe":
            self._phase_maxima()
        elif M > 1:
            top = int(max(self.x_cost.max(initial=0), self.y_occupancy.max(initial=0)))
            if self.mode == "1f1b":  # a loop's average stays below max C' + max Q'
                top = int(self.x_cost.max(initial=0) + self.y_traversal.max(initial=0)
                          + self.y_occupancy.max(initial=0) + 1)
            low = 0
            if "bottleneck_floor" in self.features:  # every plan's max C' is at least this
                low = min(max(int(scaled_floor([bottleneck_floor(self.tables)], self.unit)[0]),
                              0), top)
            if self.period is not None:  # a plan of the window keeps z = floor(lambda/unit)
                low = max(low, int(scaled_floor([self.period[0]], self.unit)[0]))
                top = min(top, int(math.floor(self.period[1] * (1 + UB_RTOL) / self.unit)))
                low = min(low, top)
            self.bottleneck = int(self._new_vars(1, top, low)[0])
            self._max_rows(self.bottleneck, self.x_cost)
            if "capacity" in self.features:
                self._capacity_rows(top)
            self._boundary_rows(self.bottleneck, top)
        if self.x_sync.max(initial=0) > 0:
            self.sync = int(self._new_vars(1, int(self.x_sync.max()))[0])
            self._max_rows(self.sync, self.x_sync)

    def _boundary_rows(self, var: int, top: int) -> None:
        """``var >= U'`` of the boundary used at each layer."""
        per_boundary: dict = {}
        for n, b in enumerate(self.y_layer):
            if self.y_occupancy[n]:
                per_boundary.setdefault(int(b), []).append(n)
        for arcs in per_boundary.values():
            self._linear([var] + list(self.y_vars[arcs]),
                         [1] + [-int(u) for u in self.y_occupancy[arcs]], 0, top)

    def _phase_maxima(self) -> None:
        """GPipe's period: ``z >= f'`` and ``z_b >= b'`` of the stage covering each layer,
        both ``>= U'`` of each boundary used (``f' = floor(f / unit)``, ``b'`` alike: their
        sum never exceeds the true period over the unit)."""
        a, t = self.arcs, self.tables
        fwd, bwd = np.zeros(len(a)), np.zeros(len(a))
        for g in np.unique(a.group).tolist():
            sel = np.nonzero(a.group == g)[0]
            f, b = phase_arrays(t, g)
            at = (a.option[sel], a.start[sel], a.end[sel])
            fwd[sel], bwd[sel] = f[at], b[at]
        u_top = int(self.y_occupancy.max(initial=0))
        vars_ = []
        for phase in (scaled_floor(fwd, self.unit), scaled_floor(bwd, self.unit)):
            top = int(max(phase.max(initial=0), u_top))
            var = int(self._new_vars(1, top)[0])
            self._max_rows(var, phase)
            self._boundary_rows(var, top)
            vars_.append(var)
        self.bottleneck, self.bottleneck_bwd = vars_

    def _loops(self) -> None:
        """1F1B's loops, ``n lambda >= W`` for the windows of stages stashing fewer than
        ``M`` (``docs/cpsat.md``), in the unit: ``n z >= sum C' + sum Q' - (n - 1)``, by
        potentials at layer boundaries enforced by the chosen arcs. ``tau_b``: the stage
        starting at ``b`` has position ``P_b < M``. For a stage arc ``[i, j)``, under
        ``x and tau_i``: ``r_i + C' <= z`` (close) and ``e_j >= r_i + C' - z - 1``
        (carry); for a boundary arc at ``b``, under ``y``: ``r_b >= e_b + Q'``."""
        if self.mode != "1f1b" or self.bottleneck is None or not len(self.arcs):
            return
        a, L, M, z = self.arcs, self.tables.L, self.tables.M, self.bottleneck
        P = self.positions
        top = int(self.model.proto.variables[z].domain[1])
        q_top = int(self.y_traversal.max(initial=0))
        tau = [None] * L  # None: every stage stashes fewer than M (no plan has M stages)
        if a.s_max >= M:
            tau = self._new_vars(L)
            for b in range(L):
                self.check()
                self._enforced([tau[b]], [P[b]], [1], 0, M - 1)
                self._enforced([-int(tau[b]) - 1], [P[b]], [1], M, max(M, a.s_max))
        r = np.concatenate(([-1], self._new_vars(L - 1, top))) if L > 1 else np.array([-1])
        e = np.concatenate(([-1], self._new_vars(L - 1, top, -(top + q_top + 2)))) \
            if L > 1 else np.array([-1])
        for n in range(len(a)):
            if n % CHECK_EVERY == 0:
                self.check()
            i, j, c = int(a.start[n]), int(a.end[n]), int(self.x_cost[n])
            lits = [self.x_vars[n]] + ([] if tau[i] is None else [tau[i]])
            if i > 0:
                self._enforced(lits, [r[i], z], [1, -1], -SAFE_MAGNITUDE, -c)
            if j < L:
                vs, cs = [e[j], z], [1, 1]
                if i > 0:
                    vs, cs = vs + [r[i]], cs + [-1]
                self._enforced(lits, vs, cs, c - 1, SAFE_MAGNITUDE)
        for n, b in enumerate(self.y_layer.tolist()):
            if n % CHECK_EVERY == 0:
                self.check()
            self._enforced([self.y_vars[n]], [r[b], e[b]], [1, -1], int(self.y_traversal[n]),
                           SAFE_MAGNITUDE)

    def _capacity_rows(self, top: int) -> None:
        """Per group ``sum_a C'_a w_a x_a <= count_g z``: each stage has ``C' <= z`` and the
        stages on a group take at most ``count_g`` devices (valid for every plan)."""
        a, z = self.arcs, self.bottleneck
        weight = self.x_cost * a.width
        for g in range(self.tables.G):
            sel = np.nonzero((a.group == g) & (weight > 0))[0]
            count = int(self.tables.count[g])
            if not len(sel) or float(weight[sel].sum()) + float(count) * top >= SAFE_MAGNITUDE:
                continue
            self._linear([z] + list(self.x_vars[sel]), [count] + [-int(w) for w in weight[sel]],
                         0, count * top)

    def _max_rows(self, var: int, coefficient: np.ndarray) -> None:
        """``var >= sum coefficient x`` over the arcs covering each layer."""
        top = int(coefficient.max(initial=0))
        for arcs in self._covering:
            self.check()
            used = arcs[coefficient[arcs] > 0]
            if len(used):
                self._linear([var] + list(self.x_vars[used]),
                             [1] + [-int(c) for c in coefficient[used]], 0, top)

    def _objective(self) -> None:
        """``sum C + sum Q + (M - 1) z + s``, capped at the scaled upper bound."""
        proto, M = self.model.proto, self.tables.M
        pairs = [(v, c) for v, c in zip(self.x_vars.tolist(), self.x_cost.tolist()) if c]
        pairs += [(v, q) for v, q in zip(self.y_vars.tolist(), self.y_traversal.tolist()) if q]
        if self.bottleneck is not None:
            pairs.append((self.bottleneck, int(steady_state(M, 1))))
        if self.bottleneck_bwd is not None:
            pairs.append((self.bottleneck_bwd, int(steady_state(M, 1))))
        self.time_pairs = list(pairs)
        s_max = self.arcs.s_max
        self.rounded_terms = (2 * s_max - 1 + (M - 1 if M > 1 else 0)
                              + (M - 1 if self.mode != "classic" and M > 1 else 0)
                              + (1 if self.sync is not None else 0))
        if self.shared:
            return
        if self.sync is not None:
            pairs.append((self.sync, 1))
        self.model.clear_objective()
        proto.objective.vars.extend([v for v, _ in pairs])
        proto.objective.coeffs.extend([c for _, c in pairs])
        # every plan's scaled objective is <= its true time / unit, the optimum's <= UB / unit
        self.objective_cap = int(math.floor(self.upper_bound * (1 + UB_RTOL) / self.unit))
        proto.objective.domain.extend([0, self.objective_cap])

    # -------------------------------------------------------------- reading back
    @property
    def num_arcs(self) -> int:
        return len(self.x_vars) + len(self.y_vars)

    def true_bound(self, scaled_bound: float) -> float:
        """A valid lower bound (seconds) on the true optimum from a scaled CP-SAT bound."""
        if not math.isfinite(scaled_bound):
            return 0.0
        # every plan's scaled objective is an integer; floor(b + 1e-6) absorbs float noise in b
        # without ever exceeding the integer the bound certifies
        return max(0.0, math.floor(scaled_bound + 1e-6) * self.unit * (1.0 - FLOOR_RTOL))

    def decode(self, values) -> Plan:
        """The plan of a solution, ``values[var]`` being each variable's value."""
        t, a = self.tables, self.arcs
        used = [n for n, v in enumerate(self.x_vars.tolist()) if values[v]]
        used.sort(key=lambda n: int(a.start[n]))
        tuples = [
            (int(a.start[n]), int(a.end[n]), int(t.group_dc[a.group[n]]),
             t.groups[int(a.group[n])].index, int(a.d[n]), int(a.t[n]))
            for n in used
        ]
        return Plan.from_tuples(t.instance, tuples)

    def hint(self, plan: Plan) -> bool:
        """Add ``plan`` as a full solution hint; ``False`` if it is not a path of this model.

        A stage whose option was dropped as dominated is hinted with an option of the same
        group and layers that dominates it (no slower, so the plan stays as good).
        """
        inst, t, a = self.tables.instance, self.tables, self.arcs
        group_of = {(g.dc, g.index): n for n, g in enumerate(t.groups)}
        chosen, dcs = [], []
        for st in plan.stages:
            ref = inst.locate(st.devices[0])
            g = group_of[(ref.dc, ref.group)]
            opts = t.options(g)
            o = [n for n in range(len(opts.d))
                 if (opts.d[n], opts.t[n]) == (st.data_parallel, st.tensor_parallel)]
            if not o:
                return False
            c, r = opts.compute_time[o[0], st.start, st.end], opts.sync_time[o[0], st.start, st.end]
            n = opts.max_in_flight[o[0], st.start, st.end]
            same = np.nonzero((a.group == g) & (a.start == st.start) & (a.end == st.end)
                              & (a.compute <= c) & (a.sync <= r) & (a.width <= st.data_parallel * st.tensor_parallel)
                              & (a.cap >= min(n, a.s_max)))[0]
            exact = same[a.option[same] == o[0]]
            if not len(same):
                return False
            chosen.append(int(exact[0] if len(exact) else same[0]))
            dcs.append(ref.dc)
        on_y = set()
        for s in range(len(chosen) - 1):
            hit = np.nonzero((self.y_layer == plan.stages[s].end) & (self.y_from == dcs[s])
                             & (self.y_to == dcs[s + 1]))[0]
            if not len(hit):
                return False
            on_y.add(int(hit[0]))
        m = self.model
        m.clear_hints()
        proto = m.proto.solution_hint
        on_x = set(chosen)
        proto.vars.extend(self.x_vars.tolist())
        proto.values.extend([int(n in on_x) for n in range(len(self.x_vars))])
        proto.vars.extend(self.y_vars.tolist())
        proto.values.extend([int(n in on_y) for n in range(len(self.y_vars))])
        return True


def _index(keys: np.ndarray, variables: np.ndarray) -> dict:
    """``{key: [variables with that key]}``."""
    out: dict = {}
    for k, v in zip(keys.tolist(), variables.tolist()):
        out.setdefault(k, []).append(v)
    return out
