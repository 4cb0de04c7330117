"""Load forecasting: the grey model GM(1,1) with a Markov-chain correction of its residuals.

GM(1,1) (Deng 1982) fits the accumulated series ``x1(k) = x0(1) + ... + x0(k)``
by the whitening equation ``dx1/dt + a x1 = b``: with background values
``z(k) = (x1(k) + x1(k-1)) / 2``, ``(a, b)`` is the least-squares solution of
``x0(k) = -a z(k) + b`` for ``k = 2..n``, and the forecast is

    x1^(k+1) = (x0(1) - b/a) exp(-a k) + b/a,     x0^(k+1) = x1^(k+1) - x1^(k).

The grey-Markov correction: the relative residuals ``e(k) = (x0(k) - x0^(k)) /
x0^(k)`` of the fit are cut into ``states`` equal intervals; the transitions
between consecutive residual states give a Markov chain, whose most likely
next state from the last one says by how much to scale the forecast: the
corrected value is ``x0^(n+1) * (1 + mid)``, ``mid`` the middle of that
state's interval. Loads are fractions that may be 0, so a forecaster shifts
them by 1 before fitting (GM(1,1) needs a positive series) and back after.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class GreyModel:
    """A fitted GM(1,1): development coefficient ``a``, grey input ``b``, first value ``x0``."""

    a: float
    b: float
    x0: float

    def accumulated(self, k) -> np.ndarray:
        """``x1^(k+1)`` for ``k = 0, 1, ...`` (``x1^(1) = x0(1)``)."""
        k = np.asarray(k, dtype=float)
        if abs(self.a) < 1e-12:  # the limit a -> 0: a straight line of slope b
            return self.x0 + self.b * k
        c = self.b / self.a
        return (self.x0 - c) * np.exp(-self.a * k) + c

    def fitted(self, n: int) -> np.ndarray:
        """``x0^(1..n)``: the model's values at the fitted points (``x0^(1) = x0(1)``)."""
        x1 = self.accumulated(np.arange(n))
        return np.concatenate(([self.x0], np.diff(x1)))

    def forecast(self, n: int, steps: int = 1) -> float:
        """``x0^(n + steps)`` for a series of ``n`` points."""
        x1 = self.accumulated([n + steps - 2, n + steps - 1])
        return float(x1[1] - x1[0])


def fit_gm11(series) -> GreyModel:
    """Fit GM(1,1) to a positive series of at least 4 points.

    Parameters
    ----------
    series : sequence of float
        ``x0(1..n)``, every value > 0.

    Returns
    -------
    GreyModel

    Raises
    ------
    ValueError
        For fewer than 4 points or a value <= 0.

    Examples
    --------
    >>> m = fit_gm11([2.874, 3.278, 3.337, 3.390, 3.679])
    >>> round(m.a, 4), round(m.b, 4)
    (-0.0372, 3.0654)
    """
    x0 = np.asarray(series, dtype=float)
    if x0.size < 4:
        raise ValueError("GM(1,1) needs at least 4 points")
    if not np.all(x0 > 0):
        raise ValueError("GM(1,1) needs a positive series")
    x1 = np.cumsum(x0)
    z = 0.5 * (x1[1:] + x1[:-1])
    B = np.column_stack((-z, np.ones_like(z)))
    (a, b), *_ = np.linalg.lstsq(B, x0[1:], rcond=None)
    return GreyModel(float(a), float(b), float(x0[0]))


def markov_correction(residuals, states: int = 3) -> float:
    """The relative correction for the next step from the residuals' Markov chain.

    Parameters
    ----------
    residuals : sequence of float
        Relative residuals ``e(k)``, oldest first (the first point's, always 0, left out).
    states : int
        Equal intervals between the smallest and the largest residual.

    Returns
    -------
    float
        The middle of the most likely next state's interval (0 with too few residuals
        or when they are all equal). Ties go to the state nearest the current one.
    """
    e = np.asarray(residuals, dtype=float)
    if e.size < 2:
        return 0.0
    lo, hi = float(e.min()), float(e.max())
    if hi - lo < 1e-12:
        return lo
    width = (hi - lo) / states
    idx = np.minimum(((e - lo) / width).astype(int), states - 1)
    counts = np.zeros((states, states))
    for i, j in zip(idx[:-1], idx[1:]):
        counts[i, j] += 1
    row = counts[idx[-1]]
    if row.sum() == 0:  # the last state was never left: stay in it
        nxt = int(idx[-1])
    else:
        best = np.flatnonzero(row == row.max())
        nxt = int(best[np.argmin(np.abs(best - idx[-1]))])
    return lo + (nxt + 0.5) * width


def grey_markov_forecast(series, states: int = 3, shift: float = 1.0) -> tuple[float, float]:
    """One-step forecasts ``(gm, gm_markov)`` of a non-negative series (at least 4 points).

    The series is shifted by ``shift`` before the fit and the forecasts back after;
    a series that is constant is forecast as that constant by both.
    """
    x = np.asarray(series, dtype=float) + shift
    if np.ptp(x) < 1e-12:
        return float(x[-1] - shift), float(x[-1] - shift)
    m = fit_gm11(x)
    n = x.size
    fit = m.fitted(n)
    residuals = (x[1:] - fit[1:]) / fit[1:]
    raw = m.forecast(n)
    if not math.isfinite(raw):
        raw = float(x[-1])
    corrected = raw * (1.0 + markov_correction(residuals, states))
    return raw - shift, corrected - shift


class LoadForecaster:
    """One-step forecasts of named load series, with their errors measured.

    Every :meth:`observe` adds the values seen now, scores the forecasts made
    at the previous observation against them (GM(1,1), grey-Markov, and the
    naive "same as last time" for reference) and forecasts the next values from
    the last ``window`` points.
    """

    def __init__(self, window: int = 8, states: int = 3):
        self.window = window
        self.states = states
        self.history: dict[str, list[float]] = {}
        self.pending: dict[str, tuple[float, float, float]] = {}
        self.errors = {"gm11": [], "gm11-markov": [], "last-value": []}

    def observe(self, values: dict[str, float]) -> None:
        """Record ``values`` (name -> load), score the pending forecasts, forecast again."""
        for name, v in values.items():
            if name in self.pending:
                gm, gmm, last = self.pending.pop(name)
                self.errors["gm11"].append(gm - v)
                self.errors["gm11-markov"].append(gmm - v)
                self.errors["last-value"].append(last - v)
            h = self.history.setdefault(name, [])
            h.append(v)
            del h[:-self.window]
            if len(h) >= 4:
                gm, gmm = grey_markov_forecast(h, self.states)
                self.pending[name] = (gm, gmm, v)

    def forecast(self, name: str, default: float) -> float:
        """The grey-Markov forecast of ``name`` for the next observation, clipped to [0, 1]
        (``default`` before 4 points were seen)."""
        if name not in self.pending:
            return default
        return min(1.0, max(0.0, self.pending[name][1]))

    def error_summary(self) -> dict[str, dict[str, float]]:
        """Per method: ``n``, mean absolute error ``mae`` and ``rmse`` of its forecasts."""
        out = {}
        for method, errs in self.errors.items():
            e = np.asarray(errs, dtype=float)
            out[method] = {"n": int(e.size),
                           "mae": float(np.mean(np.abs(e))) if e.size else math.nan,
                           "rmse": float(np.sqrt(np.mean(e * e))) if e.size else math.nan}
        return out
