"""The prefix-curve pass's compiled walk as the pass calls it
(:func:`chainpipe.solvers.cdynp.walk_fast.dc_least`): the minima it returns are those of
the reference walk :func:`~chainpipe.solvers.cdynp.walk_fast.dc_walk` (``dp``'s own
``_undominated`` at every prefix end), to the bit, on every DC of random chains, from no
table and from one the DC before passes on, with and without the windows' buckets."""

from __future__ import annotations

import numpy as np
from test_cdynp_curve_pass import _instances
from test_cdynp_walk_key import _caps, _local

from chainpipe import cost
from chainpipe.solvers.cdynp import curve
from chainpipe.solvers.cdynp.agent import own_tables
from chainpipe.solvers.cdynp.walk_fast import dc_least, dc_walk
from chainpipe.solvers.prefix_curve import BUCKETS, _arrays, _at_most


def test_least_is_the_reference_walks_minima():
    """Per DC, cap, count and incoming table (none, or a walk's of the DC before, its
    entries raised at random prefix ends so that some are skipped): ``dc_least``'s
    ``(here, own)`` equal ``_at_most(F.min(axis=3))[:, 0]`` and ``F[:, 0].min(axis=1)``
    of ``dc_walk``'s ``F``, bit for bit. It fails when ``_kept`` drops an entry
    ``_undominated`` keeps (or keeps one it drops) or a prefix end with a fill is skipped."""
    rng = np.random.default_rng(0)
    checked = finite = 0
    for _seed, inst in _instances(4, least_layers=4):
        L = inst.num_layers
        for m in (2, 2 * L + 3):  # one bucket, and the windows' buckets
            up = None
            for k in range(inst.num_datacenters):
                t = own_tables(_local(inst, k, m), None)
                windows = curve.windows_capped(t)
                nb = BUCKETS if windows else 1
                arrays = _arrays(t)
                if k == 0:
                    U_in = Q_in = np.full(L + 1, np.inf)
                else:
                    link = inst.links[k - 1]
                    U_in = np.asarray(cost.occupancy(t.boundary_bytes,
                                                     link.bandwidth_bytes_per_s), dtype=float)
                    Q_in = np.asarray(cost.traversal(link.latency_s, U_in), dtype=float)
                for lam in _caps(t):
                    E_in = np.full((L + 1, nb), np.inf) if up is None else up.copy()
                    E_in[rng.random(L + 1) < 0.3] *= 1.5
                    args = (float(lam), E_in, U_in, Q_in, *arrays, nb, windows)
                    F = dc_walk(*args)
                    here, own = dc_least(*args)
                    want = _at_most(F.min(axis=3), arrays[0])[:, 0]
                    assert here.tobytes() == want.tobytes(), (inst.name, k, lam)
                    assert own.tobytes() == F[:, 0].min(axis=1).tobytes(), (inst.name, k, lam)
                    checked += 1
                    finite += bool(np.isfinite(here[1:]).any())
                up = np.minimum(E_in, own)
    assert checked >= 20 and finite >= checked // 2, (checked, finite)
