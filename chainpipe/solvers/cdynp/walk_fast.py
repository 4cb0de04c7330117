"""One DC's part of the prefix-curve pass, compiled (:mod:`.curve`; ``docs/privacy.md``,
"The prefix-curve pass").

:func:`dc_walk` is ``dp``'s forward walk (:func:`chainpipe.solvers.prefix_kernel.forward`)
restricted to one DC's own devices, started from what the DCs before it pass on: per
prefix end ``a`` and excess bucket, the least fill of a prefix ``[0, a)`` on the DCs before
it that meets the cap ``lam``. It files the stages with ``dp``'s own kernels
(:func:`~chainpipe.solvers.prefix_kernel._stages`, ``_undominated``), so the two walks
agree rule for rule. :func:`dc_least`, which :class:`.curve.CurvePass` calls, walks the
same and returns only the minima the pass keeps (the reductions numpy made of ``F`` cost
0.45 of ``v3-large-01``'s 2.0 CPU s in the pass), its dominated entries found by
:func:`_kept` (``_undominated``'s tests without its divisions) and only at prefix ends
where something fits (measured: 18% of them), the stages that fit found once per prefix
end (:func:`_cells`) and only the rows of ``F`` filed into set and read
(``v3-large-03``'s walks as a solve makes them: 0.48 to 0.30 CPU s with sixteen buckets,
0.71 to 0.65 s with one); ``tests/test_cdynp_walk_least.py`` checks it against
:func:`dc_walk`.

The kernels are registered with :data:`UNIT` and handed out at the end of the import as
:mod:`.period_fast`'s are (:meth:`chainpipe.solvers.label_aot.Unit.bind`): compiled ahead
of time when built for this file and :mod:`..prefix_kernel` as they are, else numba's
just-in-time kernels (compiled on first use, about 4 CPU s, then cached on disk). The
ahead-of-time build lists them (:func:`chainpipe.solvers.label_aot.units`: ``cdynp_walk``,
about 6 s to build).
"""

from __future__ import annotations

import numpy as np

from ..label_aot import Unit
from ..prefix_kernel import SLACK, _file, _stages, _undominated  # noqa: F401 (called)

#: the kernels called from Python (:mod:`.curve`; ``benchmarks/cdynp_large_profile.py``),
#: their arguments' types (:data:`.label_aot.ARGS`' notation)
_WALK = ("f", "f2", "f1", "f1", "i2", "i2", "i", "i2", "i1", "f4", "b4", "i2", "i1", "f3",
         "f3", "i", "b")
ARGS = {"dc_walk": _WALK, "dc_least": _WALK}
#: the kernels, compiled ahead of time into ``cdynp_walk_aot_<digest>`` once a build lists it
UNIT = Unit("cdynp_walk", ARGS, ("solvers/cdynp/walk_fast.py", "solvers/prefix_kernel.py"))
kernel = UNIT.kernel


@kernel
def dc_walk(lam, E_in, U_in, Q_in, radix, stride, nV, dc_groups, ngr, C, ok, widths, npairs,
            U, Q, nb, windows):
    """``F[b, 0, v, q]``: the least fill of a prefix ``[0, b)`` whose last stage lies on
    this DC (usage ``v`` on it, excess bucket ``q``) under cap ``lam``; ``inf`` where none
    fits.

    ``E_in[a, q]``: the same for the DCs before this one (``inf``: none, or this is the
    first DC); ``U_in[a]``, ``Q_in[a]``: floors under the occupancy and traversal of the
    boundary at ``a`` into this DC (those of the chain link into it: a longer path's are no
    better); the tables ``radix .. Q`` of this DC alone, as
    :func:`chainpipe.solvers.prefix_curve._arrays` makes them. A plan may start on any DC.
    Without ``windows`` (``nb = 1``) only ``C`` and ``U`` are capped. The reference walk:
    ``dp``'s own :func:`~chainpipe.solvers.prefix_kernel._undominated` at every prefix
    end (:func:`dc_least` walks the same with :func:`_kept`)."""
    F = np.full((C.shape[3], 1, nV, nb), np.inf)
    _walk(F, lam, E_in, U_in, Q_in, radix, stride, nV, dc_groups, ngr, C, ok, widths,
          npairs, U, Q, nb, windows)
    return F


