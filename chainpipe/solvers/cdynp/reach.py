"""Targeted selection of a compressed summary's period points under a run's bound.

In a run under a public bound ``tau`` a point ``b`` of a summary entry with the proven
floor ``f_b`` (the least ``T`` of any plan through it: the paired floor of the
prefix-curve table, or its own ``T``) matters only through the plans it starts, which lie
within ``tau``; a kept point ``a`` of the same group can stand in for ``b`` in such a plan
at a cost of at most :func:`.cover.shift` ``(a, b)``, and that bound can put the substitute
within ``tau`` only when the shift is at most ``tau - f_b``, the *reach* of ``b``. A cover
(:mod:`.cover`) spreads its points evenly over the entry's front, far points first; on
``v3-large-01`` the optimum's point at DC 6 lies in a dense cluster that 16 KiB of far
points misses by 1.3 s. A *targeted* selection keeps instead, greedily, the point that
reaches the most points not yet reached (``shift(a, b) <= reach_b``), so that dense
clusters of points near ``tau`` come first; once every point is reached, the same within
half the reach, a quarter, and so on (:data:`LEVELS` halvings), then by floor.

:func:`reach_order` orders one entry, :func:`fit_reach` spreads a summary's bytes over
its entries (lowest level first, then the most points reached per byte). Nothing here is
sent: the points kept are a subset of the entry's, the floors and reaches stay with the DC.
"""

from __future__ import annotations

import heapq
import json

import numpy as np

from .cover import _rows, shift
from .summary import SUMMARY_BUDGET

#: halvings of the reach after every point is reached at the level before
LEVELS = 6

#: at most this many points of a group enter the greedy (those of the least floors; its
#: stand-in matrix is quadratic), the others follow them by floor
GROUP_CAP = 2000


