"""The interval (path) ILP: candidate stages as arcs of a layered network.

Nodes are ``In(i, c, k)`` (a stage of position class ``c`` starts at layer ``i`` in
datacenter ``k``) and ``Out(j, c, k)`` (a stage of class ``c`` in datacenter ``k``
ended at layer ``j``). A *stage arc* ``x_a``, ``a = (g, o, i, j, c)`` with ``o`` a
``(d, t)`` option of group ``g`` (contract version 2), goes from
``In(i, c, dc(g))`` to ``Out(j, c, dc(g))``; a *boundary arc* ``y_b``,
``b = (j, c, c', k1, k2)`` with ``k1 <= k2`` and ``c'`` a successor class of ``c``,
goes from ``Out(j, c, k1)`` to ``In(j, c', k2)`` and carries the link costs of the
boundary at layer ``j`` on the path ``k1 -> k2``. One unit of flow leaves layer 0
and reaches layer ``L``; see ``docs/formulations.md`` for the full model and why
each constraint is exact.

The module is split like the model: :meth:`PathFormulation.variables`, one method
per constraint family, :meth:`PathFormulation.objective`, the builder
:func:`build_path` and the decoder :meth:`PathFormulation.decode`.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from ..cost import compute_time, iteration_time, occupancy, steady_state, traversal
from ..instance import Instance
from ..plan import Plan
from ..tables import CostTables
from .common import (
    OBJECTIVE_MAGNITUDE,
    CandidateOptions,
    Positions,
    candidate_options,
    max_stages,
    memory_position_classes,
    period_mode,
    phase_arrays,
    position_classes,
    time_scale,
    undominated,
)
from .matrix import Columns, LinearModel, import_pulp, no_check, to_matrix

#: ``bottleneck="auto"`` uses the layer-cover rows while their non-zeros stay below this
LAYER_COVER_MAX_NONZEROS = 2_000_000


def _successor_grid(grid: np.ndarray, pos: Positions) -> np.ndarray:
    """``[b, c, k]``: ``grid[b, c', k]`` for some successor class ``c'`` of ``c``."""
    out = np.zeros_like(grid)
    out[:, 2:, :] = grid[:, 1:-1, :]  # c' = c - 1
    if pos.saturating:
        out[:, pos.count, :] |= grid[:, pos.count, :]  # c' = c (the saturating class)
    return out


def _linked(ins: np.ndarray, outs: np.ndarray, pos: Positions):
    """``(reach_in, reach_out)``: In nodes entered by a boundary arc, Out nodes left by one.

    A boundary arc at layer ``b`` goes from ``Out(b, c, k1)`` to ``In(b, c', k2)`` with
    ``c'`` a successor class of ``c`` and ``k1 <= k2``.
    """
    # some In node of a successor class at a DC >= k1 / some Out node at a DC <= k2
    later_in = np.flip(np.logical_or.accumulate(np.flip(ins, 2), 2), 2)
    reach_out = outs & _successor_grid(later_in, pos)
    reach_out[-1] = False  # no boundary after the last layer
    earlier_out = np.logical_or.accumulate(outs, 2)
    # In(b, c', k2) is entered when some Out(b, c, k1 <= k2) has c' among c's successors
    entered = np.zeros_like(ins)
    entered[:, 1:-1, :] = earlier_out[:, 2:, :]  # c' = c - 1
    if pos.saturating:
        entered[:, pos.count, :] |= earlier_out[:, pos.count, :]
    reach_in = ins & entered
    reach_in[-1] = False
    return reach_in, reach_out


def _boundary_arcs(ins: np.ndarray, outs: np.ndarray, pos: Positions) -> np.ndarray:
    """Every boundary arc ``(b, c, c', k1, k2)`` between kept nodes, sorted, as the rows
    of an array (a long chain has millions: tuples are made of the kept ones only)."""
    last = ins.shape[0] - 1
    b, c, k1 = np.nonzero(outs[:last])
    K = ins.shape[2]
    rows = []
    for c2, use in ((c - 1, c >= 2), (c, pos.saturating & (c == pos.count))):
        bb, cc, cc2, kk1 = b[use], c[use], c2[use], k1[use]
        k2 = np.arange(K)
        ok = ins[bb[:, None], cc2[:, None], k2[None, :]] & (k2[None, :] >= kk1[:, None])
        n, m = np.nonzero(ok)
        rows.append(np.stack([bb[n], cc[n], cc2[n], kk1[n], k2[m]], axis=1))
    arcs = np.concatenate(rows) if rows else np.zeros((0, 5), dtype=np.int64)
    return arcs[np.lexsort(arcs.T[::-1])]


class PathFormulation:
    """Builder and decoder of the path ILP for one instance (PuLP imported lazily)."""

    name = "ilp-path"

    def __init__(self, tables: CostTables, bottleneck: str = "auto", check=None,
                 dominance: bool = True, upper_bound: float | None = None):
        if bottleneck not in ("auto", "layer", "node"):
            raise ValueError(f"bottleneck must be 'auto', 'layer' or 'node', got {bottleneck!r}")
        self.tables = tables
        #: called now and then while building (``Deadline.check``: raises to stop)
        self.check = check or no_check
        self.scale = time_scale(tables, OBJECTIVE_MAGNITUDE)
        #: how the period is written (:func:`~chainpipe.formulations.common.period_mode`)
        self.mode = period_mode(tables)
        # the 1F1B loops need the positions below M told apart (which stages close one),
        # unless no plan has M stages: then every stage may close a loop
        self.all_tail = self.mode == "1f1b" and max_stages(tables) < tables.M
        self.positions = (position_classes(tables) if self.mode == "1f1b" and not self.all_tail
                          else memory_position_classes(tables))
        self.candidates: CandidateOptions = candidate_options(tables, self.positions, self.check)
        #: T of a known plan: arcs that cannot be in a plan this fast are dropped
        self.upper_bound = upper_bound
        keep = np.ones(len(self.candidates), dtype=bool)
        self.arcs_dominated = 0
        if dominance:
            keep &= undominated(self.candidates, self.check)
            self.arcs_dominated = int(len(keep) - keep.sum())
        self.arcs_bounded = 0
        if upper_bound is not None:
            fits = self._within_bound(upper_bound)
            self.arcs_bounded = int((keep & ~fits).sum())
            keep &= fits
        self._prune(keep)
        cover_nnz = int(np.sum(self.arc_end - self.arc_start)) if self.n_arcs else 0
        if bottleneck == "auto":
            bottleneck = "layer" if cover_nnz <= LAYER_COVER_MAX_NONZEROS else "node"
        self.bottleneck_rows = bottleneck
        self.problem = None
        self.columns = None

    # ------------------------------------------------------------------ network
    def _fill_floor(self, flop) -> np.ndarray:
        """A lower bound on the compute time of stages holding ``flop`` FLOP in all: each
        stage has ``C >= F / (w r) >= F / (W r_max)``, ``W`` the widest option."""
        t = self.tables
        return compute_time(flop, float(t.rate.max()), t.widest)

    def _bottleneck_floor(self) -> float:
        """A lower bound on the bottleneck of every plan: the largest layer on the widest
        option of the fastest group, and the total FLOP over all devices at their rates
        (``F_s <= B w_s r_s`` summed over the stages, ``sum w_s r_s <= sum_g n_g r_g``)."""
        t = self.tables
        layer = float(np.max(np.diff(t.flop_prefix))) if t.L else 0.0
        return float(max(compute_time(layer, float(t.rate.max()), t.widest),
                         compute_time(float(t.flop_prefix[-1]), float(t.rate @ t.count))))

    def _within_bound(self, upper: float) -> np.ndarray:
        """Mask of the stage arcs some plan with ``T <= upper`` may use.

        A plan using arc ``a`` has ``T >= C_a + (M - 1) max(C_a, B_0) + R_a`` (its fill
        holds ``C_a``, its bottleneck is at least ``C_a`` and at least
        :meth:`_bottleneck_floor` ``B_0``, its synchronisation at least ``R_a``) plus the
        other stages' compute, at least :meth:`_fill_floor` of the other layers' FLOP. A
        relative slack of 1e-9 keeps the plan that gave ``upper``.
        """
        t, cand = self.tables, self.candidates
        total = float(t.flop_prefix[-1])
        rest = total - (t.flop_prefix[cand.end] - t.flop_prefix[cand.start])
        need = iteration_time(cand.compute_time + self._fill_floor(np.maximum(rest, 0.0)),
                              np.maximum(cand.compute_time, self._bottleneck_floor()), t.M,
                              cand.sync_time)
        return need <= upper * (1 + 1e-9)

    def _boundary_within_bound(self, arcs: np.ndarray, upper: float) -> np.ndarray:
        """Mask of the boundary arcs (rows of ``arcs``) some plan with ``T <= upper`` may
        use: ``T >= Q_b + (M - 1) max(U_b, B_0)`` plus the compute of all layers
        (:meth:`_fill_floor`). Vectorised over the arcs (paths by
        :meth:`~chainpipe.tables.ChainPaths.many`, within the 1e-9 slack)."""
        t = self.tables
        floor = float(self._fill_floor(float(t.flop_prefix[-1])))
        b0 = self._bottleneck_floor()
        bw, lat = t.chain.many(arcs[:, 3], arcs[:, 4])
        u = occupancy(t.boundary_bytes[arcs[:, 0]], bw)
        need = iteration_time(traversal(lat, u) + floor, np.maximum(u, b0), t.M)
        return need <= upper * (1 + 1e-9)

    def _prune(self, keep: np.ndarray) -> None:
        """Drop stage and boundary arcs that lie on no source-to-sink path.

        Nodes live in boolean grids ``[layer, class, dc]``; a stage arc stays while its
        ``In`` node is the source or is reached by a boundary arc from a kept ``Out``
        node, and its ``Out`` node is the sink or leads to a kept ``In`` node.
        """
        t, cand, pos = self.tables, self.candidates, self.positions
        L = t.L
        dc = t.group_dc[cand.group]
        while True:
            self.check()
            ins, outs = self._node_grid(cand.start, cand.cls, dc, keep), \
                self._node_grid(cand.end, cand.cls, dc, keep)
            reach_in, reach_out = _linked(ins, outs, pos)
            new = keep & ((cand.start == 0) | reach_in[cand.start, cand.cls, dc]) \
                & ((cand.end == L) | reach_out[cand.end, cand.cls, dc])
            if (new == keep).all():
                break
            keep = new
        idx = np.nonzero(keep)[0]
        self.arc_group = cand.group[idx]
        self.arc_option = cand.option[idx]
        self.arc_d = cand.d[idx]
        self.arc_t = cand.t[idx]
        self.arc_width = cand.width[idx]
        self.arc_sync = cand.sync_time[idx]
        self.arc_start = cand.start[idx]
        self.arc_end = cand.end[idx]
        self.arc_cls = cand.cls[idx]
        self.arc_dc = dc[idx]
        self.arc_compute = cand.compute_time[idx]
        self.n_arcs = int(idx.size)
        if self.mode == "gpipe":  # the forward and backward parts, for the two phases
            self.arc_fwd, self.arc_bwd = np.zeros(self.n_arcs), np.zeros(self.n_arcs)
            for g in np.unique(self.arc_group).tolist():
                sel = np.nonzero(self.arc_group == g)[0]
                f, b = phase_arrays(t, g)
                at = (self.arc_option[sel], self.arc_start[sel], self.arc_end[sel])
                self.arc_fwd[sel], self.arc_bwd[sel] = f[at], b[at]
        arcs = _boundary_arcs(ins, outs, pos) if self.n_arcs else np.zeros((0, 5), np.int64)
        self.check()
        self.boundary_bounded = 0
        if self.upper_bound is not None:
            fits = self._boundary_within_bound(arcs, self.upper_bound)
            self.boundary_bounded = int((~fits).sum())
            arcs = arcs[fits]
            self.check()
        self.boundary = list(map(tuple, arcs.tolist()))  # Python ints
        self.arcs_memory_filtered = len(cand)

    def _checked(self, n: int, every: int = 1000):
        """``range(n)``, calling :attr:`check` every ``every`` steps."""
        for i in range(n):
            if i % every == 0:
                self.check()
            yield i

    def _node_grid(self, layer, cls, dc, keep) -> np.ndarray:
        """``[layer, class, dc]``: some kept arc has a node there."""
        grid = np.zeros((self.tables.L + 1, self.positions.count + 1, self.tables.K), dtype=bool)
        grid[layer[keep], cls[keep], dc[keep]] = True
        return grid

    @property
    def network_stats(self) -> dict:
        return {
            "positions": self.positions.count,
            "positions_saturating": self.positions.saturating,
            "stage_arcs_total": self.candidates.total,
            "stage_arcs_after_filter": self.arcs_memory_filtered,
            "stage_arcs_dominated": self.arcs_dominated,
            "stage_arcs_over_bound": self.arcs_bounded,
            "boundary_arcs_over_bound": self.boundary_bounded,
            "stage_arcs": self.n_arcs,
            "boundary_arcs": len(self.boundary),
            "bottleneck_rows": self.bottleneck_rows,
        }

    # ------------------------------------------------------------------ variables
    def variables(self) -> None:
        var = self.columns

        self.x = [var(f"x_{a}", 0, 1, cat="Integer") for a in self._checked(self.n_arcs)]
        # boundary arcs are continuous: integral stage arcs force them integral
        self.y = [var(f"y_{b}", 0, 1) for b in self._checked(len(self.boundary))]
        self.B = var("bottleneck", 0)
        if self.mode == "gpipe":  # the backward phase's maximum (B is the forward one's)
            self.B_bwd = var("bottleneck_bwd", 0)
        # the synchronisation max_s R_s (only when some arc has R > 0)
        self.R = var("sync", 0) if (self.arc_sync > 0).any() else None
        if self.mode == "1f1b":
            self.loop_variables(var)

    def tail(self, c: int) -> bool:
        """Whether a stage of class ``c`` stashes fewer than ``M`` microbatches (under
        1F1B: a loop may start at it). Exact: the classes are :func:`position_classes`,
        or every stage stashes fewer (no plan has ``M`` stages, :attr:`all_tail`)."""
        return self.all_tail or c < self.tables.M

    def loop_variables(self, var) -> None:
        """1F1B loops (``docs/formulations.md``, "The period"): the running excess
        ``r[u] in [0, Lambda]`` carried into each In node ``u`` of a stage that may close a
        loop, and ``s[w] in [-Lambda, 0]`` left at each Out node ``w`` before its boundary;
        ``Lambda`` bounds every period (:attr:`loop_cap`)."""
        L = self.tables.L
        q_max = max((self.tables.traversal(j, k1, k2) for j, _c, _c2, k1, k2 in self.boundary),
                    default=0.0)
        #: a bound on every plan's period: a loop's average is below max C + max Q
        self.loop_cap = float((self.arc_compute.max(initial=0.0) + q_max) / self.scale)
        self.r, self.s = {}, {}
        for a in self._checked(self.n_arcs):
            i, j, c, k = (int(self.arc_start[a]), int(self.arc_end[a]), int(self.arc_cls[a]),
                          int(self.arc_dc[a]))
            if not self.tail(c):
                continue
            if i > 0 and (i, c, k) not in self.r:
                self.r[i, c, k] = var(f"r_{i}_{c}_{k}", 0, self.loop_cap)
            if j < L and (j, c, k) not in self.s:
                self.s[j, c, k] = var(f"s_{j}_{c}_{k}", -self.loop_cap, 0)

    # ------------------------------------------------------------------ constraints
    def constraints_flow(self) -> None:
        """One unit leaves layer 0; flow is conserved at every In and Out node."""
        import pulp

        prob = self.problem
        out_of_in = defaultdict(list)  # In node -> stage arcs leaving it
        into_out = defaultdict(list)  # Out node -> stage arcs entering it
        source = []
        for a in self._checked(self.n_arcs):
            i, j, c, k = (int(self.arc_start[a]), int(self.arc_end[a]), int(self.arc_cls[a]),
                          int(self.arc_dc[a]))
            if i == 0:
                source.append(self.x[a])
            else:
                out_of_in[(i, c, k)].append(self.x[a])
            if j < self.tables.L:
                into_out[(j, c, k)].append(self.x[a])
        into_in = defaultdict(list)
        out_of_out = defaultdict(list)
        for b, (j, c, c2, k1, k2) in enumerate(self.boundary):
            out_of_out[(j, c, k1)].append(self.y[b])
            into_in[(j, c2, k2)].append(self.y[b])
        prob += pulp.lpSum(source) == 1, "source"
        self.check()
        for node in sorted(set(out_of_in) | set(into_in)):
            self.check()
            expr = pulp.LpAffineExpression(
                [(v, 1.0) for v in into_in.get(node, [])]
                + [(v, -1.0) for v in out_of_in.get(node, [])]
            )
            prob += expr == 0, "in_{}_{}_{}".format(*node)
        for node in sorted(set(into_out) | set(out_of_out)):
            self.check()
            expr = pulp.LpAffineExpression(
                [(v, 1.0) for v in into_out.get(node, [])]
                + [(v, -1.0) for v in out_of_out.get(node, [])]
            )
            prob += expr == 0, "out_{}_{}_{}".format(*node)

    def constraints_devices(self) -> None:
        """At most ``count_g`` devices on group ``g``: ``sum_a d_a t_a x_a <= count_g``
        (omitted when it cannot bind)."""
        import pulp

        by_group = defaultdict(list)
        for a in range(self.n_arcs):
            by_group[int(self.arc_group[a])].append((self.x[a], float(self.arc_width[a])))
        for g, terms in sorted(by_group.items()):
            if sum(w for _x, w in terms) > self.tables.count[g]:
                self.problem += (pulp.LpAffineExpression(terms) <= int(self.tables.count[g]),
                                 f"count_{g}")

    def _stage_rows(self, coef: np.ndarray) -> dict:
        """Terms ``coef_a x_a`` grouped by row: per covered layer (``"layer"`` rows) or
        per In node (``"node"`` rows); arcs with a zero coefficient are left out."""
        rows = defaultdict(list)
        if self.bottleneck_rows == "layer":
            for a in range(self.n_arcs):
                if a % 1000 == 0:
                    self.check()
                if coef[a] == 0:
                    continue
                term = (self.x[a], float(coef[a]))
                for l in range(int(self.arc_start[a]), int(self.arc_end[a])):
                    rows[("layer", l)].append(term)
        else:
            for a in range(self.n_arcs):
                if coef[a] != 0:
                    key = ("node", int(self.arc_start[a]), int(self.arc_cls[a]),
                           int(self.arc_dc[a]))
                    rows[key].append((self.x[a], float(coef[a])))
        return rows

    def constraints_bottleneck(self) -> None:
        """``B >= C`` of every stage and ``B >= U`` of every boundary (scaled times).

        Stages, ``bottleneck_rows == "layer"``: for each layer ``l``,
        ``B >= sum_{a covers l} C_a x_a`` (exactly one chosen arc covers ``l``);
        ``"node"``: for each In node, ``B >= sum_{a leaves it} C_a x_a`` (at most one
        chosen arc leaves it). Links: for each boundary layer ``j``,
        ``B >= sum_{b at j} U_b y_b`` (at most one chosen boundary arc at ``j``).
        """
        import pulp

        prob, t = self.problem, self.tables
        links = defaultdict(list)
        for b, (j, _c, _c2, k1, k2) in enumerate(self.boundary):
            u = t.occupancy(j, k1, k2) / self.scale
            if u > 0:
                links[("link", j)].append((self.y[b], float(u)))
        phases = [(self.arc_compute, self.B, "bottleneck")]
        if self.mode == "gpipe":  # GPipe: max(max f, max U) + max(max b, max U)
            phases = [(self.arc_fwd, self.B, "bottleneck"),
                      (self.arc_bwd, self.B_bwd, "bottleneck_bwd")]
        for coef, var, label in phases:
            rows = self._stage_rows(coef / self.scale)
            rows.update(links)
            for n, key in enumerate(sorted(rows)):
                self.check()
                expr = pulp.LpAffineExpression(rows[key] + [(var, -1.0)])
                prob += expr <= 0, f"{label}_{n}"

    def constraints_loops(self) -> None:
        """1F1B: every loop ``W(s, t) <= (t - s + 1) lambda`` of stages stashing fewer
        than ``M``, by node potentials along the path (``docs/formulations.md``):

        - close: ``r[u] + sum_{a leaves u} C_a x_a <= B`` per In node ``u`` of such a class;
        - stage arc ``a`` from ``u`` to ``w``: ``s[w] >= r[u] + C_a - B - (C_a + 2 Lambda)
          (1 - x_a)``;
        - boundary arc ``b`` from ``w`` to ``v``: ``r[v] >= s[w] + Q_b y_b``.

        On the chosen path ``r`` is the largest excess ``sum (C - lambda) + sum Q`` of a
        window ending at the boundary before the stage, clipped at 0; elsewhere the rows
        are slack."""
        import pulp

        if self.mode != "1f1b":
            return
        prob, t, L, lam = self.problem, self.tables, self.tables.L, self.loop_cap
        closing = defaultdict(list)
        for a in self._checked(self.n_arcs):
            i, j, c, k = (int(self.arc_start[a]), int(self.arc_end[a]), int(self.arc_cls[a]),
                          int(self.arc_dc[a]))
            if not self.tail(c):
                continue
            C = float(self.arc_compute[a] / self.scale)
            r = self.r.get((i, c, k))
            if r is not None:
                closing[i, c, k].append((self.x[a], C))
            if j < L:
                big = C + 2.0 * lam
                terms = [(self.s[j, c, k], 1.0), (self.B, 1.0), (self.x[a], -big)]
                if r is not None:
                    terms.append((r, -1.0))
                prob += pulp.LpAffineExpression(terms) >= C - big, f"carry_{a}"
        for n, (node, terms) in enumerate(sorted(closing.items())):
            self.check()
            prob += (pulp.LpAffineExpression(terms + [(self.r[node], 1.0), (self.B, -1.0)])
                     <= 0, f"close_{n}")
        for b, (j, c, c2, k1, k2) in enumerate(self.boundary):
            if b % 1000 == 0:
                self.check()
            if not self.tail(c) or (j, c2, k2) not in self.r or (j, c, k1) not in self.s:
                continue
            q = float(t.traversal(j, k1, k2) / self.scale)
            prob += (pulp.LpAffineExpression([(self.r[j, c2, k2], 1.0), (self.s[j, c, k1], -1.0),
                                              (self.y[b], -q)]) >= 0, f"cross_{b}")

    def constraints_sync(self) -> None:
        """``R >= R_a`` of every chosen stage (scaled), by the rows of the bottleneck:
        ``R >= sum_{a covers l} R_a x_a`` per layer (or per In node)."""
        import pulp

        if self.R is None:
            return
        rows = self._stage_rows(self.arc_sync / self.scale)
        for n, key in enumerate(sorted(rows)):
            self.check()
            self.problem += pulp.LpAffineExpression(rows[key] + [(self.R, -1.0)]) <= 0, \
                f"sync_{n}"

    # ------------------------------------------------------------------ objective
    def objective(self) -> None:
        """``(sum_a C_a x_a + sum_b Q_b y_b + (M - 1) B + R) / time_scale``."""
        import pulp

        t = self.tables
        terms = [(self.x[a], float(self.arc_compute[a] / self.scale))
                 for a in self._checked(self.n_arcs)]
        for b, (j, _c, _c2, k1, k2) in enumerate(self.boundary):
            if b % 1000 == 0:
                self.check()
            q = t.traversal(j, k1, k2) / self.scale
            if q != 0:
                terms.append((self.y[b], float(q)))
        if t.M > 1:
            terms.append((self.B, float(steady_state(t.M, 1.0))))
            if self.mode == "gpipe":
                terms.append((self.B_bwd, float(steady_state(t.M, 1.0))))
        if self.R is not None:
            terms.append((self.R, 1.0))
        self.problem.setObjective(pulp.LpAffineExpression(terms))

    # ------------------------------------------------------------------ build/decode
    def build(self):
        """The PuLP problem (minimise ``T / time_scale``)."""
        pulp = import_pulp()
        self.problem = pulp.LpProblem("chainpipe_path", pulp.LpMinimize)
        self.columns = Columns(self.problem)
        self.variables()
        self.constraints_flow()
        self.constraints_devices()
        self.constraints_bottleneck()
        self.constraints_loops()
        self.constraints_sync()
        self.objective()
        return self.problem

    def matrix(self) -> LinearModel:
        """The built model as arrays (:func:`~chainpipe.formulations.matrix.to_matrix`)."""
        return to_matrix(self.problem, self.columns.variables, self.check)

    def start(self, plan: Plan) -> np.ndarray | None:
        """Column values of ``plan`` in this model (a MIP start), or ``None`` if some
        stage or boundary has no arc here.

        A stage whose option was dropped as dominated takes the arc of the same stage that
        dominates it (no more devices, no larger ``C`` or ``R``): the start is then a plan
        at least as fast.
        """
        t, pos = self.tables, self.positions
        if self.mode == "1f1b":  # the loop potentials are not filled in: no start
            return None
        group_of = {(t.instance.datacenters[g.dc].name, g.type): n for n, g in enumerate(t.groups)}
        arcs: dict[tuple, list[int]] = defaultdict(list)
        for a in range(self.n_arcs):
            arcs[(int(self.arc_group[a]), int(self.arc_start[a]), int(self.arc_end[a]),
                  int(self.arc_cls[a]))].append(a)
        boundary = {b: n for n, b in enumerate(self.boundary)}
        S = plan.num_stages
        chosen, classes, dcs = [], [], []
        for s, st in enumerate(plan.stages):
            dc_name, dev_type, _i = st.devices[0].split("/")
            g = group_of[(dc_name, dev_type)]
            c = min(S - s, pos.count)
            grp_opt = t.options(g)
            o = next((o for o in range(len(grp_opt.d))
                      if (grp_opt.d[o], grp_opt.t[o]) == (st.data_parallel, st.tensor_parallel)),
                     None)
            if o is None:
                return None
            width = st.data_parallel * st.tensor_parallel
            C, R = grp_opt.compute_time[o, st.start, st.end], grp_opt.sync_time[o, st.start, st.end]
            fit = [a for a in arcs.get((g, st.start, st.end, c), [])
                   if self.arc_width[a] <= width and self.arc_compute[a] <= C
                   and self.arc_sync[a] <= R]
            if not fit:
                return None
            chosen.append(min(fit, key=lambda a: (self.arc_compute[a], self.arc_sync[a])))
            classes.append(c)
            dcs.append(t.groups[g].dc)
        crossing = []
        for s in range(S - 1):
            key = (plan.stages[s].end, classes[s], classes[s + 1], dcs[s], dcs[s + 1])
            if key not in boundary:
                return None
            crossing.append(boundary[key])
        value = {id(self.x[a]): 1.0 for a in chosen}
        value.update({id(self.y[b]): 1.0 for b in crossing})
        occupancy = [t.occupancy(self.boundary[b][0], self.boundary[b][3], self.boundary[b][4])
                     for b in crossing]
        value[id(self.B)] = max([float(self.arc_compute[a]) for a in chosen] + occupancy) \
            / self.scale
        if self.mode == "gpipe":
            value[id(self.B)] = max([float(self.arc_fwd[a]) for a in chosen] + occupancy) \
                / self.scale
            value[id(self.B_bwd)] = max([float(self.arc_bwd[a]) for a in chosen]
                                        + occupancy) / self.scale
        if self.R is not None:
            value[id(self.R)] = max(float(self.arc_sync[a]) for a in chosen) / self.scale
        return np.array([value.get(id(v), 0.0) for v in self.columns.variables])

    def decode(self) -> Plan:
        """The plan of the chosen stage arcs (values rounded at 0.5)."""
        chosen = [a for a in range(self.n_arcs) if (self.x[a].varValue or 0.0) > 0.5]
        chosen.sort(key=lambda a: self.arc_start[a])
        groups = self.tables.groups
        return Plan.from_tuples(
            self.tables.instance,
            [(int(self.arc_start[a]), int(self.arc_end[a]), groups[int(self.arc_group[a])].dc,
              groups[int(self.arc_group[a])].index, int(self.arc_d[a]), int(self.arc_t[a]))
             for a in chosen],
        )


def build_path(instance: Instance | CostTables, bottleneck: str = "auto") -> PathFormulation:
    """Build the path ILP; ``.problem`` holds the PuLP model, ``.decode()`` the plan."""
    tables = instance if isinstance(instance, CostTables) else CostTables(instance)
    form = PathFormulation(tables, bottleneck=bottleneck)
    form.build()
    return form
