"""Pareto filters over DP labels and the trial schedule (``dp`` and the CDynP agents).
The label loops of ``dp`` and of the CDynP agents (:class:`.cdynp.local.LocalDP`) run on
the compiled kernel (:mod:`.label_kernel`), which applies these dominance rules to labels
as arrays: the filters here are their definitions, which the tests check the kernel
against (``tests/test_label_kernel.py``, ``tests/test_local_kernel.py``); the CDynP
summaries use :func:`shifted_pareto` and :func:`dominated_by_earlier` themselves.

A label is a tuple ``(bottleneck, total, stages placed, ...)``; smaller is better
in each of the three. Under data parallelism ``dp`` adds a fourth criterion,
the largest synchronisation ``max R`` of the partial plan, at index 3
(:func:`pareto4`, ``across_usage(..., sync=True)``). States are dict keys
``(dc, usage)`` with ``usage`` a tuple of devices in use per group of that DC.
"""

from __future__ import annotations

import math
from bisect import bisect_right, insort
from operator import itemgetter

import numpy as np

#: trial upper bounds ``LB * (1 + d)``: each failed trial proves the optimum is above it
#: (the CDynP agents' ladder)
TRIALS = (0.02, 0.1, 0.35, 1.0, 3.0, math.inf)
#: ``dp``'s in version 1, whose first bound sees the layers' granularity (``dp._first_bound``)
#: and sits nearer the optimum: a step at 1.6 (measured on ``large/``: 0.23, 0.70, 0.28 s
#: before both, 0.72, 0.55, 0.72 s with the higher bound alone, 0.21, 0.62, 0.18 s with
#: the step; GPT-3 175B at L = 194: 5.45, 2.97, 3.10 s)
DP_TRIALS = (0.02, 0.1, 0.35, 0.6, 1.0, 3.0, math.inf)
#: the same under data or tensor parallelism, where the cheap lower bound sits further
#: below the optimum and a trial far above it costs many labels: finer steps (measured on
#: a 256-GPU instance 34% above its bound: the last trial at +1% to +4% of the optimum
#: costs a third to a half of one at +7%)
HYBRID_TRIALS = (0.02, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.75,
                 1.0, 1.5, 3.0, math.inf)

#: relative widening of the bound tests in the label loops of ``dp`` and the CDynP
#: agents, which compare a label's terms with thresholds instead of assembling ``T``:
#: rounding in them may keep a label the assembled ``T`` would cut, never the reverse
BOUND_SLACK = 1e-12


def across_usage(layer_states: dict, sync: bool = False) -> None:
    """Drop labels dominated by a label of another state of the same DC that used no more
    devices of any group (and has no larger bottleneck, sum or stage count, nor, with
    ``sync``, a larger synchronisation at index 3).

    Fewer devices used leaves every completion of the dominated label available, so this
    is as safe as the Pareto filter within a state. Works in place, keeping label order.
    """
    by_dc: dict[int, list] = {}
    for key in layer_states:
        by_dc.setdefault(key[0], []).append(key)
    for keys in by_dc.values():
        if len(keys) < 2:
            continue
        if sync:
            drop = _dominated_with_sync(layer_states, keys)
        else:
            rows = [(lab[0], lab[1], lab[2], key, i)
                    for key in keys for i, lab in enumerate(layer_states[key])]
            rows.sort(key=lambda r: (r[0], r[1], r[2], sum(r[3][1])))
            if len(keys) <= _FEW_STATES:
                drop = _dominated_by_state(rows)
            else:
                drop = _dominated_small(rows) if len(rows) < 48 else _dominated_numpy(rows)
        for key, idxs in drop.items():
            labels = layer_states[key]
            left = [lab for i, lab in enumerate(labels) if i not in idxs]
            if left:
                layer_states[key] = left
            else:
                del layer_states[key]


#: up to this many states, :func:`_dominated_by_state` (cost: rows x states) beats the
#: row-by-row filters (cost: rows x kept rows); measured on medium/ and large/
_FEW_STATES = 64


