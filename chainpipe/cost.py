"""The cost model: every term of the iteration time ``T``, each written once.

``docs/model.md`` states the model; this module is its only implementation.
:func:`chainpipe.plan.evaluate`, the shared :class:`~chainpipe.tables.CostTables`,
the exact DP, the CDynP agents, the MIP/CP formulations and the baselines all
compute their costs by calling these functions, so a new term (or a change to
one) touches this module and the solvers' enumeration of options, nothing else.

The unit is a **stage option**: a range of layers ``[start, end)`` run on
``d * t`` devices of one device group, ``d`` data-parallel replicas of ``t``
tensor-parallel devices each (:class:`StageOption`). For an option the model
defines

- its compute time per microbatch, forward and backward, tensor-parallel
  all-reduces included (:func:`compute_time`, :func:`tp_allreduce_time`);
- its memory need per device for a number of microbatches in flight
  (:func:`memory_need`, :func:`memory_fits`, and the inverse :func:`max_in_flight`);
- its gradient synchronisation once per iteration (:func:`sync_time`);

and for the schedule and the network

- how many microbatches a stage stashes at a given position (:func:`in_flight`);
- the path between two datacenters (:func:`path`), a boundary's link occupancy
  per microbatch (:func:`occupancy`) and its traversal, forward and back
  (:func:`traversal`);
- the assembly ``T = fill + (M - 1) * bottleneck + sync`` (:func:`iteration_time`).

Contract version 3 adds, each written here once:

- the forward and backward parts ``f_s``, ``b_s`` of a stage's time (:func:`phase_time`);
- the steady-state period of a pipeline by objective and schedule (:func:`period`):
  ``classic`` (:func:`classic_period`), GPipe's two phases (:func:`gpipe_period`) and
  1F1B's loops (:func:`one_f_one_b_period`, :func:`worst_loop`);
- the averaging of gradients across pipelines ``R_X`` (:func:`cross_sync_time`) and
  the plan's ``T = max_p T_p + max R_s + R_X / H`` (:func:`plan_time`).

With ``d = t = 1`` (version 1 of the contract) every function reduces to its
version-1 arithmetic exactly, bit for bit.

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
    "classic_period",
    "compute_time",
    "cross_sync_time",
    "fill_and_bottleneck",
    "gpipe_period",
    "in_flight",
    "iteration_time",
    "max_in_flight",
    "memory_capacity",
    "memory_fits",
    "memory_need",
    "occupancy",
    "one_f_one_b_period",
    "path",
    "period",
    "phase_time",
    "plan_time",
    "steady_state",
    "sync_time",
    "tp_allreduce_time",
    "traversal",
    "worst_loop",
]


# --------------------------------------------------------------------------- stages
def tp_allreduce_time(tp_bytes, d, t, node_bandwidth):
    """Seconds per microbatch of a stage's tensor-parallel all-reduces.

    ``2 (t - 1) / t * (tp_bytes / d) / B``: a ring all-reduce of ``tp_bytes / d``
    (each replica handles ``1/d`` of the microbatch) among ``t`` devices of one
    node at ``B`` bytes/s per device; 0 when ``t = 1``.
    """
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        term = 2.0 * (t - 1) / t * (tp_bytes / d) / node_bandwidth
    if np.ndim(term):
        return np.where(np.asarray(t) == 1, 0.0, term)
    return 0.0 if t == 1 else term


def compute_time(flop, rate, d=1, t=1, tp_bytes=0.0, node_bandwidth=np.inf):
    """``C``: seconds per microbatch, forward and backward, tensor-parallel all-reduces included.

    ``flop / (d t rate) + tp_allreduce_time(tp_bytes, d, t, node_bandwidth)``;
    with ``d = t = 1`` exactly ``flop / rate``. Valid but extreme figures
    (``1e308`` FLOP at ``5e-324`` FLOP/s) give ``inf`` seconds, never a
    warning: such a stage is simply never the best.
    """
    with np.errstate(over="ignore"):
        return flop / (d * t * rate) + tp_allreduce_time(tp_bytes, d, t, node_bandwidth)


def phase_time(flop, rate, d=1, t=1, tp_bytes=0.0, node_bandwidth=np.inf):
    """``f_s`` (of the forward FLOP) or ``b_s`` (of the backward FLOP): one phase of a stage.

    ``flop / (d t rate) + (t - 1) / t * (tp_bytes / d) / B``: the phase's compute and its
    half of the tensor-parallel all-reduces (:func:`tp_allreduce_time` halved, exactly).
    The stage's ``C_s`` stays :func:`compute_time` of the summed FLOP (version 2's, bit
    for bit); ``f_s + b_s`` equals it up to rounding.
    """
    with np.errstate(over="ignore"):
        return flop / (d * t * rate) + tp_allreduce_time(tp_bytes, d, t, node_bandwidth) / 2


def sync_time(params, d, t, gradient_bytes_per_param, bandwidth, latency):
    """``R``: the stage's gradient all-reduce, once per iteration.

    A ring all-reduce of the ``gamma * P / t`` gradient bytes of each
    tensor-parallel rank among its ``d`` replicas over the DC's internal link:
    ``2 (d - 1) / d * gamma * P / t / bandwidth + 2 (d - 1) * latency``; 0 when ``d = 1``.
    """
    with np.errstate(over="ignore", invalid="ignore"):
        term = (2.0 * (d - 1) / d * gradient_bytes_per_param * params / t / bandwidth
                + 2.0 * (d - 1) * latency)
    if np.ndim(term):
        return np.where(np.asarray(d) == 1, 0.0, term)
    return 0.0 if d == 1 else term


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


def _state_bytes(params, bytes_per_param, d, t, sharded):
    """Parameter state per device: ``((beta - zeta) + zeta / d) * P / t``."""
    with np.errstate(over="ignore"):
        return ((bytes_per_param - sharded) + sharded / d) * params / t


def memory_need(params, activation_bytes, n_in_flight, bytes_per_param, d=1, t=1, sharded=0.0):
    """Bytes a stage needs per device: parameter state plus ``n`` stashed activations.

    ``((beta - zeta) + zeta / d) * P / t + n * A / (d t)``, with ``zeta`` the
    bytes per parameter ZeRO-1 shards (``sharded``, 0 without ZeRO). With
    ``d = t = 1`` and no ZeRO, exactly ``beta * P + n * A``.
    """
    with np.errstate(over="ignore", invalid="ignore"):  # an overflow is +inf: it fits nowhere
        return (_state_bytes(params, bytes_per_param, d, t, sharded)
                + n_in_flight * activation_bytes / (d * t))


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


def max_in_flight(params, activation_bytes, bytes_per_param, capacity, microbatches,
                  d=1, t=1, sharded=0.0):
    """The largest ``n <= M`` with ``memory_fits(memory_need(..., n, ...), capacity)``.

    The inverse of the memory rule, elementwise: ``-1`` where even the parameter
    state does not fit, ``M`` where activations are free. The estimate from the
    division is corrected by one either way against :func:`memory_need` itself, so
    the two never disagree by rounding. Returns int64 (a scalar for scalar arguments).
    """
    params, act = np.asarray(params, dtype=float), np.asarray(activation_bytes, dtype=float)
    cap = memory_capacity(np.asarray(capacity, dtype=float))
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        state = _state_bytes(params, bytes_per_param, d, t, sharded)
        room = cap - state
        per = act / (d * t)
        n = np.where(per > 0, np.floor(room / np.where(per > 0, per, 1.0)), np.inf)
        n = np.minimum(n, microbatches)
        finite = np.isfinite(n) & (per > 0)
        lo = np.where(finite, n, 0.0)
        # the rounding of room / per can be off by one against the rule itself
        too_many = finite & (lo > 0) & ~(
            memory_need(params, act, lo, bytes_per_param, d, t, sharded) <= cap)
        lo = np.where(too_many, lo - 1, lo)
        one_more = finite & (lo + 1 <= microbatches) & (
            memory_need(params, act, lo + 1, bytes_per_param, d, t, sharded) <= cap)
        lo = np.where(one_more, lo + 1, lo)
        n = np.where(finite, lo, n)
        n = np.where((state <= cap) & (n >= 0), n, -1)
    out = np.where(np.isfinite(n), n, microbatches).astype(np.int64)
    return int(out) if out.ndim == 0 else out


# --------------------------------------------------------------------------- links
def path(instance: Instance, k1: int, k2: int) -> tuple[float, float]:
    """Bandwidth (the minimum) and latency (the sum) between DCs ``k1 <= k2``.

    Within one datacenter (``k1 == k2``) the path is that datacenter's own link.
    """
    if k1 == k2:
        link = instance.datacenters[k1].link
        return link.bandwidth_bytes_per_s, link.latency_s
    return chain_path(instance.links, k1, k2)


def chain_path(links, k1: int, k2: int) -> tuple[float, float]:
    """Bandwidth and latency of the chain path between DCs ``k1 < k2``, from the chain
    links alone (``links[k]`` joins DC k and DC k + 1; public, unlike a DC's own link)."""
    span = links[k1:k2]
    return min(lk.bandwidth_bytes_per_s for lk in span), sum(lk.latency_s for lk in span)


def occupancy(boundary_bytes, bandwidth):
    """``U = X / bandwidth``: a boundary's link time per microbatch and direction
    (elementwise; two Python floats take the scalar path the searches ask millions of
    times, which overflows to ``inf`` as numpy does)."""
    if type(boundary_bytes) is float and type(bandwidth) is float:
        return boundary_bytes / bandwidth
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
    if type(bottleneck) is float:  # a Python float overflows to inf silently (the DP's hot path)
        return (microbatches - 1) * bottleneck
    with np.errstate(over="ignore"):
        return (microbatches - 1) * bottleneck


def assembled_time(fill_drain: float, bottleneck: float, steady: int, sync: float) -> float:
    """:func:`iteration_time` of scalars with ``steady = M - 1`` given: the same sum in
    the same order, in plain arithmetic so that the DP's compiled kernel
    (:mod:`chainpipe.solvers.label_kernel`) compiles this very function.
    """
    if steady == 0:  # one microbatch: no steady state, even for an infinite bottleneck
        return fill_drain + 0.0 + sync
    return fill_drain + steady * bottleneck + sync


def iteration_time(fill_drain, bottleneck, microbatches: int, sync=0.0):
    """``T = fill_drain + (M - 1) * bottleneck + sync``.

    ``fill_drain`` is ``sum_s C_s + sum_s Q_s``, ``bottleneck`` is
    ``max(max_s C_s, max_s U_s)`` and ``sync`` is ``max_s R_s`` (0 when every
    ``d = 1``); :func:`chainpipe.plan.evaluate` and every solver's search assemble
    ``T`` (or an optimistic bound on it) here.
    """
    return fill_drain + steady_state(microbatches, bottleneck) + sync


# --------------------------------------------------------------------------- periods (v3)
def classic_period(compute_times, occupancies) -> float:
    """``max(max_s C_s, max_s U_s)``: the period of versions 1 and 2, any schedule."""
    return max(list(compute_times) + list(occupancies))


def gpipe_period(forward_times, backward_times, occupancies) -> float:
    """GPipe's period: ``max(max f, max U) + max(max b, max U)`` (``max U = 0`` for one stage).

    All forwards run, then all backwards: two flow shops one after the other, each paced
    by its own slowest resource.
    """
    u = max(occupancies, default=0.0)
    return max(max(forward_times), u) + max(max(backward_times), u)


def worst_loop(compute_times, traversals, microbatches: int) -> tuple[float, int, int]:
    """The slowest 1F1B loop: ``max W(s, t) / (t - s + 1)`` over ``s < t`` with ``n_s < M``.

    Under 1F1B stage ``s`` (0-based, of ``S``) stashes ``n_s = min(M, S - s)``
    microbatches, so its forward of microbatch ``i + n_s`` waits for the backward of
    ``i``: a loop over stages ``s..t`` taking ``W(s, t) = sum_{j=s..t} C_j +
    sum_{j=s..t-1} Q_j`` that lets ``n_s - n_t + 1 = t - s + 1`` microbatches through.
    A stage that may hold all ``M`` microbatches never waits.

    Returns
    -------
    tuple of (float, int, int)
        The largest ``W(s, t) / (t - s + 1)`` and its ``(s, t)``, first found on ties;
        ``(0.0, -1, -1)`` when there is no loop (one stage, or every ``n_s = M``).
    """
    C, Q = list(compute_times), list(traversals)
    S = len(C)
    best = (0.0, -1, -1)
    for s in range(S):
        if in_flight("1f1b", microbatches, S - s) >= microbatches:
            continue
        w = C[s]
        for t in range(s + 1, S):
            w += Q[t - 1] + C[t]
            if w / (t - s + 1) > best[0]:
                best = (w / (t - s + 1), s, t)
    return best


def one_f_one_b_period(compute_times, occupancies, traversals, microbatches: int) -> float:
    """1F1B's period: ``max(max C, max U, worst_loop(C, Q, M))``."""
    return max(classic_period(compute_times, occupancies),
               worst_loop(compute_times, traversals, microbatches)[0])


def period(objective: str, schedule: str, compute_times, occupancies, traversals,
           forward_times, backward_times, microbatches: int) -> float:
    """``lambda_p``, a pipeline's steady-state period, by objective and schedule.

    Parameters
    ----------
    objective : {"classic", "period"}
        ``classic``: :func:`classic_period` whatever the schedule; ``period``:
        :func:`gpipe_period` or :func:`one_f_one_b_period`.
    schedule : {"1f1b", "gpipe"}
    compute_times, occupancies, traversals : sequence of float
        ``C_s`` per stage, ``U_s`` and ``Q_s`` per boundary.
    forward_times, backward_times : sequence of float
        ``f_s`` and ``b_s`` per stage (used by GPipe's period only).
    microbatches : int
        ``M_p``, the pipeline's microbatches (1F1B's stash limits depend on it).

    Returns
    -------
    float
        Seconds per microbatch.
    """
    if objective == "classic":
        return classic_period(compute_times, occupancies)
    if schedule == "gpipe":
        return gpipe_period(forward_times, backward_times, occupancies)
    return one_f_one_b_period(compute_times, occupancies, traversals, microbatches)


def cross_sync_time(total_params, gradient_bytes_per_param, bandwidth, latency) -> float:
    """``R_X``: averaging every gradient across pipelines, along the chain and back.

    ``gamma * sum_l params_l / B_X + 2 lat_X``, with ``B_X`` the smallest bandwidth and
    ``lat_X`` the summed latency of the chain links from the first pipeline's first DC to
    the last pipeline's last (the bandwidth-optimal all-reduce on a line, pipelined).
    """
    with np.errstate(over="ignore"):
        return gradient_bytes_per_param * total_params / bandwidth + 2.0 * latency


def plan_time(pipeline_times, sync, cross_sync=0.0, sync_period: int = 1) -> float:
    """``T = max_p T_p + max_{p,s} R_s + R_X / H``.

    ``pipeline_times`` are the ``T_p = fill_p + (M_p - 1) * lambda_p``; with one
    pipeline (``R_X = 0``) exactly :func:`iteration_time`.
    """
    return max(pipeline_times) + sync + cross_sync / sync_period


# --------------------------------------------------------------------------- options
@dataclass(frozen=True)
class StageOption:
    """A stage option: layers ``[start, end)`` on ``d * t`` devices of one group.

    Attributes
    ----------
    start, end : int
        The layer range, 0-based, half-open.
    dc : int
        The datacenter's index in chain order.
    group : int
        The device group's index within its datacenter.
    d : int
        Data-parallel width (replicas), default 1.
    t : int
        Tensor-parallel degree (devices per replica, inside one node), default 1.
    """

    start: int
    end: int
    dc: int
    group: int
    d: int = 1
    t: int = 1

    @property
    def devices(self) -> int:
        """``d * t``: the devices the stage occupies."""
        return self.d * self.t


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
    fwd_flop, bwd_flop : numpy.ndarray
        ``[L + 1]`` prefix sums of the forward and of the backward FLOP.
    output_bytes : numpy.ndarray
        ``[L + 1]``: ``output_bytes[b]`` crosses the boundary at layer ``b`` (after
        layer ``b - 1``); entry 0 is unused and 0.
    """

    def __init__(self, instance: Instance):
        layers = instance.layers
        self.instance = instance
        self.flop = np.concatenate(([0.0], np.cumsum([ly.flop for ly in layers])))
        self.fwd_flop = np.concatenate(([0.0], np.cumsum([ly.fwd_flop for ly in layers])))
        self.bwd_flop = np.concatenate(([0.0], np.cumsum([ly.bwd_flop for ly in layers])))
        self.params = np.concatenate(([0.0], np.cumsum([float(ly.params) for ly in layers])))
        self.activation = np.concatenate(([0.0], np.cumsum([ly.activation_bytes for ly in layers])))
        self.output_bytes = np.array([0.0] + [ly.output_bytes for ly in layers])
        self.tp_bytes = np.concatenate(([0.0], np.cumsum([ly.tp_allreduce_bytes for ly in layers])))

    def range_sums(self, prefix: np.ndarray) -> np.ndarray:
        """``[i, j]``: the sum over layers ``[i, j)`` of a prefix array; 0 where ``j <= i``."""
        return np.triu(prefix[None, :] - prefix[:, None], 1)

    # one stage option at a time (the evaluator's view)
    def _span(self, prefix: np.ndarray, option: StageOption) -> float:
        return prefix[option.end] - prefix[option.start]

    def option_compute_time(self, option: StageOption) -> float:
        """``C`` of ``option`` on its group."""
        group = self.instance.datacenters[option.dc].devices[option.group]
        return float(compute_time(self._span(self.flop, option), group.flop_per_s, option.d,
                                  option.t, self._span(self.tp_bytes, option),
                                  group.node_bandwidth))

    def option_phase_times(self, option: StageOption) -> tuple[float, float]:
        """``(f_s, b_s)`` of ``option`` on its group (:func:`phase_time`)."""
        group = self.instance.datacenters[option.dc].devices[option.group]
        tp = self._span(self.tp_bytes, option)
        return tuple(float(phase_time(self._span(prefix, option), group.flop_per_s, option.d,
                                      option.t, tp, group.node_bandwidth))
                     for prefix in (self.fwd_flop, self.bwd_flop))

    def option_memory_need(self, option: StageOption, n_in_flight: int) -> float:
        """Bytes per device of ``option`` with ``n_in_flight`` microbatches stashed."""
        training = self.instance.training
        return float(memory_need(self._span(self.params, option),
                                 self._span(self.activation, option), n_in_flight,
                                 training.bytes_per_param, option.d, option.t,
                                 training.sharded_bytes_per_param))

    def option_sync_time(self, option: StageOption) -> float:
        """``R`` of ``option``: its gradient all-reduce over its DC's internal link."""
        link = self.instance.datacenters[option.dc].link
        return float(sync_time(self._span(self.params, option), option.d, option.t,
                               self.instance.training.gradient_bytes_per_param,
                               link.bandwidth_bytes_per_s, link.latency_s))
