"""The layer loop of a DC agent's classic label DP, compiled (:meth:`.local.LocalDP._extend`).

One call of :func:`extend_layer` puts every candidate stage ending at a layer before the
labels of every state of that layer: per state it runs
:func:`~chainpipe.solvers.label_kernel.local_extend` (``dp``'s kernel module, the same
function the agent called once per state from Python before: the same tests, the same
arithmetic, the images filed in the same order), so the Python work per state (a call,
its argument checks and arrays) is gone. The states' targets and extension ids are
computed per layer in :meth:`.local.LocalDP._extend`.

This module imports numba (it is :mod:`.local_aot`'s just-in-time source, loaded only when
the unit is not built); :data:`.local_aot.UNIT` compiles :func:`extend_layer` ahead of time
with the label kernels it calls.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ..label_kernel import (  # noqa: F401 (the kernels .local calls, by these names)
    grown,
    local_extend,
    local_layer,
    new_arena,
    take_layer,
)

#: an empty slot of the states' hash table
EMPTY = -1


@njit(cache=True)
def _slot(table, code):
    """The slot of usage code ``code`` in the hash table ``table`` (rows ``code, id``; its
    length a power of two, open addressing): where it is, else the empty slot it goes to."""
    mask = len(table) - 1
    h = (code * 0x9E3779B1) & mask
    while table[h, 0] != EMPTY and table[h, 0] != code:
        h = (h + 1) & mask
    return h


@njit(cache=True)
def _state(code, table, usage, sizes, count, stride):
    """The global id of the state of usage code ``code`` (a new one, its usage row
    written, if none has it): ``(id, table, usage)``, the arrays grown (doubled) when full;
    ``sizes[0]``: the states so far."""
    h = _slot(table, code)
    if table[h, 0] == code:
        return table[h, 1], table, usage
    n = sizes[0]
    if 2 * (n + 1) > len(table):  # at most half full
        bigger = np.full((2 * len(table), 2), EMPTY, dtype=np.int64)
        for i in range(len(table)):
            if table[i, 0] != EMPTY:
                bigger[_slot(bigger, table[i, 0])] = table[i]
        table = bigger
        h = _slot(table, code)
    if n == len(usage):
        more = np.empty((2 * n, usage.shape[1]), dtype=np.int64)
        more[:n] = usage
        usage = more
    table[h, 0], table[h, 1] = code, n
    for g in range(usage.shape[1]):
        usage[n, g] = (code // stride[g]) % (count[g] + 1)
    sizes[0] = n + 1
    return n, table, usage


@njit(cache=True)
def extend_layer(X, kill, starts, ids, runs, stages, gw, gw_of, count, stride, table, usage,
                 meta, sizes, move, at, need_at, pre, caps, af, ai, blocks, links):
    """Every candidate run ending at layer ``x`` before the labels of the layer's states
    ``at[2], at[2] + 1, ...``, one after another
    (:func:`~chainpipe.solvers.label_kernel.local_extend` per state), until one finds the
    arena short; the states the images go to and the extensions' ids made on the way.

    Parameters
    ----------
    X, kill, starts, ids : numpy.ndarray
        The layer's labels, killers, each state's first row (one more than the states)
        and global id (:func:`~chainpipe.solvers.label_kernel.local_layer`); a state
        without rows is skipped.
    runs, stages : numpy.ndarray
        The candidate runs ending at ``x`` (as ``local_extend`` takes them).
    gw, gw_of : numpy.ndarray
        int64 ``(n, 2)``: the distinct ``(group, width)`` of the runs, groups ascending;
        per run, its row in ``gw``.
    count, stride : numpy.ndarray
        int64 per group: the devices a state may use, and the group's place value in a
        usage code (``sum u[g] * stride[g]``).
    table, usage, meta : numpy.ndarray
        int64: the states' hash table (rows ``code, id``, :data:`EMPTY` where free; code 0,
        the base labels' state, at slot 0 with id 0), each state's usage by global id, and
        per extension id ``(source, group)``: the store index of its source state's first
        label, or ``-1 - x`` for the base labels at ``x``.
    sizes : numpy.ndarray
        int64 ``[states, extensions]`` so far (updated).
    move : numpy.ndarray
        ``local_extend``'s ``move`` with the own boundary's ``U`` and ``Q`` first (a base
        label's images cross no own boundary: 0 for them).
    at : numpy.ndarray
        int64 ``[x, the store index of the layer's row 0, the state to begin with]``.
    need_at, pre, caps, af, ai, blocks, links
        As ``local_extend`` takes them.

    Returns
    -------
    tuple
        ``(cut, short, state, table, usage, meta)``: whether the bound cut an image; 0,
        or the blocks the arena lacks for state ``state``, which was left undone with
        those after it (grow the arena and call again from it); ``state`` is the state
        count when all were done; the three arrays, grown when they were full.
    """
    mv = move.copy()
    G = len(count)
    cut = False
    n = len(starts) - 1
    targets = np.empty(len(runs), dtype=np.int64)
    metas = np.empty(G, dtype=np.int64)
    u = np.empty(G, dtype=np.int64)
    for s in range(at[2], n):
        lo, hi = starts[s], starts[s + 1]
        if lo == hi:
            continue
        sid = ids[s]
        k, table, usage = _moves(sid, gw, gw_of, count, stride, table, usage, sizes, u,
                                 targets, metas)
        if sid != 0:
            mv[0], mv[1] = move[0], move[1]
        else:
            mv[0], mv[1] = 0.0, 0.0
        c, short = local_extend(X[lo:hi], kill[lo:hi], u, runs, stages, targets, metas, mv,
                                need_at, pre, caps, af, ai, blocks, links)
        if short:
            return cut, short, s, table, usage, meta
        cut = cut or c
        if sizes[1] + k > len(meta):
            more = np.empty((2 * (sizes[1] + k), 2), dtype=np.int64)
            more[:sizes[1]] = meta[:sizes[1]]
            meta = more
        for g in range(G):
            if metas[g] >= 0:
                meta[metas[g], 0] = at[1] + lo if sid != 0 else -1 - at[0]
                meta[metas[g], 1] = g
        sizes[1] += k
    return cut, 0, n, table, usage, meta


@njit(cache=True)
def _moves(sid, gw, gw_of, count, stride, table, usage, sizes, u, targets, metas):
    """For state ``sid`` (:func:`extend_layer`'s arguments): its usage in ``u``, per run
    the global id of the state its images go to in ``targets`` (``-1``: the run's width
    does not fit the free devices; new states made in the order of ``gw``), per group the
    id its extensions would get in ``metas`` (``-1``: none; ids from ``sizes[1]`` on, groups
    ascending). Returns ``(extensions, table, usage)``."""
    G = len(count)
    code = 0
    for g in range(G):
        u[g] = usage[sid, g]
        code += u[g] * stride[g]
    to = np.empty(len(gw), dtype=np.int64)
    for j in range(len(gw)):
        g, w = gw[j, 0], gw[j, 1]
        to[j] = -1
        if w <= count[g] - u[g]:
            got, table, usage = _state(code + w * stride[g], table, usage, sizes, count, stride)
            to[j] = got
    k = 0
    for g in range(G):
        metas[g] = -1
        for j in range(len(gw)):
            if gw[j, 0] == g and to[j] >= 0:
                metas[g] = sizes[1] + k
                k += 1
                break
    for q in range(len(gw_of)):
        targets[q] = to[gw_of[q]]
    return k, table, usage


@njit(cache=True)
def candidate_runs(ok, dominated, on, C, N, R, alone):
    """A group's candidate runs (:meth:`.local.LocalDP._direct_candidates`), arrays
    ``[pair, a, x]``: per pair ``c`` and end ``x`` on the grid (``on``), the starts ``a``
    from ``x - 1`` down while ``ok`` holds (the run ends at the first that fails), those on
    the grid and not ``dominated`` kept. Returns ``(rows, top, runs)``: per kept stage
    ``(a, C, N, R)`` and the largest ``alone`` from ``x - 1`` down to ``a`` (skipped starts
    included), and per run with a stage ``(c, x, first row, end row)``; pairs ascending,
    then ends, then ``a`` descending (the order of ``numpy.nonzero`` over ``[c, x, a]`` with
    ``a`` flipped)."""
    n_c, n_x = ok.shape[0], ok.shape[2]
    n, n_runs = 0, 0
    for c in range(n_c):
        for x in range(n_x):
            if not on[x]:
                continue
            m = 0
            for a in range(x - 1, -1, -1):
                if not ok[c, a, x]:
                    break
                if on[a] and not dominated[c, a, x]:
                    m += 1
            if m:
                n += m
                n_runs += 1
    rows = np.empty((n, 4))
    top = np.empty(n)
    runs = np.empty((n_runs, 4), dtype=np.int64)
    k, r = 0, 0
    for c in range(n_c):
        for x in range(n_x):
            if not on[x]:
                continue
            first, high = k, -np.inf
            for a in range(x - 1, -1, -1):
                if not ok[c, a, x]:
                    break
                if alone[c, a, x] > high:
                    high = alone[c, a, x]
                if on[a] and not dominated[c, a, x]:
                    rows[k, 0], rows[k, 1] = a, C[c, a, x]
                    rows[k, 2], rows[k, 3] = N[c, a, x], R[c, a, x]
                    top[k] = high
                    k += 1
            if k > first:
                runs[r, 0], runs[r, 1], runs[r, 2], runs[r, 3] = c, x, first, k
                r += 1
    return rows, top, runs


@njit(cache=True)
def dominance_at(ok, C, N, R, W, T1, B, M, build):
    """:func:`.local.dominance_by_count` on options flattened to ``[c, e]`` (``N`` as
    floats), and the dominance it gives at count ``M``: with ``build``, fill ``T1`` and
    ``B`` (zeros on entry); then return ``(M <= T1) | ((M > N) & B)`` (with ``N`` the limits
    ``T1`` and ``B`` were built at).

    Per option ``c`` with rivals (the others of no more devices ``W``), ``T1[c]`` is the
    largest over its rivals of ``thr`` where the rival is allowed, no worse in ``C`` and
    ``R`` and (fewer devices or listed first, or better in ``C`` or ``R``), else 0
    (``thr``: ``inf`` if its limit is no lower, else its limit); ``B[c]`` whether an
    allowed rival no worse in ``C`` and ``R`` has a higher limit. (Comparisons with
    ``nan`` are false, as numpy's.)"""
    P, E = ok.shape
    if build:
        for c in range(P):
            first = True
            for r in range(P):
                if r == c or W[r] > W[c]:
                    continue
                plain = W[r] < W[c] or r < c
                for e in range(E):
                    v = 0.0
                    if ok[r, e] and C[r, e] <= C[c, e] and R[r, e] <= R[c, e]:
                        if N[r, e] > N[c, e]:
                            B[c, e] = True
                        if plain or C[r, e] < C[c, e] or R[r, e] < R[c, e]:
                            v = np.inf if N[r, e] >= N[c, e] else N[r, e]
                    if first or v > T1[c, e]:
                        T1[c, e] = v
                first = False
    out = np.empty((P, E), dtype=np.bool_)
    for c in range(P):
        for e in range(E):
            out[c, e] = M <= T1[c, e] or (M > N[c, e] and B[c, e])
    return out
