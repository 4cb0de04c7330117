"""GM(1,1) and its Markov-chain residual correction against hand-computed examples."""

from __future__ import annotations

import math

import pytest

from chainpipe.online.forecast import (
    LoadForecaster,
    fit_gm11,
    grey_markov_forecast,
    markov_correction,
)

#: the classical example of Deng's grey system theory (Liu & Lin, Grey Systems, ch. 7)
SERIES = [2.874, 3.278, 3.337, 3.390, 3.679]


def test_gm11_matches_the_normal_equations_worked_by_hand():
    # x1 = 2.874, 6.152, 9.489, 12.879, 16.558; z(k) = (x1(k) + x1(k-1)) / 2
    z = [4.513, 7.8205, 11.184, 14.7185]
    y = SERIES[1:]
    n = len(z)
    # least squares of y = -a z + b by Cramer's rule on the 2 x 2 normal equations
    szz, sz, sy, szy = sum(v * v for v in z), sum(z), sum(y), sum(a * b for a, b in zip(z, y))
    det = n * szz - sz * sz
    a = -(n * szy - sz * sy) / det
    b = (szz * sy - sz * szy) / det
    m = fit_gm11(SERIES)
    assert m.a == pytest.approx(a, rel=1e-12)
    assert m.b == pytest.approx(b, rel=1e-12)
    assert (round(m.a, 4), round(m.b, 4)) == (-0.0372, 3.0654)  # as published
    # x0^(k+1) = (1 - e^a) (x0(1) - b/a) e^(-a k)
    c = (1 - math.exp(a)) * (SERIES[0] - b / a)
    assert m.fitted(5)[1:] == pytest.approx([c * math.exp(-a * k) for k in (1, 2, 3, 4)])
    assert m.forecast(5) == pytest.approx(c * math.exp(-a * 5))
    assert m.fitted(5)[0] == SERIES[0]


def test_gm11_refuses_short_or_non_positive_series():
    with pytest.raises(ValueError, match="at least 4"):
        fit_gm11([1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="positive"):
        fit_gm11([1.0, 0.0, 3.0, 4.0])


def test_markov_correction_by_hand():
    # residuals alternate between two states: 1 -> 0 -> 1 -> 0; from state 0 the chain
    # went to 1 (once): the next state is 1, interval [0, 0.1], middle 0.05
    assert markov_correction([0.1, -0.1, 0.1, -0.1], states=2) == pytest.approx(0.05)
    # from state 1 the chain went to 0 twice: middle of [-0.1, 0] is -0.05
    assert markov_correction([-0.1, 0.1, -0.1, 0.1], states=2) == pytest.approx(-0.05)
    assert markov_correction([0.2, 0.2, 0.2]) == pytest.approx(0.2)
    assert markov_correction([0.3]) == 0.0


def test_grey_markov_forecast_corrects_the_grey_forecast_by_its_state():
    gm, gmm = grey_markov_forecast(SERIES, shift=0.0)
    m = fit_gm11(SERIES)
    fit = m.fitted(5)
    e = [(x - f) / f for x, f in zip(SERIES[1:], fit[1:])]
    assert gm == pytest.approx(m.forecast(5))
    assert gmm == pytest.approx(gm * (1 + markov_correction(e)))
    assert grey_markov_forecast([0.5] * 6) == (0.5, 0.5)


def test_forecaster_scores_each_forecast_against_the_next_value():
    f = LoadForecaster(window=8)
    values = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6]
    for v in values:
        f.observe({"x": v})
    errors = f.error_summary()
    assert errors["last-value"]["n"] == 2  # forecasts made after points 4 and 5
    assert errors["last-value"]["mae"] == pytest.approx(0.1)
    assert errors["gm11"]["n"] == 2
    assert 0.0 <= f.forecast("x", 0.0) <= 1.0
    assert f.forecast("unseen", 0.42) == 0.42
