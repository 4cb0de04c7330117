"""The column paths of a DC's summary keep exactly what the per-point paths keep:
:func:`chainpipe.solvers.cdynp.summary.frontier_columns` the indices of
:func:`~chainpipe.solvers.cdynp.summary.frontier`, and ``DCAgent._within`` the bound test
of ``cost.iteration_time`` per point (the same floats: ties at the bound stay ties)."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from chainpipe import cost
from chainpipe.solvers.cdynp.agent import DCAgent
from chainpipe.solvers.cdynp.summary import frontier, frontier_columns


def _columns(pts: list) -> list[np.ndarray]:
    return [np.array(c, dtype=float) for c in list(zip(*pts))[:4]]


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("sync", [False, True])
def test_frontier_columns_is_frontier(seed, sync):
    rng = random.Random(seed)
    span = rng.choice([3, 6, 1000])  # few values: many ties and duplicates

    def point():
        return (rng.randint(0, 6), float(rng.randint(1, span)) / 7, float(rng.randint(1, span)) / 3,
                float(rng.randint(0, 3)) if sync else 0.0, "rides along")

    pts = [point() for _ in range(rng.choice([1, 5, 80, 300, 700]))]
    kept = [point() for _ in range(rng.randint(0, 6))]
    expect = frontier(pts, kept)
    got = frontier_columns(*_columns(pts), kept=kept)
    assert got.tolist() == expect
    assert frontier_columns(*_columns(pts)).tolist() == frontier(pts)


@pytest.mark.parametrize("M", [1, 2, 7, 33])
def test_within_is_the_per_point_bound(M):
    rng = np.random.default_rng(M)
    n = 4000
    fill = rng.random(n) * 10
    period = rng.random(n) * rng.choice([1e-3, 1.0, 1e3], n)
    sync = np.where(rng.random(n) < 0.5, 0.0, rng.random(n))
    period[:5] = math.inf
    per_point = [float(cost.iteration_time(f, p, M, s))
                 for f, p, s in zip(fill.tolist(), period.tolist(), sync.tolist())]
    # limits at the points' own T (ties), just below them and a common one
    for limit in per_point[5:50]:
        want = [t <= limit for t in per_point]
        assert DCAgent._within(fill, period, sync, M, limit).tolist() == want
    for limit in [np.nextafter(t, 0.0) for t in per_point[5:20]] + [5.0, math.inf]:
        want = [t <= limit for t in per_point]
        assert DCAgent._within(fill, period, sync, M, float(limit)).tolist() == want
