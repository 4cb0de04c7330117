"""The cost model: every term of the iteration time ``T``, each written once.

``docs/model.md`` states the model; this module is its only implementation.
:func:`chainpipe.plan.evaluate`, the shared :class:`~chainpipe.tables.CostTables`,
the exact DP, the CDynP agents, the MIP/CP formulations and the baselines all
compute their costs by calling these functions, so a new term (or a change to
one) touches this module and the solvers' enumeration of options, nothing else.

The unit is a **stage option**: a range of layers ``[start, end)`` run on one
device group (:class:`StageOption`). For an option the model defines

- its compute time per microbatch, forward and backward (:func:`compute_time`);
- its memory need per device for a number of microbatches in flight
  (:func:`memory_need`, :func:`memory_fits`, and the inverse :func:`max_in_flight`);

and for the schedule and the network

- how many microbatches a stage stashes at a given position (:func:`in_flight`);
- the path between two datacenters (:func:`path`), a boundary's link occupancy
  per microbatch (:func:`occupancy`) and its traversal, forward and back
  (:func:`traversal`);
- the assembly ``T = fill + (M - 1) * bottleneck`` (:func:`iteration_time`).

The elementwise functions take Python floats or numpy arrays alike, so the
tables vectorise exactly the arithmetic the evaluator does on one stage.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .instance import Instance
from .numeric import MEMORY_RTOL

_LARGEST = np.finfo(float).max

__all__ = [
    "LayerSums",
    "StageOption",
    "compute_time",
    "fill_and_bottleneck",
    "in_flight",
    "iteration_time",
    "max_in_flight",
    "memory_capacity",
    "memory_fits",
    "memory_need",
    "occupancy",
    "path",
    "steady_state",
    "traversal",
]


# --------------------------------------------------------------------------- stages
def compute_time(flop, rate):
    """``C``: seconds per microbatch, forward and backward, of ``flop`` at ``rate`` FLOP/s.

    Valid but extreme figures (``1e308`` FLOP at ``5e-324`` FLOP/s) give ``inf``
    seconds, never a warning: such a stage is simply never the best.
    """
    with np.errstate(over="ignore"):
        return flop / rate


def in_flight(schedule: str, microbatches: int, position):
    """Microbatches a stage stashes: ``M`` under GPipe, ``min(M, p)`` under 1F1B.

    ``position`` counts stages from the end: the last stage has ``p = 1``, the
    first of ``S`` stages ``p = S``. Elementwise for an array of positions.
    """
    if np.ndim(position):
        position = np.asarray(position)
        if schedule == "gpipe":
            return np.full(position.shape, microbatches, dtype=np.int64)
        return np.minimum(microbatches, position)
    return microbatches if schedule == "gpipe" else min(microbatches, position)


def memory_need(params, activation_bytes, n_in_flight, bytes_per_param):
    """Bytes a stage needs per device: its parameter state plus ``n`` stashed activations."""
    with np.errstate(over="ignore"):  # an overflow is +inf bytes: it fits nowhere
        return bytes_per_param * params + n_in_flight * activation_bytes


def memory_capacity(capacity):
    """Bytes a device may hold: its memory with the relative slack ``MEMORY_RTOL``.

    The slack keeps a stage that fits to the last byte from being refused by
    floating-point rounding in the sums; it is the same for every solver.
    """
    with np.errstate(over="ignore"):  # near the largest double the slack must not reach inf
        return np.minimum(capacity * (1 + MEMORY_RTOL), _LARGEST)


def memory_fits(need, capacity):
    """Whether ``need`` bytes fit a device of ``capacity`` bytes (see :func:`memory_capacity`)."""
    return need <= memory_capacity(capacity)


def max_in_flight(params, activation_bytes, bytes_per_param, capacity, microbatches):
    """The largest ``n <= M`` with ``memory_fits(memory_need(..., n), capacity)``.

    The inverse of the memory rule, elementwise: ``-1`` where even the parameters
    do not fit, ``M`` where activations are free. Returns int64 (a scalar for
    scalar arguments).
    """
    params, act = np.asarray(params, dtype=float), np.asarray(activation_bytes, dtype=float)
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        room = memory_capacity(np.asarray(capacity, dtype=float)) - bytes_per_param * params
        n = np.where(act > 0, np.floor(room / np.where(act > 0, act, 1.0)), np.inf)
        n = np.where(room >= 0, np.minimum(n, microbatches), -1)
    out = n.astype(np.int64)
    return int(out) if out.ndim == 0 else out


# --------------------------------------------------------------------------- links
def path(instance: Instance, k1: int, k2: int) -> tuple[float, float]:
    """Bandwidth (the minimum) and latency (the sum) between DCs ``k1 <= k2``.

    Within one datacenter (``k1 == k2``) the path is that datacenter's own link.
    """
    if k1 == k2:
        link = instance.datacenters[k1].link
        return link.bandwidth_bytes_per_s, link.latency_s
    links = instance.links[k1:k2]
    return min(lk.bandwidth_bytes_per_s for lk in links), sum(lk.latency_s for lk in links)


def occupancy(boundary_bytes, bandwidth):
    """``U = X / bandwidth``: a boundary's link time per microbatch and direction."""
    with np.errstate(over="ignore"):
        return boundary_bytes / bandwidth


