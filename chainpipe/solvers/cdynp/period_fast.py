"""The inner loop of a DC's period DP, compiled (:meth:`.period.PeriodDP._extend_layer`).

One call prepends a run of candidate stages ``[a, x)`` (one group, one pair, ``a``
descending, so ``C``, ``f``, ``b`` and ``R`` never fall along it) to every label of one
state, with exactly the tests and the arithmetic of the module :mod:`.period` states: the
stash test, the bound before the stage's loops (which ends the run: it only grows along
it), the bound with the prefix's optimistic terms, then the new label by
:func:`~chainpipe.solvers.period_kernel.new_loops` and
:func:`~chainpipe.solvers.period_kernel.hull_prepend` (``dp``'s compiled rules) and the
bound on it. ``T = total + (M - 1)(x1 + x2) + sync`` as
:func:`chainpipe.cost.iteration_time` computes it (same operations, same order).

The kernels are plain functions in numba's subset of Python, registered with
:data:`UNIT` and handed out at the end of the import as :mod:`..period_kernel`'s are
(:meth:`.label_aot.Unit.bind`): compiled ahead of time when ``python -m
chainpipe.solvers.label_aot`` has built them for this file and :mod:`..period_kernel` as
they are (a CDynP solve then imports no numba), else numba's just-in-time kernels,
compiled on first use and cached on disk. The compiled module holds its own copy of the
two :mod:`..period_kernel` rules it calls, so its digest covers that file too.
"""

from __future__ import annotations

import numpy as np

from ..label_aot import Unit
from ..period_kernel import hull_prepend, new_loops  # noqa: F401 (the kernels call them)

#: per kernel :mod:`.period` calls, its arguments' types (:data:`.label_aot.ARGS`'
#: notation; ``tests/test_kernel_aot.py`` checks that CDynP passes exactly these)
ARGS = {
    "keep_points": ("f2", "f2", "i1", "i", "b"),
    "order_layer": ("f2", "i1", "f2", "b", "f1", "f1", "i", "f"),
    "least_bottleneck": ("f1", "f1", "f", "f1"),
    "extend_layer": ("f2", "f2", "i1", "i1", "i1", "b2", "f2", "i1", "i2", "f2", "f1", "f1",
                     "i1", "f1", "f2", "f2", "i1", "i2", "i1"),
}
#: the kernels, compiled ahead of time into ``cdynp_period_aot_<digest>``
UNIT = Unit("cdynp_period", ARGS, ("solvers/cdynp/period_fast.py", "solvers/period_kernel.py"))
kernel = UNIT.kernel


@kernel
def _over(x1, x2, total, sync, w, limit, w_hi, limit_hi, frontier):
    """``T`` above ``limit`` at weight ``w`` (``M - 1``), and in a frontier run above
    ``limit_hi`` at ``w_hi`` too."""
    if total + w * (x1 + x2) + sync <= limit:
        return False
    if not frontier:
        return True
    return total + w_hi * (x1 + x2) + sync > limit_hi


@kernel
def extend(S, H, HL, runs, ptr, use, need_at, fs, ints, pre_sum, pre_max, out_S, out_H,
           out_HL, out_src):
    """Prepend the stages of every run ``q`` with ``use[q]`` (rows ``ptr[q]:ptr[q + 1]``
    of ``runs``) to the labels ``S`` (rows ``x1, x2, total, sync, p``; majorants ``H[l,
    :HL[l]]``) and write the images within the bound to ``out_*``, run by run, label by
    label.

    ``runs`` rows: ``a, C, f, b, R, n`` (``n`` the most microbatches the stage holds);
    ``pre_max[q, a]``: the prefix's optimistic slowest stage before a stage of run ``q``
    starting at ``a`` (per run: its width leaves other devices free upstream);
    ``fs = [U, Q, limit, limit_hi]``; ``ints = [M, p_cap, gpipe, frontier, m_hi, prefix]``;
    ``out_src[k] = (run, label, row)`` of image ``k``, its majorant ``out_H[k, :out_HL[k]]``
    (the rest of the row ``-inf``, ``out_H`` one column wider than ``H``). Returns
    ``(images, cut)``, ``cut``: whether the bound dropped any image.
    """
    k, cut = 0, False
    tmp = np.empty((1, H.shape[1] + 1))
    for q in range(len(use)):
        if use[q]:
            k, c = _extend_run(S, H, HL, runs[ptr[q]:ptr[q + 1]], q, need_at, fs, ints,
                               pre_sum, pre_max[q], out_S, out_H, out_HL, out_src, k, tmp)
            cut = cut or c
    return k, cut


