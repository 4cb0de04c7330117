"""The label DP's compiled core: labels as arrays, the filters and the extension by a
stage in numba (``docs/dp.md``, "The compiled kernel").

A *label* of a state is four numbers: bottleneck ``mx``, fill ``sm`` (sum of
``C_s + Q_s``), stages placed ``p`` (capped) and synchronisation ``r``; a state's
labels are the rows of one ``(n, 6)`` array (with each label's ``T`` as a complete
plan and its killer), sorted by ``(mx, sm)``. The Python layer (:mod:`.dp`)
enumerates states and the moves before each (a group of a datacenter, the boundary
crossed); the kernels do the work per label:

- :func:`take_layer` and :func:`filter_layer`: the images filed for a layer (labels
  made by a stage before a label of a later layer, kept in an arena of blocks:
  :func:`new_arena`) filtered per state: the plain Pareto rule (an online skyline), the
  shifted rule of :func:`chainpipe.solvers.labels.shifted_pareto` under data
  parallelism, the rule across states of one datacenter
  (:func:`chainpipe.solvers.labels.across_usage`), and per label its assembled ``T``
  and its *killer* (:func:`chainpipe.solvers.labels.killers`);
- :func:`union_front`: the labels of a datacenter's states at one layer that no other
  of them dominates, which the moves into an earlier datacenter extend once for all of
  those states (such a move and every completion after it do not depend on the state's
  devices in use);
- :func:`advance`, one call per move: :func:`survivors` (the stage options whose
  optimistic completion, with the state's least label values, stays below the bound),
  then :func:`extend` (each survivor before every label: the bound per label, complete
  plans recorded, the images filed in the arena).

Both are exact: they apply the same dominance rules and bounds, proven in
``docs/dp.md``, as the Python filters of :mod:`.labels` (their definitions, which the
tests check the kernels against). The CDynP agents' label DP
(:class:`chainpipe.solvers.cdynp.local.LocalDP`) runs on the same filters
(:func:`local_layer`, which also orders each state's labels as :mod:`.labels` does)
with extensions of its own bound tests (:func:`local_terms`, :func:`local_prepend`).
Compiled on first use and cached on disk (``cache=True``: numba's cache beside this
module, or ``NUMBA_CACHE_DIR``).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .. import numba_start
from ..cost import assembled_time
from ..tables import fill_bound_at
from .label_aot import BLOCK, grown, new_arena  # noqa: F401 (the arena: one definition)
from .labels import BOUND_SLACK as SLACK

numba_start.prepare()

_time = njit(cache=True)(assembled_time)
_fill_at = njit(cache=True)(fill_bound_at)


@njit(cache=True)
def _by_state(state, n_states):
    """Indices grouped by state (a counting sort, stable) and each state's start."""
    count = np.zeros(n_states + 1, dtype=np.int64)
    for i in range(len(state)):
        count[state[i] + 1] += 1
    for s in range(n_states):
        count[s + 1] += count[s]
    starts = count.copy()
    out = np.empty(len(state), dtype=np.int64)
    for i in range(len(state)):
        out[count[state[i]]] = i
        count[state[i]] += 1
    return out, starts


@njit(cache=True)
def _shifted_beats(mx_i, sm_i, p_i, r_i, mx_j, sm_j, p_j, r_j, steady):
    """Whether label ``i`` (``mx``, ``sm``, ``p``, ``r``) dominates ``j`` under the shifted
    rule (docs/dp.md). Scalars only: a compiled call handed arrays counts a reference to
    each, two atomic operations per array and call (``docs/dp.md``, "The compiled
    kernel")."""
    if p_i > p_j:
        return False
    shift = 0.0
    if steady > 0 and mx_i > mx_j:
        shift = steady * (mx_i - mx_j)
    extra = r_i - r_j if r_i > r_j else 0.0
    return sm_i + shift + extra <= sm_j


@njit(cache=True)
def _first_dominator(f0, f1, f2, f3, k, x0, x1, x2, x3):
    """The first of the ``k`` labels ``(f0, f1, f2, f3)`` no larger than ``(x0, x1, x2,
    x3)`` in every criterion, else -1: blocks of 32 tested without a branch per label."""
    for b0 in range(0, k, 32):
        b1 = min(b0 + 32, k)
        c = 0
        for b in range(b0, b1):
            c += (f0[b] <= x0) & (f1[b] <= x1) & (f2[b] <= x2) & (f3[b] <= x3)
        if c:
            for b in range(b0, b1):
                if f0[b] <= x0 and f1[b] <= x1 and f2[b] <= x2 and f3[b] <= x3:
                    return b
    return -1


@njit(cache=True)
def _any_below(f1, f2, f3, lo, hi, x1, x2, x3):
    """Whether one of the labels ``lo..hi`` of ``(f1, f2, f3)`` is no larger than ``(x1,
    x2, x3)`` in each (in blocks of 32 without a branch per label)."""
    for b0 in range(lo, hi, 32):
        c = 0
        for b in range(b0, min(b0 + 32, hi)):
            c += (f1[b] <= x1) & (f2[b] <= x2) & (f3[b] <= x3)
        if c:
            return True
    return False


@njit(cache=True)
def _pareto_group(idx, mx, sm, p, r, shifted, steady, buf):
    """Of ``idx`` (one state's labels): those no other dominates (of equal ones the
    first), by ``(mx, sm)``, then with ``shifted`` those the shifted rule keeps.

    An online skyline: each label is compared with the kept ones (``buf``, scratch),
    the one that dominated the last dropped label first (it often dominates the next);
    if none dominates it, it drops those it dominates and is kept. No sort is needed
    and the kept set stays small (the labels of a state are mostly dominated)."""
    n = len(idx)
    # the kept labels' criteria side by side: the search for a dominator runs in blocks
    # without a branch per label (which the compiler vectorises)
    f0 = np.empty(n)
    f1 = np.empty(n)
    f2 = np.empty(n)
    f3 = np.empty(n)
    k = 0
    last = 0
    for a in range(n):
        i = idx[a]
        x0, x1, x2, x3 = mx[i], sm[i], float(p[i]), r[i]
        if last < k and f0[last] <= x0 and f1[last] <= x1 and f2[last] <= x2 and f3[last] <= x3:
            continue
        hit = _first_dominator(f0, f1, f2, f3, k, x0, x1, x2, x3)
        if hit >= 0:
            last = hit
            continue
        m = 0
        for b in range(k):
            if not (x0 <= f0[b] and x1 <= f1[b] and x2 <= f2[b] and x3 <= f3[b]):
                buf[m], f0[m], f1[m], f2[m], f3[m] = buf[b], f0[b], f1[b], f2[b], f3[b]
                m += 1
        buf[m], f0[m], f1[m], f2[m], f3[m] = i, x0, x1, x2, x3
        k = m + 1
    kept = buf[:k].copy()
    kept = kept[np.argsort(sm[kept])]
    kept = kept[np.argsort(mx[kept], kind="mergesort")]
    if not shifted or k < 2:
        return kept[:k]
    return _shifted_rule(kept, mx, sm, p, r, steady)


