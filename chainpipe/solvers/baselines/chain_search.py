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
    seeds = {}
    for d, t in shapes:
        if seeds and search.deadline.expired():  # the first shape's seeds in any case
            search.complete = False
            break
        search.set_shape(d, t)
        seeds[d, t] = search.seed_with_chain_fill()
    # the most promising shape first: its incumbent prunes the others
    for d, t in sorted(seeds, key=lambda shape: seeds[shape]):
        search.set_shape(d, t)
        for S in range(1, search.n_max + 1):
            if search.complete:
                search.search(S)
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


def least_boundary_costs(tab) -> tuple[np.ndarray, np.ndarray]:
    """``[b]``: the least occupancy and the least traversal of the boundary at ``b`` over
    every path ``k1 <= k2`` (a DC's own link or a chain path), in ``O(L K)``: a chain
    path's least is on one link (:meth:`~chainpipe.tables.CostTables.crossing_floors`)."""
    u, q = tab.crossing_floors()
    own = [(tab.occupancy(slice(None), k, k), tab.traversal(slice(None), k, k))
           for k in range(tab.K)]
    return (np.minimum(u[-1], np.min([o for o, _ in own], axis=0)),
            np.minimum(q[-1], np.min([t for _, t in own], axis=0)))


class _UniformChain:
    """Branch and bound over uniform splits: stage count, datacenter range, stages per DC,
    for one stage shape ``d x t`` at a time."""

    def __init__(self, c: StageCosts, deadline: Deadline):
        self.c, self.deadline = c, deadline
        self.best_T, self.best = math.inf, None
        self.visited, self.complete = 0, True
        self.least_occupancy, self.least_traversal = least_boundary_costs(c.tables)

    def set_shape(self, d: int, t: int) -> None:
        """Search stages of ``d x t`` devices from now on."""
        c = self.c
        self.d, self.t = d, t
        self.slots = dc_slots(c, d, t)
        self.n_max = min(c.L, sum(len(x) for x in self.slots))
        # fastest rate available from datacenter k onwards, for the bound (a suffix max)
        rates = c.tables.rate
        own = [max((rates[g] for g in dc), default=0.0) for dc in self.slots]
        self.fastest_from = np.maximum.accumulate(np.array(own[::-1] or [0.0]))[::-1].tolist()

    def offer(self, T: float, stages) -> None:
        if self.best_T > T:
            self.best_T, self.best = T, list(stages)

    def seed_with_chain_fill(self) -> float:
        """Start from the chain-order fill (uniform's family is contained in this one); the
        best time it gives."""
        best = math.inf
        for S in range(1, self.n_max + 1):
            stages = chain_fill(self.c, S, self.d, self.t)
            T = self.c.plan_time(stages)
            self.offer(T, stages)
            best = min(best, T)
        return best

    def search(self, S: int) -> None:
        """Every range of datacenters and stages per datacenter for ``S`` uniform stages."""
        c = self.c
        self.b = b = uniform_bounds(c.L, S)
        self.S = S
        # for the bound, from block e onwards: the flop of the largest block, the least
        # traversal and occupancy of the boundaries after e - 1 (on any path), and the
        # least synchronisation of the largest block (in any datacenter)
        block = np.diff(c.sums.flop[b])
        self.max_from = np.maximum.accumulate(block[::-1])[::-1]
        cut_q = np.array([0.0] + [self.least_traversal[b[e]] for e in range(1, S)] + [0.0])
        cut_u = np.array([0.0] + [self.least_occupancy[b[e]] for e in range(1, S)] + [0.0])
        self.q_from = np.cumsum(cut_q[::-1])[::-1]
        self.u_from = np.maximum.accumulate(cut_u[::-1])[::-1]
        firsts = [dc[0] for dc in self.slots if dc]
        least_sync = [min((c.sync_time(b[e], b[e + 1], g, self.d, self.t) for g in firsts),
                          default=0.0) for e in range(S)] + [0.0]
        self.sync_from = np.maximum.accumulate(least_sync[::-1])[::-1]
        # compute time left after blocks ..e (index e + 1), and of its largest block, at the
        # fastest rate from datacenter p on ([p][e + 1]), without tensor-parallel all-reduces
        rates = np.array(self.fastest_from)[:, None]
        rates = np.where(rates > 0, rates, 1.0)  # no slot from p on: never read (see optimistic)
        left = c.sums.flop[-1] - c.sums.flop[np.array(b)]
        self.rest_at = cost.compute_time(left[None, :], rates, self.d, self.t).tolist()
        self.block_at = cost.compute_time(np.append(self.max_from, 0.0)[None, :], rates,
                                          self.d, self.t).tolist()
        self.chosen: list[tuple[int, int, int, int, int, int]] = []
        self.seen: dict[tuple[int, int, int], list[tuple[float, float, float]]] = {}
        for a in range(c.K):
            if self.complete and self.promising(self.optimistic(a, -1, 0.0, 0.0, 0.0)):
                self.dfs(a, 0, 0.0, 0.0, 0.0)

    def dominated(self, key: tuple[int, int, int], label: tuple[float, float, float]) -> bool:
        """Whether datacenter ``k`` entered at block ``s`` from datacenter ``kp`` (``key``)
        with ``label`` (fill so far, bottleneck so far, synchronisation so far) was met before
        with a label no worse in all three: its subtree then holds nothing strictly better.
        Otherwise the label is remembered."""
        labels = self.seen.setdefault(key, [])
        fill, peak, sync = label
        if any(a <= fill and b <= peak and c <= sync for a, b, c in labels):
            return True
        labels.append(label)
        return False

    def promising(self, bound: float) -> bool:
        """Whether a part of the tree with this bound may hold a strictly better plan (the
        bound is a sum in another order: a relative 1e-12 keeps rounding from pruning)."""
        return bound * (1 - 1e-12) < self.best_T

    def optimistic(self, p: int, e: int, total: float, peak: float, sync: float) -> float:
        """Optimistic ``T`` once blocks ``..e`` are placed, the rest in datacenters ``p..``.

        The blocks left run at the fastest rate of those datacenters, without their
        tensor-parallel all-reduces; each boundary left costs its least traversal and
        occupancy on any path; the synchronisation is at least that so far and the least
        any datacenter gives each block left.
        """
        if self.fastest_from[p] == 0:
            return math.inf  # no datacenter left has a slot of this shape
        return cost.iteration_time(total + self.rest_at[p][e + 1] + self.q_from[e + 1],
                                   max(peak, self.block_at[p][e + 1], self.u_from[e + 1]),
                                   self.c.M, max(sync, self.sync_from[e + 1]))

    def dfs(self, k: int, s: int, total: float, peak: float, sync: float) -> None:
        """Place blocks ``s..`` starting in datacenter ``k`` (which runs at least one)."""
        c, b, S, chosen, d, t = self.c, self.b, self.S, self.chosen, self.d, self.t
        self.visited += 1
        if self.visited % 4096 == 0 and self.deadline.expired():
            self.complete = False
        if not self.complete:
            return
        if self.dominated((chosen[-1][2] if s else -1, k, s), (total, peak, sync)):
            return
        dc = self.slots[k]
        base = len(chosen)
        if s > 0:  # the boundary entering this datacenter
            kp = chosen[-1][2]
            total += c.tables.traversal(b[s], kp, k)
            peak = max(peak, c.tables.occupancy(b[s], kp, k))
        for n in range(1, min(len(dc), S - s) + 1):
            e = s + n - 1  # block placed now
            g = dc[n - 1]
            if not c.fits(b[e], b[e + 1], g, d, t, S - e):
                break  # this slot cannot hold this block; larger n keeps it there
            if n > 1:
                total += c.tables.traversal(b[e], k, k)
                peak = max(peak, c.tables.occupancy(b[e], k, k))
            step = c.compute_time(b[e], b[e + 1], g, d, t)
            total += step
            peak = max(peak, step)
            sync = max(sync, c.sync_time(b[e], b[e + 1], g, d, t))
            chosen.append((b[e], b[e + 1], k, g, d, t))
            if e + 1 == S:
                self.offer(cost.iteration_time(total, peak, c.M, sync), chosen)
                break
            if k + 1 < c.K and self.promising(self.optimistic(k + 1, e, total, peak, sync)):
                self.dfs(k + 1, e + 1, total, peak, sync)
        del chosen[base:]