@kernel
def extend_layer(S, H, HL, bounds, internal, use, runs, ptr, prow, P, need_at, fs, ints,
                 pre_sum, out_S, out_H, out_HL, out_src, out_state):
    """:func:`extend` for every state of a layer, one call for the layer: state ``s``'s
    labels are rows ``bounds[s]:bounds[s + 1]`` of ``S``, ``H``, ``HL`` (none: skipped),
    the runs it takes those ``q`` with ``use[s, q]``, run ``q``'s prefix floors the row
    ``P[prow[s, q]]``; ``fs = [U, Q, limit, limit_hi]``, ``U`` and ``Q`` (the own
    boundary) only for a state with ``internal[s]`` (a base label's images cross none).
    The images state after state (each state's as :func:`extend` orders them, its labels
    numbered within it), and ``out_state[k]`` image ``k``'s state. Returns ``(images,
    cut)``."""
    k, cut = 0, False
    fs_s = fs.copy()
    for s in range(len(bounds) - 1):
        lo, hi = bounds[s], bounds[s + 1]
        if lo == hi:
            continue
        fs_s[0] = fs[0] if internal[s] else 0.0
        fs_s[1] = fs[1] if internal[s] else 0.0
        n, c = extend(S[lo:hi], H[lo:hi], HL[lo:hi], runs, ptr, use[s], need_at, fs_s, ints,
                      pre_sum, P[prow[s]], out_S[k:], out_H[k:], out_HL[k:], out_src[k:])
        out_state[k:k + n] = s
        k += n
        cut = cut or c
    return k, cut


@kernel
def _extend_run(S, H, HL, run, q, need_at, fs, ints, pre_sum, pre_max, out_S, out_H,
                out_HL, out_src, k, tmp):
    """:func:`extend` for one run ``q``, images from ``out_*[k]`` on (``tmp``: a row for
    :func:`~chainpipe.solvers.period_kernel.hull_prepend`)."""
    U, Q, limit, limit_hi = fs[0], fs[1], fs[2], fs[3]
    M, p_cap, gpipe, frontier, m_hi, prefix = (ints[0], ints[1], ints[2] != 0,
                                               ints[3] != 0, ints[4], ints[5] != 0)
    w, w_hi = float(M - 1), float(m_hi - 1)
    cut = False
    for lab in range(S.shape[0]):
        x1, x2, total, sync = S[lab, 0], S[lab, 1], S[lab, 2], S[lab, 3]
        p = int(S[lab, 4])
        need = need_at[p]
        for r in range(run.shape[0]):
            a = int(run[r, 0])
            C, f, b, R, n = run[r, 1], run[r, 2], run[r, 3], run[r, 4], run[r, 5]
            if need > n:
                break  # a longer stage stashes no more
            if gpipe:
                per = max(x1, f, U) + max(x2, b, U)
            else:
                per = max(x1, C, U)
            fill, syn = total + C + Q, max(sync, R)
            if _over(per, 0.0, fill, syn, w, limit, w_hi, limit_hi, frontier):
                cut = True
                break
            if prefix and _over(max(per, pre_max[a]), 0.0, fill + pre_sum[a], syn, w,
                                limit, w_hi, limit_hi, frontier):
                cut = True
                continue
            n_h = 0
            if gpipe:
                nx1, nx2, np_ = max(x1, f, U), max(x2, b, U), 0
            else:
                nx1, nx2 = max(x1, C, U), 0.0
                if p < M - 1 and HL[lab] > 0:
                    nx1 = max(nx1, new_loops(H, lab, HL[lab], C, Q))
                np_ = min(p + 1, p_cap)
                if np_ < M - 1:
                    n_h = hull_prepend(H, lab, HL[lab], C, Q, tmp, 0)
            if prefix:
                out = _over(max(nx1 + nx2, pre_max[a]), 0.0, fill + pre_sum[a], syn, w,
                            limit, w_hi, limit_hi, frontier)
            else:
                out = _over(nx1, nx2, fill, syn, w, limit, w_hi, limit_hi, frontier)
            if out:
                cut = True
                continue
            out_S[k, 0], out_S[k, 1], out_S[k, 2], out_S[k, 3] = nx1, nx2, fill, syn
            out_S[k, 4] = np_
            for i in range(n_h):
                out_H[k, i] = tmp[0, i]
            for i in range(n_h, out_H.shape[1]):
                out_H[k, i] = -np.inf
            out_HL[k] = n_h
            out_src[k, 0], out_src[k, 1], out_src[k, 2] = q, lab, r
            k += 1
    return k, cut


