"""Baselines of contract version 3: ``replicate-per-dc`` and ``classic-optimum`` (see
:mod:`chainpipe.solvers.baselines`).

Both plan with the exact DP of versions 1 and 2 (:func:`chainpipe.solvers.dp.run` on a
copy of the instance under the ``classic`` objective with one pipeline) and leave the
plan's ``T`` to :func:`chainpipe.plan.evaluate` under the instance's own objective.
Neither proves anything about the optimum of the instance: a plan comes back
``feasible``, and no plan is ``no_solution`` with the reason (never ``infeasible``:
another pipeline count or another split may fit where theirs does not).
"""

from __future__ import annotations

import dataclasses

from ...deadline import Deadline
from ...instance import Instance
from ...plan import Pipeline, Plan, evaluate
from ...result import Outcome
from .. import dp


def classic_copy(instance: Instance, microbatches: int | None = None) -> Instance:
    """``instance`` under the ``classic`` objective with one pipeline (and ``microbatches``
    if given): the problem of contract version 2, which ``dp`` solves exactly."""
    training = instance.training
    return dataclasses.replace(instance, training=dataclasses.replace(
        training, objective="classic",
        microbatches=training.microbatches if microbatches is None else microbatches,
        parallelism=dataclasses.replace(training.parallelism, pipelines=(1,))))


def _one_pipeline_refusal(instance: Instance, name: str) -> Outcome | None:
    """``no_solution`` when a plan of one pipeline is not allowed, else ``None``."""
    allowed = list(instance.parallelism.pipelines)
    if 1 in allowed:
        return None
    return Outcome("no_solution", stats={"strategy": name}, message=(
        f"{name} plans one pipeline, and 1 is not an allowed pipeline count {allowed} "
        f"(training.parallelism.pipelines)"))


def classic_optimum(instance: Instance, *, deadline=None, seed=0, threads=1,
                    log=None) -> Outcome:
    """The plan ``dp`` proves optimal under ``classic``, for evaluation under the
    instance's objective: what the usual ``sum + (M - 1) max`` formula costs.

    Parameters
    ----------
    instance : Instance
        Any instance; its plan is searched on :func:`classic_copy`.
    deadline, seed, threads, log
        The registry signature (``seed``, ``threads`` and ``log`` are not used).

    Returns
    -------
    Outcome
        ``feasible`` with the classic optimum (one pipeline), whose classic ``T`` and
        the DP's status on the copy are in ``stats``; else ``no_solution`` with why.
    """
    if refused := _one_pipeline_refusal(instance, "classic-optimum"):
        return refused
    copy = classic_copy(instance)
    res = dp.run(copy, deadline=Deadline.of(deadline))
    stats = {"strategy": "classic-optimum", "classic_status": res.status.value}
    if res.plan is None:
        return Outcome("no_solution", stats=stats, message=(
            f"dp under the classic objective returned {res.status.value}"
            + (f": {res.message}" if res.message else "")))
    stats["classic_time_s"] = evaluate(copy, res.plan).iteration_time_s
    return Outcome("feasible", res.plan, stats=stats)


def replica_count(instance: Instance) -> int | None:
    """``P`` of ``replicate-per-dc``: the number of DCs if it is an allowed pipeline count,
    else the largest allowed count below it (``None`` if every allowed count exceeds it)."""
    K = len(instance.datacenters)
    fits = [p for p in instance.parallelism.pipelines if p <= K]
    return K if K in fits else max(fits, default=None)


def dc_groups(K: int, P: int) -> list[range]:
    """``K`` DCs in ``P`` ranges of neighbours in chain order, sizes differing by at most
    one (the first ``K mod P`` one larger)."""
    q, r = divmod(K, P)
    starts = [p * q + min(p, r) for p in range(P + 1)]
    return [range(starts[p], starts[p + 1]) for p in range(P)]


def sub_instance(instance: Instance, dcs: range, microbatches: int) -> Instance:
    """The DCs ``dcs`` of ``instance`` alone, with the links between them, under
    :func:`classic_copy` with ``microbatches``; DC names and device types carry over, so
    its plans' device names are the instance's."""
    copy = classic_copy(instance, microbatches)
    names = "+".join(instance.datacenters[k].name for k in dcs)
    return dataclasses.replace(copy, name=f"{instance.name}[{names}]",
                               datacenters=instance.datacenters[dcs.start:dcs.stop],
                               links=instance.links[dcs.start:dcs.stop - 1])


