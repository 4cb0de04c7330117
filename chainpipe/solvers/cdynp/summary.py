"""State summaries: Pareto frontiers of partial plans, and their compression.

A *point* is the cost of a partial plan covering a suffix of the layers:
``r`` (stages in the suffix, capped: fewer is never worse, since 1F1B memory
only grows with the position of a stage), ``bottleneck`` (max of its stage
compute times and link occupancies) and ``total`` (sum of its stage compute
times and boundary traversals). Prepending stages maps a point through
``max(bottleneck, c)`` and ``total + c'`` which are monotone, so a point that
is no better in all three coordinates than another can be dropped: the
frontier keeps exactly the non-dominated points.

Compression keeps a frontier small at a bounded price:

* ``epsilon``: a point is dropped when a kept point has ``r' <= r``,
  ``bottleneck' <= (1 + eps) bottleneck`` and ``total' <= (1 + eps) total``.
  ``max(x, c) <= (1+eps) max(x/(1+eps), c)`` and the same for sums, so every
  completion of the dropped point costs at most ``1 + eps`` times more through
  the kept one;
* ``quantum``: every emitted value is rounded *up* to the grid ``(1+q)^n``,
  an over-estimate by a factor of at most ``1 + q`` (it also blurs the values
  that cross a DC's boundary, see ``docs/privacy.md``);
* ``digits``: every emitted value is rounded *up* to that many significant
  decimal digits (a factor below ``1 + 10^(1 - digits)``), which shortens the
  JSON numbers of a summary several times over;
* ``max_entries``: at most that many points per summary entry, those with the
  smallest ``total + (M - 1) bottleneck`` (no guarantee).
"""

from __future__ import annotations

import math

import numpy as np


def pareto_mask(r: np.ndarray, bn: np.ndarray, sm: np.ndarray,
                group: np.ndarray | None = None) -> np.ndarray:
    """Boolean mask of the non-dominated points (minimising ``r``, ``bn``, ``sm``).

    With ``group``, points are compared only within their group. Exact
    duplicates keep one. Vectorised: points sorted by ``(group, bn, sm, r)``;
    point ``i`` is dominated iff an earlier point of its group has ``r <= r_i``
    and ``sm <= sm_i``, found with one running minimum per distinct ``r``
    over integer ranks (no floating-point offsets, so the test is exact).
    """
    n = len(bn)
    if n <= 1:
        return np.ones(n, dtype=bool)
    if n <= _SMALL:
        return _pareto_mask_small(r, bn, sm, group)
    if group is None:
        order = np.lexsort((r, sm, bn))
    else:
        order = np.lexsort((r, sm, bn, group))
    rr = r[order]
    # ranks of sm; a stable sort ranks an earlier point of equal sm lower, which is
    # what "an earlier point with sm <= sm_i" needs
    key = np.empty(n, dtype=np.int64)
    key[np.argsort(sm[order], kind="stable")] = np.arange(n)
    if group is None:
        big = np.int64(n + 1)
    else:
        # segment offsets decrease along the order, so an earlier group never
        # looks better than any point of a later group
        gs = group[order]
        gd = np.zeros(n, dtype=np.int64)
        np.cumsum(gs[1:] != gs[:-1], out=gd[1:])
        ng = int(gd[-1]) + 1
        key += (ng - gd) * (n + 1)
        big = np.int64((ng + 2) * (n + 1))
    dominated = _exclusive_min(key, big) <= key
    rmax = rr.max()
    if rr.min() != rmax:
        # points with fewer stages must only be compared with points of no more stages
        for rho in np.unique(rr)[:-1]:
            sel = rr == rho
            prev = _exclusive_min(np.where(rr <= rho, key, big), big)
            dominated[sel] = prev[sel] <= key[sel]
    keep = np.zeros(n, dtype=bool)
    keep[order[~dominated]] = True
    return keep


#: below this many points a plain loop beats the vectorised filter's fixed cost
_SMALL = 48