@kernel
def _point_dominates(S, H, HL, a, b, same_p):
    """:func:`.period.dominates` on rows ``a`` and ``b`` of ``S`` (``x1, x2, total, sync,
    p``) and their majorants ``H[., :HL[.]]``."""
    if same_p and S[a, 4] != S[b, 4]:
        return False
    for c in range(4):
        if S[a, c] > S[b, c]:
            return False
    if HL[a] != HL[b]:
        return False
    for i in range(HL[a]):
        if H[a, i] > H[b, i]:
            return False
    return True


@kernel
def keep_points(S, H, HL, prior, same_p):
    """Which rows from ``prior`` on no earlier kept row dominates (:func:`_point_dominates`),
    rows ``0..prior - 1`` (points already kept) counting as kept: :func:`.period.pareto`
    of the rows from ``prior`` on (given in its order), then those no prior row dominates.
    (A row dominated by a prior row is not kept, and neither is one it alone would
    dominate: the prior row dominates that one too, the rule being transitive.) With
    ``same_p`` only rows of one ``p`` dominate each other, so the rows are taken ``p`` by
    ``p`` (each ``p``'s in the order given, a stable sort), each tested against the kept
    rows of its own ``p`` only: the same answer, without the pairs that cannot match
    (a dear summary's points spread over tens of ``p``)."""
    n = S.shape[0]
    alive = np.zeros(n, dtype=np.bool_)
    kept = np.empty(n, dtype=np.int64)
    if same_p:
        order = np.argsort(S[:, 4], kind="mergesort")
    else:
        order = np.arange(n)
    lo = 0
    while lo < n:
        hi = lo + 1
        if same_p:
            while hi < n and S[order[hi], 4] == S[order[lo], 4]:
                hi += 1
        else:
            hi = n
        nk = 0
        for q in range(lo, hi):
            b = order[q]
            if b < prior:
                kept[nk] = b
                nk += 1
                continue
            beaten = False
            for t in range(nk):
                if _point_dominates(S, H, HL, kept[t], b, same_p):
                    beaten = True
                    break
            if not beaten:
                alive[b] = True
                kept[nk] = b
                nk += 1
        lo = hi
    return alive


@kernel
def _before(S, i, j):
    """Row ``i`` of ``S`` comes strictly before row ``j`` in :meth:`.period.PeriodDP.
    _filtered`'s order of a state's labels: ``x1 + x2``, ``total``, ``sync``, ``x1``,
    ``p`` (rows ``x1, x2, total, sync, p``)."""
    a, b = S[i, 0] + S[i, 1], S[j, 0] + S[j, 1]
    if a != b:
        return a < b
    for c in (2, 3, 0, 4):
        if S[i, c] != S[j, c]:
            return S[i, c] < S[j, c]
    return False


@kernel
def _sort_rows(S, idx, tmp):
    """Sort the row indices ``idx`` by :func:`_before`, stably (ties keep their order):
    a merge sort from runs of 8 sorted by insertion (``tmp``: as long as ``idx``)."""
    n = len(idx)
    for lo in range(0, n, 8):
        for a in range(lo + 1, min(lo + 8, n)):
            v = idx[a]
            b = a
            while b > lo and _before(S, v, idx[b - 1]):
                idx[b] = idx[b - 1]
                b -= 1
            idx[b] = v
    width = 8
    src, dst = idx, tmp
    swapped = False
    while width < n:
        for lo in range(0, n, 2 * width):
            mid, hi = min(lo + width, n), min(lo + 2 * width, n)
            i, j, k = lo, mid, lo
            while i < mid and j < hi:
                if _before(S, src[j], src[i]):
                    dst[k] = src[j]
                    j += 1
                else:
                    dst[k] = src[i]
                    i += 1
                k += 1
            while i < mid:
                dst[k] = src[i]
                i += 1
                k += 1
            while j < hi:
                dst[k] = src[j]
                j += 1
                k += 1
        src, dst = dst, src
        swapped = not swapped
        width *= 2
    if swapped:  # the sorted indices are in tmp
        idx[:] = tmp


