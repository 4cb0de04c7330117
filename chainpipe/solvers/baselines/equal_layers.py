"""Equal layer counts per stage, stages on devices in chain order: ``uniform``,
``greedy-fill`` and ``megatron`` (see :mod:`chainpipe.solvers.baselines`)."""

from __future__ import annotations

from ...instance import Instance
from ...result import Outcome
from .common import best_of, chain_fill, dc_slots, infeasible_or, one_device_only
from .stage_costs import StageCosts


def uniform(instance: Instance, *, deadline=None, seed=0, threads=1, log=None) -> Outcome:
    """Megatron-LM pipeline only: equal layers on one device per stage, DCs filled in chain
    order; pipeline degree swept."""
    c = StageCosts(instance)
    refused = one_device_only(c, "uniform")
    if refused is not None:
        return refused
    n_max = min(c.L, sum(len(dc) for dc in dc_slots(c)))
    return best_of(c, (chain_fill(c, S) for S in range(1, n_max + 1)),
                   f"uniform layers on the first S devices in chain order, S = 1..{n_max}",
                   {"strategy": "uniform"}, deadline)


def greedy_fill(instance: Instance, *, deadline=None, seed=0, threads=1, log=None) -> Outcome:
    """Atlas-style: whole datacenters in chain order until uniform stages fit memory."""
    c = StageCosts(instance)
    refused = one_device_only(c, "greedy-fill")
    if refused is not None:
        return refused
    devices = 0
    failure = None
    for k, dc in enumerate(instance.datacenters):
        devices += dc.device_count
        S = min(c.L, devices)
        stages = chain_fill(c, S)
        if c.plan_time(stages) < float("inf"):
            return Outcome("feasible", c.to_plan(stages),
                           stats={"strategy": "greedy-fill", "datacenters": k + 1, "stages": S})
        failure = c.memory_failure(stages)
        if S == c.L:
            break  # one layer per stage already: adding datacenters changes nothing
    return infeasible_or(
        c, f"uniform stages over whole datacenters in chain order never fit memory; "
           f"with {devices} devices, {failure}", {"strategy": "greedy-fill"})


def megatron(instance: Instance, *, deadline=None, seed=0, threads=1, log=None) -> Outcome:
    """Megatron-LM 3D parallelism: tensor parallelism over a whole node, equal layers, the
    widest data parallelism the devices allow; pipeline degree swept."""
    c = StageCosts(instance)
    G = c.tables.G
    degrees = sorted({c.node_degree(g) for g in range(G)} - {None}, reverse=True)

    def candidates():
        for t in degrees:
            # the groups whose whole node is this degree: one t for every stage
            groups = [g for g in range(G) if c.node_degree(g) == t]
            for S in range(1, c.L + 1):
                fitting = [d for d in c.instance.training.data_parallel_widths
                           if sum(c.capacity(g, d, t) for g in groups) >= S]
                if not fitting:
                    break  # more stages need more devices still
                yield chain_fill(c, S, max(fitting), t, groups)

    return best_of(c, candidates(),
                   "equal layers, tensor parallelism over whole nodes, the widest data "
                   "parallelism the devices allow, S = 1..L", {"strategy": "megatron"}, deadline)
