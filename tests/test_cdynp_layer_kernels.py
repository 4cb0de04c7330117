"""The compiled layer loops of a DC agent's two label DPs against what they replace.

``period_fast.order_layer`` sorts each state's labels and cuts them by the paired floor
in one call per layer: it must give exactly the order of ``numpy.lexsort`` (stable, ties
in the order filed) and exactly the rows :func:`.curve.paired` keeps. ``local_fast``'s
layer loop gives each image its state from a hash table of usage codes: every state id
must stand for one usage, and the table must find each."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from chainpipe.instance import Instance
from chainpipe.io import read
from chainpipe.solvers.cdynp import curve, local, period_fast
from chainpipe.solvers.cdynp.agent import own_tables

ROOT = Path(__file__).resolve().parents[1]


def _rows(rng, n: int) -> np.ndarray:
    """``n`` label rows ``x1, x2, total, sync, p`` from few values (many ties)."""
    S = np.empty((n, 5))
    S[:, 0] = rng.choice([0.5, 1.0, 1.5, 2.0], n)
    S[:, 1] = rng.choice([0.0, 0.5, 1.0], n)
    S[:, 2] = rng.choice([3.0, 4.0, 4.5, 7.25], n)
    S[:, 3] = rng.choice([0.0, 0.25], n)
    S[:, 4] = rng.integers(0, 3, n)
    return S


def _reference(S, bounds, CF, grid, below, M, ub):
    """The per-state ``numpy.lexsort`` and :func:`.curve.paired` cut it replaces."""
    order, counts, cut = [], [], False
    for s in range(len(bounds) - 1):
        lo, hi = bounds[s], bounds[s + 1]
        T = S[lo:hi]
        got = np.lexsort((T[:, 4], T[:, 0], T[:, 3], T[:, 2], T[:, 0] + T[:, 1]))
        if CF is not None and hi > lo:
            ok = curve.paired(T, CF[s], grid, below, M, ub)
            cut |= not ok.all()
            got = got[ok[got]]
        order.extend((lo + got).tolist())
        counts.append(len(got))
    return order, counts, cut


@pytest.mark.parametrize("seed", range(6))
def test_order_layer_is_lexsort_and_the_paired_cut(seed):
    """Random layers, states of 0 to 70 rows (runs of insertion sort and merges), with
    and without the curve: the same rows in the same order, the same counts and cut."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(0, 70, 7)
    sizes[1] = 0
    bounds = np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)
    S = _rows(rng, int(bounds[-1]))
    grid = np.array([1.0, 1.5, 2.0, 3.0])
    below = np.concatenate(([0.0], grid[:-1]))
    CF = rng.choice([0.0, 1.0, 2.5, math.inf], (len(sizes), len(grid)))
    M = int(rng.integers(1, 6))
    for ub in (math.inf, 9.0, 12.0):
        want = _reference(S, bounds, CF, grid, below, M, ub)
        order, counts, cut = period_fast.order_layer(S, bounds, CF, True, grid, below, M,
                                                     ub * (1 + 1e-9))
        assert (order.tolist(), counts.tolist(), bool(cut)) == want
    want = _reference(S, bounds, None, grid, below, M, 0.0)
    order, counts, cut = period_fast.order_layer(S, bounds, np.zeros((0, 1)), False,
                                                 np.zeros(1), np.zeros(1), M, 0.0)
    assert (order.tolist(), counts.tolist(), bool(cut)) == want


def _local_run(dc: int):
    inst = read(ROOT / "instances" / "v3" / "medium" / "v3-medium-01.json")
    one = Instance(inst.name, inst.model, inst.training, (inst.datacenters[dc],), ())
    tables = own_tables(one, None)
    dp = local.LocalDP(tables, position_cap=tables.M - 1)
    dp.run({tables.L: [(0.0, 0.0, 0, 0.0, (local.END, 0, 0))]}, math.inf)
    return dp


@pytest.mark.parametrize("dc", [0, 3])
def test_the_local_dp_states_are_one_per_usage(monkeypatch, dc):
    """The classic DP of a ``v3-medium-01`` DC with the states' table, usage and
    extension rows starting at 2 slots (grown many times, codes colliding): each state
    id's usage is its own, the table finds each usage's id, and the points and plans are
    those of the run at the usual size."""
    want = _local_run(dc)
    monkeypatch.setattr(local, "TABLE_SLOTS", 2)
    dp = _local_run(dc)
    n = int(dp._sizes[0])
    assert n > 8 and len(dp._table) > 2 * n - 2
    usage = dp._usage[:n]
    assert len({tuple(u) for u in usage.tolist()}) == n
    codes = usage @ dp._stride
    found = {int(c): int(i) for c, i in dp._table.tolist() if c >= 0}
    assert found == {int(c): i for i, c in enumerate(codes.tolist())}
    assert dp.points == want.points and dp.points
    assert dp._store == want._store
