"""The version-3 search's one merge sort of a layer's labels (``period_kernel.lex_order``)
gives the order its three stable sorts gave: by state, then period, then fill, ties in
the order gathered."""

import numpy as np
import pytest

from chainpipe.solvers import period_kernel


@pytest.fixture(scope="module")
def lex_order():
    return period_kernel.UNIT.jit().lex_order


@pytest.mark.parametrize("seed", range(4))
def test_lex_order_is_the_three_stable_sorts(lex_order, seed):
    rng = np.random.default_rng(seed)
    for n in [0, 1, 2, 15, 16, 17, 33, 100, 517]:
        state = rng.integers(0, 6, n).astype(np.int64)
        period = rng.choice([0.25, 0.5, 0.75, np.inf], n)  # ties on every key
        fill = rng.choice([1.0, 2.0, 3.0], n)
        o = np.argsort(fill, kind="mergesort")
        o = o[np.argsort(period[o], kind="mergesort")]
        o = o[np.argsort(state[o], kind="mergesort")]
        assert np.array_equal(lex_order(state, period, fill), o)
