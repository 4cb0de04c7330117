"""CDynP's covering selection of compressed period points (:mod:`chainpipe.solvers.cdynp.cover`).

Checked: :func:`cover.shift` bounds what a point costs more than another in every
completion (random suffixes completed by the same random stages through
:func:`period.prepend`, both schedules); the greedy order starts where asked, its radii
fall and reach 0 once every point is kept, and each radius is the true cover radius of
its prefix; :func:`cover.fit_cover` keeps every entry's first point, stays within the
budget and reports each entry's realised radius.
"""

from __future__ import annotations

import json
import math
import random

import numpy as np
import pytest

from chainpipe.solvers.cdynp import cover
from chainpipe.solvers.cdynp.period import period_time, prepend


def _label(rng: random.Random, n: int, M: int, gpipe: bool) -> tuple:
    """A suffix label of ``n`` random stages (the model's end first), with crossings."""
    lab = (0.0, 0.0, 0.0, 0.0, 0, ())
    for _ in range(n):
        lab = _step(rng, lab, M, gpipe)
    return lab


def _step(rng: random.Random, lab: tuple, M: int, gpipe: bool, stage=None) -> tuple:
    if stage is None:
        stage = (rng.uniform(0.01, 0.1), rng.uniform(0.0, 0.05), rng.uniform(0.0, 0.1),
                 rng.choice([0.0, rng.uniform(0.0, 0.3)]))
        cross = rng.random() < 0.3
        stage = (*stage, rng.uniform(0.0, 0.02) if cross else 0.0,
                 rng.uniform(0.0, 0.01) if cross else 0.0)
    C, f, b, R, U, Q = stage
    return prepend(lab, (C, f, b, R), U, Q, M=M, gpipe=gpipe, p_cap=10 ** 6)


@pytest.mark.parametrize("gpipe", [False, True])
def test_shift_bounds_every_completion(gpipe):
    rng = random.Random(7 + gpipe)
    checked = 0
    for _ in range(300):
        M = rng.choice([4, 8, 32])
        n = rng.randint(1, 4)
        a, b = _label(rng, n, M, gpipe), _label(rng, n, M, gpipe)
        if len(a[5]) != len(b[5]) or (not gpipe and a[4] != b[4]):
            continue
        V, W, _g = cover._rows([a, b], not gpipe)
        delta = float(cover.shift(V, W, 0, M)[1])  # a over b
        for _k in range(5):
            ca, cb = a, b
            for _s in range(rng.randint(0, 5)):
                st = (rng.uniform(0.01, 0.1), rng.uniform(0.0, 0.05), rng.uniform(0.0, 0.1),
                      rng.choice([0.0, rng.uniform(0.0, 0.3)]), rng.uniform(0.0, 0.02),
                      rng.uniform(0.0, 0.01))
                ca, cb = _step(rng, ca, M, gpipe, st), _step(rng, cb, M, gpipe, st)
            Ta, Tb = period_time(M, *ca[:4]), period_time(M, *cb[:4])
            assert Ta <= Tb + delta + 1e-9 * (1 + Tb)
            checked += 1
    assert checked > 200


def _points(rng: random.Random, n: int, M: int) -> list:
    return [_label(rng, rng.randint(1, 3), M, False) for _ in range(n)]


def test_cover_order_radii():
    rng = random.Random(3)
    M = 16
    pts = _points(rng, 60, M)
    V, W, g = cover._rows(pts, True)
    order, radii = cover.cover_order(pts, 5, True, len(pts), M)
    assert order[0] == 5 and len(set(order)) == len(order)
    assert all(x >= y for x, y in zip(radii, radii[1:]))
    assert radii[-1] == 0.0
    D = np.array([cover.shift(V, W, j, M) for j in range(len(pts))])  # D[j, i]: j over i
    for k in (1, 3, len(order) // 2):
        kept = order[:k]
        want = max(min((D[j, i] for j in kept if g[j] == g[i]), default=math.inf)
                   for i in range(len(pts)) if i not in kept)
        assert radii[k - 1] == pytest.approx(want)
    short, _r = cover.cover_order(pts, 5, True, 4, M)
    assert short == order[:4]


def test_fit_cover_budget():
    rng = random.Random(11)
    M = 16
    entries, origins, orders, radii = [], [], [], []
    for b in range(6):
        pts = _points(rng, 40, M)
        entries.append({"b": b, "bw": 1e9, "points": [[p[4], p[0], p[1], p[2], p[3],
                                                       list(p[5])] for p in pts]})
        origins.append([("own", i) for i in range(len(pts))])
        o, r = cover.cover_order(pts, 0, True, len(pts), M)
        orders.append(o)
        radii.append(r)
    budget = 6000
    out, outo, keeps, realised = cover.fit_cover(entries, origins, orders, radii, budget)
    size = sum(len(json.dumps(e, separators=(",", ":"))) + 1 for e in out)
    assert size <= budget
    for e, src, kp, o, org, r, rad in zip(out, entries, keeps, orders, outo, realised, radii):
        assert o[0] in kp and kp == sorted(kp)
        assert e["points"] == [src["points"][j] for j in kp]
        assert org == [("own", j) for j in kp]
        assert r == rad[len(kp) - 1]
    # more room, no worse a cover anywhere
    _o, _oo, keeps2, realised2 = cover.fit_cover(entries, origins, orders, radii, 2 * budget)
    assert all(x <= y for x, y in zip(realised2, realised))
    assert sum(map(len, keeps2)) > sum(map(len, keeps))
