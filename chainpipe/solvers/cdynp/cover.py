"""Covering selection of a compressed summary's period points (``max_entries``).

The cap used to keep per entry the points of the least estimated ``T`` of a whole plan
(:func:`.period.cap_estimates`), which on ``v3-large-01`` ranks hundreds of points of an
entry above the optimum's (``docs/privacy.md``, "Compression under version 3"). A
*cover* keeps instead points spread over the entry's front: point ``a`` covers ``b``
within ``delta`` seconds when they have the same stage count under 1F1B and windows as
many, and every completion through ``a`` costs at most ``delta`` more than the same
completion through ``b`` (:func:`shift` bounds it from the two points alone).

:func:`cover_order` orders an entry's points greedily, farthest first (the point the kept
ones cover worst comes next), from the point of the least estimate, and gives the
``delta`` within which each prefix of that order covers the entry; :func:`fit_cover`
spreads a summary's byte budget over its entries, adding next the point of the entry
covered worst, so that the largest ``delta`` over the entries is as small as the greedy
makes it.
"""

from __future__ import annotations

import json
import math

import numpy as np

from .summary import SUMMARY_BUDGET


def _rows(points: list, same_p: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(V, W, group)``: per point ``(x1, x2, total, sync)``; its windows, window ``j``
    over ``j + 2`` (its weight in a loop it closes; padded with 0, a group's points have
    as many); and a group id (points of different groups never cover one another: the
    stage count under 1F1B, the number of windows)."""
    width = max((len(p[5]) for p in points), default=0)
    V = np.array([p[:4] for p in points], dtype=float).reshape(-1, 4)
    W = np.zeros((len(points), width))
    keys: dict[tuple, int] = {}
    group = np.empty(len(points), dtype=np.int64)
    for i, p in enumerate(points):
        W[i, :len(p[5])] = p[5]
        group[i] = keys.setdefault((p[4] if same_p else 0, len(p[5])), len(keys))
    return V, W / np.arange(2, width + 2), group


def shift(V: np.ndarray, W: np.ndarray, j: int, M: int) -> np.ndarray:
    """Per point ``i`` (rows of :func:`_rows`), a bound on how much more than ``i`` point
    ``j`` costs in any completion: ``(M - 1)(max(x1_j - x1_i, max_w (W_jw - W_iw) / (w +
    2))^+ + (x2_j - x2_i)^+) + (total_j - total_i)^+ + (sync_j - sync_i)^+``. The period
    through ``j`` exceeds the one through ``i`` by at most the first maximum (a stage of
    the suffix, or a loop a prepended stage closes over window ``w``, ``(c + q + W_w) /
    (w + 2)``, its divisor only growing as more stages are prepended), the total by the
    totals' difference, the synchronisation by the syncs'; prepending keeps each of
    these differences or shrinks it, and ``T = total + (M - 1)(x1 + x2) + sync``.
    ``j`` may be an array of indices: then one row per index."""
    d = np.maximum(V[j][..., None, :] - V, 0.0)
    per = d[..., 0]
    if W.shape[1]:
        per = np.maximum(per, np.max(W[j][..., None, :] - W, axis=-1))
    return (M - 1) * (per + d[..., 1]) + d[..., 2] + d[..., 3]


def cover_order(points: list, first: int, same_p: bool, limit: int, M: int
                ) -> tuple[list, list]:
    """The greedy farthest-first order of an entry's points under :func:`shift`, from
    ``first``.

    Parameters
    ----------
    points : list
        ``(x1, x2, total, sync, p, windows, ...)`` of one summary entry.
    first : int
        The index of the point to start from (the least estimate's).
    same_p : bool
        Whether points must have the same stage count to cover one another (1F1B).
    limit : int
        At most this many points are ordered.
    M : int
        The run's microbatches.

    Returns
    -------
    tuple
        ``(order, radii)``: the indices in the order chosen, and ``radii[n]`` the least
        ``delta`` (seconds of ``T``) within which the first ``n + 1`` points of
        ``order`` cover every point of the entry (``inf`` while a group has none kept;
        0 once every point is kept or covered exactly).
    """
    n = len(points)
    if n == 0:
        return [], []
    V, W, group = _rows(points, same_p)
    gap = np.full(n, math.inf)  # per point: the least shift by which a kept one covers it
    order, radii = [], []
    j = first
    while True:
        order.append(j)
        same = group == group[j]
        gap = np.where(same, np.minimum(gap, shift(V, W, j, M)), gap)
        gap[j] = -math.inf
        worst = int(np.argmax(gap))
        top = float(gap[worst])
        radii.append(max(top, 0.0))
        if len(order) >= min(limit, n) or top <= 0:
            break
        j = worst
    return order, radii


def fit_cover(entries: list[dict], origins: list, orders: list[list], radii: list[list],
              budget: int = SUMMARY_BUDGET) -> tuple[list, list, list, list]:
    """A compressed summary's entries cut to ``budget`` bytes of compact JSON: every entry
    keeps the first point of its order ``orders[e]`` (:func:`cover_order`, with its
    ``radii[e]``); then, while the bytes allow, the entry covered worst (the largest
    ``radii[e][n_e - 1]`` of its ``n_e`` kept points) gains its next point, an entry whose
    next point no longer fits dropping out. Entries whose first points alone exceed the
    budget are left to :func:`.summary.fit_budget`.

    Returns
    -------
    tuple
        ``(entries, origins, keeps, realised)``: the points kept in their entries' order,
        ``keeps[e]`` their indices (ascending), ``realised[e]`` the ``delta`` within which
        entry ``e``'s kept points cover the points it was given.
    """
    def size(obj) -> int:
        return len(json.dumps(obj, separators=(",", ":")))

    kept = [min(1, len(o)) for o in orders]
    total = sum(size({**e, "points": [e["points"][j] for j in o[:k]]}) + 1
                for e, o, k in zip(entries, orders, kept))
    live = {e for e in range(len(entries)) if 0 < kept[e] < len(orders[e])}
    while live:
        r, e = max((radii[e][kept[e] - 1], e) for e in live)
        if r <= 0.0:
            break
        add = size(entries[e]["points"][orders[e][kept[e]]]) + 1
        if total + add > budget:
            live.discard(e)
            continue
        total += add
        kept[e] += 1
        if kept[e] == len(orders[e]):
            live.discard(e)
    keeps = [sorted(o[:k]) for o, k in zip(orders, kept)]
    outs = [{**e, "points": [e["points"][j] for j in js]} for e, js in zip(entries, keeps)]
    outo = [[o[j] for j in js] for o, js in zip(origins, keeps)]
    realised = [radii[e][k - 1] if k else math.inf for e, k in enumerate(kept)]
    return outs, outo, keeps, realised
