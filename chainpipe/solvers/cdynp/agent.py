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
from .summary import cap_mask, epsilon_mask, pareto_mask, round_digits, round_up


class Deadline(Exception):
    """The time limit ran out inside an agent."""


class _Store:
    """Append-only labels ``(u, x, r, bottleneck, total, g, parent)``, by decreasing ``x``.

    Labels arrive in parts of one ``x`` each (the DP appends the labels of suffix
    ``[x, L)`` together), so the labels with ``x <= x_max`` are a tail of parts.
    """

    __slots__ = ("_size", "parts", "xs")

    def __init__(self):
        self.parts: list[tuple] = []
        self.xs: list[int] = []  # the x of each part, non-increasing
        self._size = 0

    def append(self, u, x, r, bn, sm, g, parent) -> None:
        if len(bn):
            self.parts.append((u, x, r, bn, sm, g, parent))
            self.xs.append(int(x[0]))
            self._size += len(bn)

    @property
    def size(self) -> int:
        return self._size

    def view(self):
        """Every label, in store order (indices are the parents' references)."""
        if not self.parts:
            return None
        if len(self.parts) > 1:
            self.parts = [tuple(np.concatenate([p[i] for p in self.parts]) for i in range(7))]
            self.xs = [self.xs[0]]  # a merged store is read only, never windowed again
        return self.parts[0]

    def tail(self, x_max: int):
        """The labels with ``x <= x_max`` and the store index of the first of them."""
        i = len(self.xs)
        while i > 0 and self.xs[i - 1] <= x_max:
            i -= 1
        if i == len(self.xs):
            return None, self._size
        parts = self.parts[i:]
        start = self._size - sum(len(p[3]) for p in parts)
        if len(parts) == 1:
            return parts[0], start
        return tuple(np.concatenate([p[i] for p in parts]) for i in range(7)), start


