"""The prefix-curve walks kept by content (:func:`chainpipe.solvers.cdynp.curve.walk_key`):
a DC's range runs at different ``M_p`` share one store of walks when their tables agree
in everything a walk reads. Equal keys must mean equal walks (the rows and the table a
:class:`~chainpipe.solvers.cdynp.curve.CurvePass` makes from a store another count
filled are those it makes afresh), and counts must share."""

from __future__ import annotations

import dataclasses

import numpy as np
from test_cdynp_curve_pass import _instances

from chainpipe.instance import Instance
from chainpipe.solvers.cdynp import curve
from chainpipe.solvers.cdynp.agent import own_tables
from chainpipe.solvers.prefix_curve import _arrays


def _local(inst: Instance, k: int, m: int) -> Instance:
    """DC ``k``'s one-DC instance at ``M_p = m`` (as an agent makes it)."""
    training = dataclasses.replace(inst.training, microbatches=m)
    return Instance(inst.name, inst.model, training, (inst.datacenters[k],), ())


def _caps(tables) -> np.ndarray:
    """A few caps among the DC's stage times (where the walks differ)."""
    C = _arrays(tables)[5]
    finite = C[np.isfinite(C) & (C > 0)]
    return np.unique(np.quantile(finite, [0.2, 0.5, 0.9])) if len(finite) else np.ones(1)


def _tables_of(inst: Instance, k: int) -> list:
    """DC ``k``'s tables at counts on both sides of the layers and under sync caps that
    cut some of its options."""
    L = inst.num_layers
    got = []
    for m in sorted({2, 3, L, L + 1, 2 * L + 3}):
        t = own_tables(_local(inst, k, m), None)
        got.append(t)
        R = np.concatenate([t.options(g).sync_time for g in range(t.G)])
        R = np.unique(R[np.isfinite(R) & (R > 0)])
        if len(R) > 1:
            got.append(own_tables(_local(inst, k, m), float(R[len(R) // 2])))
    return got


def test_equal_keys_mean_equal_walks_and_counts_share():
    """Per DC of random chains: every pair of its tables (counts on both sides of the
    layers, with and without a ``sync_cap``) with equal keys gives the same rows and table
    from a store the other filled as afresh; tables of different counts share keys on
    every chain. It fails when the key reads ``M_p`` (no count shares), and when an equal
    key hides a difference a walk reads."""
    pairs, shared = 0, 0
    for _seed, inst in _instances(8, least_layers=4):
        for k in range(1, inst.num_datacenters):
            link = inst.links[k - 1]
            grid = _caps(own_tables(_local(inst, 0, inst.microbatches), None))
            tables = _tables_of(inst, k)
            up = [curve.CurvePass(own_tables(_local(inst, 0, t.M), None), grid, None,
                                  None).sent() for t in tables]  # DC 0's, at each count
            keys = [curve.walk_key(t, link) for t in tables]
            for i, a in enumerate(tables):
                for j, b in enumerate(tables):
                    if i == j or keys[i] != keys[j]:
                        continue
                    store: dict = {}
                    curve.CurvePass(a, grid, link, up[i], store)
                    got = curve.CurvePass(b, grid, link, up[j], store)
                    fresh = curve.CurvePass(b, grid, link, up[j], {})
                    assert np.array_equal(got.CF, fresh.CF), (inst.name, k, i, j)
                    assert np.array_equal(got.table, fresh.table), (inst.name, k, i, j)
                    pairs += 1
                    shared += a.M != b.M
    # (measured: 104 pairs with equal keys, all across counts; none between tables with
    # and without a cap)
    assert pairs >= 10 and shared >= 5, (pairs, shared)
