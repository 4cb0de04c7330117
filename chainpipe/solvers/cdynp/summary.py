"""State summaries: Pareto frontiers of partial plans, and their compression.

A *point* is the cost of a partial plan covering a suffix of the layers:
``r`` (stages in the suffix, capped: fewer is never worse, since 1F1B memory
only grows with the position of a stage), ``bottleneck`` (max of its stage
compute times and link occupancies), ``total`` (sum of its stage compute
times and boundary traversals) and ``sync`` (the largest gradient
synchronisation ``R`` of its stages; 0 without data parallelism). Prepending
stages maps a point through ``max(bottleneck, c)``, ``total + c'`` and
``max(sync, c'')``, which are monotone, so a point that is no better in all four
coordinates than another can be dropped: the frontier keeps exactly the
non-dominated points.

Compression keeps a frontier small at a bounded price:

* ``epsilon``: a point is dropped when a kept point has ``r' <= r`` and
  each of ``bottleneck'``, ``total'``, ``sync'`` at most ``1 + eps`` times the
  dropped point's. ``max(x, c) <= (1+eps) max(x/(1+eps), c)`` and the same for
  sums, and ``T`` is a sum of such terms, so every completion of the dropped
  point costs at most ``1 + eps`` times more through the kept one;
* ``quantum``: every emitted value is rounded *up* to the grid ``(1+q)^n``,
  an over-estimate by a factor of at most ``1 + q`` (it also blurs the values
  that cross a DC's boundary, see ``docs/privacy.md``);
* ``digits``: every emitted value is rounded *up* to that many significant
  decimal digits (a factor below ``1 + 10^(1 - digits)``), which shortens the
  JSON numbers of a summary several times over;
* ``max_entries``: at most that many points per summary entry, those with the
  smallest ``T`` estimated for a whole plan: the boundary into the suffix paid, its
  total scaled by the model's FLOP over the suffix's (:func:`cap_keep`; no guarantee).
"""

from __future__ import annotations

import math

import numpy as np

from ... import cost
from ..labels import dominated_by_earlier, shifted_pareto

#: a point: ``(r, bottleneck, total, sync, ...)``; anything after ``sync`` rides along


def frontier(points: list, kept: list = ()) -> list[int]:
    """Indices (ascending) of the points not dominated in ``(r, bottleneck, total,
    sync)`` by another point or by one of ``kept`` (which are never dropped). Of exact
    duplicates the first is kept, and a point equal to a kept one is dropped.

    Points are visited by ``(bottleneck, total, r, sync)``, so a dominator comes first.
    Without synchronisation (every ``sync`` equal) ``least[r]`` is the least total seen
    with at most ``r`` stages; otherwise each point is checked against the kept ones.
    :func:`frontier_columns` gives the same indices from the points' columns.
    """
    if not points:
        return []
    if len({p[3] for p in points} | {p[3] for p in kept}) > 1:
        return _frontier4(points, kept)
    rows = [(p[1], p[2], p[0], 0, -1) for p in kept]
    rows += [(p[1], p[2], p[0], 1, i) for i, p in enumerate(points)]
    rows.sort()
    return _staircase(((sm, r, i if new else -1) for _bn, sm, r, new, i in rows),
                      max(row[2] for row in rows))


def _staircase(rows, top: int) -> list[int]:
    """The sweep of :func:`frontier` with one ``sync`` value: per row ``(total, r, i)``
    in dominance order, dropped when a row before it has ``r`` stages or fewer and a total
    no larger (``least[r]``: the least total seen with at most ``r`` stages); the indices
    ``i >= 0`` of the rows kept, ascending (``-1``: a kept point, never listed)."""
    least = [math.inf] * (top + 1)
    out = []
    for sm, r, i in rows:
        if least[r] <= sm:
            continue
        if i >= 0:
            out.append(i)
        for q in range(r, top + 1):
            if least[q] <= sm:
                break
            least[q] = sm
    out.sort()
    return out


def _frontier4(points: list, kept: list) -> list[int]:
    """:func:`frontier` with the synchronisation a fourth criterion: rows sorted by
    (bottleneck, total, r, sync), kept points first among equals, are checked against
    the earlier ones in numpy (:func:`chainpipe.solvers.labels.dominated_by_earlier`)."""
    rows = [(p[1], p[2], p[0], p[3], 0, -1) for p in kept]
    rows += [(p[1], p[2], p[0], p[3], 1, i) for i, p in enumerate(points)]
    rows.sort()
    table = np.array([row[1:4] for row in rows], dtype=float)
    dropped = dominated_by_earlier(table).tolist()
    return sorted(row[5] for row, drop in zip(rows, dropped) if row[4] and not drop)


