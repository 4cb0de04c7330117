"""The states' rivals of the rule across states (:func:`.dp_period.rivals`), made by
numpy per DC, against the definition: states are tested per DC by devices used (ties in
the order given), and a state's rivals are the earlier ones of its DC that use no more
devices of any group, in the order tested."""

from __future__ import annotations

import itertools

import numpy as np

from chainpipe.solvers.dp_period import rivals


def _brute(keys: list) -> tuple[list, list]:
    """``(order, rivals per state)`` of ``keys`` by the definition, pair by pair."""
    dcs = list(dict.fromkeys(k[0] for k in keys))
    order = []
    for dc in dcs:
        mine = [s for s, k in enumerate(keys) if k[0] == dc]
        order += sorted(mine, key=lambda s: (sum(keys[s][1]), s))
    place = {s: i for i, s in enumerate(order)}
    out = []
    for s in order:
        dc, u = keys[s]
        out.append([r for r in order if keys[r][0] == dc and place[r] < place[s]
                    and all(x <= y for x, y in zip(keys[r][1], u))])
    return order, out


def test_rivals_are_the_definitions():
    rng = np.random.default_rng(11)
    for G in (1, 2, 3):
        every = list(itertools.product(range(4), repeat=G))
        for _ in range(60):
            keys = []
            for dc in rng.permutation(3)[:int(rng.integers(1, 4))]:
                pick = rng.permutation(len(every))[:int(rng.integers(1, min(len(every), 20) + 1))]
                keys += [(int(dc), every[i]) for i in pick]
            keys = [keys[i] for i in rng.permutation(len(keys))]
            order, ptr, rv = rivals(keys)
            want_order, want = _brute(keys)
            assert order.tolist() == want_order
            assert ptr.tolist() == np.cumsum([0] + [len(w) for w in want]).tolist()
            assert rv.tolist() == [r for w in want for r in w]


def test_no_states_no_rivals():
    order, ptr, rv = rivals([])
    assert len(order) == 0 and ptr.tolist() == [0] and len(rv) == 0
