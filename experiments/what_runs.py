"""What runs across a metro chain (issue 30, item 7): the helpers of the two experiments.

``classic_cost.py`` measures what planning with the classic ``sum + (M - 1) max``
formula costs once the schedule runs (simulated makespans); ``pipeline_or_replicate.py``
asks when one pipeline through the chain, one pipeline per DC (replication, gradients
averaged over the MAN) or a mix is fastest. Both build their contract-version-3
variants here, from generated or committed instances, with :func:`dataclasses.replace`
(no generator knob beyond those of version 2), and solve with the exact DP under a time
limit whose status is kept. Every ``T`` is :func:`chainpipe.plan.evaluate`'s, every
makespan :func:`chainpipe.schedule.simulate_pipeline`'s.

    python experiments/classic_cost.py [--quick]
    python experiments/pipeline_or_replicate.py [--quick]
"""

from __future__ import annotations

import dataclasses
import itertools
import time

import common  # noqa: F401  (puts the checkout on sys.path)
from chainpipe.instance import Instance, Link
from chainpipe.plan import Evaluation, Pipeline, Plan, evaluate
from chainpipe.schedule import simulate_pipeline
from chainpipe.solvers import dp
from chainpipe.solvers.baselines.replicate import largest_remainder, sub_instance

#: bytes per second of one Gbit/s
GBIT = 1e9 / 8


def v3_copy(instance: Instance, objective: str = "period", pipelines: tuple[int, ...] = (1,),
            sync_period: int = 1, microbatches: int | None = None) -> Instance:
    """``instance`` with the version-3 knobs set (devices, links and layers unchanged).

    Parameters
    ----------
    instance : Instance
        Any instance (a version-2 one is read as objective ``classic``, one pipeline).
    objective : {"period", "classic"}
        ``training.objective``.
    pipelines : tuple of int
        ``parallelism.pipelines``, the pipeline counts a plan may run.
    sync_period : int
        ``H``, iterations between two averagings across pipelines.
    microbatches : int, optional
        ``M``; the instance's when omitted.

    Returns
    -------
    Instance
    """
    tr = instance.training
    par = dataclasses.replace(tr.parallelism, pipelines=tuple(pipelines))
    return dataclasses.replace(instance, training=dataclasses.replace(
        tr, objective=objective, parallelism=par, pipeline_sync_period=sync_period,
        microbatches=tr.microbatches if microbatches is None else microbatches))


def with_man(instance: Instance, gbit: float | None = None,
             latency_s: float | None = None) -> Instance:
    """``instance`` with every inter-DC link at ``gbit`` Gbit/s and/or ``latency_s`` one-way
    latency (``None``: that figure kept)."""
    links = tuple(Link(l.bandwidth_bytes_per_s if gbit is None else gbit * GBIT,
                       l.latency_s if latency_s is None else latency_s)
                  for l in instance.links)
    return dataclasses.replace(instance, links=links)


@dataclasses.dataclass
class Solved:
    """One solve: its status, plan, evaluation (``None`` without a plan) and seconds."""

    status: str
    plan: Plan | None
    ev: Evaluation | None
    seconds: float

    @property
    def T(self) -> float | None:
        """``T`` by :func:`chainpipe.plan.evaluate` (``None`` without a plan)."""
        return None if self.ev is None else self.ev.iteration_time_s


def solve(instance: Instance, limit: float) -> Solved:
    """The exact DP on ``instance`` within ``limit`` seconds; its plan re-evaluated."""
    start = time.perf_counter()
    res = dp.run(instance, deadline=limit)
    seconds = time.perf_counter() - start
    ev = None if res.plan is None else evaluate(instance, res.plan)
    return Solved(str(res.status), res.plan, ev, seconds)


def makespan(instance: Instance, plan: Plan) -> float:
    """The simulated makespan of one iteration of ``plan`` on ``instance``."""
    return simulate_pipeline(instance, plan, progress=False).makespan_s


def ranges(K: int, P: int):
    """Every way to cut ``K`` DCs into ``P`` contiguous non-empty ranges (all used)."""
    for cuts in itertools.combinations(range(1, K), P - 1):
        bounds = (0, *cuts, K)
        yield [range(bounds[i], bounds[i + 1]) for i in range(P)]


def split_plan(instance: Instance, groups, shares: str = "even") -> Plan | None:
    """``len(groups)`` pipelines, one per range of DCs, each the classic DP optimum of its
    DCs alone with its ``M_p``: split evenly (``"even"``) or in proportion to each
    pipeline's speed ``1 / lambda`` under ``instance``'s objective (``"speed"``).

    Returns ``None`` when a range holds no plan or ``M`` is below the pipeline count.
    """
    M, P = instance.microbatches, len(groups)
    if M < P:
        return None
    counts = largest_remainder(M, [1.0] * P)
    if shares == "speed":
        speeds = []
        for dcs, m in zip(groups, counts):
            plan = _range_plan(instance, dcs, m)
            if plan is None:
                return None
            ev = evaluate(_alone(instance, dcs, m), plan)
            speeds.append(1.0 / ev.pipelines[0].period_s)
        counts = largest_remainder(M, speeds)
    plans = [_range_plan(instance, dcs, m) for dcs, m in zip(groups, counts)]
    if any(p is None for p in plans):
        return None
    if P == 1:
        return plans[0]
    return Plan(pipelines=[Pipeline(p.stages, m) for p, m in zip(plans, counts)])


def _alone(instance: Instance, dcs: range, microbatches: int) -> Instance:
    """The DCs ``dcs`` alone with ``microbatches``, under ``instance``'s objective."""
    sub = sub_instance(instance, dcs, microbatches)
    return dataclasses.replace(sub, training=dataclasses.replace(
        sub.training, objective=instance.training.objective))


def _range_plan(instance: Instance, dcs: range, microbatches: int) -> Plan | None:
    """The classic DP optimum (one pipeline) of the DCs ``dcs`` alone."""
    return dp.run(sub_instance(instance, dcs, microbatches)).plan


def best_split(instance: Instance, P: int, shares: str = "even"
               ) -> tuple[Evaluation, Plan, list[range]] | None:
    """The best of :func:`split_plan` over every cut of the chain into ``P`` ranges, by
    ``T`` under ``instance`` (which must allow ``P`` pipelines)."""
    best = None
    for groups in ranges(len(instance.datacenters), P):
        plan = split_plan(instance, groups, shares)
        if plan is None:
            continue
        ev = evaluate(instance, plan)
        if ev.feasible and (best is None or ev.iteration_time_s < best[0].iteration_time_s):
            best = (ev, plan, groups)
    return best


def man_occupancy(ev: Evaluation) -> float:
    """The largest ``U`` of a boundary crossing DCs (0 when none does)."""
    return max((b.occupancy_s for b in ev.boundaries if len(b.path) > 1), default=0.0)


def man_boundaries(ev: Evaluation) -> int:
    """How many boundaries of the plan cross DCs."""
    return sum(1 for b in ev.boundaries if len(b.path) > 1)


def status_mark(status: str) -> str:
    """A short mark after a number: nothing when proven optimal, else the status."""
    return "" if status == "optimal" else f" ({status})"