def largest_remainder(total: int, weights: list[float]) -> list[int]:
    """``total`` split in proportion to ``weights`` (positive), each part at least 1.

    Every part gets 1; the other ``total - P`` go by the largest-remainder (Hamilton)
    method, the floors of their quotas first, then one more to the largest remainders
    (ties to the earlier part). ``total >= len(weights)``.
    """
    rest, whole = total - len(weights), sum(weights)
    quotas = [rest * w / whole for w in weights]
    parts = [int(q) for q in quotas]
    order = sorted(range(len(weights)), key=lambda p: (-(quotas[p] - parts[p]), p))
    for p in order[:rest - sum(parts)]:
        parts[p] += 1
    return [1 + x for x in parts]


def _plan_groups(instance: Instance, groups: list[range], cap: int, deadline: Deadline,
                 threads: int = 1):
    """Each group's classic DP optimum with ``cap`` microbatches, and its speed: the
    inverse of its steady-state period under the instance's objective. Returns
    ``(plans, speeds, problems)``. With ``threads > 1`` the groups are planned in that
    many processes (:func:`chainpipe.solvers.dp_parallel.spread`)."""
    from ..dp_parallel import spread

    plans, speeds, problems = [], [], []
    for plan, period, problem in spread(lambda dcs: _plan_group(instance, dcs, cap, deadline),
                                        list(groups), deadline, threads):
        if problem is not None:
            problems.append(problem)
            continue
        plans.append(plan)
        speeds.append(1.0 / period if period > 0 else float("inf"))
    return plans, speeds, problems


def _plan_group(instance: Instance, dcs: range, cap: int, deadline: Deadline):
    """One group's classic DP optimum and its period under the instance's objective:
    ``(plan, period, None)``, or ``(None, None, why)`` when it holds no plan."""
    sub = sub_instance(instance, dcs, cap)
    res = dp.run(sub, deadline=deadline)
    if res.plan is None:
        return None, None, (f"{sub.name}: dp returned {res.status.value}"
                            + (f" ({res.message})" if res.message else ""))
    judged = dataclasses.replace(sub, training=dataclasses.replace(
        sub.training, objective=instance.training.objective))
    return res.plan, evaluate(judged, res.plan).pipelines[0].period_s, None


def _shares(total: int, speeds: list[float]) -> list[int]:
    """Microbatches per pipeline in proportion to ``speeds`` (infinitely fast pipelines,
    of no work at all, share equally)."""
    if any(v == float("inf") for v in speeds):
        speeds = [1.0 if v == float("inf") else 0.0 for v in speeds]
    return largest_remainder(total, speeds if sum(speeds) > 0 else [1.0] * len(speeds))


def replicate_per_dc(instance: Instance, *, deadline=None, seed=0, threads=1,
                     log=None) -> Outcome:
    """One pipeline per DC (hierarchical data parallelism), microbatches by speed.

    ``P`` = :func:`replica_count`; the DCs are cut into ``P`` ranges of neighbours
    (:func:`dc_groups`); each range gets the ``dp`` optimum of its DCs alone under
    ``classic`` with ``M - P + 1`` microbatches (the most a pipeline can be given, so
    its memory holds whatever the split); then the ``M`` microbatches are shared in
    proportion to each pipeline's speed, ``1 / lambda_p`` under the instance's
    objective, by :func:`largest_remainder` (every ``M_p >= 1``).

    Returns
    -------
    Outcome
        ``feasible`` with a plan of ``P`` pipelines (the first form when ``P = 1``),
        ``stats`` naming the DC ranges, ``M_p`` and periods; ``no_solution`` with why
        when no allowed count fits the DCs, ``M < P``, or a range holds no plan.
    """
    deadline = Deadline.of(deadline)
    M, K = instance.microbatches, len(instance.datacenters)
    P = replica_count(instance)
    stats: dict = {"strategy": "replicate-per-dc", "pipelines": P}
    if P is None or P > M:
        why = (f"every allowed pipeline count {list(instance.parallelism.pipelines)} exceeds "
               f"the {K} DC(s)") if P is None else f"{P} pipelines need M >= {P}, M is {M}"
        return Outcome("no_solution", stats=stats, message=f"replicate-per-dc: {why}")
    groups = dc_groups(K, P)
    stats["datacenters"] = [[instance.datacenters[k].name for k in g] for g in groups]
    plans, speeds, problems = _plan_groups(instance, groups, M - P + 1, deadline, threads)
    if problems:
        return Outcome("no_solution", stats=stats, message="replicate-per-dc: a DC range "
                       "holds no plan: " + "; ".join(problems))
    shares = _shares(M, speeds)
    stats.update(microbatches=shares, periods_s=[1.0 / v if v else float("inf")
                                                 for v in speeds])
    if P == 1:
        return Outcome("feasible", plans[0], stats=stats)
    return Outcome("feasible", Plan(pipelines=[Pipeline(p.stages, m)
                                               for p, m in zip(plans, shares)]), stats=stats)
