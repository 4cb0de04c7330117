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
def _pareto_group(idx, mx, sm, p, r, shifted, steady, buf):
    """Of ``idx`` (one state's labels): those no other dominates (of equal ones the
    first), by ``(mx, sm)``, then with ``shifted`` those the shifted rule keeps.

    An online skyline: each label is compared with the kept ones (``buf``, scratch);
    if none dominates it, it drops those it dominates and is kept. No sort is needed
    and the kept set stays small (the labels of a state are mostly dominated)."""
    k = 0
    for a in range(len(idx)):
        i = idx[a]
        dominated = False
        for b in range(k):
            j = buf[b]
            if mx[j] <= mx[i] and sm[j] <= sm[i] and p[j] <= p[i] and r[j] <= r[i]:
                dominated = True
                break
        if dominated:
            continue
        m = 0
        for b in range(k):
            j = buf[b]
            if not (mx[i] <= mx[j] and sm[i] <= sm[j] and p[i] <= p[j] and r[i] <= r[j]):
                buf[m] = j
                m += 1
        buf[m] = i
        k = m + 1
    kept = buf[:k].copy()
    kept = kept[np.argsort(sm[kept])]
    kept = kept[np.argsort(mx[kept], kind="mergesort")]
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
def filter_layer(F, I, usage_all, dc_all, shifted, steady):
    """:func:`filter_states` on the images filed for one layer (:func:`extend`'s pools).

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
        State ``ids[s]``'s labels are ``starts[s]:starts[s+1]`` of the columns.
    columns : tuple
        ``(mx, sm, p, r, meta, label, pair, kill, lts)``: the kept labels, contiguous.
    """
    n = F.shape[0]
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
    dc = np.empty(n_states, dtype=np.int64)
    for s in range(n_states):
        usage[s] = usage_all[ids[s]]
        dc[s] = dc_all[ids[s]]
    mx = F[:, 0].copy()
    sm = F[:, 1].copy()
    r = F[:, 2].copy()
    p = I[:, 0].copy()
    keep, starts, kill, lts = filter_states(mx, sm, p, r, owner, usage, dc, shifted, steady)
    m = len(keep)
    meta = np.empty(m, dtype=np.int64)
    label = np.empty(m, dtype=np.int64)
    pair = np.empty(m, dtype=np.int64)
    for a in range(m):
        meta[a] = I[keep[a], 4]
        label[a] = I[keep[a], 1]
        pair[a] = I[keep[a], 2]
    return ids, starts, (mx[keep], sm[keep], p[keep], r[keep], meta, label, pair, kill, lts)


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
def _across(within, mx, sm, p, r, state, usage, dc):
    """Which of the labels ``within`` (each kept within its state) no label of another
    state of the same datacenter dominates: one with no more devices in use of any
    group and no larger criteria. Rows go by ``(dc, mx, sm, p, r, devices in all)``, so
    a dominator comes first; a row dominated by an earlier one is dominated by an
    earlier kept one (transitivity), so only kept rows are compared."""
    w = len(within)
    alive = np.ones(w, dtype=np.bool_)
    if w < 2:
        return alive
    used = np.zeros(usage.shape[0], dtype=np.int64)
    for s in range(usage.shape[0]):
        used[s] = usage[s].sum()
    keyed = np.empty(w, dtype=np.int64)
    home = np.empty(w, dtype=np.int64)
    for a in range(w):
        keyed[a] = used[state[within[a]]]
        home[a] = dc[state[within[a]]]
    o = np.argsort(keyed, kind="mergesort")
    o = o[np.argsort(r[within[o]], kind="mergesort")]
    o = o[np.argsort(p[within[o]], kind="mergesort")]
    o = o[np.argsort(sm[within[o]], kind="mergesort")]
    o = o[np.argsort(mx[within[o]], kind="mergesort")]
    o = o[np.argsort(home[o], kind="mergesort")]
    kept_rows = np.empty(w, dtype=np.int64)
    k = 0
    for a in range(w):
        if a > 0 and home[o[a]] != home[o[a - 1]]:
            k = 0  # a new datacenter: its states only compare among themselves
        i = within[o[a]]
        si = state[i]
        for b in range(k):
            j = within[kept_rows[b]]
            sj = state[j]
            if sj == si or sm[j] > sm[i] or p[j] > p[i] or r[j] > r[i]:
                continue  # same state: the filter within it has decided
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
    return alive


@njit(cache=True)
def extend(mx, sm, p, r, lts, kill, rows, targets, U, Q, upper, steady, p_cap, need_at,
           slack, use_kill, meta, af, ai, nxt, fill, head, tail, free):
    """Put each stage option of ``rows`` before every label of one state.

    Parameters
    ----------
    mx, sm, r, lts : numpy.ndarray
        The state's labels (sorted by bottleneck) and their assembled ``T``.
    p, kill : numpy.ndarray
        int64: stages placed, and the killers of :func:`filter_states`.
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
    af, ai, nxt, fill, head, tail, free : numpy.ndarray
        The image arena of :func:`new_arena`: the images are appended to their layer's
        blocks (``af``, ``ai``, ``nxt`` and ``fill`` are returned, grown if need be).

    Returns
    -------
    tuple
        ``(upper, row, label, af, ai, nxt, fill)``: the bound after complete plans
        (stages at layer 0) lowered it, the best one's row and label (``-1`` if none),
        and the arena's arrays.
    """
    n = len(mx)
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
            e, af, ai, nxt, fill = _slot(a, af, ai, nxt, fill, head, tail, free)
            af[e, 0] = nmx
            af[e, 1] = nsm
            af[e, 2] = nr
            ai[e, 0] = p[i] + 1 if p[i] < p_cap else p_cap
            ai[e, 1] = i
            ai[e, 2] = pair
            ai[e, 3] = target
            ai[e, 4] = meta
    return upper, best_row, best_label, af, ai, nxt, fill


