"""The agent's label DP, vectorised: for the wide DPs of DCs far down a long chain.

The same DP as :mod:`.local` (same states, labels and bound, so the same
frontiers up to dominated points), with the labels of each layer processed as
numpy arrays: all labels whose suffix a stage ``[a, x)`` can reach, times
every group, at once. It skips the dominance across usage states, which does
not vectorise, and keeps more labels. Its fixed cost per layer is a
few hundred microseconds, so it only pays when a DC holds tens of thousands of
labels; :class:`~.agent.DCAgent` picks it from the size of the state space.
It takes the same optimistic prefix cost as :mod:`.local` (``prefix`` and
``spread``: what the prefix pass lets DC 2..K bound). One device per stage
only: under data or tensor parallelism every DC runs :mod:`.local`.
"""

from __future__ import annotations

import math

import numpy as np

from ... import cost
from .local import END, IN, OWN, DCRun


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


def pareto_mask(r: np.ndarray, bn: np.ndarray, sm: np.ndarray,
                group: np.ndarray | None = None) -> np.ndarray:
    """Boolean mask of the non-dominated points (minimising ``r``, ``bn``, ``sm``).

    With ``group``, points are compared only within their group. Exact
    duplicates keep one. Vectorised: points sorted by ``(group, bn, sm, r)``;
    point ``i`` is dominated iff an earlier point of its group has ``r <= r_i``
    and ``sm <= sm_i``, found with one running minimum per distinct ``r``
    over integer ranks (no floating-point offsets, so the test is exact).
    """
    n = len(bn)
    if n <= 1:
        return np.ones(n, dtype=bool)
    if n <= _SMALL:
        return _pareto_mask_small(r, bn, sm, group)
    if group is None:
        order = np.lexsort((r, sm, bn))
    else:
        order = np.lexsort((r, sm, bn, group))
    rr = r[order]
    # ranks of sm; a stable sort ranks an earlier point of equal sm lower, which is
    # what "an earlier point with sm <= sm_i" needs
    key = np.empty(n, dtype=np.int64)
    key[np.argsort(sm[order], kind="stable")] = np.arange(n)
    if group is None:
        big = np.int64(n + 1)
    else:
        # segment offsets decrease along the order, so an earlier group never
        # looks better than any point of a later group
        gs = group[order]
        gd = np.zeros(n, dtype=np.int64)
        np.cumsum(gs[1:] != gs[:-1], out=gd[1:])
        ng = int(gd[-1]) + 1
        key += (ng - gd) * (n + 1)
        big = np.int64((ng + 2) * (n + 1))
    dominated = _exclusive_min(key, big) <= key
    rmax = rr.max()
    if rr.min() != rmax:
        # points with fewer stages must only be compared with points of no more stages
        for rho in np.unique(rr)[:-1]:
            sel = rr == rho
            prev = _exclusive_min(np.where(rr <= rho, key, big), big)
            dominated[sel] = prev[sel] <= key[sel]
    keep = np.zeros(n, dtype=bool)
    keep[order[~dominated]] = True
    return keep


#: below this many points a plain loop beats the vectorised filter's fixed cost
_SMALL = 48


def _pareto_mask_small(r, bn, sm, group) -> np.ndarray:
    """:func:`pareto_mask` for a few points: the same order, the same test, a loop."""
    rl, bl, sl = r.tolist(), bn.tolist(), sm.tolist()
    gl = group.tolist() if group is not None else [0] * len(rl)
    order = sorted(range(len(rl)), key=lambda i: (gl[i], bl[i], sl[i], rl[i]))
    keep = np.zeros(len(rl), dtype=bool)
    kept: list = []
    current = None
    for i in order:
        if gl[i] != current:
            current, kept = gl[i], []
        ri, si = rl[i], sl[i]
        for kr, ks in kept:
            if kr <= ri and ks <= si:
                break
        else:
            keep[i] = True
            kept.append((ri, si))
    return keep


def _exclusive_min(values: np.ndarray, big) -> np.ndarray:
    prev = np.empty(len(values), dtype=values.dtype)
    prev[0] = big
    if len(values) > 1:
        prev[1:] = np.minimum.accumulate(values)[:-1]
    return prev


