"""The compiled core of the version-3 pipeline search (:mod:`.dp_period`; ``docs/dp.md``,
"Version 3", "The compiled kernel").

A label of the search is five numbers ``x1, x2, sum, R, p`` (a row of ``S``) and, under
the 1F1B ``period``, the concave majorant of its window sums (a row of ``H``, its length
in ``HL``). Labels live in two stores:

- **pending**: what :func:`expand` makes, a stage prepended to a kept label, filed per
  layer in a linked list (``head[a]``, each entry's ``next``) as ``PF = [x1, x2, sum, R,
  c, Q]`` and ``PI = [p, parent, group, pair, state, next]``: the majorant is not stored,
  it follows from the parent's with ``c`` and ``Q`` (:func:`hulls`);
- **kept**: the labels of a layer no other one dominates (:func:`pareto` within a state,
  :func:`across` between states of one datacenter), with their majorants.

The rules are those of :mod:`.dp_period`'s Python functions (:func:`.dp_period.pareto`,
:func:`.dp_period.hull_prepend`, :func:`.dp_period.new_loops`), written once here for
arrays; the Python ones call these. The kernels are plain functions in numba's subset of
Python, registered with :data:`UNIT` and handed out at the end of the import
(:meth:`.label_aot.Unit.bind`): compiled ahead of time when ``python -m
chainpipe.solvers.label_aot`` has built them for this file as it is (numba not
imported), else numba's just-in-time kernels, compiled on first use and cached on disk.
"""

from __future__ import annotations

import numpy as np

from ..tables import fill_bound_at
from .label_aot import Unit

#: per kernel :mod:`.dp_period` calls, its arguments' types (:data:`.label_aot.ARGS`'
#: notation; ``tests/test_kernel_aot.py`` checks that the search passes exactly these)
ARGS = {
    "new_loops": ("f2", "i", "i", "f", "f"),
    "hull_prepend": ("f2", "i", "i", "f", "f", "f2", "i"),
    "pareto": ("f2", "f2", "i1", "i1", "f1", "f", "i", "f", "f", "b"),
    "across": ("f2", "f2", "i1", "b1", "i1", "f1", "i1", "i1", "i1", "f", "i", "f", "f", "b"),
    "expand": ("f2", "f2", "i1", "i", "i", "f2", "f1", "i1", "f2", "f2", "f3", "f1", "f1",
               "i1", "f2", "i2", "i1", "i", "i", ("f3", "f3", "f1")),
    "gather": ("i1", "i", "i2", "i"),
    "filter_layer": ("i1", "i", "f2", "i2", "f2", "f2", "i1", "i", "i", "b", "i", "f", "i",
                     "f", "f", "b", "i"),
    "keep_layer": ("i1", "i2", "f2", "f2", "i1", "b1", "i1", "i1", "i"),
    "prefix_floors": ("f1", "f1", "f1", "f", "f1", "f2", "f1", "i", "f1", "f1"),
    "curve_rows": ("f2", "f1", "f1", "i", "i", "f2", "f2"),
}
#: the kernels, compiled ahead of time into ``period_aot_<digest>`` (of this file, and of
#: ``tables.py``, whose :func:`.tables.fill_bound_at` :func:`prefix_floors` compiles)
UNIT = Unit("period", ARGS, ("solvers/period_kernel.py", "tables.py"))
kernel = UNIT.kernel
inline = UNIT.inline
inline(fill_bound_at)

#: a fall of the slopes past which the majorant scans stop (rounding never stops one)
FALL = 1 - 1e-9

#: ``mode`` of :func:`expand` and :func:`hulls`: no loops (classic, or 1F1B without the
#: period), the 1F1B period with its loops, GPipe's two phases
PLAIN, LOOPS, PHASES = 0, 1, 2
#: the runs :func:`lex_order` sorts by insertion before merging
RUN = 16