def _dominated_by_state(rows: list) -> dict:
    """As :func:`_dominated_small`, with per state ``least[p]``: the least sum of a kept
    row with at most ``p`` stages; a row is dominated iff a state with no more devices
    of any group has ``least[p] <= sum``."""
    p_cap = max(row[2] for row in rows)
    least: dict = {}  # usage -> least sums by stage count, for usages with a kept row
    drop: dict = {}
    for _mx, sm, p, key, i in rows:
        u = key[1]
        for v, arr in least.items():
            if arr[p] <= sm and all(a <= b for a, b in zip(v, u)):
                drop.setdefault(key, set()).add(i)
                break
        else:
            arr = least.get(u)
            if arr is None:
                arr = least[u] = [math.inf] * (p_cap + 1)
            for q in range(p, p_cap + 1):
                if arr[q] <= sm:
                    break
                arr[q] = sm
    return drop


def _dominated_small(rows: list) -> dict:
    """Rows sorted by (bottleneck, sum, ...): which are dominated by an earlier kept row."""
    kept: list = []
    drop: dict = {}
    for _mx, sm, p, key, i in rows:
        u = key[1]
        for ksm, kp, ku in kept:
            if ksm <= sm and kp <= p and all(x <= y for x, y in zip(ku, u)):
                drop.setdefault(key, set()).add(i)
                break
        else:
            kept.append((sm, p, u))
    return drop


def _dominated_numpy(rows: list) -> dict:
    """As :func:`_dominated_small`, each row checked against the kept ones at once."""
    n, width = len(rows), len(rows[0][3][1])
    sums = np.empty(n)
    ps = np.empty(n, dtype=np.int64)
    us = np.empty((n, width), dtype=np.int64)
    kept = 0
    drop: dict = {}
    for _mx, sm, p, key, i in rows:
        u = key[1]
        if kept and ((sums[:kept] <= sm) & (ps[:kept] <= p)
                     & np.all(us[:kept] <= u, axis=1)).any():
            drop.setdefault(key, set()).add(i)
            continue
        sums[kept], ps[kept], us[kept] = sm, p, u
        kept += 1
    return drop


def _dominated_with_sync(layer_states: dict, keys: list) -> dict:
    """As :func:`_dominated_numpy` with the synchronisation (label index 3) a fourth
    criterion: rows sorted by (bottleneck, sum, stages, sync, devices) are checked against
    the earlier ones (:func:`dominated_by_earlier`).

    (The shifted dominance of :func:`shifted_pareto` across states was measured too: it
    removed 15% more labels on a 256-GPU instance but its pairwise comparison cost more
    time than it saved.)
    """
    rows, owners = [], []
    for key in keys:
        u = key[1]
        used = sum(u)
        for i, lab in enumerate(layer_states[key]):
            rows.append((lab[0], lab[1], lab[2], lab[3], used) + u)
            owners.append((key, i))
    table = np.array(rows, dtype=float)
    # by (bottleneck, sum, stages, sync, devices in all); then sum, stages, sync, devices
    order = np.lexsort(table[:, 4::-1].T)
    dropped = order[dominated_by_earlier(table[order][:, [1, 2, 3] + list(
        range(5, table.shape[1]))])]
    drop: dict = {}
    for j in dropped.tolist():
        key, i = owners[j]
        drop.setdefault(key, set()).add(i)
    return drop


def dominated_by_earlier(table: np.ndarray) -> np.ndarray:
    """Which rows of ``table`` an earlier row dominates (no larger in any column).

    The rows come in an order that makes every earlier row no worse in what the
    columns leave out (the bottleneck: rows sorted by it). A row dominated by an
    earlier row is dominated by an earlier *kept* one (a dropped row's dominator,
    earlier and in the end kept, dominates what it dominates), so each block of rows
    is compared at once with the rows kept before the block and with its own earlier
    rows: no check in a block depends on another's outcome. Of the kept rows only
    those no larger than the block's largest in every column take part.

    Parameters
    ----------
    table : numpy.ndarray
        ``(n, c)`` floats, one row per label or point, smaller is better in each column.

    Returns
    -------
    numpy.ndarray
        ``(n,)`` booleans: ``True`` where an earlier row dominates the row (of equal
        rows the first is kept).
    """
    n, width = table.shape
    dropped = np.zeros(n, dtype=bool)
    kept = table[:0]
    for start in range(0, n, _BLOCK):
        block = table[start:start + _BLOCK]
        size = len(block)
        hit = np.zeros(size, dtype=bool)
        if len(kept):
            near = kept[(kept <= block.max(axis=0)).all(axis=1)]
            if len(near):
                dom = near[None, :, 0] <= block[:, None, 0]
                for c in range(1, width):
                    dom &= near[None, :, c] <= block[:, None, c]
                hit = dom.any(axis=1)
        dom = np.tri(size, k=-1, dtype=bool)  # dom[i, j]: j is earlier in the block
        for c in range(width):
            dom &= block[None, :, c] <= block[:, None, c]
        hit |= dom.any(axis=1)
        dropped[start:start + size] = hit
        kept = np.concatenate([kept, block[~hit]])
    return dropped


