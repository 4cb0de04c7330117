"""CDynP's targeted selection of compressed period points (:mod:`chainpipe.solvers.cdynp.reach`).

Checked: :func:`reach.reach_order` orders every point once; once its level-0 points are
kept, every point of the entry lies within its reach (bound less floor) of a kept point
of its group, and each level-0 point reaches the most points not yet reached when it is
kept (so a dense cluster near the bound comes before a far, lone point, which the cover
takes first); :func:`reach.fit_reach` stays within the budget, gives its bytes to the
entry whose next point reaches the most, and reports the entries it kept.
"""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from chainpipe.solvers.cdynp import cover, reach


def _entry(rng: random.Random, n: int, groups: int) -> list:
    """``n`` random points ``(x1, x2, total, sync, p, windows)``, ``groups`` stage counts."""
    out = []
    for _ in range(n):
        p = rng.randrange(groups)
        out.append((rng.uniform(0.03, 0.05), 0.0, rng.uniform(0.1, 0.5), rng.uniform(0.0, 0.2),
                    p + 1, tuple(sorted(rng.uniform(0.0, 0.3) for _ in range(p + 1)))))
    return out


@pytest.mark.parametrize("seed", range(4))
def test_level_zero_reaches_every_point(seed):
    rng = random.Random(seed)
    M = 32
    pts = _entry(rng, 60, 3)
    V, W, group = cover._rows(pts, True)
    floors = V[:, 2] + (M - 1) * V[:, 0] + V[:, 3]
    bound = float(np.quantile(floors, 0.8))
    order, keys = reach.reach_order(pts, floors, bound, True, len(pts), M)
    assert sorted(order) == list(range(len(pts)))
    zero = [a for a, (level, _gain) in zip(order, keys) if level == 0]
    reach_b = np.maximum(bound - floors, 0.0)
    for b in range(len(pts)):
        stand = [float(cover.shift(V, W, a, M)[b]) for a in zero if group[a] == group[b]]
        assert stand and min(stand) <= reach_b[b] + 1e-12
    # greedy: each level-0 point reached at least as many new points as the next of its group
    for g in set(group.tolist()):
        gains = [gain for a, (level, gain) in zip(order, keys) if level == 0 and group[a] == g]
        assert gains == sorted(gains, reverse=True) and gains[0] >= 1


def test_dense_cluster_near_the_bound_comes_first():
    """Five points close together just under the bound and two far, lone ones (one of
    the least floor): with two points, the targeted order keeps one of the cluster first
    (the cover, from the least floor, keeps the lone far points)."""
    M = 11
    lone = [(0.01, 0.0, 0.5, 0.0, 1, ()), (0.05, 0.0, 0.05, 0.0, 1, ())]
    cluster = [(0.03 + 0.0001 * i, 0.0, 0.3 + 0.001 * i, 0.0, 1, ()) for i in range(5)]
    pts = lone + cluster
    floors = [p[2] + (M - 1) * p[0] for p in pts]
    bound = max(floors) + 0.02
    order, _keys = reach.reach_order(pts, floors, bound, True, 2, M)
    assert order[0] >= 2
    by_cover, _radii = cover.cover_order(pts, int(np.argmin(floors)), True, 2, M)
    assert all(j < 2 for j in by_cover)


def test_fit_reach_budget_and_spread():
    rng = random.Random(3)
    M = 16
    entries, origins, orders, keys = [], [], [], []
    for b in range(1, 6):
        pts = _entry(rng, 40, 2)
        floors = [p[2] + (M - 1) * p[0] + p[3] for p in pts]
        order, key = reach.reach_order(pts, floors, max(floors) * 0.98, True, len(pts), M)
        entries.append({"b": b, "bw": 1e9, "points": [[p[4], p[0], p[1], p[2], p[3], list(p[5])]
                                                      for p in pts]})
        origins.append([("in", b, j) for j in range(len(pts))])
        orders.append(order)
        keys.append(key)
    budget = 3000
    outs, outo, keeps, live = reach.fit_reach(entries, origins, orders, keys, budget)
    size = sum(len(json.dumps(e, separators=(",", ":"))) + 1 for e in outs)
    assert size <= budget
    assert len(outs) == len(live) == len(keeps) >= 1
    for e, o, kp, i in zip(outs, outo, keeps, live):
        assert kp == sorted(kp) and len(set(kp)) == len(kp)
        assert e["points"] == [entries[i]["points"][j] for j in kp]
        assert o == [origins[i][j] for j in kp]
        # each entry keeps a prefix of its order
        assert set(kp) == set(orders[i][:len(kp)])
    # the first point of every entry reaches at least one point (itself): level 0 first
    big = reach.fit_reach(entries, origins, orders, keys, 10 ** 6)
    assert [len(k) for k in big[2]] == [len(o) for o in orders]


def test_stand_in_is_the_cover_shift():
    rng = random.Random(11)
    pts = [p for p in _entry(rng, 50, 1)]
    V, W, _group = cover._rows(pts, True)
    D = reach._stand_in(V, W, 24)
    for a in range(len(pts)):
        assert np.allclose(D[a], cover.shift(V, W, a, 24), rtol=0, atol=1e-12)


def test_first_point_is_kept_first():
    rng = random.Random(5)
    pts = _entry(rng, 30, 2)
    floors = [p[2] + 31 * p[0] + p[3] for p in pts]
    for first in (0, 7, 29):
        order, _keys = reach.reach_order(pts, floors, max(floors), True, 1, 32, first)
        assert order == [first]


def test_a_group_past_the_cap_orders_every_point(monkeypatch):
    monkeypatch.setattr(reach, "GROUP_CAP", 10)
    rng = random.Random(8)
    pts = _entry(rng, 40, 1)
    floors = [p[2] + 15 * p[0] + p[3] for p in pts]
    first = int(np.argmax(floors))
    order, keys = reach.reach_order(pts, floors, max(floors) + 0.1, True, len(pts), 16, first)
    assert sorted(order) == list(range(len(pts))) and order[0] == first
    tail = order[10:]  # past the cap: by floor
    assert [floors[j] for j in tail] == sorted(floors[j] for j in tail)
