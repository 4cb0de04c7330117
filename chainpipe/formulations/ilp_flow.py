"""The arc-flow path ILP: the path network with the devices used in each node.

``ilp-path -O device_states=true``. The nodes of the path network of
:mod:`chainpipe.formulations.cpsat` (``N(b, k)``: a stage on datacenter ``k`` starts at
layer ``b``; ``E(b, k)``: one ends there) are split by a *device state* ``u``: how many
devices of each group of datacenter ``k`` the stages of ``k`` placed so far use. A stage
arc ``(g, o, [i, j))`` of width ``w`` is copied once per state ``u`` with ``u_g + w <=
count_g``, from ``N(i, k, u)`` to ``E(j, k, u + w e_g)``; a boundary arc keeps the state
inside one datacenter and resets it to zero when the path moves on. Every path of this
network respects the device counts by construction, so the LP relaxation is a mixture of
paths that each fit the devices -- the arc-flow idea of Valerio de Carvalho's bin-packing
model -- where the compact models (a knapsack row per group) let the LP mix paths that
each use a group several times over. ``docs/formulations.md`` ("Device states") has the
model, its exactness argument and the measurements.

The stage options (undominated, pruned with the heuristic plan's time) and boundary arcs
are those of the CP-SAT model (:func:`chainpipe.formulations.cpsat.stage_arcs`), with
exact float coefficients divided by :func:`~chainpipe.formulations.common.time_scale`.
Whole-path bounds (:meth:`FlowFormulation._path_bounds`) then floor ``B`` and ``S`` by
bottleneck shortest paths and drop every column no path faster than the heuristic plan
uses; :meth:`FlowFormulation.start` maps that plan onto the columns as a MIP start.
Every period (``period_mode``): classic, GPipe's two phase maxima, 1F1B's loops by node
potentials (:meth:`FlowFormulation._loop_rows`) and, with a datacenter's last stage
copied, the two-stage loops around each change of datacenter
(:meth:`FlowFormulation._exit_rows`); several pipelines are the outer
enumeration of :mod:`chainpipe.formulations.pipelines`. The model is built straight into
arrays (no PuLP).
"""

from __future__ import annotations

import copy
import dataclasses
import heapq
import itertools
import math
from dataclasses import dataclass

import numpy as np

from ..cost import iteration_time, steady_state
from ..plan import Plan
from ..solvers.highs import PRESOLVE_RULES_OFF
from ..tables import CostTables
from . import flow_excess
from .common import OBJECTIVE_MAGNITUDE, period_mode, phase_arrays, time_scale
from .cpsat import UB_RTOL, FloorBound, StageArcs, stage_arcs
from .matrix import LinearModel, no_check

#: HiGHS's presolve rule "probing" (bit 15 of ``presolve_rule_off``)
PROBING = 1 << 15
#: the model is refused (``ModelTooLarge``) above this many stage columns
MAX_COLUMNS = 2_000_000
#: a proven bottleneck floor is lowered by this relative margin before it bounds ``B``
#: (the backends' feasibility tolerance is 1e-9 on objectives of about 1e3)
BOUND_SLACK = 1e-7
#: :func:`reachable_usage` sieves a count up to this many devices as a boolean array;
#: above it, it enumerates the sums one by one (at most its limit of them)
DENSE_USAGE = 1 << 20
#: :func:`reachable_usage` calls its ``check`` once per this many sums enumerated
CHECK_USAGE = 4096


class ModelTooLarge(ValueError):
    """The device-state network would exceed :data:`MAX_COLUMNS` columns."""


@dataclass
class ArrayModel(LinearModel):
    """A :class:`LinearModel` built as arrays: a solution goes to ``sink`` (no PuLP)."""

    sink: object = None
    #: HiGHS options of this model (:func:`chainpipe.solvers.highs.solve_highs` sets them):
    #: no restarts -- on ``hybrid/medium`` the restarts after each reduced-cost fixing
    #: took longer than the branching they saved -- and no probing in presolve (besides
    #: the rule every model has off): on ``v3-medium-03``'s one-pipeline entry probing
    #: alone used a 60 s limit (``docs/formulations.md``)
    highs_options: dict = dataclasses.field(default_factory=lambda: {
        "mip_allow_restart": False, "presolve_rule_off": PRESOLVE_RULES_OFF | PROBING})

    def assign(self, values) -> None:
        """Hand a solution (one value per column) to the formulation."""
        self.sink(np.asarray(values, dtype=float))


def reachable_usage(widths, count: int, limit: int | None = None,
                    check=no_check) -> np.ndarray:
    """Every device count in ``[0, count]`` that is a sum of ``widths`` (with repeats).

    Parameters
    ----------
    widths : iterable of int
        The widths ``d t`` of a group's stage options.
    count : int
        The group's device count.
    limit : int, optional
        Raise :class:`ModelTooLarge` as soon as more than this many usages are found
        (the enumeration never goes past ``limit + 1`` of them, whatever the count).
    check : callable, optional
        Called now and then (``Deadline.check``: raises to stop).

    Returns
    -------
    numpy.ndarray
        The reachable usages, ascending (0 always).

    Raises
    ------
    ModelTooLarge
        More than ``limit`` usages are reachable.

    Notes
    -----
    Up to :data:`DENSE_USAGE` devices a boolean sieve (the unbounded knapsack's
    reachability, each width applied by doubling shifts); above it the sums are taken
    in ascending order from a heap, one per step, so a group of ``2**31`` devices costs
    ``limit`` steps, not ``2**31``.
    """
    ws = sorted({int(w) for w in widths if 0 < int(w) <= count})
    if count <= DENSE_USAGE:
        ok = np.zeros(count + 1, dtype=bool)
        ok[0] = True
        for w in ws:
            check()
            step = w
            while step <= count:  # ok |= ok shifted by w, 2w, 4w, ...: every multiple
                ok[step:] |= ok[:count + 1 - step]
                step *= 2
        found = np.nonzero(ok)[0]
        if limit is not None and len(found) > limit:
            raise ModelTooLarge(f"a group has more than {limit} reachable device usages")
        return found
    found, heap, seen = [], [0], {0}
    while heap:
        u = heapq.heappop(heap)
        found.append(u)
        if limit is not None and len(found) > limit:
            raise ModelTooLarge(f"a group has more than {limit} reachable device usages")
        if len(found) % CHECK_USAGE == 0:
            check()
        for w in ws:
            v = u + w
            if v > count:
                break
            if v not in seen:
                seen.add(v)
                heapq.heappush(heap, v)
    return np.asarray(found, dtype=np.int64)


def boundary_arcs(tables: CostTables, arcs: StageArcs, upper_bound: float | None,
                  floor_bound=None, check=no_check) -> np.ndarray:
    """Boundary arcs ``(b, k1, k2, Q, U)`` between stage arcs, as the CP-SAT model keeps them.

    An arc at layer ``b`` joins a stage of ``k1`` ending at ``b`` to one of ``k2 >= k1``
    starting there. With ``upper_bound`` an arc whose ``Q + (M - 1) U`` (or the floor
    bound at ``U``) exceeds it is dropped: no plan that fast crosses it.
    """
    t, M = tables, tables.M
    dc = t.group_dc[arcs.group]
    ends = np.zeros((t.L + 1, t.K), dtype=bool)
    starts = np.zeros((t.L + 1, t.K), dtype=bool)
    ends[arcs.end, dc] = True
    starts[arcs.start, dc] = True
    limit = math.inf if upper_bound is None else upper_bound * (1 + UB_RTOL)
    rows = []
    for b in range(1, t.L):
        for k1 in np.nonzero(ends[b])[0].tolist():
            check()
            k2 = (np.nonzero(starts[b, k1:])[0] + k1).tolist()
            u = np.array([t.occupancy(b, k1, k) for k in k2])
            q = np.array([t.traversal(b, k1, k) for k in k2])
            with np.errstate(invalid="ignore", over="ignore"):
                keep = np.isfinite(u) & np.isfinite(q)
                floor = floor_bound(u) if floor_bound is not None else 0.0
                keep &= np.maximum(iteration_time(q, u, M), floor) <= limit
            rows += [(b, k1, k2[n], q[n], u[n]) for n in np.flatnonzero(keep).tolist()]
    return np.array(rows, dtype=float).reshape(-1, 5)