def traversal(latency, link_occupancy):
    """``Q = 2 (latency + U)``: the boundary crossed once forward and once backward."""
    return 2.0 * (latency + link_occupancy)


# --------------------------------------------------------------------------- T
def fill_and_bottleneck(compute_times, occupancies, traversals) -> tuple[float, float]:
    """``(sum C + sum Q, max(max C, max U))`` of a run of stages and their boundaries.

    The two quantities ``T`` is assembled from (:func:`iteration_time`); also the
    label a decomposed search keeps for a suffix of a plan. Empty boundary lists
    are fine (one stage: no boundary).
    """
    compute_times = list(compute_times)
    fill = sum(compute_times) + sum(traversals)
    bottleneck = max(compute_times + list(occupancies))
    return fill, bottleneck


def steady_state(microbatches: int, bottleneck):
    """``(M - 1) * bottleneck``: the steady state, paced by the slowest resource.

    0 for ``M = 1`` even when the bottleneck is infinite (no ``0 * inf``).
    """
    if microbatches == 1:
        return np.zeros(np.shape(bottleneck)) if np.ndim(bottleneck) else 0.0
    with np.errstate(over="ignore"):
        return (microbatches - 1) * bottleneck


def iteration_time(fill_drain, bottleneck, microbatches: int):
    """``T = fill_drain + (M - 1) * bottleneck``.

    ``fill_drain`` is ``sum_s C_s + sum_s Q_s`` and ``bottleneck`` is
    ``max(max_s C_s, max_s U_s)``; :func:`chainpipe.plan.evaluate` and every
    solver's search assemble ``T`` (or an optimistic bound on it) here.
    """
    return fill_drain + steady_state(microbatches, bottleneck)


# --------------------------------------------------------------------------- options
@dataclass(frozen=True)
class StageOption:
    """A stage option: layers ``[start, end)`` on group ``group`` of datacenter ``dc``.

    Attributes
    ----------
    start, end : int
        The layer range, 0-based, half-open.
    dc : int
        The datacenter's index in chain order.
    group : int
        The device group's index within its datacenter.
    """

    start: int
    end: int
    dc: int
    group: int


class LayerSums:
    """Prefix sums of the model's layers, for the cost of any layer range in O(1).

    Parameters
    ----------
    instance : Instance
        The instance whose layers are summed.

    Attributes
    ----------
    flop, params, activation : numpy.ndarray
        ``[L + 1]`` prefix sums: FLOP (forward + backward), parameters and stashed
        activation bytes of layers ``[0, i)``.
    output_bytes : numpy.ndarray
        ``[L + 1]``: ``output_bytes[b]`` crosses the boundary at layer ``b`` (after
        layer ``b - 1``); entry 0 is unused and 0.
    """

    def __init__(self, instance: Instance):
        layers = instance.layers
        self.instance = instance
        self.flop = np.concatenate(([0.0], np.cumsum([ly.flop for ly in layers])))
        self.params = np.concatenate(([0.0], np.cumsum([float(ly.params) for ly in layers])))
        self.activation = np.concatenate(([0.0], np.cumsum([ly.activation_bytes for ly in layers])))
        self.output_bytes = np.array([0.0] + [ly.output_bytes for ly in layers])

    def range_sums(self, prefix: np.ndarray) -> np.ndarray:
        """``[i, j]``: the sum over layers ``[i, j)`` of a prefix array; 0 where ``j <= i``."""
        return np.triu(prefix[None, :] - prefix[:, None], 1)

    # one stage option at a time (the evaluator's view)
    def option_compute_time(self, option: StageOption) -> float:
        """``C`` of ``option`` on its group."""
        group = self.instance.datacenters[option.dc].devices[option.group]
        return float(compute_time(self.flop[option.end] - self.flop[option.start],
                                  group.flop_per_s))

    def option_memory_need(self, option: StageOption, n_in_flight: int) -> float:
        """Bytes per device of ``option`` with ``n_in_flight`` microbatches stashed."""
        return float(memory_need(self.params[option.end] - self.params[option.start],
                                 self.activation[option.end] - self.activation[option.start],
                                 n_in_flight, self.instance.training.bytes_per_param))
