"""The CP-SAT model: boolean stage and boundary arcs of a layered network.

Nodes (``docs/cpsat.md`` has the maths):

- ``N(b, c, k)``: a stage of position class ``c`` on datacenter ``k`` starts at layer ``b``;
- ``E(b, c, k)``: a stage of position class ``c`` on datacenter ``k`` ends at layer ``b``.

Arcs:

- stage arc ``x[g, i, j, c]`` from ``N(i, c, dc(g))`` to ``E(j, c, dc(g))``: stage
  ``[i, j)`` on a device of group ``g`` at position class ``c`` (memory pre-filtered by
  :func:`chainpipe.formulations.common.candidate_stages`);
- boundary arc ``y[b, c, c', k1, k2]`` from ``E(b, c, k1)`` to ``N(b, c', k2)``,
  ``k1 <= k2``, ``c'`` a successor class of ``c``: the boundary at layer ``b`` crosses
  the path ``k1 -> k2``, so its occupancy and traversal are known exactly.

A plan is one path from a start ``N(0, ., .)`` to an end ``E(L, 1, .)``. Times are
integers in a per-instance unit with every coefficient rounded *down*, so the scaled
objective of every plan is at most its true time divided by the unit, and CP-SAT's best
bound times the unit is a valid lower bound on the true optimum.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ..cost import iteration_time, steady_state
from ..plan import Plan
from ..tables import CostTables
from .common import Positions, candidate_stages, position_classes
from .greedy import greedy_plans  # noqa: F401  (re-exported: the scaling heuristic)
from .matrix import no_check

#: the scaled objective of the scaling plan (an upper bound on the optimum) maps to this
#: many units: coefficients and the objective stay below 2^31
SCALE_UNITS = 2**30
#: variables (or arcs) handled between two deadline checks while building
CHECK_EVERY = 5000
#: relative margin for floating-point error in comparisons against the upper bound
UB_RTOL = 1e-9
#: relative shave applied to scaled quantities so float division never rounds a floor up
FLOOR_RTOL = 1e-12


def _sum(variables: list):
    """``sum(variables)`` as one CP-SAT expression (Python's ``sum`` nests, slowly)."""
    from ortools.sat.python import cp_model

    return cp_model.LinearExpr.sum(variables)


def _weighted(variables: list, coefficients: list):
    """``sum(c * v)`` as one CP-SAT expression."""
    from ortools.sat.python import cp_model

    return cp_model.LinearExpr.weighted_sum(variables, coefficients)


def scaled_floor(values, unit: float) -> np.ndarray:
    """``floor(v / unit)``, shaved by :data:`FLOOR_RTOL` so the result is ``<= v / unit``."""
    v = np.asarray(values, dtype=float) / unit
    return np.floor(v * (1.0 - FLOOR_RTOL)).astype(np.int64)


# ------------------------------------------------------------------ the model
@dataclass
class CpsatModel:
    """A built CP-SAT model with its arcs, scaling and decoder."""

    tables: CostTables
    upper_bound: float  # seconds: T of a known plan, or a bound on every modelled plan
    unit: float  # seconds per integer time unit
    positions: Positions
    model: object = None  # cp_model.CpModel
    # stage arcs
    x_group: np.ndarray = None
    x_start: np.ndarray = None
    x_end: np.ndarray = None
    x_cls: np.ndarray = None
    x_cost: np.ndarray = None  # scaled C
    x_vars: list = field(default_factory=list)
    # boundary arcs
    y_layer: np.ndarray = None
    y_from: np.ndarray = None  # (class, dc) of the stage before
    y_to: np.ndarray = None  # (class, dc) of the stage after
    y_traversal: np.ndarray = None  # scaled Q
    y_occupancy: np.ndarray = None  # scaled U
    y_vars: list = field(default_factory=list)
    bottleneck: object = None  # z, scaled max(C, U)
    objective_cap: int = 0
    rounded_terms: int = 0  # bound on the number of rounded terms in any plan's objective
    candidates_total: int = 0
    check: object = None  # called while building (Deadline.check)

    # -------------------------------------------------------------- building
    @classmethod
    def build(cls, tables: CostTables, upper_bound: float, prune: bool, check=None
              ) -> CpsatModel:
        """Build the model; ``prune`` drops arcs that alone make a plan exceed ``upper_bound``.

        ``upper_bound`` must be the time of a real plan when ``prune`` is set; the time
        unit is ``upper_bound / SCALE_UNITS``. ``check`` is called now and then while
        building (``Deadline.check``: raises to stop).
        """
        from ortools.sat.python import cp_model

        pos = position_classes(tables)
        unit = upper_bound / SCALE_UNITS
        self = cls(tables, upper_bound, unit, pos)
        self.check = check or no_check
        self.model = cp_model.CpModel()
        self._stage_arcs(prune)
        self._boundary_arcs(prune)
        self._flow()
        self._device_counts()
        self._bottleneck()
        self._objective()
        return self

    def _stage_arcs(self, prune: bool) -> None:
        t, M = self.tables, self.tables.M
        cand = candidate_stages(t, self.positions)
        self.candidates_total = cand.total
        keep = np.isfinite(cand.compute_time)  # an overflowing stage is in no finite plan
        if prune:  # T >= C + (M - 1) * C for any plan holding the stage
            least = iteration_time(cand.compute_time, cand.compute_time, M)
            keep &= least <= self.upper_bound * (1 + UB_RTOL)
        self.x_group, self.x_start = cand.group[keep], cand.start[keep]
        self.x_end, self.x_cls = cand.end[keep], cand.cls[keep]
        self.x_cost = scaled_floor(cand.compute_time[keep], self.unit)
        self.x_dc = t.group_dc[self.x_group] if len(self.x_group) else self.x_group

    def _boundary_arcs(self, prune: bool) -> None:
        t, pos, M = self.tables, self.positions, self.tables.M
        ends = {(int(j), int(c), int(k)) for j, c, k in zip(self.x_end, self.x_cls, self.x_dc)}
        starts = {(int(i), int(c), int(k)) for i, c, k in zip(self.x_start, self.x_cls, self.x_dc)}
        rows = []
        for n, (b, c1, k1) in enumerate(sorted(ends)):
            if n % 1000 == 0:
                self.check()
            if b >= t.L:
                continue
            for c2 in pos.successors(c1):
                for k2 in range(k1, t.K):
                    if (b, c2, k2) not in starts:
                        continue
                    u = t.occupancy(b, k1, k2)
                    q = t.traversal(b, k1, k2)
                    if not (math.isfinite(u) and math.isfinite(q)):
                        continue  # an overflowing boundary is in no finite plan
                    if prune and iteration_time(q, u, M) > self.upper_bound * (1 + UB_RTOL):
                        continue
                    rows.append((b, c1, k1, c2, k2, q, u))
        arr = np.array(rows, dtype=float).reshape(-1, 7)
        self.y_layer = arr[:, 0].astype(np.int64)
        self.y_from = arr[:, 1:3].astype(np.int64)
        self.y_to = arr[:, 3:5].astype(np.int64)
        self.y_traversal = scaled_floor(arr[:, 5], self.unit)
        self.y_occupancy = scaled_floor(arr[:, 6], self.unit)

    def _flow(self) -> None:
        """Variables and flow conservation: one path from layer 0 to layer L."""
        m, L = self.model, self.tables.L
        self.x_vars = self._bool_vars(len(self.x_group))
        self.y_vars = self._bool_vars(len(self.y_layer))
        out_of_start: dict = {}
        into_end: dict = {}
        for n, (v, i, j, c, k) in enumerate(zip(self.x_vars, self.x_start, self.x_end,
                                                 self.x_cls, self.x_dc)):
            if n % CHECK_EVERY == 0:
                self.check()
            out_of_start.setdefault((int(i), int(c), int(k)), []).append(v)
            into_end.setdefault((int(j), int(c), int(k)), []).append(v)
        into_start: dict = {}
        out_of_end: dict = {}
        for n, (v, b, a, d) in enumerate(zip(self.y_vars, self.y_layer, self.y_from, self.y_to)):
            if n % CHECK_EVERY == 0:
                self.check()
            out_of_end.setdefault((int(b), int(a[0]), int(a[1])), []).append(v)
            into_start.setdefault((int(b), int(d[0]), int(d[1])), []).append(v)
        # source: exactly one first stage; sink: exactly one last stage
        m.add_exactly_one([v for (i, _, _), vs in out_of_start.items() if i == 0 for v in vs])
        m.add_exactly_one([v for (j, _, _), vs in into_end.items() if j == L for v in vs])
        for n, node in enumerate(set(out_of_start) | set(into_start)):
            if n % 500 == 0:
                self.check()
            if node[0] > 0:
                m.add(_sum(out_of_start.get(node, [])) == _sum(into_start.get(node, [])))
        for n, node in enumerate(set(into_end) | set(out_of_end)):
            if n % 500 == 0:
                self.check()
            if node[0] < L:
                m.add(_sum(into_end.get(node, [])) == _sum(out_of_end.get(node, [])))
        # every layer is covered by exactly one stage (implied by the path; helps search)
        self._covering = [[] for _ in range(L)]
        for n, (i, j) in enumerate(zip(self.x_start, self.x_end)):
            if n % 1000 == 0:
                self.check()
            for layer in range(int(i), int(j)):
                self._covering[layer].append(n)
        for layer in range(L):
            self.check()
            m.add_exactly_one([self.x_vars[n] for n in self._covering[layer]])

    def _bool_vars(self, n: int) -> list:
        """``n`` unnamed boolean variables (names cost seconds), checking the deadline."""
        out: list = []
        for first in range(0, n, CHECK_EVERY):
            self.check()
            out.extend(self.model.new_bool_var("") for _ in range(min(CHECK_EVERY, n - first)))
        return out

    def _device_counts(self) -> None:
        """At most ``count`` stages on the devices of each group."""
        per_group: dict = {}
        for v, g in zip(self.x_vars, self.x_group):
            per_group.setdefault(int(g), []).append(v)
        for g, vs in per_group.items():
            if len(vs) > self.tables.count[g]:
                self.model.add(_sum(vs) <= int(self.tables.count[g]))

    def _bottleneck(self) -> None:
        """``z >= C`` of the stage covering each layer, ``z >= U`` of each boundary used."""
        m, M = self.model, self.tables.M
        if M <= 1:
            self.bottleneck = None
            return
        top = int(max(self.x_cost.max(initial=0), self.y_occupancy.max(initial=0)))
        z = m.new_int_var(0, top, "bottleneck")
        self.bottleneck = z
        for arcs in self._covering:
            self.check()
            used = [n for n in arcs if self.x_cost[n]]
            if used:
                m.add(z >= _weighted([self.x_vars[n] for n in used],
                                     [int(self.x_cost[n]) for n in used]))
        per_boundary: dict = {}
        for n, b in enumerate(self.y_layer):
            if self.y_occupancy[n]:
                per_boundary.setdefault(int(b), []).append(n)
        for arcs in per_boundary.values():
            m.add(z >= _weighted([self.y_vars[n] for n in arcs],
                                 [int(self.y_occupancy[n]) for n in arcs]))

    def _objective(self) -> None:
        """``sum C + sum Q + (M - 1) z``, capped at the scaled upper bound."""
        m, M, t = self.model, self.tables.M, self.tables
        pairs = [(v, int(c)) for c, v in zip(self.x_cost, self.x_vars) if c]
        pairs += [(v, int(q)) for q, v in zip(self.y_traversal, self.y_vars) if q]
        if self.bottleneck is not None:
            pairs.append((self.bottleneck, int(steady_state(M, 1))))
        # written into the proto: the Python expression API takes seconds on 300k terms
        m.clear_objective()
        m.proto.objective.vars.extend([v.index for v, _ in pairs])
        m.proto.objective.coeffs.extend([c for _, c in pairs])
        # every plan's scaled objective is <= its true time / unit, the optimum's <= UB / unit
        self.objective_cap = int(math.floor(self.upper_bound * (1 + UB_RTOL) / self.unit))
        m.proto.objective.domain.extend([0, self.objective_cap])
        s_max = max(1, min(t.L, int(t.count.sum())))
        self.rounded_terms = 2 * s_max - 1 + (M - 1 if M > 1 else 0)

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
        """The plan of a solution, ``values[var.index]`` being each variable's value."""
        t = self.tables
        used = [n for n, v in enumerate(self.x_vars) if values[v.index]]
        used.sort(key=lambda n: int(self.x_start[n]))
        tuples = [
            (int(self.x_start[n]), int(self.x_end[n]), int(self.x_dc[n]),
             t.groups[int(self.x_group[n])].index)
            for n in used
        ]
        return Plan.from_tuples(t.instance, tuples)

    def hint(self, plan: Plan) -> bool:
        """Add ``plan`` as a full solution hint; ``False`` if it is not a path of this model."""
        inst, t = self.tables.instance, self.tables
        refs = [inst.locate(s.devices[0]) for s in plan.stages]
        group_of = {(g.dc, g.index): n for n, g in enumerate(t.groups)}
        S = plan.num_stages
        want_x, want_y = set(), set()
        classes = []
        for s, (st, ref) in enumerate(zip(plan.stages, refs)):
            p = S - s
            c = min(p, self.positions.count)
            classes.append(c)
            want_x.add((group_of[(ref.dc, ref.group)], st.start, st.end, c))
        for s in range(S - 1):
            want_y.add((plan.stages[s].end, classes[s], refs[s].dc, classes[s + 1], refs[s + 1].dc))
        found_x = found_y = 0
        m = self.model
        m.clear_hints()
        for v, g, i, j, c in zip(self.x_vars, self.x_group, self.x_start, self.x_end, self.x_cls):
            on = (int(g), int(i), int(j), int(c)) in want_x
            found_x += on
            m.add_hint(v, on)
        for v, b, a, d in zip(self.y_vars, self.y_layer, self.y_from, self.y_to):
            on = (int(b), int(a[0]), int(a[1]), int(d[0]), int(d[1])) in want_y
            found_y += on
            m.add_hint(v, on)
        if found_x != len(want_x) or found_y != len(want_y):
            m.clear_hints()
            return False
        return True
