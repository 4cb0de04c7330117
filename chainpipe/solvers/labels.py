"""Pareto filters over DP labels, shared by ``dp`` and the CDynP agents.

A label is a tuple ``(bottleneck, total, stages placed, ...)``; smaller is better
in each of the three. States are dict keys ``(dc, usage)`` with ``usage`` a tuple
of devices in use per group of that DC.
"""

from __future__ import annotations

import math

#: trial upper bounds ``LB * (1 + d)``: each failed trial proves the optimum is above it
TRIALS = (0.02, 0.1, 0.35, 1.0, 3.0, math.inf)


def across_usage(layer_states: dict, covers: dict | None = None) -> None:
    """Drop labels dominated by a label of another state of the same DC that used no more
    devices of any group (and has no larger bottleneck, sum or stage count).

    Fewer devices used leaves every completion of the dominated label available, so this
    is as safe as the Pareto filter within a state. Works in place, keeping label order.

    Labels are visited by (bottleneck, sum, stages, devices used), so a dominator comes
    first; per state, ``least[p]`` holds the least sum of a kept label with at most ``p``
    stages, and a label is dominated iff a state with no more devices of any group has
    ``least[p] <= sum``. ``covers`` memoises "usage ``v`` <= usage ``u``" across calls.
    """
    if covers is None:
        covers = {}
    by_dc: dict[int, list] = {}
    for key in layer_states:
        by_dc.setdefault(key[0], []).append(key)
    for keys in by_dc.values():
        if len(keys) < 2:
            continue
        rows = [(lab[0], lab[1], lab[2], sum(key[1]), key, i)
                for key in keys for i, lab in enumerate(layer_states[key])]
        rows.sort(key=lambda r: r[:4])
        p_cap = max(r[2] for r in rows)
        least: dict = {}  # state -> least sums by stage count, for states with a kept label
        drop: dict = {}
        for _bn, sm, p, _n, key, i in rows:
            u = key[1]
            dominated = False
            for v, arr in least.items():
                if arr[p] <= sm:
                    le = covers.get((v, u))
                    if le is None:
                        le = covers[(v, u)] = all(a <= b for a, b in zip(v, u))
                    if le:
                        dominated = True
                        break
            if dominated:
                drop.setdefault(key, set()).add(i)
                continue
            arr = least.get(u)
            if arr is None:
                arr = least[u] = [math.inf] * (p_cap + 1)
            for q in range(p, p_cap + 1):
                if arr[q] <= sm:
                    break
                arr[q] = sm
        for key, idxs in drop.items():
            labels = layer_states[key]
            left = [lab for i, lab in enumerate(labels) if i not in idxs]
            if left:
                layer_states[key] = left
            else:
                del layer_states[key]


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
