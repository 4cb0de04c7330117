"""The version-3 search's sorts of a layer's labels give the orders the stable sorts
they replaced gave: ``period_kernel.lex_order`` (by state, then period, then fill, ties
in the order gathered) and ``period_kernel.by_raised_period`` (each state's labels by
their period raised to the state's floor, then fill)."""

import numpy as np
import pytest

from chainpipe.solvers import period_kernel


@pytest.fixture(scope="module")
def jit():
    return period_kernel.UNIT.jit()


@pytest.mark.parametrize("seed", range(4))
def test_lex_order_is_the_three_stable_sorts(jit, seed):
    rng = np.random.default_rng(seed)
    for n in [0, 1, 2, 15, 16, 17, 33, 100, 517]:
        state = rng.integers(0, 6, n).astype(np.int64)
        period = rng.choice([0.25, 0.5, 0.75, np.inf], n)  # ties on every key
        fill = rng.choice([1.0, 2.0, 3.0], n)
        o = np.argsort(fill, kind="mergesort")
        o = o[np.argsort(period[o], kind="mergesort")]
        o = o[np.argsort(state[o], kind="mergesort")]
        assert np.array_equal(jit.lex_order(state, period, fill), o)


def _by_raised_period(ids, S, starts, floors):
    """The two stable sorts per state: by fill, then by the period raised to the floor."""
    for s in range(len(starts) - 1):
        lo, hi = starts[s], starts[s + 1]
        if hi - lo < 2 or S[lo, 0] + S[lo, 1] >= floors[s]:
            continue
        o = np.argsort(S[lo:hi, 2], kind="mergesort")
        raised = np.maximum(S[lo + o, 0] + S[lo + o, 1], floors[s])
        o = o[np.argsort(raised, kind="mergesort")] + lo
        ids[lo:hi], S[lo:hi] = ids[o], S[o]


@pytest.mark.parametrize("seed", range(4))
def test_by_raised_period_is_the_two_stable_sorts(jit, seed):
    rng = np.random.default_rng(seed)
    for _ in range(50):
        n, ns = int(rng.integers(1, 80)), int(rng.integers(1, 6))
        starts = np.concatenate(([0], np.sort(rng.integers(0, n + 1, ns - 1)), [n]))
        S = np.zeros((n, 5))
        S[:, 0], S[:, 1] = rng.choice([0.1, 0.2, 0.3, 0.4], n), rng.choice([0.0, 0.05], n)
        S[:, 2], S[:, 3] = rng.choice([1.0, 2.0, 3.0], n), rng.random(n)
        for s in range(ns):  # each state's labels by period, then fill
            lo, hi = starts[s], starts[s + 1]
            S[lo:hi] = S[lo + np.lexsort((S[lo:hi, 2], S[lo:hi, 0] + S[lo:hi, 1]))]
        floors = rng.choice([0.0, 0.2, 0.3, 0.5], ns)
        want_ids, want_S = np.arange(n), S.copy()
        _by_raised_period(want_ids, want_S, starts, floors)
        ids, got_S = np.arange(n), S.copy()
        jit.by_raised_period(ids, got_S, starts.astype(np.int64), floors)
        assert np.array_equal(ids, want_ids) and np.array_equal(got_S, want_S)
