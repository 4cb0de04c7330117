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
    phase_time,
    steady_state,
    sync_time,
    tp_allreduce_time,
    traversal,
)
from ..instance import Instance
from ..plan import Plan
from ..tables import CostTables
from .common import (
    OBJECTIVE_MAGNITUDE,
    CoefficientOverflow,
    max_stages,
    period_mode,
    time_scale,
)
from .matrix import Columns, LinearModel, import_pulp, no_check, to_matrix

#: the per-layer quantities a slot's option shares out: FLOP, tensor-parallel bytes,
#: parameters, activation bytes
QUANTITIES = ("flop", "tp", "params", "act")


class AssignFormulation:
    """Builder and decoder of the assignment ILP for one instance (PuLP imported lazily)."""

    name = "ilp-assign"

    def __init__(self, tables: CostTables, check=None):
        t = self.tables = tables
        #: called now and then while building (``Deadline.check``: raises to stop)
        self.check = check or no_check
        self.scale = time_scale(tables, OBJECTIVE_MAGNITUDE)
        #: how the period is written (:func:`~chainpipe.formulations.common.period_mode`)
        self.mode = period_mode(tables)
        self.P = max(max_stages(tables), 1)
        L = t.L
        layers = t.instance.layers
        self.out_bytes = np.array([ly.output_bytes for ly in layers])
        per_layer = {
            "flop": np.array([ly.flop for ly in layers]),
            "tp": np.array([ly.tp_allreduce_bytes for ly in layers]),
            "params": np.array([float(ly.params) for ly in layers]),
            "act": np.array([ly.activation_bytes for ly in layers]),
        }
        if self.mode == "gpipe":  # GPipe's phases: the forward and the backward FLOP apart
            per_layer["fwd"] = np.array([ly.fwd_flop for ly in layers])
            per_layer["bwd"] = np.array([ly.bwd_flop for ly in layers])
        #: quantity -> (per-layer values in units of their largest, the unit); all-zero
        #: quantities are left out (their shares would be 0)
        self.quantity = {q: (v / v.max(), float(v.max())) for q, v in per_layer.items()
                         if L and v.max() > 0}
        prefix = {"flop": t.sums.flop, "tp": t.sums.tp_bytes, "params": t.sums.params,
                  "act": t.sums.activation, "fwd": t.sums.fwd_flop, "bwd": t.sums.bwd_flop}
        self.range_sum = {q: t.sums.range_sums(prefix[q]) / self.quantity[q][1]
                          for q in self.quantity}
        #: slots layer l may occupy: p <= L - l (the layers after it fill p - 1 slots)
        self.slots_of = [range(1, min(self.P, L - l) + 1) for l in range(L)]
        #: per slot, the (group, option) pairs some layer range fits at its position, and
        #: per such (p, g, o) the largest share of each quantity a fitting range holds
        self.options_of: dict[int, list[tuple[int, int]]] = {}
        self.cap: dict[tuple[int, int, int], dict[str, float]] = {}
        self._slot_options()
        self.problem = None
        self.columns = None

    def _slot_options(self) -> None:
        """Fill :attr:`options_of` and :attr:`cap`, each distinct option set's fitting
        options and caps computed once per in-flight count (a long chain of alike groups
        shares one), the deadline checked per slot and group."""
        t, known = self.tables, {}
        for p in range(1, self.P + 1):
            need = t.in_flight(p)
            self.options_of[p] = []
            for g in range(t.G):
                self.check()
                mif = t.options(g).max_in_flight
                key = (id(mif), need)
                if key not in known:
                    known[key] = self._fitting(mif, need)
                for o, cap in known[key]:
                    self.options_of[p].append((g, o))
                    self.cap[p, g, o] = cap

    def _fitting(self, mif: np.ndarray, need: int) -> list[tuple[int, dict]]:
        """``(o, caps)`` of each option of in-flight limits ``mif`` ``[o, i, j]`` that some
        layer range fits at in-flight count ``need``; ``caps``: per quantity, the largest
        share a fitting range holds."""
        out = []
        for o in range(mif.shape[0]):
            fits = mif[o] >= need  # [i, j]
            if fits.any():
                out.append((o, {q: float(r[fits].max()) for q, r in self.range_sum.items()}))
        return out

    def option(self, g: int, o: int) -> tuple[int, int]:
        """``(d, t)`` of option ``o`` of group ``g``."""
        opt = self.tables.options(g)
        return int(opt.d[o]), int(opt.t[o])

    # ------------------------------------------------------------------ variables
    def variables(self) -> None:
        var = self._checked_columns()
        P, L = self.P, self.tables.L
        self.u = {p: var(f"u_{p}", 1 if p == 1 else 0, 1, cat="Integer")
                  for p in range(1, P + 1)}
        self.a = {(l, p): var(f"a_{l}_{p}", 1 if (l == L - 1) else 0, 1, cat="Integer")
                  for l in range(L) for p in self.slots_of[l]}
        # slot p runs on group g with option o
        self.w = {(p, g, o): var(f"w_{p}_{g}_{o}", 0, 1, cat="Integer")
                  for p in range(1, P + 1) for (g, o) in self.options_of[p]}
        # the slot's share of each quantity if it runs (g, o), else 0 (units of the quantity)
        self.share = {(q, key): var("s_{}_{}_{}_{}".format(q, *key), 0)
                      for key in self.w for q in self.quantity}
        # boundary after layer l, from slot p to slot p - 1 (continuous: forced integral)
        self.e = {(l, p): var(f"e_{l}_{p}", 0, 1)
                  for (l, p) in self.a if p >= 2 and l <= L - 2}
        self.e_of = {p: [(l, e) for (l, q), e in self.e.items() if q == p]
                     for p in range(2, P + 1)} if self.e else {}
        self.link_variables(var)
        self.B = var("bottleneck", 0)
        if self.mode == "gpipe":  # the backward phase's maximum (B is the forward one's)
            self.B_bwd = var("bottleneck_bwd", 0)
        # 1F1B loops: g[p], the excess a loop carries across boundary p (free)
        self.g = {p: var(f"g_{p}") for p in range(2, min(P, self.tables.M - 1) + 1)} \
            if self.mode == "1f1b" else {}
        self.R = var("sync", 0) if any(self._sync_terms(p) for p in range(1, P + 1)) else None

    def _checked_columns(self):
        """:attr:`columns`, checking the deadline every 1024 new variables."""
        made = [0]

        def var(*args, **kwargs):
            made[0] += 1
            if made[0] % 1024 == 0:
                self.check()
            return self.columns(*args, **kwargs)

        return var

    def link_variables(self, var) -> None:
        """The chain, in ``O(P K)`` (never one variable per DC pair): ``c[p,k]`` (slot
        ``p`` in a DC ``<= k``, ``k < K - 1``); per boundary ``p >= 2`` and resource ``r``
        (a DC's own link ``("dc", k)`` or the chain link ``("link", j)`` between DCs ``j``
        and ``j + 1``) ``v[p,r]``, the boundary uses ``r``, for the resources that cost
        something; ``X[p]``, its bytes in units of ``x_max``, and ``O[p]``, its occupancy
        (scaled)."""
        t, P, L = self.tables, self.P, self.tables.L
        self.c = {(p, k): var(f"c_{p}_{k}", 0, 1) for p in range(1, P + 1)
                  for k in range(t.K - 1)}
        self.x_max = float(self.out_bytes[: L - 1].max()) if L >= 2 else 0.0
        self.resources = [r for r in self._all_resources()
                          if self._latency_coef(r) > 0 or self._occupancy_coef(r) > 0]
        self.v = {(p, r): var("v_{}_{}_{}".format(p, *r), 0, 1)
                  for p in range(2, P + 1) for r in self.resources}
        self.X, self.O = {}, {}
        if self.x_max > 0:
            self.X = {p: var(f"X_{p}", 0, 1) for p in range(2, P + 1)}
            self.O = {p: var(f"O_{p}", 0) for p in range(2, P + 1)}

    def _all_resources(self) -> list[tuple[str, int]]:
        K = self.tables.K
        return [("dc", k) for k in range(K)] + [("link", j) for j in range(K - 1)]

    def _resource_link(self, r: tuple[str, int]) -> tuple[float, float]:
        """``(bandwidth, latency)`` of resource ``r``."""
        chain, (kind, k) = self.tables.chain, r
        if kind == "dc":
            return chain.own_bandwidth[k], chain.own_latency[k]
        return float(chain.link_bandwidth[k]), float(chain.link_latency[k])

    def _latency_coef(self, r: tuple[str, int]) -> float:
        """Scaled traversal latency ``2 lat`` of resource ``r``, per boundary using it."""
        return float(traversal(self._resource_link(r)[1], 0.0) / self.scale)

    def _occupancy_coef(self, r: tuple[str, int]) -> float:
        """Scaled occupancy of ``x_max`` bytes on resource ``r``."""
        return float(occupancy(self.x_max, self._resource_link(r)[0]) / self.scale)

    def _dc_terms(self, p: int) -> dict[int, list]:
        """Per DC ``k``, the terms of ``delta[p, k] = sum_{g in DC k, o} w[p, g, o]``."""
        out: dict[int, list] = {}
        for g, o in self.options_of.get(p, []):
            out.setdefault(int(self.tables.group_dc[g]), []).append((self.w[p, g, o], 1.0))
        return out

    def _compute_terms(self, p: int) -> list:
        """Terms of the slot's compute time ``C`` (scaled): per ``(g, o)``,
        ``F / (d t r_g)`` on its FLOP share plus the all-reduce on its TP-bytes share."""
        t, out = self.tables, []
        for g, o in self.options_of[p]:
            d, tp = self.option(g, o)
            grp = t.groups[g]
            if "flop" in self.quantity:
                coef = compute_time(self.quantity["flop"][1], grp.flop_per_s, d, tp)
                out.append((self.share["flop", (p, g, o)], float(coef / self.scale)))
            if "tp" in self.quantity and tp > 1:
                coef = tp_allreduce_time(self.quantity["tp"][1], d, tp, grp.node_bandwidth)
                out.append((self.share["tp", (p, g, o)], float(coef / self.scale)))
        return [(v, c) for v, c in out if c != 0]

    def _phase_terms(self, p: int, phase: str) -> list:
        """Terms of the slot's forward (``phase = "fwd"``) or backward time ``f``, ``b``
        (scaled, :func:`~chainpipe.cost.phase_time`): the phase's FLOP share over ``d t r_g``
        plus half the all-reduce on the TP-bytes share."""
        t, out = self.tables, []
        for g, o in self.options_of[p]:
            d, tp = self.option(g, o)
            grp = t.groups[g]
            if phase in self.quantity:
                coef = phase_time(self.quantity[phase][1], grp.flop_per_s, d, tp)
                out.append((self.share[phase, (p, g, o)], float(coef / self.scale)))
            if "tp" in self.quantity and tp > 1:
                coef = phase_time(0.0, grp.flop_per_s, d, tp, self.quantity["tp"][1],
                                  grp.node_bandwidth)
                out.append((self.share["tp", (p, g, o)], float(coef / self.scale)))
        return [(v, c) for v, c in out if c != 0]

    def _traversal_terms(self, p: int) -> list:
        """Terms of boundary ``p``'s traversal ``Q`` (scaled): ``2 lat_r`` on each
        ``v[p, r]`` and ``2 O[p]``."""
        terms = [(self.v[p, r], self._latency_coef(r)) for r in self.resources
                 if (p, r) in self.v and self._latency_coef(r) > 0]
        if p in self.O:
            terms.append((self.O[p], float(traversal(0.0, 1.0))))
        return terms

    def _sync_terms(self, p: int) -> list:
        """Terms of the slot's synchronisation ``R`` (scaled): per ``(g, o)`` with
        ``d > 1``, the latency part on ``w`` and the bandwidth part on the params share."""
        t, out = self.tables, []
        gamma = t.instance.training.gradient_bytes_per_param
        for g, o in self.options_of[p]:
            d, tp = self.option(g, o)
            if d == 1:
                continue
            link = t.instance.datacenters[t.groups[g].dc].link
            lat = sync_time(0.0, d, tp, gamma, link.bandwidth_bytes_per_s, link.latency_s)
            out.append((self.w[p, g, o], float(lat / self.scale)))
            if "params" in self.quantity:
                per = sync_time(self.quantity["params"][1], d, tp, gamma,
                                link.bandwidth_bytes_per_s, 0.0)
                out.append((self.share["params", (p, g, o)], float(per / self.scale)))
        return [(v, c) for v, c in out if c != 0]

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
        """A used slot gets one (group, option); at most ``count_g`` devices per group
        (``sum d t w <= count_g``, omitted when it cannot bind); chain order."""
        import pulp

        prob, t, P = self.problem, self.tables, self.P
        for p in range(1, P + 1):
            prob += (pulp.lpSum(self.w[p, g, o] for (g, o) in self.options_of[p]) == self.u[p],
                     f"slot_group_{p}")
        of_group: dict[int, list] = {}
        for (_p, g, o), w in self.w.items():
            of_group.setdefault(g, []).append((w, float(t.options(g).width[o])))
        for g, terms in of_group.items():
            self.check()
            if sum(c for _w, c in terms) > t.count[g]:
                prob += pulp.LpAffineExpression(terms) <= int(t.count[g]), f"count_{g}"

    def constraints_chain(self) -> None:
        """DCs along the chain, ``O(P K)`` rows: ``c[p,k] = c[p,k-1] + delta[p,k]``;
        chain order ``c[p-1,k] <= c[p,k] + 1 - u[p]`` (a used slot ``p`` sits in a DC no
        later than slot ``p - 1``'s); boundary ``p`` uses chain link ``j`` if
        ``v >= c[p,j] - c[p-1,j]`` and DC ``k``'s own link if ``v >= delta[p,k] +
        delta[p-1,k] - 1``. Every ``v`` only ever costs, so at an optimum it is 1 exactly
        on the links the boundary's path takes (docs/formulations.md)."""
        import pulp

        prob, t, c = self.problem, self.tables, self.c
        delta = {}
        for p in range(1, self.P + 1):
            self.check()
            delta[p] = self._dc_terms(p)
            for k in range(t.K - 1):
                terms = [(c[p, k], 1.0)] + [(w, -1.0) for w, _ in delta[p].get(k, [])]
                if k:
                    terms.append((c[p, k - 1], -1.0))
                prob += pulp.LpAffineExpression(terms) == 0, f"cum_{p}_{k}"
        for p in range(2, self.P + 1):
            self.check()
            for k in range(t.K - 1):
                prob += (pulp.LpAffineExpression([(c[p - 1, k], 1.0), (c[p, k], -1.0),
                                                  (self.u[p], 1.0)]) <= 1, f"chain_{p}_{k}")
            for r in self.resources:
                kind, k = r
                if kind == "link":
                    terms = [(c[p, k], -1.0), (c[p - 1, k], 1.0)]
                    rhs = 0
                else:
                    terms = [(w, -1.0) for w, _ in delta[p].get(k, []) + delta[p - 1].get(k, [])]
                    rhs = -1
                prob += (pulp.LpAffineExpression([(self.v[p, r], 1.0)] + terms) >= rhs,
                         f"uses_{p}_{kind}_{k}")

    def constraints_shares(self) -> None:
        """The slot's quantities all sit on its one (group, option): for each quantity
        ``Q`` (FLOP, TP bytes, parameters, activations), ``sum_{g,o} s^Q[p,g,o] =
        sum_l Q_l a[l,p]`` and ``s^Q[p,g,o] <= Qmax[p,g,o] w[p,g,o]``, ``Qmax`` the largest
        ``Q`` of a layer range that fits ``(g, o)`` at position ``p``."""
        import pulp

        prob = self.problem
        for p in range(1, self.P + 1):
            self.check()
            for q, (per_layer, _unit) in self.quantity.items():
                terms = [(self.a[l, p], -float(per_layer[l])) for l in range(self.tables.L)
                         if (l, p) in self.a and per_layer[l] != 0]
                terms += [(self.share[q, (p, g, o)], 1.0) for (g, o) in self.options_of[p]]
                prob += pulp.LpAffineExpression(terms) == 0, f"share_{q}_{p}"
                for g, o in self.options_of[p]:
                    prob += (pulp.LpAffineExpression(
                        [(self.share[q, (p, g, o)], 1.0),
                         (self.w[p, g, o], -self.cap[p, g, o][q])]) <= 0,
                        f"share_on_{q}_{p}_{g}_{o}")

    def constraints_memory(self) -> None:
        """Per device, on the chosen option's shares: ``((beta - zeta) + zeta / d) / t *
        s^P + n_p / (d t) * s^A <= mem_g (1 + MEMORY_RTOL) w``; ``n_p`` is a constant."""
        import pulp

        t = self.tables
        sharded = t.instance.training.sharded_bytes_per_param
        unit = float(t.memory.max())
        for p in range(1, self.P + 1):
            self.check()
            n = t.in_flight(p)
            for g, o in self.options_of[p]:
                d, tp = self.option(g, o)
                terms = []
                if "params" in self.quantity:
                    coef = memory_need(self.quantity["params"][1], 0.0, 0, t.bytes_per_param,
                                       d, tp, sharded)
                    terms.append((self.share["params", (p, g, o)], float(coef / unit)))
                if "act" in self.quantity:
                    coef = memory_need(0.0, self.quantity["act"][1], n, t.bytes_per_param,
                                       d, tp, sharded)
                    terms.append((self.share["act", (p, g, o)], float(coef / unit)))
                if not terms:
                    continue
                cap = memory_capacity(t.memory[g]) / unit
                terms.append((self.w[p, g, o], -float(cap)))
                self.problem += pulp.LpAffineExpression(terms) <= 0, f"memory_{p}_{g}_{o}"

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
            es = [e for _l, e in self.e_of.get(p, [])]
            prob += pulp.lpSum(es) == self.u[p], f"one_boundary_{p}"

    def constraints_links(self) -> None:
        """Bytes and occupancy of boundary ``p >= 2``: ``X[p] = sum_l out_l e[l,p] /
        x_max``; ``O[p] >= U_r (X[p] + v[p,r] - 1)`` per resource ``r`` (``U_r`` the
        scaled occupancy of ``x_max`` bytes on ``r``): at an integer point ``O[p]`` is the
        largest over the links the path takes, ``X / min bw``, the path's ``U``."""
        import pulp

        if not self.X:
            return
        for p in range(2, self.P + 1):
            self.check()
            terms = [(e, -float(self.out_bytes[l]) / self.x_max)
                     for l, e in self.e_of.get(p, []) if self.out_bytes[l] != 0]
            self.problem += (pulp.LpAffineExpression(terms + [(self.X[p], 1.0)]) == 0,
                             f"bytes_{p}")
            for r in self.resources:
                u = self._occupancy_coef(r)
                if not np.isfinite(u):  # a right-hand side PuLP cannot hold
                    raise CoefficientOverflow(f"occupancy of a boundary on {r[0]} {r[1]} is {u}")
                if u > 0:
                    self.problem += (pulp.LpAffineExpression(
                        [(self.O[p], 1.0), (self.X[p], -u), (self.v[p, r], -u)]) >= -u,
                        "occupancy_{}_{}_{}".format(p, *r))

    def constraints_bottleneck(self) -> None:
        """``B >= C`` of every slot; ``B >= O[p]`` per boundary. GPipe's period: ``B >= f``
        and ``B_bwd >= b`` of every slot, both ``>= O[p]``."""
        import pulp

        phases = [(self._compute_terms, self.B, "")]
        if self.mode == "gpipe":
            phases = [(lambda p: self._phase_terms(p, "fwd"), self.B, ""),
                      (lambda p: self._phase_terms(p, "bwd"), self.B_bwd, "bwd_")]
        for terms_of, var, label in phases:
            for p in range(1, self.P + 1):
                self.check()
                terms = terms_of(p) + [(var, -1.0)]
                self.problem += pulp.LpAffineExpression(terms) <= 0, \
                    f"stage_bottleneck_{label}{p}"
            for p, o in self.O.items():
                self.problem += o - var <= 0, f"link_bottleneck_{label}{p}"

    def constraints_loops(self) -> None:
        """1F1B: every loop ``W <= (t - s + 1) lambda`` over slots ``a > ... > b`` with
        ``a < M`` (the stages stashing fewer than ``M``), as potentials over positions
        (``docs/formulations.md``): for ``2 <= p <= min(P, M - 1)``,
        ``g[p] >= C_p + Q_p - B``, ``g[p] >= g[p + 1] + C_p + Q_p - B`` and
        ``g[p] + C_{p-1} - B <= 0``; ``C_p`` is slot ``p``'s compute, ``Q_p`` the
        traversal of boundary ``p`` (into slot ``p - 1``)."""
        import pulp

        prob = self.problem
        for p, g in self.g.items():
            self.check()
            step = self._compute_terms(p) + self._traversal_terms(p)
            prob += (pulp.LpAffineExpression([(g, 1.0), (self.B, 1.0)] + [(v, -c) for v, c in step])
                     >= 0, f"loop_start_{p}")
            if p + 1 in self.g:
                prob += (pulp.LpAffineExpression([(g, 1.0), (self.g[p + 1], -1.0), (self.B, 1.0)]
                                                 + [(v, -c) for v, c in step]) >= 0,
                         f"loop_carry_{p}")
            prob += (pulp.LpAffineExpression([(g, 1.0), (self.B, -1.0)]
                                             + self._compute_terms(p - 1)) <= 0,
                     f"loop_close_{p}")

    def constraints_sync(self) -> None:
        """``R >= R`` of every slot (its one option's synchronisation)."""
        import pulp

        if self.R is None:
            return
        for p in range(1, self.P + 1):
            terms = self._sync_terms(p)
            if terms:
                self.problem += (pulp.LpAffineExpression(terms + [(self.R, -1.0)]) <= 0,
                                 f"sync_{p}")

    # ------------------------------------------------------------------ objective
    def objective(self) -> None:
        """``(sum C + sum_{p,r} 2 lat_r v[p,r] + sum_p 2 O[p] + (M - 1) B + R) /
        time_scale``."""
        import pulp

        t = self.tables
        terms = [term for p in range(1, self.P + 1) for term in self._compute_terms(p)]
        terms += [(v, self._latency_coef(r)) for (_p, r), v in self.v.items()
                  if self._latency_coef(r) > 0]
        terms += [(o, float(traversal(0.0, 1.0))) for o in self.O.values()]
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
        self.problem = pulp.LpProblem("chainpipe_assign", pulp.LpMinimize)
        self.columns = Columns(self.problem)
        self.variables()
        self.constraints_partition()
        self.constraints_devices()
        self.constraints_chain()
        self.constraints_shares()
        self.constraints_memory()
        self.constraints_boundaries()
        self.constraints_links()
        self.constraints_bottleneck()
        self.constraints_loops()
        self.constraints_sync()
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
            g, o = max(self.options_of[p], key=lambda go: self.w[(p,) + go].varValue or 0.0)
            grp = t.groups[g]
            stages.append((min(lays), max(lays) + 1, grp.dc, grp.index) + self.option(g, o))
        return Plan.from_tuples(t.instance, stages)


def build_assign(instance: Instance | CostTables) -> AssignFormulation:
    """Build the assignment ILP; ``.problem`` holds the PuLP model, ``.decode()`` the plan."""
    tables = instance if isinstance(instance, CostTables) else CostTables(instance)
    form = AssignFormulation(tables)
    form.build()
    return form