@inline
def new_loops(H, i, n, c, q):
    """The slowest loop a stage of time ``c`` and traversal ``q`` closes over the suffix
    whose majorant is ``H[i, :n]``: ``max_j (c + q + H[i, j]) / (j + 2)`` (unimodal: the
    scan stops at its first fall)."""
    best, cq = 0.0, c + q
    for j in range(n):
        loop = (cq + H[i, j]) / (j + 2)
        if loop >= best:
            best = loop
        elif loop < best * FALL:
            break
    return best


@inline
def hull_prepend(H, i, n, c, q, out, o):
    """Write into ``out[o]`` the majorant of ``H[i, :n]`` with a stage of time ``c`` and
    traversal ``q`` prepended (the chord from ``(1, c)`` to the point of largest slope,
    then the shifted old majorant); return its length, ``n + 1``."""
    best, j_star, cq = -np.inf, 0, c + q
    for j in range(n):
        slope = (cq + H[i, j] - c) / (j + 1)
        if slope >= best:
            best, j_star = slope, j + 1
        elif slope < best * FALL:
            break
    if j_star == 0:
        out[o, 0] = c
        return 1
    for k in range(j_star):
        out[o, k] = c + k * best
    for k in range(j_star - 1, n):
        out[o, k + 1] = cq + H[i, k]
    return n + 1


@inline
def curve_floor(curve, kid, a, pre, x, M1):
    """A floor under what the prefix ``[0, a)`` of state ``kid`` adds to ``T_p`` (its fill
    and the steady part) when the period is at least ``x``: ``pre + M1 x`` (``pre``: the
    fill bound of the free devices), or better the prefix curve's
    (:mod:`.prefix_curve`): with ``i0`` the first cap of ``grid`` at or above ``x``, a
    period in ``(grid[i - 1], grid[i]]`` costs at least ``CF[i] + M1 max(x, grid[i - 1])``,
    so the least of ``CF[i0] + M1 x`` and ``CS[i0 + 1]`` (``CS[i] = min over i' >= i of
    CF[i'] + M1 grid[i' - 1]``)."""
    CF, CS, grid = curve
    plain = pre + M1 * x
    J = len(grid)
    if J == 0 or a == 0 or x > grid[J - 1]:
        return plain
    lo, hi = 0, J - 1
    while lo < hi:
        mid = (lo + hi) // 2
        if grid[mid] >= x:
            hi = mid
        else:
            lo = mid + 1
    got = CF[kid, a, lo] + M1 * x
    if lo + 1 < J and CS[kid, a, lo + 1] < got:
        got = CS[kid, a, lo + 1]
    return max(plain, got)


@inline
def label_position(p, nq):
    """Where the chain floors of :func:`expand` are read for a label of ``p`` stages with
    a stage prepended: the prefix comes before those ``p + 1`` stages, so its own sit at
    (0-based) position ``p + 1`` or later (the last of the ``nq`` positions told apart
    stands for every later one)."""
    return min(p + 1, nq - 1)


@kernel
def prefix_floors(pre_sum, top, rates, cap, flop, walked, grid, caps, fill, out):
    """A state's floors per prefix end ``a`` (the prefix of ``flop[a]`` FLOP still to
    place): into ``fill[a]`` the larger of ``pre_sum[a]`` and the fill bound
    (:func:`.tables.fill_bound_at`) of free devices of ``rates`` (positive, falling) under
    the period cap ``cap`` (none where ``cap <= 0``); into ``out[a]`` the larger of
    ``top[a]`` and the largest of the first ``caps`` caps of ``grid`` under which the
    prefix cannot fit (the prefix curve's least fills ``walked[a, i]``, ``inf`` where it
    cannot; the last cap where it fits under none, nothing where it fits under the first
    or ``caps`` is 0). ``flop`` does not fall, so the fill bound's breakpoint of each
    ``a`` is found by one forward scan."""
    n = len(rates)
    x = np.empty(n + 1)
    x[0] = 0.0
    for i in range(n):
        x[i + 1] = x[i] + cap * rates[i]
    j = 0
    for a in range(len(flop)):
        f = pre_sum[a]
        if cap > 0:
            while j < n and x[j + 1] <= flop[a]:
                j += 1
            f = max(f, fill_bound_at(flop[a], x, cap, j))
        fill[a] = f
        t = top[a]
        if caps > 0 and a > 0:
            i = 0
            while i < caps and not np.isfinite(walked[a, i]):
                i += 1
            if i > 0 and grid[i - 1] > t:
                t = grid[i - 1]
        out[a] = t