class DCAgent:
    def __init__(self, public: PublicInstance, index: int, datacenter: Datacenter, *,
                 epsilon: float = 0.0, quantum: float = 0.0, max_entries: int = 0,
                 digits: int = 0, upper_bound: float | None = None,
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
        self.digits = int(digits or 0)
        self.initial_bound = math.inf if upper_bound is None else float(upper_bound)
        #: run a greedy probe first for its upper bound when the DP is large enough to
        #: repay it (measured: it halves large/ times and slows the small DPs of medium/)
        self.probe = "auto"
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
        L, M = self.L, self.M
        entries = incoming["entries"] if incoming is not None else []
        self._incoming = [
            (e["b"], e["bw"], np.array([p[0] for p in e["points"]], dtype=np.int64),
             np.array([p[1] for p in e["points"]], dtype=float),
             np.array([p[2] for p in e["points"]], dtype=float))
            for e in entries
        ]
        ub = self.initial_bound  # an upper bound on the optimum: complete plans already known
        for b, _bw, _r, bn, sm in self._incoming:
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

        tab = self.tables
        caps = np.minimum(tab.count, L)
        strides = np.ones(tab.G, dtype=np.int64)
        for g in range(1, tab.G):
            strides[g] = strides[g - 1] * (caps[g - 1] + 1)
        n_u = int(np.prod(caps + 1))
        self._caps, self._strides = caps, strides
        probe_ub = math.inf
        if self.probe is True or (self.probe == "auto" and L * n_u >= 2000):
            _, probe_pts = self._dp(base, ub, greedy=True)
            if 0 in probe_pts:
                _, pbn, psm, _ = probe_pts[0]
                probe_ub = float(np.min(psm + (M - 1) * pbn))
        store, own_pts = self._dp(base, min(ub, probe_ub), greedy=False)
        self._store = store
        view = store.view()
        self.stats = {"labels": 0 if view is None else int(np.count_nonzero(view[0])),
                      "probe_bound": probe_ub if probe_ub < math.inf else None}

        # own complete plans tighten the bound before the summary is built
        if 0 in own_pts:
            r, bn, sm, _ = own_pts[0]
            ub = min(ub, float(np.min(sm + (M - 1) * bn)))
        self.upper_bound = ub
        self._own_final = own_pts.get(0)
        if self.k == 0:
            self.stats["backward_s"] = time.perf_counter() - t0
            return None
        out = self._summary(own_pts, ub)
        self.stats["backward_s"] = time.perf_counter() - t0
        return out

    def _dp(self, base: dict, ub: float, greedy: bool):
        """The internal DP over ``(x, u)``; ``greedy`` keeps one label per ``(x, u)``
        (a fast probe whose complete plans give an upper bound)."""
        L, M, R = self.L, self.M, self.R
        tab = self.tables
        ct, mif = tab.compute_time, tab.max_in_flight
        G = tab.G
        caps, strides = self._caps, self._strides
        link = self.dc.link
        u_int = self.bytes / link.bandwidth_bytes_per_s
        q_int = 2.0 * (link.latency_s + u_int)
        one_f_one_b = self.public.training.schedule == "1f1b"
        tol = 1 + 1e-12
        # one append-only label store for every usage vector; for a base label
        # (u = 0), "g" and "parent" hold the incoming entry and point it joins
        store = _Store()
        own_pts: dict[int, tuple] = {}
        base = dict(base)
        x_max = self._widest_stage_end(ub)
        for a in range(L - 1, -1, -1):
            self._check_time()
            x = a + 1
            if x in base:
                parts = base.pop(x)
                r, bn, sm, oe, op = (np.concatenate([p[c] for p in parts]) for c in range(5))
                keep = pareto_mask(r, bn, sm)
                n = int(keep.sum())
                store.append(np.zeros(n, np.int64), np.full(n, x), r[keep], bn[keep],
                             sm[keep], oe[keep], op[keep])
            # only suffixes a stage starting at a can reach (memory, and the bound)
            view, offset = store.tail(int(x_max[a]))
            if view is None:
                continue
            us, xs, rs, bns, sms = view[0], view[1], view[2], view[3], view[4]
            inflight = np.minimum(M, rs + 1) if one_f_one_b else np.full(len(rs), M)
            is_base = us == 0
            new = []
            for g in range(G):
                room = (us // strides[g]) % (caps[g] + 1) < caps[g]
                fit = room & (inflight <= mif[g, a, xs])
                idx = np.flatnonzero(fit)
                if not len(idx):
                    continue
                xi = xs[idx]
                c = ct[g, a, xi]
                internal = ~is_base[idx]
                nbn = np.maximum(np.maximum(bns[idx], c), np.where(internal, u_int[xi], 0.0))
                nsm = sms[idx] + c + np.where(internal, q_int[xi], 0.0)
                if ub < math.inf:
                    ok = nsm + (M - 1) * nbn <= ub * tol
                    idx, nbn, nsm = idx[ok], nbn[ok], nsm[ok]
                    if not len(idx):
                        continue
                new.append((us[idx] + strides[g], np.minimum(rs[idx] + 1, R), nbn, nsm,
                            np.full(len(idx), g), idx + offset))
            if not new:
                continue
            nu, r, bn, sm, g_, par = (np.concatenate([p[c] for p in new]) for c in range(6))
            keep = pareto_mask(r, bn, sm, nu)
            if greedy:  # one label per usage vector: the best T it could still reach
                kept = np.flatnonzero(keep)
                o = kept[np.lexsort((sm[kept] + (M - 1) * bn[kept], nu[kept]))]
                first = np.concatenate(([True], nu[o][1:] != nu[o][:-1]))
                keep = np.zeros(len(keep), dtype=bool)
                keep[o[first]] = True
            n = int(keep.sum())
            start = store.size  # store index of the first label appended below
            store.append(nu[keep], np.full(n, a), r[keep], bn[keep], sm[keep], g_[keep],
                         par[keep])
            own_pts[a] = (r[keep], bn[keep], sm[keep], start + np.arange(n))
        return store, own_pts

    def _widest_stage_end(self, ub: float) -> np.ndarray:
        """``[a]``: the last layer end ``x`` a stage ``[a, x)`` of this DC can have.

        A stage must fit in memory at least as the last stage (1F1B: one microbatch in
        flight; GPipe: ``M``), and a plan within ``ub`` has ``M * C <= ub`` for each of
        its stages (``T >= sum C + (M - 1) max C``). Both only get harder as ``x`` grows.
        """
        tab, M = self.tables, self.M
        need = 1 if self.public.training.schedule == "1f1b" else M
        ok = tab.max_in_flight >= need
        if ub < math.inf:
            ok &= tab.compute_time <= ub / M * (1 + 1e-9)
        ok = ok.any(axis=0)  # [a, x]: some group can hold stage [a, x)
        ends = np.where(ok, np.arange(self.L + 1)[None, :], -1).max(axis=1)
        return np.maximum(ends, np.arange(self.L + 1))

    def _summary(self, own_pts: dict, ub: float) -> dict:
        """Merge own and passed-through points per (b, bw), prune, compress."""
        M = self.M
        prev = self._link_to_prev()
        groups: dict[tuple, list] = {}
        for a, (r, bn, sm, li) in own_pts.items():
            fold_bw = prev.bandwidth_bytes_per_s if a > 0 else None
            fold_lat = 2.0 * prev.latency_s if a > 0 else 0.0
            groups.setdefault((a, fold_bw), []).append(
                (r, bn, sm + fold_lat, np.full(len(li), -1), li))
        for e, (b, bw, r, bn, sm) in enumerate(self._incoming):
            if b > 0:
                key = (b, min(bw, prev.bandwidth_bytes_per_s))
                sm = sm + 2.0 * prev.latency_s
            else:
                key = (0, None)
            groups.setdefault(key, []).append((r, bn, sm, np.full(len(r), e), np.arange(len(r))))
        entries, origins = [], []
        by_b: dict[int, list] = {}
        for key in groups:
            by_b.setdefault(key[0], []).append(key[1])
        for b in sorted(by_b):
            # higher path bandwidth first: a point of a class with a larger bandwidth
            # dominates an equal-or-worse point of a class with a smaller one
            kept_r, kept_bn, kept_sm = [], [], []
            for bw in sorted(by_b[b], key=lambda v: -math.inf if v is None else -v):
                parts = groups[(b, bw)]
                r = np.concatenate([p[0] for p in parts])
                bn = np.concatenate([p[1] for p in parts])
                sm = np.concatenate([p[2] for p in parts])
                org_e = np.concatenate([p[3] for p in parts])  # -1: own label, else entry
                org_i = np.concatenate([p[4] for p in parts])
                # the bound applies to the true values (rounding up comes after it): any
                # completion pays at least this boundary, over a path no wider than bw
                keep = np.ones(len(r), dtype=bool)
                if ub < math.inf:
                    u_min = self.bytes[b] / bw if bw is not None else 0.0
                    keep = sm + 2.0 * u_min + (M - 1) * np.maximum(bn, u_min) <= ub * (1 + 1e-12)
                sel = np.flatnonzero(keep)
                if self.quantum > 0 or self.digits > 0:
                    bn, sm = bn.copy(), sm.copy()
                    bn[sel] = round_digits(round_up(bn[sel], self.quantum), self.digits)
                    sm[sel] = round_digits(round_up(sm[sel], self.quantum), self.digits)
                if kept_r:
                    n0 = sum(len(x) for x in kept_r)
                    mask = pareto_mask(np.concatenate(kept_r + [r[sel]]),
                                       np.concatenate(kept_bn + [bn[sel]]),
                                       np.concatenate(kept_sm + [sm[sel]]))
                    sel = sel[mask[n0:]]
                else:
                    sel = sel[pareto_mask(r[sel], bn[sel], sm[sel])]
                if self.epsilon > 0 and len(sel):
                    sel = sel[epsilon_mask(r[sel], bn[sel], sm[sel], self.epsilon)]
                if self.max_entries and len(sel):
                    sel = sel[cap_mask(bn[sel], sm[sel], M, self.max_entries)]
                if not len(sel):
                    continue
                sel = sel[np.lexsort((sm[sel], bn[sel], r[sel]))]
                kept_r.append(r[sel])
                kept_bn.append(bn[sel])
                kept_sm.append(sm[sel])
                entries.append({"b": int(b), "bw": bw,
                                "points": [[int(r[i]), float(bn[i]), float(sm[i])] for i in sel]})
                origins.append([("own", int(org_i[i])) if org_e[i] < 0
                                else ("in", int(org_e[i]), int(org_i[i])) for i in sel])
        self._out_origin = origins
        return protocol.summary(self.name, self.public.datacenter_names[self.k - 1], entries)

    # ------------------------------------------------------------------ decision (DC 1)
    def decide(self) -> tuple[dict | None, float]:
        """DC 1 picks the best complete plan; returns its own realise-request and T estimate."""
        M = self.M
        best, choice = math.inf, None
        if self._own_final is not None:
            r, bn, sm, li = self._own_final
            t = sm + (M - 1) * bn
            i = int(np.argmin(t))
            best, choice = float(t[i]), ("own", int(li[i]))
        for e, (b, _bw, _r, bn, sm) in enumerate(self._incoming):
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
        if origin[0] == "in":
            _, e, p = origin
            self.stages = []
            b = self._incoming[e][0]
            self.boundaries = {"passes": int(b)}
            return {"entry": e, "point": p, "b": int(b)}
        li = origin[1]
        us, xs, _, _, _, gs, pars = self._store.view()
        stages = []
        while us[li] != 0:
            stages.append((int(xs[li]), int(xs[pars[li]]), int(gs[li])))
            li = int(pars[li])
        used: dict[int, int] = {}
        self.stages = []
        for start, end, g in stages:
            i = used.get(g, 0)
            used[g] = i + 1
            self.stages.append((start, end, Instance.device_name(self.dc, self.dc.devices[g], i)))
        first, last = self.stages[0][0], self.stages[-1][1]
        e, p = int(gs[li]), int(pars[li])
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
