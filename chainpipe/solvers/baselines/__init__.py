"""Baselines: the strategies practitioners and recent systems use, in chainpipe's cost model.

Each is a solver with the registry signature ``(instance, *, deadline, seed,
threads, log) -> Outcome`` and stops at the deadline with the best plan it has.
None of them proves anything about the optimum, so a plan comes back
``feasible`` with no lower bound; when a strategy finds no plan that fits memory
it says ``no_solution`` and why, and ``infeasible`` only when
:meth:`StageCosts.infeasibility_reason <.stage_costs.StageCosts.infeasibility_reason>`
(or, for the two built on the exact DP, the DP itself on an instance with the same
devices and memory) proves that no plan exists at all. All are deterministic:
``seed`` is accepted for the common signature and ignored. Costs come from
:mod:`chainpipe.cost` through :class:`~.stage_costs.StageCosts`; the reported time
from :func:`chainpipe.plan.evaluate`.

One device per stage (``d = t = 1``; on an instance whose ``parallelism`` lists
leave out 1 they answer ``no_solution`` in one line):

``uniform`` (:mod:`.equal_layers`)
    Megatron-LM's pipeline alone: equal layer counts per stage (the last ``L mod S``
    stages take one more layer, which is the memory-friendly side under 1F1B),
    stages on devices taken datacenter by datacenter in chain order, fastest first.
    The pipeline degree ``S`` is swept over ``1 .. min(L, devices)`` and the best by
    the cost model kept: a practitioner tunes the pipeline degree, and taking the
    smallest ``S`` that fits memory would leave most devices idle, an unfair straw man.
``greedy-fill`` (:mod:`.equal_layers`)
    Atlas: fill pipeline stages DC by DC: all devices of the first datacenter,
    then all of the next, until the model fits memory with uniform layers
    (``S = min(L, devices in the prefix)``). No tuning of ``S``.
``proportional`` (:mod:`.balanced`)
    Metis / FlashFlex on single devices: take the ``S`` fastest devices (ties broken
    by memory, then chain position), keep them in chain order, cut the layers so that
    each stage's FLOP share matches its device's share of the total rate, then repair
    memory by moving boundary layers from over-full stages to neighbours that still
    fit. ``S`` is swept and the best kept.
``uniform-chain`` (:mod:`.chain_search`)
    Sailor on single devices: uniform layer splits; search over the stage count
    ``S``, the contiguous range of datacenters used and how many stages each of them
    runs (every datacenter of the range at least one, fastest devices first), with
    branch and bound on the cost model. Exhaustive over that family unless the time
    limit stops it (then the best found, and ``stats['complete']`` is false).

Hybrid parallelism (contract version 2: ``d`` data-parallel replicas of ``t``
tensor-parallel devices per stage, from the instance's lists):

``megatron`` (:mod:`.equal_layers`)
    Megatron-LM 3D parallelism as practitioners configure it: tensor parallelism over
    a whole node (``t`` = the largest allowed degree a node holds, typically 8),
    equal layer counts per stage as in ``uniform``, and the data-parallel width ``d``
    filling the devices (the largest allowed ``d`` with ``d t`` devices for every
    stage), stages on groups in chain order, fastest first inside a datacenter. One
    ``d`` and one ``t`` for all stages (Megatron's constraint): only groups whose node
    degree is that ``t`` run stages, and each distinct node degree is tried. The
    pipeline degree ``S`` is swept and the best by the cost model kept.
``metis`` (:mod:`.balanced`)
    Metis (heterogeneity-aware planning over GPU types): a shape ``d x t`` per device
    type (or the type left unused), each group filled with as many stages of its
    type's shape as it holds (the slowest dropped if there are more stages than
    layers), stages in chain order, fastest group first inside a datacenter; layers
    cut in proportion to each stage's effective throughput (``d t r`` less the
    tensor-parallel all-reduces, from :func:`chainpipe.cost.compute_time`), memory
    repaired by moving boundary layers as in ``proportional``; the best plan by the
    cost model kept. Every combination of per-type shapes is tried when there are at
    most :data:`~.balanced.EXHAUSTIVE_CONFIGURATIONS`; beyond that, a coordinate
    search from every "all types on one shape" start, changing one type's shape at a
    time while it helps (``stats['search']`` says which). Bounded by the deadline.
``sailor`` (:mod:`.chain_search`)
    Sailor: uniform layer split, one data-parallel width and one tensor-parallel
    degree for all stages, datacenters (regions) in chain order: Sailor orders regions
    by bottleneck bandwidth, in a chain the order is fixed. Search over ``(d, t)``,
    ``S``, the contiguous range of datacenters and the stages each runs, by the
    branch and bound of ``uniform-chain`` (which is ``sailor`` with ``d = t = 1``):
    its bound gives the layers left the fastest rate still reachable and each boundary
    left its cheapest path, and counts the synchronisation; a datacenter entered at the
    same block from the same one with a (fill, bottleneck, synchronisation) label no
    better than one met before is not searched again. Shapes are searched in the order
    of their best chain-order fill, so the first incumbent prunes the rest.

Built on the exact DP (:mod:`.dp_based`; they plan with whatever the DP plans):

``comm-unaware``
    The exact DP on a copy of the instance whose links (inside and between
    datacenters) cost nothing, then the plan evaluated honestly with the links:
    what an optimal planner that ignores the network produces. With hybrid
    parallelism the gradient synchronisation, which crosses a datacenter's network,
    is ignored too; the tensor-parallel all-reduces inside a node are not.
``single-dc``
    The DP optimum of each datacenter alone (no inter-DC links); the best of them.
    What a user without cross-DC planning would run.

Contract version 3 (:mod:`.replicate`; built on the exact DP too). Every baseline ranks
its candidates and has its plan costed by the one cost model under the instance's
objective (``period`` or ``classic``: :meth:`.stage_costs.StageCosts.plan_time`,
:func:`chainpipe.plan.evaluate`). All plan one pipeline, but ``replicate-per-dc`` and
``comm-unaware`` (which plans what the DP plans, several pipelines included when the
instance allows them); where 1 is not an allowed pipeline count a one-pipeline plan is
refused (status ``error``). An ``infeasible`` found for one pipeline is ``no_solution``
when other counts are allowed (their ``M_p < M`` stash less):

``replicate-per-dc``
    Hierarchical data parallelism as practised across DCs today: one pipeline per DC
    (``P`` = the number of DCs if it is an allowed pipeline count, else the largest
    allowed count below it, neighbouring DCs grouped in ranges of equal size), each
    planned inside its DCs by the exact DP under ``classic`` (with ``M - P + 1``
    microbatches, the most it can be given, so that memory holds whatever the split),
    the ``M`` microbatches shared in proportion to each pipeline's speed ``1 /
    lambda_p`` (largest remainders, every ``M_p >= 1``), gradients averaged across DCs.
``classic-optimum``
    The plan the exact DP proves optimal under the ``classic`` objective with one
    pipeline, costed under the instance's objective: what planning with the usual
    ``sum + (M - 1) max`` formula costs under ``period``. ``stats`` keeps its classic
    ``T``.

Neither claims ``infeasible`` (another pipeline count or split may fit).
"""

from __future__ import annotations

from .balanced import metis, proportional
from .chain_search import sailor, uniform_chain
from .common import uniform_bounds
from .dp_based import FREE_BANDWIDTH, comm_unaware, single_dc
from .equal_layers import greedy_fill, megatron, uniform
from .replicate import classic_optimum, replicate_per_dc

__all__ = [
    "FREE_BANDWIDTH",
    "classic_optimum",
    "comm_unaware",
    "greedy_fill",
    "megatron",
    "metis",
    "proportional",
    "replicate_per_dc",
    "sailor",
    "single_dc",
    "uniform",
    "uniform_bounds",
    "uniform_chain",
]
