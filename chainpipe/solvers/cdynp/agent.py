"""A DC agent: one datacenter's private data and its part of the chain DP.

The agent of DC ``k`` knows the public instance and its own devices and
internal link, nothing else. In the backward pass it receives the summary of
DC ``k+1`` (suffix plans downstream), prepends runs of its own stages to them
and sends DC ``k-1`` the merged summary. In the forward pass it is told which
point of its summary to realise, rebuilds its own stages from its memo and
tells DC ``k+1`` which of *its* points the plan continues with.

Internal DP (never sent): labels ``(r, bottleneck, total)`` at a state
``(x, u)``: the suffix ``[x, L)`` is covered, ``u`` counts the devices of each
of this DC's groups in use. Prepending stage ``[a, x)`` on group ``g`` needs a
free device of ``g`` and memory for ``min(M, r + 1)`` microbatches; it costs
``C = compute_time[g, a, x]`` and, if a stage of this DC follows, the internal
boundary ``U = bytes[x] / bw_int``, ``Q = 2 (lat_int + U)``. The inter-DC
boundary is folded in when the incoming summary is joined (``u = 0``).
"""

from __future__ import annotations

import math
import time

import numpy as np

from ...instance import Datacenter, Instance
from ...tables import CostTables
from . import protocol
from .public import PublicInstance
from .summary import cap_mask, epsilon_mask, pareto_mask, round_up


class Deadline(Exception):
    """The time limit ran out inside an agent."""


class _Store:
    """Append-only labels of one usage vector ``u``, in decreasing ``x``."""

    __slots__ = ("cols", "parts", "_cache")
    NAMES = ("x", "r", "bn", "sm", "g", "parent")

    def __init__(self):
        self.parts: list[tuple] = []
        self._cache = None

    def append(self, x, r, bn, sm, g, parent) -> None:
        if len(bn):
            self.parts.append((x, r, bn, sm, g, parent))
            self._cache = None

    def view(self):
        if self._cache is None:
            if not self.parts:
                self._cache = None
                return None
            self._cache = tuple(np.concatenate([p[i] for p in self.parts]) for i in range(6))
            self.parts = [self._cache]
        return self._cache