@kernel
def dc_least(lam, E_in, U_in, Q_in, radix, stride, nV, dc_groups, ngr, C, ok, widths,
             npairs, U, Q, nb, windows):
    """:func:`dc_walk`'s walk (the same arguments) read as :class:`.curve.CurvePass` keeps
    it: ``(here, own)``, ``here[b, v]`` the least of ``F[b, 0, v', q]`` over every bucket
    and every usage ``v' <= v`` (per group; :func:`chainpipe.solvers.prefix_curve._at_most`
    of ``F.min(axis=3)``), ``own[b, q]`` the least over the usages (``F[:, 0].min(axis=1)``):
    the same minima, so the same values to the bit. Walked by :func:`_walk_least`; only
    the rows of ``F`` it filed into are set and read (measured on ``v3-large-01``'s 242
    walks: 82% of the prefix ends hold nothing; ``v3-large-03``'s sixteen-bucket walks
    spent a third of their time setting, reducing and rereading the whole ``F``)."""
    L1 = C.shape[3]
    F = np.empty((L1, 1, nV, nb))
    ready = np.zeros(L1, dtype=np.bool_)  # the rows of F set (to inf, then filed into)
    lower = _lower(radix[0], stride[0], ngr[0], nV)
    _walk_least(F, ready, lam, E_in, U_in, Q_in, radix, stride, nV, dc_groups, ngr, C, ok,
                widths, npairs, U, Q, nb, windows, lower)
    n = 1  # the DC's usages (past them: inf, as at_most leaves them)
    for gi in range(ngr[0]):
        n *= radix[0, gi]
    here = np.full((L1, nV), np.inf)
    own = np.full((L1, nb), np.inf)
    for b in range(L1):
        if not ready[b]:
            continue
        for v in range(n):
            m = np.inf
            for q in range(nb):
                f = F[b, 0, v, q]
                if f < m:
                    m = f
                if f < own[b, q]:
                    own[b, q] = f
            here[b, v] = m
        for gi in range(ngr[0]):  # at_most's least over lower usages, group by group
            for v in range(n):
                w = lower[v, gi]
                if w >= 0 and here[b, w] < here[b, v]:
                    here[b, v] = here[b, w]
    return here, own


