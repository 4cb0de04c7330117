"""The chain floors by position in the version-3 search of one pipeline of all ``M``
microbatches (``dp_period.PipelineSearch._chain_rows``, read per label at
``period_kernel.label_position``) against optimal plans of the brute-force enumerator."""

from __future__ import annotations

import dataclasses
import math

from chainpipe.deadline import Deadline
from chainpipe.solvers import period_kernel
from chainpipe.solvers.dp_period import PipelineSearch
from chainpipe.solvers.dp_pipelines import shared_holds
from chainpipe.tables import CostTables
from helpers import _v3_configurations, brute_force_v3, random_hybrid_instance, stage_figures


def _one_pipeline_period(inst):
    """``inst`` under 1F1B's ``period`` with one pipeline only."""
    training = inst.training
    par = dataclasses.replace(training.parallelism, pipelines=(1,))
    return dataclasses.replace(inst, training=dataclasses.replace(
        training, schedule="1f1b", objective="period", parallelism=par))


def test_label_chain_floors_stay_below_the_brute_force_optimum():
    """For each stage ``j`` of an optimal plan, the floor the kernel reads for the label of
    stages ``j..`` (its state: DC of stage ``j``, the devices stages ``j..`` take there;
    its position: :func:`label_position` of the ``S - j - 1`` stages after ``j``) is at most
    the largest ``C`` of the stages before ``j``: the prefix runs under that bottleneck
    with its stages at those positions. Reading two positions further breaks this on
    seed 238."""
    checked = 0
    for seed in range(300):
        inst = _one_pipeline_period(random_hybrid_instance(seed, max_layers=5))
        tables = CostTables(inst)
        if tables.M < 2 or tables.infeasibility_reason():
            continue
        if len(_v3_configurations(inst)) * tables.M > 40_000:
            continue  # (the enumeration's cost)
        holds = shared_holds(tables, Deadline(None))
        if holds is None or holds.chain is None:
            continue
        T, spec = brute_force_v3(inst)[1]
        if spec is None:
            continue
        stages = spec[0][1]
        search = PipelineSearch(tables, tables.M, None, math.inf, Deadline(None), "sum", holds)
        search._bounds()
        figures = stage_figures(tables, stages)
        nq = holds.chain.held.shape[1]
        for j in range(1, len(stages)):
            k0, a = stages[j][2], stages[j][0]
            usage = tuple(sum(w for (h, w, _), st in zip(figures[j:], stages[j:])
                              if h == g and st[2] == k0) for g in search.groups_of[k0])
            p = len(stages) - j - 1
            floor = search._chain_rows(k0, usage)[period_kernel.label_position(p, nq), a]
            assert floor <= max(c for _, _, c in figures[:j]) * (1 + 1e-12), (seed, j)
        checked += 1
    assert checked >= 40, checked
