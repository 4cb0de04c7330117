"""Backend-free cost tables shared by every solver (DP, CDynP, ILPs, CP-SAT, baselines).

Everything a search needs about an instance, computed once with numpy:
device groups in chain order, per-stage compute times and the largest number
of in-flight microbatches a stage can hold, path bandwidths and latencies
between datacenters, and simple lower bounds. The tables serve the search
only; reported times always come from :func:`chainpipe.plan.evaluate`.
"""

from __future__ import annotations

import bisect
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
    devices_per_node: int = 1
    node_bandwidth: float = np.inf


@dataclass(frozen=True)
class GroupOptions:
    """Every stage option of one group: the ``(d, t)`` pairs it may run, and per pair
    and layer range the compute time, the in-flight limit and the synchronisation.

    Attributes
    ----------
    d, t, width : numpy.ndarray
        ``[c]``: data-parallel width, tensor-parallel degree and devices ``d * t`` of
        pair ``c``; pairs with ``t`` above the node size or ``d * t`` above the count
        are left out.
    compute_time : numpy.ndarray
        ``[c, i, j]``: ``C`` of layers ``[i, j)`` with pair ``c``; ``inf`` where ``j <= i``.
    max_in_flight : numpy.ndarray
        ``[c, i, j]``: the largest in-flight count that fits per device; ``-1`` where
        nothing fits (or ``j <= i``).
    sync_time : numpy.ndarray
        ``[c, i, j]``: ``R`` of layers ``[i, j)`` with pair ``c`` (0 for ``d = 1``).
    """

    d: np.ndarray
    t: np.ndarray
    width: np.ndarray
    compute_time: np.ndarray
    max_in_flight: np.ndarray
    sync_time: np.ndarray