@kernel
def _least_term(per, CF, suffix, grid, below, w):
    """:func:`.curve._least_term` of one period ``per`` (``CF`` one state's row, ``suffix``
    the suffix minima of its fixed terms, one longer; ``w = M - 1``): the same operations,
    so the same value to the bit."""
    n = len(grid)
    j = np.searchsorted(grid, per, side="left")
    at = min(j, n - 1)
    first = CF[at] + w * max(per, below[at]) if j < n else np.inf
    least = min(first, suffix[min(j + 1, n)])
    return min(least, w * max(per, grid[n - 1]))


@kernel
def order_layer(S, bounds, CF, curve, grid, below, M, limit):
    """Each state's rows of ``S`` (rows ``x1, x2, total, sync, p``, state ``s``'s rows
    ``bounds[s]:bounds[s + 1]``) in :func:`_before`'s order, stably (as ``numpy.lexsort``
    orders them), with ``curve`` only those the paired floor (:func:`.curve.paired`, state
    ``s``'s row of the curve ``CF[s]`` over the caps ``grid``, ``below``) leaves within
    ``limit`` (the bound with its slack): :meth:`.period.PeriodDP._filtered`'s per-state
    sort and cut, one call for the layer. Returns ``(order, counts, cut)``: the rows kept,
    state after state, each state's count, and whether the floor dropped a row."""
    n_states = len(bounds) - 1
    order = np.empty(S.shape[0], dtype=np.int64)
    tmp = np.empty(S.shape[0], dtype=np.int64)
    counts = np.zeros(n_states, dtype=np.int64)
    w = float(M - 1)
    suffix = np.empty(len(grid) + 1)
    cut = False
    k = 0
    for s in range(n_states):
        lo, hi = bounds[s], bounds[s + 1]
        if hi == lo:
            continue
        idx = order[k:k + hi - lo]
        for i in range(hi - lo):
            idx[i] = lo + i
        _sort_rows(S, idx, tmp[k:k + hi - lo])
        m = hi - lo
        if curve:
            suffix[len(grid)] = np.inf
            for i in range(len(grid) - 1, -1, -1):
                f = CF[s, i] + w * below[i]
                suffix[i] = f if i == len(grid) - 1 else min(f, suffix[i + 1])
            m = 0
            for i in range(hi - lo):
                r = idx[i]
                floor = _least_term(S[r, 0] + S[r, 1], CF[s], suffix, grid, below, w)
                if S[r, 2] + S[r, 3] + floor <= limit:
                    idx[m] = r
                    m += 1
                else:
                    cut = True
        counts[s] = m
        k += m
    return order[:k].copy(), counts, cut


@kernel
def least_bottleneck(starts, held, rate, flop):
    """:func:`.floors.least_bottleneck` with the step function given as ``starts`` and
    ``held`` (its breakpoints and values, a step from 0 holding 0 first): per value of
    ``flop`` the same bisection over the steps and the same operations, so the same
    floors to the bit."""
    n = len(starts)
    out = np.empty(len(flop))
    for t in range(len(flop)):
        f = flop[t]
        lo, hi = 0, n
        while lo < hi:
            mid = min((lo + hi) // 2, n - 1)
            if _line(f, held[mid], rate) <= starts[mid]:
                hi = mid
            else:
                lo = mid + 1
        got = starts[min(lo, n - 1)] if lo < n else np.inf
        if lo >= 1:
            got = min(got, _line(f, held[lo - 1], rate))
        out[t] = 0.0 if f <= 0 else got
    return out


@kernel
def _line(f, held, rate):
    """``(f - held) / rate``, 0 where nothing is left to hold, ``inf`` without a rate."""
    need = f - held
    if need <= 0:
        return 0.0
    return need / rate if rate > 0 else np.inf


UNIT.bind(globals())
