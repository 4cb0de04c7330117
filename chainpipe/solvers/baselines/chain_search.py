"""Uniform layer splits over a contiguous range of datacenters, by branch and bound:
``uniform-chain`` and ``sailor`` (see :mod:`chainpipe.solvers.baselines`)."""

from __future__ import annotations

import math

import numpy as np

from ... import cost
from ...deadline import Deadline
from ...instance import Instance
from ...result import Outcome
from .common import chain_fill, dc_slots, infeasible_or, one_device_only, uniform_bounds
from .stage_costs import StageCosts


def _search(c: StageCosts, shapes, deadline, name: str) -> Outcome:
    """Every shape in ``shapes``, every stage count: the best uniform chain plan."""
    search = _UniformChain(c, Deadline.of(deadline))
    for d, t in shapes:
        search.set_shape(d, t)
        search.seed_with_chain_fill()
    for d, t in shapes:
        search.set_shape(d, t)
        for S in range(1, search.n_max + 1):
            search.search(S)
            if not search.complete:
                break
        if not search.complete:
            break
    stats = {"strategy": name, "nodes": search.visited, "complete": search.complete}
    if search.best is None:
        msg = ("no uniform split over a contiguous range of datacenters fits memory"
               if search.complete else
               "time limit reached before any uniform split was found to fit")
        return infeasible_or(c, msg, stats)
    stats["stages"] = len(search.best)
    return Outcome("feasible", c.to_plan(search.best), stats=stats)


def uniform_chain(instance: Instance, *, deadline=None, seed=0, threads=1, log=None) -> Outcome:
    """Sailor-style on one device per stage: uniform layers; search stage count, DC range
    and stages per DC."""
    c = StageCosts(instance)
    return one_device_only(c, "uniform-chain") or _search(c, [(1, 1)], deadline, "uniform-chain")


def sailor(instance: Instance, *, deadline=None, seed=0, threads=1, log=None) -> Outcome:
    """Sailor-style: uniform layers, one data-parallel width and one tensor-parallel degree
    for every stage; search those, the stage count, DC range and stages per DC."""
    c = StageCosts(instance)
    shapes = sorted({s for g in range(c.tables.G) for s in c.shapes(g)})
    return _search(c, shapes, deadline, "sailor")


class _UniformChain:
    """Branch and bound over uniform splits: stage count, datacenter range, stages per DC,
    for one stage shape ``d x t`` at a time."""

    def __init__(self, c: StageCosts, deadline: Deadline):
        self.c, self.deadline = c, deadline
        self.best_T, self.best = math.inf, None
        self.visited, self.complete = 0, True

    def set_shape(self, d: int, t: int) -> None:
        """Search stages of ``d x t`` devices from now on."""
        c = self.c
        self.d, self.t = d, t
        self.slots = dc_slots(c, d, t)
        self.n_max = min(c.L, sum(len(x) for x in self.slots))
        # fastest rate available from datacenter k onwards, for the bound
        rates = c.tables.rate
        self.fastest_from = [max((rates[g] for dc in self.slots[k:] for g in dc), default=0.0)
                             for k in range(c.K)]

    def offer(self, T: float, stages) -> None:
        if self.best_T > T:
            self.best_T, self.best = T, list(stages)

    def seed_with_chain_fill(self) -> None:
        """Start from the chain-order fill (uniform's family is contained in this one)."""
        for S in range(1, self.n_max + 1):
            stages = chain_fill(self.c, S, self.d, self.t)
            self.offer(self.c.plan_time(stages), stages)

    def search(self, S: int) -> None:
        """Every range of datacenters and stages per datacenter for ``S`` uniform stages."""
        c = self.c
        self.b = uniform_bounds(c.L, S)
        self.S = S
        # flop of the largest block from s onwards, for the bottleneck bound
        block = np.diff(c.sums.flop[self.b])
        self.max_from = np.maximum.accumulate(block[::-1])[::-1]
        self.chosen: list[tuple[int, int, int, int, int, int]] = []
        for a in range(c.K):
            if self.complete:
                self.dfs(a, 0, 0.0, 0.0, 0.0)

    def bound(self, k: int, e: int, total: float, peak: float, sync: float) -> float:
        """Optimistic ``T`` once blocks ``..e`` are placed up to datacenter ``k``.

        The blocks left run at the fastest rate of the datacenters after ``k``, without
        their tensor-parallel all-reduces; the synchronisation is at least that so far.
        """
        c, b = self.c, self.b
        fastest = self.fastest_from[k + 1]
        if fastest == 0:
            return math.inf  # no datacenter after k has a slot of this shape
        rest = cost.compute_time(c.sums.flop[-1] - c.sums.flop[b[e + 1]], fastest, self.d, self.t)
        block = cost.compute_time(self.max_from[e + 1], fastest, self.d, self.t)
        return cost.iteration_time(total + rest, max(peak, block), c.M, sync)

    def dfs(self, k: int, s: int, total: float, peak: float, sync: float) -> None:
        """Place blocks ``s..`` starting in datacenter ``k`` (which runs at least one)."""
        c, b, S, chosen, d, t = self.c, self.b, self.S, self.chosen, self.d, self.t
        tab = c.tables
        self.visited += 1
        if self.visited % 4096 == 0 and self.deadline.expired():
            self.complete = False
        if not self.complete:
            return
        dc = self.slots[k]
        base = len(chosen)
        if s > 0:  # the boundary entering this datacenter
            kp = chosen[-1][2]
            total += float(tab.traversal(b[s], kp, k))
            peak = max(peak, float(tab.occupancy(b[s], kp, k)))
        for n in range(1, min(len(dc), S - s) + 1):
            e = s + n - 1  # block placed now
            g = dc[n - 1]
            if not c.fits(b[e], b[e + 1], g, d, t, S - e):
                break  # this slot cannot hold this block; larger n keeps it there
            if n > 1:
                total += float(tab.traversal(b[e], k, k))
                peak = max(peak, float(tab.occupancy(b[e], k, k)))
            step = c.compute_time(b[e], b[e + 1], g, d, t)
            total += step
            peak = max(peak, step)
            sync = max(sync, c.sync_time(b[e], b[e + 1], g, d, t))
            chosen.append((b[e], b[e + 1], k, g, d, t))
            if e + 1 == S:
                self.offer(cost.iteration_time(total, peak, c.M, sync), chosen)
                break
            if k + 1 < c.K and self.bound(k, e, total, peak, sync) < self.best_T:
                self.dfs(k + 1, e + 1, total, peak, sync)
        del chosen[base:]