@njit(cache=True)
def _shifted_rule(kept, mx, sm, p, r, steady):
    """Of a state's labels ``kept`` (no one dominating another, by ``(mx, sm)``), those
    the shifted rule keeps (:func:`chainpipe.solvers.labels.shifted_pareto`)."""
    k = len(kept)
    # shifted rule: i removes j when it dominates j and j does not dominate it back
    # unless i is listed first (the relation is transitive; docs/dp.md). A label listed
    # before j (no larger mx) that dominates it has no larger sm; one listed after (no
    # smaller mx) has no larger sm + (M - 1) mx (the shift and the sync term are >= 0):
    # only those are tried, by sm and by that sum (with a hair of slack for rounding;
    # the rule itself decides)
    lt = np.empty(k)
    for b in range(k):
        lt[b] = sm[kept[b]] + steady * mx[kept[b]]
    by_sm = np.argsort(sm[kept], kind="mergesort")
    by_lt = np.argsort(lt, kind="mergesort")
    out = np.empty(k, dtype=np.int64)
    m = 0
    for b in range(k):
        j = kept[b]
        removed = False
        for c in range(k):
            a = by_sm[c]
            i = kept[a]
            if sm[i] > sm[j]:
                break
            if a < b and _shifted_beats(mx[i], sm[i], p[i], r[i], mx[j], sm[j], p[j], r[j],
                                        steady):
                removed = True
                break
        if not removed:
            cut = lt[b] + 1e-9 * abs(lt[b])
            for c in range(k):
                a = by_lt[c]
                if lt[a] > cut:
                    break
                if a <= b:
                    continue
                i = kept[a]
                if _shifted_beats(mx[i], sm[i], p[i], r[i], mx[j], sm[j], p[j], r[j],
                                  steady) and not _shifted_beats(
                        mx[j], sm[j], p[j], r[j], mx[i], sm[i], p[i], r[i], steady):
                    removed = True
                    break
        if not removed:
            out[m] = j
            m += 1
    return out[:m]


@njit(cache=True)
def filter_states(mx, sm, p, r, state, usage, dc, shifted, steady):
    """Filter the labels of the states of one layer.

    Parameters
    ----------
    mx, sm, r : numpy.ndarray
        ``(n,)`` float64: bottleneck, fill and synchronisation of every label.
    p : numpy.ndarray
        ``(n,)`` int64: stages placed (capped).
    state : numpy.ndarray
        ``(n,)`` int64: the label's state, an index into ``usage``'s rows.
    usage : numpy.ndarray
        ``(states, groups)`` int64: devices in use per group of the state's datacenter
        (rows padded with zeros to the most groups of any datacenter).
    dc : numpy.ndarray
        ``(states,)`` int64: each state's datacenter.
    shifted : bool
        Apply the shifted dominance (data parallelism) after the plain one.
    steady : int
        ``M - 1``.

    Returns
    -------
    keep : numpy.ndarray
        int64 indices of the kept labels, by ``(state, mx, sm)``.
    starts : numpy.ndarray
        ``(states + 1,)`` int64: state ``s``'s labels are ``keep[starts[s]:starts[s+1]]``.
    kill : numpy.ndarray
        Per kept label (in ``keep``'s order), the position in its state's list of the
        first later label dominating it at an equal bottleneck, else the list's length.
    lts : numpy.ndarray
        Per kept label, its ``T`` as a complete plan (``sm + (M - 1) mx``).
    """
    n_states = usage.shape[0]
    keep, starts = _kept(mx, sm, p, r, state, usage, dc, shifted, steady)
    m = len(keep)
    kill = np.empty(m, dtype=np.int64)
    lts = np.empty(m, dtype=np.float64)
    for s in range(n_states):
        lo, hi = starts[s], starts[s + 1]
        for a in range(lo, hi):
            j = keep[a]
            lts[a] = _time(sm[j], mx[j], steady, 0.0)
            kill[a] = _killer(keep, a, lo, hi, sm, p, r) if shifted else hi - lo
    return keep, starts, kill, lts


@njit(cache=True)
def _killer(keep, a, lo, hi, sm, p, r):
    """Where the killer of kept label ``keep[a]`` sits among its state's rows
    ``lo..hi``: the first later one no worse once both are lifted to one bottleneck (no
    larger ``p``, ``sm`` with the excess ``r`` no larger); ``hi - lo`` if none."""
    j = keep[a]
    for b in range(a + 1, hi):
        i = keep[b]
        extra = r[i] - r[j] if r[i] > r[j] else 0.0
        if p[i] <= p[j] and sm[i] + extra <= sm[j]:
            return b - lo
    return hi - lo


@njit(cache=True)
def _kept(mx, sm, p, r, state, usage, dc, shifted, steady):
    """:func:`filter_states`' kept labels ``keep`` (by ``(state, mx, sm)``) and each
    state's first position in it, ``starts``."""
    n_states = usage.shape[0]
    order, bounds = _by_state(state, n_states)
    # within each state: Pareto (and shifted) filter
    within = np.empty(len(order), dtype=np.int64)
    buf = np.empty(len(order), dtype=np.int64)
    w = 0
    for s in range(n_states):
        kept = _pareto_group(order[bounds[s]:bounds[s + 1]], mx, sm, p, r, shifted, steady,
                             buf)
        within[w:w + len(kept)] = kept
        w += len(kept)
    within = within[:w]
    # across states of one datacenter: a label of a state with no more devices in use of
    # any group and no larger criteria dominates (rows by (dc, mx, sm, p, r, devices))
    alive = _across(within, mx, sm, p, r, state, usage, dc)
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
    return keep, starts