@kernel
def curve_rows(walked, fill, grid, M1, caps, CF, CS):
    """A state's rows of the prefix curve (:func:`curve_floor`): per prefix end ``a`` and
    cap ``i`` of ``grid``, ``CF[a, i]`` the least fill the walks found (``walked[a, i]``
    for the first ``caps`` caps; past them, a last cap ``inf`` with the fill bound
    ``fill[a]``), and ``CS[a, i]`` the least of ``CF[a, i'] + M1 grid[i' - 1]`` over ``i' >=
    max(i, 1)``."""
    J = len(grid)
    for a in range(CF.shape[0]):
        for i in range(J):
            CF[a, i] = walked[a, i] if i < caps else fill[a]
        run = np.inf
        for i in range(J - 1, 0, -1):
            term = CF[a, i] + M1 * grid[i - 1]
            if term < run:
                run = term
            CS[a, i] = run
        if J > 0:
            CS[a, 0] = run


@kernel
def expand(S, H, HL, s0, s1, rows, widths, kids, F, T, CT, need_at, fs, ints, PF, PI,
           head, n, start, curve):
    """Prepend the candidate stages ``rows`` (one group, one end ``b``, by increasing ``C``:
    ``[a, C, f, b, n, w, R, pair]``) to the kept labels ``s0..s1`` of one state, filing each
    new label the bounds let through in the pending store.

    ``fs = [U, Q, free, sync_lim, cap_lim, M_p - 1, upper, tau]`` (``upper``, ``tau`` with
    their slack), ``ints = [group, p_cap, mode, all_loops, complete]``; per width of the
    rows, the next state (``kids``) and its prefix floors of fill and period (``F``, ``T``,
    by prefix end), ``CT[state, q, a]`` the period's floor of prefix ``[0, a)`` of a state
    with its stages at (0-based) position ``q`` or later (read per label at
    :func:`label_position`; ``CT.shape[1] == 0``: none), and ``curve = (CF, CS, grid)``
    the prefix curve's floors per state (:func:`curve_floor`; a grid of length 0 where
    there is none). New labels take entries by :func:`_take_slot`. Returns ``(n,
    resume)``: the entries used so far, and ``-1`` when done or the ``row * (s1 - s0) +
    label`` to resume from once the store has grown."""
    U, Q, free, sync_lim, cap_lim, M1, upper, tau = (fs[0], fs[1], fs[2], fs[3], fs[4],
                                                    fs[5], fs[6], fs[7])
    g, p_cap, mode, all_loops, complete = ints[0], ints[1], ints[2], ints[3], ints[4]
    nlab = s1 - s0
    if nlab <= 0:
        return n, -1
    (low_per, low_sm, low_r), nq = _least_values(S, s0, s1), CT.shape[1]
    for j in range(start // nlab, rows.shape[0]):
        c = rows[j, 1]
        if c > cap_lim:
            break
        w, rr = rows[j, 5], rows[j, 6]
        if w > free or rr > sync_lim:
            continue
        a = int(rows[j, 0])
        if a == 0 and not complete:
            continue
        wi = 0
        while widths[wi] != w:
            wi += 1
        pre = F[wi, a] if a > 0 else 0.0
        top = T[wi, a]
        floor = max(c, U)
        if top > floor:
            floor = top
        kid = kids[wi]
        least = low_sm + c + Q + curve_floor(curve, kid, a, pre, max(low_per, floor), M1)
        if least + max(low_r, rr) >= upper or least > tau:
            continue
        fixed = c + Q
        f, bk, mem = rows[j, 2], rows[j, 3], rows[j, 4]
        first = s0 + (start % nlab if j == start // nlab else 0)
        for i in range(first, s1):
            x1, x2, sm, r = S[i, 0], S[i, 1], S[i, 2], S[i, 3]
            p = int(S[i, 4])
            if need_at[p] > mem:
                continue
            lab_floor, lab_top = floor, top
            if nq > 0:  # the prefix's stages sit at positions p + 1 and on
                held = CT[kid, label_position(p, nq), a]
                lab_floor, lab_top = max(lab_floor, held), max(lab_top, held)
            least = sm + fixed + curve_floor(curve, kid, a, pre, max(x1 + x2, lab_floor), M1)
            if least + max(r, rr) >= upper or least > tau:
                continue
            if mode == PHASES:
                nx1, nx2 = max(max(x1, f), U), max(max(x2, bk), U)
            else:
                nx1, nx2 = max(max(x1, c), U), 0.0
                if mode == LOOPS and (p < p_cap or all_loops):
                    nx1 = max(nx1, new_loops(H, i, HL[i], c, Q))
            nsm, nr = sm + c + Q, max(r, rr)
            least = nsm + curve_floor(curve, kid, a, pre, max(nx1 + nx2, lab_top), M1)
            if least + nr >= upper or least > tau:
                continue
            slot, n = _take_slot(head, PI, n, PF.shape[0])
            if slot < 0:
                return n, j * nlab + (i - s0)
            PF[slot, 0], PF[slot, 1], PF[slot, 2] = nx1, nx2, nsm
            PF[slot, 3], PF[slot, 4], PF[slot, 5] = nr, c, Q
            PI[slot, 0] = p + 1 if p < p_cap else p_cap
            PI[slot, 1], PI[slot, 2], PI[slot, 3], PI[slot, 4] = i, g, int(rows[j, 7]), kid
            PI[slot, 5] = head[a]
            head[a] = slot
    return n, -1


@kernel
def _least_values(S, s0, s1):
    """The least period ``x1 + x2``, fill and ``R`` of the labels ``s0..s1``."""
    low_per, low_sm, low_r = np.inf, np.inf, np.inf
    for i in range(s0, s1):
        low_per = min(low_per, S[i, 0] + S[i, 1])
        low_sm = min(low_sm, S[i, 2])
        low_r = min(low_r, S[i, 3])
    return low_per, low_sm, low_r


@kernel
def _take_slot(head, PI, n, cap):
    """The pending entry a new label takes, and the entries used after: a released one
    (the list ``head[-1]``), else entry ``n`` if ``n < cap``, else ``-1`` (the store is
    full)."""
    released = len(head) - 1
    slot = head[released]
    if slot >= 0:
        head[released] = PI[slot, 5]
        return slot, n
    if n < cap:
        return n, n + 1
    return -1, n


@kernel
def gather(head, a, PI, since):
    """The pending entries of layer ``a`` filed after entry ``since`` (``-1``: all), in
    the order they were filed."""
    count, e = 0, head[a]
    while e != since:
        count += 1
        e = PI[e, 5]
    out = np.empty(count, dtype=np.int64)
    e = head[a]
    for k in range(count - 1, -1, -1):
        out[k] = e
        e = PI[e, 5]
    return out


@kernel
def release(head, a, PI):
    """Hand the pending entries of layer ``a`` (filtered, their survivors kept) to the
    free list ``head[-1]``, whose entries :func:`expand` fills before new ones."""
    e = head[a]
    if e < 0:
        return
    while PI[e, 5] >= 0:
        e = PI[e, 5]
    PI[e, 5] = head[len(head) - 1]
    head[len(head) - 1] = head[a]
    head[a] = -1


@kernel
def hulls(ids, PF, PI, H, HL, width, mode, all_loops, p_cap):
    """The majorants of pending entries ``ids`` (their parents' with the stage
    prepended, where loops still count; else none), padded with ``-inf``."""
    n = len(ids)
    Hx = np.full((n, width), -np.inf)
    HLx = np.zeros(n, dtype=np.int64)
    for k in range(n):
        e = ids[k]
        if mode == LOOPS and (PI[e, 0] < p_cap or all_loops):
            src = PI[e, 1]
            HLx[k] = hull_prepend(H, src, HL[src], PF[e, 4], PF[e, 5], Hx, k)
    return Hx, HLx


@inline
def _after(a, b, state, period, fill):
    """Whether entry ``a`` comes after ``b`` by ``(state, period, fill)``."""
    if state[a] != state[b]:
        return state[a] > state[b]
    if period[a] != period[b]:
        return period[a] > period[b]
    return fill[a] > fill[b]


@kernel
def lex_order(state, period, fill):
    """The stable order of the entries by ``(state, period, fill)``, what three stable
    sorts (by fill, then period, then state) give, in one merge sort (runs of
    :data:`RUN` by insertion first): the three sorts were 6 % of a search of several
    pipelines (a fresh ``-03``-like instance, seed 6)."""
    n = len(state)
    o, tmp = np.arange(n), np.empty(n, dtype=np.int64)
    for lo in range(0, n, RUN):
        for i in range(lo + 1, min(lo + RUN, n)):
            x, j = o[i], i - 1
            while j >= lo and _after(o[j], x, state, period, fill):
                o[j + 1] = o[j]
                j -= 1
            o[j + 1] = x
    width = RUN
    while width < n:
        for lo in range(0, n, 2 * width):
            mid, hi = min(lo + width, n), min(lo + 2 * width, n)
            i, j = lo, mid
            for k in range(lo, hi):  # the right run's entry only when strictly before
                if j < hi and (i >= mid or _after(o[i], o[j], state, period, fill)):
                    tmp[k] = o[j]
                    j += 1
                else:
                    tmp[k] = o[i]
                    i += 1
        o, tmp = tmp, o
        width *= 2
    return o


@kernel
def collect(head, a, PF, PI):
    """The pending labels of layer ``a`` sorted by ``(state, x1 + x2, fill)``: ``(ids, S,
    starts, states)``, ``S`` their rows ``[x1, x2, sum, R, p]``, state ``states[s]``'s
    labels being rows ``starts[s]..starts[s + 1]``."""
    ids = gather(head, a, PI, -1)
    n = len(ids)
    state, period, fill = np.empty(n, dtype=np.int64), np.empty(n), np.empty(n)
    for k in range(n):
        e = ids[k]
        state[k], period[k], fill[k] = PI[e, 4], PF[e, 0] + PF[e, 1], PF[e, 2]
    ids = ids[lex_order(state, period, fill)]
    S = np.empty((n, 5))
    starts = np.empty(n + 1, dtype=np.int64)
    states = np.empty(n, dtype=np.int64)
    m = 0
    for k in range(n):
        e = ids[k]
        S[k, 0], S[k, 1], S[k, 2], S[k, 3], S[k, 4] = PF[e, 0], PF[e, 1], PF[e, 2], PF[e, 3], PI[e, 0]
        if k == 0 or PI[e, 4] != PI[ids[k - 1], 4]:
            starts[m] = k
            states[m] = PI[e, 4]
            m += 1
    starts[m] = n
    return ids, S, starts[:m + 1], states[:m]


@kernel
def by_raised_period(ids, S, starts, floors):
    """Sort, in place, each state's labels (``ids`` and their rows ``S``,
    ``starts[s]..starts[s + 1]``, sorted by period then fill) by their period raised to
    the state's floor ``floors[s]``, then fill: under the shifted rule
    (:func:`_sweep`) a label whose period is below the floor can dominate one of a
    lower period, so the filter meets it first. Sorted by period, the labels at or below
    the floor are a first run, which all raise to it: only that run is sorted again, by
    fill (stably: what sorting the whole by fill, then by raised period gave). States
    with no label below their floor keep their order."""
    for s in range(len(starts) - 1):
        lo, hi = starts[s], starts[s + 1]
        if hi - lo < 2 or S[lo, 0] + S[lo, 1] >= floors[s]:
            continue
        c = lo + 1
        while c < hi and S[c, 0] + S[c, 1] <= floors[s]:
            c += 1
        key = np.empty(c - lo)
        for k in range(lo, c):
            key[k - lo] = S[k, 2]
        o = np.argsort(key, kind="mergesort") + lo
        ids[lo:c] = ids[o]
        S[lo:c] = S[o]


@kernel
def layer_pareto(ids, S, starts, floors, PF, PI, H, HL, width, mode, all_loops, p_cap,
                 p_free, steady, upper, tau, shift, chunk):
    """:func:`pareto` over the states of one layer, by chunks of whole states of about
    ``chunk`` labels: the majorants (:func:`hulls`) are made a chunk at a time and kept
    for the survivors only. Returns ``alive`` and the survivors' majorants, in order."""
    n, nseg = len(ids), len(starts) - 1
    alive = np.zeros(n, dtype=np.bool_)
    Ho = np.empty((max(16, n // 8), width))
    HLo = np.empty(len(Ho), dtype=np.int64)
    m, seg = 0, 0
    while seg < nseg:
        end = seg + 1
        while end < nseg and starts[end + 1] - starts[seg] <= chunk:
            end += 1
        lo, hi = starts[seg], starts[end]
        Hc, HLc = hulls(ids[lo:hi], PF, PI, H, HL, width, mode, all_loops, p_cap)
        got = pareto(S[lo:hi], Hc, HLc, starts[seg:end + 1] - lo, floors[seg:end], p_free,
                     steady, upper, tau, shift)
        for k in range(hi - lo):
            if got[k]:
                alive[lo + k] = True
                if m == len(Ho):
                    Ho2 = np.empty((2 * m, width))
                    Ho2[:m] = Ho
                    HL2 = np.empty(2 * m, dtype=np.int64)
                    HL2[:m] = HLo
                    Ho, HLo = Ho2, HL2
                Ho[m], HLo[m] = Hc[k], HLc[k]
                m += 1
        seg = end
    return alive, Ho[:m], HLo[:m]


@kernel
def filter_layer(head, b, PF, PI, floor_tab, H, HL, width, mode, all_loops, p_cap, p_free,
                 steady, upper, tau, shift, chunk):
    """The pending labels of layer ``b`` (:func:`collect`) that the Pareto rule keeps
    within each state (:func:`layer_pareto`; with ``shift`` each state's labels first by
    :func:`by_raised_period`), with each state's floor from ``floor_tab[state, b]``:
    ``(ids, S, starts, states, floors, H, HL)`` of the survivors, ``starts`` their
    states' ranges (states left with none keep an empty one)."""
    ids, S, starts, states = collect(head, b, PF, PI)
    floors = np.empty(len(states))
    for s in range(len(states)):
        floors[s] = floor_tab[states[s], b]
    if len(ids) == 0:
        return ids, S, starts, states, floors, H[:0], HL[:0]
    if shift:
        by_raised_period(ids, S, starts, floors)
    alive, Hn, HLn = layer_pareto(ids, S, starts, floors, PF, PI, H, HL, width, mode,
                                  all_loops, p_cap, p_free, steady, upper, tau, shift, chunk)
    m = 0
    for s in range(len(states)):
        lo, hi = starts[s], starts[s + 1]
        starts[s] = m
        for k in range(lo, hi):
            if alive[k]:
                ids[m], S[m] = ids[k], S[k]
                m += 1
    starts[len(states)] = m
    return ids[:m], S[:m], starts, states, floors, Hn, HLn


@kernel
def keep_layer(ids, PI, S, H, HL, alive, starts, head, b):
    """:func:`survivors`, then the layer's pending entries released (:func:`release`)."""
    got = survivors(ids, PI, S, H, HL, alive, starts)
    release(head, b, PI)
    return got


@kernel
def survivors(ids, PI, S, H, HL, alive, starts):
    """The live labels' rows, majorants and parents ``[kept label, group, pair]``, and
    how many each state keeps."""
    n = 0
    for k in range(len(alive)):
        if alive[k]:
            n += 1
    S2, H2 = np.empty((n, 5)), np.empty((n, H.shape[1]))
    HL2, par = np.empty(n, dtype=np.int64), np.empty((n, 3), dtype=np.int64)
    counts = np.zeros(len(starts) - 1, dtype=np.int64)
    m = 0
    for s in range(len(starts) - 1):
        for k in range(starts[s], starts[s + 1]):
            if alive[k]:
                S2[m], H2[m], HL2[m] = S[k], H[k], HL[k]
                par[m, 0], par[m, 1], par[m, 2] = PI[ids[k], 1], PI[ids[k], 2], PI[ids[k], 3]
                counts[s] += 1
                m += 1
    return S2, H2, HL2, par, counts


@inline
def _reach(x1, sm, r, floor, upper, tau, steady):
    """``lambda0`` (a floor under the completed period) and ``X_max`` (the most fill a
    completion within the bounds has) of a label of ``x1``, fill ``sm`` and sync ``r``
    (:meth:`.dp_period.Rule.reach`)."""
    lam = max(x1, floor)
    room = min(upper - r, tau) - sm - steady * lam
    if np.isnan(room):
        room = np.inf
    return lam, room


@inline
def _allow(pa, a0, a1, a2, a3, pb, b0, b1, b2, b3, lam, p_free, steady, shift):
    """The scalar part of the rule by which label ``a`` (``p``, ``x1``, ``x2``, fill,
    ``R``) is no worse than ``b`` for every completion that matters (``docs/dp.md``,
    "Version 3"): ``p``, fill, the two phase maxima and ``R``. Returns ``-1`` where it
    fails, else the slack per window :func:`_sweep` grants ``a``'s loops. With ``shift``
    (one period, not GPipe's two phases) ``a``'s period is measured above ``lam``, the
    floor under ``b``'s completed period, not above ``b``'s own. (Scalars only: a
    compiled call that takes arrays counts references to them, ``NRT_incref`` and
    ``NRT_decref``, twice an atomic operation per array and call.)"""
    if pa > pb or (pa != pb and pb >= p_free):
        return -1.0
    s1 = max(a0 - (lam if shift else b0), 0.0)
    extra = a2 + steady * (s1 + max(a1 - b1, 0.0)) + max(a3 - b3, 0.0)
    if not extra <= b2:
        return -1.0
    return s1 + (b2 - extra) / steady if steady else np.inf


@kernel
def pareto(S, H, HL, starts, floors, p_free, steady, upper, tau, shift):
    """Per segment ``starts[s]..starts[s + 1]`` (one state's labels, sorted), which labels
    no kept earlier one of the segment dominates (``upper``, ``tau`` with their slack):
    :func:`_sweep` within each state."""
    n = len(starts) - 1
    alive = np.zeros(S.shape[0], dtype=np.bool_)
    none = np.zeros(n + 1, dtype=np.int64)
    _sweep(S, H, HL, alive, starts, floors, np.arange(n), none, none[:0], p_free, steady,
           upper, tau, shift, True)
    return alive


@kernel
def across(S, H, HL, alive, starts, floors, order, rival_ptr, rivals, p_free, steady, upper,
           tau, shift):
    """Drop, in ``alive``, the labels of each state (in ``order``) that a live label of one
    of its ``rivals`` (states of the same datacenter using no more devices of any group,
    earlier in ``order``) dominates: :func:`_sweep` across states."""
    _sweep(S, H, HL, alive, starts, floors, order, rival_ptr, rivals, p_free, steady, upper,
           tau, shift, False)
    return alive


@kernel
def _sweep(S, H, HL, alive, starts, floors, order, rival_ptr, rivals, p_free, steady, upper,
           tau, shift, within):
    """The dominance filter, written once for :func:`pareto` (``within``: each label of
    a state against the state's labels kept before it, which it joins if none dominates
    it) and :func:`across` (each live label against the live labels of the state's
    ``rivals``). Label ``a`` dominates ``b`` when :func:`_allow` grants it a slack and
    none of ``a``'s windows ``i`` (its majorant ``H[a, i]``, a loop through ``i + 2``
    stages once a stage is prepended) exceeds by it both ``b``'s windows (``before[i]``,
    the best of ``H[b, j] - lam j`` over ``j <= i``) and the room ``b``'s completions
    have (:func:`_reach`). A dominator has no larger fill (every other term is a
    non-negative excess), so candidates (sorted by period) are scanned from the last back
    while their least fill (``least``: per kept position within, per label across: the
    live labels' running minimum) is no larger than ``b``'s; across states with ``sum_a
    + steady (per_a - per_b) <= sum_b`` too (``per = x1 + x2``), a bisection
    (:func:`_period_cut`). The loop hands no array to another function per pair: each
    such call cost two atomic reference counts per array (fresh ``-01``-like seed 9:
    21.9 to 16.7 CPU s without them)."""
    n, width = S.shape[0], H.shape[1]
    before = np.empty(max(width, 1))
    least = np.full(n, np.inf)
    cand = np.empty(n, dtype=np.int64) if within else np.arange(n)
    for x in range(len(order)):
        s, nk = order[x], 0
        for b in range(starts[s], starts[s + 1]):
            if not within and (rival_ptr[x] == rival_ptr[x + 1] or not alive[b]):
                continue
            lam, room = _reach(S[b, 0], S[b, 2], S[b, 3], floors[s], upper, tau, steady)
            nb, best = HL[b], -np.inf
            for i in range(nb):  # b's windows only: read past them, the last carried on
                v = H[b, i] - lam * i
                if v > best:
                    best = v
                before[i] = best
            last = before[nb - 1] if nb > 0 else -np.inf
            beaten = False
            for y in range(1 if within else rival_ptr[x + 1] - rival_ptr[x]):
                lo, hi = 0, nk
                if not within:
                    r = rivals[rival_ptr[x] + y]
                    lo, hi = starts[r], starts[r + 1]
                    if hi == lo or least[hi - 1] > S[b, 2]:
                        continue
                    if steady > 0:  # a dominator's period is below per_b + (sm_b - sm_a) / steady
                        per = lam if shift else S[b, 0] + S[b, 1]  # (per_b raised to the floor)
                        hi = _period_cut(S, lo, hi, per + (S[b, 2] - least[hi - 1]) / steady,
                                         floors[r] if shift else -np.inf)
                for k in range(hi - 1, lo - 1, -1):
                    if least[k] > S[b, 2]:
                        break
                    a = cand[k]
                    if not alive[a]:
                        continue
                    allow = _allow(S[a, 4], S[a, 0], S[a, 1], S[a, 2], S[a, 3], S[b, 4], S[b, 0],
                                   S[b, 1], S[b, 2], S[b, 3], lam, p_free, steady, shift)
                    beaten = not allow < 0
                    for i in range(HL[a] if beaten else 0):
                        slack = allow * (i + 2.0)
                        by_window = H[a, i] - lam * i - (before[i] if i < nb else last) - slack
                        if by_window > 0 and H[a, i] + room - lam * (i + 2.0) - slack > 0:
                            beaten = False
                            break
                    if beaten:
                        break
                if beaten:
                    break
            if within and not beaten:
                alive[b], cand[nk] = True, b
                least[nk] = S[b, 2] if nk == 0 or S[b, 2] < least[nk - 1] else least[nk - 1]
                nk += 1
            elif beaten:
                alive[b] = False
        if not within:
            _running_least(S, alive, starts[s], starts[s + 1], least)


@kernel
def _period_cut(S, lo, hi, top, floor):
    """The end of the labels ``lo..hi`` (sorted by period ``x1 + x2`` raised to ``floor``)
    with that period at most ``top`` (a bisection)."""
    while lo < hi:
        mid = (lo + hi) // 2
        if max(S[mid, 0] + S[mid, 1], floor) <= top:
            lo = mid + 1
        else:
            hi = mid
    return lo


@kernel
def _running_least(S, alive, lo, hi, least):
    """``least[i]``: the least fill of the live labels ``lo..i`` (``inf`` if none)."""
    m = np.inf
    for i in range(lo, hi):
        if alive[i] and S[i, 2] < m:
            m = S[i, 2]
        least[i] = m


UNIT.bind(globals())