#: images per block of the arena (:func:`new_arena`)
BLOCK = 256


@njit(cache=True)
def _slot(a, af, ai, nxt, fill, head, tail, free):
    """The arena row of a new image of layer ``a`` (a new block when its last is full:
    from the free list, else a new one, the arena grown if need be); returns it with
    the arena's arrays."""
    blk = tail[a]
    if blk < 0 or fill[blk] == BLOCK:
        if free[0] >= 0:
            nb = free[0]
            free[0] = nxt[nb]
        else:
            if free[1] == len(nxt):
                af, ai, nxt, fill = _grown_arena(af, ai, nxt, fill)
            nb = free[1]
            free[1] += 1
        nxt[nb] = -1
        fill[nb] = 0
        if blk < 0:
            head[a] = nb
        else:
            nxt[blk] = nb
        tail[a] = nb
        blk = nb
    e = blk * BLOCK + fill[blk]
    fill[blk] += 1
    return e, af, ai, nxt, fill


@njit(cache=True)
def seed(a, state, af, ai, nxt, fill, head, tail, free):
    """File the empty plan's label (all zero, no parent) in ``state`` at layer ``a``;
    returns the arena's arrays."""
    e, af, ai, nxt, fill = _slot(a, af, ai, nxt, fill, head, tail, free)
    af[e] = 0.0
    ai[e] = 0
    ai[e, 3] = state
    ai[e, 4] = -1
    return af, ai, nxt, fill


@njit(cache=True)
def _grown_arena(af, ai, nxt, fill):
    """The arena's arrays with twice the blocks, the used ones copied."""
    n = len(nxt)
    af2 = np.empty((2 * n * BLOCK, 3))
    ai2 = np.empty((2 * n * BLOCK, 5), dtype=np.int64)
    nxt2 = np.empty(2 * n, dtype=np.int64)
    fill2 = np.zeros(2 * n, dtype=np.int64)
    af2[:n * BLOCK] = af
    ai2[:n * BLOCK] = ai
    nxt2[:n] = nxt
    fill2[:n] = fill
    return af2, ai2, nxt2, fill2


@njit(cache=True)
def take_layer(b, af, ai, nxt, fill, head, tail, free):
    """The images of layer ``b`` as contiguous ``(F, I)`` arrays; its blocks freed."""
    n = 0
    blk = head[b]
    while blk >= 0:
        n += fill[blk]
        blk = nxt[blk]
    F = np.empty((n, 3))
    I = np.empty((n, 5), dtype=np.int64)
    e = 0
    blk = head[b]
    while blk >= 0:
        k = fill[blk]
        F[e:e + k] = af[blk * BLOCK:blk * BLOCK + k]
        I[e:e + k] = ai[blk * BLOCK:blk * BLOCK + k]
        e += k
        after = nxt[blk]
        nxt[blk] = free[0]
        free[0] = blk
        blk = after
    head[b] = -1
    tail[b] = -1
    return F, I


def new_arena(layers: int, blocks: int = 64) -> tuple:
    """An empty image arena for :func:`extend`: blocks of :data:`BLOCK` images, a chain
    of blocks per layer ``0..layers`` (``head``, ``tail``), and a free list.

    Plain arrays: ``(af, ai, nxt, fill, head, tail, free)``, ``free = [first free
    block, blocks ever used]``. (A numba typed list of arrays per layer was measured
    first: its methods compile in every process, 1.8 s.)
    """
    return (np.empty((blocks * BLOCK, 3)), np.empty((blocks * BLOCK, 5), dtype=np.int64),
            np.full(blocks, -1, dtype=np.int64), np.zeros(blocks, dtype=np.int64),
            np.full(layers + 1, -1, dtype=np.int64), np.full(layers + 1, -1, dtype=np.int64),
            np.array([-1, 0], dtype=np.int64))


def warm() -> None:
    """Load every kernel in this process (from numba's disk cache, or compile it), with
    the argument types :mod:`.dp` passes: forked children then share the loaded code
    instead of each loading it (:mod:`.dp_parallel`)."""
    i64 = np.int64
    arena = new_arena(1, blocks=1)
    arena = (*seed(1, 0, *arena), *arena[4:])
    F, I = take_layer(1, *arena)
    _ids, _starts, cols = filter_layer(F, I, np.zeros((1, 1), dtype=i64),
                                       np.zeros(1, dtype=i64), True, 1)
    mx, sm, p, r, _meta, _label, _pair, kill, lts = cols
    zero = np.zeros(2)
    rows = survivors(np.zeros((1, 7)), zero, zero, zero, zero, 0.0, True, 1.0, 1.0,
                     np.zeros((1, 2)), np.zeros((1, 2)), True, 1, (0.0, 0.0, 0.0), 0.0, 1,
                     np.inf)
    extend(mx, sm, p, r, lts, kill, rows, np.zeros(1, dtype=i64), 0.0, 0.0, np.inf, 1, 1,
           np.zeros(2, dtype=i64), 0.0, True, 0, *arena)