def _stand_in(V: np.ndarray, W: np.ndarray, M: int) -> np.ndarray:
    """``D[a, b]``: :func:`.cover.shift` of ``a`` standing in for ``b``, by blocks of rows."""
    n = len(V)
    D = np.empty((n, n))
    step = max(1, 2_000_000 // max(1, n * (W.shape[1] + 4)))
    for lo in range(0, n, step):
        D[lo:lo + step] = shift(V, W, np.arange(lo, min(lo + step, n)), M)
    return D


def _group_order(V: np.ndarray, W: np.ndarray, floors: np.ndarray, reach: np.ndarray,
                 M: int, limit: int, first: int | None) -> list[tuple[int, int, int]]:
    """The greedy order of one group's points (rows of :func:`.cover._rows`), from
    ``first`` if given: per point kept, ``(index, level, points newly reached)`` (lazy
    greedy: a point's count only falls as others are kept, so a stale count that still
    tops the heap once brought up to date is the greatest)."""
    n = len(floors)
    D = _stand_in(V, W, M)  # D[a, b]: a standing in for b
    kept = np.zeros(n, dtype=bool)
    out: list[tuple[int, int, int]] = []
    for level in range(LEVELS + 1):
        if len(out) >= limit:
            break
        can = D <= reach[None, :] * 0.5 ** level
        reached = can[kept].any(axis=0)
        gain = (can & ~reached[None, :]).sum(axis=1)
        heap = [(-int(gain[a]), float(floors[a]), a) for a in range(n)
                if gain[a] > 0 and not kept[a]]
        heapq.heapify(heap)
        if first is not None and not out:  # kept first, whatever it reaches
            kept[first] = True
            out.append((first, level, int(gain[first])))
            reached |= can[first]
        while heap and len(out) < limit and not reached.all():
            _g, f, a = heapq.heappop(heap)
            now = int((can[a] & ~reached).sum())
            if now <= 0 or kept[a]:
                continue
            if heap and (-now, f) > heap[0][:2]:  # stale: back in its place (ties: floor)
                heapq.heappush(heap, (-now, f, a))
                continue
            kept[a] = True
            reached |= can[a]
            out.append((a, level, now))
    rest = np.flatnonzero(~kept)
    for a in rest[np.argsort(floors[rest], kind="stable")][:max(0, limit - len(out))]:
        out.append((int(a), LEVELS + 1, 0))
    return out


def reach_order(points: list, floors, bound: float, same_p: bool, limit: int, M: int,
                first: int | None = None) -> tuple[list, list]:
    """The targeted order of an entry's points under ``bound``, from ``first`` if given
    (the point of the least estimate: one point per entry is then the same as before).

    Parameters
    ----------
    points : list
        ``(x1, x2, total, sync, p, windows, ...)`` of one summary entry.
    floors : sequence of float
        Per point, a proven floor on the ``T`` of every plan through it.
    bound : float
        The run's bound ``tau`` (finite).
    same_p : bool
        Whether points must have the same stage count to stand in for one another (1F1B).
    limit : int
        At most this many points are ordered.
    M : int
        The run's microbatches.
    first : int, optional
        The point to keep first (its group's greedy starts from it).

    Returns
    -------
    tuple
        ``(order, keys)``: the indices in the order chosen and per index its
        ``(level, points newly reached)``; within a group the order is greedy, across
        groups it goes by level, then by points reached (most first).
    """
    if not points:
        return [], []
    V, W, group = _rows(points, same_p)
    floors = np.asarray(floors, dtype=float)
    reach = np.maximum(bound - floors, 0.0)
    picks = []
    for g in np.unique(group):
        idx = np.flatnonzero(group == g)
        if len(idx) > GROUP_CAP:  # the greedy over the least floors, the rest after them
            idx = idx[np.argsort(floors[idx], kind="stable")]
            if first is not None and group[first] == g:
                idx = np.concatenate(([first], idx[idx != first]))
            rest, idx = idx[GROUP_CAP:], idx[:GROUP_CAP]
            picks += [(LEVELS + 2, 0, k, floors[a], int(a)) for k, a in enumerate(rest)]
        at = None if first is None or group[first] != g else int(np.flatnonzero(idx == first)[0])
        for pos, (a, level, gain) in enumerate(_group_order(
                V[idx], W[idx], floors[idx], reach[idx], M, limit, at)):
            picks.append((-1 if at is not None and pos == 0 else level, -gain, pos,
                          floors[idx[a]], int(idx[a])))
    picks.sort()
    picks = picks[:limit]
    return [p[4] for p in picks], [(max(p[0], 0), -p[1]) for p in picks]


def fit_reach(entries: list[dict], origins: list, orders: list[list], keys: list[list],
              budget: int = SUMMARY_BUDGET) -> tuple[list, list, list]:
    """A compressed summary's entries cut to ``budget`` bytes of compact JSON, adding next,
    over all entries, the next point of the lowest level (:func:`reach_order`) that reaches
    the most points per byte; an entry whose next point no longer fits drops out. Entries
    left empty are dropped.

    Returns
    -------
    tuple
        ``(entries, origins, keeps, live)``: the entries kept (``live``: their indices in
        ``entries``), their points in the entries' order and ``keeps[i]`` the indices kept
        of entry ``live[i]`` (ascending).
    """
    def size(obj) -> int:
        return len(json.dumps(obj, separators=(",", ":")))

    total = sum(size({**e, "points": []}) + 1 for e in entries)
    kept = [0] * len(entries)
    heap = []

    def push(e: int) -> None:
        if kept[e] < len(orders[e]):
            level, gain = keys[e][kept[e]]
            add = size(entries[e]["points"][orders[e][kept[e]]]) + 1
            heapq.heappush(heap, (level, -gain / add, e, add))

    for e in range(len(entries)):
        push(e)
    while heap:
        _l, _g, e, add = heapq.heappop(heap)
        if total + add > budget:
            continue
        total += add
        kept[e] += 1
        push(e)
    keeps = [sorted(o[:k]) for o, k in zip(orders, kept)]
    live = [e for e, k in enumerate(kept) if k > 0]
    outs = [{**entries[e], "points": [entries[e]["points"][j] for j in keeps[e]]}
            for e in live]
    outo = [[origins[e][j] for j in keeps[e]] for e in live]
    return outs, outo, [keeps[e] for e in live], live
