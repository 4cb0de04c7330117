"""A version-3 search state's floors, compiled (``period_kernel.prefix_floors`` and
``period_kernel.curve_rows``), equal the array formulas they replaced: the fill bound of
the free devices at the period cap (``tables.fill_breaks`` read by ``np.interp``), the
largest cap of the prefix curve under which a prefix cannot fit, and the curve's running
least ``CS``; and the prefix curve's rows of a state, grown as searches ask more caps,
equal those made at once."""

import numpy as np
import pytest

from chainpipe.instances.generator import generate
from chainpipe.solvers import period_kernel
from chainpipe.solvers.prefix_curve import PrefixCurve
from chainpipe.tables import CostTables, fill_breaks


def _random_state(rng, L=30, J=8):
    rates = np.sort(rng.uniform(0.5, 4.0, rng.integers(0, 6)))[::-1].copy()
    flop = np.concatenate(([0.0], np.cumsum(rng.uniform(0.0, 3.0, L))))
    pre_sum = flop / 9.0
    top = rng.uniform(0.0, 2.0, L + 1)
    top[0] = 0.0
    grid = np.cumprod(np.full(J, 1.1)) * 0.5
    walked = np.where(rng.random((L + 1, J)) < 0.4, np.inf, rng.uniform(0, 5, (L + 1, J)))
    walked[:, J // 2:] = np.where(rng.random((L + 1, J - J // 2)) < 0.8, 1.0,
                                  walked[:, J // 2:])  # most prefixes fit at large caps
    walked[0] = 0.0
    return rates, flop, pre_sum, top, grid, walked


def _old_floors(pre_sum, top, rates, cap, flop, walked, grid, caps):
    fill = pre_sum
    if cap > 0:
        x, y = fill_breaks(rates, cap)
        fill = np.maximum(fill, np.interp(flop, x, y))
    if caps:
        fits = np.isfinite(walked[:, :caps])
        first = np.where(fits.any(axis=1), fits.argmax(axis=1), caps)
        below = np.concatenate(([-np.inf], grid[:caps]))[first]
        below[0] = 0.0
        top = np.maximum(top, below)
    return fill, top


def _old_curve(walked, fill, grid, M1, caps):
    CF = walked[:, :caps]
    if len(grid) > caps:
        CF = np.concatenate((CF, fill[:, None]), axis=1)
    term = CF + M1 * np.concatenate(([0.0], grid[:-1]))
    term[:, 0] = np.inf
    return CF, np.minimum.accumulate(term[:, ::-1], axis=1)[:, ::-1]


@pytest.mark.parametrize("seed", range(6))
def test_a_states_floors_are_the_array_formulas(seed):
    rng = np.random.default_rng(seed)
    for _ in range(20):
        rates, flop, pre_sum, top, grid, walked = _random_state(rng)
        cap = float(rng.choice([0.0, 0.05, 0.3, 2.0]))  # 0: no cap, no fill bound
        # breakpoints hit exactly, and FLOP past the last one
        x = np.concatenate(([0.0], np.cumsum(cap * rates)))
        flop = np.sort(np.concatenate((flop[:-len(x)], x)))
        for caps in (0, 1, 3, len(grid)):
            fill, out = np.empty(len(flop)), np.empty(len(flop))
            period_kernel.prefix_floors(pre_sum, top, rates, cap, flop, walked, grid, caps,
                                        fill, out)
            want_fill, want_top = _old_floors(pre_sum, top, rates, cap, flop, walked, grid,
                                              caps)
            np.testing.assert_allclose(fill, want_fill, rtol=1e-12, atol=1e-15)
            np.testing.assert_array_equal(out, want_top)


@pytest.mark.parametrize("seed", range(4))
def test_a_states_curve_rows_are_the_array_formulas(seed):
    rng = np.random.default_rng(seed)
    for _ in range(20):
        _, _, fill, _, grid, walked = _random_state(rng)
        for caps, last in ((len(grid), False), (len(grid) - 1, True), (1, True)):
            g = np.append(grid[:caps], np.inf) if last else grid[:caps]
            CF, CS = np.empty((len(fill), len(g))), np.empty((len(fill), len(g)))
            period_kernel.curve_rows(walked, fill, g, 7, caps, CF, CS)
            want_CF, want_CS = _old_curve(walked, fill, g, 7, caps)
            np.testing.assert_array_equal(CF, want_CF)
            np.testing.assert_array_equal(CS, want_CS)


@pytest.mark.parametrize("seed", range(3))
def test_a_states_curve_rows_grown_equal_those_made_at_once(seed):
    inst = generate("hybrid", seed, version=3)
    tables = CostTables(inst)
    grown, once = (PrefixCurve(tables, 0, tables.K - 1, False, windows)
                   for windows in (True, True))
    grid = grown.grid(grown._layer_floor() * 24)
    assert len(grid) > 2, "the model fits under 24 times the slowest layer's least C"
    once.grid(once._layer_floor() * 24)
    for k0 in range(tables.K):
        usage = (0,) * int(np.sum(tables.group_dc == k0))
        for J in (1, 2, len(grid)):
            got = grown.rows(k0, usage, J)
            assert got.shape[1] >= J and got.flags.c_contiguous
        want = once.rows(k0, usage, len(grid))
        np.testing.assert_array_equal(grown.rows(k0, usage, len(grid))[:, :len(grid)], want)
        assert np.all(want[0] == 0.0)
