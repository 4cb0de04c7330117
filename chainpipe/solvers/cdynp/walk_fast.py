"""One DC's part of the prefix-curve pass, compiled (:mod:`.curve`; ``docs/privacy.md``,
"The prefix-curve pass").

:func:`dc_walk` is ``dp``'s forward walk (:func:`chainpipe.solvers.prefix_kernel.forward`)
restricted to one DC's own devices, started from what the DCs before it pass on: per
prefix end ``a`` and excess bucket, the least fill of a prefix ``[0, a)`` on the DCs before
it that meets the cap ``lam``. It files the stages with ``dp``'s own kernels
(:func:`~chainpipe.solvers.prefix_kernel._stages`, ``_undominated``), so the two walks
agree rule for rule.

The kernel is registered with :data:`UNIT` and handed out at the end of the import as
:mod:`.period_fast`'s are (:meth:`chainpipe.solvers.label_aot.Unit.bind`): compiled ahead
of time when built for this file and :mod:`..prefix_kernel` as they are, else numba's
just-in-time kernel (compiled on first use, about 4 CPU s, then cached on disk). The
ahead-of-time build lists it (:func:`chainpipe.solvers.label_aot.units`: ``cdynp_walk``,
about 6 s to build).
"""

from __future__ import annotations

import numpy as np

from ..label_aot import Unit
from ..prefix_kernel import SLACK, _stages, _undominated  # noqa: F401 (the kernel calls them)

#: the kernel :mod:`.curve` calls, its arguments' types (:data:`.label_aot.ARGS`' notation)
ARGS = {
    "dc_walk": ("f", "f2", "f1", "f1", "i2", "i2", "i", "i2", "i1", "f4", "b4", "i2", "i1",
                "f3", "f3", "i", "b"),
}
#: the kernel, compiled ahead of time into ``cdynp_walk_aot_<digest>`` once a build lists it
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
    Without ``windows`` (``nb = 1``) only ``C`` and ``U`` are capped."""
    L1 = C.shape[3]
    F = np.full((L1, 1, nV, nb), np.inf)
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
    return F


UNIT.bind(globals())