@njit(cache=True)
def union_front(X, shifted, steady):
    """The labels of several states of one datacenter and layer that no other of them
    dominates (the rules within one state: plain, then ``shifted``), as rows of
    :func:`filter_layer` with their killers within this list: what a stage into an
    earlier datacenter needs of them (its image and every completion after it do not
    depend on the state's devices in use, ``docs/dp.md``).

    Parameters
    ----------
    X : numpy.ndarray
        ``(n, 6)`` rows of :func:`filter_layer` (the states' labels one after another).
    shifted : bool
        Apply the shifted dominance after the plain one.
    steady : int
        ``M - 1``.

    Returns
    -------
    rows : numpy.ndarray
        ``(m, 6)``: the kept rows by ``(mx, sm)``, column 5 their killer in this list.
    kept : numpy.ndarray
        int64: the row of ``X`` each came from.
    """
    n = X.shape[0]
    mx = X[:, 0].copy()
    sm = X[:, 1].copy()
    r = X[:, 3].copy()
    p = np.empty(n, dtype=np.int64)
    for i in range(n):
        p[i] = int(X[i, 2])
    kept = _pareto_group(np.arange(n), mx, sm, p, r, shifted, steady,
                         np.empty(n, dtype=np.int64))
    m = len(kept)
    rows = np.empty((m, 6))
    for a in range(m):
        j = kept[a]
        rows[a, :5] = X[j, :5]
        rows[a, 5] = m
        if not shifted:
            continue
        for b in range(a + 1, m):  # its killer, as filter_states finds it
            i = kept[b]
            extra = r[i] - r[j] if r[i] > r[j] else 0.0
            if p[i] <= p[j] and sm[i] + extra <= sm[j]:
                rows[a, 5] = b
                break
    return rows, kept


@njit(cache=True)
def _layer_states(I, usage_all):
    """The states of a layer's images (column 3 of ``I``) numbered by first appearance:
    ``(owner, ids, usage)``, ``owner[e]`` the number of image ``e``'s state, ``ids`` the
    states by number and ``usage`` their rows of ``usage_all``."""
    n = I.shape[0]
    local = np.full(usage_all.shape[0], -1, dtype=np.int64)
    seen = np.empty(n, dtype=np.int64)
    owner = np.empty(n, dtype=np.int64)
    n_states = 0
    for e in range(n):
        g = I[e, 3]
        if local[g] < 0:
            local[g] = n_states
            seen[n_states] = g
            n_states += 1
        owner[e] = local[g]
    ids = seen[:n_states].copy()
    usage = np.empty((n_states, usage_all.shape[1]), dtype=np.int64)
    for s in range(n_states):
        usage[s] = usage_all[ids[s]]
    return owner, ids, usage