def frontier_columns(r: np.ndarray, bottleneck: np.ndarray, total: np.ndarray,
                     sync: np.ndarray, kept: list = ()) -> np.ndarray:
    """:func:`frontier` of the points given as columns (floats, one entry per point,
    ``r`` whole numbers): the indices (ascending) of the points no other point and none
    of ``kept`` (points ``(r, bottleneck, total, sync, ...)``, never dropped) dominates.

    The rows, kept points first, are sorted by ``(bottleneck, total, r, sync)``, kept
    points first among equals and then by index (in numpy), so a dominator comes first;
    a row is dropped when an earlier one is no larger in ``total``, ``r`` and ``sync``:
    with one ``sync`` value by :func:`frontier`'s sweep over ``least[r]``, else by
    :func:`chainpipe.solvers.labels.dominated_by_earlier` as :func:`_frontier4`."""
    n = len(r)
    if not n:
        return np.zeros(0, dtype=np.int64)
    if len(kept):
        k = np.array([p[:4] for p in kept], dtype=float).reshape(-1, 4)
        r, bottleneck, total, sync = (np.concatenate((k[:, c], v)) for c, v in enumerate(
            (r, bottleneck, total, sync)))
    m = len(r) - n
    index = np.concatenate((np.full(m, -1), np.arange(n)))
    order = np.lexsort((index, sync, r, total, bottleneck))  # kept first: index -1
    if (sync != sync[0]).any():
        table = np.column_stack((total[order], r[order], sync[order]))
        alive = ~dominated_by_earlier(table) & (order >= m)
        return np.sort(index[order][alive])
    rs = r[order].astype(np.int64)
    out = _staircase(zip(total[order].tolist(), rs.tolist(), index[order].tolist()),
                     int(rs.max()))
    return np.array(out, dtype=np.int64)


def shifted_keep(points: list, microbatches: int) -> list[int]:
    """Indices (ascending) of the points no other point beats under the shifted
    dominance of ``T`` (:func:`chainpipe.solvers.labels.shifted_pareto`): ``A`` beats
    ``B`` when ``r_A <= r_B`` and ``total_A + (M - 1) max(bottleneck_A - bottleneck_B, 0)
    + max(sync_A - sync_B, 0) <= total_B``, so every completion of ``B`` is no faster
    than the same completion of ``A``."""
    labels = [(p[1], p[2], p[0], p[3], i) for i, p in enumerate(points)]
    return sorted(lab[4] for lab in shifted_pareto(labels, microbatches))


def epsilon_keep(points: list, eps: float) -> list[int]:
    """Indices of the points kept by epsilon-dominance pruning; every dropped point is
    ``(1 + eps)``-dominated by a kept one with no more stages."""
    if eps <= 0:
        return list(range(len(points)))
    f = 1.0 + eps
    kept: list[tuple] = []
    out = []
    for i in sorted(range(len(points)), key=lambda i: points[i][:4]):
        r, bn, sm, sy = points[i][:4]
        if not any(kr <= r and kb <= f * bn and ks <= f * sm and ky <= f * sy
                   for kr, kb, ks, ky in kept):
            kept.append((r, bn, sm, sy))
            out.append(i)
    out.sort()
    return out


def cap_keep(points: list, microbatches: int, max_entries: int, scale: float = 1.0,
             occupancy: float = 0.0) -> list[int]:
    """Indices of the ``max_entries`` points with the least estimated ``T`` of a whole
    plan: ``total * scale + (M - 1) bottleneck + sync`` once the boundary into them
    (``occupancy``, and a traversal of twice it) is paid.

    ``scale`` is the model's FLOP over the suffix's (public): the rest of the plan is
    estimated to cost like the suffix per FLOP. Against ranking by the suffix's own
    ``T`` (``scale = 1``) this weighs the total more the shorter the suffix, as the
    prefix still to come will (measured on ``hybrid-large-02-nozero`` with one point per
    entry: a gap of 0 instead of 2.8%).

    Parameters
    ----------
    points : list
        ``(r, bottleneck, total, sync, ...)`` of one summary entry.
    microbatches : int
        ``M``.
    max_entries : int
        How many to keep (0: all).
    scale : float
        The model's FLOP over the FLOP of the entry's suffix ``[b, L)``.
    occupancy : float
        The boundary's occupancy at ``b`` on the entry's path bandwidth (0 for the
        entry of complete plans).

    Returns
    -------
    list of int
        The indices kept, ascending.
    """
    if max_entries <= 0 or len(points) <= max_entries:
        return list(range(len(points)))
    return sorted(cap_order(points, microbatches, scale, occupancy)[:max_entries])


