"""Backend-free cost tables shared by every solver (DP, CDynP, ILPs, CP-SAT, baselines).

Everything a search needs about an instance, computed once with numpy:
device groups in chain order, per-stage compute times and the largest number
of in-flight microbatches a stage can hold, path bandwidths and latencies
between datacenters, and simple lower bounds. The tables serve the search
only; reported times always come from :func:`chainpipe.plan.evaluate`.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from . import cost
from .instance import Instance


@dataclass(frozen=True)
class Group:
    """One device group, flattened: ``g`` indexes :attr:`CostTables.groups`."""

    dc: int
    index: int  # position in its datacenter's device list
    type: str
    count: int
    flop_per_s: float
    memory_bytes: float


class CostTables:
    """Precomputed quantities of one instance.

    Conventions: layers ``[i, j)`` with ``0 <= i < j <= L``; a stage's *position*
    ``p >= 1`` counts stages from the end (the last stage has ``p = 1``), so that
    its 1F1B in-flight count is ``min(M, p)``.
    """

    def __init__(self, instance: Instance):
        self.instance = instance
        self.L = instance.num_layers
        self.M = instance.microbatches
        self.K = instance.num_datacenters
        self.schedule = instance.training.schedule
        self.bytes_per_param = instance.training.bytes_per_param
        self.groups = tuple(
            Group(k, gi, g.type, g.count, g.flop_per_s, g.memory_bytes)
            for k, dc in enumerate(instance.datacenters)
            for gi, g in enumerate(dc.devices)
        )
        self.G = len(self.groups)
        self.sums = cost.LayerSums(instance)
        self.flop_prefix = self.sums.flop
        #: output bytes crossing a boundary at layer index b (after layer b - 1), b = 1..L-1
        self.boundary_bytes = self.sums.output_bytes
        self.rate = np.array([g.flop_per_s for g in self.groups])
        self.memory = np.array([g.memory_bytes for g in self.groups])
        self.count = np.array([g.count for g in self.groups], dtype=np.int64)
        self.group_dc = np.array([g.dc for g in self.groups], dtype=np.int64)
        bw = np.full((self.K, self.K), np.inf)
        lat = np.zeros((self.K, self.K))
        for a in range(self.K):
            for b in range(a, self.K):
                bw[a, b], lat[a, b] = cost.path(instance, a, b)
        self.path_bandwidth = bw  # [k1, k2] for k1 <= k2
        self.path_latency = lat

    # ------------------------------------------------------------------ stages
    @cached_property
    def stage_flop(self) -> np.ndarray:
        """``[i, j]``: FLOP of layers ``[i, j)`` (forward + backward); 0 where ``j <= i``."""
        return self.sums.range_sums(self.sums.flop)

    @cached_property
    def _ranges(self) -> np.ndarray:
        """``[i, j]``: whether ``[i, j)`` is a non-empty layer range."""
        return np.triu(np.ones((self.L + 1, self.L + 1), dtype=bool), 1)

    @cached_property
    def compute_time(self) -> np.ndarray:
        """``[g, i, j]``: compute time of stage ``[i, j)`` on group ``g``; inf where ``j <= i``."""
        c = cost.compute_time(self.stage_flop[None, :, :], self.rate[:, None, None])
        return np.where(self._ranges[None], c, np.inf)

    @cached_property
    def max_in_flight(self) -> np.ndarray:
        """``[g, i, j]``: largest in-flight count ``n <= M`` for which stage ``[i, j)`` fits on ``g``.

        ``-1`` where even the parameters do not fit (or ``j <= i``). A stage at
        position ``p`` fits iff ``in_flight(p) <= max_in_flight``.
        """
        params = self.sums.range_sums(self.sums.params)
        act = self.sums.range_sums(self.sums.activation)
        n = cost.max_in_flight(params[None], act[None], self.bytes_per_param,
                               self.memory[:, None, None], self.M)
        return np.where(self._ranges[None], n, -1)

    def in_flight(self, position: int) -> int:
        """Microbatches stashed by a stage at ``position`` (1 = last stage)."""
        return cost.in_flight(self.schedule, self.M, position)

    def fits(self, g: int, i: int, j: int, position: int) -> bool:
        return self.in_flight(position) <= self.max_in_flight[g, i, j]

    # ------------------------------------------------------------------ links
    def occupancy(self, b: int, k1: int, k2: int) -> float:
        """``U``: per-microbatch time on the path ``k1 -> k2`` of the boundary at layer ``b``."""
        return cost.occupancy(self.boundary_bytes[b], self.path_bandwidth[k1, k2])

    def traversal(self, b: int, k1: int, k2: int) -> float:
        """``Q = 2 * (latency + U)`` of the boundary at layer ``b`` on the path ``k1 -> k2``."""
        return cost.traversal(self.path_latency[k1, k2], self.occupancy(b, k1, k2))

    @cached_property
    def boundary_occupancy(self) -> np.ndarray:
        """``[b, k1, k2]``: :meth:`occupancy` for every boundary and path (``k1 <= k2``)."""
        return cost.occupancy(self.boundary_bytes[:, None, None], self.path_bandwidth[None])

    @cached_property
    def boundary_traversal(self) -> np.ndarray:
        """``[b, k1, k2]``: :meth:`traversal` for every boundary and path (``k1 <= k2``)."""
        return cost.traversal(self.path_latency[None], self.boundary_occupancy)

    def plan_time(self, stages) -> float:
        """``T`` of ``(start, end, dc, g)`` stages (``g`` flattened) from the tables.

        ``inf`` if a stage breaks memory at its position. Searches rank candidates
        with it; the reported time is recomputed by :func:`chainpipe.plan.evaluate`.
        """
        S = len(stages)
        if not all(self.fits(g, i, j, S - s) for s, (i, j, _k, g) in enumerate(stages)):
            return np.inf
        cuts = [(stages[s][1], stages[s][2], stages[s + 1][2]) for s in range(S - 1)]
        fill, bottleneck = cost.fill_and_bottleneck(
            [float(self.compute_time[g, i, j]) for i, j, _k, g in stages],
            [float(self.boundary_occupancy[b, k1, k2]) for b, k1, k2 in cuts],
            [float(self.boundary_traversal[b, k1, k2]) for b, k1, k2 in cuts])
        return float(cost.iteration_time(fill, bottleneck, self.M))

    # ------------------------------------------------------------------ bounds
    @cached_property
    def lower_bound(self) -> float:
        """A cheap valid lower bound on the optimal iteration time.

        ``sum_s C_s >= total FLOP / fastest rate``; the bottleneck is at least the
        slowest single layer on the fastest device, and at least the total FLOP
        spread over the ``min(L, D)`` fastest devices in proportion to their rates.
        """
        total = self.flop_prefix[-1]
        fastest = self.rate.max()
        rates = np.sort(np.repeat(self.rate, np.minimum(self.count, self.L)))[::-1][: self.L]
        layer_max = float(np.max(np.diff(self.flop_prefix))) / fastest
        bottleneck = max(layer_max, total / rates.sum())
        return float(cost.iteration_time(cost.compute_time(total, fastest), bottleneck, self.M))

    def infeasibility_reason(self) -> str | None:
        """A reason no plan can exist, found without search; ``None`` if none is obvious."""
        best_layer_fit = self.max_in_flight[:, np.arange(self.L), np.arange(self.L) + 1]
        need = self.in_flight(1)  # the least any stage stashes: the last stage's count
        for b in range(self.L):
            if not (best_layer_fit[:, b] >= need).any():
                ly = self.instance.layers[b]
                mem = cost.memory_need(ly.params, ly.activation_bytes, need, self.bytes_per_param)
                amount = f"{mem:.6g} bytes" if np.isfinite(mem) else "more bytes than a double holds"
                return (
                    f"layer {b} ({ly.name!r}) needs {amount} with {need} microbatch(es) "
                    f"in flight; the largest device has {self.memory.max():.6g} bytes"
                )
        return None
