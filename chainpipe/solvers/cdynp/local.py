"""A DC agent's own label DP (never sent): suffix plans that begin in this DC.

State ``(x, u)``: the suffix ``[x, L)`` is covered and ``u`` counts the devices
of each of this DC's groups in use. A *label* at a state is one partial plan's
``(bottleneck, total, r)``; ``r`` counts its stages, capped at the position
cap. Prepending stage ``[a, x)`` on group ``g`` needs a free device of ``g``
and memory for ``min(M, r + 1)`` microbatches (``M`` under GPipe); it costs
``C = compute_time[g, a, x]`` and, if a stage of this DC follows, the internal
boundary ``U = bytes[x] / bw_int`` with traversal ``Q = 2 (lat_int + U)``.
*Base labels* (``u = 0``) are the downstream DCs' suffix plans, their
inter-DC boundary already folded in; a base label is never extended by an
internal boundary.

This is the label loop of :mod:`chainpipe.solvers.dp` restricted to one DC and
seeded with base labels; it shares its Pareto filters (:mod:`..labels`). A
label is dropped when its own cost, plus an optional optimistic cost of the
prefix ``[0, a)`` (only DC 1 has one: the prefix must then run on its own
devices), cannot beat the upper bound ``ub``.
"""

from __future__ import annotations

import math
import time

import numpy as np

from ..labels import across_usage, pareto3

#: where a label's plan continues, ``(kind, i, j)``: ``OWN``: own label ``i``; ``IN``:
#: point ``j`` of incoming entry ``i``; ``END``: the model ends after the label's stage
OWN, IN, END = 0, 1, 2


class Deadline(Exception):
    """The time limit ran out inside an agent."""


class DCRun:
    """One run of a DC's DP for a given upper bound: what both engines share.

    After :meth:`run`: :attr:`points` (``x -> [(r, bottleneck, total, label index)]``,
    own labels whose first stage starts at ``x``; ``x = 0``: complete plans),
    :meth:`label` to walk a plan back, :attr:`bound_cut` (whether the bound cut a
    stage or a label; if not, the run was exhaustive) and :attr:`stats`.
    """

    def __init__(self, tables, *, num_layers: int, microbatches: int, position_cap: int,
                 gpipe: bool, boundary_bytes: np.ndarray, link, deadline: float | None = None):
        self.t = tables
        self.L, self.M, self.R = num_layers, microbatches, position_cap
        self.gpipe = gpipe
        self.deadline = deadline
        self.u_int = boundary_bytes / link.bandwidth_bytes_per_s  # internal boundary
        self.q_int = 2.0 * (link.latency_s + self.u_int)
        self.stats = {"labels": 0}
        self.bound_cut = False
        self.points: dict[int, list[tuple[int, float, float, int]]] = {}

    def check_time(self) -> None:
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise Deadline("time limit reached")


