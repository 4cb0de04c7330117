"""Costs of stages with a data-parallel width and a tensor-parallel degree, for the baselines.

A baseline's candidate plan is a list of stages ``(start, end, dc, g, d, t)``: layers
``[start, end)`` on ``d * t`` devices of the flattened device group ``g``
(:attr:`CostTables.groups <chainpipe.tables.CostTables.groups>`) in datacenter ``dc``.
:class:`StageCosts` ranks such plans with the functions of :mod:`chainpipe.cost`
(boundaries from :class:`~chainpipe.tables.CostTables`, which do not depend on the
widths); the time a baseline reports is recomputed by :func:`chainpipe.plan.evaluate`.
With ``d = t = 1`` every quantity is the one the tables give, bit for bit.
"""

from __future__ import annotations

import math
from functools import cache

import numpy as np

from ... import cost
from ...instance import DeviceGroup, Instance
from ...plan import Plan
from ...tables import CostTables

#: a stage of a candidate plan: (start, end, dc, flattened group, d, t)
StageTuple = tuple[int, int, int, int, int, int]


class StageCosts:
    """Per-option compute, memory and synchronisation of one instance, cached.

    Parameters
    ----------
    instance : Instance
        The instance whose stages are costed.

    Attributes
    ----------
    tables : CostTables
        The instance's tables: groups in chain order, rates, boundaries.
    """

    def __init__(self, instance: Instance):
        self.instance = instance
        self.tables = CostTables(instance)
        self.sums = self.tables.sums
        self.parallelism = instance.parallelism
        self.L, self.M, self.K = self.tables.L, self.tables.M, self.tables.K
        # one cache per object, keyed by the option: a search asks for the same ones often
        self.compute_time = cache(self._compute_time)
        self.max_in_flight = cache(self._max_in_flight)
        self.sync_time = cache(self._sync_time)

    # ------------------------------------------------------------------ groups and shapes
    def group(self, g: int) -> DeviceGroup:
        """The device group behind flattened index ``g``."""
        grp = self.tables.groups[g]
        return self.instance.datacenters[grp.dc].devices[grp.index]

    def dc(self, g: int) -> int:
        """The datacenter of flattened group ``g``."""
        return int(self.tables.group_dc[g])

    def capacity(self, g: int, d: int, t: int) -> int:
        """How many stages of shape ``d x t`` group ``g`` can run at once (at most ``L``).

        0 when ``t`` exceeds the group's node size: a tensor-parallel group sits in one node.
        """
        grp = self.group(g)
        if t > grp.devices_per_node:
            return 0
        return min(grp.count // (d * t), self.L)

    def shapes(self, g: int) -> list[tuple[int, int]]:
        """The shapes ``(d, t)`` the instance allows that fit group ``g`` at least once."""
        widths = sorted(self.instance.training.data_parallel_widths)
        return [(d, t) for t in sorted(self.parallelism.tensor_parallel) for d in widths
                if self.capacity(g, d, t) > 0]

    def node_degree(self, g: int) -> int | None:
        """The largest allowed tensor-parallel degree a node of group ``g`` holds, if any."""
        node = self.group(g).devices_per_node
        fitting = [t for t in self.parallelism.tensor_parallel if t <= node]
        return max(fitting) if fitting else None

    # ------------------------------------------------------------------ one stage
    def _option(self, i: int, j: int, g: int, d: int, t: int) -> cost.StageOption:
        grp = self.tables.groups[g]
        return cost.StageOption(i, j, grp.dc, grp.index, d, t)

    def _compute_time(self, i: int, j: int, g: int, d: int = 1, t: int = 1) -> float:
        """``C`` of layers ``[i, j)`` on ``d x t`` devices of group ``g``."""
        return self.sums.option_compute_time(self._option(i, j, g, d, t))

    def _sync_time(self, i: int, j: int, g: int, d: int = 1, t: int = 1) -> float:
        """``R`` of layers ``[i, j)`` on ``d x t`` devices of group ``g``."""
        return self.sums.option_sync_time(self._option(i, j, g, d, t))

    def _max_in_flight(self, i: int, j: int, g: int, d: int = 1, t: int = 1) -> int:
        """The most microbatches layers ``[i, j)`` may stash on ``d x t`` devices of ``g``."""
        training, s = self.instance.training, self.sums
        return int(cost.max_in_flight(
            s.params[j] - s.params[i], s.activation[j] - s.activation[i],
            training.bytes_per_param, self.group(g).memory_bytes, self.M, d, t,
            training.sharded_bytes_per_param))

    def fits(self, i: int, j: int, g: int, d: int, t: int, position: int) -> bool:
        """Whether the stage fits memory ``position`` stages from the end (1 = last)."""
        return self.tables.in_flight(position) <= self.max_in_flight(i, j, g, d, t)

    # ------------------------------------------------------------------ plans
    def plan_time(self, stages: list[StageTuple]) -> float:
        """``T`` of a candidate plan (one pipeline) by the cost model under the instance's
        objective (:func:`chainpipe.cost.period`); ``inf`` if a stage breaks memory."""
        S, tab = len(stages), self.tables
        if not all(self.fits(i, j, g, d, t, S - s) for s, (i, j, _k, g, d, t) in enumerate(stages)):
            return math.inf
        cuts = [(stages[s][1], stages[s][2], stages[s + 1][2]) for s in range(S - 1)]
        C = [self.compute_time(i, j, g, d, t) for i, j, _k, g, d, t in stages]
        U = [float(tab.occupancy(b, k1, k2)) for b, k1, k2 in cuts]
        Q = [float(tab.traversal(b, k1, k2)) for b, k1, k2 in cuts]
        fill, _ = cost.fill_and_bottleneck(C, U, Q)
        training = self.instance.training
        # only GPipe's period reads f_s and b_s (cost.period): the others need not pay for them
        gpipe = (training.objective, training.schedule) == ("period", "gpipe")
        f, b = self.phase_times(stages) if gpipe else ([], [])
        lam = cost.period(training.objective, training.schedule, C, U, Q, f, b, self.M)
        sync = max(self.sync_time(i, j, g, d, t) for i, j, _k, g, d, t in stages)
        return float(cost.iteration_time(fill, lam, self.M, sync))

    def phase_times(self, stages: list[StageTuple]) -> tuple[list[float], list[float]]:
        """``f_s`` and ``b_s`` of each stage of a candidate (:func:`chainpipe.cost.phase_time`)."""
        pairs = [self.sums.option_phase_times(cost.StageOption(
            i, j, k, self.tables.groups[g].index, d, t)) for i, j, k, g, d, t in stages]
        return [p[0] for p in pairs], [p[1] for p in pairs]

    def to_plan(self, stages: list[StageTuple]) -> Plan:
        """The plan of a candidate, device names allocated by :meth:`Plan.from_tuples`."""
        return Plan.from_tuples(self.instance, [
            (i, j, k, self.tables.groups[g].index, d, t) for i, j, k, g, d, t in stages])

    def memory_failure(self, stages: list[StageTuple]) -> str | None:
        """The first stage of a candidate that breaks memory, in words; ``None`` if all fit."""
        S = len(stages)
        for s, (i, j, k, g, d, t) in enumerate(stages):
            if not self.fits(i, j, g, d, t, S - s):
                where = f"{self.instance.datacenters[k].name}/{self.group(g).type}"
                width = "device" if d * t == 1 else f"{d} x {t} devices"
                return (f"stage {s} (layers [{i}, {j}), {self.tables.in_flight(S - s)} "
                        f"microbatch(es) in flight) does not fit a {where} {width}")
        return None

    # ------------------------------------------------------------------ no plan at all
    def infeasibility_reason(self) -> str | None:
        """A reason no plan can exist, found without search (``None`` if none is obvious):
        :meth:`CostTables.infeasibility_reason <chainpipe.tables.CostTables.infeasibility_reason>`,
        which knows the data- and tensor-parallel shapes."""
        return self.tables.infeasibility_reason()


def effective_rate(costs: StageCosts, g: int, d: int, t: int) -> float:
    """FLOP/s of ``d x t`` devices of group ``g`` running the model's layers.

    ``F / C`` for the whole model, ``C`` from :func:`chainpipe.cost.compute_time`: the
    aggregate rate ``d t r`` less what the tensor-parallel all-reduces cost (the ratio
    of the model's average layer); ``d t r`` when the model has no FLOP.
    """
    total = float(costs.sums.flop[-1])
    if total <= 0:
        return d * t * costs.group(g).flop_per_s
    c = costs.compute_time(0, costs.L, g, d, t)
    return total / c if c > 0 else np.inf
