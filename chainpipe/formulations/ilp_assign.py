"""The compact assignment ILP: layers to ordered stage slots, slots to device groups.

Slots are stage positions counted from the end, ``p = 1..P`` (``p = 1`` is the
last stage), so a slot's 1F1B in-flight count ``min(M, p)`` is a constant and
memory is linear. Used slots form a prefix ``1..S``; layers go to slots in
non-increasing order, each used slot gets at least one layer and exactly one
device group. Stage times, link costs and the bottleneck are linearised with
big-M rows that are exact because every linearised quantity only ever makes
the objective larger (see ``docs/formulations.md``).

The module is split like the model: :meth:`AssignFormulation.variables`, one
method per constraint family, :meth:`AssignFormulation.objective`, the builder
:func:`build_assign` and the decoder :meth:`AssignFormulation.decode`.
"""

from __future__ import annotations

import numpy as np

from ..cost import (
    compute_time,
    memory_capacity,
    memory_need,
    occupancy,
    steady_state,
    traversal,
)
from ..instance import Instance
from ..plan import Plan
from ..tables import CostTables
from .common import OBJECTIVE_MAGNITUDE, max_stages, time_scale
from .matrix import Columns, LinearModel, no_check, to_matrix


class AssignFormulation:
    """Builder and decoder of the assignment ILP for one instance (PuLP imported lazily)."""

    name = "ilp-assign"

    def __init__(self, tables: CostTables, check=None):
        t = self.tables = tables
        #: called now and then while building (``Deadline.check``: raises to stop)
        self.check = check or no_check
        self.scale = time_scale(tables, OBJECTIVE_MAGNITUDE)
        self.P = max(max_stages(tables), 1)
        L = t.L
        layers = t.instance.layers
        self.flop = np.array([ly.flop for ly in layers])
        self.params = np.array([float(ly.params) for ly in layers])
        self.act = np.array([ly.activation_bytes for ly in layers])
        self.out_bytes = np.array([ly.output_bytes for ly in layers])
        #: slots layer l may occupy: p <= L - l (the layers after it fill p - 1 slots)
        self.slots_of = [range(1, min(self.P, L - l) + 1) for l in range(L)]
        # groups a slot may use: some single layer fits there (else no stage can)
        single = t.max_in_flight[:, np.arange(L), np.arange(L) + 1]  # [g, l]
        self.groups_of = {
            p: [g for g in range(t.G) if (single[g] >= t.in_flight(p)).any()]
            for p in range(1, self.P + 1)
        }
        self.problem = None
        self.columns = None

    # ------------------------------------------------------------------ variables
    def variables(self) -> None:
        var = self.columns

        t, P, L = self.tables, self.P, self.tables.L
        self.u = {p: var(f"u_{p}", 1 if p == 1 else 0, 1, cat="Integer")
                  for p in range(1, P + 1)}
        self.a = {(l, p): var(f"a_{l}_{p}", 1 if (l == L - 1) else 0, 1, cat="Integer")
                  for l in range(L) for p in self.slots_of[l]}
        self.w = {(p, g): var(f"w_{p}_{g}", 0, 1, cat="Integer")
                  for p in range(1, P + 1) for g in self.groups_of[p]}
        # compute time of slot p if it runs on group g (scaled), else 0
        self.c = {(p, g): var(f"c_{p}_{g}", 0) for (p, g) in self.w}
        # boundary after layer l, from slot p to slot p - 1 (continuous: forced integral)
        self.e = {(l, p): var(f"e_{l}_{p}", 0, 1)
                  for (l, p) in self.a if p >= 2 and l <= L - 2}
        pairs = [(k1, k2) for k1 in range(t.K) for k2 in range(k1, t.K)]
        self.pairs = pairs
        self.z = {(p, k1, k2): var(f"z_{p}_{k1}_{k2}", 0, 1)
                  for p in range(2, P + 1) for (k1, k2) in pairs}
        self.x_max = float(self.out_bytes[: L - 1].max()) if L >= 2 else 0.0
        # bytes crossing after slot p on DC pair (k1, k2), in units of x_max
        self.xb = ({key: var("xb_{}_{}_{}".format(*key), 0, 1) for key in self.z}
                   if self.x_max > 0 else {})
        self.B = var("bottleneck", 0)

    # helpers --------------------------------------------------------------
    def _dc_indicator(self, p: int, k: int) -> list:
        """Terms of ``delta[p, k] = sum_{g in DC k} w[p, g]``."""
        return [(self.w[p, g], 1.0) for g in self.groups_of.get(p, [])
                if self.tables.group_dc[g] == k]

    def _bytes(self, p: int) -> list:
        """Terms of ``X[p] = sum_l out_bytes[l] e[l, p]`` (bytes crossing after slot p)."""
        return [(self.e[l, q], float(self.out_bytes[l])) for (l, q) in self.e
                if q == p and self.out_bytes[l] != 0]

    # ------------------------------------------------------------------ constraints
    def constraints_partition(self) -> None:
        """Each layer in one slot; slots non-increasing along layers; used slots a prefix."""
        import pulp

        prob, P, L = self.problem, self.P, self.tables.L
        a, u = self.a, self.u
        for l in range(L):
            prob += pulp.lpSum(a[l, p] for p in self.slots_of[l]) == 1, f"layer_{l}"
        for l in range(L - 1):
            self.check()
            for p in range(2, P + 1):
                # layer l + 1 at a slot >= p only if layer l is
                nxt = [(a[l + 1, q], 1.0) for q in range(p, P + 1) if (l + 1, q) in a]
                if not nxt:
                    continue
                cur = [(a[l, q], -1.0) for q in range(p, P + 1) if (l, q) in a]
                prob += pulp.LpAffineExpression(nxt + cur) <= 0, f"order_{l}_{p}"
        for p in range(1, P + 1):
            self.check()
            members = [a[l, p] for l in range(L) if (l, p) in a]
            prob += pulp.lpSum(members) >= u[p], f"nonempty_{p}"
            for l in range(L):
                if (l, p) in a:
                    prob += a[l, p] <= u[p], f"used_{l}_{p}"
            if p < P:
                prob += u[p + 1] <= u[p], f"prefix_{p}"

    def constraints_devices(self) -> None:
        """A used slot gets one group; at most ``count_g`` slots per group; chain order."""
        import pulp

        prob, t, P = self.problem, self.tables, self.P
        for p in range(1, P + 1):
            prob += (pulp.lpSum(self.w[p, g] for g in self.groups_of[p]) == self.u[p],
                     f"slot_group_{p}")
        for g in range(t.G):
            ws = [self.w[p, g] for p in range(1, P + 1) if (p, g) in self.w]
            if len(ws) > t.count[g]:
                prob += pulp.lpSum(ws) <= int(t.count[g]), f"count_{g}"
        # chain order and DC pairs of consecutive slots (p before p - 1):
        # sum_{k2 >= k1} z[p,k1,k2] = delta[p,k1];  sum_{k1 <= k2} z[p,k1,k2] <= delta[p-1,k2]
        for p in range(2, P + 1):
            self.check()
            for k1 in range(t.K):
                terms = [(self.z[p, k1, k2], 1.0) for k2 in range(k1, t.K)]
                terms += [(v, -c) for v, c in self._dc_indicator(p, k1)]
                prob += pulp.LpAffineExpression(terms) == 0, f"pair_from_{p}_{k1}"
            for k2 in range(t.K):
                terms = [(self.z[p, k1, k2], 1.0) for k1 in range(k2 + 1)]
                terms += [(v, -c) for v, c in self._dc_indicator(p - 1, k2)]
                prob += pulp.LpAffineExpression(terms) <= 0, f"pair_to_{p}_{k2}"

    def constraints_memory(self) -> None:
        """``sum_l (bpp P_l + n_p A_l) a[l,p] <= sum_g mem_g w[p,g]``; ``n_p`` is a constant."""
        t, P, L = self.tables, self.P, self.tables.L
        unit = float(t.memory.max())
        for p in range(1, P + 1):
            n = t.in_flight(p)
            need = memory_need(self.params, self.act, n, t.bytes_per_param) / unit
            terms = [(self.a[l, p], float(need[l])) for l in range(L)
                     if (l, p) in self.a and need[l] != 0]
            if not terms:
                continue
            terms += [(self.w[p, g], -float(memory_capacity(t.memory[g]) / unit))
                      for g in self.groups_of[p]]
            import pulp

            self.problem += pulp.LpAffineExpression(terms) <= 0, f"memory_{p}"

    def constraints_boundaries(self) -> None:
        """``e[l,p] >= a[l,p] - a[l+1,p]`` and one boundary per used slot ``p >= 2``."""
        import pulp

        prob, a = self.problem, self.a
        for n, ((l, p), e) in enumerate(self.e.items()):
            if n % 1000 == 0:
                self.check()
            terms = [(e, 1.0), (a[l, p], -1.0)]
            if (l + 1, p) in a:
                terms.append((a[l + 1, p], 1.0))
            prob += pulp.LpAffineExpression(terms) >= 0, f"last_{l}_{p}"
        for p in range(2, self.P + 1):
            self.check()
            es = [self.e[l, q] for (l, q) in self.e if q == p]
            prob += pulp.lpSum(es) == self.u[p], f"one_boundary_{p}"

    def constraints_compute(self) -> None:
        """Stage times, disaggregated by group (scaled times):

        ``sum_g r_g c[p,g] = F[p] = sum_l flop_l a[l,p]`` and
        ``c[p,g] <= Fmax_p / r_g * w[p,g]``: the slot's FLOP all sit on its one group.
        """
        import pulp

        t, L = self.tables, self.tables.L
        unit = float(self.flop.max()) if L and self.flop.max() > 0 else 1.0
        for p in range(1, self.P + 1):
            self.check()
            f_max = self._flop_cap(p)
            terms = [(self.a[l, p], -float(self.flop[l] / unit)) for l in range(L)
                     if (l, p) in self.a and self.flop[l] != 0]
            # r_g c = F: the time of one FLOP unit on g is compute_time(unit, r_g)
            terms += [(self.c[p, g], float(self.scale / compute_time(unit, t.rate[g])))
                      for g in self.groups_of[p]]
            self.problem += pulp.LpAffineExpression(terms) == 0, f"compute_{p}"
            for g in self.groups_of[p]:
                cap = compute_time(f_max, t.rate[g]) / self.scale
                self.problem += (pulp.LpAffineExpression(
                    [(self.c[p, g], 1.0), (self.w[p, g], -float(cap))]) <= 0,
                    f"compute_on_{p}_{g}")

    def _flop_cap(self, p: int) -> float:
        """Largest FLOP of a stage that fits some group at position ``p`` (``Fmax_p``)."""
        t = self.tables
        fits = (t.max_in_flight >= t.in_flight(p)).any(axis=0)  # [i, j]
        return float(t.stage_flop[fits].max()) if fits.any() else 0.0

    def constraints_links(self) -> None:
        """Bytes crossing after slot ``p``, disaggregated by DC pair (``p >= 2``):

        ``sum_{k1<=k2} xb[p,k1,k2] = X[p] = sum_l out_l e[l,p]``, ``xb <= Xmax z``.
        The pair's occupancy is ``xb / bw[k1,k2]``; its traversal ``2 (lat z + xb / bw)``.
        """
        import pulp

        if not self.xb:
            return
        for p in range(2, self.P + 1):
            self.check()
            terms = [(v, -c / self.x_max) for v, c in self._bytes(p)]
            terms += [(self.xb[p, k1, k2], 1.0) for (k1, k2) in self.pairs]
            self.problem += pulp.LpAffineExpression(terms) == 0, f"bytes_{p}"
            for (k1, k2) in self.pairs:
                self.problem += (self.xb[p, k1, k2] <= self.z[p, k1, k2],
                                 f"bytes_on_{p}_{k1}_{k2}")

    def constraints_bottleneck(self) -> None:
        """``B >= sum_g c[p,g]`` for every slot; ``B >= sum_{k1<=k2} U xb`` per boundary."""
        import pulp

        for p in range(1, self.P + 1):
            terms = [(self.c[p, g], 1.0) for g in self.groups_of[p]] + [(self.B, -1.0)]
            self.problem += pulp.LpAffineExpression(terms) <= 0, f"stage_bottleneck_{p}"
        if not self.xb:
            return
        for p in range(2, self.P + 1):
            terms = [(self.xb[p, k1, k2], self._occupancy_coef(k1, k2))
                     for (k1, k2) in self.pairs] + [(self.B, -1.0)]
            self.problem += pulp.LpAffineExpression(terms) <= 0, f"link_bottleneck_{p}"

    def _occupancy_coef(self, k1: int, k2: int) -> float:
        """Scaled occupancy per unit of ``xb`` (``xb`` is in units of ``Xmax`` bytes)."""
        return float(occupancy(self.x_max, self.tables.path_bandwidth[k1, k2]) / self.scale)

    # ------------------------------------------------------------------ objective
    def objective(self) -> None:
        """``(sum c + sum_{p,k1,k2} 2 (lat z + U xb) + (M - 1) B) / time_scale``."""
        import pulp

        t = self.tables
        terms = [(v, 1.0) for v in self.c.values()]
        for (_p, k1, k2), z in self.z.items():
            lat = traversal(t.path_latency[k1, k2], 0.0) / self.scale
            if lat:
                terms.append((z, float(lat)))
        terms += [(v, traversal(0.0, self._occupancy_coef(k1, k2)))
                  for (p, k1, k2), v in self.xb.items()]
        if t.M > 1:
            terms.append((self.B, float(steady_state(t.M, 1.0))))
        self.problem.setObjective(pulp.LpAffineExpression(terms))

    # ------------------------------------------------------------------ build/decode
    def build(self):
        """The PuLP problem (minimise ``T / time_scale``)."""
        import pulp

        self.problem = pulp.LpProblem("chainpipe_assign", pulp.LpMinimize)
        self.columns = Columns(self.problem)
        self.variables()
        self.constraints_partition()
        self.constraints_devices()
        self.constraints_memory()
        self.constraints_boundaries()
        self.constraints_compute()
        self.constraints_links()
        self.constraints_bottleneck()
        self.objective()
        return self.problem

    def matrix(self) -> LinearModel:
        """The built model as arrays (:func:`~chainpipe.formulations.matrix.to_matrix`)."""
        return to_matrix(self.problem, self.columns.variables, self.check)

    @property
    def model_stats(self) -> dict:
        return {"slots": self.P}

    def decode(self) -> Plan:
        """The plan of the used slots, earliest (highest position) first."""
        t = self.tables
        stages = []
        for p in range(self.P, 0, -1):
            if (self.u[p].varValue or 0.0) <= 0.5:
                continue
            lays = [l for l in range(t.L) if (l, p) in self.a and (self.a[l, p].varValue or 0) > 0.5]
            g = max(self.groups_of[p], key=lambda g: self.w[p, g].varValue or 0.0)
            grp = t.groups[g]
            stages.append((min(lays), max(lays) + 1, grp.dc, grp.index))
        return Plan.from_tuples(t.instance, stages)


def build_assign(instance: Instance | CostTables) -> AssignFormulation:
    """Build the assignment ILP; ``.problem`` holds the PuLP model, ``.decode()`` the plan."""
    tables = instance if isinstance(instance, CostTables) else CostTables(instance)
    form = AssignFormulation(tables)
    form.build()
    return form