class LocalDP(DCRun):
    """The label loop, one label at a time (the DCs of ``medium/``, and DC 1 always)."""

    def _candidates(self, ub: float) -> list[list[list[tuple[int, float, int]]]]:
        """``[g][x]``: stages ``[a, x)`` on group ``g`` as ``(a, C, max in flight)``, ``a``
        descending: memory for the last position (1F1B: one microbatch, GPipe: M) and
        ``M * C <= ub`` (``T >= sum C + (M - 1) max C``). Both only fail more as ``a``
        falls, so each list is a run of starts."""
        t, L, M = self.t, self.L, self.M
        need = M if self.gpipe else 1
        ok = t.max_in_flight >= need
        if ub < math.inf:
            fast = t.compute_time <= ub / M * (1 + 1e-9)
            self.bound_cut = bool((ok & ~fast).any())
            ok &= fast
        out = []
        for g in range(t.G):
            C = t.compute_time[g].T.tolist()  # [x][a]
            N = t.max_in_flight[g].T.astype(np.int64).tolist()
            okg = ok[g].T
            per_end: list = [[]]
            for x in range(1, L + 1):
                row, cx, nx = okg[x], C[x], N[x]
                lst = []
                for a in range(x - 1, -1, -1):
                    if not row[a]:
                        break
                    lst.append((a, cx[a], nx[a]))
                per_end.append(lst)
            out.append(per_end)
        return out

    def label(self, i: int) -> tuple[int, int, tuple]:
        """Own label ``i`` (an index in :attr:`points`): ``(start, group, ref)``, its first
        stage ``[start, end)`` on ``group``, and ``ref`` where the plan continues: own
        label ``(OWN, j, 0)`` (``end`` is its start), incoming entry and point
        ``(IN, e, p)`` or ``(END, 0, 0)`` (``end = L``)."""
        return self._store[i]

    def run(self, base: dict[int, list[tuple]], ub: float, prefix=None) -> None:
        """``base[x]``: base labels ``(bottleneck, total, r, (IN | END, e, p))`` joining at ``x``.

        ``prefix``: ``(pre_sum, pre_max)`` lists, an optimistic cost of the prefix
        ``[0, a)`` (sum and bottleneck terms), or ``None``.
        """
        L, M, R, gpipe = self.L, self.M, self.R, self.gpipe
        Mm1 = M - 1
        G = self.t.G
        count = [int(min(c, L)) for c in self.t.count]
        u_int, q_int = self.u_int.tolist(), self.q_int.tolist()
        cands = self._candidates(ub)
        limit = ub * (1 + 1e-12) if ub < math.inf else math.inf
        zero = (0,) * G
        pre_sum, pre_max = prefix if prefix is not None else ([0.0] * (L + 1), [0.0] * (L + 1))
        states: list[dict] = [dict() for _ in range(L + 1)]
        for x, labels in base.items():
            states[x][(0, zero)] = list(labels)
        # flat store of finalised own labels: (x, g, ref); ref as above
        store: list[tuple[int, int, tuple]] = []
        points: dict[int, list[tuple[int, float, float, int]]] = {}  # x -> (r, bn, sm, store index)
        labels_total = 0
        for x in range(L, -1, -1):
            self.check_time()
            layer = states[x]
            if not layer:
                continue
            for key in list(layer):
                layer[key] = pareto3(layer[key], R)
            if len(layer) > 1:
                across_usage(layer)
            # finalise: own labels get store indices (their references for the parents)
            refs: dict[tuple, list] = {}
            own = []
            for key, labels in layer.items():
                u = key[1]
                labels_total += len(labels)
                if u == zero:
                    refs[key] = [lab[3] for lab in labels]
                    continue
                lst = []
                for bn, sm, r, ref in labels:
                    i = len(store)
                    store.append((x, ref[1], ref[0]))  # (start, group, parent ref)
                    own.append((r, bn, sm, i))
                    lst.append((OWN, i, 0))
                refs[key] = lst
            if own:
                points[x] = own
            if x == 0:
                break
            for key, labels in layer.items():
                u = key[1]
                internal = u != zero
                U = u_int[x] if internal else 0.0
                Q = q_int[x] if internal else 0.0
                rl = refs[key]
                for g in range(G):
                    if u[g] >= count[g]:
                        continue
                    nkey = (0, u[:g] + (u[g] + 1,) + u[g + 1:])
                    buckets: dict[int, list] = {}
                    for i, (bn, sm, r, _) in enumerate(labels):
                        need = 0 if gpipe else (r + 1 if r < M else M)
                        nr = r + 1 if r < R else R
                        ref = (rl[i], g)  # the new label's (parent ref, group) until finalised
                        # along the candidates C grows and memory shrinks: stop at the
                        # first that fails either (the prefix part of the bound is not
                        # monotone in a, so it only skips)
                        for a, c, n in cands[g][x]:
                            if need > n:
                                break
                            nbn = bn if bn >= c else c
                            if nbn < U:
                                nbn = U
                            nsm = sm + c + Q
                            if nsm + Mm1 * nbn > limit:
                                self.bound_cut = True
                                break
                            pm = pre_max[a]
                            if nsm + pre_sum[a] + Mm1 * (nbn if nbn >= pm else pm) > limit:
                                self.bound_cut = True
                                continue
                            bucket = buckets.get(a)
                            if bucket is None:
                                bucket = buckets[a] = states[a].setdefault(nkey, [])
                            bucket.append((nbn, nsm, nr, ref))
            states[x] = None  # finalised labels live on in the store only
        self.stats["labels"] = labels_total
        self._store = store
        self.points = points
