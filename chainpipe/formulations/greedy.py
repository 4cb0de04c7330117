"""A cheap backward-greedy heuristic: plans that set CP-SAT's time unit and stand in
when a model cannot be built in the time limit.
"""

from __future__ import annotations

import math

from ..cost import compute_time
from ..plan import Plan, evaluate
from ..tables import CostTables


def greedy_plans(tables: CostTables):
    """Yield cheap feasible-looking plans as ``(start, end, dc, group_in_dc)`` tuple lists.

    Backward greedy: stages are built from the last layer down, on devices taken from
    the last datacenter towards the first (fastest group first inside a datacenter),
    so chain order holds and each stage's 1F1B position is known when it is built.
    A stage grows while it fits in memory and its compute stays within a target
    ``tau``; ``tau`` sweeps balanced shares of the total work, plus no target at all.
    Every plan must still be checked by ``evaluate``.

    Devices are walked group by group with a count, never one list entry per device:
    a group offers at most ``L`` stages (each takes a layer), and once one of its
    devices cannot hold the next stage, none of them can.
    """
    L = tables.L
    # last DC first, fastest group first inside a DC (stable: O(G log G), not O(K G))
    order = sorted(range(tables.G), key=lambda g: (-tables.group_dc[g], -tables.rate[g]))
    devices = sum(min(int(tables.count[g]), L) for g in order)
    total = float(compute_time(tables.flop_prefix[-1], tables.rate.max()))
    n_max = max(1, min(L, devices))
    shares = sorted({max(1, round(n_max ** (t / 15))) for t in range(16)})
    taus = [math.inf] + [total / n for n in shares]
    for tau in taus:
        j, pos, stages = L, 1, []
        for g in order:
            for _ in range(min(int(tables.count[g]), L)):
                need = tables.in_flight(pos)
                if j == 0:
                    break
                comp, mif = tables.stage_column(g, j)  # O(L): no [G, L, L] tables
                if mif[j - 1] < need:
                    break
                i = j - 1
                while i > 0 and mif[i - 1] >= need and comp[i - 1] <= tau:
                    i -= 1
                stages.append((i, j, int(tables.group_dc[g]), tables.groups[g].index))
                j, pos = i, pos + 1
            if j == 0:
                break
        if j == 0:
            yield stages[::-1]


def best_greedy_plan(tables: CostTables) -> tuple[Plan | None, float]:
    """The fastest feasible plan of :func:`greedy_plans` and its time (``None, inf`` if none)."""
    best, best_T, seen = None, math.inf, set()
    for tuples in greedy_plans(tables):
        if tuple(tuples) in seen:  # several targets often give one plan
            continue
        seen.add(tuple(tuples))
        plan = Plan.from_tuples(tables.instance, tuples)
        ev = evaluate(tables.instance, plan)
        if ev.feasible and ev.iteration_time_s < best_T:
            best, best_T = plan, ev.iteration_time_s
    return best, best_T
