"""Pareto filters over DP labels and the trial schedule, shared by ``dp`` and the
CDynP agents.

A label is a tuple ``(bottleneck, total, stages placed, ...)``; smaller is better
in each of the three. States are dict keys ``(dc, usage)`` with ``usage`` a tuple
of devices in use per group of that DC.
"""

from __future__ import annotations

import math

import numpy as np

#: trial upper bounds ``LB * (1 + d)``: each failed trial proves the optimum is above it
TRIALS = (0.02, 0.1, 0.35, 1.0, 3.0, math.inf)


def across_usage(layer_states: dict) -> None:
    """Drop labels dominated by a label of another state of the same DC that used no more
    devices of any group (and has no larger bottleneck, sum or stage count).

    Fewer devices used leaves every completion of the dominated label available, so this
    is as safe as the Pareto filter within a state. Works in place, keeping label order.
    """
    by_dc: dict[int, list] = {}
    for key in layer_states:
        by_dc.setdefault(key[0], []).append(key)
    for keys in by_dc.values():
        if len(keys) < 2:
            continue
        rows = [(lab[0], lab[1], lab[2], key, i)
                for key in keys for i, lab in enumerate(layer_states[key])]
        if len(rows) < 2:
            continue
        rows.sort(key=lambda r: (r[0], r[1], r[2], sum(r[3][1])))
        if len(keys) <= _FEW_STATES:
            drop = _dominated_by_state(rows)
        elif len(rows) < 48:
            drop = _dominated_small(rows)
        else:
            drop = _dominated_numpy(rows)
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
