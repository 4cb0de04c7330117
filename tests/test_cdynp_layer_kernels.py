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


def _numpy_runs(ok, dominated, on, C, N, R, alone):
    """The candidate runs as ``LocalDP._direct_candidates`` made them with numpy (before
    ``local_fast.candidate_runs``): ``(rows, top, [(c, x, first, end)])``."""
    L = ok.shape[2] - 1
    pos = np.arange(L + 1)
    before = pos[None, None, :] < pos[None, :, None]  # [., x, a]: a < x
    stop = np.where(~ok.transpose(0, 2, 1) & before, pos, -1).max(axis=2)
    keep = (before & (pos[None, None, :] > stop[:, :, None]) & on[None, :, None]
            & on[None, None, :] & ~dominated.transpose(0, 2, 1))
    ci, xi, ri = np.nonzero(keep[:, :, ::-1])
    ai = L - ri
    rows = np.stack([ai.astype(float), C[ci, ai, xi], N[ci, ai, xi].astype(float),
                     R[ci, ai, xi]], axis=1)
    high = np.where(before, alone.transpose(0, 2, 1), -math.inf)
    top = np.maximum.accumulate(high[:, :, ::-1], axis=2)[ci, xi, ri]
    key = ci * (L + 1) + xi
    cuts = [0, *(np.flatnonzero(np.diff(key)) + 1).tolist(), len(key)]
    runs = [(int(ci[s]), int(xi[s]), s, e) for s, e in zip(cuts[:-1], cuts[1:]) if e > s]
    return rows, top, runs


@pytest.mark.parametrize("seed", range(5))
def test_candidate_runs_are_the_numpy_runs(seed):
    """Random options (memory failing here and there, dominated pairs, a grid, ``inf``
    where a stage alone cannot run): the compiled runs are the numpy ones, row for row."""
    rng = np.random.default_rng(seed)
    c, L = 5, 9
    ok = rng.random((c, L + 1, L + 1)) < 0.85
    dominated = rng.random((c, L + 1, L + 1)) < 0.3
    on = rng.random(L + 1) < 0.8
    C, R = rng.random((c, L + 1, L + 1)), rng.random((c, L + 1, L + 1))
    N = rng.integers(0, 5, (c, L + 1, L + 1))
    alone = np.where(rng.random((c, L + 1, L + 1)) < 0.1, math.inf, 3 * C + R)
    rows, top, runs = local.kernel.candidate_runs(ok, dominated, on, C, N, R, alone)
    want = _numpy_runs(ok, dominated, on, C, N, R, alone)
    assert rows.tolist() == want[0].tolist() and top.tolist() == want[1].tolist()
    assert [tuple(r) for r in runs.tolist()] == want[2] and want[2]


def _list_runs_at(dp, cands, x: int) -> tuple:
    """``LocalDP._runs_at`` as it was built from ``_candidates(ub, grid, arrays=True)``
    (before :class:`.local.FlatRuns`): a list per run, concatenated per end."""
    runs, parts, gws = [], [], {}
    end = 0
    for g in range(dp.t.G):
        for w, c, arr in cands[g][x]:
            end += len(arr)
            runs.append((g, w, c, end, gws.setdefault((g, w), len(gws))))
            parts.append(arr)
    return (np.array(runs, dtype=np.int64).reshape(-1, 5),
            np.concatenate(parts) if parts else np.zeros((0, 4)), list(gws))


@pytest.mark.parametrize("dc", [0, 2, 3])
def test_flat_runs_are_the_candidate_lists(dc):
    """The candidate runs of a ``v3-medium-03`` DC (a sync cap on one) as
    :class:`.local.FlatRuns` cuts them under bounds from none to below most stages
    (with and without a grid): at every end the same runs, stages and ``(group, width)``
    pairs, in the same order, as the lists :meth:`LocalDP._candidates` gives, and the
    bound cuts the same."""
    inst = read(ROOT / "instances" / "v3" / "medium" / "v3-medium-03-slow-sync8.json")
    one = Instance(inst.name, inst.model, inst.training, (inst.datacenters[dc],), ())
    tables = own_tables(one, None if dc != 2 else 0.5)
    probe = local.LocalDP(tables, position_cap=tables.M - 1)
    full, worst = probe._unbounded(None)
    tops = sorted(t for per_g in full for per in per_g for *_x, top in per for t in top)
    cut = 0
    for ub in (math.inf, *(tops[int(q * (len(tops) - 1))] for q in (0.02, 0.3, 0.7, 1.0))):
        for grid in (None, set(range(0, tables.L + 1, 3)) | {tables.L}):
            lists, flat = (local.LocalDP(tables, position_cap=tables.M - 1) for _ in range(2))
            cands = lists._candidates(ub, grid, arrays=True)
            flat.run({}, ub, grid=grid)
            assert flat.bound_cut == lists.bound_cut
            for x in range(tables.L + 1):
                want = _list_runs_at(lists, cands, x)
                got = flat._runs_at(x)
                assert got[0].tolist() == want[0].tolist(), (ub, x)
                assert got[1].tolist() == want[1].tolist() and got[2] == want[2], (ub, x)
                cut += len(got[0]) < len(flat._flat_runs.at(x, math.inf)[0])
    assert cut and worst
