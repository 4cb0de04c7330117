"""The compiled filters of ``chainpipe.solvers.label_kernel`` against their definitions
(``docs/dp.md``, "The compiled kernel"), on small random layers with many ties: the
plain rule within a state (of equal labels the first), the shifted rule, the rule across
the states of a datacenter, and the front of several states for the moves into an
earlier datacenter (``union_front``)."""

import numpy as np
import pytest

from chainpipe.solvers import label_kernel


def _beats(a, b, steady):
    """The shifted rule (``label_kernel._shifted_beats``) on tuples ``(mx, sm, p, r)``."""
    if a[2] > b[2]:
        return False
    shift = steady * (a[0] - b[0]) if steady > 0 and a[0] > b[0] else 0.0
    return a[1] + shift + max(a[3] - b[3], 0.0) <= b[1]


def _within(labels, shifted, steady):
    """A state's labels (tuples, in order) that the rules within a state keep."""
    kept = [x for n, x in enumerate(labels)
            if not any(all(y[c] <= x[c] for c in range(4)) and (y != x or m < n)
                       for m, y in enumerate(labels) if m != n)]
    kept.sort(key=lambda x: (x[0], x[1]))
    if not shifted:
        return kept
    return [x for b, x in enumerate(kept)
            if not any(_beats(y, x, steady) and (a < b or not _beats(x, y, steady))
                       for a, y in enumerate(kept) if a != b)]


def _layer(rng, n, n_states, groups):
    """Random labels of a layer: few distinct values (ties), distinct states (a DC and
    its devices in use) over two DCs."""
    mx = rng.integers(0, 4, n).astype(float) / 2
    sm = rng.integers(0, 6, n).astype(float) / 4
    p = rng.integers(0, 3, n)
    r = rng.integers(0, 3, n).astype(float) / 8
    state = rng.integers(0, n_states, n)
    every = np.array(np.meshgrid(*[range(2)] + [range(3)] * groups)).reshape(groups + 1, -1).T
    chosen = every[rng.choice(len(every), n_states, replace=False)]
    return mx, sm, p, r, state, chosen[:, 1:].copy(), chosen[:, 0].copy()


@pytest.mark.parametrize("shifted", [False, True])
def test_filter_states_matches_the_rules(shifted):
    rng = np.random.default_rng(7 + shifted)
    steady = 3
    for _ in range(150):
        n_states = int(rng.integers(1, 7))
        mx, sm, p, r, state, usage, dc = _layer(rng, int(rng.integers(1, 40)), n_states, 2)
        keep, starts, _kill, _lts = label_kernel.filter_states(mx, sm, p, r, state, usage, dc,
                                                               shifted, steady)
        rows = [(mx[e], sm[e], float(p[e]), r[e]) for e in range(len(mx))]
        within = {s: _within([rows[e] for e in range(len(rows)) if state[e] == s], shifted,
                             steady) for s in range(n_states)}
        for s in range(n_states):
            want = [x for x in within[s] if not any(
                t != s and dc[t] == dc[s] and (usage[t] <= usage[s]).all()
                and all(y[c] <= x[c] for c in range(4)) for t in within for y in within[t])]
            got = [rows[e] for e in keep[starts[s]:starts[s + 1]]]
            assert sorted(got) == sorted(want)
            assert got == sorted(got, key=lambda x: (x[0], x[1]))


def test_union_front_matches_the_rules():
    rng = np.random.default_rng(3)
    steady = 3
    for _ in range(150):
        n = int(rng.integers(1, 40))
        mx, sm, p, r, _state, _usage, _dc = _layer(rng, n, 1, 1)
        X = np.column_stack((mx, sm, p.astype(float), r, sm + steady * mx, np.full(n, n)))
        for shifted in (False, True):
            rows, kept = label_kernel.union_front(X, shifted, steady)
            got = [tuple(x) for x in rows[:, :4]]
            want = _within([tuple(x) for x in X[:, :4]], shifted, steady)
            assert sorted(got) == sorted(want)
            assert (X[kept, :5] == rows[:, :5]).all()
            for a in range(len(rows)):  # the killer: the first later label no worse once
                kill = int(rows[a, 5])  # both are lifted to one bottleneck
                later = [b for b in range(a + 1, len(rows)) if rows[b, 2] <= rows[a, 2]
                         and rows[b, 1] + max(rows[b, 3] - rows[a, 3], 0.0) <= rows[a, 1]]
                assert kill == (later[0] if shifted and later else len(rows))


def test_chain_floors_stay_below_the_brute_force_optimum():
    """The floors by position (``dp.ChainCapacity``) against optimal plans: the whole
    chain's floor is at most the optimum's bottleneck, and the floor of each prefix of
    the optimum (the DCs before its stage's and the devices that stage and the later
    ones leave free there, its stages at the positions after) at most that prefix's
    largest ``C``."""
    from chainpipe.solvers import dp
    from chainpipe.tables import CostTables
    from helpers import brute_force_hybrid, random_hybrid_instance, stage_figures

    checked = 0
    for seed in range(400):
        inst = random_hybrid_instance(seed, max_layers=5)
        tables = CostTables(inst)
        if tables.schedule == "gpipe" or tables.M < 2 or tables.infeasibility_reason():
            continue
        T, stages = brute_force_hybrid(inst)
        if stages is None:
            continue
        figures = stage_figures(tables, stages)
        chain = dp.ChainCapacity(tables, dp.usage_caps(tables), lambda: None)
        bottleneck = max(c for _, _, c in figures)
        total = float(tables.flop_prefix[-1])
        assert chain.bottleneck(1e-3 * bottleneck, total) <= bottleneck * (1 + 1e-12)
        chain.set_grid(np.geomspace(1e-3 * bottleneck, 10 * bottleneck, 120))
        for j in range(1, len(stages)):  # stage j, with p = S - j - 1 stages after it
            k0, a = stages[j][2], stages[j][0]
            used = {g: 0 for g in range(tables.G) if tables.groups[g].dc == k0}
            for (g, w, _), st in zip(figures[j:], stages[j:]):
                if st[2] == k0:
                    used[g] += w
            free = [(g, int(tables.count[g]) - n) for g, n in used.items()]
            q = len(stages) - j  # the prefix's positions: p + 2 and on (0-based p + 1)
            floor = chain.prefix_floors(k0, free, q, tables.flop_prefix[a:a + 1])[0]
            assert floor <= max(c for _, _, c in figures[:j]) * (1 + 1e-12), (seed, j)
        checked += 1
    assert checked >= 40