class ChainPaths:
    """Bandwidth (the minimum) and latency (the sum) of every path of the DC chain in
    ``O(K log K)`` memory, on demand: a sparse table of range minima of the links'
    bandwidths (``O(1)`` per path) and the links' latencies summed in chain order
    (``O(span)``, the very sum of :func:`chainpipe.cost.path`, so every figure equals the
    cost model's bit for bit); a long chain never builds its ``K^2`` paths.

    Within one datacenter (``k1 == k2``) the path is that datacenter's own link.
    """

    def __init__(self, instance: Instance):
        own = [dc.link for dc in instance.datacenters]
        self.own_bandwidth = [float(lk.bandwidth_bytes_per_s) for lk in own]
        self.own_latency = [float(lk.latency_s) for lk in own]
        self.link_bandwidth = np.array([lk.bandwidth_bytes_per_s for lk in instance.links],
                                       dtype=float)
        self.link_latency = np.array([lk.latency_s for lk in instance.links], dtype=float)
        self._latency = [float(lk.latency_s) for lk in instance.links]
        levels = [self.link_bandwidth]
        while 2 ** len(levels) <= len(self.link_bandwidth):
            half = 2 ** (len(levels) - 1)
            prev = levels[-1]
            levels.append(np.minimum(prev[:-half], prev[half:]))
        self._min = [lv.tolist() for lv in levels]
        self._levels = levels

    def bandwidth(self, k1: int, k2: int) -> float:
        """The least bandwidth of the links between DCs ``k1 <= k2``."""
        if k1 == k2:
            return self.own_bandwidth[k1]
        level = int(k2 - k1).bit_length() - 1
        row = self._min[level]
        a, b = row[k1], row[k2 - (1 << level)]
        return a if a <= b else b

    def latency(self, k1: int, k2: int) -> float:
        """The summed latency of the links between DCs ``k1 <= k2``."""
        if k1 == k2:
            return self.own_latency[k1]
        return sum(self._latency[k1:k2])

    def path(self, k1: int, k2: int) -> tuple[float, float]:
        """``(bandwidth, latency)`` between DCs ``k1 <= k2``."""
        return self.bandwidth(k1, k2), self.latency(k1, k2)

    def many(self, k1: np.ndarray, k2: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(bandwidth, latency)`` of many paths ``k1 <= k2`` at once, ``O(1)`` each.

        The bandwidths equal :meth:`bandwidth`'s; the latencies are prefix-sum
        differences, equal to :meth:`latency` up to rounding (a relative 1e-15 per link):
        for bounds that allow a slack, never for a cost."""
        k1, k2 = np.asarray(k1, dtype=np.int64), np.asarray(k2, dtype=np.int64)
        own = k1 == k2
        bw = np.asarray(self.own_bandwidth, dtype=float)[k1] if len(self.own_bandwidth) \
            else np.zeros(k1.shape)
        lat = np.asarray(self.own_latency, dtype=float)[k1] if len(self.own_latency) \
            else np.zeros(k1.shape)
        far = ~own
        if far.any():
            a, b = k1[far], k2[far]
            level = np.frexp((b - a).astype(float))[1] - 1  # bit_length - 1
            got = np.empty(a.shape)
            for lv in np.unique(level):
                sel = level == lv
                row = self._levels[lv]
                got[sel] = np.minimum(row[a[sel]], row[b[sel] - (1 << int(lv))])
            bw[far] = got
            prefix = np.concatenate(([0.0], np.cumsum(self.link_latency)))
            lat[far] = prefix[b] - prefix[a]
        return bw, lat

    def dense(self) -> tuple[np.ndarray, np.ndarray]:
        """``[k1, k2]`` bandwidths and latencies of every path (``inf`` and 0 below the
        diagonal): ``K^2`` numbers, for the dense tables of small instances only."""
        K, links = len(self.own_bandwidth), self._latency
        bw, lat = np.full((K, K), np.inf), np.zeros((K, K))
        for a in range(K):
            bw[a, a], lat[a, a] = self.own_bandwidth[a], self.own_latency[a]
            bw[a, a + 1:] = np.minimum.accumulate(self.link_bandwidth[a:])
            lat[a, a + 1:] = [sum(links[a:b]) for b in range(a + 1, K)]
        return bw, lat


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
            Group(k, gi, g.type, g.count, float(g.flop_per_s), float(g.memory_bytes),
                  g.devices_per_node,
                  g.node_bandwidth)
            for k, dc in enumerate(instance.datacenters)
            for gi, g in enumerate(dc.devices)
        )
        self.parallelism = instance.parallelism
        #: every stage on one device (contract version 1): the tables below are the whole story
        self.single_device = self.parallelism.single_device
        self.G = len(self.groups)
        self.sums = cost.LayerSums(instance)
        self.flop_prefix = self.sums.flop
        #: output bytes crossing a boundary at layer index b (after layer b - 1), b = 1..L-1
        self.boundary_bytes = self.sums.output_bytes
        self._boundary = [float(x) for x in self.boundary_bytes]  # scalar lookups, fast
        self.rate = np.array([g.flop_per_s for g in self.groups])
        self.memory = np.array([g.memory_bytes for g in self.groups])
        self.count = np.array([g.count for g in self.groups], dtype=np.int64)
        self.group_dc = np.array([g.dc for g in self.groups], dtype=np.int64)
        self.chain = ChainPaths(instance)

    # ------------------------------------------------------------------ stages
    @cached_property
    def stage_flop(self) -> np.ndarray:
        """``[i, j]``: FLOP of layers ``[i, j)`` (forward + backward); 0 where ``j <= i``."""
        return self.sums.range_sums(self.sums.flop)

    @cached_property
    def layer_flop_max(self) -> np.ndarray:
        """``[a]``: the FLOP of the largest single layer of ``[0, a)`` (0 for ``a = 0``)."""
        return np.concatenate(([0.0], np.maximum.accumulate(np.diff(self.flop_prefix))))

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

    def stage_column(self, g: int, j: int) -> tuple[np.ndarray, np.ndarray]:
        """``(compute_time[g, :j, j], max_in_flight[g, :j, j])``: the stages ``[i, j)``
        ending at ``j`` on group ``g`` (one device), the same figures as the dense
        tables in ``O(L)`` work and memory, for the builders that walk a few stages
        (the dense ``[G, L, L]`` tables of a 1000-DC, 300-layer chain are 1.4 GB)."""
        s = self.sums
        flop = s.flop[j] - s.flop[:j]
        params, act = s.params[j] - s.params[:j], s.activation[j] - s.activation[:j]
        return (cost.compute_time(flop, self.rate[g]),
                cost.max_in_flight(params, act, self.bytes_per_param, self.memory[g], self.M))

    # ------------------------------------------------------------------ v2 options
    def pairs(self, g: int) -> list[tuple[int, int]]:
        """The ``(d, t)`` pairs group ``g`` can run: allowed by the instance (``d`` dividing
        ``microbatch_size`` when it is stated), ``t`` within a node, ``d * t`` within the
        count; ordered by ``t``, then ``d``."""
        grp = self.groups[g]
        cache = self.__dict__.setdefault("_pairs", {})
        key = (grp.devices_per_node, grp.count)
        if key not in cache:  # bisection: a long list of widths costs once, not per group
            widths = self._sorted_widths
            cache[key] = [(d, t) for t in sorted(self.parallelism.tensor_parallel)
                          if t <= grp.devices_per_node
                          for d in widths[:bisect.bisect_right(widths, grp.count // t)]]
        return list(cache[key])

    @cached_property
    def _sorted_widths(self) -> list[int]:
        """The widths a stage may use (``Training.data_parallel_widths``), ascending."""
        return sorted(self.instance.training.data_parallel_widths)

    @cached_property
    def widest(self) -> int:
        """The most devices one stage can occupy on any group (1 for version 1)."""
        return max((d * t for g in range(self.G) for d, t in self.pairs(g)), default=1)

    def options(self, g: int) -> GroupOptions:
        """All stage options of group ``g`` (:class:`GroupOptions`), computed once per
        distinct group: groups alike in everything the options depend on (rate, memory,
        node, pairs, their DC's own link) share one (a long chain of one type builds
        one set, not one per DC)."""
        cache = self.__dict__.setdefault("_options", {})
        key = self._options_key(g)
        if key not in cache:
            cache[key] = self._group_options(g)
        return cache[key]

    def _options_key(self, g: int) -> tuple:
        """What :meth:`_group_options` reads of group ``g``."""
        grp = self.groups[g]
        link = self.instance.datacenters[grp.dc].link
        return (grp.flop_per_s, grp.memory_bytes, grp.devices_per_node, grp.node_bandwidth,
                tuple(self.pairs(g)), link.bandwidth_bytes_per_s, link.latency_s)

    def _group_options(self, g: int) -> GroupOptions:
        grp, training = self.groups[g], self.instance.training
        pairs = self.pairs(g)
        d = np.array([p[0] for p in pairs], dtype=np.int64)
        t = np.array([p[1] for p in pairs], dtype=np.int64)
        shape = (len(pairs), 1, 1)
        dd, tt = d.reshape(shape), t.reshape(shape)
        flop = self.stage_flop[None]
        tp = self.sums.range_sums(self.sums.tp_bytes)[None]
        params = self.sums.range_sums(self.sums.params)[None]
        act = self.sums.range_sums(self.sums.activation)[None]
        link = self.instance.datacenters[grp.dc].link
        ranges = self._ranges[None]
        c = cost.compute_time(flop, grp.flop_per_s, dd, tt, tp, grp.node_bandwidth)
        n = cost.max_in_flight(params, act, self.bytes_per_param, grp.memory_bytes, self.M,
                               dd, tt, training.sharded_bytes_per_param)
        r = cost.sync_time(params, dd, tt, training.gradient_bytes_per_param,
                           link.bandwidth_bytes_per_s, link.latency_s)
        if len(pairs) == 0:
            empty = np.zeros((0, self.L + 1, self.L + 1))
            return GroupOptions(d, t, d * t, empty, empty.astype(np.int64), empty)
        return GroupOptions(d, t, d * t, np.where(ranges, c, np.inf), np.where(ranges, n, -1),
                            np.where(ranges, np.broadcast_to(r, c.shape), 0.0))

    def in_flight(self, position: int) -> int:
        """Microbatches stashed by a stage at ``position`` (1 = last stage)."""
        return cost.in_flight(self.schedule, self.M, position)

    def fits(self, g: int, i: int, j: int, position: int) -> bool:
        return self.in_flight(position) <= self.max_in_flight[g, i, j]

    # ------------------------------------------------------------------ links
    def path(self, k1: int, k2: int) -> tuple[float, float]:
        """Bandwidth and latency of the path ``k1 -> k2`` (``k1 <= k2``), in ``O(1)``."""
        return self.chain.path(k1, k2)

    def occupancy(self, b: int, k1: int, k2: int) -> float:
        """``U``: per-microbatch time on the path ``k1 -> k2`` of the boundary at layer ``b``."""
        x = self._boundary[b] if type(b) is int else self.boundary_bytes[b]  # or an array
        return cost.occupancy(x, self.chain.bandwidth(k1, k2))

    def traversal(self, b: int, k1: int, k2: int) -> float:
        """``Q = 2 * (latency + U)`` of the boundary at layer ``b`` on the path ``k1 -> k2``."""
        return cost.traversal(self.chain.latency(k1, k2), self.occupancy(b, k1, k2))

    @cached_property
    def boundary_occupancy(self) -> np.ndarray:
        """``[b, k1, k2]``: :meth:`occupancy` for every boundary and path (``k1 <= k2``).

        Dense: ``L K^2`` numbers, for the baselines and one-DC tables; the exact solvers
        ask :meth:`occupancy` per path instead (a long chain would not fit)."""
        return cost.occupancy(self.boundary_bytes[:, None, None], self.chain.dense()[0][None])

    @cached_property
    def boundary_traversal(self) -> np.ndarray:
        """``[b, k1, k2]``: :meth:`traversal` for every boundary and path (``k1 <= k2``);
        dense like :attr:`boundary_occupancy`."""
        return cost.traversal(self.chain.dense()[1][None], self.boundary_occupancy)

    def crossing_floors(self) -> tuple[np.ndarray, np.ndarray]:
        """``[k0, b]``: the least occupancy and the least traversal of the boundary at
        ``b`` on any chain path between two DCs ``k1 < k2 <= k0`` (``inf`` for ``k0 = 0``).

        A path's bandwidth is at most that of each of its links and its latency at least
        each link's, so the least is always on a single link: ``O(L K)``, not ``O(L K^2)``.
        """
        bw, lat = self.chain.link_bandwidth, self.chain.link_latency
        u = cost.occupancy(self.boundary_bytes[None, :], bw[:, None])  # [link, b]
        q = cost.traversal(lat[:, None], u)
        inf = np.full((1, self.L + 1), np.inf)
        return (np.concatenate([inf, np.minimum.accumulate(u, axis=0)]),
                np.concatenate([inf, np.minimum.accumulate(q, axis=0)]))

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
            [float(self.occupancy(b, k1, k2)) for b, k1, k2 in cuts],
            [float(self.traversal(b, k1, k2)) for b, k1, k2 in cuts])
        return float(cost.iteration_time(fill, bottleneck, self.M))

    # ------------------------------------------------------------------ bounds
    @cached_property
    def lower_bound(self) -> float:
        """A cheap valid lower bound on the optimal iteration time.

        The least of two cases: a plan inside one datacenter (:meth:`_capacity_bound`
        on that datacenter's groups), and a plan across datacenters, which also pays a
        boundary on the MAN: its bottleneck is at least the least occupancy of any
        layer's output on the fastest chain link, and its fill at least that boundary's
        traversal. ``docs/dp.md`` gives the argument.
        """
        return self.bound_with_floors([0.0] * self.K, 0.0)

    def bound_with_floors(self, alone: list[float], across: float, check=None) -> float:
        """:attr:`lower_bound` with a bottleneck known to be at least ``alone[k]`` for a
        plan inside datacenter ``k`` and at least ``across`` for a plan across several
        (a search may know more than the rates tell, e.g. from the layers' granularity).
        ``check`` (``Deadline.check``) is called per kind of datacenter."""
        best = min(self._alone_bounds(alone, check))
        if self.K == 1:
            return float(best)
        chain = self.instance.links
        out = self.boundary_bytes[1:self.L]
        if len(out) == 0:  # one layer: no boundary, one stage
            return float(best)
        fastest = max(lk.bandwidth_bytes_per_s for lk in chain)
        u_min = float(cost.occupancy(out.min(), fastest))
        q_min = float(cost.traversal(min(lk.latency_s for lk in chain), u_min))
        spread = self._capacity_bound(np.ones(self.G, dtype=bool), max(u_min, across), q_min)
        return float(min(best, spread))

    def pipeline_bound(self, first: int, last: int, microbatches: int,
                       bottleneck_floor: float = 0.0) -> float:
        """A lower bound on ``T_p`` (without synchronisation) of a pipeline of
        ``microbatches`` placed on DCs ``first..last``: :meth:`_capacity_bound` on their
        groups (contract version 3: a pipeline holds the whole model on its own range)."""
        mine = (self.group_dc >= first) & (self.group_dc <= last)
        return self._capacity_bound(mine, bottleneck_floor, microbatches=microbatches)

    def _alone_bounds(self, alone: list[float], check=None) -> list[float]:
        """:meth:`_capacity_bound` of each datacenter alone, once per kind (the rates and
        counts of its groups and its floor): a long chain of few kinds costs few."""
        known: dict = {}
        out = []
        for k in range(self.K):
            mine = self.group_dc == k
            key = (tuple(self.rate[mine].tolist()), tuple(self.count[mine].tolist()), alone[k])
            if key not in known:
                if check is not None:
                    check()
                known[key] = self._capacity_bound(mine, alone[k])
            out.append(known[key])
        return out

    def _capacity_bound(self, groups: np.ndarray, bottleneck_floor: float = 0.0,
                        fill_floor: float = 0.0, microbatches: int | None = None) -> float:
        """A lower bound on ``T`` of a plan on the groups selected by ``groups``.

        With ``W`` the most devices one stage may occupy (1 in version 1), for any
        bottleneck ``B``: ``B`` is at least the slowest single layer on ``W`` of the
        fastest devices, at least the total FLOP spread over the selected devices in
        proportion to their rates (a stage's ``C`` times its devices' rates covers its
        FLOP), and at least ``bottleneck_floor``; the fill is at least the total FLOP
        on the widest stage of the fastest device, at least :func:`fill_curve` at ``B``
        (each group adds at most ``B``), and at least ``fill_floor``. ``T >= fill(B) +
        (M - 1) B``, minimised over ``B`` on a grid whose cells take the fill at their
        upper end and ``B`` at their lower end, so the minimum is a bound; the
        synchronisation is at least 0. ``microbatches``: ``M`` of the bound (default the
        instance's; a pipeline of contract version 3 runs ``M_p``).
        """
        if not groups.any():
            return np.inf
        M = self.M if microbatches is None else microbatches
        total = float(self.flop_prefix[-1])
        rate, count = self.rate[groups], self.count[groups]
        fastest = rate.max()
        most = self.L * self.widest
        rates = fastest_rate(rate, count, most)
        layer_max = cost.compute_time(float(np.max(np.diff(self.flop_prefix))), fastest,
                                      self.widest)
        with np.errstate(over="ignore", divide="ignore"):  # extreme rates: an infinite bound
            floor = max(layer_max, float(total / rates.sum()), bottleneck_floor)
        base_fill = max(float(cost.compute_time(total, fastest, self.widest)), fill_floor)
        if M == 1 or not np.isfinite(floor):
            return float(cost.iteration_time(base_fill, floor, M))
        grid = floor * (1.0 + np.linspace(0.0, 2.0, 801))
        fill = np.maximum(base_fill, fill_bounds(total, rate * count, grid[1:]))
        cells = cost.iteration_time(fill, grid[:-1], M)
        beyond = cost.iteration_time(base_fill, grid[-1], M)  # every B past the grid
        return float(min(cells.min(), beyond))

    def infeasibility_reason(self) -> str | None:
        """A reason no plan can exist, found without search; ``None`` if none is obvious."""
        if not self.single_device and not any(self.pairs(g) for g in range(self.G)):
            return ("no device group can run any allowed (data_parallel, tensor_parallel) pair: "
                    "every tensor-parallel degree exceeds the node sizes or every width the counts")
        if self.single_device:
            best_layer_fit = self.max_in_flight[:, np.arange(self.L), np.arange(self.L) + 1]
        else:  # the best pair of each group per layer
            best_layer_fit = np.array([
                self.options(g).max_in_flight[:, np.arange(self.L), np.arange(self.L) + 1]
                .max(axis=0, initial=-1) for g in range(self.G)]).reshape(self.G, self.L)
        need = self.in_flight(1)  # the least any stage stashes: the last stage's count
        for b in range(self.L):
            if not (best_layer_fit[:, b] >= need).any():
                ly = self.instance.layers[b]
                mem = cost.memory_need(ly.params, ly.activation_bytes, need, self.bytes_per_param)
                amount = f"{mem:.6g} bytes" if np.isfinite(mem) else "more bytes than a double holds"
                spread = "" if self.single_device else \
                    " on one device, and no allowed width or degree brings it within a device"
                return (
                    f"layer {b} ({ly.name!r}) needs {amount} with {need} microbatch(es) "
                    f"in flight{spread}; the largest device has {self.memory.max():.6g} bytes"
                )
        return None


def fastest_rate(rate, count, n):
    """The summed rate of the ``n`` fastest devices (``n`` a number or an array) of
    groups of ``rate`` and ``count``: ``O(G)`` work and memory per ``n``, never one entry
    per device (a count of ``2^31`` is one multiplication)."""
    rate, count = np.asarray(rate, dtype=float), np.asarray(count, dtype=float)
    order = np.argsort(-rate, kind="stable")
    r, c = rate[order], count[order]
    starts = np.concatenate(([0.0], np.cumsum(c)))  # the first device of each group
    before = np.concatenate(([0.0], np.cumsum(r * c)))
    n = np.minimum(np.asarray(n, dtype=float), starts[-1])
    j = np.clip(np.searchsorted(starts, n, side="right") - 1, 0, max(len(r) - 1, 0))
    if not len(r):
        return np.zeros(np.shape(n))
    return before[j] + (n - starts[j]) * r[j]


def fill_curve(group_rates, cap: float) -> tuple[np.ndarray, np.ndarray]:
    """The fill bound of a run of stages with every ``C_s <= cap``, as a piecewise-linear
    function of its FLOP: breakpoints ``x`` (FLOP) and values ``y`` (seconds).

    ``group_rates`` holds, per group, ``n_g r_g``: the rate of the ``n_g`` devices the
    stages may use. Stages on group ``g`` with ``x_g`` FLOP in all have
    ``sum_s C_s >= sum_s F_s / (w_s r_g) >= x_g / (n_g r_g)`` (Cauchy-Schwarz with
    ``sum_s w_s <= n_g``; tensor-parallel all-reduces only add), and
    ``x_g <= cap n_g r_g`` since each ``C_s <= cap``. The least fill for ``x`` FLOP
    fills the groups of largest ``n_g r_g`` first, each adding at most ``cap``
    (``docs/dp.md``).
    """
    rates = sorted((r for r in group_rates if r > 0), reverse=True)
    return fill_breaks(np.asarray(rates, dtype=float), cap)


def fill_breaks(rates: np.ndarray, cap: float) -> tuple[np.ndarray, np.ndarray]:
    """:func:`fill_curve` of rates already positive and in falling order (a search that
    asks one set of free devices at many caps sorts them once)."""
    x = np.concatenate(([0.0], np.cumsum(cap * rates)))
    y = cap * np.arange(len(rates) + 1, dtype=float)
    return x, y


def fill_bound(flop: float, x: list, cap: float) -> float:
    """The fill bound of :func:`fill_curve` (breakpoints ``x``, steps of ``cap``) at
    ``flop``; its last value beyond its end, where the bottleneck bound already prunes."""
    return fill_bound_at(flop, x, cap, bisect.bisect_right(x, flop) - 1)


def fill_bound_at(flop: float, x, cap: float, j: int) -> float:
    """:func:`fill_bound` given ``j``, the last breakpoint of ``x`` not above ``flop``
    (plain arithmetic: the DP's compiled kernel compiles this very function)."""
    if j >= len(x) - 1:
        return cap * (len(x) - 1)
    return cap * (j + (flop - x[j]) / (x[j + 1] - x[j]))


def fill_bounds(flop: float, group_rates, caps: np.ndarray) -> np.ndarray:
    """:func:`fill_bound` of ``flop`` at each cap of ``caps`` at once (the same curve,
    :func:`fill_curve`, for every cap)."""
    rates = np.sort(np.asarray([r for r in np.asarray(group_rates, dtype=float) if r > 0]))[::-1]
    cumulative = np.concatenate(([0.0], np.cumsum(rates)))  # capacity per unit of cap
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        share = flop / caps
        j = np.clip(np.searchsorted(cumulative, share, side="right") - 1, 0, len(rates))
        inside = j < len(rates)
        nxt = rates[np.minimum(j, len(rates) - 1)]
        partial = np.where(inside, (flop - caps * cumulative[j]) / nxt, 0.0)
    return caps * j + partial


def dominated_options(ok, C, N, R, W, check=None, extra=()) -> np.ndarray:
    """``[c, i, j]``: whether stage option ``c`` of a range (arrays ``[c, i, j]`` of
    :class:`~chainpipe.tables.GroupOptions`, ``ok`` the options still allowed) is
    dominated by another allowed pair of the same range: no more devices, no larger ``C``
    or ``R``, no smaller in-flight limit, and better in one of them (or equal in all and
    listed first). Any plan using the dominated option stays feasible and no slower with
    its dominator instead, so ``dp``, the CDynP agents and the path ILP leave it out.

    ``check`` (``Deadline.check``) is called once per option: a long list of widths
    costs ``P^2`` comparisons of ranges, and the deadline bounds them. ``extra``: more
    arrays ``[c, i, j]`` a dominator must be no larger in (GPipe's forward and backward
    phase times, which pace its ``period`` apart)."""
    return dominance_tops(ok.astype(np.int64), C, N, R, W, check, extra) > 0


def width_rivals(W, check=None):
    """Per option ``c`` (pair, devices ``W[c]``), the other options of no more devices,
    its possible dominators: yields ``(c, rivals)`` for each ``c`` that has any (``check``
    called before each)."""
    W = np.asarray(W)
    index = np.arange(len(W))
    for c in range(len(W)):
        if check is not None:
            check()
        rivals = np.flatnonzero((W <= W[c]) & (index != c))
        if len(rivals):
            yield c, rivals


def dominance_tops(top, C, N, R, W, check=None, extra=()) -> np.ndarray:
    """``[c, i, j]``: the largest ``top`` of an option that dominates ``c`` on the range
    (the rule of :func:`dominated_options`; ``top > 0`` marks the allowed options, 0
    where none dominates). With ``top`` an option's last position class, a candidate of
    class ``cls`` is dominated iff ``cls <= dominance_tops``."""
    W = np.asarray(W)
    out = np.zeros(top.shape, dtype=np.int64)
    if len(W) < 2:
        return out
    for c, rivals in width_rivals(W, check):
        with np.errstate(invalid="ignore"):
            no_worse = ((top[rivals] > 0) & (C[rivals] <= C[c]) & (R[rivals] <= R[c])
                        & (N[rivals] >= N[c]))
            better = (C[rivals] < C[c]) | (R[rivals] < R[c]) | (N[rivals] > N[c])
            for E in extra:
                no_worse &= E[rivals] <= E[c]
                better |= E[rivals] < E[c]
        plain = (W[rivals] < W[c]) | (rivals < c)  # fewer devices, or equal and listed first
        dominating = no_worse & (plain.reshape((-1,) + (1,) * (top.ndim - 1)) | better)
        out[c] = np.where(dominating, top[rivals], 0).max(axis=0)
    return out
