"""The prefix curve's forward walk, compiled (:mod:`.prefix_curve` holds the curve and
its proofs; ``docs/dp.md``, "Version 3", "The prefix curve").

:func:`forward` walks the layers of a DC range for one period cap ``lam``: per layer,
DC and usage on it, the least fill of a prefix that meets the cap, kept per bucket of
the windows' running excess (:func:`_file`); :func:`_undominated` skips what a usage of
no more devices already matches. The kernels are handed out as those of
:mod:`.period_kernel` are (:meth:`.label_aot.Unit.bind`): compiled ahead of time when
built for this file as it is, else numba's just-in-time kernels.
"""

from __future__ import annotations

import numpy as np

from .label_aot import Unit

#: the kernel :mod:`.prefix_curve` calls and its arguments' types
#: (:data:`.label_aot.ARGS`' notation)
ARGS = {
    "forward": ("f", "i", "i", "b", "i2", "i2", "i", "i2", "i1", "f4", "b4", "i3", "i2", "i1",
                "f3", "f3", "i", "b", "b"),
    "bottleneck": ("f", "i", "i", "b", "i2", "i2", "i", "i2", "i1", "f4", "b4", "i3", "i2",
                   "i1", "f3"),
    "at_most": ("f3", "i2", "f3", "f3", "f", "b", "f3"),
}
#: the kernels, compiled ahead of time into ``prefix_aot_<digest>`` (of this file)
UNIT = Unit("prefix", ARGS, ("solvers/prefix_kernel.py",))
kernel = UNIT.kernel
inline = UNIT.inline

#: the forward walk's relative slack on every test (rounding only keeps prefixes)
SLACK = 1e-9


@inline
def _file(F, b, k, v, h, f, lam, nb):
    """Keep fill ``f`` at state ``(b, k, v)`` in the bucket of excess ``h`` (one bucket
    without the windows: no division)."""
    q = 0
    if nb > 1:
        x = (h + lam) / lam * nb
        q = 0 if x < 0 else min(int(x), nb - 1)
    if f < F[b, k, v, q]:
        F[b, k, v, q] = f


@kernel
def _stages(F, a, k2, v0, h0s, f0s, free_gi, gi, g, C, ok, last, widths, npairs, stride, Q,
            lam, nb, first):
    """File every stage of group ``g`` (local ``gi``) starting at layer ``a`` on DC ``k2``
    after prefixes of excess buckets ``h0s`` and fills ``f0s`` (usage ``v0``); ``last``:
    per option and start, the last end ``ok`` allows (-1: none)."""
    tol = lam * SLACK
    for c in range(npairs[g]):
        w = widths[g, c]
        if w > free_gi:
            continue
        v2 = v0 + w * stride
        for b in range(a + 1, last[g, c, a] + 1):
            cc = C[g, c, a, b]
            if cc > lam + tol:
                break
            if not ok[g, c, a, b]:
                continue
            if first:
                _file(F, b, k2, v2, cc - lam, cc, lam, nb)
                continue
            for q in range(nb):
                f0 = f0s[q]
                if f0 == np.inf:
                    continue
                h2 = max(cc - lam, h0s[q] + Q + cc - lam)
                if h2 > tol:
                    break
                _file(F, b, k2, v2, h2, f0 + Q + cc, lam, nb)