class FlowFormulation:
    """Builder and decoder of the arc-flow (device-state) path ILP for one instance.

    Parameters
    ----------
    tables : CostTables
        The instance's cost tables (one pipeline, any period).
    check : callable, optional
        Called now and then while building (``Deadline.check``: raises to stop).
    upper_bound : float, optional
        ``T`` of a known plan: stage and boundary arcs no plan that fast uses are dropped.
    max_columns : int
        Refuse (:class:`ModelTooLarge`) a network with more stage columns.
    exits : bool
        Under 1F1B's period, copy each datacenter's last stage for the loop rows around
        a change of datacenter (:meth:`_exit_rows`).
    sync_cap : float, optional
        Keep only the stage options whose ``R`` is at most this (seconds).
    count_sync : bool
        ``False``: the model minimises ``T - max R`` (the synchronisation costs nothing)
        and ``upper_bound`` bounds that; every pruning test leaves ``R`` out. A pipeline
        of a joint model solved by levels of the synchronisation
        (``solvers/ilp.py:_SyncBlock``) is this model under a ``sync_cap``: built for its
        level, pruned by what the level must beat (``docs/formulations.md``, "Eighth
        round").
    """

    name = "ilp-path"

    def __init__(self, tables: CostTables, check=None, upper_bound: float | None = None,
                 max_columns: int = MAX_COLUMNS, exits: bool = True,
                 sync_cap: float | None = None, count_sync: bool = True,
                 period: tuple | None = None):
        self.tables, self.check = tables, check or no_check
        #: ``(lo, hi)`` seconds: the model keeps only the plans whose period (``B``) is in
        #: ``[lo, hi]`` (:meth:`_period_window`); ``None``: every period
        self.period = None if period is None else (float(period[0]), float(period[1]))
        self.count_sync = bool(count_sync)
        only = {"sync_cap": sync_cap, "count_sync": self.count_sync}
        #: whether :meth:`build` adds the flow-weighted loop rows (:meth:`_flow_loop_rows`)
        self.flow_loops = False
        #: the fixed period (scaled) of the flow-weighted loop rows of a window (``None``:
        #: the rows carry ``z = B x`` as a flow); set by :meth:`build`
        self.loop_period = None
        #: how the period is written (:func:`~chainpipe.formulations.common.period_mode`)
        self.mode = period_mode(tables)
        #: 1F1B, every stage in the tail: a datacenter's last stage has its own copies
        #: (heads ``X``), for the loop rows around each change of datacenter (:meth:`_exit_rows`)
        self.exits = bool(exits and self.mode == "1f1b" and tables.M > 1 and tables.K > 1)
        self.scale = time_scale(tables, OBJECTIVE_MAGNITUDE)
        self.upper_bound = upper_bound
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            floor = None
            if upper_bound is not None:
                floor = FloorBound(tables, stage_arcs(tables, upper_bound, self.check,
                                                      **only).compute, self.check)
            self.arcs = stage_arcs(tables, upper_bound, self.check, floor, **only)
            self.boundary = boundary_arcs(tables, self.arcs, upper_bound, floor, self.check)
        self._phases()
        self._states(max_columns)
        self._columns(max_columns)
        self._period_window()
        self.floor_B = self.floor_B2 = self.floor_S = 0.0
        #: a proven lower bound (seconds) on ``T`` of every plan the model holds, from the
        #: whole-path and loop pruning (0 without an upper bound)
        self.cheap_bound = 0.0
        self.pruned_by_paths = 0
        self._path_bounds()
        self.few_stages = False
        self.loop_pruned = 0
        self._loop_prune()
        self._cap_stages()
        self.n_arcs = len(self.col_arc)
        self.problem = None  # no PuLP model: ``write_model`` is not offered
        self.values = None

    # ------------------------------------------------------------------ network
    def _phases(self) -> None:
        """GPipe's period: each stage option's forward and backward times ``f``, ``b``
        (the two phase maxima); other modes: ``C`` for the one maximum ``B``."""
        a = self.arcs
        self.stage_B, self.stage_B2 = a.compute, None
        if self.mode != "gpipe" or not len(a):
            return
        self.stage_B, self.stage_B2 = np.zeros(len(a)), np.zeros(len(a))
        for g in np.unique(a.group).tolist():
            sel = np.nonzero(a.group == g)[0]
            f, b = phase_arrays(self.tables, g)
            at = (a.option[sel], a.start[sel], a.end[sel])
            self.stage_B[sel], self.stage_B2[sel] = f[at], b[at]

    def _states(self, max_states: int) -> None:
        """Device states per datacenter: tuples of reachable usages of its groups.

        Refused (:class:`ModelTooLarge`) before enumerating more than ``max_states``
        usages of a group or states in all (the model's column budget): each state is
        a node at every layer (the sweeps hold ``3 (L + 1)`` values per state), and a
        state is the usage after some stage, in general the head of at least one column
        per arc of that width. Before this guard a group of ``2**31`` devices was
        enumerated here for minutes before its columns were counted."""
        t, a = self.tables, self.arcs
        self.dc_groups = [np.nonzero(t.group_dc == k)[0].tolist() for k in range(t.K)]
        self.state_key: dict = {}
        self.states: list = []
        for k, groups in enumerate(self.dc_groups):
            usage = [reachable_usage(a.width[a.group == g].tolist(), int(t.count[g]),
                                     max_states, self.check).tolist() for g in groups]
            if len(self.states) + math.prod(len(u) for u in usage) > max_states:
                raise ModelTooLarge(f"the device-state network has more than {max_states} "
                                    "device states")
            for u in itertools.product(*usage):
                if len(self.states) % CHECK_USAGE == 0:
                    self.check()
                self.state_key[(k, u)] = len(self.states)
                self.states.append((k, u))
        self.zero = {k: self.state_key[(k, tuple(0 for _ in g))]
                     for k, g in enumerate(self.dc_groups)}

    def _node(self, kind: int, layer: int, state: int) -> int:
        """Node id: ``kind`` 0 is ``N`` (a stage starts), 1 is ``E`` (one ends), 2 is
        ``X`` (the last stage of a datacenter ends; only with :attr:`exits`)."""
        return (kind * (self.tables.L + 1) + layer) * len(self.states) + state

    def _shift(self, k: int, pos: int, w: int) -> np.ndarray:
        """Per state of datacenter ``k`` (:attr:`per_dc` order): the state after a stage of
        width ``w`` on its group at ``pos``, ``-1`` where none is (over the count)."""
        out = np.full(len(self.per_dc[k]), -1, dtype=np.int64)
        for n, s in enumerate(self.per_dc[k].tolist()):
            v = list(self.states[s][1])
            v[pos] += w
            out[n] = self.state_key.get((k, tuple(v)), -1)
        return out

    def _columns(self, max_columns: int) -> None:
        """Stage columns (arc, state) and boundary columns (boundary arc, state): an arc
        from every state of its datacenter (the zero state at layer 0) that leaves room
        for its width, ordered by arc, then state, then the exit copy. Built per
        ``(group, width, from layer 0)`` as arrays."""
        t, a = self.tables, self.arcs
        self.per_dc = {k: np.array([s for s, (kk, _u) in enumerate(self.states) if kk == k],
                                   dtype=np.int64) for k in range(t.K)}
        first = (a.start == 0).astype(np.int64)
        parts, total = [], 0
        for g, w, f in sorted(set(zip(a.group.tolist(), a.width.tolist(), first.tolist()))):
            self.check()
            k = int(t.group_dc[g])
            sel = np.flatnonzero((a.group == g) & (a.width == w) & (first == f))
            froms, tos = self.per_dc[k], self._shift(k, self.dc_groups[k].index(g), w)
            if f:
                at = np.flatnonzero(froms == self.zero[k])
                froms, tos = froms[at], tos[at]
            ok = tos >= 0
            froms, tos = froms[ok], tos[ok]
            n_arc, n_from = np.repeat(sel, len(froms)), np.tile(froms, len(sel))
            n_to = np.tile(tos, len(sel))
            copies = self.exits & (a.end[n_arc] < t.L) & (k < t.K - 1)
            total += len(n_arc) + int(copies.sum())
            if total > max_columns:
                raise ModelTooLarge(f"the device-state network has more than {max_columns} "
                                    "stage columns")
            parts.append((n_arc, n_from, n_to, np.zeros(len(n_arc), dtype=np.int64)))
            parts.append((n_arc[copies], n_from[copies], n_to[copies],
                          np.ones(int(copies.sum()), dtype=np.int64)))
        arc, frm, to, kind = (np.concatenate([p[n] for p in parts]) if parts
                              else np.zeros(0, dtype=np.int64) for n in range(4))
        order = np.lexsort((kind, frm, arc))
        arc, frm, to, kind = arc[order], frm[order], to[order], kind[order]
        self.col_arc = arc.astype(np.int64)
        self.col_tail = self._node(0, a.start[arc].astype(np.int64), frm)
        self.col_head = self._node(1 + kind, a.end[arc].astype(np.int64), to)
        self._boundary_columns(self.per_dc)

    def _boundary_columns(self, per_dc: dict) -> None:
        """A boundary column per boundary arc and state whose both ends meet stage columns."""
        heads, tails = set(self.col_head.tolist()), set(self.col_tail.tolist())
        arc, tail, head = [], [], []
        for n, (b, k1, k2, _q, _u) in enumerate(self.boundary.tolist()):
            b, k1, k2 = int(b), int(k1), int(k2)
            for s in per_dc[k1].tolist():
                src = self._node(2 if (self.exits and k2 > k1) else 1, b, s)
                dst = self._node(0, b, s if k1 == k2 else self.zero[k2])
                if src in heads and dst in tails:
                    arc.append(n)
                    tail.append(src)
                    head.append(dst)
        self.bcol_arc = np.asarray(arc, dtype=np.int64)
        self.bcol_tail = np.asarray(tail, dtype=np.int64)
        self.bcol_head = np.asarray(head, dtype=np.int64)
        self._on_paths()

    def _on_paths(self) -> None:
        """Keep only the columns on some source-to-sink path (exact: a plan is such a
        path). Repeated until no column loses its tail's inflow or its head's outflow."""
        nx = len(self.col_arc)
        tails = np.concatenate([self.col_tail, self.bcol_tail])
        heads = np.concatenate([self.col_head, self.bcol_head])
        per_layer, L = len(self.states), self.tables.L
        source = tails // per_layer == 0  # N(0, ., .)
        sink = heads // per_layer == 2 * L + 1  # E(L, ., .)
        alive = np.ones(len(tails), dtype=bool)
        while True:
            self.check()
            fed = source | np.isin(tails, heads[alive])
            drained = sink | np.isin(heads, tails[alive])
            keep = alive & fed & drained
            if keep.sum() == alive.sum():
                break
            alive = keep
        sx, sy = alive[:nx], alive[nx:]
        self.col_arc, self.col_tail, self.col_head = (
            self.col_arc[sx], self.col_tail[sx], self.col_head[sx])
        self.bcol_arc, self.bcol_tail, self.bcol_head = (
            self.bcol_arc[sy], self.bcol_tail[sy], self.bcol_head[sy])

    def _period_window(self) -> None:
        """With :attr:`period` ``(lo, hi)``: drop the stage columns whose ``C`` and the
        boundary columns whose ``U`` exceed ``hi`` (a plan using one has a period above
        ``hi``); ``lo`` becomes ``B``'s floor in :meth:`_path_bounds`. Exact for the plans
        whose period lies in ``[lo, hi]``, every plan of the model costed at least at its
        ``T``: the model of one window of the decomposition on the period
        (:meth:`window`, :mod:`chainpipe.formulations.flow_windows`). Only for a period
        with one maximum (not GPipe's)."""
        if self.period is None:
            return
        if self.stage_B2 is not None:
            raise ValueError("a period window needs a period with one maximum")
        hi = self.period[1] * (1 + UB_RTOL)
        keep = self.stage_B[self.col_arc] <= hi
        self.col_arc, self.col_tail, self.col_head = (
            self.col_arc[keep], self.col_tail[keep], self.col_head[keep])
        keep = self.boundary[self.bcol_arc, 4] <= hi
        self.bcol_arc, self.bcol_tail, self.bcol_head = (
            self.bcol_arc[keep], self.bcol_tail[keep], self.bcol_head[keep])
        self._on_paths()

    # ------------------------------------------------------------------ path bounds
    def _topo(self, nodes: np.ndarray) -> np.ndarray:
        """A topological key of ``nodes``: by layer, ``E`` before ``N`` at one layer
        (stage columns go ``N(i) -> E(j)``, ``j > i``; boundary ones ``E(b) -> N(b)``)."""
        kind, layer = np.divmod(nodes // len(self.states), self.tables.L + 1)
        return 2 * layer + (kind == 0)

    def _column_terms(self):
        """Every column's ``(tail, head, fill, maxima)`` in seconds: a stage column adds
        ``C`` to the fill and drain, a boundary column ``Q``; ``maxima`` is one
        ``(name, weight, values)`` per maximum of the objective: ``B`` (``C`` of a stage
        -- ``f`` under GPipe's period -- and ``U`` of a boundary), GPipe's ``B2`` (``b``
        and ``U``), each weighted ``M - 1``, and ``S`` (``R`` of a stage), weighted 1.
        The 1F1B loops are left out: the bounds hold for a relaxation."""
        a, b = self.arcs, self.boundary[self.bcol_arc]
        tails = np.concatenate([self.col_tail, self.bcol_tail])
        heads = np.concatenate([self.col_head, self.bcol_head])
        fill = np.concatenate([a.compute[self.col_arc], b[:, 3]])
        steady = float(steady_state(self.tables.M, 1))
        maxima = [("B", steady, np.concatenate([self.stage_B[self.col_arc], b[:, 4]]))]
        if self.stage_B2 is not None:
            maxima.append(("B2", steady, np.concatenate([self.stage_B2[self.col_arc],
                                                         b[:, 4]])))
        maxima.append(("S", 1.0 if self.count_sync else 0.0,
                       np.concatenate([a.sync[self.col_arc], np.zeros(len(b))])))
        return tails, heads, fill, maxima

    def _sweep(self, tails, heads, weight, forward: bool, bottleneck: bool) -> np.ndarray:
        """Least path sum (``bottleneck``: least path maximum) of ``weight`` from the
        sources to every node (``forward``) or from every node to the sinks, over the
        DAG in topological order; ``inf`` where no path is."""
        n_nodes = 3 * (self.tables.L + 1) * len(self.states)
        per_layer, L = len(self.states), self.tables.L
        out = np.full(n_nodes, np.inf)
        if forward:
            src, dst, ends = tails, heads, np.arange(per_layer)  # N(0, ., .)
        else:
            src, dst = heads, tails
            ends = (2 * L + 1) * per_layer + np.arange(per_layer)  # E(L, ., .)
        out[ends] = 0.0
        key = self._topo(src)
        order = np.argsort(key if forward else -key, kind="stable")
        key = key[order]
        cut = np.flatnonzero(np.diff(key)) + 1
        for lo, hi in zip(np.r_[0, cut], np.r_[cut, len(key)]):
            sel = order[lo:hi]
            base = out[src[sel]]
            value = np.maximum(base, weight[sel]) if bottleneck else base + weight[sel]
            np.minimum.at(out, dst[sel], value)
        return out

    def _path_bounds(self) -> None:
        """Floors on ``B`` and ``S`` and pruning by whole-path bounds.

        Every plan is a source-to-sink path, so its ``B`` (``S``) is at least the least
        path maximum of the columns' ``C``/``U`` (``R``) -- a bottleneck shortest path,
        which ignores only the memory rows: :attr:`floor_B` and :attr:`floor_S`. With an
        upper bound, a column is dropped when every path through it has ``T`` above it:
        the least fill and drain to its tail, its own, the least from its head, plus
        ``(M - 1) max(floor_B, ...)`` and ``max(floor_S, ...)`` of the least path maxima
        through it. Repeated until nothing is dropped.
        """
        limit = math.inf if self.upper_bound is None else self.upper_bound * (1 + UB_RTOL)
        while True:
            self.check()
            tails, heads, fill, maxima = self._column_terms()
            if not len(tails):
                return
            lower = np.zeros(len(tails))
            for name, weight, value in maxima:
                fwd, bwd = (self._sweep(tails, heads, value, d, True) for d in (True, False))
                floor = float(bwd[:len(self.states)].min()) if weight > 0 else 0.0
                floor = floor if math.isfinite(floor) else 0.0
                least = 0.0 if name != "B" or self.period is None else self.period[0]
                setattr(self, f"floor_{name}", max(floor, least))
                if weight > 0:
                    with np.errstate(invalid="ignore"):
                        lower += weight * np.maximum.reduce(
                            [fwd[tails], value, bwd[heads], np.full(len(value), least)])
            if not math.isfinite(limit):
                return
            f_F, b_F = (self._sweep(tails, heads, fill, d, False) for d in (True, False))
            lower += f_F[tails] + fill + b_F[heads]
            keep = lower <= limit
            if keep.any():  # every plan the model holds is a path through kept columns
                self.cheap_bound = max(self.cheap_bound, float(lower[keep].min()))
            if keep.all():
                return
            self.pruned_by_paths += int((~keep).sum())
            self._keep_columns(keep)

    def _keep_columns(self, keep: np.ndarray) -> None:
        """Keep the stage columns where ``keep`` holds (the forward ones first, then the
        backward ones: :attr:`col_arc`, then :attr:`bcol_arc`)."""
        nx = len(self.col_arc)
        sx, sy = keep[:nx], keep[nx:]
        self.col_arc, self.col_tail, self.col_head = (
            self.col_arc[sx], self.col_tail[sx], self.col_head[sx])
        self.bcol_arc, self.bcol_tail, self.bcol_head = (
            self.bcol_arc[sy], self.bcol_tail[sy], self.bcol_head[sy])

    def _count_sweep(self, k_top: int, forward: bool) -> np.ndarray:
        """Least fill and drain (``sum C + sum Q``, seconds) from the sources to every node
        (``forward``), or from every node to the sinks, by the number of stages ``k =
        0..k_top`` on the way (``k_top`` standing for ``k_top`` or more): ``out[node,
        k]``, ``inf`` where no such path is. A sweep in topological order with the stage
        count as a second index."""
        tails, heads, fill, _maxima = self._column_terms()
        nx, per_layer, L = len(self.col_arc), len(self.states), self.tables.L
        out = np.full((3 * (L + 1) * per_layer, k_top + 1), np.inf)
        if forward:
            src, dst, ends = tails, heads, np.arange(per_layer)  # N(0, ., .)
        else:
            src, dst = heads, tails
            ends = (2 * L + 1) * per_layer + np.arange(per_layer)  # E(L, ., .)
        out[ends, 0] = 0.0
        key = self._topo(src)
        order = np.argsort(key if forward else -key, kind="stable")
        key = key[order]
        cut = np.flatnonzero(np.diff(key)) + 1
        stage = np.r_[np.ones(nx, dtype=bool), np.zeros(len(tails) - nx, dtype=bool)]
        up = np.minimum(np.arange(k_top + 1) + 1, k_top)
        for lo, hi in zip(np.r_[0, cut], np.r_[cut, len(key)]):
            sel = order[lo:hi]
            base = out[src[sel]] + fill[sel][:, None]
            moved = base.copy()
            st = stage[sel]
            if st.any():  # a stage column adds one stage (k_top stays k_top)
                moved[st] = np.inf
                rows = np.nonzero(st)[0]
                np.minimum.at(moved, (rows[:, None], up[None, :]), base[st])
            np.minimum.at(out, dst[sel], moved)
        return out

    def least_fill_by_stages(self, k_top: int) -> np.ndarray:
        """Least fill and drain of a source-to-sink path with ``k = 0..k_top`` stages
        (``k_top``: that many or more), seconds; ``inf`` where no path has that many."""
        out = self._count_sweep(k_top, True)
        sinks = (2 * self.tables.L + 1) * len(self.states) + np.arange(len(self.states))
        return out[sinks].min(axis=0)

    def _loop_prune(self) -> None:
        """Under 1F1B's period with an upper bound ``T_u``, drop the stage columns no plan
        no slower than ``T_u`` uses, by the loop over all stages: a plan of ``k < M``
        stages has every stage in the tail, so ``lambda >= W(1, k) / k = fill / k`` and
        ``T >= fill (1 + (M - 1) / k) + floor_S``; with ``k >= M`` stages, ``T >= fill +
        (M - 1) floor_B + floor_S``. Per column, the least fill of a path through it with
        ``k`` stages (:meth:`_count_sweep` both ways) gives the least such ``T`` over
        ``k``; the column goes when that is above ``T_u``."""
        t = self.tables
        if self.mode != "1f1b" or self.upper_bound is None or t.M < 2 \
                or not len(self.col_arc):
            return
        self.check()
        k_top = int(min(self.arcs.s_max, t.M))
        fwd, bwd = self._count_sweep(k_top, True), self._count_sweep(k_top, False)
        nx = len(self.col_arc)
        C = self.arcs.compute[self.col_arc]
        f, b = fwd[self.col_tail], bwd[self.col_head]  # (nx, k_top + 1) each
        ks = np.arange(k_top + 1)
        least = np.full((nx, k_top + 1), np.inf)  # least fill through c with k stages
        for k1 in range(k_top + 1):  # k1 stages before c, c, ks after: k1 + 1 + ks
            val = f[:, k1][:, None] + C[:, None] + b
            n = max(0, k_top - k1 - 1)  # the counts below k_top, one column each
            np.minimum(least[:, k1 + 1:k_top], val[:, :n], out=least[:, k1 + 1:k_top])
            np.minimum(least[:, k_top], val[:, n:].min(axis=1), out=least[:, k_top])
        steady = float(steady_state(t.M, 1))
        per = np.maximum(self.floor_B, least / np.maximum(ks, 1)[None, :])
        per[:, ks >= t.M] = self.floor_B
        if self.period is not None:  # a loop over all stages above the window's top
            per[per > self.period[1] * (1 + UB_RTOL)] = np.inf
        with np.errstate(invalid="ignore"):
            low = np.nanmin(np.where(np.isfinite(least), least + steady * per, np.inf), axis=1)
        keep = low + self.floor_S <= self.upper_bound * (1 + UB_RTOL)
        self.loop_pruned = int((~keep).sum())
        if keep.any():
            self.cheap_bound = max(self.cheap_bound, float(low[keep].min()) + self.floor_S)
        if keep.all():
            return
        self.col_arc, self.col_tail, self.col_head = (
            self.col_arc[keep], self.col_tail[keep], self.col_head[keep])
        self._on_paths()

    def _cap_stages(self) -> None:
        """Under 1F1B's period with an upper bound ``T_u``: when every path of ``M``
        stages or more has ``fill + (M - 1) floor_B + floor_S > T_u`` (:meth:`least_fill_by_stages`),
        no plan the model keeps has ``M`` stages, so ``s_max`` is lowered to ``M - 1``
        (every stage then stashes fewer than ``M``: the loop rows need no switch ``w_b``
        or ``z``, and the flow-weighted rows no ``m``; :attr:`few_stages`)."""
        t, a = self.tables, self.arcs
        if self.mode != "1f1b" or self.upper_bound is None or t.M < 2 \
                or int(a.s_max) < t.M or not len(self.col_arc):
            return
        self.check()
        least = float(self.least_fill_by_stages(t.M)[t.M])
        floor = least + steady_state(t.M, 1) * self.floor_B + self.floor_S
        if floor > self.upper_bound * (1 + UB_RTOL):
            s_max = t.M - 1
            self.arcs = dataclasses.replace(a, s_max=s_max, cap=np.minimum(a.cap, s_max))
            self.few_stages = True

    def period_range(self) -> tuple[float, float]:
        """``(floor, cap)`` in seconds: the period ``lambda`` of every plan the model holds
        is in it. ``floor`` is the bottleneck floor :attr:`floor_B` (``lambda >= C, U``);
        ``cap`` the largest ``C + Q`` or ``U`` of a column (no loop's average is above)
        and, with an upper bound ``T_u``, ``(T_u - floor_S) / (M - 1)``, as
        :meth:`_period_cap` (never below ``floor``). 1F1B's period, ``M > 1``."""
        C = self.arcs.compute[self.col_arc]
        b = self.boundary[self.bcol_arc]
        cap = max(float(C.max(initial=0.0)) + float(b[:, 3].max(initial=0.0)),
                  float(b[:, 4].max(initial=0.0)))
        if self.upper_bound is not None and self.tables.M > 1:
            room = (self.upper_bound * (1 + UB_RTOL) - self.floor_S) / (self.tables.M - 1)
            cap = min(cap, room)
        return self.floor_B, max(cap, self.floor_B)

    def window(self, lo: float, hi: float, upper_bound: float | None = None
               ) -> FlowFormulation:
        """The model of the plans whose period is in ``[lo, hi]`` (seconds) and, with
        ``upper_bound``, no slower than it (or :attr:`upper_bound` if that is lower):
        a copy of this network without the columns above ``hi``
        (:meth:`_period_window`), ``B >= lo``, pruned again by whole-path and loop
        bounds (:meth:`_path_bounds`, :meth:`_loop_prune`, :meth:`_cap_stages`), its
        :attr:`cheap_bound` raised by them. :meth:`build` with ``flow_loops`` then writes
        the fixed-period loop rows. Exact for the plans of the window, every plan of the
        model costed at least at its ``T``; ``n_arcs`` 0 when no plan is left. A
        window of a 1F1B model of one pipeline; its stage options and boundary arcs
        are this model's (no new pruning of the options)."""
        g = copy.copy(self)
        g.period = (float(lo), float(hi))
        if upper_bound is not None and (self.upper_bound is None
                                        or upper_bound < self.upper_bound):
            g.upper_bound = float(upper_bound)
        g.model = g.values = g.loop_period = None
        g.floor_B = g.floor_B2 = g.floor_S = 0.0
        g.cheap_bound, g.pruned_by_paths, g.loop_pruned = self.cheap_bound, 0, 0
        g._period_window()
        g._path_bounds()
        g._loop_prune()
        g._cap_stages()
        flow_excess.excess_prune(g)
        g.n_arcs = len(g.col_arc)
        return g

    @property
    def network_stats(self) -> dict:
        """Model size: stage options, their state copies, boundary columns, states."""
        return {"network": "device states", "stage_arcs": int(len(self.arcs)),
                "stage_arcs_total": int(self.arcs.total),
                "stage_columns": int(len(self.col_arc)),
                "boundary_arcs": int(len(self.boundary)),
                "boundary_columns": int(len(self.bcol_arc)),
                "device_states": int(len(self.states)),
                "path_pruned_columns": int(self.pruned_by_paths),
                "path_floor_B_s": self.floor_B, "path_floor_S_s": self.floor_S}

    # ------------------------------------------------------------------ model
    def build(self, flow_loops: bool = False) -> ArrayModel:
        """The model as arrays (minimise ``T / scale``); also kept as :attr:`model`.

        Columns: the stage columns, the boundary columns, ``X`` per stage option, ``B``,
        ``S``, ``P_0..P_L``, then GPipe's ``B2`` and the 1F1B loops' ``w_b`` and node
        potentials (:meth:`_loop_rows`) when the mode has them; with ``flow_loops`` also
        the flow-weighted loop rows (:meth:`_flow_loop_rows`: a much stronger LP, slow
        for the dual simplex). May be called again (each call builds afresh).
        """
        self.flow_loops = bool(flow_loops)
        self.loop_period = None if self.period is None else self.period[1] / self.scale
        rows = _Rows()
        nx, ny, na = len(self.col_arc), len(self.bcol_arc), len(self.arcs)
        self.ix, self.iy, self.iX = 0, nx, nx + ny  # column blocks
        self.iB, self.iS, self.iP = nx + ny + na, nx + ny + na + 1, nx + ny + na + 2
        self.extra = _Extra(self.iP + self.tables.L + 1)
        self.B_cap = None
        self.iB2 = self.extra.add(0.0, np.inf) if self.stage_B2 is not None else None
        self._flow_rows(rows)
        self._arc_rows(rows)
        self._max_rows(rows)
        self._position_rows(rows)
        self._loop_rows(rows)
        self._flow_loop_rows(rows)
        self._exit_rows(rows)
        cost, lower, upper, integer = self._column_data(self.extra.n)
        self.model = rows.model(cost, lower, upper, integer, self._take)
        return self.model

    def matrix(self) -> ArrayModel:
        """The built model (:meth:`build` first)."""
        return self.model

    def _flow_rows(self, rows) -> None:
        """One unit leaves the sources ``N(0, k, 0)``; conservation at every other node."""
        L = self.tables.L
        cols = np.concatenate([np.arange(len(self.col_arc)),
                               self.iy + np.arange(len(self.bcol_arc))])
        tails = np.concatenate([self.col_tail, self.bcol_tail])
        heads = np.concatenate([self.col_head, self.bcol_head])
        start = self.arcs.start[self.col_arc] == 0
        rows.add(np.nonzero(start)[0], np.ones(int(start.sum())), 1.0, 1.0)
        nodes = np.concatenate([tails, heads])
        sign = np.concatenate([np.ones(len(tails)), -np.ones(len(heads))])
        both = np.concatenate([cols, cols])
        order = np.argsort(nodes, kind="stable")
        nodes, sign, both = nodes[order], sign[order], both[order]
        cut = np.flatnonzero(np.diff(nodes)) + 1
        for n, (lo, hi) in enumerate(zip(np.r_[0, cut], np.r_[cut, len(nodes)])):
            if n % 2000 == 0:
                self.check()
            kind, layer = divmod(int(nodes[lo]) // len(self.states), L + 1)
            if (kind == 0 and layer == 0) or (kind == 1 and layer == L):
                continue  # sources and sinks
            rows.add(both[lo:hi], sign[lo:hi], 0.0, 0.0)

    def _arc_rows(self, rows) -> None:
        """``X_a = sum_u x_{a,u}`` and every layer in exactly one stage (redundant)."""
        a = self.arcs
        order = np.argsort(self.col_arc, kind="stable")
        arcs = self.col_arc[order]
        cut = np.flatnonzero(np.diff(arcs)) + 1
        for lo, hi in zip(np.r_[0, cut], np.r_[cut, len(arcs)]):
            if lo == hi:
                continue
            n = int(arcs[lo])
            rows.add(np.r_[self.iX + n, order[lo:hi]], np.r_[1.0, -np.ones(hi - lo)], 0.0, 0.0)
        for layer in range(self.tables.L):
            self.check()
            sel = np.nonzero((a.start <= layer) & (a.end > layer))[0]
            rows.add(self.iX + sel, np.ones(len(sel)), 1.0, 1.0)

    def _phase_columns(self) -> list:
        """``(column, stage values)`` of each maximum of the period: ``B`` with ``C``
        (GPipe: ``f``) and GPipe's ``B2`` with ``b``; a boundary's ``U`` bounds each."""
        out = [(self.iB, self.stage_B)]
        if self.iB2 is not None:
            out.append((self.iB2, self.stage_B2))
        return out

    def _max_rows(self, rows) -> None:
        """``B >= C`` (each phase maximum ``>=`` its ``f`` or ``b``) and ``S >= R`` of the
        stage covering each layer, ``B >= U`` of each boundary (one arc of each sum is 1)."""
        a, t = self.arcs, self.tables
        self.has_B = t.M > 1
        self.has_S = bool((a.sync > 0).any()) and self.count_sync
        phases = self._phase_columns() if self.has_B else []
        for layer in range(t.L):
            self.check()
            sel = np.nonzero((a.start <= layer) & (a.end > layer))[0]
            for col, value in phases:
                rows.add(np.r_[col, self.iX + sel], np.r_[1.0, -value[sel] / self.scale],
                         0.0, np.inf)
            used = sel[a.sync[sel] > 0]
            if self.has_S and len(used):
                rows.add(np.r_[self.iS, self.iX + used], np.r_[1.0, -a.sync[used] / self.scale],
                         0.0, np.inf)
        if not self.has_B or not len(self.bcol_arc):
            return
        layer = self.boundary[self.bcol_arc, 0].astype(np.int64)
        occ = self.boundary[self.bcol_arc, 4] / self.scale
        # chain link j joins DCs j and j+1: a plan crosses it at most once (DCs never
        # decrease), so the U of the boundaries over it, summed over all layers, is <= B
        k1 = self.boundary[self.bcol_arc, 1].astype(np.int64)
        k2 = self.boundary[self.bcol_arc, 2].astype(np.int64)
        groups = [(layer == b) & (occ > 0) for b in np.unique(layer).tolist()]
        groups += [(k1 <= j) & (k2 > j) & (occ > 0) for j in range(self.tables.K - 1)]
        for mask in groups:
            sel = np.nonzero(mask)[0]
            for col, _value in phases:
                if len(sel):
                    rows.add(np.r_[col, self.iy + sel], np.r_[1.0, -occ[sel]], 0.0, np.inf)

    def _loop_rows(self, rows) -> None:
        """1F1B's period: every loop ``W(s, t) <= (t - s + 1) lambda`` of stages stashing
        fewer than ``M`` (``B`` is ``lambda``), by node potentials along the path, as the
        plain path ILP writes them (``docs/formulations.md``, "The period"):

        - ``r_u in [0, Q_top]`` at each ``N`` node (``Q_top`` the largest ``Q``),
          ``s_w in [-Lambda, 0]`` at each ``E`` node, ``B <= Lambda``
          (:meth:`_period_cap`);
        - close: ``r_u + sum_{c leaves u} C_c x_c <= B + (Q_top + C_top) w_b``;
        - carry, stage column ``c`` from ``u`` to ``w``: ``s_w >= r_u + C_c - B -
          (C_c + Q_top + Lambda) (1 - x_c + w_b)``;
        - cross, boundary column from ``w`` to ``v``: ``r_v >= s_w + Q y``;
        - ``w_b = 1`` iff ``P_b >= M`` (the stage starting at ``b`` stashes ``M``: no loop
          starts there): ``M w_b <= P_b <= M - 1 + s_max w_b``. When no plan has ``M``
          stages, ``w`` is 0 and left out.

        On the chosen path ``r_u`` is the largest excess ``sum (C - lambda) + sum Q`` of a
        window of tail stages ending at the boundary before ``u``'s stage, clipped at 0;
        off the path every row is slack."""
        if self.mode != "1f1b" or not self.tables.M > 1 or not len(self.col_arc):
            return
        a, L, M = self.arcs, self.tables.L, self.tables.M
        C = a.compute[self.col_arc] / self.scale
        Q = self.boundary[self.bcol_arc, 3] / self.scale
        q_top = float(Q.max(initial=0.0))
        lam = self._period_cap(float(C.max(initial=0.0)) + q_top)
        self.loop_cap = lam
        s_max = int(a.s_max)
        w = None
        if s_max >= M:
            w = np.array([self.extra.add(0.0, 1.0, integer=True) for _ in range(L + 1)])
            for b in range(L):
                rows.add([self.iP + b, int(w[b])], [1.0, -float(s_max)], -np.inf, M - 1.0)
                rows.add([self.iP + b, int(w[b])], [1.0, -float(M)], 0.0, np.inf)
        r = {u: self.extra.add(0.0, q_top) for u in np.unique(self.col_tail).tolist()}
        sv = {v: self.extra.add(-lam, 0.0) for v in np.unique(self.col_head).tolist()}
        shut = q_top + float(C.max(initial=0.0))  # a close row's slack when w_b = 1
        start = a.start[self.col_arc]
        for u in r:
            self.check()
            sel = np.nonzero(self.col_tail == u)[0]
            layer = int(start[sel[0]])
            idx, val = np.r_[r[u], sel, self.iB], np.r_[1.0, C[sel], -1.0]
            if w is not None:
                idx, val = np.r_[idx, w[layer]], np.r_[val, -shut]
            rows.add(idx, val, -np.inf, 0.0)
        end = a.end[self.col_arc]
        for c in range(len(self.col_arc)):
            if end[c] == L:
                continue
            big = C[c] + q_top + lam
            idx = [sv[int(self.col_head[c])], r[int(self.col_tail[c])], self.iB, c]
            val = [1.0, -1.0, 1.0, -big]
            if w is not None:
                idx, val = idx + [int(w[start[c]])], val + [big]
            rows.add(idx, val, C[c] - big, np.inf)
        for n in range(len(self.bcol_arc)):
            v, u = int(self.bcol_head[n]), int(self.bcol_tail[n])
            if v in r and u in sv:
                rows.add([r[v], sv[u], self.iy + n], [1.0, -1.0, -Q[n]], 0.0, np.inf)

    def _column_caps(self, lam: float) -> np.ndarray:
        """Per stage column, a cap on the period of every plan through it no slower than
        the upper bound: ``(T_u - floor_S - fill) / (M - 1)`` with ``fill`` the least fill
        and drain of a path through the column; ``lam`` (scaled) when there is no bound."""
        nx = len(self.col_arc)
        if self.upper_bound is None:
            return np.full(nx, lam)
        tails, heads, fill, _maxima = self._column_terms()
        f_F, b_F = (self._sweep(tails, heads, fill, d, False) for d in (True, False))
        through = (f_F[tails] + fill + b_F[heads])[:nx]
        room = self.upper_bound * (1 + UB_RTOL) - self.floor_S - through
        caps = room / (self.tables.M - 1) / self.scale
        return np.clip(caps, self.floor_B / self.scale, lam)

    def flow_loops_apply(self) -> bool:
        """Whether the period has 1F1B's loops, so :meth:`_flow_loop_rows` has rows."""
        return self.mode == "1f1b" and self.tables.M > 1 and len(self.col_arc) > 0

    def _flow_loop_rows(self, rows) -> None:
        """1F1B's loops written flow-weighted, without big-M (:attr:`flow_loops`; the
        LP-first bound of ``ilp-path -O device_states=true``, ``docs/formulations.md``).

        Per stage column ``c``: ``z_c = B x_c`` (``sum_{c covers l} z_c = B`` for every
        layer ``l``, ``0 <= z_c <= Lambda_c x_c``: the convex hull of the product, as
        exactly one column covers a layer) and ``p_c in [0, Q_top]``, the excess carried into the stage times ``x_c``; close: ``p_c + C_c x_c - z_c <=
        0``. Per boundary column ``y``: ``sigma_y in [-Lambda y, 0]``, the excess after the
        stage before it times ``y``, and ``e_y in [0, Q_top]``, that excess plus ``Q``
        clipped at 0 (times ``y``). Per ``E``/``X`` node ``w``: ``sum_{y leaves w} sigma_y >= sum_{c
        enters w} (p_c + C_c x_c - z_c)``; per ``N`` node ``v``: ``sum_{c leaves v} p_c
        >= sum_{y enters v} e_y``; per boundary ``e_y >= sigma_y + Q_y y - Q_top m``, with
        ``m`` a binary that is 1 only when the plan has ``M`` stages or more (``M m <=
        P_0 <= M - 1 + (s_max - M + 1) m``; left out when no plan has): then stages at
        positions ``>= M`` close no loop and the rows are off. ``Lambda_c``
        (:meth:`_column_caps`) caps the period of the plans through ``c``.

        In a window of the period (:attr:`period` ``(lo, hi)``, :meth:`window`) the rows
        are written for the fixed period ``v = min(hi, Lambda)``: ``z_c = v x_c`` is linear,
        so there is no ``z`` flow, and the close row is ``p_c + (C_c - v) x_c <= 0``
        (valid for every plan of the window, whose period is at most ``v``; the node
        potentials of :meth:`_loop_rows` keep the model exact).
        """
        if not self.flow_loops or not self.flow_loops_apply():
            return
        a, t = self.arcs, self.tables
        nx, ny = len(self.col_arc), len(self.bcol_arc)
        C = a.compute[self.col_arc] / self.scale
        Q = self.boundary[self.bcol_arc, 3] / self.scale
        q_top, lam = float(Q.max(initial=0.0)), self.B_cap
        fixed = None if self.loop_period is None else min(self.loop_period, lam)
        caps = self._column_caps(lam) if fixed is None else None
        p = np.array([self.extra.add(0.0, q_top) for _ in range(nx)], dtype=np.int64)
        z = None if fixed is not None else \
            np.array([self.extra.add(0.0, lam) for _ in range(nx)], dtype=np.int64)
        sg = np.array([self.extra.add(-lam, 0.0) for _ in range(ny)], dtype=np.int64)
        e = np.array([self.extra.add(0.0, q_top) for _ in range(ny)], dtype=np.int64)
        self.flow_columns = (z, p, sg, e)
        many = None
        if int(a.s_max) >= t.M:
            many = self.extra.add(0.0, 1.0, integer=True)
            rows.add([self.iP, many], [1.0, -float(a.s_max - t.M + 1)], -np.inf, t.M - 1.0)
            rows.add([self.iP, many], [1.0, -float(t.M)], 0.0, np.inf)
        if fixed is None:
            self._z_flow_rows(rows, z, lam)
        for c in range(nx):
            if fixed is None:
                rows.add([z[c], c], [1.0, -caps[c]], -np.inf, 0.0)
                rows.add([p[c], c, z[c]], [1.0, C[c], -1.0], -np.inf, 0.0)
            else:
                rows.add([p[c], c], [1.0, C[c] - fixed], -np.inf, 0.0)
        for n in range(ny):
            rows.add([sg[n], self.iy + n], [1.0, lam], 0.0, np.inf)
            idx, val = [e[n], sg[n], self.iy + n], [1.0, -1.0, -Q[n]]
            if many is not None:
                idx, val = idx + [many], val + [q_top]
            rows.add(idx, val, 0.0, np.inf)
        self._flow_node_rows(rows, C)

    def _z_flow_rows(self, rows, z: np.ndarray, lam: float) -> None:
        """``z = B x`` as a flow of value ``B`` on the path's columns (a boundary column
        ``y`` gets ``z_y in [0, Lambda y]``): conservation at every node but the sources
        and sinks, ``B`` out of the sources. Every stage column covering a layer is on one
        cut of the network, so the ``z`` of those columns add up to ``B``: the convex hull
        of ``z_c = B x_c`` per layer, in sparse rows (a row per layer would hold every
        column over it, which made the interior point method's factorisations dense)."""
        ny, L, nst = len(self.bcol_arc), self.tables.L, len(self.states)
        zy = np.array([self.extra.add(0.0, lam) for _ in range(ny)], dtype=np.int64)
        for n in range(ny):
            rows.add([zy[n], self.iy + n], [1.0, -lam], -np.inf, 0.0)
        first = np.nonzero(self.arcs.start[self.col_arc] == 0)[0]
        rows.add(np.r_[z[first], self.iB], np.r_[np.ones(len(first)), -1.0], 0.0, 0.0)
        cols = np.r_[z, zy]
        tails = np.r_[self.col_tail, self.bcol_tail]
        heads = np.r_[self.col_head, self.bcol_head]
        nodes = np.r_[tails, heads]
        sign = np.r_[np.ones(len(tails)), -np.ones(len(heads))]
        both = np.r_[cols, cols]
        order = np.argsort(nodes, kind="stable")
        nodes, sign, both = nodes[order], sign[order], both[order]
        cut = np.flatnonzero(np.diff(nodes)) + 1
        for lo, hi in zip(np.r_[0, cut], np.r_[cut, len(nodes)]):
            kind, layer = divmod(int(nodes[lo]) // nst, L + 1)
            if (kind == 0 and layer == 0) or (kind == 1 and layer == L):
                continue  # sources and sinks
            rows.add(both[lo:hi], sign[lo:hi], 0.0, 0.0)

    def _flow_node_rows(self, rows, C: np.ndarray) -> None:
        """The node rows of :meth:`_flow_loop_rows`: the excess after a stage goes on
        along the boundary columns leaving its head, the excess after a boundary into the
        stage columns leaving its head."""
        z, p, sg, e = self.flow_columns
        for w in np.unique(self.bcol_tail).tolist():
            self.check()
            into, out = np.nonzero(self.col_head == w)[0], np.nonzero(self.bcol_tail == w)[0]
            if z is None:
                rows.add(np.r_[sg[out], p[into], into],
                         np.r_[np.ones(len(out)), -np.ones(len(into)),
                               self.loop_period - C[into]], 0.0, np.inf)
                continue
            rows.add(np.r_[sg[out], p[into], into, z[into]],
                     np.r_[np.ones(len(out)), -np.ones(len(into)), -C[into],
                           np.ones(len(into))], 0.0, np.inf)
        for v in np.unique(self.bcol_head).tolist():
            self.check()
            out, into = np.nonzero(self.col_tail == v)[0], np.nonzero(self.bcol_head == v)[0]
            rows.add(np.r_[p[out], e[into]], np.r_[np.ones(len(out)), -np.ones(len(into))],
                     0.0, np.inf)

    def _exit_rows(self, rows) -> None:
        """1F1B's loop of the two stages around each change of datacenter, summed over
        the layers (a plan leaves a datacenter once and enters one once). Per pair ``k1 <
        k2``:

            sum_{c into X(., k1, .)} C_c x_c + sum_{y: k1 -> k2} Q_y y
                + sum_{c leaves N(b, k2, 0), b > 0} C_c x_c <= 2 B + (2 C_top + Q_top) z,

        ``z = 1`` when the plan has ``M`` stages or more (``P_0 <= M - 1 + (s_max - M +
        1) z``; left out when no plan has). The first sum is the ``C`` of ``k1``'s last
        stage if the plan leaves ``k1`` (the copies into ``X`` are the only ones a
        boundary to a later datacenter leaves from), the last the ``C`` of ``k2``'s first
        stage if it enters ``k2`` (state 0 at ``b > 0`` is reached only from an earlier
        datacenter). When the plan goes from ``k1`` straight to ``k2`` the left side is
        the loop ``C_s + Q_s + C_{s+1} <= 2 lambda`` of two tail stages; otherwise it is at
        most two ``C``s, each ``<= B``."""
        if not self.exits or not len(self.col_arc):
            return
        t, a, L = self.tables, self.arcs, self.tables.L
        nst = len(self.states)
        C = a.compute[self.col_arc] / self.scale
        Q = self.boundary[self.bcol_arc, 3] / self.scale
        kind, layer = np.divmod(self.col_tail // nst, L + 1)
        tail_state = self.col_tail % nst
        hkind = self.col_head // nst // (L + 1)
        head_dc = np.array([k for k, _u in self.states])[self.col_head % nst]
        k1s = self.boundary[self.bcol_arc, 1].astype(np.int64)
        k2s = self.boundary[self.bcol_arc, 2].astype(np.int64)
        z = None
        if int(a.s_max) >= t.M:
            z = self.extra.add(0.0, 1.0, integer=True)
            rows.add([self.iP, z], [1.0, -float(a.s_max - t.M + 1)], -np.inf, t.M - 1.0)
            rows.add([self.iP, z], [1.0, -float(t.M)], 0.0, np.inf)  # z = 1 only then
        big = 2.0 * float(C.max(initial=0.0)) + float(Q.max(initial=0.0))
        self.exit_rows = 0
        for k1 in range(t.K - 1):
            out = np.nonzero((hkind == 2) & (head_dc == k1))[0]
            for k2 in range(k1 + 1, t.K):
                self.check()
                cross = np.nonzero((k1s == k1) & (k2s == k2))[0]
                if not len(cross):
                    continue
                first = np.nonzero((layer > 0) & (tail_state == self.zero[k2]))[0]
                idx = np.r_[out, self.iy + cross, first, self.iB]
                val = np.r_[C[out], Q[cross], C[first], -2.0]
                if z is not None:
                    idx, val = np.r_[idx, z], np.r_[val, -big]
                rows.add(idx, val, -np.inf, 0.0)
                self.exit_rows += 1

    def _position_rows(self, rows) -> None:
        """1F1B memory: ``P_b`` stages start at ``b`` or later; an option holding ``n < M``
        needs ``P_b <= n`` (``P_b + sum (s_max - cap) X <= s_max``), as in CP-SAT."""
        a, L = self.arcs, self.tables.L
        s_max = a.s_max
        rows.add([self.iP + L], [1.0], 0.0, 0.0)
        for b in range(L):
            sel = np.nonzero(a.start == b)[0]
            rows.add(np.r_[self.iP + b, self.iP + b + 1, self.iX + sel],
                     np.r_[1.0, -1.0, -np.ones(len(sel))], 0.0, 0.0)
            tight = sel[a.cap[sel] < s_max]
            if len(tight):
                rows.add(np.r_[self.iP + b, self.iX + tight],
                         np.r_[1.0, (s_max - a.cap[tight]).astype(float)], -np.inf, float(s_max))

    def _period_cap(self, top: float) -> float:
        """A cap on the period ``B`` (scaled) of every plan the model must keep: ``top``
        (the largest ``C`` plus the largest ``Q``: no loop's average is above) and, with an
        upper bound ``T_u``, ``(T_u - floor_S) / (M - 1)`` (a plan no slower than ``T_u``
        pays ``(M - 1) lambda`` of it); never below ``B``'s floor. Set as ``B``'s upper
        bound, it bounds the loop potentials (:meth:`_loop_rows`)."""
        cap = top if self.period is None else min(top, self.period[1] / self.scale)
        if self.upper_bound is not None and self.tables.M > 1:
            room = (self.upper_bound * (1 + UB_RTOL) - self.floor_S) / (self.tables.M - 1)
            cap = min(cap, room / self.scale)
        cap = max(cap, self.floor_B / self.scale)
        self.B_cap = cap
        return cap

    def _column_data(self, ncols: int):
        """Objective, bounds and integrality of every column."""
        a, M = self.arcs, self.tables.M
        cost = np.zeros(ncols)
        cost[self.iX:self.iX + len(a)] = a.compute / self.scale
        cost[self.iy:self.iX] = self.boundary[self.bcol_arc, 3] / self.scale
        cost[self.iS] = 1.0 if self.has_S else 0.0
        lower = np.zeros(ncols)
        upper = np.ones(ncols)
        dead = np.ones(len(a), dtype=bool)
        dead[self.col_arc] = False
        upper[self.iX:self.iX + len(a)][dead] = 0.0  # an arc without a column is not used
        upper[self.iB] = upper[self.iS] = np.inf
        if self.B_cap is not None:  # 1F1B's loops: the period's cap
            upper[self.iB] = self.B_cap
        upper[self.iP:self.iP + self.tables.L + 1] = float(a.s_max)
        integer = np.zeros(ncols, dtype=bool)
        integer[:self.iy] = True
        self.extra.fill(cost, lower, upper, integer)
        floors = [(self.iS, self.floor_S, self.has_S)]
        for col, floor in zip([c for c, _v in self._phase_columns()],
                              (self.floor_B, self.floor_B2)):
            cost[col] = float(steady_state(M, 1)) if self.has_B else 0.0
            floors.append((col, floor, self.has_B))
        for col, floor, on in floors:
            if on and math.isfinite(floor):  # the path floors (:meth:`_path_bounds`)
                lower[col] = floor / self.scale * (1.0 - BOUND_SLACK)
        return cost, lower, upper, integer

    # ------------------------------------------------------------------ bottleneck first
    def maxima(self) -> list[str]:
        """The maxima of the objective a floor can be probed for: ``"B"`` (bottleneck,
        when ``M > 1``; GPipe's forward phase), ``"B2"`` (GPipe's backward phase) and
        ``"S"`` (synchronisation, when some option has ``R > 0``)."""
        return [k for k, on in (("B", self.has_B), ("B2", self.has_B and self.iB2 is not None),
                                ("S", self.has_S)) if on]

    def _stage_values(self, which: str) -> np.ndarray:
        """The stage options' values of the maximum ``which``."""
        return {"B": self.stage_B, "B2": self.stage_B2, "S": self.arcs.sync}[which]

    def _over(self, which: str, cap: float):
        """Stage options and boundary columns whose value of the maximum ``which`` (``C``,
        ``f`` or ``b`` and ``U``; ``R`` for ``"S"``) exceeds ``cap``."""
        over_y = self.boundary[self.bcol_arc, 4] > cap if which != "S" else \
            np.zeros(len(self.bcol_arc), dtype=bool)
        return self._stage_values(which) > cap, over_y

    def max_values(self, which: str) -> np.ndarray:
        """Every value the maximum ``which`` can take in a plan (seconds, ascending): the
        stage values of the options with a column and, but for ``S``, the ``U`` of the
        boundary columns."""
        used = np.unique(self.col_arc)
        stage = self._stage_values(which)[used]
        if which != "S":
            return np.unique(np.r_[stage, self.boundary[self.bcol_arc, 4]])
        return np.unique(stage)

    def capped_model(self, which: str, cap: float) -> ArrayModel:
        """The built model, objective 0, without the columns above ``cap`` (seconds) for
        the maximum ``which``: its plans are those whose ``B`` (``S``) is at most ``cap``."""
        a = self.arcs
        upper = self.model.col_upper.copy()
        over, over_y = self._over(which, cap)
        upper[:self.iy][over[self.col_arc]] = 0.0
        upper[self.iX:self.iX + len(a)][over] = 0.0
        upper[self.iy:self.iX][over_y] = 0.0
        return dataclasses.replace(self.model, cost=np.zeros_like(self.model.cost),
                                   col_upper=upper, start=None)

    def sync_capped(self, limit: float, strict: bool) -> ArrayModel:
        """The built model minimising ``T - max R`` (the ``S`` column costs nothing) over
        the plans whose every stage has ``R <= limit`` (``R < limit`` when ``strict``):
        one pipeline's part of the joint model of several pipelines solved by levels of
        the synchronisation (``solvers/ilp.py:_joint_by_sync``)."""
        a = self.arcs
        over = a.sync >= limit if strict else a.sync > limit
        upper = self.model.col_upper.copy()
        upper[:self.iy][over[self.col_arc]] = 0.0
        upper[self.iX:self.iX + len(a)][over] = 0.0
        cost = self.model.cost.copy()
        cost[self.iS] = 0.0
        return dataclasses.replace(self.model, cost=cost, col_upper=upper, start=None)

    def chosen_sync(self) -> float:
        """``max R`` (seconds) of the stage columns at 1 in the last solution."""
        chosen = self.col_arc[self.values[:len(self.col_arc)] > 0.5]
        return float(self.arcs.sync[chosen].max()) if len(chosen) else 0.0

    def floor_max(self, which: str, floor: float) -> float:
        """``B >= floor`` (or ``B2``, ``S``; seconds) in the main model; the scaled floor
        set."""
        col = {"B": self.iB, "B2": self.iB2, "S": self.iS}[which]
        scaled = floor / self.scale * (1.0 - BOUND_SLACK)
        if scaled > self.model.col_lower[col]:
            self.model.col_lower = self.model.col_lower.copy()
            self.model.col_lower[col] = scaled
        return float(self.model.col_lower[col])

    # ------------------------------------------------------------------ read back
    def _take(self, values: np.ndarray) -> None:
        self.values = values

    def decode(self) -> Plan:
        """The plan of the stage columns at 1 (values rounded at 0.5)."""
        t, a = self.tables, self.arcs
        chosen = self.col_arc[self.values[:len(self.col_arc)] > 0.5]
        chosen = chosen[np.argsort(a.start[chosen])]
        return Plan.from_tuples(t.instance, [
            (int(a.start[n]), int(a.end[n]), t.groups[int(a.group[n])].dc,
             t.groups[int(a.group[n])].index, int(a.d[n]), int(a.t[n])) for n in chosen])

    def start(self, plan: Plan) -> np.ndarray | None:
        """Column values of ``plan`` in this model (a MIP start), or ``None`` when some
        stage or boundary has no column here, or under 1F1B's period (the loop potentials
        are not filled in).

        A stage whose option was dropped (dominated) takes a kept option of the same
        group and layers with no more devices, no larger ``C`` nor ``R`` and a position
        cap at least its own: the start is then a plan at least as fast. The device states
        are walked with the widths taken.
        """
        t = self.tables
        if self.mode == "1f1b":  # the loop potentials are not filled in: no start
            return None
        group_of = {(t.instance.datacenters[g.dc].name, g.type): n
                    for n, g in enumerate(t.groups)}
        cols = {(int(n), int(u)): c for c, (n, u) in enumerate(zip(self.col_arc,
                                                                   self.col_tail))}
        bcols = {(int(n), int(u)): c for c, (n, u) in enumerate(zip(self.bcol_arc,
                                                                    self.bcol_tail))}
        barc = {(int(b), int(k1), int(k2)): n
                for n, (b, k1, k2, _q, _u) in enumerate(self.boundary.tolist())}
        x, y, chosen = [], [], []
        node, k_prev = None, None
        stages = plan.stages
        for s, st in enumerate(stages):
            dc_name, dev_type, _i = st.devices[0].split("/")
            g = group_of[(dc_name, dev_type)]
            k = int(t.group_dc[g])
            if node is not None:  # the boundary column into this stage
                n = barc.get((st.start, k_prev, k))
                c = None if n is None else bcols.get((n, node))
                if c is None:
                    return None
                y.append(c)
                node = self._node(
                    0, st.start, node % len(self.states) if k == k_prev else self.zero[k])
            else:
                node = self._node(0, 0, self.zero[k])
            c = self._start_column(g, st, len(stages) - s, node, cols)
            if c is None:
                return None
            x.append(c)
            chosen.append(int(self.col_arc[c]))
            node, k_prev = int(self.col_head[c]), k
        return self._start_values(x, y, chosen)

    def _start_column(self, g: int, st, position: int, node: int, cols: dict):
        """The stage column of ``st`` (group ``g``) leaving ``node``: its own option or
        one that dominates it (:meth:`start`), fastest first; ``None`` if there is none."""
        a, t = self.arcs, self.tables
        opts = t.options(g)
        o = next((o for o in range(len(opts.d))
                  if (opts.d[o], opts.t[o]) == (st.data_parallel, st.tensor_parallel)), None)
        if o is None:
            return None
        C, R = opts.compute_time[o, st.start, st.end], opts.sync_time[o, st.start, st.end]
        fit = np.nonzero((a.group == g) & (a.start == st.start) & (a.end == st.end)
                         & (a.width <= st.data_parallel * st.tensor_parallel)
                         & (a.compute <= C) & (a.sync <= R)
                         & ((a.cap >= position) | (a.cap >= a.s_max)))[0]
        for n in sorted(fit.tolist(), key=lambda n: (a.compute[n], a.sync[n])):
            c = cols.get((n, node))
            if c is not None:
                return c
        return None

    def _start_values(self, x: list, y: list, chosen: list) -> np.ndarray:
        """The start's column vector: stage and boundary columns, ``X``, the maxima and
        the position counts ``P_b``."""
        a, m = self.arcs, self.model
        values = np.zeros(m.num_cols)
        values[x] = 1.0
        values[self.iy + np.asarray(y, dtype=np.int64)] = 1.0
        values[self.iX + np.asarray(chosen, dtype=np.int64)] = 1.0
        if self.has_B:
            occ = self.boundary[self.bcol_arc[y], 4] if y else np.zeros(0)
            for col, value in self._phase_columns():
                values[col] = max(max(value[chosen]), max(occ, default=0.0)) / self.scale
                values[col] = max(values[col], m.col_lower[col])
        if self.has_S:
            values[self.iS] = max(max(a.sync[chosen]) / self.scale, m.col_lower[self.iS])
        starts = a.start[chosen]
        for b in range(self.tables.L + 1):
            values[self.iP + b] = float((starts >= b).sum())
        return values


class _Extra:
    """Columns appended after the fixed blocks: bounds, integrality, cost 0."""

    def __init__(self, first: int):
        self.n, self.cols = first, []

    def add(self, lower: float, upper: float, integer: bool = False) -> int:
        """A new column's index."""
        self.cols.append((lower, upper, integer))
        self.n += 1
        return self.n - 1

    def fill(self, cost, lower, upper, integer) -> None:
        """Write the appended columns' bounds and integrality into the arrays."""
        first = self.n - len(self.cols)
        for n, (lo, up, whole) in enumerate(self.cols):
            lower[first + n], upper[first + n], integer[first + n] = lo, up, whole


class _Rows:
    """Sparse rows collected as arrays, turned into an :class:`ArrayModel`."""

    def __init__(self):
        self.index, self.value, self.lower, self.upper = [], [], [], []

    def add(self, index, value, lower: float, upper: float) -> None:
        self.index.append(np.asarray(index, dtype=np.int64))
        self.value.append(np.asarray(value, dtype=float))
        self.lower.append(lower)
        self.upper.append(upper)

    def model(self, cost, lower, upper, integer, sink) -> ArrayModel:
        starts = np.r_[0, np.cumsum([len(i) for i in self.index])].astype(np.int32)
        index = np.concatenate(self.index).astype(np.int32) if self.index else \
            np.zeros(0, np.int32)
        value = np.concatenate(self.value) if self.value else np.zeros(0)
        return ArrayModel(cost, lower, upper, integer, np.array(self.lower, float),
                          np.array(self.upper, float), starts, index, value, 0.0, [],
                          sink=sink)