#: rows per block of :func:`dominated_by_earlier`
_BLOCK = 256


_FOUR = itemgetter(0, 1, 2, 3)


def pareto4(labels: list) -> list:
    """Labels not dominated in (bottleneck, sum, stages placed, synchronisation).

    Sorted by the four criteria, a label is kept unless an earlier kept one has no
    larger sum, stage count and synchronisation (its bottleneck is no larger by the
    order). The kept labels of each stage count form a staircase of (sum ascending,
    synchronisation descending); a label is dominated iff, for some count no larger
    than its own, the staircase entry with the largest sum not above its sum has a
    synchronisation not above its own: a binary search per count instead of a scan of
    every kept label (the CDynP agents' states hold thousands).
    """
    if len(labels) <= 1:
        return labels
    labels.sort(key=_FOUR)
    out: list = []
    stairs: dict[int, tuple[list, list]] = {}  # stages -> (sums ascending, syncs descending)
    counts: list[int] = []  # the stage counts with a staircase, ascending
    for lab in labels:
        sm, p, r = lab[1], lab[2], lab[3]
        for q in counts:
            if q > p:
                break
            sums, syncs = stairs[q]
            i = bisect_right(sums, sm) - 1
            if i >= 0 and syncs[i] <= r:
                break  # dominated
        else:
            q = -1
        if q == -1 or q > p:
            out.append(lab)
            stair = stairs.get(p)
            if stair is None:
                stair = stairs[p] = ([], [])
                insort(counts, p)
            sums, syncs = stair
            i = j = bisect_right(sums, sm)
            while j < len(sums) and syncs[j] >= r:  # entries the new one dominates
                j += 1
            sums[i:j] = [sm]
            syncs[i:j] = [r]
    return out


def pareto3(labels: list, p_cap: int) -> list:
    """Labels not dominated in (bottleneck, sum, stages placed), by bottleneck ascending.

    A label is dropped when an earlier one (no larger bottleneck) has no larger sum
    and no more stages placed. ``least[p]`` is the least sum kept among labels with
    at most ``p`` stages placed.
    """
    if len(labels) <= 1:
        return labels
    labels.sort(key=lambda x: (x[0], x[1], x[2]))
    out = []
    if p_cap == 0:
        best_sum = float("inf")
        for lab in labels:
            if lab[1] < best_sum:
                out.append(lab)
                best_sum = lab[1]
        return out
    least = [float("inf")] * (p_cap + 1)
    for lab in labels:
        sm, p = lab[1], lab[2]
        if sm < least[p]:
            out.append(lab)
            for q in range(p, p_cap + 1):
                if least[q] <= sm:
                    break
                least[q] = sm
    return out