@kernel
def _undominated(Fk, ng, radix, stride, nV, nb):
    """``Fk[v, q]`` (one prefix end and DC: usage ``v``, excess bucket ``q``) with every
    entry set to ``inf`` that an entry of no more devices of each group and no higher
    bucket matches or beats: whatever follows it follows the other, from no more devices
    and no larger excess, at no more fill. The walk's tables are read at the least over
    lower usages and buckets (:func:`_at_most`, the buckets' minimum), which this leaves
    as it was."""
    best = np.full((nV, nb), np.inf)  # the least at or below (v, q)
    out = Fk.copy()
    for v in range(nV):
        for q in range(nb):
            low = best[v, q - 1] if q > 0 else np.inf
            for gi in range(ng):
                if (v // stride[gi]) % radix[gi] > 0:
                    low = min(low, best[v - stride[gi], q])
            f = Fk[v, q]
            if f >= low:
                out[v, q] = np.inf
            best[v, q] = min(f, low)
    return out


@kernel
def forward(lam, lo_dc, hi_dc, first_fixed, radix, stride, nV, dc_groups, ngr, C, ok, last,
            widths, npairs, U, Q, nb, windows, prune):
    """The least fill per ``(prefix end, DC of its last stage, usage there, excess
    bucket)`` under cap ``lam`` (module docstring); ``inf`` where no prefix fits. Without
    ``windows`` (``nb = 1``) only ``C`` and ``U`` are capped. With ``prune``, entries that
    :func:`_undominated` drops are not expanded on their own DC (the least over lower
    usages and buckets stays the same; ``v3-large-03``'s walks 9.7 to 3.6 s)."""
    L1, K = C.shape[3], radix.shape[0]
    F = np.full((L1, K, nV, nb), np.inf)
    edges = np.full(nb, -np.inf)  # no windows: one bucket, every excess lets through
    if windows:
        for q in range(nb):
            edges[q] = -lam + lam * q / nb
    agg = np.empty(nb)
    none = np.full(nb, np.inf)
    for a in range(L1 - 1):
        for k in range(lo_dc, hi_dc + 1):
            if a == 0:
                if first_fixed and k != lo_dc:
                    continue
                for gi in range(ngr[k]):
                    _stages(F, 0, k, 0, edges, none, radix[k, gi] - 1, gi, dc_groups[k, gi],
                            C, ok, last, widths, npairs, stride[k, gi], 0.0, lam, nb, True)
                continue
            agg[:] = np.inf
            for v in range(nV):
                for q in range(nb):
                    agg[q] = min(agg[q], F[a, k, v, q])
            if agg.min() == np.inf:
                continue
            for k2 in range(k + 1, hi_dc + 1):  # a later DC: its usage starts afresh
                if U[a, k, k2] > lam * (1 + SLACK):
                    continue
                for gi in range(ngr[k2]):
                    _stages(F, a, k2, 0, edges, agg, radix[k2, gi] - 1, gi, dc_groups[k2, gi],
                            C, ok, last, widths, npairs, stride[k2, gi], Q[a, k, k2], lam, nb,
                            False)
            if U[a, k, k] > lam * (1 + SLACK):
                continue
            kept = _undominated(F[a, k], ngr[k], radix[k], stride[k], nV, nb) if prune \
                else F[a, k].copy()
            for v in range(nV):  # the same DC: per usage
                row = kept[v]
                if row.min() == np.inf:
                    continue
                for gi in range(ngr[k]):
                    used = (v // stride[k, gi]) % radix[k, gi]
                    _stages(F, a, k, v, edges, row, radix[k, gi] - 1 - used, gi,
                            dc_groups[k, gi], C, ok, last, widths, npairs, stride[k, gi],
                            Q[a, k, k], lam, nb, False)
    return F


@kernel
def _bottle_stages(B, a, k2, v0, base, free_gi, g, C, ok, last, widths, npairs, stride, cap):
    """File, for every stage of group ``g`` starting at layer ``a`` on DC ``k2`` after a
    prefix whose bottleneck (with the boundary before the stage) is ``base`` (usage
    ``v0``), the larger of ``base`` and the stage's ``C``."""
    tol = cap * SLACK
    for c in range(npairs[g]):
        w = widths[g, c]
        if w > free_gi:
            continue
        v2 = v0 + w * stride
        for b in range(a + 1, last[g, c, a] + 1):
            cc = C[g, c, a, b]
            if cc > cap + tol:
                break
            if not ok[g, c, a, b]:
                continue
            x = max(base, cc)
            if x < B[b, k2, v2, 0]:
                B[b, k2, v2, 0] = x


@kernel
def bottleneck(cap, lo_dc, hi_dc, first_fixed, radix, stride, nV, dc_groups, ngr, C, ok, last,
               widths, npairs, U):
    """Per DC ``k`` of the range, the least over placements of the whole model whose
    last stage lies on ``k`` of the largest ``C`` and ``U`` of their stages and inner
    boundaries (``inf`` where none has every one within ``cap``): :func:`forward` without
    ``windows`` fits under ``lam`` exactly when one of these is at most ``lam (1 +``
    :data:`SLACK` ``)`` (the same stages, boundaries, usages and tests, each value kept
    as the largest so far instead of a sum), so one walk finds the least cap a bisection
    over :func:`forward` would bracket."""
    L1, K = C.shape[3], radix.shape[0]
    B = np.full((L1, K, nV, 1), np.inf)
    top = cap * (1 + SLACK)
    for a in range(L1 - 1):
        for k in range(lo_dc, hi_dc + 1):
            if a == 0:
                if first_fixed and k != lo_dc:
                    continue
                for gi in range(ngr[k]):
                    _bottle_stages(B, 0, k, 0, 0.0, radix[k, gi] - 1, dc_groups[k, gi], C,
                                   ok, last, widths, npairs, stride[k, gi], cap)
                continue
            least = np.inf
            for v in range(nV):
                least = min(least, B[a, k, v, 0])
            if least == np.inf:
                continue
            for k2 in range(k + 1, hi_dc + 1):  # a later DC: its usage starts afresh
                if U[a, k, k2] > top:
                    continue
                for gi in range(ngr[k2]):
                    _bottle_stages(B, a, k2, 0, max(least, U[a, k, k2]), radix[k2, gi] - 1,
                                   dc_groups[k2, gi], C, ok, last, widths, npairs,
                                   stride[k2, gi], cap)
            if U[a, k, k] > top:
                continue
            kept = _undominated(B[a, k], ngr[k], radix[k], stride[k], nV, 1)
            for v in range(nV):  # the same DC: per usage
                x = kept[v, 0]
                if x == np.inf:
                    continue
                for gi in range(ngr[k]):
                    used = (v // stride[k, gi]) % radix[k, gi]
                    _bottle_stages(B, a, k, v, max(x, U[a, k, k]),
                                   radix[k, gi] - 1 - used, dc_groups[k, gi], C, ok, last,
                                   widths, npairs, stride[k, gi], cap)
    out = np.full(K, np.inf)
    for k in range(lo_dc, hi_dc + 1):
        for v in range(nV):
            out[k] = min(out[k], B[L1 - 1, k, v, 0])
    return out


@kernel
def at_most(F, radix, U, Q, lam, join, out):
    """Into ``out[a, k, v]``: the least of ``F[a, k', v']`` over every DC ``k' < k`` (any
    usage) and every usage ``v' <= v`` (per group, in the mixed radix ``radix[k]``, the
    first group's digit the lowest) on ``k`` itself; ``inf`` past DC ``k``'s usages.

    With ``join``, the prefix is followed by a stage on ``k``: an entry on ``k'`` pays
    the traversal ``Q[a, k', k]`` and counts only where the occupancy ``U[a, k', k]`` is
    within ``lam`` (``prefix_curve._at_most``)."""
    L1, K, nV = F.shape
    lim = lam * (1 + SLACK)
    least = np.full((L1, K), np.inf)
    for a in range(L1):
        for k in range(K):
            for v in range(nV):
                if F[a, k, v] < least[a, k]:
                    least[a, k] = F[a, k, v]
    before = np.full(L1, np.inf)
    for k in range(K):
        n = 1
        for gi in range(radix.shape[1]):
            n *= radix[k, gi]
        for a in range(L1):
            for v in range(n):
                out[a, k, v] = F[a, k, v]
            s = 1
            for gi in range(radix.shape[1]):  # the least over lower usages, group by group
                r = radix[k, gi]
                for v in range(n):
                    if (v // s) % r > 0 and out[a, k, v - s] < out[a, k, v]:
                        out[a, k, v] = out[a, k, v - s]
                s *= r
            if join:
                pre = np.inf
                for k2 in range(k):
                    if U[a, k2, k] <= lim and least[a, k2] + Q[a, k2, k] < pre:
                        pre = least[a, k2] + Q[a, k2, k]
                own = Q[a, k, k] if U[a, k, k] <= lim else np.inf
                for v in range(n):
                    out[a, k, v] = min(out[a, k, v] + own, pre)
            else:
                for v in range(n):
                    out[a, k, v] = min(out[a, k, v], before[a])
            for v in range(n, nV):
                out[a, k, v] = np.inf
        for a in range(L1):
            before[a] = min(before[a], least[a, k])


UNIT.bind(globals())
