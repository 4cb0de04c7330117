"""The shared Pareto filters of dp and the CDynP agents, against pairwise dominance."""

from __future__ import annotations

import random

import pytest

from chainpipe.solvers import labels


def _random_layer(rng: random.Random, n_states: int, width: int) -> dict:
    states = {}
    while len(states) < n_states:
        u = tuple(rng.randint(0, 3) for _ in range(width))
        # few distinct values, so ties are common; labels within a state are Pareto already
        labs = [(float(rng.randint(1, 6)), float(rng.randint(1, 6)), rng.randint(0, 3), None)
                for _ in range(rng.randint(1, 6))]
        states[(0, u)] = labels.pareto3(labs, 3)
    return states


def _survivors_by_pairs(layer: dict) -> set:
    """Labels no label of another state with no more devices dominates (ties: the state
    with fewer devices in all, then the earlier sort position, keeps its label)."""
    rows = [(lab[0], lab[1], lab[2], key, i) for key in layer for i, lab in enumerate(layer[key])]
    rows.sort(key=lambda r: (r[0], r[1], r[2], sum(r[3][1])))
    kept = set()
    for j, (bn, sm, p, key, i) in enumerate(rows):
        if any(all(a <= b for a, b in zip(k2[1], key[1])) and b2 <= bn and s2 <= sm and p2 <= p
               and (k2, i2) in kept for b2, s2, p2, k2, i2 in rows[:j]):
            continue
        kept.add((key, i))
    return {(key, layer[key][i][:3]) for key, i in kept}


@pytest.mark.parametrize("n_states", [2, 5, 40, 70, 120])
@pytest.mark.parametrize("seed", range(6))
def test_across_usage_keeps_exactly_the_undominated(n_states, seed):
    rng = random.Random(seed * 1000 + n_states)
    width = 4 if n_states > 60 else 3
    layer = _random_layer(rng, n_states, width)
    expect = _survivors_by_pairs(layer)
    labels.across_usage(layer)
    got = {(key, lab[:3]) for key, labs in layer.items() for lab in labs}
    assert got == expect


def _random_sync_layer(rng: random.Random, n_states: int, width: int) -> dict:
    states = {}
    while len(states) < n_states:
        u = tuple(rng.randint(0, 3) for _ in range(width))
        labs = [(float(rng.randint(1, 6)), float(rng.randint(1, 6)), rng.randint(0, 3),
                 float(rng.randint(0, 4)), None) for _ in range(rng.randint(1, 8))]
        states[(0, u)] = labels.pareto4(labs)
    return states


def _sync_survivors_by_pairs(layer: dict) -> set:
    """As :func:`_survivors_by_pairs` with the synchronisation a fourth criterion."""
    rows = [(lab[:4], key, i) for key in layer for i, lab in enumerate(layer[key])]
    rows.sort(key=lambda r: (r[0], sum(r[1][1])))
    kept = set()
    for j, (lab, key, i) in enumerate(rows):
        if any(all(a <= b for a, b in zip(k2[1], key[1])) and all(x <= y for x, y in zip(l2, lab))
               and (k2, i2) in kept for l2, k2, i2 in rows[:j]):
            continue
        kept.add((key, i))
    return {(key, layer[key][i][:4]) for key, i in kept}


@pytest.mark.parametrize("n_states", [2, 5, 40, 70, 120])
@pytest.mark.parametrize("seed", range(4))
def test_across_usage_with_sync_keeps_exactly_the_undominated(n_states, seed):
    # more than one block of rows (labels._BLOCK) from 70 states on
    rng = random.Random(seed * 1000 + n_states + 7)
    layer = _random_sync_layer(rng, n_states, 4 if n_states > 60 else 3)
    expect = _sync_survivors_by_pairs(layer)
    labels.across_usage(layer, sync=True)
    got = {(key, lab[:4]) for key, labs in layer.items() for lab in labs}
    assert got == expect


def test_pareto3_respects_stage_counts():
    labs = [(1.0, 5.0, 2, "a"), (1.0, 5.0, 1, "b"), (2.0, 4.0, 3, "c"), (3.0, 4.0, 0, "d")]
    assert [lab[3] for lab in labels.pareto3(labs, 3)] == ["b", "c", "d"]


def _killers_by_pairs(labs: list) -> list:
    """The first later label that dominates each once both share a bottleneck: no more
    stages, and a sum no larger even after paying for a larger synchronisation."""
    n = len(labs)
    out = []
    for j, (_mx, sm, p, r) in enumerate(labs):
        out.append(next((i for i in range(j + 1, n)
                         if labs[i][2] <= p and labs[i][1] + max(labs[i][3] - r, 0.0) <= sm),
                        n))
    return out


@pytest.mark.parametrize("n", [1, 2, 7, 15, 16, 40])
@pytest.mark.parametrize("seed", range(5))
def test_killers_is_the_first_later_dominator(n, seed):
    rng = random.Random(seed * 100 + n)
    # few distinct values, so ties are common; ordered by bottleneck as the DP keeps them
    labs = sorted((float(rng.randint(1, 5)), float(rng.randint(1, 8)), rng.randint(0, 3),
                   float(rng.randint(0, 3))) for _ in range(n))
    assert labels.killers(labs) == _killers_by_pairs(labs)


def _shifted_by_pairs(mx, sm, p, r, steady) -> list[int]:
    """The shifted rule's survivors of labels ``0..n-1`` listed in that order, every pair
    tried: ``i`` removes ``j`` when it beats it and is listed first or not beaten back."""
    def beats(i, j):
        shift = steady * (mx[i] - mx[j]) if steady > 0 and mx[i] > mx[j] else 0.0
        return p[i] <= p[j] and sm[i] + shift + max(r[i] - r[j], 0.0) <= sm[j]

    n = len(mx)
    return [j for j in range(n) if not any(
        i != j and beats(i, j) and (i < j or not beats(j, i)) for i in range(n))]


@pytest.mark.parametrize("seed", range(40))
def test_kernel_shifted_rule_keeps_what_every_pair_keeps(seed):
    """``label_kernel._pareto_group`` with the shifted rule (tried only against labels of
    no larger fill) keeps exactly what the pairwise rule keeps of its Pareto labels in
    their order, ties and labels beating each other back included."""
    import numpy as np

    from chainpipe.solvers import label_kernel

    rng = random.Random(seed)
    n = rng.randint(1, 60)
    mx = np.array([float(rng.randint(1, 5)) for _ in range(n)])
    sm = np.array([float(rng.randint(1, 8)) for _ in range(n)])
    p = np.array([rng.randint(0, 2) for _ in range(n)], dtype=np.int64)
    r = np.array([float(rng.choice([0, 0, 1, 2])) for _ in range(n)])
    idx = np.arange(n, dtype=np.int64)
    buf = np.empty(n, dtype=np.int64)
    for steady in (0, 1, 3):
        plain = label_kernel._pareto_group(idx, mx, sm, p, r, False, steady, buf)
        got = label_kernel._pareto_group(idx, mx, sm, p, r, True, steady, buf)
        keep = _shifted_by_pairs(mx[plain], sm[plain], p[plain], r[plain], steady)
        assert got.tolist() == plain[keep].tolist(), (seed, steady)
