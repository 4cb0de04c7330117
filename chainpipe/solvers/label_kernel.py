"""The label DP's compiled core: labels as arrays, the filters and the extension by a
stage in numba (``docs/dp.md``, "The compiled kernel").

A *label* of a state is four numbers: bottleneck ``mx``, fill ``sm`` (sum of
``C_s + Q_s``), stages placed ``p`` (capped) and synchronisation ``r``; a state's
labels are parallel arrays sorted by ``(mx, sm, p, r)``. The Python layer
(:mod:`.dp`) enumerates states and the stage options worth trying before each; the
two kernels here do the work per label:

- :func:`filter_states` keeps, per state of one datacenter, the labels no other label
  of the state dominates (plain Pareto, then the shifted rule of
  :func:`chainpipe.solvers.labels.shifted_pareto` under data parallelism) and drops
  those a label of another state of the datacenter with no more devices in use
  dominates (:func:`chainpipe.solvers.labels.across_usage`); it also returns per label
  its assembled ``T`` and its *killer* (:func:`chainpipe.solvers.labels.killers`).
- :func:`extend` puts one stage option (a *survivor* of the Python layer's optimistic
  bound) before every label of a state, keeps the images whose optimistic completion
  stays below the trial bound, and records complete plans (stage starting at layer 0).

Both are exact: they apply the same dominance rules and bounds, proven in
``docs/dp.md``, as the Python filters of :mod:`.labels` (which the CDynP agents use).
Compiled on first use and cached on disk (``cache=True``: numba's cache beside this
module, or ``NUMBA_CACHE_DIR``).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ..cost import assembled_time
from ..tables import fill_bound_at

_time = njit(cache=True)(assembled_time)
_fill_at = njit(cache=True)(fill_bound_at)


@njit(cache=True)
def _order4(mx, sm, p, r, group):
    """Indices sorted by ``(group, mx, sm, p, r)`` (stable sorts from the last key)."""
    order = np.argsort(r, kind="mergesort")
    order = order[np.argsort(p[order], kind="mergesort")]
    order = order[np.argsort(sm[order], kind="mergesort")]
    order = order[np.argsort(mx[order], kind="mergesort")]
    return order[np.argsort(group[order], kind="mergesort")]


@njit(cache=True)
def _shifted_beats(mx, sm, p, r, i, j, steady):
    """Whether label ``i`` dominates ``j`` under the shifted rule (docs/dp.md)."""
    if p[i] > p[j]:
        return False
    shift = 0.0
    if steady > 0 and mx[i] > mx[j]:
        shift = steady * (mx[i] - mx[j])
    extra = r[i] - r[j] if r[i] > r[j] else 0.0
    return sm[i] + shift + extra <= sm[j]


@njit(cache=True)
def _pareto_group(idx, mx, sm, p, r, shifted, steady):
    """Of ``idx`` (one state's labels sorted by ``(mx, sm, p, r)``): those kept by the
    plain Pareto filter and, with ``shifted``, by the shifted rule; in order."""
    n = len(idx)
    kept = np.empty(n, dtype=np.int64)
    k = 0
    for a in range(n):
        i = idx[a]
        dominated = False
        for b in range(k):
            j = kept[b]  # earlier in the order: no larger bottleneck
            if sm[j] <= sm[i] and p[j] <= p[i] and r[j] <= r[i]:
                dominated = True
                break
        if not dominated:
            kept[k] = i
            k += 1
    if not shifted or k < 2:
        return kept[:k]
    # shifted rule: i removes j when it dominates j and j does not dominate it back
    # unless i is listed first (the relation is transitive; docs/dp.md)
    out = np.empty(k, dtype=np.int64)
    m = 0
    for b in range(k):
        j = kept[b]
        removed = False
        for a in range(k):
            if a == b:
                continue
            i = kept[a]
            if _shifted_beats(mx, sm, p, r, i, j, steady) and (
                    a < b or not _shifted_beats(mx, sm, p, r, j, i, steady)):
                removed = True
                break
        if not removed:
            out[m] = j
            m += 1
    return out[:m]


@njit(cache=True)
def filter_states(mx, sm, p, r, state, usage, shifted, steady):
    """Filter the labels of the states of one datacenter at one layer.

    Parameters
    ----------
    mx, sm, r : numpy.ndarray
        ``(n,)`` float64: bottleneck, fill and synchronisation of every label.
    p : numpy.ndarray
        ``(n,)`` int64: stages placed (capped).
    state : numpy.ndarray
        ``(n,)`` int64: the label's state, an index into ``usage``'s rows.
    usage : numpy.ndarray
        ``(states, groups)`` int64: devices in use per group of the datacenter.
    shifted : bool
        Apply the shifted dominance (data parallelism) after the plain one.
    steady : int
        ``M - 1``.

    Returns
    -------
    keep : numpy.ndarray
        int64 indices of the kept labels, by ``(state, mx, sm, p, r)``.
    starts : numpy.ndarray
        ``(states + 1,)`` int64: state ``s``'s labels are ``keep[starts[s]:starts[s+1]]``.
    kill : numpy.ndarray
        Per kept label (in ``keep``'s order), the position in its state's list of the
        first later label dominating it at an equal bottleneck, else the list's length.
    lts : numpy.ndarray
        Per kept label, its ``T`` as a complete plan (``sm + (M - 1) mx``).
    """
    n_states = usage.shape[0]
    order = _order4(mx, sm, p, r, state)
    # within each state: Pareto (and shifted) filter
    within = np.empty(len(order), dtype=np.int64)
    w = 0
    lo = 0
    while lo < len(order):
        hi = lo
        while hi < len(order) and state[order[hi]] == state[order[lo]]:
            hi += 1
        kept = _pareto_group(order[lo:hi], mx, sm, p, r, shifted, steady)
        within[w:w + len(kept)] = kept
        w += len(kept)
        lo = hi
    within = within[:w]
    # across states: a label of a state with no more devices in use of any group and no
    # larger criteria dominates (rows by (mx, sm, p, r, devices in all))
    used = np.zeros(n_states, dtype=np.int64)
    for s in range(n_states):
        used[s] = usage[s].sum()
    alive = np.ones(w, dtype=np.bool_)
    if n_states > 1 and w > 1:
        keyed = np.empty(w, dtype=np.int64)
        for a in range(w):
            keyed[a] = used[state[within[a]]]
        o = np.argsort(keyed, kind="mergesort")
        o = o[np.argsort(r[within[o]], kind="mergesort")]
        o = o[np.argsort(p[within[o]], kind="mergesort")]
        o = o[np.argsort(sm[within[o]], kind="mergesort")]
        o = o[np.argsort(mx[within[o]], kind="mergesort")]
        kept_rows = np.empty(w, dtype=np.int64)
        k = 0
        for a in range(w):
            i = within[o[a]]
            si = state[i]
            for b in range(k):
                j = within[kept_rows[b]]
                sj = state[j]
                if sj == si or sm[j] > sm[i] or p[j] > p[i] or r[j] > r[i]:
                    continue  # same state: the filter above has decided
                fewer = True
                for g in range(usage.shape[1]):
                    if usage[sj, g] > usage[si, g]:
                        fewer = False
                        break
                if fewer:
                    alive[o[a]] = False
                    break
            if alive[o[a]]:
                kept_rows[k] = o[a]
                k += 1
    keep = np.empty(w, dtype=np.int64)
    starts = np.zeros(n_states + 1, dtype=np.int64)
    m = 0
    for a in range(w):
        if alive[a]:
            keep[m] = within[a]
            starts[state[within[a]] + 1] += 1
            m += 1
    keep = keep[:m]
    for s in range(n_states):
        starts[s + 1] += starts[s]
    kill = np.empty(m, dtype=np.int64)
    lts = np.empty(m, dtype=np.float64)
    for s in range(n_states):
        lo, hi = starts[s], starts[s + 1]
        for a in range(lo, hi):
            j = keep[a]
            lts[a] = _time(sm[j], mx[j], steady, 0.0)
            kill[a] = hi - lo
            if not shifted:
                continue
            for b in range(a + 1, hi):
                i = keep[b]
                extra = r[i] - r[j] if r[i] > r[j] else 0.0
                if p[i] <= p[j] and sm[i] + extra <= sm[j]:
                    kill[a] = b - lo
                    break
    return keep, starts, kill, lts


@njit(cache=True)
def survivors(table, pre_max, pre_sum, flop, curve_x, step, use_fill, base, rate_g,
              floors_need, floors_gain, use_floors, free, lows, Q, steady, upper):
    """The stage options of ``table`` worth putting before a state: those whose
    optimistic completion, with the state's least label values, stays below ``upper``
    (a row failing it fails for every label; ``docs/dp.md``).

    Parameters
    ----------
    table : numpy.ndarray
        ``(n, 7)`` float64 rows: start ``a``, ``C``, in-flight limit, width, ``R``, pair,
        and the width's slot in ``floors_need`` and ``floors_gain``.
    pre_max, pre_sum : numpy.ndarray
        Per prefix end ``a``: its largest layer and its compute sum on the widest stage
        of the fastest devices of the DCs that may hold it.
    flop : numpy.ndarray
        FLOP of each prefix ``[0, a)``.
    curve_x, step : numpy.ndarray, float
        The fill curve of the devices free (:func:`chainpipe.tables.fill_curve`), used
        when ``use_fill``.
    base, rate_g : float
        Total rate of the devices free on the prefix's DCs, and one device's of the group.
    floors_need, floors_gain : numpy.ndarray
        ``(widths, a)``: the capacity floor under the prefix's bottleneck and the fill a
        crossing adds, once a stage of each width is placed (used when ``use_floors``).
    free : int
        Devices of the group still free.
    lows : tuple
        The state's least bottleneck (with the boundary's occupancy), fill and sync.
    Q : float
        Traversal of the boundary after the stage.
    steady : int
        ``M - 1``.
    upper : float
        The bound to stay below.

    Returns
    -------
    numpy.ndarray
        ``(k, 8)`` rows for :func:`extend`: the first six columns of ``table``, then
        the prefix's optimistic bottleneck ``pm`` and fill ``ps``.
    """
    low_u, low_sm, low_r = lows
    n = table.shape[0]
    out = np.empty((n, 8))
    k = 0
    for i in range(n):
        w = table[i, 3]
        if w > free:
            continue
        a = int(table[i, 0])
        c = table[i, 1]
        pm = pre_max[a]
        ps = pre_sum[a]
        if a > 0:
            if use_fill:
                fill = _fill_at(flop[a], curve_x, step,
                                np.searchsorted(curve_x, flop[a], side="right") - 1)
                if fill > ps:
                    ps = fill
            avail = base - w * rate_g
            if avail <= 0:
                continue
            if flop[a] / avail > pm:
                pm = flop[a] / avail
            if use_floors:
                s = int(table[i, 6])
                if floors_need[s, a] > pm:
                    pm = floors_need[s, a]
                ps += floors_gain[s, a]
        nmx = c if c >= low_u else low_u
        rr = table[i, 4] if table[i, 4] >= low_r else low_r
        if _time(low_sm + Q + c + ps, nmx if nmx >= pm else pm, steady, rr) >= upper:
            continue
        out[k, :6] = table[i, :6]
        out[k, 6] = pm
        out[k, 7] = ps
        k += 1
    return out[:k]


@njit(cache=True)
def extend(mx, sm, p, r, lts, kill, rows, U, Q, upper, steady, p_cap, need_at, slack,
           use_kill):
    """Put each stage option of ``rows`` before every label of one state.

    Parameters
    ----------
    mx, sm, r, lts : numpy.ndarray
        The state's labels (sorted by bottleneck) and their assembled ``T``.
    p, kill : numpy.ndarray
        int64: stages placed, and the killers of :func:`filter_states`.
    rows : numpy.ndarray
        ``(n_rows, 8)`` float64, one stage option per row: start ``a``, ``C``, in-flight
        limit, width, ``R``, pair, and the optimistic prefix bottleneck ``pm`` and fill
        ``ps`` of ``[0, a)``.
    U, Q : float
        Occupancy and traversal of the boundary after the stage (0 if none).
    upper : float
        The trial bound: only plans with ``T < upper`` are kept.
    steady, p_cap : int
        ``M - 1`` and the cap on stages placed.
    need_at : numpy.ndarray
        int64: in-flight count a stage needs when placed before ``p`` stages.
    slack : float
        Relative widening of the threshold tests (:data:`.labels.BOUND_SLACK`).
    use_kill : bool
        Skip labels whose killer is lifted to the same bottleneck by the stage.

    Returns
    -------
    images : tuple
        ``(mx, sm, p, r, label, pair)`` arrays of the images kept: ``label`` the index
        of the label each extends, ``pair`` its stage's pair; grouped by target state.
    starts : numpy.ndarray
        Group ``q``'s images are ``starts[q]:starts[q+1]``.
    heads : numpy.ndarray
        ``(groups, 2)`` int64: each group's stage start ``a`` and width (its target).
    best : tuple
        ``(upper, row, label)``: the bound after complete plans (stages at layer 0)
        lowered it, and the best one's row and label (``-1`` if none).
    """
    n = len(mx)
    n_rows = rows.shape[0]
    cap = max(16, n * 2)
    o_mx = np.empty(cap)
    o_sm = np.empty(cap)
    o_r = np.empty(cap)
    o_p = np.empty(cap, dtype=np.int64)
    o_i = np.empty(cap, dtype=np.int64)
    o_row = np.empty(cap, dtype=np.int64)
    best_row = -1
    best_label = -1
    m = 0
    for j in range(n_rows):
        lo = m
        a = int(rows[j, 0])
        c = rows[j, 1]
        in_flight = rows[j, 2]
        rj = rows[j, 4]
        pm = rows[j, 6]
        ps = rows[j, 7]
        cu = c if c >= U else U
        h = cu if cu >= pm else pm
        # labels lifted to one bottleneck by the stage: those a later one of them kills
        # need no extension (labels.killers)
        lift = np.searchsorted(mx, cu, side="right") if use_kill else 0
        base = c + Q + ps
        thr_lo = upper - _time(base, h, steady, 0.0) + upper * slack
        thr_hi = upper - base + upper * slack
        for i in range(n):
            if i < lift and kill[i] < lift:
                continue
            if need_at[p[i]] > in_flight:
                continue
            nr = r[i] if r[i] >= rj else rj
            if mx[i] <= h:
                if sm[i] + nr >= thr_lo:
                    continue
            elif lts[i] + nr >= thr_hi:
                continue
            nmx = mx[i] if mx[i] >= cu else cu
            nsm = sm[i] + c + Q  # in this order: the sums of every path add alike
            if a == 0:
                opt = _time(nsm + ps, nmx if nmx >= pm else pm, steady, nr)
                if opt < upper:
                    upper = opt  # a complete plan: nothing slower is worth extending now
                    best_row = j
                    best_label = i
                    thr_lo = upper - _time(base, h, steady, 0.0) + upper * slack
                    thr_hi = upper - base + upper * slack
                continue
            if m == cap:
                cap *= 2
                o_mx = _grown(o_mx, cap, m)
                o_sm = _grown(o_sm, cap, m)
                o_r = _grown(o_r, cap, m)
                o_p = _grown(o_p, cap, m)
                o_i = _grown(o_i, cap, m)
                o_row = _grown(o_row, cap, m)
            o_mx[m] = nmx
            o_sm[m] = nsm
            o_r[m] = nr
            o_p[m] = p[i] + 1 if p[i] < p_cap else p_cap
            o_i[m] = i
            m += 1
        o_row[lo:m] = j
    # one group per target state: rows of the same start and width lead to the same one
    wide = 1.0
    for j in range(n_rows):
        if rows[j, 3] >= wide:
            wide = rows[j, 3] + 1.0
    code = np.empty(m)
    for e in range(m):
        code[e] = rows[o_row[e], 0] * wide + rows[o_row[e], 3]
    order = np.argsort(code[:m], kind="mergesort")
    starts = np.empty(m + 1, dtype=np.int64)
    n_groups = 0
    for e in range(m):
        if e == 0 or code[order[e]] != code[order[e - 1]]:
            starts[n_groups] = e
            n_groups += 1
    starts[n_groups] = m
    pair = np.empty(m, dtype=np.int64)
    for e in range(m):
        pair[e] = int(rows[o_row[order[e]], 5])
    first = order[starts[:n_groups]]
    heads = np.empty((n_groups, 2), dtype=np.int64)
    for q in range(n_groups):
        heads[q, 0] = int(rows[o_row[first[q]], 0])
        heads[q, 1] = int(rows[o_row[first[q]], 3])
    images = (o_mx[:m][order], o_sm[:m][order], o_p[:m][order], o_r[:m][order],
              o_i[:m][order], pair)
    return images, starts[:n_groups + 1], heads, (upper, best_row, best_label)


@njit(cache=True)
def _grown(arr, cap, m):
    """``arr``'s first ``m`` entries in a new array of ``cap``."""
    out = np.empty(cap, dtype=arr.dtype)
    out[:m] = arr[:m]
    return out