def shifted_pareto(labels: list, microbatches: int) -> list:
    """Labels no other label *beats* under the shifted dominance of ``T``.

    Label ``A = (mx, sm, p, r, ...)`` dominates ``B`` when ``p_A <= p_B`` and
    ``sm_A + (M - 1) * max(mx_A - mx_B, 0) + max(r_A - r_B, 0) <= sm_B``: for any
    completion (fill ``f``, bottleneck ``x``, synchronisation ``y``),
    ``max(mx_A, x) <= max(mx_B, x) + max(mx_A - mx_B, 0)`` and likewise for ``r``, so
    ``A``'s plan is never slower than ``B``'s (``docs/dp.md``). The relation is
    transitive; among labels that dominate each other the first listed wins. With
    ``mx_A <= mx_B`` and ``r_A <= r_B`` it is the plain Pareto dominance, so this keeps
    a subset of what :func:`pareto4` keeps.
    """
    n = len(labels)
    if n <= 1:
        return labels
    steady = microbatches - 1
    if n < _SHIFTED_NUMPY:
        return [b for j, b in enumerate(labels)
                if not any(_beats(a, b, i < j, steady) for i, a in enumerate(labels) if i != j)]
    mx = np.fromiter((lab[0] for lab in labels), float, n)
    sm = np.fromiter((lab[1] for lab in labels), float, n)
    p = np.fromiter((lab[2] for lab in labels), np.int64, n)
    r = np.fromiter((lab[3] for lab in labels), float, n)
    with np.errstate(invalid="ignore", over="ignore"):
        # dom[i, j]: label i dominates label j
        shift = steady * np.maximum(mx[:, None] - mx[None, :], 0.0) if steady else 0.0
        dom = (sm[:, None] + shift + np.maximum(r[:, None] - r[None, :], 0.0) <= sm[None, :])
    dom &= p[:, None] <= p[None, :]
    np.fill_diagonal(dom, False)
    first = np.tri(n, k=-1, dtype=bool).T  # first[i, j]: i listed before j
    beats = dom & (~dom.T | first)
    keep = ~beats.any(axis=0)
    return [lab for lab, k in zip(labels, keep.tolist()) if k]


#: from this many labels on, :func:`shifted_pareto` compares them in numpy
_SHIFTED_NUMPY = 12


def _dominates(a, b, steady: int) -> bool:
    """Whether label ``a`` dominates ``b`` under the shifted rule of :func:`shifted_pareto`."""
    if a[2] > b[2]:
        return False
    shift = steady * (a[0] - b[0]) if a[0] > b[0] and steady else 0.0
    return a[1] + shift + (a[3] - b[3] if a[3] > b[3] else 0.0) <= b[1]


def _beats(a, b, a_first: bool, steady: int) -> bool:
    """Whether ``a`` removes ``b``: it dominates ``b``, and ``b`` does not dominate it back
    unless ``a`` is listed first."""
    return _dominates(a, b, steady) and (a_first or not _dominates(b, a, steady))


def killers(labels: list) -> list[int]:
    """Per label ``j`` (labels in non-decreasing bottleneck order), the first later label
    that dominates it once both have the same bottleneck; ``len(labels)`` if none.

    A stage whose ``C`` (or boundary) reaches the bottleneck of the first ``i`` labels
    lifts them all to one bottleneck. Among their images ``A`` then dominates ``B`` when
    ``p_A <= p_B`` and ``sm_A + max(r_A - r_B, 0) <= sm_B`` (the shifted rule of
    :func:`shifted_pareto` with equal bottlenecks; with ``r = 0`` it is the plain rule),
    and the relation survives the stage (``docs/dp.md``). So label ``j < i`` need not be
    extended when ``killers[j] < i``: following killers ends at an extended label of the
    first ``i`` that dominates it.
    """
    n = len(labels)
    kill = [n] * n
    if n < 2:
        return kill
    if n < _KILLERS_NUMPY:
        for j in range(n - 1):
            _mx, sm, p, r = labels[j][:4]
            for i in range(j + 1, n):
                a = labels[i]
                if a[2] <= p and a[1] + (a[3] - r if a[3] > r else 0.0) <= sm:
                    kill[j] = i
                    break
        return kill
    sm = np.fromiter((lab[1] for lab in labels), float, n)
    p = np.fromiter((lab[2] for lab in labels), np.int64, n)
    r = np.fromiter((lab[3] for lab in labels), float, n)
    # dom[i, j]: i dominates j, i later
    dom = (sm[:, None] + np.maximum(r[:, None] - r[None, :], 0.0) <= sm[None, :])
    dom &= p[:, None] <= p[None, :]
    dom &= np.tri(n, k=-1, dtype=bool)
    first = dom.argmax(axis=0)
    return np.where(dom.any(axis=0), first, n).tolist()


#: from this many labels on, :func:`killers` compares them in numpy
_KILLERS_NUMPY = 16
