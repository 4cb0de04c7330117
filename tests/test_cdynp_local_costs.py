"""A DC agent's classic label DP made cheaper per run (:mod:`chainpipe.solvers.cdynp.local`):
the beam's per-state selection by one sort, and the store rows and points made when first
read, against what they replace."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from chainpipe import cost
from chainpipe.instance import Instance
from chainpipe.io import read
from chainpipe.solvers.cdynp import local
from chainpipe.solvers.cdynp.agent import own_tables

ROOT = Path(__file__).resolve().parents[1]


def _per_state(starts, X, M, beam):
    """The beam's rows as chosen before :func:`.local.beam_rows`: a stable ``argsort`` of
    the estimates per state with more than ``beam`` labels."""
    rows = []
    for s in range(len(starts) - 1):
        lo, hi = int(starts[s]), int(starts[s + 1])
        if hi - lo > beam:
            est = cost.iteration_time(X[lo:hi, 1], X[lo:hi, 0], M, X[lo:hi, 3])
            rows.extend(sorted(lo + np.argsort(est, kind="stable")[:beam]))
        else:
            rows.extend(range(lo, hi))
    return rows


@pytest.mark.parametrize("seed", range(6))
def test_beam_rows_are_the_least_estimates_per_state(seed):
    """Random states (some empty, some under the beam) with many tied estimates and an
    infinite bottleneck here and there: the same rows, and each one's state."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(0, 9, 12)
    starts = np.concatenate(([0], np.cumsum(sizes)))
    n = int(starts[-1])
    X = rng.integers(0, 3, (n, 4)).astype(float)
    X[rng.random(n) < 0.1, 0] = math.inf
    for M in (1, 4):
        for beam in (1, 2, 5):
            rows, state = local.beam_rows(starts, X, M, beam)
            assert rows.tolist() == _per_state(starts, X, M, beam)
            assert state.tolist() == (np.searchsorted(starts, rows, side="right") - 1).tolist()


@pytest.mark.parametrize("dc", [0, 3])
def test_store_rows_walk_back_whole_plans(dc):
    """A ``v3-medium-01`` DC's classic DP alone (one base label, the model's end): every
    own label walks back through its store rows to the end, stage after adjoining stage,
    each an option of its group that costs no more than the label's bottleneck; the
    points read lazily are those listed per start."""
    inst = read(ROOT / "instances" / "v3" / "medium" / "v3-medium-01.json")
    one = Instance(inst.name, inst.model, inst.training, (inst.datacenters[dc],), ())
    tables = own_tables(one, None)
    dp = local.LocalDP(tables, position_cap=tables.M - 1)
    dp.run({tables.L: [(0.0, 0.0, 0, 0.0, (local.END, 0, 0))]}, math.inf)
    assert 0 in dp.points and -1 not in dp.points and dp.points.get(-1) is None
    listed = {x: dp.points[x] for x in dp.points}
    assert dict(dp.points.items()) == listed and len(listed) == len(dp.points) > 1
    assert sorted(i for pts in listed.values() for *_p, i in pts) == list(range(len(dp._store)))
    for x, pts in listed.items():
        for r, bn, _sm, _s, i in pts:
            start, stages = x, 0
            while True:
                a, g, pair, (kind, j, _p) = dp.label(i)
                end = tables.L if kind == local.END else dp.label(j)[0]
                assert kind in (local.OWN, local.END) and a == start < end
                assert tables.options(g).compute_time[pair, a, end] <= bn
                stages += 1
                if kind == local.END:
                    break
                start, i = end, j
            assert r == min(stages, dp.R)