@njit(cache=True)
def filter_layer(F, I, usage_all, dc_all, shifted, steady):
    """:func:`filter_states` on the images filed for one layer (:func:`take_layer`).

    Parameters
    ----------
    F, I : numpy.ndarray
        ``(n, 3)`` float64 ``(mx, sm, r)`` and ``(n, 5)`` int64
        ``(p, label, pair, state, meta)`` per image; ``state`` a global state id.
    usage_all, dc_all : numpy.ndarray
        Per global state id: devices in use per group (padded) and datacenter.
    shifted : bool
        Apply the shifted dominance.
    steady : int
        ``M - 1``.

    Returns
    -------
    ids : numpy.ndarray
        The global ids of the layer's states with a label kept, in order.
    starts : numpy.ndarray
        State ``ids[s]``'s labels are rows ``starts[s]:starts[s+1]``.
    labels : numpy.ndarray
        ``(m, 6)`` float64, a row per kept label: ``mx, sm, p, r``, its ``T`` as a
        complete plan and its killer (the rows :func:`advance` takes).
    parents : numpy.ndarray
        ``(m, 3)`` int64: ``meta, label, pair`` (the extension that made it, the label
        it extended, its stage's pair).
    """
    owner, ids, usage = _layer_states(I, usage_all)
    n_states = len(ids)
    dc = np.empty(n_states, dtype=np.int64)
    for s in range(n_states):
        dc[s] = dc_all[ids[s]]
    mx = F[:, 0].copy()
    sm = F[:, 1].copy()
    r = F[:, 2].copy()
    p = I[:, 0].copy()
    keep, starts, kill, lts = filter_states(mx, sm, p, r, owner, usage, dc, shifted, steady)
    m = len(keep)
    labels = np.empty((m, 6))
    parents = np.empty((m, 3), dtype=np.int64)
    for a in range(m):
        e = keep[a]
        labels[a, 0] = mx[e]
        labels[a, 1] = sm[e]
        labels[a, 2] = p[e]
        labels[a, 3] = r[e]
        labels[a, 4] = lts[a]
        labels[a, 5] = kill[a]
        parents[a, 0] = I[e, 4]
        parents[a, 1] = I[e, 1]
        parents[a, 2] = I[e, 2]
    return ids, starts, labels, parents


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
        ``(k, 9)`` rows for :func:`extend`: the columns of ``table``, then the prefix's
        optimistic bottleneck ``pm`` and fill ``ps``.
    """
    low_u, low_sm, low_r = lows
    n = table.shape[0]
    out = np.empty((n, 9))
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
        out[k, :7] = table[i]
        out[k, 7] = pm
        out[k, 8] = ps
        k += 1
    return out[:k]


@njit(cache=True)
def _dominating_states(within, state, usage, dc):
    """For :func:`_across`: each state's first slot among the rows ``within``
    (``start``, by state), and per state the other states of its datacenter with rows
    and no more devices in use of any group (``doms[dstart[s]:dstart[s + 1]]``)."""
    n_states = usage.shape[0]
    start = np.zeros(n_states + 1, dtype=np.int64)
    for a in range(len(within)):
        start[state[within[a]] + 1] += 1
    present = np.empty(n_states, dtype=np.int64)
    n_present = 0
    for s in range(n_states):
        if start[s + 1] > 0:
            present[n_present] = s
            n_present += 1
        start[s + 1] += start[s]
    dstart = np.zeros(n_states + 1, dtype=np.int64)
    doms = np.empty(16, dtype=np.int64)
    nd = 0
    for s in range(n_states):
        dstart[s] = nd
        if start[s + 1] == start[s]:
            continue
        for c in range(n_present):
            t = present[c]
            if t == s or dc[t] != dc[s]:
                continue
            fewer = True
            for g in range(usage.shape[1]):
                if usage[t, g] > usage[s, g]:
                    fewer = False
                    break
            if fewer:
                if nd == len(doms):
                    doms = np.concatenate((doms, np.empty(nd, dtype=np.int64)))
                doms[nd] = t
                nd += 1
    dstart[n_states] = nd
    return start, doms[:nd], dstart


@njit(cache=True)
def _across(within, mx, sm, p, r, state, usage, dc):
    """Which of the labels ``within`` (each kept within its state) no label of another
    state of the same datacenter dominates: one with no more devices in use of any
    group and no larger criteria. Rows go by ``(mx, sm, p, r, devices in all)``, so a
    dominator comes first; a row dominated by an earlier one is dominated by an earlier
    kept one (transitivity), so only kept rows are compared, and only those of the
    states that may dominate the row's (:func:`_dominating_states`; their least fill
    first)."""
    w = len(within)
    alive = np.ones(w, dtype=np.bool_)
    if w < 2:
        return alive
    used = np.zeros(usage.shape[0], dtype=np.int64)
    for s in range(usage.shape[0]):
        used[s] = usage[s].sum()
    keyed = np.empty(w, dtype=np.int64)
    for a in range(w):
        keyed[a] = used[state[within[a]]]
    o = np.argsort(keyed, kind="mergesort")
    o = o[np.argsort(r[within[o]], kind="mergesort")]
    o = o[np.argsort(p[within[o]], kind="mergesort")]
    o = o[np.argsort(sm[within[o]], kind="mergesort")]
    o = o[np.argsort(mx[within[o]], kind="mergesort")]
    # per state: the states of its datacenter with no more devices in use of any group
    # (those whose labels may dominate its own), and its rows kept so far side by side
    start, doms, dstart = _dominating_states(within, state, usage, dc)
    ksm = np.empty(w)
    kp = np.empty(w)
    kr = np.empty(w)
    kn = np.zeros(len(start) - 1, dtype=np.int64)
    least = np.full(len(start) - 1, np.inf)
    for a in range(w):
        i = within[o[a]]
        si = state[i]
        x1, x2, x3 = sm[i], float(p[i]), r[i]
        dead = False
        for d in range(dstart[si], dstart[si + 1]):
            sj = doms[d]
            if least[sj] > x1:
                continue
            if _any_below(ksm, kp, kr, start[sj], start[sj] + kn[sj], x1, x2, x3):
                dead = True
                break
        if dead:
            alive[o[a]] = False
            continue
        q = start[si] + kn[si]
        ksm[q], kp[q], kr[q] = x1, x2, x3
        kn[si] += 1
        if x1 < least[si]:
            least[si] = x1
    return alive


@njit(cache=True)
def extend(X, rows, targets, U, Q, upper, steady, p_cap, need_at, slack, use_kill, meta,
           af, ai, blocks, links):
    """Put each stage option of ``rows`` before every label of one state.

    Parameters
    ----------
    X : numpy.ndarray
        The state's labels, rows of :func:`filter_layer` (by bottleneck).
    rows : numpy.ndarray
        ``(n_rows, 9)`` float64 rows of :func:`survivors`: start ``a``, ``C``, in-flight
        limit, width, ``R``, pair, width slot, and the optimistic prefix bottleneck
        ``pm`` and fill ``ps`` of ``[0, a)``.
    targets : numpy.ndarray
        int64 per width slot: the state (an id of the caller's) a stage of that width
        leads to.
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
    meta : int
        The caller's id of this extension (source state and group), stored per image.
    af, ai, blocks, links : numpy.ndarray
        The image arena of :func:`new_arena`, with room for every image (the caller
        checks): the images are appended to their layer's blocks.

    Returns
    -------
    tuple
        ``(upper, row, label)``: the bound after complete plans (stages at layer 0)
        lowered it, and the best one's row and label (``-1`` if none).
    """
    mx = X[:, 0]
    sm = X[:, 1]
    r = X[:, 3]
    n = X.shape[0]
    n_rows = rows.shape[0]
    best_row = -1
    best_label = -1
    for j in range(n_rows):
        a = int(rows[j, 0])
        c = rows[j, 1]
        in_flight = rows[j, 2]
        rj = rows[j, 4]
        pair = int(rows[j, 5])
        target = targets[int(rows[j, 6])]
        pm = rows[j, 7]
        ps = rows[j, 8]
        cu = c if c >= U else U
        h = cu if cu >= pm else pm
        # labels lifted to one bottleneck by the stage: those a later one of them kills
        # need no extension (labels.killers)
        lift = _count_at_most(mx, cu) if use_kill else 0
        base = c + Q + ps
        thr_lo = upper - _time(base, h, steady, 0.0) + upper * slack
        thr_hi = upper - base + upper * slack
        for i in range(n):
            if i < lift and X[i, 5] < lift:
                continue
            p_i = int(X[i, 2])
            if need_at[p_i] > in_flight:
                continue
            nr = r[i] if r[i] >= rj else rj
            if mx[i] <= h:
                if sm[i] + nr >= thr_lo:
                    continue
            elif X[i, 4] + nr >= thr_hi:
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
            e = _slot(a, blocks, links)
            af[e, 0] = nmx
            af[e, 1] = nsm
            af[e, 2] = nr
            ai[e, 0] = p_i + 1 if p_i < p_cap else p_cap
            ai[e, 1] = i
            ai[e, 2] = pair
            ai[e, 3] = target
            ai[e, 4] = meta
    return upper, best_row, best_label


@njit(cache=True)
def _count_at_most(x, v):
    """How many entries of the sorted ``x`` are at most ``v`` (a bisection)."""
    lo, hi = 0, len(x)
    while lo < hi:
        mid = (lo + hi) // 2
        if x[mid] <= v:
            lo = mid + 1
        else:
            hi = mid
    return lo


@njit(cache=True)
def advance(X, table, targets, prefix, curve_x, floors_need, floors_gain, move, U, Q, upper,
            meta, consts, af, ai, blocks, links):
    """One move from Python: :func:`survivors` of ``table`` before a state's labels
    ``X``, then :func:`extend` with them (few arguments, scalar results: a call costs
    microseconds, and a large run makes millions).

    Parameters
    ----------
    X : numpy.ndarray
        The state's labels (rows of :func:`filter_layer`).
    table, targets, curve_x, floors_need, floors_gain : numpy.ndarray
        As :func:`survivors` and :func:`extend` take them.
    prefix : numpy.ndarray
        ``(3, L + 1)``: :func:`survivors`' ``pre_max``, ``pre_sum`` and ``flop``.
    move : numpy.ndarray
        ``step, use_fill, base, rate_g, use_floors, free`` of :func:`survivors`.
    U, Q, upper : float
        The boundary's occupancy and traversal, and the live bound.
    meta : int
        The extension's id.
    consts : numpy.ndarray
        int64 ``steady, p_cap, use_kill`` then ``need_at``.
    af, ai, blocks, links : numpy.ndarray
        The arena (:func:`new_arena`).

    Returns
    -------
    tuple
        ``(upper, pair, label, short)``: the bound, the best complete plan's pair and
        label (``-1`` if none), and ``short``: 0, or the blocks the arena lacks for this
        move's images (nothing was done: grow it, :func:`grown`, and call again).
    """
    steady = consts[0]
    lows = (X[0, 0] if X[0, 0] >= U else U, X[:, 1].min(), X[:, 3].min())
    rows = survivors(table, prefix[0], prefix[1], prefix[2], curve_x, move[0], move[1] > 0,
                     move[2], move[3], floors_need, floors_gain, move[4] > 0, move[5], lows,
                     Q, steady, upper)
    if rows.shape[0] == 0:
        return upper, -1, -1, 0
    size = links.shape[0] - 3
    room = links[size + 2] + blocks.shape[0] - links[size + 1]
    need = (rows.shape[0] * X.shape[0]) // BLOCK + rows.shape[0] + 1
    if need > room:
        return upper, -1, -1, need - room
    upper, row, label = extend(X, rows, targets, U, Q, upper, steady, consts[1], consts[3:],
                               SLACK, consts[2] > 0, meta, af, ai, blocks, links)
    pair = int(rows[row, 5]) if row >= 0 else -1
    return upper, pair, label, 0


@njit(cache=True)
def _slot(a, blocks, links):
    """The arena row of a new image of layer ``a``: the next in its last block, or the
    first of a new block (from the free list, else never used); the caller has made
    sure there is room."""
    size = links.shape[0] - 3
    layers = size // 2
    blk = links[layers + a]
    if blk < 0 or blocks[blk, 1] == BLOCK:
        if links[size] >= 0:
            nb = links[size]
            links[size] = blocks[nb, 0]
            links[size + 2] -= 1
        else:
            nb = links[size + 1]
            links[size + 1] += 1
        blocks[nb, 0] = -1
        blocks[nb, 1] = 0
        if blk < 0:
            links[a] = nb
        else:
            blocks[blk, 0] = nb
        links[layers + a] = nb
        blk = nb
    e = blk * BLOCK + blocks[blk, 1]
    blocks[blk, 1] += 1
    return e


@njit(cache=True)
def seed(a, state, af, ai, blocks, links):
    """File the empty plan's label (all zero, no parent) in ``state`` at layer ``a``."""
    e = _slot(a, blocks, links)
    af[e] = 0.0
    ai[e] = 0
    ai[e, 3] = state
    ai[e, 4] = -1


@njit(cache=True)
def take_layer(b, af, ai, blocks, links):
    """The images of layer ``b`` as contiguous ``(F, I)`` arrays; its blocks freed."""
    size = links.shape[0] - 3
    layers = size // 2
    n = 0
    blk = links[b]
    while blk >= 0:
        n += blocks[blk, 1]
        blk = blocks[blk, 0]
    F = np.empty((n, 3))
    I = np.empty((n, 5), dtype=np.int64)
    e = 0
    blk = links[b]
    while blk >= 0:
        k = blocks[blk, 1]
        F[e:e + k] = af[blk * BLOCK:blk * BLOCK + k]
        I[e:e + k] = ai[blk * BLOCK:blk * BLOCK + k]
        e += k
        after = blocks[blk, 0]
        blocks[blk, 0] = links[size]
        links[size] = blk
        links[size + 2] += 1
        blk = after
    links[b] = -1
    links[layers + b] = -1
    return F, I


def warm() -> None:
    """Load every kernel in this process (from numba's disk cache, or compile it), with
    the argument types :mod:`.dp` passes: forked children then share the loaded code
    instead of each loading it (:mod:`.dp_parallel`)."""
    i64 = np.int64
    arena = new_arena(1, blocks=1)
    seed(1, 0, *arena)
    F, I = take_layer(1, *arena)
    _ids, _starts, labels, _parents = filter_layer(F, I, np.zeros((1, 1), dtype=i64),
                                                   np.zeros(1, dtype=i64), True, 1)
    union_front(labels, True, 1)
    advance(labels, np.zeros((1, 7)), np.zeros(1, dtype=i64), np.zeros((3, 2)), np.zeros(2),
            np.zeros((1, 2)), np.zeros((1, 2)), np.zeros(6), 0.0, 0.0, np.inf, 0,
            np.array([1, 1, 1, 0, 0], dtype=i64), *arena)
    # the chain floors' (dp.ChainCapacity): the tables, a prefix's floor, the crossings
    ranges = sorted_ranges(np.ones((1, 2, 2)), np.ones((1, 2, 2), dtype=i64), np.ones((2, 2)), 1)
    A = held_on_grid(*ranges, np.ones(1, dtype=i64), np.ones(1))
    full, free = position_knapsack(A, np.ones(1, dtype=i64), 1, 1)
    held = chain_held(full[None], np.zeros(1, dtype=i64), np.zeros(1, dtype=i64), 1)
    chain_floor(held[0], np.ascontiguousarray(free[:, :, :, None]), np.zeros(1, dtype=i64),
                np.ones(1, dtype=i64), 0, np.ones(2), np.ones(1), True)
    position_floors(held[0], np.ascontiguousarray(free[:, :, :, None]), np.zeros(1, dtype=i64),
                    np.ones(1, dtype=i64), np.ones(2), np.ones(1), np.empty((1, 2)))
    crossing_gain(np.zeros(1), 0.0, np.zeros(2), 1, np.zeros(2), 1.0, np.zeros(2))


@njit(cache=True)
def sorted_ranges(C, N, flop, need):
    """A group's stage options by ``C``, for :func:`held_on_grid`: per pair ``c``, the
    first ``count[c]`` entries of the rows of ``cc`` (``C``), ``ff`` (FLOP) and ``nn``
    (in-flight limit) are its layer ranges with a finite ``C`` that fit ``need``
    microbatches, by ``C``."""
    P, L1 = C.shape[0], C.shape[1]
    m_all = L1 * (L1 - 1) // 2
    cc = np.empty((P, m_all))
    ff = np.empty((P, m_all))
    nn = np.empty((P, m_all), dtype=np.int64)
    count = np.zeros(P, dtype=np.int64)
    tc = np.empty(m_all)
    tf = np.empty(m_all)
    tn = np.empty(m_all, dtype=np.int64)
    for c in range(P):
        m = 0
        for i in range(L1):
            for j in range(i + 1, L1):
                if np.isfinite(C[c, i, j]) and N[c, i, j] >= need:
                    tc[m], tf[m], tn[m] = C[c, i, j], flop[i, j], N[c, i, j]
                    m += 1
        order = np.argsort(tc[:m], kind="mergesort")
        for r in range(m):
            cc[c, r], ff[c, r], nn[c, r] = tc[order[r]], tf[order[r]], tn[order[r]]
        count[c] = m
    return cc, ff, nn, count


@njit(cache=True)
def held_on_grid(cc, ff, nn, count, needs, grid):
    """``out[q, i, c]``: the most FLOP one stage with pair ``c`` holds with ``C <=
    grid[i]`` and an in-flight limit of at least ``needs[q]`` (0 if none), from the
    ranges of :func:`sorted_ranges` (``needs`` and ``grid`` ascending)."""
    P = cc.shape[0]
    nq, ng = len(needs), len(grid)
    out = np.zeros((nq, ng, P))
    best = np.zeros(nq)
    for c in range(P):
        best[:] = 0.0
        g = 0
        for r in range(count[c]):
            while g < ng and grid[g] < cc[c, r]:
                out[:, g, c] = best
                g += 1
            if g == ng:
                break
            for q in range(nq):
                if nn[c, r] < needs[q]:
                    break
                if ff[c, r] > best[q]:
                    best[q] = ff[c, r]
        while g < ng:
            out[:, g, c] = best
            g += 1
    return out


@njit(cache=True)
def position_knapsack(A, widths, count, S):
    """What a group's devices hold by position (``docs/dp.md``, "The chain floor").

    ``A[q, i, c]`` is the most one stage with pair ``c`` holds at position ``q`` (0-based,
    the last position standing for every later one) under the ``i``-th bottleneck. The
    ``j``-th stage of the group (from the end of the pipeline) sits at a position at least
    ``q + j`` when the group's first stage may sit at ``q``: the knapsack gives each stage
    the position of its rank.

    Returns
    -------
    full : numpy.ndarray
        ``[q, i, s]``: the most FLOP ``count`` devices hold with exactly ``s`` stages
        (``s = S``: ``S`` or more), ``-inf`` where no choice has ``s`` stages.
    free : numpy.ndarray
        ``[q, i, n]``: the most FLOP ``n`` devices hold, with any number of stages.
    """
    nq, ng, P = A.shape
    full = np.empty((nq, ng, S + 1))
    free = np.empty((nq, ng, count + 1))
    best = np.empty((count + 1, S + 1))
    least = widths.min() if P else 1
    for q in range(nq):
        for i in range(ng):
            best[:, :] = -np.inf
            best[0, 0] = 0.0
            for n in range(1, count + 1):
                best[n, :] = best[n - 1, :]
                for c in range(P):
                    w = widths[c]
                    if w > n:
                        continue
                    # n - w devices hold at most (n - w) // least stages
                    for s in range(min(S, (n - w) // least) + 1):
                        v = best[n - w, s]
                        if v == -np.inf:
                            continue
                        val = v + A[min(q + s, nq - 1), i, c]
                        t = min(s + 1, S)
                        if val > best[n, t]:
                            best[n, t] = val
            full[q, i, :] = best[count, :]
            for n in range(count + 1):
                free[q, i, n] = best[n].max()
    return full, free


@njit(cache=True)
def chain_held(full, kind_of, group_dc, K):
    """``F[k, q, i]``: the most FLOP the devices of DCs ``0..k-1`` hold under the ``i``-th
    bottleneck when their stages sit at position ``q`` (0-based) or later, from each
    group's :func:`position_knapsack` table ``full[kind_of[g]]``: a DC's stages come
    before those of every later DC in the pipeline, so at later positions (the last
    position standing for every later one)."""
    nq, ng, S1 = full.shape[1], full.shape[2], full.shape[3]
    F = np.zeros((K + 1, nq, ng))
    V = np.empty(S1)
    W = np.empty(S1)
    for k in range(K):
        for q in range(nq):
            for i in range(ng):
                V[:] = -np.inf
                V[0] = 0.0
                for g in range(len(group_dc)):
                    if group_dc[g] != k:
                        continue
                    W[:] = -np.inf
                    for s1 in range(S1):
                        if V[s1] == -np.inf:
                            continue
                        for s2 in range(S1):
                            x = full[kind_of[g], q, i, s2]
                            if x == -np.inf:
                                continue
                            t = min(s1 + s2, S1 - 1)
                            if V[s1] + x > W[t]:
                                W[t] = V[s1] + x
                    V[:] = W
                best = -np.inf
                for s in range(S1):
                    if V[s] != -np.inf:
                        val = V[s] + F[k, min(q + s, nq - 1), i]
                        if val > best:
                            best = val
                F[k + 1, q, i] = best
    return F


@njit(cache=True)
def crossing_gain(before, local, flop, k0, stay, cap, cross_q):
    """Per prefix end ``a``: what the fill of ``[0, a)`` gains from the links it must
    cross (``dp._Search._needed_curve``): the fewest DCs whose devices hold its FLOP
    under the cap (each DC's most, ``before`` for those before ``k0``, ``local`` for the
    devices free on ``k0``), less one and at most ``k0``, at least one where ``k0``'s free
    devices cannot hold it (``stay > cap``), times the least traversal ``cross_q[a]``; 0 at
    ``a = 0`` and for no crossing."""
    held = np.empty(len(before) + 1)
    held[:len(before)] = before
    held[len(before)] = local
    held = np.cumsum(np.sort(held)[::-1])
    gain = np.zeros(len(flop))
    for a in range(1, len(flop)):
        c = min(np.searchsorted(held, flop[a]), k0)
        if c == 0 and stay[a] > cap:
            c = 1
        if c > 0:
            gain[a] = c * cross_q[a]
    return gain


@njit(cache=True)
def _held_by(held, free, kinds, counts, q, before, hold):
    """Write into ``hold`` what the devices of :func:`chain_floor` hold per point of the
    grid, their stages at position ``q`` or later."""
    hold[:] = 0.0
    for g in range(len(kinds)):
        n = min(max(counts[g], 0), free.shape[2] - 1)
        for i in range(len(hold)):
            hold[i] += free[q, i, n, kinds[g]]
    if before:
        for i in range(len(hold)):
            hold[i] += held[q, i]


@njit(cache=True)
def _floors_of(hold, flop, grid, out):
    """Write into ``out`` per prefix FLOP the largest point of ``grid`` under which
    ``hold`` falls short of it, 0 if none."""
    for a in range(len(flop)):
        j = np.searchsorted(hold, flop[a])
        out[a] = grid[j - 1] if j > 0 else 0.0


@njit(cache=True)
def chain_floor(held, free, kinds, counts, q, flop, grid, before):
    """Per prefix FLOP in ``flop`` (slack applied): the largest point of ``grid`` under
    which the devices cannot hold it, 0 if none (``dp.ChainCapacity.prefix_floors``);
    and what they hold per point. The devices: with ``before``, the DCs before (their
    :func:`chain_held` row ``held[q]``), and per group of the DC ``counts`` free devices
    of kind ``kinds`` (``free[q, point, n, kind]``, :func:`position_knapsack`'s), their
    stages at position ``q`` or later."""
    hold = np.empty(len(grid))
    _held_by(held, free, kinds, counts, q, before, hold)
    out = np.empty(len(flop))
    _floors_of(hold, flop, grid, out)
    return out, hold


@njit(cache=True)
def position_floors(held, free, kinds, counts, flop, grid, out):
    """:func:`chain_floor`'s floors (the DCs before counted) at every position ``q`` the
    rows of ``out`` hold, written into row ``q`` (``dp.ChainCapacity.position_floors``:
    one call where a call per position boxed two new arrays each)."""
    hold = np.empty(len(grid))
    for q in range(out.shape[0]):
        _held_by(held, free, kinds, counts, q, True, hold)
        _floors_of(hold, flop, grid, out[q])


# ----------------------------------------------------------------- the CDynP agents' DP
# (:class:`chainpipe.solvers.cdynp.local.LocalDP`): its labels filtered by the same
# rules (:func:`_kept`), in the order of :mod:`.labels`' filters, and its stages put
# before them by its own bound tests (the images filed in an arena of :func:`new_arena`)


@njit(cache=True)
def _lex_less(mx, sm, p, r, i, j):
    """Whether label ``i`` comes before ``j`` in the order ``(mx, sm, p, r)``."""
    if mx[i] != mx[j]:
        return mx[i] < mx[j]
    if sm[i] != sm[j]:
        return sm[i] < sm[j]
    if p[i] != p[j]:
        return p[i] < p[j]
    return r[i] < r[j]


@njit(cache=True)
def local_layer(F, I, usage_all, shifted, steady, across):
    """The labels of one layer of a DC agent's DP filtered as
    :meth:`chainpipe.solvers.cdynp.local.LocalDP` filters them: per state the Pareto set
    in ``(mx, sm, p, r)`` (of equal labels the first), under ``shifted`` then the shifted
    rule, and with ``across`` the rule across states (one datacenter); each state's labels
    by ``(mx, sm, p, r)`` (as :func:`chainpipe.solvers.labels.pareto4` orders them), with
    their killers (:func:`chainpipe.solvers.labels.killers`).

    Parameters
    ----------
    F, I : numpy.ndarray
        ``(n, 3)`` float64 ``(mx, sm, r)`` and ``(n, 5)`` int64 ``(p, label, pair, state,
        meta)`` per label, in the order they were made; ``state`` a global state id.
    usage_all : numpy.ndarray
        ``(states, groups)`` int64: devices in use per group, per global state id.
    shifted : bool
        Apply the shifted dominance after the plain one.
    steady : int
        ``M - 1``.
    across : bool
        Apply the rule across states.

    Returns
    -------
    ids : numpy.ndarray
        The global ids of the states with a label kept, in the order of their first label.
    starts : numpy.ndarray
        State ``ids[s]``'s labels are rows ``starts[s]:starts[s+1]``.
    X : numpy.ndarray
        ``(m, 4)`` float64 rows ``mx, sm, p, r`` of the kept labels.
    parents : numpy.ndarray
        ``(m, 3)`` int64 ``meta, label, pair`` of each.
    kill : numpy.ndarray
        int64 per kept label: the position in its state's rows of its killer, else the
        state's label count.
    """
    owner, ids, usage = _layer_states(I, usage_all)
    n_states = len(ids)
    dc = np.zeros(n_states, dtype=np.int64) if across else np.arange(n_states)
    mx, sm, r, p = F[:, 0].copy(), F[:, 1].copy(), F[:, 2].copy(), I[:, 0].copy()
    keep, starts = _kept(mx, sm, p, r, owner, usage, dc, shifted, steady)
    m = len(keep)
    X = np.empty((m, 4))
    parents = np.empty((m, 3), dtype=np.int64)
    kill = np.empty(m, dtype=np.int64)
    for s in range(n_states):
        lo, hi = starts[s], starts[s + 1]
        for a in range(lo + 1, hi):  # nearly sorted already (by mx, sm): insertion sort
            j = keep[a]
            b = a
            while b > lo and _lex_less(mx, sm, p, r, j, keep[b - 1]):
                keep[b] = keep[b - 1]
                b -= 1
            keep[b] = j
        for a in range(lo, hi):
            j = keep[a]
            X[a, 0], X[a, 1], X[a, 2], X[a, 3] = mx[j], sm[j], p[j], r[j]
            parents[a, 0], parents[a, 1], parents[a, 2] = I[j, 4], I[j, 1], I[j, 2]
            kill[a] = _killer(keep, a, lo, hi, sm, p, r)
    return ids, starts, X, parents, kill


@njit(cache=True)
def local_terms(stages, pre_sum, pre_max, flop, avail, steady):
    """Per stage ``(a, C, max in flight, R)`` of a DC agent's candidate run: ``(a, C, max
    in flight, R, h, T-term with h, C + prefix sum, M C as T-term alone)``, ``h`` the
    larger of ``C`` and the prefix's bottleneck ``pre_max[a]``, raised (``flop`` not
    empty) to ``flop[a] / avail``
    (:meth:`chainpipe.solvers.cdynp.local.LocalDP._extend`)."""
    k = stages.shape[0]
    out = np.empty((k, 8))
    for t in range(k):
        a = int(stages[t, 0])
        ca = stages[t, 1]
        pm = pre_max[a]
        if len(flop) and flop[a] > 0:
            f = flop[a] / avail if avail > 0 else np.inf
            pm = f if f > pm else pm
        h = ca if ca >= pm else pm
        out[t, :4] = stages[t]
        out[t, 4] = h
        out[t, 5] = _time(ca + pre_sum[a], h, steady, 0.0)
        out[t, 6] = ca + pre_sum[a]
        out[t, 7] = _time(ca, ca, steady, 0.0)
    return out


@njit(cache=True)
def local_extend(X, kill, u, runs, stages, targets, metas, move, need_at, pre, caps, af, ai,
                 blocks, links):
    """Put every candidate run before the labels of one state of a DC agent's DP
    (:meth:`chainpipe.solvers.cdynp.local.LocalDP._extend`): per run its terms
    (:func:`local_terms`, the prefix's bottleneck raised by the devices the state leaves
    free when ``caps`` has rows), then :func:`_prepend`.

    Parameters
    ----------
    X, kill : numpy.ndarray
        The state's labels and killers (:func:`local_layer`).
    u : numpy.ndarray
        int64 ``(G,)``: the state's devices in use per group.
    runs : numpy.ndarray
        int64 ``(n, 4)``: per run its group, width, pair and end row in ``stages`` (it
        starts where the previous run ends).
    stages : numpy.ndarray
        float64 ``(k, 4)`` rows ``(a, C, max in flight, R)`` of the runs, one after another.
    targets : numpy.ndarray
        int64 per run: the state its images go to, ``-1`` to skip the run.
    metas : numpy.ndarray
        int64 per group: the extension id stored with its images.
    move : numpy.ndarray
        float64 ``U, Q, limit`` (the boundary after the stage, the widened bound), then
        ``M - 1``, the stage cap and ``A`` (the upstream FLOP/s of ``spread``).
    need_at : numpy.ndarray
        int64: the in-flight count a stage needs before ``p`` stages.
    pre : numpy.ndarray
        ``(3, L + 1)``: the prefix's sum and bottleneck terms, and its FLOP.
    caps : numpy.ndarray
        ``(G, 3)`` float64 ``(rate, count, most)`` per group, or no rows (no spread).
    af, ai, blocks, links : numpy.ndarray
        The arena (:func:`new_arena`).

    Returns
    -------
    tuple
        ``(cut, short)``: whether the bound cut an image, and 0 or the blocks the arena
        lacks (nothing was done: grow it, :func:`grown`, and call again).
    """
    n = X.shape[0]
    size = links.shape[0] - 3
    room = links[size + 2] + blocks.shape[0] - links[size + 1]
    need = 0
    lo = 0
    for q in range(runs.shape[0]):
        if targets[q] >= 0:
            k = runs[q, 3] - lo
            need += (n * k) // BLOCK + k + 1
        lo = runs[q, 3]
    if need > room:
        return False, need - room
    G = len(u)
    spread = caps.shape[0] > 0
    own_free = np.zeros(G)
    s_free = 0.0
    if spread:  # FLOP/s of the devices upstream and of own free ones
        acc = 0.0
        for g in range(G):
            own_free[g] = caps[g, 0] * min(caps[g, 1] - u[g], caps[g, 2])
            acc += own_free[g]
        s_free = move[5] + acc
    flop = pre[2] if spread else pre[2, :0]
    steady, p_cap = int(move[3]), int(move[4])
    cut = False
    lo = 0
    for q in range(runs.shape[0]):
        g, w, hi = runs[q, 0], runs[q, 1], runs[q, 3]
        if targets[q] >= 0:
            avail = 0.0
            if spread:  # the new label's own stages take w more devices of g
                avail = s_free - own_free[g] + caps[g, 0] * min(caps[g, 1] - u[g] - w,
                                                                caps[g, 2])
            run = local_terms(stages[lo:hi], pre[0], pre[1], flop, avail, steady)
            if _prepend(X, kill, run, move[0], move[1], move[2], runs[q, 2], targets[q],
                        metas[g], p_cap, need_at, steady, af, ai, blocks, links):
                cut = True
        lo = hi
    return cut, 0


@njit(cache=True)
def _prepend(X, kill, run, U, Q, limit, pair, target, meta, p_cap, need_at, steady, af, ai,
             blocks, links):
    """Put the stages of one candidate run (rows of :func:`local_terms`, ``a``
    descending) before every label of a state (rows of :func:`local_layer`), filing the
    images ``(mx, sm, r)``, ``(p, label, pair, target, meta)`` in the arena (the caller
    made room), by the bound tests of
    :meth:`chainpipe.solvers.cdynp.local.LocalDP._extend` (``U``, ``Q``: the boundary
    after the stage; ``limit``: the widened bound). Returns whether the bound cut an
    image."""
    n, k = X.shape[0], run.shape[0]
    cut = False
    for i in range(n):
        fi = X[kill[i], 0] if kill[i] < n else np.inf
        if U >= fi:
            continue  # every image is dominated by its killer's
        bn, sm, p_i, s = X[i, 0], X[i, 1], int(X[i, 2]), X[i, 3]
        need_i = need_at[p_i]
        nr = p_i + 1 if p_i < p_cap else p_cap
        bu = bn if bn >= U else U
        smq = sm + Q
        lt = _time(smq, bu, steady, 0.0)
        for t in range(k):
            ca, ra = run[t, 1], run[t, 3]
            # along the run C and R grow and memory shrinks: stop at the first stage that
            # fails either, or whose C flattens this label
            if need_i > run[t, 2] or ca >= fi:
                break
            ns = s if s >= ra else ra
            # over the bound with the prefix: skip (not monotone in a); over it without:
            # stop (later stages cost more)
            if (smq + run[t, 5] if bu <= run[t, 4] else lt + run[t, 6]) + ns > limit:
                cut = True
                if (lt + ca if ca <= bu else smq + run[t, 7]) + ns > limit:
                    break
                continue
            e = _slot(int(run[t, 0]), blocks, links)
            af[e, 0] = bu if bu >= ca else ca
            af[e, 1] = sm + ca + Q
            af[e, 2] = ns
            ai[e, 0], ai[e, 1], ai[e, 2], ai[e, 3], ai[e, 4] = nr, i, pair, target, meta
    return cut
