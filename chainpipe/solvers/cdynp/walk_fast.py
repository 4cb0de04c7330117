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
where something fits (measured: 18% of them); ``tests/test_cdynp_walk_least.py`` checks
it against :func:`dc_walk`.

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
from ..prefix_kernel import SLACK, _stages, _undominated, at_most  # noqa: F401 (called)

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
          npairs, U, Q, nb, windows, False)
    return F


@kernel
def dc_least(lam, E_in, U_in, Q_in, radix, stride, nV, dc_groups, ngr, C, ok, widths,
             npairs, U, Q, nb, windows):
    """:func:`dc_walk`'s walk (the same arguments) read as :class:`.curve.CurvePass` keeps
    it: ``(here, own)``, ``here[b, v]`` the least of ``F[b, 0, v', q]`` over every bucket
    and every usage ``v' <= v`` (per group; :func:`chainpipe.solvers.prefix_curve._at_most`
    of ``F.min(axis=3)``), ``own[b, q]`` the least over the usages (``F[:, 0].min(axis=1)``):
    the same minima, so the same values to the bit. Dominated entries are found by
    :func:`_kept` (the same as :func:`~chainpipe.solvers.prefix_kernel._undominated`), and
    a prefix end where nothing fits is not looked at (measured on ``v3-large-01``'s 242
    walks: 82% of them)."""
    L1 = C.shape[3]
    F = np.full((L1, 1, nV, nb), np.inf)
    _walk(F, lam, E_in, U_in, Q_in, radix, stride, nV, dc_groups, ngr, C, ok, widths,
          npairs, U, Q, nb, windows, True)
    least = np.full((L1, 1, nV), np.inf)
    own = np.full((L1, nb), np.inf)
    for b in range(L1):
        for v in range(nV):
            m = np.inf
            for q in range(nb):
                f = F[b, 0, v, q]
                if f < m:
                    m = f
                if f < own[b, q]:
                    own[b, q] = f
            least[b, 0, v] = m
    here = np.empty((L1, 1, nV))
    none = np.empty((0, 0, 0))
    at_most(least, radix, none, none, 0.0, False, here)
    return here[:, 0], own


@kernel
def _walk(F, lam, E_in, U_in, Q_in, radix, stride, nV, dc_groups, ngr, C, ok, widths,
          npairs, U, Q, nb, windows, fast):
    """Fill ``F`` (all ``inf``) as :func:`dc_walk` returns it; ``fast``: the dominated
    entries by :func:`_kept`, else by ``dp``'s :func:`~chainpipe.solvers.prefix_kernel.
    _undominated`."""
    L1 = C.shape[3]
    last = np.full(C.shape[:3], L1 - 1, dtype=np.int64)  # (_stages: every end looked at)
    edges = np.full(nb, -np.inf)
    if windows:
        for q in range(nb):
            edges[q] = -lam + lam * q / nb
    none = np.full(nb, np.inf)
    lower = _lower(radix[0], stride[0], ngr[0], nV)
    best, kept = np.empty((nV, nb)), np.empty((nV, nb))
    live = np.zeros(nV, dtype=np.bool_)
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
        if fast:
            if not _finite(F[a, 0]) or not _kept(F[a, 0], ngr[0], lower, nV, nb, best,
                                                 kept, live):
                continue
        else:
            kept = _undominated(F[a, 0], ngr[0], radix[0], stride[0], nV, nb)
            for v in range(nV):
                live[v] = kept[v].min() < np.inf
        for v in range(nV):
            if not live[v]:
                continue
            row = kept[v]
            for gi in range(ngr[0]):
                used = (v // stride[0, gi]) % radix[0, gi]
                _stages(F, a, 0, v, edges, row, radix[0, gi] - 1 - used, gi,
                        dc_groups[0, gi], C, ok, last, widths, npairs, stride[0, gi],
                        Q[a, 0, 0], lam, nb, False)


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


@kernel
def _finite(Fk):
    """Whether ``Fk`` holds an entry below ``inf`` (else :func:`_kept` keeps none)."""
    for v in range(Fk.shape[0]):
        for q in range(Fk.shape[1]):
            if Fk[v, q] < np.inf:
                return True
    return False


UNIT.bind(globals())