class DCAgent:
    def __init__(self, public: PublicInstance, index: int, datacenter: Datacenter, *,
                 epsilon: float = 0.0, quantum: float = 0.0, max_entries: int = 0,
                 deadline: float | None = None):
        if public.datacenter_names[index] != datacenter.name:
            raise ValueError(f"agent {index} holds {datacenter.name!r}, the chain has "
                             f"{public.datacenter_names[index]!r} there")
        self.public = public
        self.k = index
        self.dc = datacenter
        self.name = datacenter.name
        self.epsilon = float(epsilon)
        self.quantum = float(quantum)
        self.max_entries = int(max_entries or 0)
        self.deadline = deadline
        local = Instance(public.name, public.model, public.training, (datacenter,), ())
        self.tables = CostTables(local)  # this DC's groups only: private
        self.L = public.num_layers
        self.M = public.microbatches
        self.R = public.position_cap
        self.bytes = public.boundary_bytes()
        self.stats: dict = {}
        # memo of the backward pass
        self._out_origin: list[list[tuple]] = []
        self._incoming: list[dict] = []
        self.stages: list[tuple[int, int, str]] = []  # learned in the forward pass
        self.boundaries: dict[str, int | None] = {}

    # ------------------------------------------------------------------ helpers
    def _check_time(self) -> None:
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise Deadline(f"time limit reached in {self.name}")

    def _link_to_prev(self):
        return self.public.links[self.k - 1] if self.k > 0 else None

    # ------------------------------------------------------------------ backward pass
    def backward(self, incoming: dict | None) -> dict | None:
        """Process DC k+1's summary; return the summary for DC k-1 (``None`` for DC 1,
        which keeps its decision for :meth:`decide`)."""
        t0 = time.perf_counter()
        L, M, R = self.L, self.M, self.R
        entries = incoming["entries"] if incoming is not None else []
        self._incoming = [
            (e["b"], e["bw"], np.array([p[0] for p in e["points"]], dtype=np.int64),
             np.array([p[1] for p in e["points"]], dtype=float),
             np.array([p[2] for p in e["points"]], dtype=float))
            for e in entries
        ]
        ub = math.inf  # an upper bound on the optimum: complete plans already known
        for b, _bw, r, bn, sm in self._incoming:
            if b == 0:
                ub = min(ub, float(np.min(sm + (M - 1) * bn)))
        self.upper_bound = ub

        # base labels (u = 0): the downstream suffix joined through the inter-DC boundary
        base: dict[int, list] = {L: [(np.zeros(1, np.int64), np.zeros(1), np.zeros(1),
                                      np.full(1, -1), np.full(1, -1))]}
        for i, (b, bw, r, bn, sm) in enumerate(self._incoming):
            if b == 0:
                continue
            u = self.bytes[b] / bw
            base.setdefault(b, []).append((r, np.maximum(bn, u), sm + 2.0 * u,
                                           np.full(len(r), i), np.arange(len(r))))
        self._base_origin: dict = {}

        tab = self.tables
        ct, mif = tab.compute_time, tab.max_in_flight
        G = tab.G
        caps = np.minimum(tab.count, L)
        strides = np.ones(G, dtype=np.int64)
        for g in range(1, G):
            strides[g] = strides[g - 1] * (caps[g - 1] + 1)
        n_u = int(np.prod(caps + 1))
        uvec = np.array(np.unravel_index(np.arange(n_u), tuple((caps + 1)[::-1])))[::-1].T \
            if G > 1 else np.arange(n_u)[:, None]
        used = uvec.sum(axis=1)
        stores = [_Store() for _ in range(n_u)]
        base_store = stores[0]
        link = self.dc.link
        u_int = self.bytes / link.bandwidth_bytes_per_s
        q_int = 2.0 * (link.latency_s + u_int)
        own_pts: dict[int, list] = {}
        labels = 0
        tol = 1 + 1e-12
        for a in range(L - 1, -1, -1):
            self._check_time()
            x = a + 1
            if x in base:
                parts = base[x]
                r = np.concatenate([p[0] for p in parts])
                bn = np.concatenate([p[1] for p in parts])
                sm = np.concatenate([p[2] for p in parts])
                oe = np.concatenate([p[3] for p in parts])
                op = np.concatenate([p[4] for p in parts])
                keep = pareto_mask(r, bn, sm)
                start = len(base_store.view()[0]) if base_store.view() is not None else 0
                n = int(keep.sum())
                base_store.append(np.full(n, x), r[keep], bn[keep], sm[keep],
                                  np.full(n, -1), np.arange(n))
                for t, (e_, p_) in enumerate(zip(oe[keep], op[keep])):
                    self._base_origin[start + t] = (int(e_), int(p_))
            new: dict[int, list] = {}
            for ui in range(n_u):
                view = stores[ui].view()
                if view is None:
                    continue
                xs, rs, bns, sms = view[0], view[1], view[2], view[3]
                inflight = np.minimum(M, rs + 1) if self.public.training.schedule == "1f1b" \
                    else np.full(len(rs), M)
                for g in range(G):
                    if uvec[ui, g] >= caps[g]:
                        continue
                    fit = inflight <= mif[g, a, xs]
                    if not fit.any():
                        continue
                    idx = np.flatnonzero(fit)
                    c = ct[g, a, xs[idx]]
                    if ui == 0:
                        nbn = np.maximum(bns[idx], c)
                        nsm = sms[idx] + c
                    else:
                        xi = xs[idx]
                        nbn = np.maximum(np.maximum(bns[idx], c), u_int[xi])
                        nsm = sms[idx] + c + q_int[xi]
                    if ub < math.inf:
                        ok = nsm + (M - 1) * nbn <= ub * tol
                        idx, nbn, nsm = idx[ok], nbn[ok], nsm[ok]
                    if not len(idx):
                        continue
                    nr = np.minimum(rs[idx] + 1, R)
                    new.setdefault(ui + int(strides[g]), []).append(
                        (nr, nbn, nsm, np.full(len(idx), g), idx))
            for ui, parts in new.items():
                r = np.concatenate([p[0] for p in parts])
                bn = np.concatenate([p[1] for p in parts])
                sm = np.concatenate([p[2] for p in parts])
                g_ = np.concatenate([p[3] for p in parts])
                par = np.concatenate([p[4] for p in parts])
                keep = pareto_mask(r, bn, sm)
                n = int(keep.sum())
                view = stores[ui].view()
                start = 0 if view is None else len(view[0])
                stores[ui].append(np.full(n, a), r[keep], bn[keep], sm[keep], g_[keep],
                                  par[keep])
                labels += n
                own_pts.setdefault(a, []).append(
                    (r[keep], bn[keep], sm[keep], np.full(n, ui), start + np.arange(n)))
        self._stores = stores
        self._strides = strides
        self.stats = {"labels": labels, "usage_states": n_u}

        # own complete plans tighten the bound before the summary is built
        if 0 in own_pts:
            for r, bn, sm, _, _ in own_pts[0]:
                ub = min(ub, float(np.min(sm + (M - 1) * bn)))
        self.upper_bound = ub
        self._own_final = own_pts.get(0, [])
        if self.k == 0:
            self.stats["backward_s"] = time.perf_counter() - t0
            return None
        out = self._summary(own_pts, ub)
        self.stats["backward_s"] = time.perf_counter() - t0
        return out

    def _summary(self, own_pts: dict, ub: float) -> dict:
        """Merge own and passed-through points per (b, bw), prune, compress."""
        M = self.M
        prev = self._link_to_prev()
        groups: dict[tuple, list] = {}
        for a, parts in own_pts.items():
            fold_bw = prev.bandwidth_bytes_per_s if a > 0 else None
            fold_lat = 2.0 * prev.latency_s if a > 0 else 0.0
            for r, bn, sm, ui, li in parts:
                groups.setdefault((a, fold_bw), []).append(
                    (r, bn, sm + fold_lat, [("own", int(u), int(i)) for u, i in zip(ui, li)]))
        for e, (b, bw, r, bn, sm) in enumerate(self._incoming):
            if b > 0:
                key = (b, min(bw, prev.bandwidth_bytes_per_s))
                sm = sm + 2.0 * prev.latency_s
            else:
                key = (0, None)
            groups.setdefault(key, []).append(
                (r, bn, sm, [("in", e, j) for j in range(len(r))]))
        entries, origins = [], []
        for (b, bw) in sorted(groups, key=lambda t: (t[0], -1 if t[1] is None else t[1])):
            parts = groups[(b, bw)]
            r = np.concatenate([p[0] for p in parts])
            bn = np.concatenate([p[1] for p in parts])
            sm = np.concatenate([p[2] for p in parts])
            org = [o for p in parts for o in p[3]]
            if self.quantum > 0:
                bn, sm = round_up(bn, self.quantum), round_up(sm, self.quantum)
            keep = pareto_mask(r, bn, sm)
            if ub < math.inf:
                keep &= sm + (M - 1) * bn <= ub * (1 + 1e-12)
            sel = np.flatnonzero(keep)
            if self.epsilon > 0 and len(sel):
                sel = sel[epsilon_mask(r[sel], bn[sel], sm[sel], self.epsilon)]
            if self.max_entries and len(sel):
                sel = sel[cap_mask(bn[sel], sm[sel], M, self.max_entries)]
            if not len(sel):
                continue
            sel = sel[np.lexsort((sm[sel], bn[sel], r[sel]))]
            entries.append({"b": int(b), "bw": bw,
                            "points": [[int(r[i]), float(bn[i]), float(sm[i])] for i in sel]})
            origins.append([org[i] for i in sel])
        self._out_origin = origins
        return protocol.summary(self.name, self.public.datacenter_names[self.k - 1], entries)

    # ------------------------------------------------------------------ decision (DC 1)
    def decide(self) -> tuple[dict | None, float]:
        """DC 1 picks the best complete plan; returns its own realise-request and T estimate."""
        M = self.M
        best, choice = math.inf, None
        for r, bn, sm, ui, li in self._own_final:
            t = sm + (M - 1) * bn
            i = int(np.argmin(t))
            if t[i] < best:
                best, choice = float(t[i]), ("own", int(ui[i]), int(li[i]))
        for e, (b, bw, r, bn, sm) in enumerate(self._incoming):
            if b != 0:
                continue
            t = sm + (M - 1) * bn
            i = int(np.argmin(t))
            if t[i] < best:
                best, choice = float(t[i]), ("in", e, i)
        self.estimate = best
        return choice, best

    # ------------------------------------------------------------------ forward pass
    def realise_origin(self, origin) -> dict | None:
        """Rebuild own stages for ``origin``; return the request for DC k+1."""
        if origin is None:
            self.stages = []
            return None
        kind, a_, b_ = origin
        if kind == "in":
            self.stages = []
            b = self._incoming[a_][0]
            self.boundaries = {"passes": b}
            return {"entry": a_, "point": b_, "b": int(b)}
        ui, li = a_, b_
        stages = []
        base_store = self._stores[0].view()
        while ui != 0:
            x, r, bn, sm, g, par = (c[li] for c in self._stores[ui].view())
            ui_parent = ui - int(self._strides[g])
            pview = self._stores[ui_parent].view() if ui_parent else base_store
            stages.append((int(x), int(pview[0][par]), int(g)))
            ui, li = ui_parent, int(par)
        used: dict[int, int] = {}
        self.stages = []
        for start, end, g in stages:
            i = used.get(g, 0)
            used[g] = i + 1
            self.stages.append((start, end, Instance.device_name(self.dc, self.dc.devices[g], i)))
        first, last = self.stages[0][0], self.stages[-1][1]
        e, p = self._base_origin[li]
        self.boundaries = {"from_upstream": first if first > 0 else None,
                           "to_downstream": last if last < self.L else None}
        if e < 0:
            return None
        return {"entry": e, "point": p, "b": int(self._incoming[e][0])}

    def forward(self, request: dict | None) -> dict | None:
        """Handle an ``assemble`` request from DC k-1 (a point of the summary we sent)."""
        rz = request["realise"] if request is not None else None
        if rz is None:
            return self.realise_origin(None)
        try:
            origin = self._out_origin[rz["entry"]][rz["point"]]
        except IndexError:
            raise protocol.ProtocolError(
                f"{self.name}: asked to realise an unknown point {rz}") from None
        return self.realise_origin(origin)