def cap_order(points: list, microbatches: int, scale: float = 1.0,
              occupancy: float = 0.0) -> list[int]:
    """The indices of ``points`` by the estimated ``T`` of a whole plan :func:`cap_keep`
    ranks them by (:func:`cap_estimates`), least first."""
    est = cap_estimates(points, microbatches, scale, occupancy)
    return sorted(range(len(points)), key=est.__getitem__)


def cap_estimates(points: list, microbatches: int, scale: float = 1.0,
                  occupancy: float = 0.0) -> list[float]:
    """Per point, the estimated ``T`` of a whole plan through it that :func:`cap_keep`
    ranks by."""
    q = cost.traversal(0.0, occupancy)
    return [float(cost.iteration_time((p[2] + q) * scale, max(p[1], occupancy), microbatches,
                                      p[3])) for p in points]


#: the bytes a compressed summary's entries may take (:func:`fit_budget`): the issue's
#: target of 16 KiB per message, less room for the message's other fields
SUMMARY_BUDGET = 16 * 1024 - 512


def fit_budget(entries: list[dict], origins: list, ranks: list[list[int]], best: list[float],
               budget: int = SUMMARY_BUDGET) -> tuple[list[dict], list]:
    """A compressed summary's entries cut to fit ``budget`` bytes of compact JSON.

    ``ranks[e][j]``: point ``j`` of entry ``e``'s place by the estimated ``T`` of a whole
    plan (0: the best); ``best[e]``: that estimate of its best point. First every entry
    keeps fewer points, its best ones (down to one each), then whole entries go, those
    whose best point's estimate is the largest first (the ``b = 0`` entry, complete plans,
    last). No guarantee (as ``max_entries``): a point dropped may be the optimum's.

    Returns
    -------
    tuple
        ``(entries, origins)`` kept, in their order.
    """
    import json

    def size(e: dict) -> int:
        return len(json.dumps(e, separators=(",", ":"))) + 1

    sizes = [size(e) for e in entries]
    top = max((len(e["points"]) for e in entries), default=1)
    for n in range(top - 1, 0, -1):
        if sum(sizes) <= budget:
            return entries, origins
        keeps = [[j for j, r in enumerate(rk) if r < n] for rk in ranks]
        entries = [{**e, "points": [e["points"][j] for j in kp]}
                   for e, kp in zip(entries, keeps)]
        origins = [[o[j] for j in kp] for o, kp in zip(origins, keeps)]
        ranks = [[rk[j] for j in kp] for rk, kp in zip(ranks, keeps)]
        sizes = [size(e) for e in entries]
    total = sum(sizes)
    order = sorted(range(len(entries)), key=lambda i: (entries[i]["b"] == 0, -best[i]))
    dropped = set()
    for i in order:
        if total <= budget:
            break
        dropped.add(i)
        total -= sizes[i]
    keep = [i for i in range(len(entries)) if i not in dropped]
    return [entries[i] for i in keep], [origins[i] for i in keep]


def round_up(value: float, quantum: float) -> float:
    """``value`` rounded up to the geometric grid ``(1 + quantum)^n`` (0 stays 0)."""
    if quantum <= 0 or value <= 0:
        return value
    lg = math.log1p(quantum)
    up = math.exp(math.ceil(math.log(value) / lg - 1e-12) * lg)
    return max(up, value)  # guard against exp/log rounding below the value


def round_down(value: float, steps: int) -> float:
    """``value`` rounded down to the grid ``2^(n / steps)`` (0 stays 0): a power of two
    when ``n`` is a multiple of ``steps``, a short number then."""
    if not (value > 0 and math.isfinite(value)):
        return value
    n = math.floor(math.log2(value) * steps + 1e-9)
    while 2.0 ** (n / steps) > value:  # log2 rounded up across a grid point
        n -= 1
    return 2.0 ** (n / steps)


def round_digits(value: float, digits: int) -> float:
    """``value`` rounded up to ``digits`` significant decimal digits (a short JSON repr).

    The result is the smallest ``m * 10^k`` (``m`` a ``digits``-digit integer) that is
    ``>= value``, computed as a correctly rounded float so that its shortest repr is
    the short decimal.
    """
    if digits <= 0 or not (value > 0 and math.isfinite(value)):
        return value
    k = math.floor(math.log10(value)) - (digits - 1)  # grid unit 10^k
    unit = 10.0 ** abs(k)  # exact for |k| <= 22

    def on_grid(m: float) -> float:
        return m * unit if k >= 0 else m / unit

    m = math.floor(value / unit if k >= 0 else value * unit) - 1
    # the first grid value >= value among m-1 .. m+2
    return min(x for x in (on_grid(m + step) for step in range(4)) if x >= value)