class WideDP(DCRun):
    """The label loop vectorised over the labels of a layer (see :class:`.local.DCRun`)."""

    def run(self, base: dict[int, list[tuple]], ub: float, prefix=None,
            greedy: bool = False, spread=None) -> None:
        """As :meth:`.local.LocalDP.run` (``prefix`` and ``spread`` as there). ``greedy``
        keeps one label per state (the one with the least ``T`` estimate): a fast probe,
        inexact, whose complete plans give an upper bound.

        Walks the stage starts ``a`` from the end: the base labels joining at ``a + 1``
        enter the store, then every stored suffix a stage ``[a, x)`` can reach is
        extended at once (:meth:`_extend`) and the new frontier stored.
        """
        if self.sync:
            raise ValueError("WideDP places one device per stage; use LocalDP")
        caps = np.minimum(self.t.count, self.L)
        self._strides = np.concatenate(([1], np.cumprod(caps[:-1] + 1))).astype(np.int64)
        self._caps = caps
        self._limit = ub * (1 + 1e-12)
        self._bounded = ub < math.inf
        self._prefix = prefix
        self._spread = None
        if spread is not None:
            flop, up, groups = spread
            rate, count, most = (np.array(v, dtype=float) for v in zip(*groups))
            self._spread = (flop, up, rate, count, most)
        pending = self._base_arrays(base)
        store = _Store()
        x_max = self._widest_stage_end(ub)
        for a in range(self.L - 1, -1, -1):
            self.deadline.check()
            x = a + 1
            if x in pending:
                r, bn, sm, oe, op = pending.pop(x)
                keep = pareto_mask(r, bn, sm)
                n = int(keep.sum())
                store.append(np.zeros(n, np.int64), np.full(n, x), r[keep], bn[keep],
                             sm[keep], oe[keep], op[keep])
            # only suffixes a stage starting at a can reach (memory, and the bound)
            view, offset = store.tail(int(x_max[a]))
            if view is None:
                continue
            new = self._extend(a, view, offset)
            if not new:
                continue
            nu, r, bn, sm, g_, par = (np.concatenate([p[c] for p in new]) for c in range(6))
            keep = pareto_mask(r, bn, sm, nu)
            if greedy:
                keep = self._greedy(keep, nu, bn, sm)
            n = int(keep.sum())
            store.append(nu[keep], np.full(n, a), r[keep], bn[keep], sm[keep], g_[keep],
                         par[keep])
        self._export(store)

    @staticmethod
    def _base_arrays(base: dict[int, list[tuple]]) -> dict[int, tuple]:
        """Base labels as arrays ``(r, bn, sm, entry, point)`` per ``x``; entry ``-1``:
        the model ends here."""
        pending: dict[int, tuple] = {}
        for x, labels in base.items():
            bn, sm, r, _sync, refs = zip(*labels)
            pending[x] = (np.array(r, dtype=np.int64), np.array(bn, dtype=float),
                          np.array(sm, dtype=float),
                          np.array([e if k == IN else -1 for k, e, _ in refs], dtype=np.int64),
                          np.array([p if k == IN else -1 for k, _, p in refs], dtype=np.int64))
        return pending

    def _extend(self, a: int, view: tuple, offset: int) -> list[tuple]:
        """Stage ``[a, x)`` on each group prepended to every stored label of ``view``
        it can take (a free device, memory at its position, within the bound). Returns
        per group ``(usage, r, bottleneck, total, group, parent index)`` arrays."""
        M, t = self.M, self.t
        us, xs, rs, bns, sms = view[:5]
        inflight = t.in_flight(rs + 1)
        is_base = us == 0
        new = []
        for g in range(t.G):
            room = (us // self._strides[g]) % (self._caps[g] + 1) < self._caps[g]
            idx = np.flatnonzero(room & (inflight <= t.max_in_flight[g, a, xs]))
            if not len(idx):
                continue
            xi = xs[idx]
            c = t.compute_time[g, a, xi]
            internal = ~is_base[idx]
            nbn = np.maximum(np.maximum(bns[idx], c), np.where(internal, self.u_int[xi], 0.0))
            nsm = sms[idx] + c + np.where(internal, self.q_int[xi], 0.0)
            if self._bounded:
                ok = cost.iteration_time(*self._with_prefix(a, nsm, nbn, us[idx] + self._strides[g]),
                                         M) <= self._limit
                if not ok.all():
                    self.bound_cut = True
                    idx, nbn, nsm = idx[ok], nbn[ok], nsm[ok]
                if not len(idx):
                    continue
            new.append((us[idx] + self._strides[g], np.minimum(rs[idx] + 1, self.R), nbn, nsm,
                        np.full(len(idx), g), idx + offset))
        return new

    def _with_prefix(self, a: int, sm: np.ndarray, bn: np.ndarray, nu: np.ndarray):
        """``(sum, bottleneck)`` of the new labels at ``a`` with the optimistic cost of
        the prefix ``[0, a)`` added (:meth:`.local.LocalDP.run`): its sum and bottleneck
        terms, and the prefix FLOP over what the devices upstream and the DC's devices
        each label (usage ``nu``) leaves free compute."""
        if a == 0 or self._prefix is None:
            return sm, bn
        pre_sum, pre_max = self._prefix
        floor = pre_max[a]
        if self._spread is not None:
            flop, up, rate, count, most = self._spread
            used = (nu[:, None] // self._strides[None, :]) % (self._caps[None, :] + 1)
            avail = up + (rate * np.minimum(count - used, most)).sum(axis=1)
            with np.errstate(divide="ignore"):
                floor = np.maximum(floor, flop[a] / avail)
        return sm + pre_sum[a], np.maximum(bn, floor)

    def _greedy(self, keep: np.ndarray, nu, bn, sm) -> np.ndarray:
        """Of the kept labels, only the one with the least ``T`` estimate per state."""
        kept = np.flatnonzero(keep)
        o = kept[np.lexsort((cost.iteration_time(sm[kept], bn[kept], self.M), nu[kept]))]
        first = np.concatenate(([True], nu[o][1:] != nu[o][:-1]))
        out = np.zeros(len(keep), dtype=bool)
        out[o[first]] = True
        return out

    def _export(self, store: _Store) -> None:
        """:attr:`points` in :class:`.local.LocalDP`'s form, kept to each start's
        frontier over ``(r, bottleneck, total)`` (all a summary can use: its filters are
        monotone), while the labels stay in arrays for :meth:`label`."""
        self.points = {}
        view = self._view = store.view()
        if view is None:
            return
        us, xs, rs, bns, sms = view[:5]
        own = np.flatnonzero(us != 0)
        self.stats["labels"] = len(own)
        if not len(own):
            return
        keep = own[pareto_mask(rs[own], bns[own], sms[own], xs[own])]
        for x, r, bn, sm, i in zip(xs[keep].tolist(), rs[keep].tolist(), bns[keep].tolist(),
                                   sms[keep].tolist(), keep.tolist()):
            self.points.setdefault(x, []).append((r, bn, sm, 0.0, i))

    def label(self, i: int) -> tuple[int, int, int, tuple]:
        """Own label ``i``: ``(start, group, pair, ref)`` (see :class:`.local.LocalDP`;
        the pair is always the only one, ``d = t = 1``)."""
        us, xs, _, _, _, gs, pars = self._view
        p = int(pars[i])
        if us[p]:
            ref = (OWN, p, 0)
        elif gs[p] < 0:
            ref = (END, 0, 0)
        else:
            ref = (IN, int(gs[p]), int(pars[p]))
        return int(xs[i]), int(gs[i]), 0, ref

    def _widest_stage_end(self, ub: float) -> np.ndarray:
        """``[a]``: the last layer end ``x`` a stage ``[a, x)`` of this DC can have
        (:meth:`.local.DCRun.stage_fits` only gets harder as ``x`` grows)."""
        ok = self.stage_fits(ub).any(axis=0)  # [a, x]: some group can hold stage [a, x)
        ends = np.where(ok, np.arange(self.L + 1)[None, :], -1).max(axis=1)
        return np.maximum(ends, np.arange(self.L + 1))