@kernel
def _walk(F, lam, E_in, U_in, Q_in, radix, stride, nV, dc_groups, ngr, C, ok, widths,
          npairs, U, Q, nb, windows):
    """Fill ``F`` (all ``inf``) as :func:`dc_walk` returns it: ``dp``'s :func:`~chainpipe.
    solvers.prefix_kernel._stages` and :func:`~chainpipe.solvers.prefix_kernel.
    _undominated` at every prefix end (the reference :func:`_walk_least` agrees with)."""
    L1 = C.shape[3]
    last = np.full(C.shape[:3], L1 - 1, dtype=np.int64)  # (_stages: every end looked at)
    edges = np.full(nb, -np.inf)
    if windows:
        for q in range(nb):
            edges[q] = -lam + lam * q / nb
    none = np.full(nb, np.inf)
    for a in range(L1 - 1):
        if a == 0:  # a plan may start on any DC of the chain
            for gi in range(ngr[0]):
                _stages(F, 0, 0, 0, edges, none, radix[0, gi] - 1, gi, dc_groups[0, gi],
                        C, ok, last, widths, npairs, stride[0, gi], 0.0, lam, nb, True)
            continue
        if U_in[a] <= lam * (1 + SLACK) and E_in[a].min() < np.inf:
            for gi in range(ngr[0]):
                _stages(F, a, 0, 0, edges, E_in[a], radix[0, gi] - 1, gi, dc_groups[0, gi],
                        C, ok, last, widths, npairs, stride[0, gi], Q_in[a], lam, nb, False)
        if U[a, 0, 0] > lam * (1 + SLACK):
            continue
        kept = _undominated(F[a, 0], ngr[0], radix[0], stride[0], nV, nb)
        for v in range(nV):
            row = kept[v]
            if row.min() == np.inf:
                continue
            for gi in range(ngr[0]):
                used = (v // stride[0, gi]) % radix[0, gi]
                _stages(F, a, 0, v, edges, row, radix[0, gi] - 1 - used, gi,
                        dc_groups[0, gi], C, ok, last, widths, npairs, stride[0, gi],
                        Q[a, 0, 0], lam, nb, False)


@kernel
def _walk_least(F, ready, lam, E_in, U_in, Q_in, radix, stride, nV, dc_groups, ngr, C, ok,
                widths, npairs, U, Q, nb, windows, lower):
    """:func:`_walk`'s walk for :func:`dc_least`, filing the same fills by the same rules:
    per prefix end ``a``, the stages that start there and fit (:func:`_cells`, once for
    every usage; their rows of ``F`` set to ``inf`` where not yet ``ready``), filed from
    the incoming table and from each usage's entries that :func:`_kept` keeps (the
    entries below ``inf`` only, in bucket order: :func:`_finite_buckets`); a prefix end
    no stage filed into is not looked at."""
    L1, P, ng = C.shape[3], C.shape[1], ngr[0]
    edges = np.full(nb, -np.inf)
    if windows:
        for q in range(nb):
            edges[q] = -lam + lam * q / nb
    best, kept = np.empty((nV, nb)), np.empty((nV, nb))
    live = np.zeros(nV, dtype=np.bool_)
    ends, cs = np.empty(max(ng, 1) * P * L1, dtype=np.int64), np.empty(max(ng, 1) * P * L1)
    start = np.empty(max(ng, 1) * P + 1, dtype=np.int64)
    qs = np.zeros(nb, dtype=np.int64)
    top = lam * (1 + SLACK)
    for a in range(L1 - 1):
        entry = a == 0 or (U_in[a] <= top and E_in[a].min() < np.inf)
        grow = (a > 0 and ready[a] and U[a, 0, 0] <= top
                and _kept(F[a, 0], ng, lower, nV, nb, best, kept, live))
        if not (entry or grow) or not _cells(F, ready, a, lam, dc_groups[0], ng, C, ok,
                                             npairs, ends, cs, start):
            continue
        if a == 0:  # a plan may start on any DC of the chain
            for gi in range(ng):
                _fill(F, 0, edges, edges, qs, 0, radix[0, gi] - 1, gi, dc_groups[0, gi],
                      widths, npairs, stride[0, gi], 0.0, lam, nb, True, ends, cs, start, P)
            continue
        if entry:
            nq = _finite_buckets(E_in[a], qs)
            for gi in range(ng):
                _fill(F, 0, edges, E_in[a], qs, nq, radix[0, gi] - 1, gi, dc_groups[0, gi],
                      widths, npairs, stride[0, gi], Q_in[a], lam, nb, False, ends, cs, start,
                      P)
        if not grow:
            continue
        for v in range(nV):
            if not live[v]:
                continue
            row = kept[v]
            nq = _finite_buckets(row, qs)
            for gi in range(ng):
                used = (v // stride[0, gi]) % radix[0, gi]
                _fill(F, v, edges, row, qs, nq, radix[0, gi] - 1 - used, gi, dc_groups[0, gi],
                      widths, npairs, stride[0, gi], Q[a, 0, 0], lam, nb, False, ends, cs,
                      start, P)


@kernel
def _cells(F, ready, a, lam, groups, ng, C, ok, npairs, ends, cs, start):
    """Per local group ``gi`` and option ``c``, the stages ``[a, b)`` that
    :func:`~chainpipe.solvers.prefix_kernel._stages` files (``C`` within the cap, in
    ``ok``), their ends and ``C`` in ``ends``, ``cs[start[gi * P + c]:start[gi * P + c +
    1]]`` (``P`` options per group); the rows of ``F`` at those ends set to ``inf`` where
    not ``ready`` (then ready). Returns whether there is any."""
    P = C.shape[1]
    tol = lam * SLACK
    n = 0
    for gi in range(ng):
        g = groups[gi]
        for c in range(P):
            start[gi * P + c] = n
            for b in range(a + 1, C.shape[3] if c < npairs[g] else 0):
                cc = C[g, c, a, b]
                if cc > lam + tol:
                    break
                if not ok[g, c, a, b]:
                    continue
                ends[n], cs[n] = b, cc
                n += 1
                if not ready[b]:
                    F[b] = np.inf
                    ready[b] = True
    start[ng * P] = n
    return n > 0


@kernel
def _fill(F, v0, h0s, f0s, qs, nq, free_gi, gi, g, widths, npairs, stride, Q, lam, nb,
          first, ends, cs, start, P):
    """:func:`~chainpipe.solvers.prefix_kernel._stages` of group ``g`` (local ``gi``) over
    the stages :func:`_cells` found, after usage ``v0``'s entries ``f0s`` (buckets
    ``qs[:nq]``, those below ``inf`` in order; the loop of ``_stages`` skips the others)."""
    tol = lam * SLACK
    for c in range(npairs[g]):
        w = widths[g, c]
        if w > free_gi:
            continue
        v2 = v0 + w * stride
        for n in range(start[gi * P + c], start[gi * P + c + 1]):
            b, cc = ends[n], cs[n]
            if first:
                _file(F, b, 0, v2, cc - lam, cc, lam, nb)
                continue
            for j in range(nq):
                q = qs[j]
                h2 = max(cc - lam, h0s[q] + Q + cc - lam)
                if h2 > tol:
                    break
                _file(F, b, 0, v2, h2, f0s[q] + Q + cc, lam, nb)


@kernel
def _finite_buckets(row, qs):
    """Into ``qs``, in order, the buckets of ``row`` below ``inf``; returns how many."""
    n = 0
    for q in range(row.shape[0]):
        if row[q] < np.inf:
            qs[n] = q
            n += 1
    return n


@kernel
def _lower(radix, stride, ng, nV):
    """``lower[v, gi]``: the usage one device of group ``gi`` below ``v`` (``-1`` where
    ``v`` uses none of it), in the mixed radix of ``radix`` and ``stride``."""
    lower = np.full((nV, max(ng, 1)), -1, dtype=np.int64)
    for v in range(nV):
        for gi in range(ng):
            if (v // stride[gi]) % radix[gi] > 0:
                lower[v, gi] = v - stride[gi]
    return lower


@kernel
def _kept(Fk, ng, lower, nV, nb, best, kept, live):
    """:func:`~chainpipe.solvers.prefix_kernel._undominated` of ``Fk[v, q]`` into ``kept``
    (the same tests in the same order, its divisions read off ``lower``: :func:`_lower`;
    ``best`` scratch), ``live[v]`` whether row ``v`` keeps an entry. Returns whether any
    row does."""
    some = False
    for v in range(nV):
        row = False
        for q in range(nb):
            low = best[v, q - 1] if q > 0 else np.inf
            for gi in range(ng):
                w = lower[v, gi]
                if w >= 0:
                    low = min(low, best[w, q])
            f = Fk[v, q]
            if f >= low:
                kept[v, q] = np.inf
            else:
                kept[v, q] = f
                row = True
            best[v, q] = min(f, low)
        live[v] = row
        some = some or row
    return some


UNIT.bind(globals())
