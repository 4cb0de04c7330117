"""The prefix-curve pass's cheaper arrays (``chainpipe/solvers/cdynp/curve.py``,
:class:`~chainpipe.solvers.cdynp.curve.CurvePass`; ``docs/privacy.md``, "The prefix-curve
pass"): without the windows' buckets the walks leave out the options another option of
their range outdoes (:func:`chainpipe.solvers.prefix_curve._walked_options`), and the
rows without the boundary's traversal are kept for the base labels' usage only. What the
pass keeps and sends is still, bit for bit, what the reference walk
(:func:`~chainpipe.solvers.cdynp.walk_fast.dc_walk`, every option) gives."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from test_cdynp_curve_pass import _instances
from test_cdynp_walk_key import _caps, _local

from chainpipe import cost
from chainpipe.io import read
from chainpipe.solvers.cdynp import curve
from chainpipe.solvers.cdynp.agent import own_tables
from chainpipe.solvers.cdynp.walk_fast import dc_walk
from chainpipe.solvers.prefix_curve import BUCKETS, _arrays, _at_most, _walked_options

#: the version-3 small instances (options that others outdo on their range: few random
#: instances have them)
SMALL = sorted((Path(__file__).resolve().parents[1] / "instances" / "v3" / "small").glob(
    "v3-small-*.json"))


def _reference(t, grid, link, incoming, nb, windows) -> tuple:
    """``(CF, CF_base, table)`` as the pass made them with every option and every usage's
    row without the traversal: per cap, :func:`dc_walk`'s minima joined."""
    arrays = _arrays(t)
    L1 = t.L + 1
    if link is None:
        U_in = Q_in = np.full(L1, np.inf)
    else:
        U_in = np.asarray(cost.occupancy(t.boundary_bytes, link.bandwidth_bytes_per_s),
                          dtype=float)
        Q_in = np.asarray(cost.traversal(link.latency_s, U_in), dtype=float)
    upstream = incoming.min(axis=2)
    U, Q = arrays[9], arrays[10]
    own_add, in_add = curve._adds(grid, (U[:, 0, 0], Q[:, 0, 0]), (U_in, Q_in))
    CF, base, table = [], [], []
    for i, lam in enumerate(grid):
        F = dc_walk(float(lam), np.ascontiguousarray(incoming[i]), U_in, Q_in, *arrays, nb,
                    windows)
        here = _at_most(F.min(axis=3), arrays[0])[:, 0]
        CF.append(np.minimum(here + own_add[i][:, None], (upstream[i] + in_add[i])[:, None]))
        base.append(np.minimum(here, upstream[i][:, None]))
        table.append(np.minimum(incoming[i], F[:, 0].min(axis=1)))
    return np.stack(CF, axis=2), np.stack(base, axis=2), np.stack(table)


def test_pass_keeps_the_reference_walks_values():
    """Per DC of random chains and of the version-3 small instances, with and without the windows' buckets: the pass's ``CF``,
    ``table`` and ``CF_base`` (the full-room column of the reference's rows without the
    traversal) equal the reference's to the bit, and the rows it reads equal theirs. It
    fails when the walks leave out an option that a minimum kept needs (with the windows'
    buckets, measured: the sent table of every walk of ``v3-large-03`` differed), or when
    ``CF_base`` is read at another usage than the one kept."""
    pruned = checked = 0
    for inst in [inst for _seed, inst in _instances(4, least_layers=4)] + list(map(read, SMALL)):
        L = inst.num_layers
        for m in (2, 2 * L + 3):  # one bucket, and the windows' buckets
            incoming = None
            for k in range(inst.num_datacenters):
                t = own_tables(_local(inst, k, m), None)
                windows = curve.windows_capped(t)
                nb = BUCKETS if windows else 1
                grid = _caps(t)
                link = None if k == 0 else inst.links[k - 1]
                got = curve.CurvePass(t, grid, link, incoming)
                inc = np.full((len(grid), L + 1, nb), np.inf) if incoming is None else incoming
                CF, base, table = _reference(t, grid, link, inc, nb, windows)
                assert got.CF.tobytes() == np.ascontiguousarray(CF).tobytes(), (inst.name, k)
                assert got.table.tobytes() == table.tobytes(), (inst.name, k)
                assert np.array_equal(got.CF_base, base[:, got.full]), (inst.name, k)
                usages = [(0,) * len(got.radix), tuple(got.radix - 1)]
                assert np.array_equal(got.rows(1, usages),
                                      [base[1, got.full], CF[1, got.room(usages[1])]])
                pruned += not windows and bool((_walked_options(t)[0] != _arrays(t)[6]).any())
                checked += 1
                incoming = got.table
    # (measured: 46 DCs, 4 of them one bucket wide with options another outdoes)
    assert checked >= 16 and pruned >= 4, (checked, pruned)