def _pareto_mask_small(r, bn, sm, group) -> np.ndarray:
    """:func:`pareto_mask` for a few points: the same order, the same test, a loop."""
    rl, bl, sl = r.tolist(), bn.tolist(), sm.tolist()
    gl = group.tolist() if group is not None else [0] * len(rl)
    order = sorted(range(len(rl)), key=lambda i: (gl[i], bl[i], sl[i], rl[i]))
    keep = np.zeros(len(rl), dtype=bool)
    kept: list = []
    current = None
    for i in order:
        if gl[i] != current:
            current, kept = gl[i], []
        ri, si = rl[i], sl[i]
        for kr, ks in kept:
            if kr <= ri and ks <= si:
                break
        else:
            keep[i] = True
            kept.append((ri, si))
    return keep


def _exclusive_min(values: np.ndarray, big) -> np.ndarray:
    prev = np.empty(len(values), dtype=values.dtype)
    prev[0] = big
    if len(values) > 1:
        prev[1:] = np.minimum.accumulate(values)[:-1]
    return prev


def epsilon_mask(r: np.ndarray, bn: np.ndarray, sm: np.ndarray, eps: float) -> np.ndarray:
    """Points kept by epsilon-dominance pruning; every dropped point is
    ``(1 + eps)``-dominated by a kept one with no more stages."""
    n = len(bn)
    keep = np.zeros(n, dtype=bool)
    if n == 0 or eps <= 0:
        keep[:] = True
        return keep
    f = 1.0 + eps
    order = np.lexsort((sm, bn, r))
    kr, kb, ks = [], [], []
    for i in order:
        dominated = False
        for j in range(len(kr)):
            if kr[j] <= r[i] and kb[j] <= f * bn[i] and ks[j] <= f * sm[i]:
                dominated = True
                break
        if not dominated:
            keep[i] = True
            kr.append(r[i])
            kb.append(bn[i])
            ks.append(sm[i])
    return keep


def round_up(values: np.ndarray, quantum: float) -> np.ndarray:
    """Each value rounded up to the geometric grid ``(1 + quantum)^n`` (0 stays 0)."""
    if quantum <= 0:
        return values
    lg = math.log1p(quantum)
    out = np.array(values, dtype=float)
    pos = out > 0
    k = np.ceil(np.log(out[pos]) / lg - 1e-12)
    up = np.exp(k * lg)
    # guard against exp/log rounding below the value
    out[pos] = np.maximum(up, out[pos])
    return out


def cap_mask(bn: np.ndarray, sm: np.ndarray, microbatches: int, max_entries: int) -> np.ndarray:
    """The ``max_entries`` points with the smallest ``total + (M - 1) bottleneck``."""
    keep = np.zeros(len(bn), dtype=bool)
    if max_entries <= 0 or len(bn) <= max_entries:
        keep[:] = True
        return keep
    proxy = sm + (microbatches - 1) * bn
    keep[np.argsort(proxy, kind="stable")[:max_entries]] = True
    return keep


def round_digits(values: np.ndarray, digits: int) -> np.ndarray:
    """Each value rounded up to ``digits`` significant decimal digits (short JSON reprs).

    The result is the smallest ``m * 10^k`` (``m`` a ``digits``-digit integer)
    that is ``>= value``, computed as a correctly rounded float so that its
    shortest repr is the short decimal.
    """
    if digits <= 0:
        return values
    out = np.array(values, dtype=float)
    pos = (out > 0) & np.isfinite(out)
    v = out[pos]
    if not len(v):
        return out
    k = np.floor(np.log10(v)).astype(np.int64) - (digits - 1)  # grid unit 10^k
    up = np.power(10.0, np.abs(k).astype(float))  # exact for |k| <= 22

    def on_grid(m):
        return np.where(k >= 0, m * up, m / up)

    with np.errstate(over="ignore"):
        m = np.floor(np.where(k >= 0, v / up, v * up)) - 1
    best = np.full(len(v), np.inf)
    for step in range(4):  # the first grid value >= v among m-1 .. m+2
        x = on_grid(m + step)
        best = np.where((x >= v) & (x < best), x, best)
    out[pos] = best
    return out
