"""Pieces every baseline shares: equal layer splits, chain-order device slots, the best of
a family of candidates, and the honest ``no_solution`` / ``infeasible`` answers."""

from __future__ import annotations

import math

import numpy as np

from ...deadline import Deadline
from ...result import Outcome
from .stage_costs import StageCosts, StageTuple


def uniform_bounds(L: int, S: int) -> list[int]:
    """Layer boundaries ``0 = b_0 < ... < b_S = L`` of ``S`` equal stages.

    Sizes differ by at most one; the last ``L mod S`` stages take the extra layer
    (under 1F1B the later stages hold fewer microbatches in flight).
    """
    q, r = divmod(L, S)
    sizes = [q] * (S - r) + [q + 1] * r
    return [0] + np.cumsum(sizes).tolist()


def fastest_first(c: StageCosts, groups, d: int = 1, t: int = 1) -> list[int]:
    """Stage slots of shape ``d x t`` (one group index per stage ``groups`` can run), fastest
    group first.

    Ties go to the larger memory, then to the earlier group in chain order. A group
    contributes as many slots as it holds stages of that shape, at most ``L`` (a device
    count is a number, never a list of that length).
    """
    tab = c.tables
    order = sorted(groups, key=lambda g: (-tab.rate[g], -tab.memory[g], g))
    return [g for g in order for _ in range(c.capacity(g, d, t))]


def dc_slots(c: StageCosts, d: int = 1, t: int = 1, groups=None) -> list[list[int]]:
    """Per datacenter, its stage slots of shape ``d x t``, fastest first (only ``groups``
    if given)."""
    by_dc: list[list[int]] = [[] for _ in range(c.K)]
    for g in (range(c.tables.G) if groups is None else sorted(set(groups))):
        by_dc[c.dc(g)].append(g)  # O(G), not O(K G)
    return [fastest_first(c, gs, d, t) for gs in by_dc]


def chain_fill(c: StageCosts, S: int, d: int = 1, t: int = 1, groups=None) -> list[StageTuple]:
    """``S`` equal stages of shape ``d x t`` on the first ``S`` slots in chain order, fastest
    first inside a datacenter."""
    slots = [g for dc in dc_slots(c, d, t, groups) for g in dc][:S]
    b = uniform_bounds(c.L, S)
    return [(b[s], b[s + 1], c.dc(g), g, d, t) for s, g in enumerate(slots)]


def one_device_only(c: StageCosts, name: str) -> Outcome | None:
    """``no_solution`` for a strategy that places one device per stage when the instance's
    lists leave out ``d = 1`` or ``t = 1``; ``None`` when it may run."""
    par = c.parallelism
    if 1 in c.instance.training.data_parallel_widths and 1 in par.tensor_parallel:
        return None
    return Outcome("no_solution", message=(
        f"{name} runs every stage on one device (d = t = 1), which this instance does not "
        f"allow (data_parallel {list(par.data_parallel)}, tensor_parallel "
        f"{list(par.tensor_parallel)})"), stats={"strategy": name})


def infeasible_or(c: StageCosts, message: str, stats: dict | None = None) -> Outcome:
    """``infeasible`` if :meth:`StageCosts.infeasibility_reason` proves it, else
    ``no_solution`` with ``message``.

    The reason is about plans of one pipeline holding all ``M`` microbatches: when the
    instance allows other pipeline counts (whose ``M_p < M`` stash less), it proves
    nothing about them, and the answer is ``no_solution`` with the reason.
    """
    reason = c.infeasibility_reason()
    if reason is not None and c.instance.parallelism.pipelines != (1,):
        return Outcome("no_solution", stats=stats or {}, message=(
            f"{message}; {reason} (one pipeline; other allowed pipeline counts not tried)"))
    if reason is not None:
        return Outcome("infeasible", message=reason, stats=stats or {})
    return Outcome("no_solution", message=message, stats=stats or {})


def best_of(c: StageCosts, candidates, what: str, stats: dict, deadline=None) -> Outcome:
    """Keep the candidate with the smallest time; explain if none fits.

    ``candidates`` yields stage lists (an empty one is skipped). Stops at ``deadline``
    with what it has (``stats["complete"]`` says whether every candidate was tried).
    """
    deadline = Deadline.of(deadline)
    best_T, best, tried, first_failure = math.inf, None, 0, None
    complete = True
    for stages in candidates:
        if deadline.expired():
            complete = False
            break
        if not stages:
            continue
        tried += 1
        T = c.plan_time(stages)
        if best_T > T:
            best_T, best = T, stages
        elif best is None and first_failure is None:
            first_failure = c.memory_failure(stages)
    stats = {**stats, "candidates": tried, "complete": complete}
    if best is None and not complete:
        return Outcome("no_solution", message=f"{what}: time limit reached after {tried} "
                       "candidates, none fits memory", stats=stats)
    if best is None and tried == 0:
        return infeasible_or(c, f"{what}: no device group has the devices for one stage of "
                             "the shapes this strategy uses", stats)
    if best is None:
        why = f"; e.g. {first_failure}" if first_failure else ""
        return infeasible_or(c, f"{what}: no candidate fits memory ({tried} tried){why}", stats)
    stats["stages"] = len(best)
    return Outcome("feasible", c.to_plan(best), stats=stats)
